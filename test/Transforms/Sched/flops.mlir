// RUN: mt-opt --mt-lower-to-sched %s | FileCheck %s

// Each exec carries its kernel's FLOPs: per element of the op's largest
// operand or result as the op's definition declares them (Train_Flops), or
// by the op's formula. The cost model and the summary's fused share read
// them.
// A linear [2, 8] x [8, 16]: 2 x 2 x 16 x 8.
// CHECK: sched.exec linear {{.*}}flops = 5.120000e+02
// A softmax: 12 per element of [2, 16].
// CHECK: sched.exec softmax {{.*}}flops = 3.840000e+02
// A reduction: 1 per element of its input [2, 16], not of its result.
// CHECK: sched.exec reduce_sum {{.*}}flops = 3.200000e+01
// A top-2 along 16: log2(2) comparisons per input element.
// CHECK: sched.exec topk {{.*}}flops = 3.200000e+01
// SiLU: the sigmoid's 10 and the product, per element.
// CHECK: sched.exec activation {{.*}}flops = 3.520000e+02
// A transpose only moves data: no FLOPs.
// CHECK: sched.exec transpose {{.*}}{attrs = {perm = array<i64: 1, 0>}, bytes = 128 : i64} :
train.param @w {source = #train<source inline>, file = "m.onnx", offset = 0 : i64, length = 512 : i64} : tensor<16x8xf32>
func.func @forward_step(%x: tensor<2x8xf32> {train.name = "x", train.role = #train<role data>}) -> (tensor<2x1xf32> {train.name = "sum", train.output}, tensor<2x2xf32> {train.name = "top", train.output}, tensor<2x16xf32> {train.name = "act", train.output}, tensor<16x2xf32> {train.name = "t", train.output}) {
  %w = train.param.load @w : tensor<16x8xf32>
  %y = train.linear %x, %w {layout = #train<layout out_in>} : (tensor<2x8xf32>, tensor<16x8xf32>) -> tensor<2x16xf32>
  %s = train.softmax %y {axis = -1 : i64} : (tensor<2x16xf32>) -> tensor<2x16xf32>
  %r = train.reduce_sum %s {axes = array<i64: -1>, keepdims} : (tensor<2x16xf32>) -> tensor<2x1xf32>
  %v, %i = train.topk %s {k = 2 : i64, axis = -1 : i64} : (tensor<2x16xf32>) -> (tensor<2x2xf32>, tensor<2x2xi64>)
  %a = train.activation %y {act = #train<act silu>} : (tensor<2x16xf32>) -> tensor<2x16xf32>
  %t = train.transpose %a {perm = array<i64: 1, 0>} : (tensor<2x16xf32>) -> tensor<16x2xf32>
  return %r, %v, %a, %t : tensor<2x1xf32>, tensor<2x2xf32>, tensor<2x16xf32>, tensor<16x2xf32>
}
