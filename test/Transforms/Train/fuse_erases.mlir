// mt-fuse-ops alone: each match replaces the op it started from and erases
// the ops it left dead; what other ops still read stays.
// RUN: mt-opt --split-input-file --mt-fuse-ops %s | FileCheck %s

// The transpose, the matmul and the add go.
// CHECK-LABEL: func @linear_leaves_nothing
// CHECK-NEXT: %[[W:.+]] = train.param.load @w
// CHECK-NEXT: %[[B:.+]] = train.param.load @b
// CHECK-NEXT: %[[L:.+]] = train.linear %arg0, %[[W]], %[[B]] {layout = #train<layout out_in>}
// CHECK-NEXT: return %[[L]]
train.param @w {source = #train<source inline>, file = "m", trainable} : tensor<4x8xf32>
train.param @b {source = #train<source inline>, file = "m", trainable} : tensor<4xf32>
func.func @linear_leaves_nothing(%x: tensor<2x8xf32>) -> tensor<2x4xf32> {
  %w = train.param.load @w : tensor<4x8xf32>
  %b = train.param.load @b : tensor<4xf32>
  %t = train.transpose %w {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %m = train.matmul %x, %t : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  %y = train.add %m, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

// The whole RMSNorm chain goes, its constants with it.
// CHECK-LABEL: func @rms_norm_leaves_nothing
// CHECK-NEXT: %[[W:.+]] = train.param.load @n
// CHECK-NEXT: %[[N:.+]] = train.rms_norm %arg0, %[[W]]
// CHECK-NEXT: return %[[N]]
train.param @n {source = #train<source inline>, file = "m", trainable} : tensor<8xf32>
func.func @rms_norm_leaves_nothing(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %w = train.param.load @n : tensor<8xf32>
  %two = train.constant dense<2.0> : tensor<f32>
  %p = train.pow %x, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %m = train.reduce_mean %p {axes = array<i64: -1>, keepdims} : (tensor<2x8xf32>) -> tensor<2x1xf32>
  %eps = train.constant dense<1.0e-6> : tensor<f32>
  %a = train.add %m, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %s = train.sqrt %a : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %r = train.reciprocal %s : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %n = train.mul %x, %r : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %y = train.mul %w, %n : (tensor<8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// A transpose another op reads stays; the matmul goes. An op dead from the
// start is no match's to erase (the canonicalizer after does).
// CHECK-LABEL: func @shared_producer_stays
// CHECK-NEXT: %[[W:.+]] = train.param.load @w
// CHECK-NEXT: %[[T:.+]] = train.transpose %[[W]]
// CHECK-NEXT: train.sqrt %arg0
// CHECK-NEXT: %[[L:.+]] = train.linear %arg0, %[[W]] {layout = #train<layout out_in>}
// CHECK-NEXT: return %[[L]], %[[T]]
train.param @w {source = #train<source inline>, file = "m", trainable} : tensor<4x8xf32>
func.func @shared_producer_stays(%x: tensor<2x8xf32>) -> (tensor<2x4xf32>, tensor<8x4xf32>) {
  %w = train.param.load @w : tensor<4x8xf32>
  %t = train.transpose %w {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %dead = train.sqrt %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %m = train.matmul %x, %t : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  return %m, %t : tensor<2x4xf32>, tensor<8x4xf32>
}
