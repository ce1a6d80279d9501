// RUN: mt-opt --split-input-file --mt-fuse-ops='explain=true' --mt-fold-constants --mt-explain-fusion --verify-diagnostics %s | FileCheck %s
// One remark at each op left unfused (a primitive kernel of the step),
// naming why each pattern that started there did not match; the ops a
// fused op took, folded layout pairs and constants get none, and the
// reasons do not stay in the IR.

// CHECK-NOT: train.unfused

func.func @not_a_weight(%x: tensor<2x8xf32>, %y: tensor<8x4xf32>) -> tensor<2x4xf32> {
  // expected-remark @below {{train.matmul left unfused: linear: the right operand is not a weight or a weight's transpose; experts: neither operand is a GatherND; attention: not softmax(...) over the last dim times v, in 4-D}}
  %m = train.matmul %x, %y : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  return %m : tensor<2x4xf32>
}

// -----

train.param @w {source = #train<source inline>, file = "m", trainable} : tensor<1xf32>
func.func @norm_weight_of_another_size(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %w = train.param.load @w : tensor<1xf32>
  %two = train.constant dense<2.0> : tensor<f32>
  %eps = train.constant dense<1.0e-6> : tensor<f32>
  // expected-remark @below {{train.pow left unfused: no pattern starts at it}}
  %sq = train.pow %x, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  // expected-remark @below {{train.reduce_mean left unfused: no pattern starts at it}}
  %mean = train.reduce_mean %sq {axes = array<i64: -1>, keepdims} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  // expected-remark @below {{train.add left unfused: rotary: not a 4-D float add}}
  %add = train.add %mean, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  // expected-remark @below {{train.sqrt left unfused: no pattern starts at it}}
  %sqrt = train.sqrt %add : (tensor<2x1xf32>) -> tensor<2x1xf32>
  // expected-remark @below {{train.reciprocal left unfused: no pattern starts at it}}
  %rec = train.reciprocal %sqrt : (tensor<2x1xf32>) -> tensor<2x1xf32>
  // expected-remark @below {{train.mul left unfused: norm: no x * rsqrt(mean(x^2) + eps) times a 1-D weight of the last dim; activation: neither GELU nor x * sigmoid(x); activation: no single-use activation times a tensor of its type}}
  %n = train.mul %x, %rec : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  // expected-remark @below {{train.mul left unfused: norm: no x * rsqrt(mean(x^2) + eps) times a 1-D weight of the last dim; activation: neither GELU nor x * sigmoid(x); activation: no single-use activation times a tensor of its type}}
  %y = train.mul %n, %w : (tensor<2x8xf32>, tensor<1xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// A safe softmax over a mask with -inf that is not causal: a row could be
// all -inf, where the safe softmax gives 0 and the fused op NaN. IsNaN's
// booleans are not floats: no remark.
func.func @safe_softmax_over_an_inf_mask(%q: tensor<1x1x2x4xf32>, %k: tensor<1x1x2x4xf32>, %v: tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32> {
  // expected-remark @below {{train.transpose left unfused: no pattern starts at it}}
  %kt = train.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x1x2x4xf32>) -> tensor<1x1x4x2xf32>
  // expected-remark @below {{train.matmul left unfused: linear: not [..., K] x [K, N]; experts: neither operand is a GatherND; attention: not softmax(...) over the last dim times v, in 4-D}}
  %s = train.matmul %q, %kt : (tensor<1x1x2x4xf32>, tensor<1x1x4x2xf32>) -> tensor<1x1x2x2xf32>
  %mask = train.constant dense<[[0xFF800000, 0xFF800000], [0.0, 0.0]]> : tensor<2x2xf32>
  // expected-remark @below {{train.add left unfused: rotary: no x * cos + rotate_half(x) * sin with [S, D] or [B, S, D] tables}}
  %a = train.add %s, %mask : (tensor<1x1x2x2xf32>, tensor<2x2xf32>) -> tensor<1x1x2x2xf32>
  // expected-remark @below {{train.softmax left unfused: no pattern starts at it}}
  %p = train.softmax %a {axis = -1 : i64} : (tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %nan = train.is_nan %p : (tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xi1>
  %zero = train.constant dense<0.0> : tensor<f32>
  // expected-remark @below {{train.where left unfused: no pattern starts at it}}
  %safe = train.where %nan, %zero, %p : (tensor<1x1x2x2xi1>, tensor<f32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  // expected-remark @below {{train.matmul left unfused: linear: not [..., K] x [K, N]; experts: neither operand is a GatherND; attention: a safe softmax over a mask that may hide a whole row with -inf}}
  %o = train.matmul %safe, %v : (tensor<1x1x2x2xf32>, tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32>
  return %o : tensor<1x1x2x4xf32>
}

// -----

// A linear on a transposed weight fuses: neither the transpose nor the
// MatMul it took is named; a transpose pair that cancels folds away first;
// a dead op is not part of the step.
train.param @w {source = #train<source inline>, file = "m", trainable} : tensor<4x8xf32>
func.func @fused_and_folded(%x: tensor<2x8xf32>) -> tensor<2x4xf32> {
  %w = train.param.load @w : tensor<4x8xf32>
  %t = train.transpose %w {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %y = train.matmul %x, %t : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  %a = train.transpose %y {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %b = train.transpose %a {perm = array<i64: 1, 0>} : (tensor<4x2xf32>) -> tensor<2x4xf32>
  %dead = train.tanh %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return %b : tensor<2x4xf32>
}

// -----

// A MatMul of gathered expert matrices with something that is not one row
// per matrix stays a batched MatMul.
func.func @gathered_not_rows(%w: tensor<4x6x3xf32>, %i: tensor<5x1xi64>, %r: tensor<5x3x2xf32>) -> tensor<5x6x2xf32> {
  // expected-remark @below {{train.gather_nd left unfused: no pattern starts at it}}
  %g = train.gather_nd %w, %i {batch_dims = 0 : i64} : (tensor<4x6x3xf32>, tensor<5x1xi64>) -> tensor<5x6x3xf32>
  // expected-remark @below {{train.matmul left unfused: linear: not [..., K] x [K, N]; experts: the other operand is not one row per gathered matrix; attention: not softmax(...) over the last dim times v, in 4-D}}
  %m = train.matmul %g, %r : (tensor<5x6x3xf32>, tensor<5x3x2xf32>) -> tensor<5x6x2xf32>
  return %m : tensor<5x6x2xf32>
}
