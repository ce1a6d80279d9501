// RUN: mt-opt --split-input-file --mt-stream-weights="lookahead=0 resident-below=0" %s | FileCheck %s
// RUN: mt-opt --split-input-file --mt-stream-weights="lookahead=1 resident-below=0" %s | FileCheck %s --check-prefix=AHEAD
// RUN: mt-opt --split-input-file --mt-stream-weights="lookahead=0 resident-below=0" %s | FileCheck %s --check-prefix=NEXT

// The step_begin copy of %w becomes two micro-batch copies, one before the
// forward's first use and one before the backward's, into buffers of their
// own; the first reader of each waits for its copy.
// CHECK-LABEL: sched.program
// CHECK: %[[FWD:.+]] = sched.buffer "w.device.fwd" in @device
// CHECK: %[[BWD:.+]] = sched.buffer "w.device.bwd" in @device
// CHECK-NOT: sched.buffer "w.device" in
// CHECK: sched.phase step_begin {
// CHECK-NEXT: }
// CHECK: sched.phase micro_batch {
// CHECK-NEXT: %[[C1:.+]] = sched.exec copy_to_device ins(%{{.*}}) outs(%[[FWD]]) on @h2d
// CHECK-NEXT: sched.exec linear ins(%{{.*}}, %[[FWD]]) outs(%{{.*}}) on @compute after(%[[C1]])
// CHECK-NEXT: sched.exec copy_to_device
// CHECK-NEXT: sched.exec linear
// CHECK-NEXT: %[[C2:.+]] = sched.exec copy_to_device ins(%{{.*}}) outs(%[[BWD]]) on @h2d
// CHECK-NEXT: sched.exec linear_grad ins(%{{.*}}, %[[BWD]], %{{.*}}) outs(%{{.*}}, %{{.*}}) on @compute after(%[[C2]])
// With lookahead 1, each copy is issued where the previous weight region
// starts: the backward copy of %w right before the forward use of %v.
// AHEAD-LABEL: sched.program
// AHEAD: sched.phase micro_batch {
// AHEAD-NEXT: copy_to_device {{.*}}outs(%{{.*}}) on @h2d
// AHEAD-NEXT: copy_to_device
// AHEAD-NEXT: sched.exec linear
// AHEAD-NEXT: copy_to_device
// AHEAD-NEXT: sched.exec linear
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @device tier device size 0
  sched.arena @host tier host size 0
  sched.stream @compute kind compute
  sched.stream @h2d kind host_to_device
  %w = sched.buffer "w" in @host at -1 : !sched.buffer<tensor<4x4xf32>>
  %wd = sched.buffer "w.device" in @device at -1 : !sched.buffer<tensor<4x4xf32>>
  %v = sched.buffer "v" in @host at -1 : !sched.buffer<tensor<4x4xf32>>
  %vd = sched.buffer "v.device" in @device at -1 : !sched.buffer<tensor<4x4xf32>>
  %x = sched.buffer "x" in @device at -1 : !sched.buffer<tensor<1x4xf32>>
  %y = sched.buffer "y" in @device at -1 : !sched.buffer<tensor<1x4xf32>>
  %z = sched.buffer "z" in @device at -1 : !sched.buffer<tensor<1x4xf32>>
  %dx = sched.buffer "dx" in @device at -1 : !sched.buffer<tensor<1x4xf32>>
  %dw = sched.buffer "dw" in @device at -1 : !sched.buffer<tensor<4x4xf32>>
  sched.phase step_begin {
    %0 = sched.exec copy_to_device ins(%w) outs(%wd) on @h2d : (!sched.buffer<tensor<4x4xf32>>, !sched.buffer<tensor<4x4xf32>>) -> !sched.token
    %1 = sched.exec copy_to_device ins(%v) outs(%vd) on @h2d : (!sched.buffer<tensor<4x4xf32>>, !sched.buffer<tensor<4x4xf32>>) -> !sched.token
  }
  sched.phase micro_batch {
    %0 = sched.exec linear ins(%x, %wd) outs(%y) on @compute : (!sched.buffer<tensor<1x4xf32>>, !sched.buffer<tensor<4x4xf32>>, !sched.buffer<tensor<1x4xf32>>) -> !sched.token
    %1 = sched.exec linear ins(%y, %vd) outs(%z) on @compute : (!sched.buffer<tensor<1x4xf32>>, !sched.buffer<tensor<4x4xf32>>, !sched.buffer<tensor<1x4xf32>>) -> !sched.token
    %2 = sched.exec linear_grad ins(%x, %wd, %z) outs(%dx, %dw) on @compute : (!sched.buffer<tensor<1x4xf32>>, !sched.buffer<tensor<4x4xf32>>, !sched.buffer<tensor<1x4xf32>>, !sched.buffer<tensor<1x4xf32>>, !sched.buffer<tensor<4x4xf32>>) -> !sched.token
  }
}

// -----

// Next-forward overlap: the once-per-step copy sits in the first
// micro-batch after the weight's update. The streamed copies wait for the
// update in its place; the reader that waited for the old copy now waits
// for its own.
// NEXT-LABEL: sched.program
// NEXT: sched.buffer "w.grad"
// NEXT: sched.phase micro_batch {
// NEXT-NEXT: %[[U:.+]] = sched.exec adamw {{.*}}first_micro_batch
// NEXT-NEXT: %[[C1:.+]] = sched.exec copy_to_device ins(%{{.*}}) outs(%[[FWD:.+]]) on @h2d after(%[[U]])
// NEXT-NOT: first_micro_batch
// NEXT-NEXT: sched.exec linear ins(%{{.*}}, %[[FWD]]) outs(%{{.*}}) on @compute after(%[[C1]])
// NEXT-NEXT: %[[C2:.+]] = sched.exec copy_to_device ins(%{{.*}}) outs(%[[BWD:.+]]) on @h2d after(%[[U]])
// NEXT-NEXT: sched.exec linear_grad ins(%{{.*}}, %[[BWD]], %{{.*}}) outs(%{{.*}}, %{{.*}}) on @compute after(%[[C2]])
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @device tier device size 0
  sched.arena @host tier host size 0
  sched.stream @compute kind compute
  sched.stream @h2d kind host_to_device
  sched.stream @optimizer kind host_optimizer
  %w = sched.buffer "w" in @host at -1 : !sched.buffer<tensor<4x4xf32>>
  %g = sched.buffer "w.grad" in @host at -1 : !sched.buffer<tensor<4x4xf32>>
  %m = sched.buffer "w.exp_avg" in @host at -1 : !sched.buffer<tensor<4x4xf32>>
  %v = sched.buffer "w.exp_avg_sq" in @host at -1 : !sched.buffer<tensor<4x4xf32>>
  %wd = sched.buffer "w.device" in @device at -1 : !sched.buffer<tensor<4x4xf32>>
  %x = sched.buffer "x" in @device at -1 : !sched.buffer<tensor<1x4xf32>>
  %y = sched.buffer "y" in @device at -1 : !sched.buffer<tensor<1x4xf32>>
  %dx = sched.buffer "dx" in @device at -1 : !sched.buffer<tensor<1x4xf32>>
  %dw = sched.buffer "dw" in @device at -1 : !sched.buffer<tensor<4x4xf32>>
  sched.phase step_begin {
  }
  sched.phase micro_batch {
    %u = sched.exec adamw ins(%g) outs(%w, %m, %v) on @optimizer {first_micro_batch} : (!sched.buffer<tensor<4x4xf32>>, !sched.buffer<tensor<4x4xf32>>, !sched.buffer<tensor<4x4xf32>>, !sched.buffer<tensor<4x4xf32>>) -> !sched.token
    %c = sched.exec copy_to_device ins(%w) outs(%wd) on @h2d after(%u) {first_micro_batch} : (!sched.buffer<tensor<4x4xf32>>, !sched.buffer<tensor<4x4xf32>>, !sched.token) -> !sched.token
    %0 = sched.exec linear ins(%x, %wd) outs(%y) on @compute after(%c) : (!sched.buffer<tensor<1x4xf32>>, !sched.buffer<tensor<4x4xf32>>, !sched.buffer<tensor<1x4xf32>>, !sched.token) -> !sched.token
    %1 = sched.exec linear_grad ins(%x, %wd, %y) outs(%dx, %dw) on @compute : (!sched.buffer<tensor<1x4xf32>>, !sched.buffer<tensor<4x4xf32>>, !sched.buffer<tensor<1x4xf32>>, !sched.buffer<tensor<1x4xf32>>, !sched.buffer<tensor<4x4xf32>>) -> !sched.token
  }
}
