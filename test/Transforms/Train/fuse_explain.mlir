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
