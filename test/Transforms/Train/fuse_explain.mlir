// RUN: mt-opt --split-input-file --mt-fuse-ops='explain=true' --verify-diagnostics %s
// Why an exporter pattern did not become a fused op, said at the op.

func.func @not_a_weight(%x: tensor<2x8xf32>, %y: tensor<8x4xf32>) -> tensor<2x4xf32> {
  // expected-remark @below {{linear not fused: the right operand is not a weight or a weight's transpose}}
  // expected-remark @below {{attention not fused: not softmax(...) over the last dim times v, in 4-D}}
  %m = train.matmul %x, %y : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  return %m : tensor<2x4xf32>
}

// -----

func.func @norm_weight_of_another_size(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %w = train.weight "w" {source = #train<source inline>, file = "m", trainable} : tensor<1xf32>
  %two = train.constant dense<2.0> : tensor<f32>
  %eps = train.constant dense<1.0e-6> : tensor<f32>
  %sq = train.pow %x, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %mean = train.reduce_mean %sq {axes = array<i64: -1>, keepdims} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  // expected-remark @below {{rotary not fused: not a 4-D float add}}
  %add = train.add %mean, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %sqrt = train.sqrt %add : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %rec = train.reciprocal %sqrt : (tensor<2x1xf32>) -> tensor<2x1xf32>
  // expected-remark @below {{norm not fused: no x * rsqrt(mean(x^2) + eps) times a 1-D weight of the last dim}}
  // expected-remark @below {{activation not fused: neither GELU nor x * sigmoid(x)}}
  // expected-remark @below {{activation not fused: no single-use activation times a tensor of its type}}
  %n = train.mul %x, %rec : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  // expected-remark @below {{norm not fused: no x * rsqrt(mean(x^2) + eps) times a 1-D weight of the last dim}}
  // expected-remark @below {{activation not fused: neither GELU nor x * sigmoid(x)}}
  // expected-remark @below {{activation not fused: no single-use activation times a tensor of its type}}
  %y = train.mul %n, %w : (tensor<2x8xf32>, tensor<1xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// A safe softmax over a mask with -inf that is not causal: a row could be
// all -inf, where the safe softmax gives 0 and the fused op NaN.
func.func @safe_softmax_over_an_inf_mask(%q: tensor<1x1x2x4xf32>, %k: tensor<1x1x2x4xf32>, %v: tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32> {
  %kt = train.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x1x2x4xf32>) -> tensor<1x1x4x2xf32>
  // expected-remark @below {{linear not fused: not [..., K] x [K, N]}}
  // expected-remark @below {{attention not fused: not softmax(...) over the last dim times v, in 4-D}}
  %s = train.matmul %q, %kt : (tensor<1x1x2x4xf32>, tensor<1x1x4x2xf32>) -> tensor<1x1x2x2xf32>
  %mask = train.constant dense<[[0xFF800000, 0xFF800000], [0.0, 0.0]]> : tensor<2x2xf32>
  // expected-remark @below {{rotary not fused: no x * cos + rotate_half(x) * sin with [S, D] or [B, S, D] tables}}
  %a = train.add %s, %mask : (tensor<1x1x2x2xf32>, tensor<2x2xf32>) -> tensor<1x1x2x2xf32>
  %p = train.softmax %a {axis = -1 : i64} : (tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %nan = train.is_nan %p : (tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xi1>
  %zero = train.constant dense<0.0> : tensor<f32>
  %safe = train.where %nan, %zero, %p : (tensor<1x1x2x2xi1>, tensor<f32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  // expected-remark @below {{linear not fused: not [..., K] x [K, N]}}
  // expected-remark @below {{attention not fused: a safe softmax over a mask that may hide a whole row with -inf}}
  %o = train.matmul %safe, %v : (tensor<1x1x2x2xf32>, tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32>
  return %o : tensor<1x1x2x4xf32>
}
