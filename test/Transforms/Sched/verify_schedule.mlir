// RUN: mt-opt --split-input-file --mt-verify-schedule --verify-diagnostics %s

// Safe: the copy to the host waits for the op that writes the gradient, and
// the next writer of the shared bytes waits for the copy.
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @device tier device size 512
  sched.arena @host_pinned tier host_pinned size 256
  sched.stream @compute kind compute
  sched.stream @d2h kind device_to_host
  %g = sched.buffer "g" in @device at 0 : !sched.buffer<tensor<64xf32>>
  %h = sched.buffer "h" in @device at 0 : !sched.buffer<tensor<64xf32>>
  %s = sched.buffer "s" in @host_pinned at 0 : !sched.buffer<tensor<64xf32>>
  sched.phase micro_batch {
    %0 = sched.exec fill outs(%g) on @compute : (!sched.buffer<tensor<64xf32>>) -> !sched.token
    %1 = sched.exec copy_to_host ins(%g) outs(%s) on @d2h after(%0) : (!sched.buffer<tensor<64xf32>>, !sched.buffer<tensor<64xf32>>, !sched.token) -> !sched.token
    %2 = sched.exec fill outs(%h) on @compute after(%1) : (!sched.buffer<tensor<64xf32>>, !sched.token) -> !sched.token
  }
}

// -----

// A copy that does not wait for the op writing what it reads.
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @device tier device size 512
  sched.arena @host_pinned tier host_pinned size 256
  sched.stream @compute kind compute
  sched.stream @d2h kind device_to_host
  %g = sched.buffer "g" in @device at 0 : !sched.buffer<tensor<64xf32>>
  %s = sched.buffer "s" in @host_pinned at 0 : !sched.buffer<tensor<64xf32>>
  sched.phase micro_batch {
    %0 = sched.exec fill outs(%g) on @compute : (!sched.buffer<tensor<64xf32>>) -> !sched.token
    // expected-error @+1 {{reads 'g' but op 1 (d2h, copy_to_host) does not wait for its writer, op 0 (compute, fill)}}
    %1 = sched.exec copy_to_host ins(%g) outs(%s) on @d2h : (!sched.buffer<tensor<64xf32>>, !sched.buffer<tensor<64xf32>>) -> !sched.token
  }
}

// -----

// Bytes reused while another stream may still read them.
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @device tier device size 512
  sched.arena @host_pinned tier host_pinned size 256
  sched.stream @compute kind compute
  sched.stream @d2h kind device_to_host
  %g = sched.buffer "g" in @device at 0 : !sched.buffer<tensor<64xf32>>
  %h = sched.buffer "h" in @device at 128 : !sched.buffer<tensor<64xf32>>
  %s = sched.buffer "s" in @host_pinned at 0 : !sched.buffer<tensor<64xf32>>
  sched.phase micro_batch {
    %0 = sched.exec fill outs(%g) on @compute : (!sched.buffer<tensor<64xf32>>) -> !sched.token
    %1 = sched.exec copy_to_host ins(%g) outs(%s) on @d2h after(%0) : (!sched.buffer<tensor<64xf32>>, !sched.buffer<tensor<64xf32>>, !sched.token) -> !sched.token
    // expected-error @+1 {{buffers 'g' and 'h' share bytes of arena @device, but op 2 (compute, fill) may run before op 1 (d2h, copy_to_host) is done with 'g'}}
    %2 = sched.exec fill outs(%h) on @compute : (!sched.buffer<tensor<64xf32>>) -> !sched.token
  }
}

// -----

// A buffer written only in the first micro-batch and read in every one
// cannot share bytes: the later micro-batches would read what another
// buffer left there.
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 2 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @device tier device size 512
  sched.arena @host tier host size 256
  sched.stream @compute kind compute
  sched.stream @h2d kind host_to_device
  %w = sched.buffer "w" in @host at 0 : !sched.buffer<tensor<64xf32>>
  // expected-error @+1 {{'wd' is touched in only some micro-batches but shares bytes of arena @device with 'a'}}
  %wd = sched.buffer "wd" in @device at 0 : !sched.buffer<tensor<64xf32>>
  %a = sched.buffer "a" in @device at 0 : !sched.buffer<tensor<64xf32>>
  %y = sched.buffer "y" in @device at 256 : !sched.buffer<tensor<64xf32>>
  sched.phase micro_batch {
    %c = sched.exec copy_to_device ins(%w) outs(%wd) on @h2d {first_micro_batch} : (!sched.buffer<tensor<64xf32>>, !sched.buffer<tensor<64xf32>>) -> !sched.token
    %0 = sched.exec neg ins(%wd) outs(%y) on @compute after(%c) : (!sched.buffer<tensor<64xf32>>, !sched.buffer<tensor<64xf32>>, !sched.token) -> !sched.token
    %1 = sched.exec fill outs(%a) on @compute : (!sched.buffer<tensor<64xf32>>) -> !sched.token
  }
}
