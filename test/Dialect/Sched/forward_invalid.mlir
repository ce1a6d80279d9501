// RUN: mt-opt --split-input-file --verify-diagnostics %s -o /dev/null

// A training program's results are its loss and its updates: no outputs.
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @device tier device size 0
  %y = sched.buffer "y" in @device at -1 : !sched.buffer<tensor<2xf32>>
  // expected-error @+1 {{is in a training program; only a forward-only program has outputs}}
  sched.output "y"(%y) : !sched.buffer<tensor<2xf32>>
}

// -----

// Each output has a name of its own.
sched.program attributes {batch = 0 : i64, seq = 0 : i64, grad_accum = 1 : i64, vocab = 0 : i64, compute_dtype = f32, model = "m", forward_only = true} {
  sched.arena @device tier device size 0
  %y = sched.buffer "y" in @device at -1 : !sched.buffer<tensor<2xf32>>
  sched.output "y"(%y) : !sched.buffer<tensor<2xf32>>
  // expected-error @+1 {{needs a name of its own, got 'y'}}
  sched.output "y"(%y) : !sched.buffer<tensor<2xf32>>
}

// -----

// A forward-only program gives something back.
// expected-error @+1 {{a forward-only program needs an output or a loss}}
sched.program attributes {batch = 0 : i64, seq = 0 : i64, grad_accum = 1 : i64, vocab = 0 : i64, compute_dtype = f32, model = "m", forward_only = true} {
  sched.arena @device tier device size 0
}

// -----

// It runs once per call: one micro-batch.
// expected-error @+1 {{a forward-only program has one micro-batch}}
sched.program attributes {batch = 0 : i64, seq = 0 : i64, grad_accum = 2 : i64, vocab = 0 : i64, compute_dtype = f32, model = "m", forward_only = true} {
  sched.arena @device tier device size 0
}

// -----

// Only a forward-only program may lack a batch (it has no tokens input).
// expected-error @+1 {{batch, seq, grad_accum and vocab must be positive}}
sched.program attributes {batch = 0 : i64, seq = 0 : i64, grad_accum = 1 : i64, vocab = 0 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @device tier device size 0
}
