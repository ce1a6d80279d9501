// RUN: mt-opt --mt-fuse-ops='one-to-one=true' %s | FileCheck %s
// mtc --fuse none: a single op still becomes its kernel (a Gather of
// weight rows, Gemm, Gelu), every pattern of several stays in primitives
// (a MatMul on a weight's transpose, x * sigmoid(x), the norm's
// Pow/ReduceMean/Sqrt/Reciprocal/Mul).

// CHECK-LABEL: func @single_ops
// CHECK-SAME: train.role = #train<role tokens>
// CHECK: train.embedding
// CHECK: train.linear %{{.*}}, %{{.*}}, %{{.*}} {layout = #train<layout out_in>}
// CHECK: train.activation %{{.*}} {act = #train<act gelu_tanh>}
// CHECK-NOT: train.gather
// CHECK-NOT: train.gemm
train.param @emb {source = #train<source inline>, file = "m", trainable} : tensor<32x8xf32>
train.param @w {source = #train<source inline>, file = "m", trainable} : tensor<4x8xf32>
train.param @b {source = #train<source inline>, file = "m", trainable} : tensor<4xf32>
train.param @w2 {source = #train<source inline>, file = "m", trainable} : tensor<4x8xf32>
func.func @single_ops(%ids: tensor<2x4xi64>) -> tensor<2x4x4xf32> {
  %t = train.param.load @emb : tensor<32x8xf32>
  %e = train.gather %t, %ids {axis = 0 : i64} : (tensor<32x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %w = train.param.load @w : tensor<4x8xf32>
  %b = train.param.load @b : tensor<4xf32>
  %s = train.constant dense<[8, 8]> : tensor<2xi64>
  %f = train.reshape %e, %s : (tensor<2x4x8xf32>, tensor<2xi64>) -> tensor<8x8xf32>
  %g = train.gemm %f, %w, %b {transB} : (tensor<8x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  %a = train.gelu %g {tanh} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %s3 = train.constant dense<[2, 4, 4]> : tensor<3xi64>
  %y = train.reshape %a, %s3 : (tensor<8x4xf32>, tensor<3xi64>) -> tensor<2x4x4xf32>
  return %y : tensor<2x4x4xf32>
}

// CHECK-LABEL: func @patterns_stay_primitive
// CHECK: train.transpose
// CHECK: train.matmul
// CHECK: train.sigmoid
// CHECK: train.mul
// CHECK-NOT: train.linear
// CHECK-NOT: train.activation
func.func @patterns_stay_primitive(%x: tensor<2x8xf32>) -> tensor<2x4xf32> {
  %w = train.param.load @w2 : tensor<4x8xf32>
  %t = train.transpose %w {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %m = train.matmul %x, %t : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  %g = train.sigmoid %m : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %y = train.mul %m, %g : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
