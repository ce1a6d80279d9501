// RUN: not mt-opt --split-input-file --mt-derive-training-step %s 2>&1 | FileCheck %s

// An op without a gradient rule on the path from a weight to the loss is
// named, with its ONNX node.
train.param @w {source = #train<source inline>, file = "m", trainable} : tensor<2x4xf32>
func.func @model(%x: tensor<2x4xf32>, %t: tensor<2xi64>) -> (tensor<f32> {train.loss}) {
  %w = train.param.load @w : tensor<2x4xf32>
  %a = train.add %x, %w : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK: m.onnx:0:0: error: no gradient rule for 'train.dropout' (ONNX node 'node_dropout'); it lies on a path from a trainable weight to the loss
  %s = train.dropout %a {ratio = 0.1 : f32, training} : (tensor<2x4xf32>) -> tensor<2x4xf32> loc("node_dropout"("m.onnx":0:0))
  %l = train.cross_entropy %s, %t {ignore_index = -100 : i64} : (tensor<2x4xf32>, tensor<2xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A loss that no trainable weight reaches cannot be trained.
// CHECK: error: the loss does not depend on any trainable weight
func.func @model(%x: tensor<2x4xf32>, %t: tensor<2xi64>) -> (tensor<f32> {train.loss}) {
  %l = train.cross_entropy %x, %t {ignore_index = -100 : i64} : (tensor<2x4xf32>, tensor<2xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A product with a 1-D operand (ONNX's vector MatMul) has no rule.
train.param @w {source = #train<source inline>, file = "m", trainable} : tensor<2x4x3xf32>
func.func @model(%x: tensor<4xf32>, %t: tensor<2xi64>) -> (tensor<f32> {train.loss}) {
  %w = train.param.load @w : tensor<2x4x3xf32>
// CHECK: error: 'train.matmul' op of a 1-D operand has no gradient rule; it lies on a path from a trainable weight to the loss
  %m = train.matmul %x, %w : (tensor<4xf32>, tensor<2x4x3xf32>) -> tensor<2x3xf32>
  %l = train.cross_entropy %m, %t {ignore_index = -100 : i64} : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<f32>
  return %l : tensor<f32>
}
