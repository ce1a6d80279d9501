// RUN: mt-opt --split-input-file --mt-lower-to-sched --verify-diagnostics %s -o /dev/null

// expected-error @+1 {{no @train_step or @forward_step: run mt-derive-training-step or mt-derive-forward-step first}}
module {
}

// -----

// An op without a kernel is named.
train.param @emb {source = #train<source inline>, file = "m", trainable} : tensor<16x8xf32>
func.func @train_step(%ids: tensor<2x4xi64> {train.name = "ids", train.role = #train<role tokens>}, %x: tensor<2x8xf32> {train.name = "x", train.role = #train<role targets>}) -> (tensor<f32> {train.loss}) {
  %w = train.param.load @emb : tensor<16x8xf32>
  %h = train.embedding %w, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  // expected-error @+1 {{'train.dropout' has no kernel; it cannot be scheduled}}
  %s = train.dropout %h {ratio = 0.1 : f32, training} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %l = train.cross_entropy %s, %ids {ignore_index = -100 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A cast copies convert: F32, BF16, I64 and booleans; to an 8-bit number it
// has none.
train.param @emb {source = #train<source inline>, file = "m", trainable} : tensor<16x8xf32>
func.func @train_step(%ids: tensor<2x4xi64> {train.name = "ids", train.role = #train<role tokens>}, %x: tensor<2x8xf32> {train.name = "x", train.role = #train<role targets>}) -> (tensor<f32> {train.loss}) {
  %w = train.param.load @emb : tensor<16x8xf32>
  %h = train.embedding %w, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  // expected-error @+1 {{'train.cast' has no kernel; it cannot be scheduled}}
  %q = train.cast %ids {to = ui8} : (tensor<2x4xi64>) -> tensor<2x4xui8>
  %f = train.cast %q {to = f32} : (tensor<2x4xui8>) -> tensor<2x4xf32>
  %u = train.unsqueeze %f {axes = array<i64: -1>} : (tensor<2x4xf32>) -> tensor<2x4x1xf32>
  %s = train.mul %h, %u : (tensor<2x4x8xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  %l = train.cross_entropy %s, %ids {ignore_index = -100 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// The step's shape comes from its tokens input alone.
train.param @emb {source = #train<source inline>, file = "m", trainable} : tensor<16x8xf32>
// expected-error @+1 {{the step needs a [batch, seq] tokens input and an embedding}}
func.func @train_step(%x: tensor<2x4xi64> {train.name = "x", train.role = #train<role targets>}) -> (tensor<f32> {train.loss}) {
  %w = train.param.load @emb : tensor<16x8xf32>
  %h = train.embedding %w, %x : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %l = train.cross_entropy %h, %x {ignore_index = -100 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

train.param @emb {source = #train<source inline>, file = "m", trainable} : tensor<16x8xf32>
// expected-error @+1 {{the tokens input 0 is of rank 1; the step takes them as [batch, seq]}}
func.func @train_step(%ids: tensor<8xi64> {train.name = "ids", train.role = #train<role tokens>}) -> (tensor<f32> {train.loss}) {
  %w = train.param.load @emb : tensor<16x8xf32>
  %h = train.embedding %w, %ids : (tensor<16x8xf32>, tensor<8xi64>) -> tensor<8x8xf32>
  %l = train.cross_entropy %h, %ids {ignore_index = -100 : i64} : (tensor<8x8xf32>, tensor<8xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

train.param @emb {source = #train<source inline>, file = "m", trainable} : tensor<16x8xf32>
// expected-error @+1 {{input 1 is a second tokens input; the step takes one}}
func.func @train_step(%ids: tensor<2x4xi64> {train.name = "ids", train.role = #train<role tokens>}, %more: tensor<2x4xi64> {train.name = "more", train.role = #train<role tokens>}) -> (tensor<f32> {train.loss}) {
  %w = train.param.load @emb : tensor<16x8xf32>
  %h = train.embedding %w, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %l = train.cross_entropy %h, %more {ignore_index = -100 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<f32>
  return %l : tensor<f32>
}
