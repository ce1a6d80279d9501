// RUN: mt-opt %s --split-input-file --verify-diagnostics

// Operands that do not broadcast.
func.func @no_broadcast(%a: tensor<2x3xf32>, %b: tensor<4xf32>) {
  // expected-error @+2 {{shapes [2,3] and [4] do not broadcast}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = train.add %a, %b : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  return
}

// -----

// A result type that contradicts inference.
func.func @wrong_result(%a: tensor<2x3xf32>) {
  // expected-error @+2 {{'train.transpose' op inferred type(s) 'tensor<3x2xf32>' are incompatible with return type(s) of operation 'tensor<2x3xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = train.transpose %a {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// A reshape result checked against its constant target shape.
func.func @reshape_mismatch(%a: tensor<2x8xf32>) {
  %s = train.constant dense<[4, 4]> : tensor<2xi64>
  // expected-error @+1 {{result shape [2,2,4] differs from the inferred [4,4]}}
  %0 = train.reshape %a, %s : (tensor<2x8xf32>, tensor<2xi64>) -> tensor<2x2x4xf32>
  return
}

// -----

func.func @reshape_elements(%a: tensor<2x8xf32>) {
  %s = train.constant dense<[3, 5]> : tensor<2xi64>
  // expected-error @+1 {{cannot reshape [2,8] (16 elements) to [3,5]}}
  %0 = train.reshape %a, %s : (tensor<2x8xf32>, tensor<2xi64>) -> tensor<3x5xf32>
  return
}

// -----

// Weights stored elsewhere must say where.
// expected-error @+1 {{of source external needs file, offset and length}}
train.param @w {source = #train<source external>, trainable} : tensor<4xf32>

// -----

// A weight stored in parts (each expert of a fused one): the parts are its
// elements, each once, all or none of them located, and not beside
// saved_as or a file of its own.
// expected-error @+1 {{parts are not its 4 elements, each once}}
train.param @w {source = #train<source none>, parts = [{name = "a", at = 0 : i64, shape = array<i64: 2>}, {name = "b", at = 3 : i64, shape = array<i64: 1>}]} : tensor<4xf32>

// -----

// expected-error @+1 {{part {at = 0 : i64, shape = array<i64: 4>} needs name, at and shape}}
train.param @w {source = #train<source none>, parts = [{at = 0 : i64, shape = array<i64: 4>}]} : tensor<4xf32>

// -----

// expected-error @+1 {{part 'a' has an empty shape}}
train.param @w {source = #train<source none>, parts = [{name = "a", at = 0 : i64, shape = array<i64: 0, 4>}]} : tensor<4xf32>

// -----

// expected-error @+1 {{has both saved_as and parts}}
train.param @w {source = #train<source none>, saved_as = ["w"], parts = [{name = "a", at = 0 : i64, shape = array<i64: 4>}]} : tensor<4xf32>

// -----

// expected-error @+1 {{has parts with and without a file}}
train.param @w {source = #train<source safetensors>, parts = [{name = "a", at = 0 : i64, shape = array<i64: 2>, file = "w.safetensors", offset = 8 : i64, length = 8 : i64}, {name = "b", at = 2 : i64, shape = array<i64: 2>}]} : tensor<4xf32>

// -----

// expected-error @+1 {{is read from its parts and has a file of its own}}
train.param @w {source = #train<source safetensors>, file = "w.safetensors", offset = 8 : i64, length = 16 : i64, parts = [{name = "a", at = 0 : i64, shape = array<i64: 4>, file = "w.safetensors", offset = 8 : i64, length = 16 : i64}]} : tensor<4xf32>

// -----

// expected-error @+1 {{of source safetensors needs file, offset and length, or parts that have them}}
train.param @w {source = #train<source safetensors>, parts = [{name = "a", at = 0 : i64, shape = array<i64: 4>}]} : tensor<4xf32>

// -----

// A trainable weight never carries its data.
// expected-error @+1 {{is trainable and must not carry its value}}
train.param @w {source = #train<source inline>, trainable, value = dense<1.0> : tensor<4xf32>} : tensor<4xf32>

// -----

func.func @matmul_dims(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) {
  // expected-error @+2 {{matmul contraction dims differ: [2,3] x [4,5]}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = train.matmul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  return
}

// -----

func.func @split_sizes(%a: tensor<2x4xf32>) {
  // expected-error @+2 {{split sizes [1,2] do not add up to dim 1 (4)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = train.split %a {axis = 1 : i64, sizes = array<i64: 1, 2>} : (tensor<2x4xf32>) -> (tensor<2x1xf32>, tensor<2x2xf32>)
  return
}

// -----

func.func @linear_dims(%x: tensor<2x16x64xf32>, %w: tensor<128x32xf32>) {
  // expected-error @+2 {{linear input dim 64 does not match weight [128,32]}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = train.linear %x, %w {layout = #train<layout out_in>} : (tensor<2x16x64xf32>, tensor<128x32xf32>) -> tensor<2x16x128xf32>
  return
}

// -----

func.func @attention_heads(%q: tensor<2x16x64xf32>, %k: tensor<2x16x32xf32>) {
  // expected-error @+2 {{attention q must be [B, S, num_heads * D] with num_heads a multiple of num_kv_heads}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = train.attention %q, %k, %k {num_heads = 4 : i64, num_kv_heads = 3 : i64, scale = 0.25 : f32} : (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @rotary_tables(%x: tensor<2x16x64xf32>, %c: tensor<8x16xf32>) {
  // expected-error @+2 {{rotary tables must be [S, head_dim] or [B, S, head_dim], got [8,16]}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = train.rotary %x, %c, %c {head_dim = 16 : i64} : (tensor<2x16x64xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @cross_entropy_labels(%l: tensor<2x16x256xf32>, %t: tensor<2x15xi64>) {
  // expected-error @+2 {{cross_entropy labels [2,15] must be the logits' leading dims of [2,16,256]}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = train.cross_entropy %l, %t {ignore_index = -100 : i64} : (tensor<2x16x256xf32>, tensor<2x15xi64>) -> tensor<f32>
  return
}

// -----

// A gradient has the type of what it is the gradient of.
func.func @linear_grad_type(%x: tensor<2x8xf32>, %w: tensor<4x8xf32>, %dy: tensor<2x4xf32>) {
  // expected-error @+1 {{gradient type 'tensor<8x4xf32>' differs from 'tensor<4x8xf32>'}}
  %dx, %dw = train.linear_grad %x, %w, %dy {layout = #train<layout out_in>} : (tensor<2x8xf32>, tensor<4x8xf32>, tensor<2x4xf32>) -> (tensor<2x8xf32>, tensor<8x4xf32>)
  return
}

// -----

func.func @embedding_grad_shape(%dy: tensor<2x8xf32>, %ids: tensor<3xi64>) {
  // expected-error @+1 {{gradient [2,8] does not match ids [3] and table [16,8]}}
  %dt = train.embedding_grad %dy, %ids : (tensor<2x8xf32>, tensor<3xi64>) -> tensor<16x8xf32>
  return
}

// -----

func.func @slice_grad_outside(%dy: tensor<2x3xf32>) {
  // expected-error @+1 {{dim 1: 3 elements from 3 by -2 leave [0, 4)}}
  %dx = train.slice_grad %dy {starts = array<i64: 0, 3>, steps = array<i64: 1, -2>} : (tensor<2x3xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @slice_grad_rank(%dy: tensor<2x2xf32>) {
  // expected-error @+1 {{starts and steps need one entry per dim of dy and dx}}
  %dx = train.slice_grad %dy {starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<2x2xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @gather_grad_shape(%dy: tensor<2x3x4xf32>, %i: tensor<2xi64>) {
  // expected-error @+1 {{dy [2,3,4] is not the gather of [2] indices along axis 1 of [2,5,4]}}
  %dx = train.gather_grad %dy, %i {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<2xi64>) -> tensor<2x5x4xf32>
  return
}

// -----

// An expert linear takes rows [N, K], an id per row and [E, O, K] weights.
func.func @expert_linear_mismatch(%x: tensor<5x3xf32>, %i: tensor<5xi64>, %w: tensor<4x6x2xf32>) {
  // expected-error @+2 {{expert_linear input [5,3] and ids [5] do not match the weight [4,6,2]}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = train.expert_linear %x, %i, %w {layout = #train<layout out_in>} : (tensor<5x3xf32>, tensor<5xi64>, tensor<4x6x2xf32>) -> tensor<5x6xf32>
  return
}

// -----

func.func @expert_linear_rank(%x: tensor<5x3xf32>, %i: tensor<5xi64>, %w: tensor<6x3xf32>) {
  // expected-error @+2 {{expert_linear takes x [N, K], ids [N] and a weight [E, O, K] or [E, K, O]}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = train.expert_linear %x, %i, %w {layout = #train<layout out_in>} : (tensor<5x3xf32>, tensor<5xi64>, tensor<6x3xf32>) -> tensor<5x6xf32>
  return
}

// -----

func.func @expert_linear_grad_shape(%x: tensor<5x3xf32>, %i: tensor<5xi64>, %w: tensor<4x6x3xf32>, %dy: tensor<5x3xf32>) {
  // expected-error @+1 {{gradient does not have the expert_linear's output type 'tensor<5x6xf32>'}}
  %dx, %dw = train.expert_linear_grad %x, %i, %w, %dy {layout = #train<layout out_in>} : (tensor<5x3xf32>, tensor<5xi64>, tensor<4x6x3xf32>, tensor<5x3xf32>) -> (tensor<5x3xf32>, tensor<4x6x3xf32>)
  return
}

// -----

// A gated MLP whose down weight does not fit its gate.
func.func @gated_mlp_down(%x: tensor<8x4xf32>, %wg: tensor<16x4xf32>, %wd: tensor<4x8xf32>) {
  // expected-error @+2 {{gated_mlp needs x [..., D], gate and up [I, D], down [D, I] (transposed for in_out) and chunk_rows > 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = train.gated_mlp %x, %wg, %wg, %wd {act = #train<act silu>, chunk_rows = 4 : i64, layout = #train<layout out_in>} : (tensor<8x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>, tensor<4x8xf32>) -> tensor<8x4xf32>
  return
}

// -----

// A chunk of no rows.
func.func @gated_mlp_grad_chunk(%x: tensor<8x4xf32>, %wg: tensor<16x4xf32>, %wd: tensor<4x16xf32>) {
  // expected-error @+1 {{'train.gated_mlp_grad' op needs x [..., D], gate and up [I, D], down [D, I] (transposed for in_out) and chunk_rows > 0}}
  %0:4 = train.gated_mlp_grad %x, %wg, %wg, %wd, %x {act = #train<act silu>, chunk_rows = 0 : i64, layout = #train<layout out_in>} : (tensor<8x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>, tensor<4x16xf32>, tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>, tensor<4x16xf32>)
  return
}

// -----

// A gradient whose type is not its weight's.
func.func @gated_mlp_grad_type(%x: tensor<8x4xf32>, %wg: tensor<16x4xf32>, %wd: tensor<4x16xf32>) {
  // expected-error @+1 {{'train.gated_mlp_grad' op}}
  %0:4 = train.gated_mlp_grad %x, %wg, %wg, %wd, %x {act = #train<act silu>, chunk_rows = 4 : i64, layout = #train<layout out_in>} : (tensor<8x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>, tensor<4x16xf32>, tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<16x4xf32>, tensor<4x16xf32>, tensor<4x16xf32>)
  return
}

// -----

// A load names a parameter of its module, and has its type.
func.func @load_unknown() {
  // expected-error @+1 {{names no train.param: @nope}}
  %0 = train.param.load @nope : tensor<4xf32>
  return
}

// -----

train.param @w {source = #train<source none>} : tensor<4xf32>
func.func @load_type() {
  // expected-error @+1 {{of a 'tensor<4xf32>' parameter has type 'tensor<2xf32>'}}
  %0 = train.param.load @w : tensor<2xf32>
  return
}

// -----

// A pointwise function's gradient has its operand's type.
func.func @unary_grad_type(%x: tensor<2x4xf32>, %dy: tensor<4xf32>) {
  // expected-error @+1 {{the gradient 'tensor<4xf32>' is not of the operand's type 'tensor<2x4xf32>'}}
  %0 = train.unary_grad %x, %dy {fn = #train<unary_fn relu>} : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return
}

// -----

// Pointwise functions take floats.
func.func @relu_of_ints(%x: tensor<2xi64>) {
  // expected-error @+1 {{operand #0 must be ranked tensor of floating-point values}}
  %0 = train.relu %x : (tensor<2xi64>) -> tensor<2xi64>
  return
}
