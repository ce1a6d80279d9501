// RUN: mt-opt --mt-lower-to-sched %s | FileCheck %s

// The program's batch and seq are the tokens input's, [2, 4], not those of
// a later input of rank 2 (targets of [2, 8] here, which the mapping from
// the last rank-2 argument used to take).
// CHECK-LABEL: sched.program
// CHECK-SAME: batch = 2 : i64
// CHECK-SAME: seq = 4 : i64
train.param @emb {source = #train<source inline>, file = "m", trainable} : tensor<16x8xf32>
func.func @train_step(%ids: tensor<2x4xi64> {train.name = "ids", train.role = #train<role tokens>}, %x: tensor<2x8xf32> {train.name = "x", train.role = #train<role targets>}) -> (tensor<f32> {train.loss}) {
  %w = train.param.load @emb : tensor<16x8xf32>
  %h = train.embedding %w, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %l = train.cross_entropy %h, %ids {ignore_index = -100 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<f32>
  return %l : tensor<f32>
}
