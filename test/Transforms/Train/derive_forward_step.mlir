// RUN: mt-opt --mt-derive-forward-step %s | FileCheck %s

// The forward step is the model as it is: no gradient, every weight frozen
// (trainable no more), each input without a role given by the caller
// (data; the tokens keep theirs), and each result an output, the loss too.
// CHECK: train.param @w {file = "m", source = #train<source inline>} : tensor<4x4xf32>
// CHECK-LABEL: func.func @forward_step(
// CHECK-SAME: %{{.+}}: tensor<2x4xf32> {train.name = "x", train.role = #train<role data>}
// CHECK-SAME: %{{.+}}: tensor<2xi64> {train.name = "ids", train.role = #train<role tokens>}
// CHECK-SAME: -> (tensor<f32> {train.loss, train.output}, tensor<2x4xf32> {train.name = "y", train.output})
// CHECK: train.linear
// CHECK-NOT: _grad
// CHECK: return
train.param @w {source = #train<source inline>, file = "m", trainable} : tensor<4x4xf32>
func.func @model(%x: tensor<2x4xf32> {train.name = "x"}, %ids: tensor<2xi64> {train.name = "ids", train.role = #train<role tokens>}) -> (tensor<f32> {train.loss}, tensor<2x4xf32> {train.name = "y"}) {
  %w = train.param.load @w : tensor<4x4xf32>
  %y = train.linear %x, %w {layout = #train<layout out_in>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %l = train.cross_entropy %y, %ids {ignore_index = -100 : i64} : (tensor<2x4xf32>, tensor<2xi64>) -> tensor<f32>
  return %l, %y : tensor<f32>, tensor<2x4xf32>
}

