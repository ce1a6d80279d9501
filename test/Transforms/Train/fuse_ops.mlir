// RUN: mt-opt --split-input-file --mt-fuse-ops --mt-fold-constants %s | FileCheck %s

// MatMul on a transposed weight, and Add of a 1-D bias weight.
// CHECK-LABEL: func @linear_transposed
// CHECK: %[[W:.+]] = train.param.load @w
// CHECK: %[[B:.+]] = train.param.load @b
// CHECK-NEXT: %[[L:.+]] = train.linear %arg0, %[[W]], %[[B]] {layout = #train<layout out_in>}
// CHECK-NEXT: return %[[L]]
train.param @w {source = #train<source inline>, file = "m", trainable} : tensor<4x8xf32>
train.param @b {source = #train<source inline>, file = "m", trainable} : tensor<4xf32>
func.func @linear_transposed(%x: tensor<2x8xf32>) -> tensor<2x4xf32> {
  %w = train.param.load @w : tensor<4x8xf32>
  %b = train.param.load @b : tensor<4xf32>
  %t = train.transpose %w {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %m = train.matmul %x, %t : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  %y = train.add %m, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

// A pre-transposed weight (optimized exports), and Gemm with transB.
// CHECK-LABEL: func @linear_in_out_and_gemm
// CHECK: train.linear %arg0, %{{.*}} {layout = #train<layout in_out>}
// CHECK: train.linear %arg0, %{{.*}}, %{{.*}} {layout = #train<layout out_in>}
// CHECK-NOT: train.gemm
train.param @w {source = #train<source inline>, file = "m", trainable} : tensor<8x4xf32>
train.param @w2 {source = #train<source inline>, file = "m", trainable} : tensor<4x8xf32>
train.param @b {source = #train<source inline>, file = "m", trainable} : tensor<4xf32>
func.func @linear_in_out_and_gemm(%x: tensor<2x8xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %w = train.param.load @w : tensor<8x4xf32>
  %m = train.matmul %x, %w : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  %w2 = train.param.load @w2 : tensor<4x8xf32>
  %b = train.param.load @b : tensor<4xf32>
  %g = train.gemm %x, %w2, %b {transB} : (tensor<2x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return %m, %g : tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// A MatMul of two activations is not a linear.
// CHECK-LABEL: func @matmul_activations
// CHECK: train.matmul
// CHECK-NOT: train.linear
func.func @matmul_activations(%x: tensor<2x8xf32>, %y: tensor<8x4xf32>) -> tensor<2x4xf32> {
  %m = train.matmul %x, %y : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  return %m : tensor<2x4xf32>
}

// -----

// Gather on a 2-D weight is an embedding; the ids input gets its role.
// CHECK-LABEL: func @embedding
// CHECK-SAME: train.role = #train<role tokens>
// CHECK: train.embedding %{{.*}}, %arg0
train.param @emb {source = #train<source inline>, file = "m", trainable} : tensor<32x8xf32>
func.func @embedding(%ids: tensor<2x16xi64>) -> tensor<2x16x8xf32> {
  %t = train.param.load @emb : tensor<32x8xf32>
  %e = train.gather %t, %ids {axis = 0 : i64} : (tensor<32x8xf32>, tensor<2x16xi64>) -> tensor<2x16x8xf32>
  return %e : tensor<2x16x8xf32>
}

// -----

// RMSNorm as the dynamo exporter writes it (Pow/ReduceMean/Add/Sqrt/Reciprocal).
// CHECK-LABEL: func @rms_norm_reciprocal
// CHECK: %[[N:.+]] = train.rms_norm %arg0, %{{.*}} {eps = 9.99999997E-7 : f32}
// CHECK-NEXT: return %[[N]]
train.param @n {source = #train<source inline>, file = "m", trainable} : tensor<8xf32>
func.func @rms_norm_reciprocal(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %w = train.param.load @n : tensor<8xf32>
  %two = train.constant dense<2.0> : tensor<f32>
  %p = train.pow %x, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %m = train.reduce_mean %p {axes = array<i64: -1>, keepdims} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %eps = train.constant dense<1.0e-6> : tensor<f32>
  %a = train.add %m, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %s = train.sqrt %a : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %r = train.reciprocal %s : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %n = train.mul %x, %r : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %y = train.mul %w, %n : (tensor<8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// RMSNorm with Div, x*x, and the (1 + w) scale.
// CHECK-LABEL: func @rms_norm_div_plus_one
// CHECK: train.rms_norm %arg0, %{{.*}} {eps = 9.99999974E-6 : f32, plus_one}
train.param @n {source = #train<source inline>, file = "m", trainable} : tensor<8xf32>
func.func @rms_norm_div_plus_one(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %w = train.param.load @n : tensor<8xf32>
  %sq = train.mul %x, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %m = train.reduce_mean %sq {axes = array<i64: 1>, keepdims} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %eps = train.constant dense<1.0e-5> : tensor<f32>
  %a = train.add %eps, %m : (tensor<f32>, tensor<2x1xf32>) -> tensor<2x1xf32>
  %s = train.sqrt %a : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %n = train.div %x, %s : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %one = train.constant dense<1.0> : tensor<f32>
  %w1 = train.add %w, %one : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %y = train.mul %n, %w1 : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// LayerNormalization over the last dim becomes layer_norm.
// CHECK-LABEL: func @layer_norm
// CHECK: train.layer_norm %arg0, %arg1, %arg2 {eps = 9.99999974E-6 : f32}
func.func @layer_norm(%x: tensor<2x8xf32>, %s: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  %y = train.layer_normalization %x, %s, %b {axis = -1 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// SwiGLU: x * sigmoid(x) * up.
// CHECK-LABEL: func @swiglu
// CHECK: %[[G:.+]] = train.gated_activation %arg0, %arg1 {act = #train<act silu>}
// CHECK-NEXT: return %[[G]]
func.func @swiglu(%g: tensor<2x8xf32>, %u: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %s = train.sigmoid %g : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %silu = train.mul %g, %s : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %y = train.mul %silu, %u : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// GELU, exact: 0.5 * x * (1 + erf(x / sqrt(2))) as torch 1.13 exports it.
// CHECK-LABEL: func @gelu_erf
// CHECK: %[[A:.+]] = train.activation %arg0 {act = #train<act gelu>}
// CHECK-NEXT: return %[[A]]
func.func @gelu_erf(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %r2 = train.constant dense<1.41421354> : tensor<f32>
  %d = train.div %x, %r2 : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %e = train.erf %d : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %one = train.constant dense<1.0> : tensor<f32>
  %a = train.add %e, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %m = train.mul %x, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %half = train.constant dense<0.5> : tensor<f32>
  %y = train.mul %m, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// GELU, tanh: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), and
// the opset-20 Gelu op.
// CHECK-LABEL: func @gelu_tanh
// CHECK: train.activation %arg0 {act = #train<act gelu_tanh>}
// CHECK: train.activation %arg0 {act = #train<act gelu_tanh>}
// CHECK-NOT: train.tanh
func.func @gelu_tanh(%x: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %three = train.constant dense<3.0> : tensor<f32>
  %p = train.pow %x, %three : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %c = train.constant dense<0.044715> : tensor<f32>
  %pc = train.mul %p, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %in = train.add %x, %pc : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %k = train.constant dense<0.797884583> : tensor<f32>
  %ik = train.mul %in, %k : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %t = train.tanh %ik : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %one = train.constant dense<1.0> : tensor<f32>
  %a = train.add %t, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %half = train.constant dense<0.5> : tensor<f32>
  %xh = train.mul %x, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %y = train.mul %xh, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %g = train.gelu %x {tanh} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y, %g : tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// GELU, tanh, as Bloom writes it: x * 0.5 * (1 + tanh(0.79788456 * x *
// (1 + 0.044715 * x * x))), the same function.
// CHECK-LABEL: func @gelu_tanh_bloom
// CHECK: train.activation %arg0 {act = #train<act gelu_tanh>}
// CHECK-NOT: train.tanh
func.func @gelu_tanh_bloom(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %c = train.constant dense<0.044715> : tensor<f32>
  %cx = train.mul %x, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %cxx = train.mul %cx, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %one = train.constant dense<1.0> : tensor<f32>
  %sq = train.add %cxx, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %k = train.constant dense<0.79788456> : tensor<f32>
  %kx = train.mul %x, %k : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %in = train.mul %kx, %sq : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %t = train.tanh %in : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %a = train.add %t, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %half = train.constant dense<0.5> : tensor<f32>
  %xh = train.mul %x, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %y = train.mul %xh, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Rotary, half-split with Slice/Neg/Concat on [B, H, S, D]; the result is
// computed on packed heads, and frozen tables of shape [1, 1, S, D] become [S, D].
// CHECK-LABEL: func @rotary_slices
// CHECK: %[[R:.+]] = train.rotary %arg0, %{{.*}}, %{{.*}} {head_dim = 4 : i64} : (tensor<1x3x8xf32>, tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<1x3x8xf32>
// CHECK-NEXT: return %[[R]]
func.func @rotary_slices(%xp: tensor<1x3x8xf32>) -> tensor<1x3x8xf32> {
  %cos = train.constant dense<0.5> : tensor<1x1x3x4xf32>
  %sin = train.constant dense<0.25> : tensor<1x1x3x4xf32>
  %s4 = train.constant dense<[1, 3, 2, 4]> : tensor<4xi64>
  %r4 = train.reshape %xp, %s4 : (tensor<1x3x8xf32>, tensor<4xi64>) -> tensor<1x3x2x4xf32>
  %x = train.transpose %r4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x3x2x4xf32>) -> tensor<1x2x3x4xf32>
  %c0 = train.constant dense<0> : tensor<1xi64>
  %c2 = train.constant dense<2> : tensor<1xi64>
  %cmax = train.constant dense<9223372036854775807> : tensor<1xi64>
  %ax = train.constant dense<3> : tensor<1xi64>
  %st = train.constant dense<1> : tensor<1xi64>
  %lo = train.slice %x, %c0, %c2, %ax, %st : (tensor<1x2x3x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x2x3x2xf32>
  %hi = train.slice %x, %c2, %cmax, %ax, %st : (tensor<1x2x3x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x2x3x2xf32>
  %n = train.neg %hi : (tensor<1x2x3x2xf32>) -> tensor<1x2x3x2xf32>
  %rot = train.concat %n, %lo {axis = -1 : i64} : (tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>) -> tensor<1x2x3x4xf32>
  %a = train.mul %x, %cos : (tensor<1x2x3x4xf32>, tensor<1x1x3x4xf32>) -> tensor<1x2x3x4xf32>
  %b = train.mul %rot, %sin : (tensor<1x2x3x4xf32>, tensor<1x1x3x4xf32>) -> tensor<1x2x3x4xf32>
  %y = train.add %a, %b : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  %yt = train.transpose %y {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x3x4xf32>) -> tensor<1x3x2x4xf32>
  %s3 = train.constant dense<[1, 3, 8]> : tensor<3xi64>
  %out = train.reshape %yt, %s3 : (tensor<1x3x2x4xf32>, tensor<3xi64>) -> tensor<1x3x8xf32>
  return %out : tensor<1x3x8xf32>
}

// -----

// Rotary with Split instead of Slices; tables that are weights get frozen.
// CHECK: train.param @cos {{{.*}}} : tensor<3x4xf32>
// CHECK-NOT: trainable
// CHECK-LABEL: func @rotary_split
// CHECK: train.rotary
train.param @cos {source = #train<source inline>, file = "m", trainable} : tensor<3x4xf32>
train.param @sin {source = #train<source inline>, file = "m", trainable} : tensor<3x4xf32>
func.func @rotary_split(%x: tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32> {
  %cos = train.param.load @cos : tensor<3x4xf32>
  %sin = train.param.load @sin : tensor<3x4xf32>
  %p:2 = train.split %x {axis = 3 : i64, sizes = array<i64: 2, 2>} : (tensor<1x2x3x4xf32>) -> (tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>)
  %n = train.neg %p#1 : (tensor<1x2x3x2xf32>) -> tensor<1x2x3x2xf32>
  %rot = train.concat %n, %p#0 {axis = 3 : i64} : (tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>) -> tensor<1x2x3x4xf32>
  %a = train.mul %cos, %x : (tensor<3x4xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  %b = train.mul %sin, %rot : (tensor<3x4xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  %y = train.add %b, %a : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return %y : tensor<1x2x3x4xf32>
}

// -----

// Attention with an additive causal mask and GQA head repetition
// (4 query heads, 2 key/value heads); scale applied after QK^T.
// CHECK-LABEL: func @attention_gqa_causal
// CHECK: %[[O:.+]] = train.attention %arg0, %arg1, %arg2 {causal, num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 5.000000e-01 : f32} : (tensor<1x3x16xf32>, tensor<1x3x8xf32>, tensor<1x3x8xf32>) -> tensor<1x3x16xf32>
// CHECK-NEXT: return %[[O]]
func.func @attention_gqa_causal(%q: tensor<1x3x16xf32>, %k: tensor<1x3x8xf32>, %v: tensor<1x3x8xf32>) -> tensor<1x3x16xf32> {
  %sq = train.constant dense<[1, 3, 4, 4]> : tensor<4xi64>
  %skv = train.constant dense<[1, 3, 2, 4]> : tensor<4xi64>
  %q4 = train.reshape %q, %sq : (tensor<1x3x16xf32>, tensor<4xi64>) -> tensor<1x3x4x4xf32>
  %qh = train.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x3x4x4xf32>) -> tensor<1x4x3x4xf32>
  %k4 = train.reshape %k, %skv : (tensor<1x3x8xf32>, tensor<4xi64>) -> tensor<1x3x2x4xf32>
  %kh = train.transpose %k4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x3x2x4xf32>) -> tensor<1x2x3x4xf32>
  %v4 = train.reshape %v, %skv : (tensor<1x3x8xf32>, tensor<4xi64>) -> tensor<1x3x2x4xf32>
  %vh = train.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x3x2x4xf32>) -> tensor<1x2x3x4xf32>
  %e5 = train.constant dense<[1, 2, 2, 3, 4]> : tensor<5xi64>
  %s4 = train.constant dense<[1, 4, 3, 4]> : tensor<4xi64>
  %ku = train.unsqueeze %kh {axes = array<i64: 2>} : (tensor<1x2x3x4xf32>) -> tensor<1x2x1x3x4xf32>
  %ke = train.expand %ku, %e5 : (tensor<1x2x1x3x4xf32>, tensor<5xi64>) -> tensor<1x2x2x3x4xf32>
  %kr = train.reshape %ke, %s4 : (tensor<1x2x2x3x4xf32>, tensor<4xi64>) -> tensor<1x4x3x4xf32>
  %vu = train.unsqueeze %vh {axes = array<i64: 2>} : (tensor<1x2x3x4xf32>) -> tensor<1x2x1x3x4xf32>
  %ve = train.expand %vu, %e5 : (tensor<1x2x1x3x4xf32>, tensor<5xi64>) -> tensor<1x2x2x3x4xf32>
  %vr = train.reshape %ve, %s4 : (tensor<1x2x2x3x4xf32>, tensor<4xi64>) -> tensor<1x4x3x4xf32>
  %kt = train.transpose %kr {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x4x3x4xf32>) -> tensor<1x4x4x3xf32>
  %s = train.matmul %qh, %kt : (tensor<1x4x3x4xf32>, tensor<1x4x4x3xf32>) -> tensor<1x4x3x3xf32>
  %c = train.constant dense<0.5> : tensor<f32>
  %ss = train.mul %s, %c : (tensor<1x4x3x3xf32>, tensor<f32>) -> tensor<1x4x3x3xf32>
  %mask = train.constant dense<[[0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0]]> : tensor<3x3xf32>
  %sm = train.add %ss, %mask : (tensor<1x4x3x3xf32>, tensor<3x3xf32>) -> tensor<1x4x3x3xf32>
  %p = train.softmax %sm {axis = -1 : i64} : (tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  %o = train.matmul %p, %vr : (tensor<1x4x3x3xf32>, tensor<1x4x3x4xf32>) -> tensor<1x4x3x4xf32>
  %ot = train.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x3x4xf32>) -> tensor<1x3x4x4xf32>
  %s3 = train.constant dense<[1, 3, 16]> : tensor<3xi64>
  %out = train.reshape %ot, %s3 : (tensor<1x3x4x4xf32>, tensor<3xi64>) -> tensor<1x3x16xf32>
  return %out : tensor<1x3x16xf32>
}

// -----

// Attention with masked_fill's Where(cond, -inf, scores), the scale split
// over q and k (decomposed SDPA), and a mask that is not causal: kept as a
// frozen operand when additive, fused only when causal for Where.
// CHECK: train.param @mask {{{.*}}} : tensor<1x1x2x2xf32>
// CHECK-NOT: trainable
// CHECK-LABEL: func @attention_where_and_split_scale
// CHECK: train.attention {{.*}} {causal, num_heads = 1 : i64, num_kv_heads = 1 : i64, scale = 2.500000e-01 : f32}
// CHECK: %[[M:.+]] = train.param.load @mask
// CHECK: train.attention %{{.*}}, %{{.*}}, %{{.*}}, %[[M]] {num_heads = 1 : i64
train.param @mask {source = #train<source inline>, file = "m", trainable} : tensor<1x1x2x2xf32>
func.func @attention_where_and_split_scale(%q: tensor<1x1x2x4xf32>, %k: tensor<1x1x2x4xf32>, %v: tensor<1x1x2x4xf32>) -> (tensor<1x1x2x4xf32>, tensor<1x1x2x4xf32>) {
  %h = train.constant dense<0.5> : tensor<f32>
  %qs = train.mul %q, %h : (tensor<1x1x2x4xf32>, tensor<f32>) -> tensor<1x1x2x4xf32>
  %kt = train.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x1x2x4xf32>) -> tensor<1x1x4x2xf32>
  %ks = train.mul %kt, %h : (tensor<1x1x4x2xf32>, tensor<f32>) -> tensor<1x1x4x2xf32>
  %s = train.matmul %qs, %ks : (tensor<1x1x2x4xf32>, tensor<1x1x4x2xf32>) -> tensor<1x1x2x2xf32>
  %cond = train.constant dense<[[false, true], [false, false]]> : tensor<2x2xi1>
  %ninf = train.constant dense<0xFF800000> : tensor<f32>
  %w = train.where %cond, %ninf, %s : (tensor<2x2xi1>, tensor<f32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %p = train.softmax %w {axis = -1 : i64} : (tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %o = train.matmul %p, %v : (tensor<1x1x2x2xf32>, tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32>
  %mask = train.param.load @mask : tensor<1x1x2x2xf32>
  %kt2 = train.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x1x2x4xf32>) -> tensor<1x1x4x2xf32>
  %s2 = train.matmul %q, %kt2 : (tensor<1x1x2x4xf32>, tensor<1x1x4x2xf32>) -> tensor<1x1x2x2xf32>
  %a2 = train.add %s2, %mask : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %p2 = train.softmax %a2 {axis = 3 : i64} : (tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %o2 = train.matmul %p2, %v : (tensor<1x1x2x2xf32>, tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32>
  return %o, %o2 : tensor<1x1x2x4xf32>, tensor<1x1x2x4xf32>
}

// -----

// ALiBi: a per-head position bias added to the scores, then the causal
// mask's Where: one attention, causal, with the bias as its mask operand.
// CHECK-LABEL: func @attention_alibi
// CHECK: %[[B:.+]] = train.constant dense<{{.*}}> : tensor<2x2x2xf32>
// CHECK: train.attention %{{.*}}, %{{.*}}, %{{.*}}, %[[B]] {causal, num_heads = 2 : i64, num_kv_heads = 2 : i64, scale = 5.000000e-01 : f32}
func.func @attention_alibi(%q: tensor<1x2x2x4xf32>, %k: tensor<1x2x2x4xf32>, %v: tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32> {
  %h = train.constant dense<0.5> : tensor<f32>
  %kt = train.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x2x4xf32>) -> tensor<1x2x4x2xf32>
  %s = train.matmul %q, %kt : (tensor<1x2x2x4xf32>, tensor<1x2x4x2xf32>) -> tensor<1x2x2x2xf32>
  %ss = train.mul %s, %h : (tensor<1x2x2x2xf32>, tensor<f32>) -> tensor<1x2x2x2xf32>
  %bias = train.constant dense<[[[0.0, 0.5], [-0.5, 0.0]], [[0.0, 0.25], [-0.25, 0.0]]]> : tensor<2x2x2xf32>
  %a = train.add %ss, %bias : (tensor<1x2x2x2xf32>, tensor<2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %cond = train.constant dense<[[true, false], [true, true]]> : tensor<2x2xi1>
  %ninf = train.constant dense<0xFF800000> : tensor<f32>
  %w = train.where %cond, %a, %ninf : (tensor<2x2xi1>, tensor<1x2x2x2xf32>, tensor<f32>) -> tensor<1x2x2x2xf32>
  %p = train.softmax %w {axis = -1 : i64} : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %o = train.matmul %p, %v : (tensor<1x2x2x2xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  return %o : tensor<1x2x2x4xf32>
}

// -----

// Softcapping as Gemma 2 writes it: the scaled scores over c, tanh, times c,
// then the causal mask added: one attention with softcap c, the scale the
// one of the scores (0.5), not of the tanh's argument.
// CHECK-LABEL: func @attention_softcap
// CHECK: train.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, num_heads = 2 : i64, num_kv_heads = 2 : i64, scale = 5.000000e-01 : f32, softcap = 2.000000e+00 : f32}
// CHECK-NOT: train.tanh
func.func @attention_softcap(%q: tensor<1x2x2x4xf32>, %k: tensor<1x2x2x4xf32>, %v: tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32> {
  %h = train.constant dense<0.5> : tensor<f32>
  %c = train.constant dense<2.0> : tensor<f32>
  %kt = train.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x2x4xf32>) -> tensor<1x2x4x2xf32>
  %s = train.matmul %q, %kt : (tensor<1x2x2x4xf32>, tensor<1x2x4x2xf32>) -> tensor<1x2x2x2xf32>
  %ss = train.mul %s, %h : (tensor<1x2x2x2xf32>, tensor<f32>) -> tensor<1x2x2x2xf32>
  %d = train.div %ss, %c : (tensor<1x2x2x2xf32>, tensor<f32>) -> tensor<1x2x2x2xf32>
  %t = train.tanh %d : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %capped = train.mul %t, %c : (tensor<1x2x2x2xf32>, tensor<f32>) -> tensor<1x2x2x2xf32>
  %mask = train.constant dense<[[0.0, 0xFF800000], [0.0, 0.0]]> : tensor<2x2xf32>
  %a = train.add %capped, %mask : (tensor<1x2x2x2xf32>, tensor<2x2xf32>) -> tensor<1x2x2x2xf32>
  %p = train.softmax %a {axis = -1 : i64} : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %o = train.matmul %p, %v : (tensor<1x2x2x2xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  return %o : tensor<1x2x2x4xf32>
}

// -----

// The cap's division as a product by 1/c, c on the left of the tanh, under
// a causal Where and no other scale: softcap 4, scale 1.
// CHECK-LABEL: func @attention_softcap_reciprocal
// CHECK: train.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, num_heads = 2 : i64, num_kv_heads = 2 : i64, scale = 1.000000e+00 : f32, softcap = 4.000000e+00 : f32}
func.func @attention_softcap_reciprocal(%q: tensor<1x2x2x4xf32>, %k: tensor<1x2x2x4xf32>, %v: tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32> {
  %r = train.constant dense<0.25> : tensor<f32>
  %c = train.constant dense<4.0> : tensor<f32>
  %kt = train.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x2x4xf32>) -> tensor<1x2x4x2xf32>
  %s = train.matmul %q, %kt : (tensor<1x2x2x4xf32>, tensor<1x2x4x2xf32>) -> tensor<1x2x2x2xf32>
  %d = train.mul %s, %r : (tensor<1x2x2x2xf32>, tensor<f32>) -> tensor<1x2x2x2xf32>
  %t = train.tanh %d : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %capped = train.mul %c, %t : (tensor<f32>, tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %cond = train.constant dense<[[true, false], [true, true]]> : tensor<2x2xi1>
  %ninf = train.constant dense<0xFF800000> : tensor<f32>
  %w = train.where %cond, %capped, %ninf : (tensor<2x2xi1>, tensor<1x2x2x2xf32>, tensor<f32>) -> tensor<1x2x2x2xf32>
  %p = train.softmax %w {axis = -1 : i64} : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %o = train.matmul %p, %v : (tensor<1x2x2x2xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  return %o : tensor<1x2x2x4xf32>
}

// -----

// A tanh of the scores times a tensor, not a constant, is no softcap: the
// scores stay primitive.
// CHECK-LABEL: func @attention_tanh_not_a_cap
// CHECK-NOT: train.attention
// CHECK: train.tanh
func.func @attention_tanh_not_a_cap(%q: tensor<1x2x2x4xf32>, %k: tensor<1x2x2x4xf32>, %v: tensor<1x2x2x4xf32>, %g: tensor<1x2x2x2xf32>) -> tensor<1x2x2x4xf32> {
  %kt = train.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x2x4xf32>) -> tensor<1x2x4x2xf32>
  %s = train.matmul %q, %kt : (tensor<1x2x2x4xf32>, tensor<1x2x4x2xf32>) -> tensor<1x2x2x2xf32>
  %t = train.tanh %s : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %capped = train.mul %t, %g : (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %p = train.softmax %capped {axis = -1 : i64} : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %o = train.matmul %p, %v : (tensor<1x2x2x2xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  return %o : tensor<1x2x2x4xf32>
}

// -----

// PyTorch's decomposed sdpa (transformers' default attention): the scale's
// square root on q and on k^T, k^T spelled over flattened heads
// (reshape(transpose(reshape(repeated k, [B * H, S, D]), [0, 2, 1]))), a
// causal mask in a frozen weight that carries its value (an optimized
// export's folded mask), and the safe softmax where(is_nan(p), 0, p).
// CHECK-LABEL: func @attention_sdpa_safe_softmax
// CHECK: %[[O:.+]] = train.attention %arg0, %arg1, %arg2 {causal, num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 2.500000e-01 : f32} : (tensor<1x3x16xf32>, tensor<1x3x8xf32>, tensor<1x3x8xf32>) -> tensor<1x3x16xf32>
// CHECK-NEXT: return %[[O]]
train.param @val_137 {source = #train<source external>, file = "m", offset = 0 : i64, length = 36 : i64, value = dense<[[0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0]]> : tensor<3x3xf32>} : tensor<3x3xf32>
func.func @attention_sdpa_safe_softmax(%q: tensor<1x3x16xf32>, %k: tensor<1x3x8xf32>, %v: tensor<1x3x8xf32>) -> tensor<1x3x16xf32> {
  %sq = train.constant dense<[1, 3, 4, 4]> : tensor<4xi64>
  %skv = train.constant dense<[1, 3, 2, 4]> : tensor<4xi64>
  %q4 = train.reshape %q, %sq : (tensor<1x3x16xf32>, tensor<4xi64>) -> tensor<1x3x4x4xf32>
  %qh = train.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x3x4x4xf32>) -> tensor<1x4x3x4xf32>
  %k4 = train.reshape %k, %skv : (tensor<1x3x8xf32>, tensor<4xi64>) -> tensor<1x3x2x4xf32>
  %kh = train.transpose %k4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x3x2x4xf32>) -> tensor<1x2x3x4xf32>
  %v4 = train.reshape %v, %skv : (tensor<1x3x8xf32>, tensor<4xi64>) -> tensor<1x3x2x4xf32>
  %vh = train.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x3x2x4xf32>) -> tensor<1x2x3x4xf32>
  %e5 = train.constant dense<[1, 2, 2, 3, 4]> : tensor<5xi64>
  %s4 = train.constant dense<[1, 4, 3, 4]> : tensor<4xi64>
  %s3 = train.constant dense<[4, 3, 4]> : tensor<3xi64>
  %st = train.constant dense<[1, 4, 4, 3]> : tensor<4xi64>
  %ku = train.unsqueeze %kh {axes = array<i64: 2>} : (tensor<1x2x3x4xf32>) -> tensor<1x2x1x3x4xf32>
  %ke = train.expand %ku, %e5 : (tensor<1x2x1x3x4xf32>, tensor<5xi64>) -> tensor<1x2x2x3x4xf32>
  %kf = train.reshape %ke, %s3 : (tensor<1x2x2x3x4xf32>, tensor<3xi64>) -> tensor<4x3x4xf32>
  %kft = train.transpose %kf {perm = array<i64: 0, 2, 1>} : (tensor<4x3x4xf32>) -> tensor<4x4x3xf32>
  %kt = train.reshape %kft, %st : (tensor<4x4x3xf32>, tensor<4xi64>) -> tensor<1x4x4x3xf32>
  %vu = train.unsqueeze %vh {axes = array<i64: 2>} : (tensor<1x2x3x4xf32>) -> tensor<1x2x1x3x4xf32>
  %ve = train.expand %vu, %e5 : (tensor<1x2x1x3x4xf32>, tensor<5xi64>) -> tensor<1x2x2x3x4xf32>
  %vr = train.reshape %ve, %s4 : (tensor<1x2x2x3x4xf32>, tensor<4xi64>) -> tensor<1x4x3x4xf32>
  %c = train.constant dense<0.5> : tensor<f32>
  %qs = train.mul %qh, %c : (tensor<1x4x3x4xf32>, tensor<f32>) -> tensor<1x4x3x4xf32>
  %ks = train.mul %kt, %c : (tensor<1x4x4x3xf32>, tensor<f32>) -> tensor<1x4x4x3xf32>
  %s = train.matmul %qs, %ks : (tensor<1x4x3x4xf32>, tensor<1x4x4x3xf32>) -> tensor<1x4x3x3xf32>
  %mask = train.param.load @val_137 : tensor<3x3xf32>
  %sm = train.add %s, %mask : (tensor<1x4x3x3xf32>, tensor<3x3xf32>) -> tensor<1x4x3x3xf32>
  %p = train.softmax %sm {axis = -1 : i64} : (tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  %nan = train.is_nan %p : (tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xi1>
  %zero = train.constant dense<0.0> : tensor<f32>
  %safe = train.where %nan, %zero, %p : (tensor<1x4x3x3xi1>, tensor<f32>, tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  %o = train.matmul %safe, %vr : (tensor<1x4x3x3xf32>, tensor<1x4x3x4xf32>) -> tensor<1x4x3x4xf32>
  %ot = train.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x3x4xf32>) -> tensor<1x3x4x4xf32>
  %so = train.constant dense<[1, 3, 16]> : tensor<3xi64>
  %out = train.reshape %ot, %so : (tensor<1x3x4x4xf32>, tensor<3xi64>) -> tensor<1x3x16xf32>
  return %out : tensor<1x3x16xf32>
}

// -----

// Softmax over scores that are not QK^T stays primitive.
// CHECK-LABEL: func @not_attention
// CHECK: train.softmax
// CHECK-NOT: train.attention
func.func @not_attention(%s: tensor<1x1x2x2xf32>, %v: tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32> {
  %p = train.softmax %s {axis = -1 : i64} : (tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %o = train.matmul %p, %v : (tensor<1x1x2x2xf32>, tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32>
  return %o : tensor<1x1x2x4xf32>
}

// -----

// Cross-entropy with the Hugging Face label shift (Pad by ignore_index, then
// Slice from 1) on flattened logits; the labels input gets its role.
// CHECK-LABEL: func @cross_entropy_shift
// CHECK-SAME: train.role = #train<role labels>
// CHECK: %[[L:.+]] = train.cross_entropy %arg0, %arg1 {ignore_index = -100 : i64, shift}
// CHECK-NEXT: return %[[L]]
func.func @cross_entropy_shift(%logits: tensor<2x4x8xf32>, %labels: tensor<2x4xi64>) -> tensor<f32> {
  %pads = train.constant dense<[0, 0, 0, 1]> : tensor<4xi64>
  %ig = train.constant dense<-100> : tensor<i64>
  %p = train.pad %labels, %pads, %ig : (tensor<2x4xi64>, tensor<4xi64>, tensor<i64>) -> tensor<2x5xi64>
  %one = train.constant dense<1> : tensor<1xi64>
  %max = train.constant dense<9223372036854775807> : tensor<1xi64>
  %sl = train.slice %p, %one, %max, %one, %one : (tensor<2x5xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2x4xi64>
  %s2 = train.constant dense<[-1, 8]> : tensor<2xi64>
  %s1 = train.constant dense<-1> : tensor<1xi64>
  %lf = train.reshape %logits, %s2 : (tensor<2x4x8xf32>, tensor<2xi64>) -> tensor<8x8xf32>
  %tf = train.reshape %sl, %s1 : (tensor<2x4xi64>, tensor<1xi64>) -> tensor<8xi64>
  %l = train.softmax_cross_entropy_loss %lf, %tf {ignore_index = -100 : i64, reduction = #train<reduction mean>} : (tensor<8x8xf32>, tensor<8xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Next-token targets (no shift); reduction sum is not fused.
// CHECK-LABEL: func @cross_entropy_targets
// CHECK-SAME: train.role = #train<role targets>
// CHECK: train.cross_entropy %arg0, %arg1 {ignore_index = -100 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<f32>
// CHECK: train.softmax_cross_entropy_loss {{.*}}reduction = #train<reduction sum>
func.func @cross_entropy_targets(%logits: tensor<2x4x8xf32>, %t: tensor<2x4xi64>) -> (tensor<f32>, tensor<f32>) {
  %s2 = train.constant dense<[-1, 8]> : tensor<2xi64>
  %s1 = train.constant dense<-1> : tensor<1xi64>
  %lf = train.reshape %logits, %s2 : (tensor<2x4x8xf32>, tensor<2xi64>) -> tensor<8x8xf32>
  %tf = train.reshape %t, %s1 : (tensor<2x4xi64>, tensor<1xi64>) -> tensor<8xi64>
  %l = train.softmax_cross_entropy_loss %lf, %tf {ignore_index = -100 : i64, reduction = #train<reduction mean>} : (tensor<8x8xf32>, tensor<8xi64>) -> tensor<f32>
  %l2 = train.softmax_cross_entropy_loss %lf, %tf {reduction = #train<reduction sum>} : (tensor<8x8xf32>, tensor<8xi64>) -> tensor<f32>
  return %l, %l2 : tensor<f32>, tensor<f32>
}

// -----

// Scores with the classes second ([N, C, d], as PyTorch exports
// cross_entropy(logits.transpose(1, 2), labels)): the cross-entropy of
// their transpose.
// CHECK-LABEL: func @cross_entropy_classes_second
// CHECK: %[[T:.+]] = train.transpose %arg0 {perm = array<i64: 0, 2, 1>} : (tensor<2x8x4xf32>) -> tensor<2x4x8xf32>
// CHECK: train.cross_entropy %[[T]], %arg1 {ignore_index = -100 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<f32>
// CHECK-NOT: softmax_cross_entropy_loss
func.func @cross_entropy_classes_second(%scores: tensor<2x8x4xf32>, %t: tensor<2x4xi64>) -> tensor<f32> {
  %l = train.softmax_cross_entropy_loss %scores, %t {ignore_index = -100 : i64, reduction = #train<reduction mean>} : (tensor<2x8x4xf32>, tensor<2x4xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A mixture of experts' batched_mm: each row's expert matrix gathered and
// multiplied with the row as a column (out_in), or the row with the
// gathered [E, K, O] matrix (in_out): expert linears on the weights in
// place, no GatherND left.
// CHECK-LABEL: func @expert_linear
// CHECK-NOT: train.gather_nd
// CHECK: train.expert_linear %arg0, %{{.+}}, %[[W:.+]] {layout = #train<layout out_in>} : (tensor<5x3xf32>, tensor<5xi64>, tensor<4x6x3xf32>) -> tensor<5x6xf32>
// CHECK: train.expert_linear %arg0, %{{.+}}, %[[V:.+]] {layout = #train<layout in_out>} : (tensor<5x3xf32>, tensor<5xi64>, tensor<4x3x6xf32>) -> tensor<5x6xf32>
// CHECK-NOT: train.gather_nd
train.param @experts.gate_up_proj {source = #train<source inline>, file = "m", trainable} : tensor<4x6x3xf32>
train.param @experts.down_proj {source = #train<source inline>, file = "m", trainable} : tensor<4x3x6xf32>
func.func @expert_linear(%x: tensor<5x3xf32>, %i: tensor<5x1xi64>) -> (tensor<5x6x1xf32>, tensor<5x1x6xf32>) {
  %w = train.param.load @experts.gate_up_proj : tensor<4x6x3xf32>
  %v = train.param.load @experts.down_proj : tensor<4x3x6xf32>
  %g = train.gather_nd %w, %i {batch_dims = 0 : i64} : (tensor<4x6x3xf32>, tensor<5x1xi64>) -> tensor<5x6x3xf32>
  %col = train.unsqueeze %x {axes = array<i64: -1>} : (tensor<5x3xf32>) -> tensor<5x3x1xf32>
  %y = train.matmul %g, %col : (tensor<5x6x3xf32>, tensor<5x3x1xf32>) -> tensor<5x6x1xf32>
  %h = train.gather_nd %v, %i {batch_dims = 0 : i64} : (tensor<4x3x6xf32>, tensor<5x1xi64>) -> tensor<5x3x6xf32>
  %row = train.unsqueeze %x {axes = array<i64: 1>} : (tensor<5x3xf32>) -> tensor<5x1x3xf32>
  %z = train.matmul %row, %h : (tensor<5x1x3xf32>, tensor<5x3x6xf32>) -> tensor<5x1x6xf32>
  return %y, %z : tensor<5x6x1xf32>, tensor<5x1x6xf32>
}

// -----

// A sliding window of 512 keys over 4,096 tokens, as Hugging Face's mask
// builders make it (kv <= q and kv > q - 512 over ranges, then a Where):
// too large to fold, read through its ops; and the same window of 2 in a
// folded additive mask. Both are causal attention with the window.
// CHECK-LABEL: func @attention_sliding_window
// CHECK: train.attention {{.*}} {causal, num_heads = 1 : i64, num_kv_heads = 1 : i64, scale = 1.000000e+00 : f32, window = 512 : i64} : (tensor<1x4096x4xf32>
// CHECK: train.attention {{.*}} {causal, num_heads = 1 : i64, num_kv_heads = 1 : i64, scale = 1.000000e+00 : f32, window = 2 : i64} : (tensor<1x4x4xf32>
func.func @attention_sliding_window(%q: tensor<1x1x4096x4xf32>, %k: tensor<1x1x4096x4xf32>, %v: tensor<1x1x4096x4xf32>, %q2: tensor<1x1x4x4xf32>, %k2: tensor<1x1x4x4xf32>, %v2: tensor<1x1x4x4xf32>) -> (tensor<1x1x4096x4xf32>, tensor<1x1x4x4xf32>) {
  %kt = train.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x1x4096x4xf32>) -> tensor<1x1x4x4096xf32>
  %s = train.matmul %q, %kt : (tensor<1x1x4096x4xf32>, tensor<1x1x4x4096xf32>) -> tensor<1x1x4096x4096xf32>
  %a = train.constant dense<0> : tensor<i64>
  %n = train.constant dense<4096> : tensor<i64>
  %d = train.constant dense<1> : tensor<i64>
  %r = train.range %a, %n, %d : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<4096xi64>
  %qi = train.unsqueeze %r {axes = array<i64: -1>} : (tensor<4096xi64>) -> tensor<4096x1xi64>
  %ki = train.unsqueeze %r {axes = array<i64: 0>} : (tensor<4096xi64>) -> tensor<1x4096xi64>
  %le = train.less_or_equal %ki, %qi : (tensor<1x4096xi64>, tensor<4096x1xi64>) -> tensor<4096x4096xi1>
  %w = train.constant dense<512> : tensor<i64>
  %back = train.sub %qi, %w : (tensor<4096x1xi64>, tensor<i64>) -> tensor<4096x1xi64>
  %in = train.greater %ki, %back : (tensor<1x4096xi64>, tensor<4096x1xi64>) -> tensor<4096x4096xi1>
  %keep = train.and %le, %in : (tensor<4096x4096xi1>, tensor<4096x4096xi1>) -> tensor<4096x4096xi1>
  %ninf = train.constant dense<0xFF800000> : tensor<f32>
  %ms = train.where %keep, %s, %ninf : (tensor<4096x4096xi1>, tensor<1x1x4096x4096xf32>, tensor<f32>) -> tensor<1x1x4096x4096xf32>
  %p = train.softmax %ms {axis = -1 : i64} : (tensor<1x1x4096x4096xf32>) -> tensor<1x1x4096x4096xf32>
  %o = train.matmul %p, %v : (tensor<1x1x4096x4096xf32>, tensor<1x1x4096x4xf32>) -> tensor<1x1x4096x4xf32>
  %kt2 = train.transpose %k2 {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %s2 = train.matmul %q2, %kt2 : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %mask = train.constant dense<[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0xFF800000, 0.0, 0.0, 0xFF800000], [0xFF800000, 0xFF800000, 0.0, 0.0]]> : tensor<4x4xf32>
  %a2 = train.add %s2, %mask : (tensor<1x1x4x4xf32>, tensor<4x4xf32>) -> tensor<1x1x4x4xf32>
  %p2 = train.softmax %a2 {axis = -1 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %o2 = train.matmul %p2, %v2 : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  return %o, %o2 : tensor<1x1x4096x4xf32>, tensor<1x1x4x4xf32>
}

// -----

// A layer norm spelled in primitives as Cohere's: x - mean(x) written twice
// (the variance's and the output's, before CSE), pow 2, mean, + eps, sqrt,
// reciprocal, times the weight; then a bias added: one layer_norm with
// that bias.
// CHECK-LABEL: func @layer_norm_primitives
// CHECK: %[[W:.+]] = train.param.load @ln_w
// CHECK: %[[B:.+]] = train.param.load @ln_b
// CHECK: %[[N:.+]] = train.layer_norm %arg0, %[[W]], %[[B]] {eps = 9.99999974E-6 : f32}
// CHECK-NEXT: return %[[N]]
train.param @ln_w {source = #train<source inline>, trainable} : tensor<4xf32>
train.param @ln_b {source = #train<source inline>, trainable} : tensor<4xf32>
func.func @layer_norm_primitives(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %two = train.constant dense<2.0> : tensor<f32>
  %eps = train.constant dense<1.0e-5> : tensor<f32>
  %w = train.param.load @ln_w : tensor<4xf32>
  %b = train.param.load @ln_b : tensor<4xf32>
  %m = train.reduce_mean %x {axes = array<i64: -1>, keepdims} : (tensor<2x4xf32>) -> tensor<2x1xf32>
  %c1 = train.sub %x, %m : (tensor<2x4xf32>, tensor<2x1xf32>) -> tensor<2x4xf32>
  %p = train.pow %c1, %two : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  %v = train.reduce_mean %p {axes = array<i64: -1>, keepdims} : (tensor<2x4xf32>) -> tensor<2x1xf32>
  %a = train.add %v, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %s = train.sqrt %a : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %r = train.reciprocal %s : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %c2 = train.sub %x, %m : (tensor<2x4xf32>, tensor<2x1xf32>) -> tensor<2x4xf32>
  %n = train.mul %c2, %r : (tensor<2x4xf32>, tensor<2x1xf32>) -> tensor<2x4xf32>
  %y = train.mul %w, %n : (tensor<4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %z = train.add %y, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return %z : tensor<2x4xf32>
}

// -----

// Centred over another axis than the last: no layer norm (an RMS norm of
// the centred value stays, as it is one).
// CHECK-LABEL: func @layer_norm_other_axis
// CHECK-NOT: train.layer_norm
train.param @ln_w2 {source = #train<source inline>, trainable} : tensor<4xf32>
func.func @layer_norm_other_axis(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %two = train.constant dense<2.0> : tensor<f32>
  %eps = train.constant dense<1.0e-5> : tensor<f32>
  %w = train.param.load @ln_w2 : tensor<4xf32>
  %m = train.reduce_mean %x {axes = array<i64: 0>, keepdims} : (tensor<2x4xf32>) -> tensor<1x4xf32>
  %c = train.sub %x, %m : (tensor<2x4xf32>, tensor<1x4xf32>) -> tensor<2x4xf32>
  %p = train.pow %c, %two : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  %v = train.reduce_mean %p {axes = array<i64: -1>, keepdims} : (tensor<2x4xf32>) -> tensor<2x1xf32>
  %a = train.add %v, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %s = train.sqrt %a : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %r = train.reciprocal %s : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %n = train.mul %c, %r : (tensor<2x4xf32>, tensor<2x1xf32>) -> tensor<2x4xf32>
  %y = train.mul %w, %n : (tensor<4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

// MPT's ALiBi bias, [heads, 1, seq]: broadcast over the queries, which the
// attention kernels do not take; the fused op's mask is it expanded to
// [heads, seq, seq] (a constant here, so it folds).
// CHECK-LABEL: func @attention_bias_per_key
// CHECK: %[[B:.+]] = train.constant dense<{{\[\[\[}}0.000000e+00, 5.000000e-01], [0.000000e+00, 5.000000e-01]], {{\[\[}}0.000000e+00, 2.500000e-01], [0.000000e+00, 2.500000e-01]]]> : tensor<2x2x2xf32>
// CHECK: train.attention %{{.*}}, %{{.*}}, %{{.*}}, %[[B]] {causal, num_heads = 2 : i64, num_kv_heads = 2 : i64, scale = 5.000000e-01 : f32}
func.func @attention_bias_per_key(%q: tensor<1x2x2x4xf32>, %k: tensor<1x2x2x4xf32>, %v: tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32> {
  %h = train.constant dense<0.5> : tensor<f32>
  %kt = train.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x2x4xf32>) -> tensor<1x2x4x2xf32>
  %s = train.matmul %q, %kt : (tensor<1x2x2x4xf32>, tensor<1x2x4x2xf32>) -> tensor<1x2x2x2xf32>
  %ss = train.mul %s, %h : (tensor<1x2x2x2xf32>, tensor<f32>) -> tensor<1x2x2x2xf32>
  %bias = train.constant dense<[[[0.0, 0.5]], [[0.0, 0.25]]]> : tensor<2x1x2xf32>
  %a = train.add %ss, %bias : (tensor<1x2x2x2xf32>, tensor<2x1x2xf32>) -> tensor<1x2x2x2xf32>
  %cond = train.constant dense<[[true, false], [true, true]]> : tensor<2x2xi1>
  %ninf = train.constant dense<0xFF800000> : tensor<f32>
  %w = train.where %cond, %a, %ninf : (tensor<2x2xi1>, tensor<1x2x2x2xf32>, tensor<f32>) -> tensor<1x2x2x2xf32>
  %p = train.softmax %w {axis = -1 : i64} : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %o = train.matmul %p, %v : (tensor<1x2x2x2xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  return %o : tensor<1x2x2x4xf32>
}

// -----

// Bloom's attention on heads merged into the batch: q k^T as a bmm of
// [B * H, S, D] tensors, scaled, plus the ALiBi bias of [B * H, 1, S]
// (baddbmm), reshaped to [B, H, S, S] for the additive causal mask and the
// softmax, back to [B * H, S, S] for a bmm with v. Lifted back onto the
// heads op by op, it is one attention, causal, with the bias (split per
// head, expanded over the queries) as its mask.
// CHECK-LABEL: func @attention_merged_heads
// CHECK: %[[B:.+]] = train.constant dense<{{\[\[\[\[}}0.000000e+00, 5.000000e-01], [0.000000e+00, 5.000000e-01]], {{\[\[}}0.000000e+00, 2.500000e-01], [0.000000e+00, 2.500000e-01]]]]> : tensor<1x2x2x2xf32>
// CHECK: train.attention %{{.*}}, %{{.*}}, %{{.*}}, %[[B]] {causal, num_heads = 2 : i64, num_kv_heads = 2 : i64, scale = 5.000000e-01 : f32}
// CHECK-NOT: train.matmul
// CHECK-NOT: train.softmax
func.func @attention_merged_heads(%q: tensor<1x2x2x4xf32>, %k: tensor<1x2x2x4xf32>, %v: tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32> {
  %to3 = train.constant dense<[2, 2, 4]> : tensor<3xi64>
  %to4 = train.constant dense<[1, 2, 2, 2]> : tensor<4xi64>
  %sq3 = train.constant dense<[2, 2, 2]> : tensor<3xi64>
  %o4 = train.constant dense<[1, 2, 2, 4]> : tensor<4xi64>
  %h = train.constant dense<0.5> : tensor<f32>
  %q3 = train.reshape %q, %to3 : (tensor<1x2x2x4xf32>, tensor<3xi64>) -> tensor<2x2x4xf32>
  %k3 = train.reshape %k, %to3 : (tensor<1x2x2x4xf32>, tensor<3xi64>) -> tensor<2x2x4xf32>
  %v3 = train.reshape %v, %to3 : (tensor<1x2x2x4xf32>, tensor<3xi64>) -> tensor<2x2x4xf32>
  %kt = train.transpose %k3 {perm = array<i64: 0, 2, 1>} : (tensor<2x2x4xf32>) -> tensor<2x4x2xf32>
  %s = train.matmul %q3, %kt : (tensor<2x2x4xf32>, tensor<2x4x2xf32>) -> tensor<2x2x2xf32>
  %ss = train.mul %s, %h : (tensor<2x2x2xf32>, tensor<f32>) -> tensor<2x2x2xf32>
  %bias = train.constant dense<[[[0.0, 0.5]], [[0.0, 0.25]]]> : tensor<2x1x2xf32>
  %a = train.add %ss, %bias : (tensor<2x2x2xf32>, tensor<2x1x2xf32>) -> tensor<2x2x2xf32>
  %a4 = train.reshape %a, %to4 : (tensor<2x2x2xf32>, tensor<4xi64>) -> tensor<1x2x2x2xf32>
  %mask = train.constant dense<[[[[0.0, -3.4028234663852886e38], [0.0, 0.0]]]]> : tensor<1x1x2x2xf32>
  %m = train.add %a4, %mask : (tensor<1x2x2x2xf32>, tensor<1x1x2x2xf32>) -> tensor<1x2x2x2xf32>
  %p = train.softmax %m {axis = -1 : i64} : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %p3 = train.reshape %p, %sq3 : (tensor<1x2x2x2xf32>, tensor<3xi64>) -> tensor<2x2x2xf32>
  %o3 = train.matmul %p3, %v3 : (tensor<2x2x2xf32>, tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  %o = train.reshape %o3, %o4 : (tensor<2x2x4xf32>, tensor<4xi64>) -> tensor<1x2x2x4xf32>
  return %o : tensor<1x2x2x4xf32>
}

// -----

// The classic bmm attention, all of it on merged heads: q k^T scaled, a
// causal masked_fill (a Where) and the softmax on [B * H, S, S], then the
// bmm with v. The lifts apply until none does (the softmax lifted, its bmm
// with v): one attention, causal.
// CHECK-LABEL: func @attention_merged_heads_bmm
// CHECK: train.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, num_heads = 2 : i64, num_kv_heads = 2 : i64, scale = 5.000000e-01 : f32}
// CHECK-NOT: train.matmul
// CHECK-NOT: train.softmax
func.func @attention_merged_heads_bmm(%q: tensor<1x2x2x4xf32>, %k: tensor<1x2x2x4xf32>, %v: tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32> {
  %to3 = train.constant dense<[2, 2, 4]> : tensor<3xi64>
  %o4 = train.constant dense<[1, 2, 2, 4]> : tensor<4xi64>
  %two = train.constant dense<2.0> : tensor<f32>
  %q3 = train.reshape %q, %to3 : (tensor<1x2x2x4xf32>, tensor<3xi64>) -> tensor<2x2x4xf32>
  %k3 = train.reshape %k, %to3 : (tensor<1x2x2x4xf32>, tensor<3xi64>) -> tensor<2x2x4xf32>
  %v3 = train.reshape %v, %to3 : (tensor<1x2x2x4xf32>, tensor<3xi64>) -> tensor<2x2x4xf32>
  %kt = train.transpose %k3 {perm = array<i64: 0, 2, 1>} : (tensor<2x2x4xf32>) -> tensor<2x4x2xf32>
  %s = train.matmul %q3, %kt : (tensor<2x2x4xf32>, tensor<2x4x2xf32>) -> tensor<2x2x2xf32>
  %ss = train.div %s, %two : (tensor<2x2x2xf32>, tensor<f32>) -> tensor<2x2x2xf32>
  %cond = train.constant dense<[[true, false], [true, true]]> : tensor<2x2xi1>
  %ninf = train.constant dense<0xFF800000> : tensor<f32>
  %w = train.where %cond, %ss, %ninf : (tensor<2x2xi1>, tensor<2x2x2xf32>, tensor<f32>) -> tensor<2x2x2xf32>
  %p = train.softmax %w {axis = 2 : i64} : (tensor<2x2x2xf32>) -> tensor<2x2x2xf32>
  %o3 = train.matmul %p, %v3 : (tensor<2x2x2xf32>, tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  %o = train.reshape %o3, %o4 : (tensor<2x2x4xf32>, tensor<4xi64>) -> tensor<1x2x2x4xf32>
  return %o : tensor<1x2x2x4xf32>
}
