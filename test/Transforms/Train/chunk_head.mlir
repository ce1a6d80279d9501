// RUN: mt-opt --split-input-file --mt-chunk-head=chunk-rows=8 %s | FileCheck %s

// The head's linear, the loss, its gradient and the head's linear_grad
// become the chunked pair; the logits are gone.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: train.cross_entropy
// CHECK: %[[L:.+]] = train.head_cross_entropy %arg0, %arg1, %arg2 {chunk_rows = 8 : i64, ignore_index = -100 : i64, layout = #train<layout out_in>, shift}
// CHECK: %[[DX:.+]], %[[DW:.+]] = train.head_cross_entropy_grad %arg0, %arg1, %arg2, %{{.*}} {chunk_rows = 8 : i64, ignore_index = -100 : i64, layout = #train<layout out_in>, shift}
// CHECK-NOT: train.linear
// CHECK: return %[[L]], %[[DX]], %[[DW]]
func.func @train_step(%h: tensor<2x4x8xf32>, %w: tensor<16x8xf32>, %labels: tensor<2x4xi64>) -> (tensor<f32>, tensor<2x4x8xf32>, tensor<16x8xf32>) {
  %lg = train.linear %h, %w {layout = #train<layout out_in>} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %l = train.cross_entropy %lg, %labels {ignore_index = -100 : i64, shift} : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
  %one = train.constant dense<1.0> : tensor<f32>
  %dlg = train.cross_entropy_grad %lg, %labels, %one {ignore_index = -100 : i64, shift} : (tensor<2x4x16xf32>, tensor<2x4xi64>, tensor<f32>) -> tensor<2x4x16xf32>
  %dx, %dw = train.linear_grad %h, %w, %dlg {layout = #train<layout out_in>} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4x16xf32>) -> (tensor<2x4x8xf32>, tensor<16x8xf32>)
  return %l, %dx, %dw : tensor<f32>, tensor<2x4x8xf32>, tensor<16x8xf32>
}

// -----

// A head whose logits are also returned is left alone.
// CHECK-LABEL: func.func @train_step
// CHECK: train.linear
// CHECK: train.cross_entropy
func.func @train_step(%h: tensor<2x4x8xf32>, %w: tensor<16x8xf32>, %labels: tensor<2x4xi64>) -> (tensor<f32>, tensor<2x4x16xf32>) {
  %lg = train.linear %h, %w {layout = #train<layout out_in>} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %l = train.cross_entropy %lg, %labels {ignore_index = -100 : i64, shift} : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
  return %l, %lg : tensor<f32>, tensor<2x4x16xf32>
}

// -----

// A gradient that is not the loss's (here: no shift) is left alone.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: train.head_cross_entropy
// CHECK: train.cross_entropy_grad
func.func @train_step(%h: tensor<2x4x8xf32>, %w: tensor<16x8xf32>, %labels: tensor<2x4xi64>) -> (tensor<f32>, tensor<2x4x8xf32>, tensor<16x8xf32>) {
  %lg = train.linear %h, %w {layout = #train<layout out_in>} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %l = train.cross_entropy %lg, %labels {ignore_index = -100 : i64, shift} : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
  %one = train.constant dense<1.0> : tensor<f32>
  %dlg = train.cross_entropy_grad %lg, %labels, %one {ignore_index = -100 : i64} : (tensor<2x4x16xf32>, tensor<2x4xi64>, tensor<f32>) -> tensor<2x4x16xf32>
  %dx, %dw = train.linear_grad %h, %w, %dlg {layout = #train<layout out_in>} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4x16xf32>) -> (tensor<2x4x8xf32>, tensor<16x8xf32>)
  return %l, %dx, %dw : tensor<f32>, tensor<2x4x8xf32>, tensor<16x8xf32>
}
