// RUN: mt-opt %s --mt-outline-layers --verify-diagnostics | FileCheck %s

// A layer whose result is used (by an op after the last layer, here one
// that reads a weight without a layer number) before the layer ends cannot
// become one call: the pass says so and changes nothing.
// CHECK-LABEL: func.func @model
// CHECK-NOT: call
train.param @layers.0.a {source = #train<source inline>, file = "m", trainable} : tensor<8xf32>
train.param @layers.1.a {source = #train<source inline>, file = "m", trainable} : tensor<8xf32>
train.param @head {source = #train<source inline>, file = "m", trainable} : tensor<8xf32>
func.func @model(%h: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %n0 = train.param.load @layers.0.a : tensor<8xf32>
  %n1 = train.param.load @layers.1.a : tensor<8xf32>
  %g = train.param.load @head : tensor<8xf32>
  // expected-remark @+1 {{layer 0 is not contiguous: its result is used before the layer ends; layers are not outlined}}
  %m0 = train.mul %h, %n0 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %early = train.mul %m0, %g : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %m0b = train.mul %m0, %n0 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %m1 = train.mul %m0b, %n1 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %m1, %early : tensor<8xf32>, tensor<8xf32>
}
