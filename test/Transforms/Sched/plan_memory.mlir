// RUN: mt-opt --split-input-file --mt-plan-memory %s | FileCheck %s

// Buffers that live through the step are packed first; a micro-batch's
// buffers reuse the bytes of dead ones: %a dies after op 1, so %c (written
// by op 2) takes its place; offsets are 64-byte aligned and each arena is
// sized to its exact peak.
// CHECK-LABEL: sched.program
// CHECK: sched.arena @device tier device size 576
// CHECK: sched.arena @host tier host size 64
// CHECK: sched.buffer "w" in @host at 0
// CHECK: sched.buffer "wd" in @device at 0
// CHECK: sched.buffer "a" in @device at 64
// CHECK: sched.buffer "b" in @device at 320
// CHECK: sched.buffer "c" in @device at 64
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @device tier device size 0
  sched.arena @host tier host size 0
  sched.stream @compute kind compute
  sched.stream @h2d kind host_to_device
  %w = sched.buffer "w" in @host at -1 : !sched.buffer<tensor<4xf32>>
  %wd = sched.buffer "wd" in @device at -1 : !sched.buffer<tensor<4xf32>>
  %a = sched.buffer "a" in @device at -1 : !sched.buffer<tensor<64xf32>>
  %b = sched.buffer "b" in @device at -1 : !sched.buffer<tensor<64xf32>>
  %c = sched.buffer "c" in @device at -1 : !sched.buffer<tensor<64xf32>>
  sched.phase step_begin {
    %t = sched.exec copy_to_device ins(%w) outs(%wd) on @h2d : (!sched.buffer<tensor<4xf32>>, !sched.buffer<tensor<4xf32>>) -> !sched.token
  }
  sched.phase micro_batch {
    %0 = sched.exec fill outs(%a) on @compute : (!sched.buffer<tensor<64xf32>>) -> !sched.token
    %1 = sched.exec neg ins(%a) outs(%b) on @compute : (!sched.buffer<tensor<64xf32>>, !sched.buffer<tensor<64xf32>>) -> !sched.token
    %2 = sched.exec neg ins(%b) outs(%c) on @compute : (!sched.buffer<tensor<64xf32>>, !sched.buffer<tensor<64xf32>>) -> !sched.token
    %3 = sched.exec add ins(%c, %wd) outs(%c) on @compute : (!sched.buffer<tensor<64xf32>>, !sched.buffer<tensor<4xf32>>, !sched.buffer<tensor<64xf32>>) -> !sched.token
  }
}

// -----

// A buffer that only the first micro-batch writes (a weight copied after
// its deferred update) keeps its bytes through the later micro-batches,
// though its last read in the list comes early: %a takes the bytes of %y,
// not of %wd.
// CHECK-LABEL: sched.program
// CHECK: sched.arena @device tier device size 320
// CHECK: sched.buffer "wd" in @device at 0
// CHECK: sched.buffer "y" in @device at 64
// CHECK: sched.buffer "a" in @device at 64
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 2 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @device tier device size 0
  sched.arena @host tier host size 0
  sched.stream @compute kind compute
  sched.stream @h2d kind host_to_device
  %w = sched.buffer "w" in @host at -1 : !sched.buffer<tensor<4xf32>>
  %wd = sched.buffer "wd" in @device at -1 : !sched.buffer<tensor<4xf32>>
  %y = sched.buffer "y" in @device at -1 : !sched.buffer<tensor<4xf32>>
  %a = sched.buffer "a" in @device at -1 : !sched.buffer<tensor<64xf32>>
  sched.phase micro_batch {
    %c = sched.exec copy_to_device ins(%w) outs(%wd) on @h2d {first_micro_batch} : (!sched.buffer<tensor<4xf32>>, !sched.buffer<tensor<4xf32>>) -> !sched.token
    %0 = sched.exec neg ins(%wd) outs(%y) on @compute after(%c) : (!sched.buffer<tensor<4xf32>>, !sched.buffer<tensor<4xf32>>, !sched.token) -> !sched.token
    %1 = sched.exec fill outs(%a) on @compute : (!sched.buffer<tensor<64xf32>>) -> !sched.token
  }
}
