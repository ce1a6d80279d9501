// RUN: mt-opt --split-input-file --verify-diagnostics %s -o /dev/null

// A rank the program does not have.
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m", ranks = 2 : i64} {
  sched.arena @host tier host size 0
  sched.stream @optimizer kind host_optimizer
  %g = sched.buffer "g" in @host at -1 : !sched.buffer<tensor<4xf32>>
  sched.phase step_begin {
    // expected-error @+1 {{rank 2 is not below the program's 2 rank(s)}}
    %0 = sched.exec fill outs(%g) on @optimizer {rank = 2 : i64} : (!sched.buffer<tensor<4xf32>>) -> !sched.token
  }
}

// -----

// Collectives run on the network stream, and only they do.
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m", ranks = 2 : i64} {
  sched.arena @host tier host size 0
  sched.stream @optimizer kind host_optimizer
  %g = sched.buffer "g" in @host at -1 : !sched.buffer<tensor<4xf32>>
  sched.phase step_begin {
    // expected-error @+1 {{a collective runs on a network stream}}
    %0 = sched.exec broadcast ins(%g) outs(%g) on @optimizer {attrs = {owner = 0 : i64}} : (!sched.buffer<tensor<4xf32>>, !sched.buffer<tensor<4xf32>>) -> !sched.token
  }
}

// -----

sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m", ranks = 2 : i64} {
  sched.arena @host tier host size 0
  sched.stream @network kind network
  %g = sched.buffer "g" in @host at -1 : !sched.buffer<tensor<4xf32>>
  sched.phase step_begin {
    // expected-error @+1 {{only collectives run on a network stream}}
    %0 = sched.exec fill outs(%g) on @network : (!sched.buffer<tensor<4xf32>>) -> !sched.token
  }
}

// -----

// The owner is one of the program's ranks; a collective runs on all.
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m", ranks = 2 : i64} {
  sched.arena @host tier host size 0
  sched.stream @network kind network
  %g = sched.buffer "g" in @host at -1 : !sched.buffer<tensor<4xf32>>
  sched.phase step_begin {
    // expected-error @+1 {{a collective needs attrs.owner below the program's 2 rank(s)}}
    %0 = sched.exec broadcast ins(%g) outs(%g) on @network {attrs = {owner = 2 : i64}} : (!sched.buffer<tensor<4xf32>>, !sched.buffer<tensor<4xf32>>) -> !sched.token
  }
}

// -----

sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m", ranks = 2 : i64} {
  sched.arena @host tier host size 0
  sched.stream @network kind network
  %g = sched.buffer "g" in @host at -1 : !sched.buffer<tensor<4xf32>>
  sched.phase step_begin {
    // expected-error @+1 {{a collective runs on every rank, not on rank 1}}
    %0 = sched.exec broadcast ins(%g) outs(%g) on @network {attrs = {owner = 0 : i64}, rank = 1 : i64} : (!sched.buffer<tensor<4xf32>>, !sched.buffer<tensor<4xf32>>) -> !sched.token
  }
}

// -----

// expected-error @+1 {{ranks must be at least 1}}
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m", ranks = 0 : i64} {
  sched.arena @host tier host size 0
}
