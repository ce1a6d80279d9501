// RUN: mt-opt --split-input-file --verify-diagnostics %s -o /dev/null

// A keyword the dialect does not have is named with the op that took it.
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  // expected-error @+1 {{custom op 'sched.arena' unknown tier 'devise'}}
  sched.arena @device tier devise size 64
}
