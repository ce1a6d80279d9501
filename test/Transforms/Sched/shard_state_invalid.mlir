// RUN: mt-opt --split-input-file --mt-shard-state=ranks=2 %s --verify-diagnostics -o /dev/null

// Layer-major programs sum the micro-batches on the device first: not the
// order of one process with every rank's micro-batches.
// expected-error @+1 {{data-parallel ranks need the micro-batch order}}
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 2 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m", layer_major = true} {
  sched.arena @host tier host size 0
  sched.stream @optimizer kind host_optimizer
  %l0 = sched.buffer "loss0" in @host at -1 : !sched.buffer<tensor<f32>>
  %l1 = sched.buffer "loss1" in @host at -1 : !sched.buffer<tensor<f32>>
  sched.loss(%l0) {micro_batch = 0 : i64} : !sched.buffer<tensor<f32>>
  sched.loss(%l1) {micro_batch = 1 : i64} : !sched.buffer<tensor<f32>>
}

// -----

// expected-error @+1 {{next-forward overlap is not built for them yet}}
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 2 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m", optimizer_overlap = #sched<overlap next_forward>} {
  sched.arena @host tier host size 0
  sched.stream @optimizer kind host_optimizer
}

// -----

// The host state stays in host memory: moments on the disk tier are not
// sharded yet.
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @host tier host size 0
  sched.arena @disk tier disk size 0
  %w = sched.buffer "w" in @host at -1 : !sched.buffer<tensor<4xf32>>
  %g = sched.buffer "w.grad" in @host at -1 : !sched.buffer<tensor<4xf32>>
  %m = sched.buffer "w.exp_avg" in @disk at -1 : !sched.buffer<tensor<4xf32>>
  %v = sched.buffer "w.exp_avg_sq" in @disk at -1 : !sched.buffer<tensor<4xf32>>
  // expected-error @+1 {{data-parallel ranks keep the host state in host memory; 'w.exp_avg' is in @disk}}
  sched.parameter "w" master(%w) state(%g, %m, %v) {file = "m.onnx", offset = 0 : i64, length = 16 : i64} : !sched.buffer<tensor<4xf32>>, !sched.buffer<tensor<4xf32>>, !sched.buffer<tensor<4xf32>>, !sched.buffer<tensor<4xf32>>
}
