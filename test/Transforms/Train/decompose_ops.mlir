// RUN: mt-opt --split-input-file --mt-decompose-ops %s | FileCheck %s

// A Gemm that fusion left (its B is an activation, or it transposes A or
// scales) becomes its primitives: transposes where asked, a matmul, alpha
// times the product, plus beta times C.
// CHECK-LABEL: func.func @gemm_scaled(
// CHECK-SAME: %[[A:[a-z0-9]+]]: tensor<4x2xf32>, %[[B:[a-z0-9]+]]: tensor<3x4xf32>, %[[C:[a-z0-9]+]]: tensor<3xf32>
// CHECK-DAG: %[[ALPHA:.+]] = train.constant dense<2.500000e-01> : tensor<f32>
// CHECK-DAG: %[[BETA:.+]] = train.constant dense<3.000000e+00> : tensor<f32>
// CHECK-DAG: %[[TA:.+]] = train.transpose %[[A]] {perm = array<i64: 1, 0>}
// CHECK-DAG: %[[TB:.+]] = train.transpose %[[B]] {perm = array<i64: 1, 0>}
// CHECK: %[[P:.+]] = train.matmul %[[TA]], %[[TB]] : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
// CHECK: %[[S:.+]] = train.mul %[[P]], %[[ALPHA]]
// CHECK: %[[BC:.+]] = train.mul %[[C]], %[[BETA]]
// CHECK: %[[Y:.+]] = train.add %[[S]], %[[BC]] : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK: return %[[Y]]
func.func @gemm_scaled(%a: tensor<4x2xf32>, %b: tensor<3x4xf32>, %c: tensor<3xf32>) -> tensor<2x3xf32> {
  %y = train.gemm %a, %b, %c {transA, transB, alpha = 0.25 : f32, beta = 3.0 : f32} : (tensor<4x2xf32>, tensor<3x4xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

// Without C, transposes or scaling it is a matmul alone.
// CHECK-LABEL: func.func @gemm_plain(
// CHECK-NEXT: %[[P:.+]] = train.matmul %arg0, %arg1
// CHECK-NEXT: return %[[P]]
func.func @gemm_plain(%a: tensor<2x4xf32>, %b: tensor<4x3xf32>) -> tensor<2x3xf32> {
  %y = train.gemm %a, %b : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}
