// RUN: mt-opt --split-input-file --canonicalize %s | FileCheck %s

// The train ops' canonicalization patterns (dialects/Train/IR/Canonicalize.cpp),
// which the front end runs after fusion.

// A fused projection's output cut into parts (Phi-3's qkv_proj): each Slice
// of the activation becomes a Split that keeps its part; a negative start
// and an end past the dim are clamped as ONNX does. A stepped Slice stays.
// CHECK-LABEL: func @slices_of_a_fused_projection
// CHECK-SAME: (%[[L:.+]]: tensor<2x3x16xf32>)
// CHECK: %[[Q:.+]]:2 = train.split %[[L]] {axis = 2 : i64, sizes = array<i64: 8, 8>}
// CHECK: %[[K:.+]]:3 = train.split %[[L]] {axis = 2 : i64, sizes = array<i64: 8, 4, 4>}
// CHECK: %[[V:.+]]:2 = train.split %[[L]] {axis = 2 : i64, sizes = array<i64: 12, 4>}
// CHECK: %[[S:.+]] = train.slice %[[L]]
// CHECK: return %[[Q]]#0, %[[K]]#1, %[[V]]#1, %[[S]]
func.func @slices_of_a_fused_projection(%y: tensor<2x3x16xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x8xf32>) {
  %axis = train.constant dense<[2]> : tensor<1xi64>
  %one = train.constant dense<[1]> : tensor<1xi64>
  %two = train.constant dense<[2]> : tensor<1xi64>
  %s0 = train.constant dense<[0]> : tensor<1xi64>
  %s8 = train.constant dense<[8]> : tensor<1xi64>
  %s12 = train.constant dense<[12]> : tensor<1xi64>
  %m4 = train.constant dense<[-4]> : tensor<1xi64>
  %big = train.constant dense<[9223372036854775807]> : tensor<1xi64>
  %q = train.slice %y, %s0, %s8, %axis, %one : (tensor<2x3x16xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2x3x8xf32>
  %k = train.slice %y, %s8, %s12, %axis, %one : (tensor<2x3x16xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2x3x4xf32>
  %v = train.slice %y, %m4, %big, %axis, %one : (tensor<2x3x16xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2x3x4xf32>
  %e = train.slice %y, %s0, %big, %axis, %two : (tensor<2x3x16xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2x3x8xf32>
  return %q, %k, %v, %e : tensor<2x3x8xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x8xf32>
}

// -----

// An empty Slice (the pass-through part of a rotary over the whole head)
// and the Concat that would carry it: the Concat is its other part.
// CHECK-LABEL: func @empty_slice
// CHECK-NOT: train.slice
// CHECK-NOT: train.concat
// CHECK: return %arg0
func.func @empty_slice(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %axis = train.constant dense<[1]> : tensor<1xi64>
  %one = train.constant dense<[1]> : tensor<1xi64>
  %s8 = train.constant dense<[8]> : tensor<1xi64>
  %big = train.constant dense<[9223372036854775807]> : tensor<1xi64>
  %p = train.slice %x, %s8, %big, %axis, %one : (tensor<2x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2x0xf32>
  %c = train.concat %x, %p {axis = 1 : i64} : (tensor<2x8xf32>, tensor<2x0xf32>) -> tensor<2x8xf32>
  return %c : tensor<2x8xf32>
}
