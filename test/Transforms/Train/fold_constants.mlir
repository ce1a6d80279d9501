// RUN: mt-opt --split-input-file --mt-fold-constants %s | FileCheck %s

// A shape chain folds to a constant and the reshape keeps its input.
// CHECK-LABEL: func @shape_chain
// CHECK-NOT: train.shape
// CHECK-NOT: train.gather
// CHECK: %[[S:.+]] = train.constant dense<[2, 16, 4, 16]> : tensor<4xi64>
// CHECK: train.reshape %arg0, %[[S]]
func.func @shape_chain(%x: tensor<2x16x64xf32>) -> tensor<2x16x4x16xf32> {
  %s = train.shape %x {start = 0 : i64, end = 3 : i64} : (tensor<2x16x64xf32>) -> tensor<3xi64>
  %i = train.constant dense<[0, 1]> : tensor<2xi64>
  %bs = train.gather %s, %i {axis = 0 : i64} : (tensor<3xi64>, tensor<2xi64>) -> tensor<2xi64>
  %hd = train.constant dense<[4, 16]> : tensor<2xi64>
  %t = train.concat %bs, %hd {axis = 0 : i64} : (tensor<2xi64>, tensor<2xi64>) -> tensor<4xi64>
  %r = train.reshape %x, %t : (tensor<2x16x64xf32>, tensor<4xi64>) -> tensor<2x16x4x16xf32>
  return %r : tensor<2x16x4x16xf32>
}

// -----

// A causal mask built from ConstantOfShape and Trilu becomes one constant.
// CHECK-LABEL: func @causal_mask
// CHECK-NEXT: %[[M:.+]] = train.constant dense<{{\[\[}}0.000000e+00, 0xFF800000, 0xFF800000], [0.000000e+00, 0.000000e+00, 0xFF800000], [0.000000e+00, 0.000000e+00, 0.000000e+00]]> : tensor<3x3xf32>
// CHECK-NEXT: %[[A:.+]] = train.add %arg0, %[[M]]
func.func @causal_mask(%x: tensor<3x3xf32>) -> tensor<3x3xf32> {
  %s = train.constant dense<3> : tensor<2xi64>
  %f = train.constant_of_shape %s {value = dense<0xFF800000> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<3x3xf32>
  %m = train.trilu %f {upper, k = 1 : i64} : (tensor<3x3xf32>) -> tensor<3x3xf32>
  %a = train.add %x, %m : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  return %a : tensor<3x3xf32>
}

// -----

// Rotary tables fold from a frozen buffer that carries its value; position
// ids come from Range and Cast. The dead load goes, the parameter stays.
// CHECK: train.param @inv_freq
// CHECK-LABEL: func @rotary_tables
// CHECK-NEXT: %[[C:.+]] = train.constant dense<{{\[\[}}1.000000e+00, 1.000000e+00], [0.540302277, 0.999949991]]> : tensor<2x2xf32>
// CHECK-NEXT: return %[[C]]
train.param @inv_freq {source = #train<source inline>, file = "m.onnx", value = dense<[1.0, 0.01]> : tensor<2xf32>} : tensor<2xf32>
func.func @rotary_tables() -> tensor<2x2xf32> {
  %inv = train.param.load @inv_freq : tensor<2xf32>
  %z = train.constant dense<0> : tensor<i64>
  %n = train.constant dense<2> : tensor<i64>
  %one = train.constant dense<1> : tensor<i64>
  %p = train.range %z, %n, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<2xi64>
  %pf = train.cast %p {to = f32} : (tensor<2xi64>) -> tensor<2xf32>
  %pc = train.unsqueeze %pf {axes = array<i64: 1>} : (tensor<2xf32>) -> tensor<2x1xf32>
  %ir = train.unsqueeze %inv {axes = array<i64: 0>} : (tensor<2xf32>) -> tensor<1x2xf32>
  %f = train.matmul %pc, %ir : (tensor<2x1xf32>, tensor<1x2xf32>) -> tensor<2x2xf32>
  %c = train.cos %f : (tensor<2x2xf32>) -> tensor<2x2xf32>
  return %c : tensor<2x2xf32>
}

// -----

// Nothing that depends on a trainable weight or an input folds.
// CHECK-LABEL: func @trainable_not_folded
// CHECK: %[[W:.+]] = train.param.load @w
// CHECK: train.mul %[[W]]
// CHECK: train.add %arg0
train.param @w {source = #train<source inline>, file = "m.onnx", trainable} : tensor<4xf32>
func.func @trainable_not_folded(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %w = train.param.load @w : tensor<4xf32>
  %c = train.constant dense<2.0> : tensor<f32>
  %m = train.mul %w, %c : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %a = train.add %x, %c : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %m, %a : tensor<4xf32>, tensor<4xf32>
}

// -----

// Identity, no-op casts, inactive Dropout, inverse transposes and a concat
// of one part disappear.
// CHECK-LABEL: func @value_preserving
// CHECK-NEXT: return %arg0, %arg0, %arg0, %arg0, %arg0, %arg0
func.func @value_preserving(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %i = train.identity %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %c = train.cast %x {to = f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %cl = train.cast_like %x, %x : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %d = train.dropout %x {ratio = 0.0 : f32, training} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %t1 = train.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %t2 = train.transpose %t1 {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  %k = train.concat %x {axis = -1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %i, %c, %cl, %d, %t2, %k : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}

// -----

// Dropout that is active stays.
// CHECK-LABEL: func @active_dropout
// CHECK: train.dropout
func.func @active_dropout(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %d = train.dropout %x {ratio = 0.1 : f32, training} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %d : tensor<2x3xf32>
}

// -----

// sequence_at(split_to_sequence) becomes a split.
// CHECK-LABEL: func @sequence
// CHECK: %[[S:.+]]:2 = train.split %arg0 {axis = 0 : i64, sizes = array<i64: 1, 1>}
// CHECK-NOT: train.sequence_at
// CHECK: return %[[S]]#1
func.func @sequence(%x: tensor<2x4xf32>) -> tensor<1x4xf32> {
  %s = train.split_to_sequence %x {axis = 0 : i64, sizes = array<i64: 1, 1>} : (tensor<2x4xf32>) -> !train.seq<tensor<1x4xf32>, tensor<1x4xf32>>
  %a = train.sequence_at %s {position = -1 : i64} : (!train.seq<tensor<1x4xf32>, tensor<1x4xf32>>) -> tensor<1x4xf32>
  return %a : tensor<1x4xf32>
}

// -----

// Label shifting on constants: Pad then Slice, Where, Equal, CumSum.
// CHECK-LABEL: func @integer_ops
// CHECK-NEXT: %[[C:.+]] = train.constant dense<[2, 3, -100]> : tensor<3xi64>
// CHECK-NEXT: %[[E:.+]] = train.constant dense<[false, true, false]> : tensor<3xi1>
// CHECK-NEXT: %[[S:.+]] = train.constant dense<[1, 3, 6]> : tensor<3xi64>
// CHECK-NEXT: return %[[C]], %[[E]], %[[S]]
func.func @integer_ops() -> (tensor<3xi64>, tensor<3xi1>, tensor<3xi64>) {
  %x = train.constant dense<[1, 2, 3]> : tensor<3xi64>
  %p = train.constant dense<[0, 1]> : tensor<2xi64>
  %v = train.constant dense<-100> : tensor<i64>
  %pad = train.pad %x, %p, %v : (tensor<3xi64>, tensor<2xi64>, tensor<i64>) -> tensor<4xi64>
  %one = train.constant dense<1> : tensor<1xi64>
  %end = train.constant dense<9223372036854775807> : tensor<1xi64>
  %zero = train.constant dense<0> : tensor<1xi64>
  %sl = train.slice %pad, %one, %end, %zero, %one : (tensor<4xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3xi64>
  %two = train.constant dense<2> : tensor<i64>
  %eq = train.equal %x, %two : (tensor<3xi64>, tensor<i64>) -> tensor<3xi1>
  %cs = train.cumsum %x {axis = 0 : i64} : (tensor<3xi64>) -> tensor<3xi64>
  return %sl, %eq, %cs : tensor<3xi64>, tensor<3xi1>, tensor<3xi64>
}

// -----

// A CastLike of a constant folds whatever its second operand (only its type
// matters): torch.histc's bounds cast like the ids they bound.
// CHECK-LABEL: func @cast_like_of_a_constant
// CHECK: %[[B:.+]] = train.constant dense<4.000000e+00> : tensor<1xf32>
// CHECK: train.less_or_equal %arg0, %[[B]]
func.func @cast_like_of_a_constant(%x: tensor<8xf32>) -> tensor<8xi1> {
  %c = train.constant dense<4> : tensor<1xi64>
  %b = train.cast_like %c, %x : (tensor<1xi64>, tensor<8xf32>) -> tensor<1xf32>
  %m = train.less_or_equal %x, %b : (tensor<8xf32>, tensor<1xf32>) -> tensor<8xi1>
  return %m : tensor<8xi1>
}
