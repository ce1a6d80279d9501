// RUN: mt-opt --split-input-file --mt-outline-layers %s | FileCheck %s
// RUN: mt-opt --split-input-file --mt-outline-layers=min-layers=3 %s | FileCheck %s --check-prefix=MIN
// RUN: mt-opt --mt-outline-layers=keep-last=1 %s --split-input-file | FileCheck %s --check-prefix=KEEP

// Two layers of one structure share one template; the embedding stays
// before the calls and the final norm and head after them.
// CHECK-LABEL: func.func private @layer(
// CHECK-SAME: %{{.*}}: tensor<2x8xf32>, %{{.*}}: tensor<8xf32> {train.param = "norm.weight"}, %{{.*}}: tensor<8x8xf32> {train.param = "proj.weight"}) -> tensor<2x8xf32>
// CHECK: train.rms_norm
// CHECK: train.linear
// CHECK: train.add
// CHECK-NOT: func.func private
// CHECK-LABEL: func.func @model
// CHECK: train.embedding
// CHECK: %[[H0:.+]] = call @layer(%{{.*}}) {train.layer = 0 : i64}
// CHECK: %[[H1:.+]] = call @layer(%[[H0]], {{.*}}) {train.layer = 1 : i64}
// CHECK: train.rms_norm %[[H1]]
// CHECK: train.linear
// CHECK: train.cross_entropy
// MIN-NOT: call @layer
// keep-last=1: the last layer stays inline (the backward keeps its
// activations); the first is still a call.
// KEEP-LABEL: func.func @model
// KEEP: %[[K0:.+]] = call @layer(%{{.*}}) {train.layer = 0 : i64}
// KEEP-NOT: call @layer
// KEEP: train.rms_norm %[[K0]]
// KEEP: train.linear
// KEEP: train.add
// KEEP: train.cross_entropy
train.param @embed.weight {source = #train<source inline>, file = "m", trainable} : tensor<16x8xf32>
train.param @layers.0.norm.weight {source = #train<source inline>, file = "m", trainable} : tensor<8xf32>
train.param @layers.0.proj.weight {source = #train<source inline>, file = "m", trainable} : tensor<8x8xf32>
train.param @layers.1.norm.weight {source = #train<source inline>, file = "m", trainable} : tensor<8xf32>
train.param @layers.1.proj.weight {source = #train<source inline>, file = "m", trainable} : tensor<8x8xf32>
train.param @norm.weight {source = #train<source inline>, file = "m", trainable} : tensor<8xf32>
func.func @model(%ids: tensor<2xi64>, %t: tensor<2xi64>) -> tensor<f32> {
  %emb = train.param.load @embed.weight : tensor<16x8xf32>
  %n0 = train.param.load @layers.0.norm.weight : tensor<8xf32>
  %p0 = train.param.load @layers.0.proj.weight : tensor<8x8xf32>
  %n1 = train.param.load @layers.1.norm.weight : tensor<8xf32>
  %p1 = train.param.load @layers.1.proj.weight : tensor<8x8xf32>
  %nf = train.param.load @norm.weight : tensor<8xf32>
  %h = train.embedding %emb, %ids : (tensor<16x8xf32>, tensor<2xi64>) -> tensor<2x8xf32>
  %a0 = train.rms_norm %h, %n0 {eps = 1.0e-6 : f32} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %b0 = train.linear %a0, %p0 {layout = #train<layout out_in>} : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %h0 = train.add %h, %b0 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %a1 = train.rms_norm %h0, %n1 {eps = 1.0e-6 : f32} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %b1 = train.linear %a1, %p1 {layout = #train<layout out_in>} : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %h1 = train.add %h0, %b1 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %f = train.rms_norm %h1, %nf {eps = 1.0e-6 : f32} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %lg = train.linear %f, %emb {layout = #train<layout out_in>} : (tensor<2x8xf32>, tensor<16x8xf32>) -> tensor<2x16xf32>
  %l = train.cross_entropy %lg, %t {ignore_index = -100 : i64} : (tensor<2x16xf32>, tensor<2xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Layers of different structure (another eps) get their own templates.
// CHECK-LABEL: func.func private @layer(
// CHECK: eps = 9.99999997E-7
// CHECK-LABEL: func.func private @layer_1(
// CHECK: eps = 9.99999974E-6
// CHECK-LABEL: func.func @model
// CHECK: call @layer(
// CHECK: call @layer_1(
train.param @layers.0.norm.weight {source = #train<source inline>, file = "m", trainable} : tensor<8xf32>
train.param @layers.1.norm.weight {source = #train<source inline>, file = "m", trainable} : tensor<8xf32>
func.func @model(%h: tensor<2x8xf32>) -> tensor<f32> {
  %n0 = train.param.load @layers.0.norm.weight : tensor<8xf32>
  %n1 = train.param.load @layers.1.norm.weight : tensor<8xf32>
  %a0 = train.rms_norm %h, %n0 {eps = 1.0e-6 : f32} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %a1 = train.rms_norm %a0, %n1 {eps = 1.0e-5 : f32} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %l = train.reduce_mean %a1 {axes = array<i64>} : (tensor<2x8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A loss over what each layer computed (a load-balancing loss over every
// layer's router logits) comes after the head: those ops stay in @model,
// and each layer returns the value they read as a second result.
// CHECK-LABEL: func.func private @layer(
// CHECK-SAME: -> (tensor<2x4xf32>, tensor<2x8xf32>)
// CHECK: train.linear
// CHECK: train.linear
// CHECK: train.mul
// CHECK-LABEL: func.func @model
// CHECK: %[[L0:.+]]:2 = call @layer({{.*}}) {train.layer = 0 : i64}
// CHECK: %[[L1:.+]]:2 = call @layer(%[[L0]]#1, {{.*}}) {train.layer = 1 : i64}
// CHECK: train.cross_entropy
// CHECK: train.softmax %[[L0]]#0
// CHECK: train.softmax %[[L1]]#0
train.param @layers.0.router.weight {source = #train<source inline>, file = "m", trainable} : tensor<4x8xf32>
train.param @layers.0.proj.weight {source = #train<source inline>, file = "m", trainable} : tensor<8x8xf32>
train.param @layers.1.router.weight {source = #train<source inline>, file = "m", trainable} : tensor<4x8xf32>
train.param @layers.1.proj.weight {source = #train<source inline>, file = "m", trainable} : tensor<8x8xf32>
train.param @head.weight {source = #train<source inline>, file = "m", trainable} : tensor<16x8xf32>
func.func @model(%h: tensor<2x8xf32>, %t: tensor<2xi64>) -> tensor<f32> {
  %r0 = train.param.load @layers.0.router.weight : tensor<4x8xf32>
  %w0 = train.param.load @layers.0.proj.weight : tensor<8x8xf32>
  %r1 = train.param.load @layers.1.router.weight : tensor<4x8xf32>
  %w1 = train.param.load @layers.1.proj.weight : tensor<8x8xf32>
  %head = train.param.load @head.weight : tensor<16x8xf32>
  %g0 = train.linear %h, %r0 {layout = #train<layout out_in>} : (tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<2x4xf32>
  %l0 = train.linear %h, %w0 {layout = #train<layout out_in>} : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %h0 = train.mul %l0, %h : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %g1 = train.linear %h0, %r1 {layout = #train<layout out_in>} : (tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<2x4xf32>
  %l1 = train.linear %h0, %w1 {layout = #train<layout out_in>} : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %h1 = train.mul %l1, %h0 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %logits = train.linear %h1, %head {layout = #train<layout out_in>} : (tensor<2x8xf32>, tensor<16x8xf32>) -> tensor<2x16xf32>
  %ce = train.cross_entropy %logits, %t {ignore_index = -100 : i64} : (tensor<2x16xf32>, tensor<2xi64>) -> tensor<f32>
  %p0 = train.softmax %g0 {axis = -1 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %p1 = train.softmax %g1 {axis = -1 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %s = train.add %p0, %p1 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %aux = train.reduce_sum %s {axes = array<i64>} : (tensor<2x4xf32>) -> tensor<f32>
  %loss = train.add %ce, %aux : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %loss : tensor<f32>
}
