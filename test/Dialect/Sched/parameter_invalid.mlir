// RUN: mt-opt --split-input-file --verify-diagnostics %s

// 8-bit moments come with their two scales.
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @host tier host size 0
  %w = sched.buffer "w" in @host at -1 : !sched.buffer<tensor<300xf32>>
  %g = sched.buffer "w.grad" in @host at -1 : !sched.buffer<tensor<300xf32>>
  %m = sched.buffer "w.exp_avg" in @host at -1 : !sched.buffer<tensor<300xsi8>>
  %v = sched.buffer "w.exp_avg_sq" in @host at -1 : !sched.buffer<tensor<300xui8>>
  // expected-error @+1 {{8-bit and 4-bit moments, and only they, have two scales}}
  sched.parameter "w" master(%w) state(%g, %m, %v) {file = "m.onnx", offset = 0 : i64, length = 1200 : i64} : !sched.buffer<tensor<300xf32>>, !sched.buffer<tensor<300xf32>>, !sched.buffer<tensor<300xsi8>>, !sched.buffer<tensor<300xui8>>
}

// -----

// One scale per 256 elements: 300 elements need 2.
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @host tier host size 0
  %w = sched.buffer "w" in @host at -1 : !sched.buffer<tensor<300xf32>>
  %g = sched.buffer "w.grad" in @host at -1 : !sched.buffer<tensor<300xf32>>
  %m = sched.buffer "w.exp_avg" in @host at -1 : !sched.buffer<tensor<300xsi8>>
  %v = sched.buffer "w.exp_avg_sq" in @host at -1 : !sched.buffer<tensor<300xui8>>
  %ms = sched.buffer "w.exp_avg.scale" in @host at -1 : !sched.buffer<tensor<1xf32>>
  // expected-error @+1 {{8-bit moments have f32 scales of 2 elements (one per 256)}}
  sched.parameter "w" master(%w) state(%g, %m, %v, %ms, %ms) {file = "m.onnx", offset = 0 : i64, length = 1200 : i64} : !sched.buffer<tensor<300xf32>>, !sched.buffer<tensor<300xf32>>, !sched.buffer<tensor<300xsi8>>, !sched.buffer<tensor<300xui8>>, !sched.buffer<tensor<1xf32>>, !sched.buffer<tensor<1xf32>>
}

// -----

// Moments of mixed formats.
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @host tier host size 0
  %w = sched.buffer "w" in @host at -1 : !sched.buffer<tensor<4xf32>>
  %g = sched.buffer "w.grad" in @host at -1 : !sched.buffer<tensor<4xf32>>
  %m = sched.buffer "w.exp_avg" in @host at -1 : !sched.buffer<tensor<4xbf16>>
  %v = sched.buffer "w.exp_avg_sq" in @host at -1 : !sched.buffer<tensor<4xf32>>
  // expected-error @+1 {{the gradient must be f32 and the moments both f32, both bf16, si8 and ui8, or packed ui8}}
  sched.parameter "w" master(%w) state(%g, %m, %v) {file = "m.onnx", offset = 0 : i64, length = 16 : i64} : !sched.buffer<tensor<4xf32>>, !sched.buffer<tensor<4xf32>>, !sched.buffer<tensor<4xbf16>>, !sched.buffer<tensor<4xf32>>
}

// -----

// 4-bit moments pack two elements a byte: 300 elements take 150 bytes.
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @host tier host size 0
  %w = sched.buffer "w" in @host at -1 : !sched.buffer<tensor<300xf32>>
  %g = sched.buffer "w.grad" in @host at -1 : !sched.buffer<tensor<300xf32>>
  %m = sched.buffer "w.exp_avg" in @host at -1 : !sched.buffer<tensor<149xui8>>
  %v = sched.buffer "w.exp_avg_sq" in @host at -1 : !sched.buffer<tensor<149xui8>>
  %ms = sched.buffer "w.exp_avg.scale" in @host at -1 : !sched.buffer<tensor<2xf32>>
  // expected-error @+1 {{the gradient and moments must have the master's shape (4-bit moments: ui8 of 150 elements)}}
  sched.parameter "w" master(%w) state(%g, %m, %v, %ms, %ms) {file = "m.onnx", offset = 0 : i64, length = 1200 : i64} : !sched.buffer<tensor<300xf32>>, !sched.buffer<tensor<300xf32>>, !sched.buffer<tensor<149xui8>>, !sched.buffer<tensor<149xui8>>, !sched.buffer<tensor<2xf32>>, !sched.buffer<tensor<2xf32>>
}

// -----

// 4-bit moments without their scales.
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @host tier host size 0
  %w = sched.buffer "w" in @host at -1 : !sched.buffer<tensor<300xf32>>
  %g = sched.buffer "w.grad" in @host at -1 : !sched.buffer<tensor<300xf32>>
  %m = sched.buffer "w.exp_avg" in @host at -1 : !sched.buffer<tensor<150xui8>>
  %v = sched.buffer "w.exp_avg_sq" in @host at -1 : !sched.buffer<tensor<150xui8>>
  // expected-error @+1 {{8-bit and 4-bit moments, and only they, have two scales}}
  sched.parameter "w" master(%w) state(%g, %m, %v) {file = "m.onnx", offset = 0 : i64, length = 1200 : i64} : !sched.buffer<tensor<300xf32>>, !sched.buffer<tensor<300xf32>>, !sched.buffer<tensor<150xui8>>, !sched.buffer<tensor<150xui8>>
}

// -----

// A layer-major program has one loss per micro-batch.
// expected-error @+1 {{needs one loss for micro-batch 1}}
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 2 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m", layer_major = true} {
  sched.arena @device tier device size 0
  %l = sched.buffer "loss" in @device at -1 : !sched.buffer<tensor<f32>>
  sched.loss(%l) : !sched.buffer<tensor<f32>>
}

// -----

// Only a layer-major program has inputs of more than one micro-batch.
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 2 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @device tier device size 0
  %i = sched.buffer "ids" in @device at -1 : !sched.buffer<tensor<1x1xi64>>
  // expected-error @+1 {{micro_batch 1 is outside the program's 1 (one set of inputs)}}
  sched.input "ids" role tokens(%i) {micro_batch = 1 : i64} : !sched.buffer<tensor<1x1xi64>>
}
