// RUN: mt-opt --mt-fuse-ops %s | FileCheck %s
// RUN: mt-opt --mt-fuse-ops=one-to-one %s | FileCheck %s

// Roles from how the graph reads its inputs, whatever fusion did: the
// embedding's indices are the tokens; an input of their shape that the
// loss reads as its classes (a GatherElements' indices into the
// log-probabilities, through a slice, an unsqueeze and masking casts) is
// the labels when the graph reads it from position 1 on, else the
// targets; an input read otherwise (a mask) gets none.
// CHECK-LABEL: func.func @nll
// CHECK-SAME: %arg0: tensor<2x5xi64> {train.role = #train<role tokens>}
// CHECK-SAME: %arg1: tensor<2x5xi64> {train.role = #train<role labels>}
// CHECK-SAME: %arg2: tensor<2x5xi64> {train.role = #train<role targets>}
// CHECK-SAME: %arg3: tensor<2x5xi64>)
// The importer's mark of torch's padding_idx on the Gather becomes the
// embedding's.
// CHECK: train.embedding %{{.*}}, %arg0 {padding_idx = 2 : i64}
train.param @table {source = #train<source inline>, file = "m.onnx", offset = 0 : i64, length = 256 : i64, trainable} : tensor<16x4xf32>
func.func @nll(%ids: tensor<2x5xi64>, %labels: tensor<2x5xi64>, %targets: tensor<2x5xi64>, %mask: tensor<2x5xi64>) -> tensor<f32> {
  %table = train.param.load @table : tensor<16x4xf32>
  %one = train.constant dense<1> : tensor<1xi64>
  %zero = train.constant dense<0> : tensor<1xi64>
  %four = train.constant dense<4> : tensor<1xi64>
  %max = train.constant dense<9223372036854775807> : tensor<1xi64>
  %h = train.gather %table, %ids {axis = 0 : i64, train.padding_idx = 2 : i64} : (tensor<16x4xf32>, tensor<2x5xi64>) -> tensor<2x5x4xf32>
  %lp = train.log_softmax %h {axis = -1 : i64} : (tensor<2x5x4xf32>) -> tensor<2x5x4xf32>
  %lp4 = train.slice %lp, %zero, %four, %one, %one : (tensor<2x5x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2x4x4xf32>
  %next = train.slice %labels, %one, %max, %one, %one : (tensor<2x5xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2x4xi64>
  %idx = train.unsqueeze %next {axes = array<i64: 2>} : (tensor<2x4xi64>) -> tensor<2x4x1xi64>
  %picked = train.gather_elements %lp4, %idx {axis = 2 : i64} : (tensor<2x4x4xf32>, tensor<2x4x1xi64>) -> tensor<2x4x1xf32>
  %tidx = train.unsqueeze %targets {axes = array<i64: 2>} : (tensor<2x5xi64>) -> tensor<2x5x1xi64>
  %tpicked = train.gather_elements %lp, %tidx {axis = 2 : i64} : (tensor<2x5x4xf32>, tensor<2x5x1xi64>) -> tensor<2x5x1xf32>
  %m = train.cast %mask {to = f32} : (tensor<2x5xi64>) -> tensor<2x5xf32>
  %s1 = train.reduce_sum %picked {axes = array<i64>} : (tensor<2x4x1xf32>) -> tensor<f32>
  %s2 = train.reduce_sum %tpicked {axes = array<i64>} : (tensor<2x5x1xf32>) -> tensor<f32>
  %s3 = train.reduce_sum %m {axes = array<i64>} : (tensor<2x5xf32>) -> tensor<f32>
  %a = train.add %s1, %s2 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %loss = train.add %a, %s3 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %loss : tensor<f32>
}
