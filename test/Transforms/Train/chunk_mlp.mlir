// RUN: mt-opt --split-input-file --mt-chunk-mlp=chunk-rows=4 %s | FileCheck %s

// A layer's gradient function: the recomputed forward and the backward of
// its MLP become the chunked pair; the forward that only led to the
// layer's (unread) output goes, and so do the [rows, hidden] values.
// CHECK-LABEL: func.func private @layer_grad
// CHECK-NOT: train.gated_activation
// CHECK-NOT: train.gated_mlp %
// CHECK: %[[DX:.+]], %[[DG:.+]], %[[DU:.+]], %[[DD:.+]] = train.gated_mlp_grad %arg0, %arg1, %arg2, %arg3, %arg4 {act = #train<act silu>, chunk_rows = 4 : i64, layout = #train<layout out_in>}
// CHECK-NOT: train.linear
// CHECK-NOT: train.add
// CHECK: return %[[DX]], %[[DG]], %[[DU]], %[[DD]]
func.func private @layer_grad(%x: tensor<2x8x4xf32>, %wg: tensor<16x4xf32>, %wu: tensor<16x4xf32>, %wd: tensor<4x16xf32>, %dy: tensor<2x8x4xf32>) -> (tensor<2x8x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>, tensor<4x16xf32>) {
  %g = train.linear %x, %wg {layout = #train<layout out_in>} : (tensor<2x8x4xf32>, tensor<16x4xf32>) -> tensor<2x8x16xf32>
  %u = train.linear %x, %wu {layout = #train<layout out_in>} : (tensor<2x8x4xf32>, tensor<16x4xf32>) -> tensor<2x8x16xf32>
  %a = train.gated_activation %g, %u {act = #train<act silu>} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %y = train.linear %a, %wd {layout = #train<layout out_in>} : (tensor<2x8x16xf32>, tensor<4x16xf32>) -> tensor<2x8x4xf32>
  %out = train.add %x, %y : (tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  %da, %dwd = train.linear_grad %a, %wd, %dy {layout = #train<layout out_in>} : (tensor<2x8x16xf32>, tensor<4x16xf32>, tensor<2x8x4xf32>) -> (tensor<2x8x16xf32>, tensor<4x16xf32>)
  %dg, %du = train.gated_activation_grad %g, %u, %da {act = #train<act silu>} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>)
  %dxu, %dwu = train.linear_grad %x, %wu, %du {layout = #train<layout out_in>} : (tensor<2x8x4xf32>, tensor<16x4xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x4xf32>, tensor<16x4xf32>)
  %dxg, %dwg = train.linear_grad %x, %wg, %dg {layout = #train<layout out_in>} : (tensor<2x8x4xf32>, tensor<16x4xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x4xf32>, tensor<16x4xf32>)
  %dx = train.add %dxu, %dxg : (tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  return %dx, %dwg, %dwu, %dwd : tensor<2x8x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>, tensor<4x16xf32>
}

// -----

// A forward alone (a layer's, in_out weights, gelu_tanh): one gated_mlp,
// whose output the residual reads.
// CHECK-LABEL: func.func private @layer
// CHECK: %[[Y:.+]] = train.gated_mlp %arg0, %arg1, %arg2, %arg3 {act = #train<act gelu_tanh>, chunk_rows = 4 : i64, layout = #train<layout in_out>}
// CHECK-NEXT: %[[R:.+]] = train.add %arg0, %[[Y]]
// CHECK-NEXT: return %[[R]]
func.func private @layer(%x: tensor<8x4xf32>, %wg: tensor<4x16xf32>, %wu: tensor<4x16xf32>, %wd: tensor<16x4xf32>) -> tensor<8x4xf32> {
  %g = train.linear %x, %wg {layout = #train<layout in_out>} : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %u = train.linear %x, %wu {layout = #train<layout in_out>} : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %a = train.gated_activation %g, %u {act = #train<act gelu_tanh>} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %y = train.linear %a, %wd {layout = #train<layout in_out>} : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  %out = train.add %x, %y : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  return %out : tensor<8x4xf32>
}

// -----

// An intermediate with another reader (the activation is returned) keeps
// the MLP as it is.
// CHECK-LABEL: func.func @returned
// CHECK-NOT: train.gated_mlp
// CHECK: train.gated_activation
func.func @returned(%x: tensor<8x4xf32>, %wg: tensor<16x4xf32>, %wu: tensor<16x4xf32>, %wd: tensor<4x16xf32>) -> (tensor<8x4xf32>, tensor<8x16xf32>) {
  %g = train.linear %x, %wg {layout = #train<layout out_in>} : (tensor<8x4xf32>, tensor<16x4xf32>) -> tensor<8x16xf32>
  %u = train.linear %x, %wu {layout = #train<layout out_in>} : (tensor<8x4xf32>, tensor<16x4xf32>) -> tensor<8x16xf32>
  %a = train.gated_activation %g, %u {act = #train<act silu>} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %y = train.linear %a, %wd {layout = #train<layout out_in>} : (tensor<8x16xf32>, tensor<4x16xf32>) -> tensor<8x4xf32>
  return %y, %a : tensor<8x4xf32>, tensor<8x16xf32>
}

// -----

// Gate and up from different inputs are not one MLP.
// CHECK-LABEL: func.func @two_inputs
// CHECK-NOT: train.gated_mlp
func.func @two_inputs(%x: tensor<8x4xf32>, %z: tensor<8x4xf32>, %wg: tensor<16x4xf32>, %wu: tensor<16x4xf32>, %wd: tensor<4x16xf32>) -> tensor<8x4xf32> {
  %g = train.linear %x, %wg {layout = #train<layout out_in>} : (tensor<8x4xf32>, tensor<16x4xf32>) -> tensor<8x16xf32>
  %u = train.linear %z, %wu {layout = #train<layout out_in>} : (tensor<8x4xf32>, tensor<16x4xf32>) -> tensor<8x16xf32>
  %a = train.gated_activation %g, %u {act = #train<act silu>} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %y = train.linear %a, %wd {layout = #train<layout out_in>} : (tensor<8x16xf32>, tensor<4x16xf32>) -> tensor<8x4xf32>
  return %y : tensor<8x4xf32>
}

// -----

// A backward whose input gradients are not summed on their own (a third
// term joins the first add) keeps its ops, and so does its forward, whose
// intermediates that backward reads.
// CHECK-LABEL: func.func @other_sum
// CHECK-NOT: train.gated_mlp
// CHECK: train.gated_activation %
// CHECK: train.gated_activation_grad
func.func @other_sum(%x: tensor<8x4xf32>, %wg: tensor<16x4xf32>, %wu: tensor<16x4xf32>, %wd: tensor<4x16xf32>, %dy: tensor<8x4xf32>, %other: tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>) {
  %g = train.linear %x, %wg {layout = #train<layout out_in>} : (tensor<8x4xf32>, tensor<16x4xf32>) -> tensor<8x16xf32>
  %u = train.linear %x, %wu {layout = #train<layout out_in>} : (tensor<8x4xf32>, tensor<16x4xf32>) -> tensor<8x16xf32>
  %a = train.gated_activation %g, %u {act = #train<act silu>} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %y = train.linear %a, %wd {layout = #train<layout out_in>} : (tensor<8x16xf32>, tensor<4x16xf32>) -> tensor<8x4xf32>
  %da, %dwd = train.linear_grad %a, %wd, %dy {layout = #train<layout out_in>} : (tensor<8x16xf32>, tensor<4x16xf32>, tensor<8x4xf32>) -> (tensor<8x16xf32>, tensor<4x16xf32>)
  %dg, %du = train.gated_activation_grad %g, %u, %da {act = #train<act silu>} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>)
  %dxu, %dwu = train.linear_grad %x, %wu, %du {layout = #train<layout out_in>} : (tensor<8x4xf32>, tensor<16x4xf32>, tensor<8x16xf32>) -> (tensor<8x4xf32>, tensor<16x4xf32>)
  %dxg, %dwg = train.linear_grad %x, %wg, %dg {layout = #train<layout out_in>} : (tensor<8x4xf32>, tensor<16x4xf32>, tensor<8x16xf32>) -> (tensor<8x4xf32>, tensor<16x4xf32>)
  %s = train.add %other, %dxu : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %dx = train.add %s, %dxg : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  return %y, %dx : tensor<8x4xf32>, tensor<8x4xf32>
}
