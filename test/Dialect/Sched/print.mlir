// RUN: mt-opt %s | FileCheck %s --strict-whitespace
// RUN: mt-opt %s | mt-opt | FileCheck %s --strict-whitespace

// The enums of arenas, streams, inputs, phases and ops print as one bare
// keyword after one space, and parse back.
// CHECK: sched.arena @device tier device size 64
// CHECK: sched.stream @compute kind compute
// CHECK: sched.input "input_ids" role tokens(%{{.*}}) :
// CHECK: sched.phase micro_batch {
// CHECK: sched.exec fill outs(%{{.*}}) on @compute :
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @device tier device size 64
  sched.stream @compute kind compute
  %ids = sched.buffer "ids" in @device at 0 : !sched.buffer<tensor<1x1xi64>>
  %loss = sched.buffer "loss" in @device at 8 : !sched.buffer<tensor<f32>>
  sched.input "input_ids" role tokens(%ids) : !sched.buffer<tensor<1x1xi64>>
  sched.phase micro_batch {
    %t = sched.exec fill outs(%loss) on @compute : (!sched.buffer<tensor<f32>>) -> !sched.token
  }
}
