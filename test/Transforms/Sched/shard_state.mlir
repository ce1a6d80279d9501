// RUN: mt-opt --mt-shard-state=ranks=2 %s | FileCheck %s
// RUN: mt-opt --mt-shard-state=ranks=1 %s | FileCheck %s --check-prefix=ONE
// RUN: mt-opt --mt-shard-state=ranks=2 --mt-plan-memory --mt-verify-schedule %s | FileCheck %s --check-prefix=PLANNED

// Two weights, two ranks: the larger (w, 64 elements) goes to rank 0, the
// smaller (u) to the rank that owns less. Each weight's accumulator and
// moments move to its owner's arena; each micro-batch's accumulation
// becomes a reduction to the owner on the network stream; the zeroing and
// the update run on the owner alone; the updated master (what the devices
// read: there is no compute copy) is broadcast, and the next step's copy
// reads it.
// CHECK-LABEL: sched.program attributes {{{.*}}ranks = 2 : i64
// CHECK: sched.arena @host tier host size 0
// CHECK-NEXT: sched.arena @host_rank0 tier host size 0 {rank = 0 : i64}
// CHECK-NEXT: sched.arena @host_rank1 tier host size 0 {rank = 1 : i64}
// CHECK: sched.stream @optimizer kind host_optimizer
// CHECK-NEXT: sched.stream @network kind network
// CHECK: %[[W:.+]] = sched.buffer "w" in @host
// CHECK-NEXT: %[[G:.+]] = sched.buffer "w.grad" in @host_rank0
// CHECK-NEXT: sched.buffer "w.exp_avg" in @host_rank0
// CHECK-NEXT: sched.buffer "w.exp_avg_sq" in @host_rank0
// CHECK-NEXT: %[[U:.+]] = sched.buffer "u" in @host
// CHECK-NEXT: %[[GU:.+]] = sched.buffer "u.grad" in @host_rank1
// CHECK: sched.phase step_begin {
// CHECK-NEXT: sched.exec fill outs(%[[G]]) on @optimizer {{{.*}}rank = 0 : i64}
// CHECK-NEXT: sched.exec fill outs(%[[GU]]) on @optimizer {{{.*}}rank = 1 : i64}
// CHECK: sched.phase micro_batch {
// CHECK: %[[C:.+]] = sched.exec copy_to_host
// CHECK-NEXT: %[[R:.+]] = sched.exec reduce_to_owner ins(%{{.+}}) outs(%[[G]]) on @network after(%[[C]]) {attrs = {owner = 0 : i64}, bytes = 256 : i64}
// CHECK: sched.exec reduce_to_owner ins(%{{.+}}) outs(%[[GU]]) on @network {{.*}}{attrs = {owner = 1 : i64}
// CHECK: sched.phase step_end {
// CHECK-NEXT: %[[A:.+]] = sched.exec adamw ins(%[[G]]) outs(%[[W]], {{.*}}) on @optimizer {rank = 0 : i64}
// CHECK-NEXT: %[[B:.+]] = sched.exec broadcast ins(%[[W]]) outs(%[[W]]) on @network after(%[[A]]) {attrs = {owner = 0 : i64}, bytes = 256 : i64}
// CHECK-NEXT: %[[AU:.+]] = sched.exec adamw ins(%[[GU]]) {{.*}} {rank = 1 : i64}
// CHECK-NEXT: sched.exec broadcast ins(%[[U]]) outs(%[[U]]) on @network after(%[[AU]]) {attrs = {owner = 1 : i64}
// CHECK-NEXT: sched.exec copy_to_device ins(%[[W]]) {{.*}} after(%[[B]])

// ONE-NOT: rank
// ONE-NOT: network

// Planned and proven: each rank's arena holds its weight's state alone
// (w: 3 x 256 bytes; u: 3 x 64).
// PLANNED: sched.arena @host_rank0 tier host size 768 {rank = 0 : i64}
// PLANNED-NEXT: sched.arena @host_rank1 tier host size 192 {rank = 1 : i64}
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 2 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @device tier device size 0
  sched.arena @host_pinned tier host_pinned size 0
  sched.arena @host tier host size 0
  sched.stream @compute kind compute
  sched.stream @d2h kind device_to_host
  sched.stream @optimizer kind host_optimizer
  %w = sched.buffer "w" in @host at -1 : !sched.buffer<tensor<64xf32>>
  %g = sched.buffer "w.grad" in @host at -1 : !sched.buffer<tensor<64xf32>>
  %m = sched.buffer "w.exp_avg" in @host at -1 : !sched.buffer<tensor<64xf32>>
  %v = sched.buffer "w.exp_avg_sq" in @host at -1 : !sched.buffer<tensor<64xf32>>
  %u = sched.buffer "u" in @host at -1 : !sched.buffer<tensor<16xf32>>
  %gu = sched.buffer "u.grad" in @host at -1 : !sched.buffer<tensor<16xf32>>
  %mu = sched.buffer "u.exp_avg" in @host at -1 : !sched.buffer<tensor<16xf32>>
  %vu = sched.buffer "u.exp_avg_sq" in @host at -1 : !sched.buffer<tensor<16xf32>>
  %dw = sched.buffer "dw" in @device at -1 : !sched.buffer<tensor<64xf32>>
  %sw = sched.buffer "w.grad.staging" in @host_pinned at -1 : !sched.buffer<tensor<64xf32>>
  %du = sched.buffer "du" in @device at -1 : !sched.buffer<tensor<16xf32>>
  %su = sched.buffer "u.grad.staging" in @host_pinned at -1 : !sched.buffer<tensor<16xf32>>
  %wd = sched.buffer "w.device" in @device at -1 : !sched.buffer<tensor<64xf32>>
  sched.parameter "w" master(%w) state(%g, %m, %v) {file = "m.onnx", offset = 0 : i64, length = 256 : i64} : !sched.buffer<tensor<64xf32>>, !sched.buffer<tensor<64xf32>>, !sched.buffer<tensor<64xf32>>, !sched.buffer<tensor<64xf32>>
  sched.parameter "u" master(%u) state(%gu, %mu, %vu) {file = "m.onnx", offset = 256 : i64, length = 64 : i64} : !sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>
  sched.phase step_begin {
    %0 = sched.exec fill outs(%g) on @optimizer {attrs = {value = 0.0 : f64}} : (!sched.buffer<tensor<64xf32>>) -> !sched.token
    %1 = sched.exec fill outs(%gu) on @optimizer {attrs = {value = 0.0 : f64}} : (!sched.buffer<tensor<16xf32>>) -> !sched.token
  }
  sched.phase micro_batch {
    %0 = sched.exec fill outs(%dw) on @compute {attrs = {value = 1.0 : f64}} : (!sched.buffer<tensor<64xf32>>) -> !sched.token
    %1 = sched.exec copy_to_host ins(%dw) outs(%sw) on @d2h after(%0) {bytes = 256 : i64} : (!sched.buffer<tensor<64xf32>>, !sched.buffer<tensor<64xf32>>, !sched.token) -> !sched.token
    %2 = sched.exec accumulate ins(%sw) outs(%g) on @optimizer after(%1) : (!sched.buffer<tensor<64xf32>>, !sched.buffer<tensor<64xf32>>, !sched.token) -> !sched.token
    %3 = sched.exec fill outs(%du) on @compute {attrs = {value = 1.0 : f64}} : (!sched.buffer<tensor<16xf32>>) -> !sched.token
    %4 = sched.exec copy_to_host ins(%du) outs(%su) on @d2h after(%3) : (!sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>, !sched.token) -> !sched.token
    %5 = sched.exec accumulate ins(%su) outs(%gu) on @optimizer after(%4) : (!sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>, !sched.token) -> !sched.token
  }
  sched.phase step_end {
    %0 = sched.exec adamw ins(%g) outs(%w, %m, %v) on @optimizer : (!sched.buffer<tensor<64xf32>>, !sched.buffer<tensor<64xf32>>, !sched.buffer<tensor<64xf32>>, !sched.buffer<tensor<64xf32>>) -> !sched.token
    %1 = sched.exec adamw ins(%gu) outs(%u, %mu, %vu) on @optimizer : (!sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>, !sched.buffer<tensor<16xf32>>) -> !sched.token
    %2 = sched.exec copy_to_device ins(%w) outs(%wd) on @optimizer : (!sched.buffer<tensor<64xf32>>, !sched.buffer<tensor<64xf32>>) -> !sched.token
  }
}
