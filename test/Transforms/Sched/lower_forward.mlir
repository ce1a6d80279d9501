// RUN: mt-opt --mt-lower-to-sched %s | FileCheck %s
// RUN: mt-opt --mt-lower-to-sched=compute-dtype=bf16 %s | FileCheck %s --check-prefix=BF16
// RUN: not mt-opt --mt-lower-to-sched=grad-accum=2 %s 2>&1 | FileCheck %s --check-prefix=ACCUM
// ACCUM: error: a forward step runs one micro-batch: grad-accum must be 1

// Without a training step, the forward step is lowered into a forward-only
// program: no tokens input, so no batch, seq or vocab; a frozen weight's
// master and device copy and nothing else (no gradient, no moments, no
// AdamW); the given tensor and the outputs in buffers of their own.
// CHECK-LABEL: sched.program
// CHECK-SAME: batch = 0 : i64
// CHECK-SAME: forward_only = true
// CHECK-SAME: vocab = 0 : i64
// CHECK-DAG: %[[X:.+]] = sched.buffer "x" in @device at -1 : <tensor<2x4xf32>>
// CHECK-DAG: sched.parameter "w" master(%{{.+}}) {file = "m.onnx", length = 64 : i64, offset = 0 : i64}
// CHECK-DAG: sched.input "x" role data(%[[X]])
// CHECK-DAG: sched.output "y"(%[[Y:.+]]) : <tensor<2x4xf32>>
// CHECK-DAG: sched.output "positive"(%{{.+}}) : <tensor<2x4xi1>>
// CHECK-NOT: adamw
// CHECK-NOT: sched.loss
// The given float is stored as the ops compute; the boolean stays one.
// BF16-DAG: sched.buffer "x" in @device at -1 : <tensor<2x4xbf16>>
// BF16-DAG: sched.output "positive"(%{{.+}}) : <tensor<2x4xi1>>
train.param @w {source = #train<source inline>, file = "m.onnx", offset = 0 : i64, length = 64 : i64} : tensor<4x4xf32>
func.func @forward_step(%x: tensor<2x4xf32> {train.name = "x", train.role = #train<role data>}) -> (tensor<2x4xf32> {train.name = "y", train.output}, tensor<2x4xi1> {train.name = "positive", train.output}) {
  %w = train.param.load @w : tensor<4x4xf32>
  %y = train.linear %x, %w {layout = #train<layout out_in>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %zero = train.constant dense<0.0> : tensor<f32>
  %p = train.greater %y, %zero : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xi1>
  return %y, %p : tensor<2x4xf32>, tensor<2x4xi1>
}
