// RUN: mt-opt --split-input-file --mt-offload-optimizer-state=format=shuffle-zstd %s | FileCheck %s
// RUN: mt-opt --split-input-file --mt-offload-optimizer-state=lookahead=0 --mt-plan-memory %s | FileCheck %s --check-prefix=WINDOW
// RUN: mt-opt --split-input-file --mt-offload-optimizer-state --mt-plan-memory %s | FileCheck %s --check-prefix=AHEAD
// RUN: not mt-opt --split-input-file --mt-offload-optimizer-state=format=lz4 %s 2>&1 | FileCheck %s --check-prefix=BAD

// The moments move to a disk arena; every AdamW reads them into staging
// buffers on the disk_io stream first and writes them back after, keeping
// its first/last micro-batch flag; with lookahead 1 the second update's
// reads are issued before the first update, so the disk reads ahead.
// CHECK-LABEL: sched.program
// CHECK: sched.arena @disk tier disk size 0 {disk_format = #sched<disk_format shuffle_zstd>}
// CHECK: sched.arena @host_stage tier host size 0
// CHECK: sched.stream @disk_io kind disk_io
// CHECK-DAG: %[[WM:.+]] = sched.buffer "w.exp_avg" in @disk
// CHECK-DAG: %[[WV:.+]] = sched.buffer "w.exp_avg_sq" in @disk
// CHECK-DAG: %[[UM:.+]] = sched.buffer "u.exp_avg" in @disk
// CHECK: sched.phase micro_batch {
// CHECK-NEXT: %[[R1:.+]] = sched.exec read_disk ins(%[[WM]]) outs(%[[S1:.+]]) on @disk_io {{{.*}}last_micro_batch
// CHECK-NEXT: %[[R2:.+]] = sched.exec read_disk ins(%[[WV]]) outs(%[[S2:.+]]) on @disk_io {{{.*}}last_micro_batch
// CHECK-NEXT: %[[A:.+]] = sched.exec adamw ins(%{{.*}}) outs(%{{.*}}, %[[S1]], %[[S2]]) on @optimizer after(%[[R1]], %[[R2]]) {last_micro_batch}
// CHECK-NEXT: sched.exec write_disk ins(%[[S1]]) outs(%[[WM]]) on @disk_io after(%[[A]]) {{{.*}}last_micro_batch
// CHECK-NEXT: sched.exec write_disk ins(%[[S2]]) outs(%[[WV]]) on @disk_io after(%[[A]]) {{{.*}}last_micro_batch
// CHECK: sched.phase step_end {
// CHECK-NEXT: read_disk ins(%[[WM]])
// CHECK-NEXT: read_disk ins(%[[WV]])
// CHECK-NEXT: read_disk ins(%[[UM]])
// CHECK-NEXT: read_disk
// CHECK-NEXT: adamw
// CHECK-NEXT: write_disk
// CHECK-NEXT: write_disk
// CHECK-NEXT: adamw
// CHECK-NEXT: write_disk
// CHECK-NEXT: write_disk

// Staging buffers live from read to write-back in their phase: reading one
// update ahead holds two weights' moments (256 bytes), reading none ahead
// one (128), and then the second update's reads wait for the first update
// to be done with the bytes they reuse.
// AHEAD-LABEL: sched.program
// AHEAD: sched.arena @disk tier disk size 256
// AHEAD: sched.arena @host_stage tier host size 256
// WINDOW-LABEL: sched.program
// WINDOW: sched.arena @host_stage tier host size 128
// WINDOW: sched.phase step_end {
// WINDOW: %[[A:.+]] = sched.exec adamw
// WINDOW: read_disk {{.*}} after(%[[A]])

// BAD: mt-opt: for the --format option: Cannot find option named 'lz4'!
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 2 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @device tier device size 0
  sched.arena @host tier host size 0
  sched.stream @compute kind compute
  sched.stream @optimizer kind host_optimizer
  %w = sched.buffer "w" in @host at -1 : !sched.buffer<tensor<16xf32>>
  %g = sched.buffer "w.grad" in @host at -1 : !sched.buffer<tensor<16xf32>>
  %m = sched.buffer "w.exp_avg" in @host at -1 : !sched.buffer<tensor<16xf32>>
  %v = sched.buffer "w.exp_avg_sq" in @host at -1 : !sched.buffer<tensor<16xf32>>
  %u = sched.buffer "u" in @host at -1 : !sched.buffer<tensor<16xf32>>
  %gu = sched.buffer "u.grad" in @host at -1 : !sched.buffer<tensor<16xf32>>
  %mu = sched.buffer "u.exp_avg" in @host at -1 : !sched.buffer<tensor<16xf32>>
  %vu = sched.buffer "u.exp_avg_sq" in @host at -1 : !sched.buffer<tensor<16xf32>>
  sched.parameter "w" master(%w) state(%g, %m, %v) {file = "m.onnx", offset = 0 : i64, length = 64 : i64} : !sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>
  sched.parameter "u" master(%u) state(%gu, %mu, %vu) {file = "m.onnx", offset = 64 : i64, length = 64 : i64} : !sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>
  sched.phase micro_batch {
    %0 = sched.exec adamw ins(%g) outs(%w, %m, %v) on @optimizer {last_micro_batch} : (!sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>) -> !sched.token
  }
  sched.phase step_end {
    %0 = sched.exec adamw ins(%g) outs(%w, %m, %v) on @optimizer : (!sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>) -> !sched.token
    %1 = sched.exec adamw ins(%gu) outs(%u, %mu, %vu) on @optimizer : (!sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>) -> !sched.token
  }
}
