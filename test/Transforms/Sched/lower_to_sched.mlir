// RUN: mt-opt --split-input-file --mt-lower-to-sched %s | FileCheck %s
// RUN: mt-opt --split-input-file --mt-lower-to-sched=compute-dtype=bf16 %s | FileCheck %s --check-prefix=BF16
// RUN: mt-opt --split-input-file --mt-lower-to-sched='optimizer-overlap=backward grad-accum=2' %s | FileCheck %s --check-prefix=OVERLAP
// RUN: mt-opt --split-input-file --mt-lower-to-sched=optimizer-overlap=backward %s | FileCheck %s --check-prefix=ONCE
// RUN: mt-opt --split-input-file --mt-lower-to-sched='optimizer-overlap=backward compute-dtype=bf16' %s | FileCheck %s --check-prefix=ONCE16
// RUN: mt-opt --split-input-file --mt-lower-to-sched=optimizer-overlap=next-forward %s | FileCheck %s --check-prefix=NEXT
// RUN: mt-opt --split-input-file --mt-lower-to-sched=optimizer-states=8bit %s | FileCheck %s --check-prefix=Q8
// RUN: mt-opt --split-input-file --mt-lower-to-sched=optimizer-states=4bit %s | FileCheck %s --check-prefix=Q4
// RUN: not mt-opt --split-input-file --mt-lower-to-sched=optimizer-states=2bit %s 2>&1 | FileCheck %s --check-prefix=BADSTATES
// BADSTATES: mt-opt: for the --optimizer-states option: Cannot find option named '2bit'!
// RUN: mt-opt --split-input-file --mt-lower-to-sched='compute-dtype=bf16 weight-link=fp32' %s | FileCheck %s --check-prefix=LINK
// RUN: not mt-opt --split-input-file --mt-lower-to-sched=weight-link=fp16 %s 2>&1 | FileCheck %s --check-prefix=BADLINK
// BADLINK: mt-opt: for the --weight-link option: Cannot find option named 'fp16'!

// The step becomes one program: a trainable weight gets an f32 master,
// gradient accumulator and moments on the host and a device copy; the
// forward and backward run on the compute stream; each gradient goes to
// pinned memory on the d2h stream after the op that computes it, then into
// its accumulator on the optimizer stream; AdamW ends the step.
// CHECK-LABEL: sched.program
// CHECK-SAME: batch = 2 : i64, compute_dtype = f32, grad_accum = 1 : i64
// CHECK-DAG: sched.arena @device tier device
// CHECK-DAG: sched.stream @compute kind compute
// CHECK-DAG: sched.stream @d2h kind device_to_host
// CHECK-DAG: %[[W:.+]] = sched.buffer "emb" in @host at -1 : <tensor<16x8xf32>>
// CHECK-DAG: %[[G:.+]] = sched.buffer "emb.grad" in @host
// CHECK-DAG: %[[WD:.+]] = sched.buffer "emb.device" in @device
// CHECK-DAG: sched.parameter "emb" master(%[[W]]) state(%[[G]], %{{.*}}, %{{.*}}) {file = "m.onnx", length = 512 : i64, offset = 64 : i64}
// CHECK-DAG: sched.input "ids" role tokens
// CHECK-DAG: sched.input "t" role targets
// CHECK: sched.phase step_begin
// CHECK: sched.exec copy_to_device ins(%[[W]]) outs(%[[WD]]) on @h2d
// CHECK: sched.exec fill outs(%[[G]]) on @optimizer
// CHECK: sched.phase micro_batch
// CHECK: sched.exec embedding ins(%[[WD]], %{{.*}}) outs(%{{.*}}) on @compute
// CHECK: %[[T:.+]] = sched.exec embedding_grad
// CHECK: %[[C:.+]] = sched.exec copy_to_host {{.*}} on @d2h after(%[[T]])
// CHECK: sched.exec accumulate {{.*}} outs(%[[G]]) on @optimizer after(%[[C]])
// CHECK: sched.phase step_end
// CHECK: sched.exec adamw ins(%[[G]]) outs(%[[W]], {{.*}}) on @optimizer
// CHECK-NOT: func.func
// With the optimizer overlapped, AdamW follows the accumulation in the
// micro-batch, in its last repetition only, and step_end is empty.
// OVERLAP: optimizer_overlap = #sched<overlap backward>
// OVERLAP: sched.phase micro_batch
// OVERLAP: %[[A:.+]] = sched.exec accumulate
// OVERLAP-NEXT: sched.exec adamw {{.*}} on @optimizer after(%[[A]]) {{{.*}}last_micro_batch
// OVERLAP: sched.phase step_end {
// OVERLAP-NEXT: }
// With one micro-batch, the fp32 gradient arrives complete and is applied
// at once: AdamW reads it in its pinned staging buffer, which is the
// parameter's (transient) gradient; no accumulator, no zeroing.
// ONCE-DAG: %[[S:.+]] = sched.buffer "emb.grad.staging" in @host_pinned
// ONCE-DAG: sched.parameter "emb" master(%{{.*}}) state(%[[S]], %{{.*}}, %{{.*}}) {{{.*}}transient_grad}
// ONCE-NOT: "emb.grad" in @host
// ONCE: sched.phase step_begin {
// ONCE-NEXT: copy_to_device
// ONCE-NEXT: {{^ *}$}}
// ONCE: %[[C:.+]] = sched.exec copy_to_host {{.*}} outs(%[[S]]) on @d2h
// ONCE-NEXT: sched.exec adamw ins(%[[S]]) {{.*}} on @optimizer after(%[[C]]) {bytes
// ONCE-NOT: accumulate
// With bf16 compute too: the bf16 gradient is widened on the device (the
// same bits as the host's 0 + g) and crosses in fp32, so that one
// micro-batch never needs the accumulator that 8 layer-major ones do not.
// ONCE16-DAG: %[[S:.+]] = sched.buffer "emb.grad.staging" in @host_pinned at -1 : <tensor<16x8xf32>>
// ONCE16-DAG: sched.parameter "emb" master(%{{.*}}) state(%[[S]], %{{.*}}, %{{.*}}) compute(%{{.*}}) {{{.*}}transient_grad}
// ONCE16-DAG: %[[W:.+]] = sched.buffer "emb.grad.sum" in @device at -1 : <tensor<16x8xf32>>
// ONCE16: %[[T:.+]] = sched.exec copy ins(%{{.*}}) outs(%[[W]]) on @compute
// ONCE16-NEXT: %[[C:.+]] = sched.exec copy_to_host ins(%[[W]]) outs(%[[S]]) on @d2h after(%[[T]])
// ONCE16-NEXT: sched.exec adamw ins(%[[S]]) {{.*}} on @optimizer after(%[[C]])
// ONCE16-NOT: accumulate
// With next-forward overlap, the first micro-batch of a step begins with
// each weight's update from the previous step, the reset of its gradient
// accumulator and its copy to the device, which waits for the update; the
// forward waits for the copy; the finish phase applies the last update.
// NEXT: optimizer_overlap = #sched<overlap next_forward>
// NEXT: sched.phase step_begin {
// NEXT-NEXT: }
// NEXT: sched.phase micro_batch {
// NEXT-NEXT: %[[U:.+]] = sched.exec adamw ins(%[[G:.+]]) outs(%[[W:.+]], %{{.*}}, %{{.*}}) on @optimizer {{{.*}}first_micro_batch
// NEXT-NEXT: sched.exec fill outs(%[[G]]) on @optimizer {{{.*}}first_micro_batch
// NEXT-NEXT: %[[C:.+]] = sched.exec copy_to_device ins(%[[W]]) outs(%[[WD:.+]]) on @h2d after(%[[U]]) {{{.*}}first_micro_batch
// NEXT-NEXT: sched.exec embedding ins(%[[WD]], %{{.*}}) outs(%{{.*}}) on @compute after(%[[C]])
// NEXT: sched.exec accumulate {{.*}} outs(%[[G]]) on @optimizer
// NEXT: sched.phase step_end {
// NEXT-NEXT: }
// NEXT: sched.phase finish {
// NEXT-NEXT: sched.exec adamw ins(%[[G]]) outs(%[[W]], %{{.*}}, %{{.*}}) on @optimizer
// 8-bit moments (opt-in, lossy): int8 and uint8 with one f32 scale per 256
// elements each, all updated by the AdamW op.
// Q8-DAG: %[[M:.+]] = sched.buffer "emb.exp_avg" in @host at -1 : <tensor<16x8xsi8>>
// Q8-DAG: %[[V:.+]] = sched.buffer "emb.exp_avg_sq" in @host at -1 : <tensor<16x8xui8>>
// Q8-DAG: %[[MS:.+]] = sched.buffer "emb.exp_avg.scale" in @host at -1 : <tensor<1xf32>>
// Q8-DAG: %[[VS:.+]] = sched.buffer "emb.exp_avg_sq.scale" in @host at -1 : <tensor<1xf32>>
// Q8: sched.parameter "emb" master(%{{.*}}) state(%{{.*}}, %[[M]], %[[V]], %[[MS]], %[[VS]])
// Q8: sched.exec adamw ins(%{{.*}}) outs(%{{.*}}, %[[M]], %[[V]], %[[MS]], %[[VS]]) on @optimizer
// 4-bit moments (opt-in, lossy): two elements a byte, 128 elements in 64
// bytes each, with the 8-bit format's scales.
// Q4-DAG: %[[M:.+]] = sched.buffer "emb.exp_avg" in @host at -1 : <tensor<64xui8>>
// Q4-DAG: %[[V:.+]] = sched.buffer "emb.exp_avg_sq" in @host at -1 : <tensor<64xui8>>
// Q4-DAG: %[[MS:.+]] = sched.buffer "emb.exp_avg.scale" in @host at -1 : <tensor<1xf32>>
// Q4-DAG: %[[VS:.+]] = sched.buffer "emb.exp_avg_sq.scale" in @host at -1 : <tensor<1xf32>>
// Q4: sched.parameter "emb" master(%{{.*}}) state(%{{.*}}, %[[M]], %[[V]], %[[MS]], %[[VS]])
// Q4: sched.exec adamw ins(%{{.*}}) outs(%{{.*}}, %[[M]], %[[V]], %[[MS]], %[[VS]]) on @optimizer
// With bf16 compute the device copy is bf16 and is copied from a bf16 copy
// in pinned memory (half the bytes over the link), which the optimizer
// stream converts from the master right after each update.
// BF16: compute_dtype = bf16
// BF16-DAG: %[[W:.+]] = sched.buffer "emb" in @host at -1 : <tensor<16x8xf32>>
// BF16-DAG: %[[C:.+]] = sched.buffer "emb.compute" in @host_pinned at -1 : <tensor<16x8xbf16>>
// BF16-DAG: %[[D:.+]] = sched.buffer "emb.device" in @device at -1 : <tensor<16x8xbf16>>
// BF16-DAG: sched.parameter "emb" master(%[[W]]) state({{.*}}) compute(%[[C]])
// BF16: sched.exec copy_to_device ins(%[[C]]) outs(%[[D]]) on @h2d {bytes = 256 : i64}
// BF16: sched.phase step_end
// BF16-NEXT: sched.exec adamw ins(%{{.*}}) outs(%[[W]], {{.*}}) on @optimizer
// BF16-NEXT: sched.exec copy ins(%[[W]]) outs(%[[C]]) on @optimizer
// With the fp32 link there is no bf16 copy on the host: the master goes to
// an fp32 staging buffer on the device and is cast there, on the compute
// stream, into the weight's bf16 buffer.
// LINK-NOT: "emb.compute"
// LINK-DAG: %[[W:.+]] = sched.buffer "emb" in @host at -1 : <tensor<16x8xf32>>
// LINK-DAG: %[[D:.+]] = sched.buffer "emb.device" in @device at -1 : <tensor<16x8xbf16>>
// LINK-DAG: %[[S:.+]] = sched.buffer "emb.device.f32" in @device at -1 : <tensor<16x8xf32>>
// LINK: %[[C:.+]] = sched.exec copy_to_device ins(%[[W]]) outs(%[[S]]) on @h2d {bytes = 512 : i64}
// LINK-NEXT: sched.exec copy ins(%[[S]]) outs(%[[D]]) on @compute after(%[[C]])
// LINK: sched.phase step_end
// LINK-NEXT: sched.exec adamw
// LINK-NOT: sched.exec copy ins(%[[W]])
train.param @emb {source = #train<source external>, file = "m.onnx", offset = 64 : i64, length = 512 : i64, trainable} : tensor<16x8xf32>
func.func @train_step(%ids: tensor<2x4xi64> {train.name = "ids", train.role = #train<role tokens>},
                      %t: tensor<2x4xi64> {train.name = "t", train.role = #train<role targets>})
    -> (tensor<f32> {train.loss}, tensor<16x8xf32> {train.grad_of = "emb"}) {
  %w = train.param.load @emb : tensor<16x8xf32>
  %h = train.embedding %w, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %l = train.cross_entropy %h, %t {ignore_index = -100 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<f32>
  %one = train.constant dense<1.0> : tensor<f32>
  %dh = train.cross_entropy_grad %h, %t, %one {ignore_index = -100 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi64>, tensor<f32>) -> tensor<2x4x8xf32>
  %dw = train.embedding_grad %dh, %ids : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<16x8xf32>
  return %l, %dw : tensor<f32>, tensor<16x8xf32>
}

// -----

// A head chunked in 2 sums its weight's gradient over the chunks in fp32,
// whatever the compute dtype, and that gradient leaves the device as fp32;
// its input's gradient is in the compute dtype.
// BF16-DAG: %[[DX:.+]] = sched.buffer "head_cross_entropy_grad" in @device at -1 : <tensor<2x4x8xbf16>>
// BF16-DAG: %[[DW:.+]] = sched.buffer "head_cross_entropy_grad" in @device at -1 : <tensor<16x8xf32>>
// BF16-DAG: %[[S:.+]] = sched.buffer "head.grad.staging" in @host_pinned at -1 : <tensor<16x8xf32>>
// BF16: sched.exec head_cross_entropy_grad ins({{.*}}) outs(%[[DX]], %[[DW]], {{.*}}) on @compute
// BF16: sched.exec copy_to_host ins(%[[DW]]) outs(%[[S]]) on @d2h {{.*}}bytes = 512 : i64
train.param @emb {source = #train<source external>, file = "m.onnx", offset = 64 : i64, length = 512 : i64, trainable} : tensor<16x8xf32>
train.param @head {source = #train<source external>, file = "m.onnx", offset = 576 : i64, length = 512 : i64, trainable} : tensor<16x8xf32>
func.func @train_step(%ids: tensor<2x4xi64> {train.name = "ids", train.role = #train<role tokens>},
                      %t: tensor<2x4xi64> {train.name = "t", train.role = #train<role targets>})
    -> (tensor<f32> {train.loss}, tensor<16x8xf32> {train.grad_of = "emb"}, tensor<16x8xf32> {train.grad_of = "head"}) {
  %w = train.param.load @emb : tensor<16x8xf32>
  %hw = train.param.load @head : tensor<16x8xf32>
  %h = train.embedding %w, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %l = train.head_cross_entropy %h, %hw, %t {chunk_rows = 4 : i64, ignore_index = -100 : i64, layout = #train<layout out_in>, shift} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<f32>
  %one = train.constant dense<1.0> : tensor<f32>
  %dh, %dhw = train.head_cross_entropy_grad %h, %hw, %t, %one {chunk_rows = 4 : i64, ignore_index = -100 : i64, layout = #train<layout out_in>, shift} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4xi64>, tensor<f32>) -> (tensor<2x4x8xf32>, tensor<16x8xf32>)
  %dw = train.embedding_grad %dh, %ids : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<16x8xf32>
  return %l, %dw, %dhw : tensor<f32>, tensor<16x8xf32>, tensor<16x8xf32>
}
