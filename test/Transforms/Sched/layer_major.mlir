// RUN: mt-opt --mt-lower-to-sched='grad-accum=2 layer-major=true' %s | FileCheck %s
// RUN: mt-opt --mt-lower-to-sched='grad-accum=3 layer-major=true compute-dtype=bf16' %s | FileCheck %s --check-prefix=BF16
// RUN: mt-opt --mt-lower-to-sched='grad-accum=2 layer-major=true' --mt-stream-weights='resident-below=0' %s > %t
// RUN: FileCheck %s --check-prefix=STREAM0 < %t
// RUN: FileCheck %s --check-prefix=STREAM1 < %t

// Layer-major: one micro_batch phase holds both micro-batches, each with its
// own inputs and loss; each group (the ops before the first call, each
// call, the ops between calls) runs over every micro-batch before the next.
// CHECK: sched.program attributes {{{.*}}grad_accum = 2 : i64, layer_major = true
// CHECK-DAG: sched.input "ids" role tokens(%[[I0:[0-9]+]]) :
// CHECK-DAG: sched.input "ids" role tokens(%[[I1:[0-9]+]]) {micro_batch = 1 : i64}
// CHECK-DAG: sched.input "t" role targets(%{{.*}}) {micro_batch = 1 : i64}
// CHECK-DAG: sched.loss(%{{.*}}) :
// CHECK-DAG: sched.loss(%{{.*}}) {micro_batch = 1 : i64}
// CHECK-DAG: %[[G0:.+]] = sched.buffer "w0.grad" in @host
// CHECK-DAG: %[[G1:.+]] = sched.buffer "w1.grad" in @host
// CHECK-DAG: %[[S1:.+]] = sched.buffer "w1.grad.staging" in @host_pinned at -1 : <tensor<8x8xf32>>
// CHECK-LABEL: sched.phase micro_batch
// CHECK-NEXT: sched.exec embedding ins(%{{.*}}, %[[I0]])
// CHECK-NEXT: sched.exec embedding ins(%{{.*}}, %[[I1]])
// CHECK-NEXT: sched.exec linear
// CHECK-NEXT: sched.exec linear
// CHECK-NEXT: sched.exec linear
// CHECK-NEXT: sched.exec linear
// The head's forward and backward of one micro-batch, then the other's.
// CHECK-NEXT: sched.exec cross_entropy ins
// CHECK-NEXT: sched.exec cross_entropy_grad
// CHECK-NEXT: sched.exec cross_entropy ins
// CHECK-NEXT: sched.exec cross_entropy_grad
// Each weight's gradient: the second micro-batch's added to the first's on
// the device, right after it is complete; one copy to the host, one
// accumulation.
// CHECK-NEXT: sched.exec linear_grad {{.*}} outs(%{{.*}}, %[[A:[0-9]+]])
// CHECK-NEXT: sched.exec linear_grad {{.*}} outs(%{{.*}}, %[[B:[0-9]+]])
// CHECK-NEXT: %[[ADD:.+]] = sched.exec add ins(%[[A]], %[[B]]) outs(%[[A]]) on @compute
// CHECK-NEXT: %[[C:.+]] = sched.exec copy_to_host ins(%[[A]]) outs(%[[S1]]) on @d2h after(%[[ADD]])
// CHECK-NEXT: sched.exec accumulate ins(%[[S1]]) outs(%[[G1]]) on @optimizer after(%[[C]])
// CHECK-NEXT: sched.exec linear_grad
// CHECK-NEXT: sched.exec linear_grad
// CHECK-NEXT: sched.exec add
// CHECK-NEXT: sched.exec copy_to_host
// CHECK-NEXT: sched.exec accumulate {{.*}} outs(%[[G0]])
// CHECK-NEXT: sched.exec embedding_grad
// CHECK-NEXT: sched.exec embedding_grad
// CHECK-NEXT: sched.exec add
// CHECK-NEXT: sched.exec copy_to_host
// CHECK-NEXT: sched.exec accumulate
// CHECK-NEXT: {{^ *}$}}

// With bf16 compute the sum is fp32, as the host's accumulation is: each
// micro-batch's gradient widened exactly, then added in micro-batch order;
// the sum leaves as fp32.
// BF16-DAG: %[[SUM:.+]] = sched.buffer "w1.grad.sum" in @device at -1 : <tensor<8x8xf32>>
// BF16-DAG: %[[W1:.+]] = sched.buffer "w1.grad.mb1.f32" in @device at -1 : <tensor<8x8xf32>>
// BF16-DAG: %[[W2:.+]] = sched.buffer "w1.grad.mb2.f32" in @device at -1 : <tensor<8x8xf32>>
// BF16-DAG: %[[ST:.+]] = sched.buffer "w1.grad.staging" in @host_pinned at -1 : <tensor<8x8xf32>>
// BF16: sched.exec linear_grad {{.*}} outs(%{{.*}}, %[[A:[0-9]+]])
// BF16-NEXT: sched.exec copy ins(%[[A]]) outs(%[[SUM]]) on @compute
// BF16-NEXT: sched.exec linear_grad {{.*}} outs(%{{.*}}, %[[B:[0-9]+]])
// BF16-NEXT: sched.exec copy ins(%[[B]]) outs(%[[W1]]) on @compute
// BF16-NEXT: sched.exec add ins(%[[SUM]], %[[W1]]) outs(%[[SUM]]) on @compute
// BF16-NEXT: sched.exec linear_grad {{.*}} outs(%{{.*}}, %[[C:[0-9]+]])
// BF16-NEXT: sched.exec copy ins(%[[C]]) outs(%[[W2]]) on @compute
// BF16-NEXT: %[[LAST:.+]] = sched.exec add ins(%[[SUM]], %[[W2]]) outs(%[[SUM]]) on @compute
// BF16-NEXT: sched.exec copy_to_host ins(%[[SUM]]) outs(%[[ST]]) on @d2h after(%[[LAST]]) {bytes = 256 : i64}

// Streamed, each weight's copies to the device are two in the one run of
// the micro-batch phase: before its forward over both micro-batches, and
// before its backward over both.
// STREAM0: %[[W0:.+]] = sched.buffer "w0" in @host
// STREAM0-LABEL: sched.phase micro_batch
// STREAM0-COUNT-2: sched.exec copy_to_device ins(%[[W0]])
// STREAM0-NOT: sched.exec copy_to_device ins(%[[W0]])
// STREAM0: sched.phase step_end
// STREAM1: %[[W1:.+]] = sched.buffer "w1" in @host
// STREAM1-LABEL: sched.phase micro_batch
// STREAM1-COUNT-2: sched.exec copy_to_device ins(%[[W1]])
// STREAM1-NOT: sched.exec copy_to_device ins(%[[W1]])
// STREAM1: sched.phase step_end

train.param @emb {source = #train<source external>, file = "m.onnx", offset = 64 : i64, length = 512 : i64, trainable} : tensor<16x8xf32>
train.param @w0 {source = #train<source external>, file = "m.onnx", offset = 576 : i64, length = 256 : i64, trainable} : tensor<8x8xf32>
train.param @w1 {source = #train<source external>, file = "m.onnx", offset = 832 : i64, length = 256 : i64, trainable} : tensor<8x8xf32>
func.func private @layer(%x: tensor<2x4x8xf32>, %w: tensor<8x8xf32> {train.param = "w"}) -> tensor<2x4x8xf32> {
  %y = train.linear %x, %w {layout = #train<layout out_in>} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}
func.func private @layer_grad(%x: tensor<2x4x8xf32>, %w: tensor<8x8xf32> {train.param = "w"}, %dy: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<8x8xf32>) {
  %dx, %dw = train.linear_grad %x, %w, %dy {layout = #train<layout out_in>} : (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<8x8xf32>)
  return %dx, %dw : tensor<2x4x8xf32>, tensor<8x8xf32>
}
func.func @train_step(%ids: tensor<2x4xi64> {train.name = "ids", train.role = #train<role tokens>},
                      %t: tensor<2x4xi64> {train.name = "t", train.role = #train<role targets>})
    -> (tensor<f32> {train.loss}, tensor<16x8xf32> {train.grad_of = "emb"}, tensor<8x8xf32> {train.grad_of = "w0"}, tensor<8x8xf32> {train.grad_of = "w1"}) {
  %e = train.param.load @emb : tensor<16x8xf32>
  %w0 = train.param.load @w0 : tensor<8x8xf32>
  %w1 = train.param.load @w1 : tensor<8x8xf32>
  %h = train.embedding %e, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %h1 = call @layer(%h, %w0) {train.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %h2 = call @layer(%h1, %w1) {train.layer = 1 : i64} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %l = train.cross_entropy %h2, %t {ignore_index = -100 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<f32>
  %one = train.constant dense<1.0> : tensor<f32>
  %dh2 = train.cross_entropy_grad %h2, %t, %one {ignore_index = -100 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi64>, tensor<f32>) -> tensor<2x4x8xf32>
  %dh1, %dw1 = call @layer_grad(%h1, %w1, %dh2) {train.layer = 1 : i64} : (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<8x8xf32>)
  %dh, %dw0 = call @layer_grad(%h, %w0, %dh1) {train.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<8x8xf32>)
  %de = train.embedding_grad %dh, %ids : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<16x8xf32>
  return %l, %de, %dw0, %dw1 : tensor<f32>, tensor<16x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>
}
