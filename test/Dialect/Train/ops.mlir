// RUN: mt-opt %s | mt-opt | FileCheck %s

// Every op parses, verifies, infers its type and prints back.
// CHECK: train.param @w {file = "w.bin", length = 64 : i64, offset = 0 : i64, source = #train<source external>, trainable} : tensor<4x4xf32>
// CHECK-LABEL: func @primitives
train.param @w {source = #train<source external>, file = "w.bin", offset = 0 : i64, length = 64 : i64, trainable} : tensor<4x4xf32>
func.func @primitives(%x: tensor<2x4xf32>, %y: tensor<4xf32>, %i: tensor<2x4xi64>, %b: tensor<2x4xi1>) -> tensor<2x4xf32> {
  // CHECK: train.param.load @w : tensor<4x4xf32>
  %w = train.param.load @w : tensor<4x4xf32>
  %c = train.constant dense<[2, 4]> : tensor<2xi64>
  %u0 = train.sqrt %x : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %u1 = train.reciprocal %u0 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %u2 = train.neg %u1 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %u3 = train.exp %u2 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %u4 = train.log %u3 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %u5 = train.tanh %u4 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %u6 = train.sigmoid %u5 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %u7 = train.erf %u6 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %u8 = train.cos %u7 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %u9 = train.sin %u8 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %g = train.gelu %u9 {tanh} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %id = train.identity %g : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %n = train.not %b : (tensor<2x4xi1>) -> tensor<2x4xi1>
  // CHECK: train.add %{{.*}}, %{{.*}} : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %a0 = train.add %id, %y : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %a1 = train.sub %a0, %y : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %a2 = train.mul %a1, %y : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %a3 = train.div %a2, %y : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %a4 = train.pow %a3, %y : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %a5 = train.max %a4, %y : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %a6 = train.min %a5, %y : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %l0 = train.and %b, %n : (tensor<2x4xi1>, tensor<2x4xi1>) -> tensor<2x4xi1>
  %l1 = train.or %l0, %n : (tensor<2x4xi1>, tensor<2x4xi1>) -> tensor<2x4xi1>
  // CHECK: train.equal {{.*}} -> tensor<2x4xi1>
  %e0 = train.equal %a6, %y : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xi1>
  %e1 = train.less %a6, %y : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xi1>
  %e2 = train.less_or_equal %a6, %y : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xi1>
  %e3 = train.greater %a6, %y : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xi1>
  %e4 = train.greater_or_equal %a6, %y : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xi1>
  %wh = train.where %e4, %a6, %y : (tensor<2x4xi1>, tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  // CHECK: train.cast %{{.*}} {to = i64} : (tensor<2x4xf32>) -> tensor<2x4xi64>
  %ci = train.cast %wh {to = i64} : (tensor<2x4xf32>) -> tensor<2x4xi64>
  %cl = train.cast_like %ci, %x : (tensor<2x4xi64>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %dr = train.dropout %cl {ratio = 0.1 : f32, training} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %mm = train.matmul %dr, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %ge = train.gemm %mm, %w, %y {transB} : (tensor<2x4xf32>, tensor<4x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %sm = train.softmax %ge {axis = -1 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %ls = train.log_softmax %sm {axis = 1 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %ln = train.layer_normalization %ls, %y, %y {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  // CHECK: train.reduce_mean %{{.*}} {axes = array<i64: -1>, keepdims} : (tensor<2x4xf32>) -> tensor<2x1xf32>
  %r0 = train.reduce_mean %ln {axes = array<i64: -1>, keepdims} : (tensor<2x4xf32>) -> tensor<2x1xf32>
  %r1 = train.reduce_sum %ln {axes = array<i64: 0>} : (tensor<2x4xf32>) -> tensor<4xf32>
  %r2 = train.reduce_max %ln {axes = array<i64>} : (tensor<2x4xf32>) -> tensor<f32>
  %cs = train.cumsum %i {axis = 1 : i64, exclusive} : (tensor<2x4xi64>) -> tensor<2x4xi64>
  %tr = train.trilu %ln {upper, k = 1 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %tp = train.transpose %tr {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %rs = train.reshape %tp, %c : (tensor<4x2xf32>, tensor<2xi64>) -> tensor<2x4xf32>
  %us = train.unsqueeze %rs {axes = array<i64: 0, 3>} : (tensor<2x4xf32>) -> tensor<1x2x4x1xf32>
  %sq = train.squeeze %us {axes = array<i64: 0>} : (tensor<1x2x4x1xf32>) -> tensor<2x4x1xf32>
  %fl = train.flatten %sq {axis = 1 : i64} : (tensor<2x4x1xf32>) -> tensor<2x4xf32>
  %ct = train.concat %fl, %rs {axis = 0 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
  // CHECK: train.split %{{.*}} {axis = 1 : i64, sizes = array<i64: 1, 3>} : (tensor<4x4xf32>) -> (tensor<4x1xf32>, tensor<4x3xf32>)
  %sp:2 = train.split %ct {axis = 1 : i64, sizes = array<i64: 1, 3>} : (tensor<4x4xf32>) -> (tensor<4x1xf32>, tensor<4x3xf32>)
  // CHECK: !train.seq<tensor<2x4xf32>, tensor<2x4xf32>>
  %seq = train.split_to_sequence %ct {axis = 0 : i64, sizes = array<i64: 2, 2>} : (tensor<4x4xf32>) -> !train.seq<tensor<2x4xf32>, tensor<2x4xf32>>
  %at = train.sequence_at %seq {position = 1 : i64} : (!train.seq<tensor<2x4xf32>, tensor<2x4xf32>>) -> tensor<2x4xf32>
  %s1 = train.constant dense<1> : tensor<1xi64>
  %s3 = train.constant dense<3> : tensor<1xi64>
  %sl = train.slice %at, %s1, %s3, %s1, %s1 : (tensor<2x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2x2xf32>
  %ga = train.gather %w, %i {axis = 0 : i64} : (tensor<4x4xf32>, tensor<2x4xi64>) -> tensor<2x4x4xf32>
  %idx = train.constant dense<[[0, 1]]> : tensor<1x2xi64>
  %gn = train.gather_nd %w, %idx {batch_dims = 0 : i64} : (tensor<4x4xf32>, tensor<1x2xi64>) -> tensor<1xf32>
  %c24 = train.constant dense<[3, 2, 4]> : tensor<3xi64>
  %ex = train.expand %fl, %c24 : (tensor<2x4xf32>, tensor<3xi64>) -> tensor<3x2x4xf32>
  %rep = train.constant dense<[1, 2]> : tensor<2xi64>
  %ti = train.tile %fl, %rep : (tensor<2x4xf32>, tensor<2xi64>) -> tensor<2x8xf32>
  %pads = train.constant dense<[0, 0, 0, 1]> : tensor<4xi64>
  %pv = train.constant dense<-100> : tensor<i64>
  %pd = train.pad %i, %pads, %pv : (tensor<2x4xi64>, tensor<4xi64>, tensor<i64>) -> tensor<2x5xi64>
  %z = train.constant dense<0> : tensor<i64>
  %four = train.constant dense<4> : tensor<i64>
  %one = train.constant dense<1> : tensor<i64>
  %rg = train.range %z, %four, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<4xi64>
  %co = train.constant_of_shape %c {value = dense<0.0> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<2x4xf32>
  // CHECK: train.shape %{{.*}} {end = 2 : i64, start = 0 : i64} : (tensor<2x4xf32>) -> tensor<2xi64>
  %sh = train.shape %co {start = 0 : i64, end = 2 : i64} : (tensor<2x4xf32>) -> tensor<2xi64>
  %sz = train.size %co : (tensor<2x4xf32>) -> tensor<i64>
  %lbl = train.constant dense<[1, 2]> : tensor<2xi64>
  %sce = train.softmax_cross_entropy_loss %fl, %lbl {ignore_index = -100 : i64, reduction = #train<reduction mean>} : (tensor<2x4xf32>, tensor<2xi64>) -> tensor<f32>
  return %fl : tensor<2x4xf32>
}

// CHECK-LABEL: func @fused
func.func @fused(%ids: tensor<2x16xi64>, %t: tensor<256x64xf32>, %wq: tensor<64x64xf32>, %wk: tensor<32x64xf32>,
                 %n: tensor<64xf32>, %cos: tensor<16x16xf32>, %up: tensor<128x64xf32>) -> tensor<f32> {
  // CHECK: train.embedding
  %h = train.embedding %t, %ids : (tensor<256x64xf32>, tensor<2x16xi64>) -> tensor<2x16x64xf32>
  // CHECK: train.rms_norm %{{.*}} {eps = 9.99999997E-7 : f32, plus_one}
  %x = train.rms_norm %h, %n {eps = 1.0e-6 : f32, plus_one} : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  %x2 = train.layer_norm %x, %n, %n {eps = 1.0e-5 : f32} : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  %q = train.linear %x2, %wq {layout = #train<layout out_in>} : (tensor<2x16x64xf32>, tensor<64x64xf32>) -> tensor<2x16x64xf32>
  %k = train.linear %x2, %wk {layout = #train<layout out_in>} : (tensor<2x16x64xf32>, tensor<32x64xf32>) -> tensor<2x16x32xf32>
  %qr = train.rotary %q, %cos, %cos {head_dim = 16 : i64} : (tensor<2x16x64xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<2x16x64xf32>
  %kr = train.rotary %k, %cos, %cos {head_dim = 16 : i64, interleaved} : (tensor<2x16x32xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<2x16x32xf32>
  // CHECK: train.attention {{.*}} {causal, num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 2.500000e-01 : f32, window = 8 : i64}
  %o = train.attention %qr, %kr, %kr {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.25 : f32, causal, window = 8 : i64} : (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>) -> tensor<2x16x64xf32>
  %g = train.linear %o, %up {layout = #train<layout out_in>} : (tensor<2x16x64xf32>, tensor<128x64xf32>) -> tensor<2x16x128xf32>
  %a = train.activation %g {act = #train<act gelu>} : (tensor<2x16x128xf32>) -> tensor<2x16x128xf32>
  %s = train.gated_activation %g, %a {act = #train<act silu>} : (tensor<2x16x128xf32>, tensor<2x16x128xf32>) -> tensor<2x16x128xf32>
  %d = train.linear %s, %up {layout = #train<layout in_out>} : (tensor<2x16x128xf32>, tensor<128x64xf32>) -> tensor<2x16x64xf32>
  %lg = train.linear %d, %t {layout = #train<layout out_in>} : (tensor<2x16x64xf32>, tensor<256x64xf32>) -> tensor<2x16x256xf32>
  // CHECK: train.cross_entropy {{.*}} {ignore_index = -100 : i64, shift}
  %l = train.cross_entropy %lg, %ids {ignore_index = -100 : i64, shift} : (tensor<2x16x256xf32>, tensor<2x16xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func @slice_grad
// CHECK: train.slice_grad %{{.*}} {starts = array<i64: 0, 3>, steps = array<i64: 1, -2>} : (tensor<2x2xf32>) -> tensor<2x4xf32>
func.func @slice_grad(%dy: tensor<2x2xf32>) -> tensor<2x4xf32> {
  %dx = train.slice_grad %dy {starts = array<i64: 0, 3>, steps = array<i64: 1, -2>} : (tensor<2x2xf32>) -> tensor<2x4xf32>
  return %dx : tensor<2x4xf32>
}

// CHECK-LABEL: func @gather_grad
// CHECK: train.gather_grad %{{.*}}, %{{.*}} {axis = -1 : i64} : (tensor<2x3x2xf32>, tensor<2xi64>) -> tensor<2x3x5xf32>
func.func @gather_grad(%dy: tensor<2x3x2xf32>, %i: tensor<2xi64>) -> tensor<2x3x5xf32> {
  %dx = train.gather_grad %dy, %i {axis = -1 : i64} : (tensor<2x3x2xf32>, tensor<2xi64>) -> tensor<2x3x5xf32>
  return %dx : tensor<2x3x5xf32>
}

// The pointwise functions: one description each (Train_PointwiseOp). A
// parameter at its ONNX default is not printed; another is.
// CHECK-LABEL: func @pointwise
// CHECK: train.relu %{{.*}} : (tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK: train.leaky_relu %{{.*}} {alpha = 2.500000e-01 : f32}
// CHECK: train.selu %{{.*}} : (tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK: train.shrink %{{.*}} {alpha = 1.000000e+00 : f32, beta = 5.000000e-01 : f32}
// CHECK: train.unary_grad %{{.*}}, %{{.*}} {alpha = 2.500000e-01 : f32, fn = #train<unary_fn leaky_relu>}
func.func @pointwise(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %r = train.relu %x : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %l = train.leaky_relu %r {alpha = 0.25 : f32} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %s = train.selu %l : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %k = train.shrink %s {alpha = 1.0 : f32, beta = 0.5 : f32} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %m = train.mish %k : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %g = train.unary_grad %x, %m {fn = #train<unary_fn leaky_relu>, alpha = 0.25 : f32} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return %g : tensor<2x4xf32>
}
