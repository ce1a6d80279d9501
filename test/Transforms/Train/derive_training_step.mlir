// RUN: mt-opt --split-input-file --mt-derive-training-step %s | FileCheck %s

// A layer template gets a gradient function that recomputes the layer and
// runs its backward; the step calls it in reverse layer order and returns
// the loss and the gradient of every trainable weight, in weight order.
// The backward starts from the step's last input, the loss scale (the
// share of the step's trained tokens a run gives each micro-batch).
// CHECK-LABEL: func.func private @layer_grad(
// CHECK-SAME: %[[H:[a-z0-9]+]]: tensor<2x8xf32>, %[[N:[a-z0-9]+]]: tensor<8xf32> {train.param = "norm.weight"}, %[[W:[a-z0-9]+]]: tensor<8x8xf32> {train.param = "proj.weight"}, %[[DY:[a-z0-9]+]]: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<8xf32>, tensor<8x8xf32>)
// CHECK: %[[A:.+]] = train.rms_norm %[[H]], %[[N]]
// CHECK: train.linear %[[A]], %[[W]]
// CHECK: %[[DX:.+]], %[[DW:.+]] = train.linear_grad %[[A]], %[[W]], %[[DY]]
// CHECK: %[[DH:.+]], %[[DN:.+]] = train.rms_norm_grad %[[H]], %[[N]], %[[DX]]
// CHECK: %[[SUM:.+]] = train.add %[[DY]], %[[DH]]
// CHECK: return %[[SUM]], %[[DN]], %[[DW]]
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %[[SCALE:[a-z0-9]+]]: tensor<f32> {train.name = "loss_scale", train.role = #train<role loss_scale>})
// CHECK-SAME: -> (tensor<f32> {train.loss}, tensor<16x8xf32> {train.grad_of = "embed.weight"}, tensor<8xf32> {train.grad_of = "layers.0.norm.weight"}, tensor<8x8xf32> {train.grad_of = "layers.0.proj.weight"}, tensor<8xf32> {train.grad_of = "layers.1.norm.weight"}, tensor<8x8xf32> {train.grad_of = "layers.1.proj.weight"})
// CHECK: %[[L:.+]] = train.cross_entropy
// CHECK: %[[DL:.+]] = train.cross_entropy_grad %{{.*}}, %{{.*}}, %[[SCALE]]
// The tied embedding/head weight: the head's gradient and the embedding's add up.
// CHECK: %[[DX:.+]], %[[DHEAD:.+]] = train.linear_grad %{{.*}}, %{{.*}}, %[[DL]]
// CHECK: %[[G1:.+]]:3 = call @layer_grad({{.*}}) {train.layer = 1 : i64}
// CHECK: %[[G0:.+]]:3 = call @layer_grad(%{{.*}}, %{{.*}}, %{{.*}}, %[[G1]]#0) {train.layer = 0 : i64}
// The row torch's padding_idx names gets no gradient.
// CHECK: %[[DE:.+]] = train.embedding_grad %[[G0]]#0, %arg0 {padding_idx = 0 : i64}
// CHECK: %[[DT:.+]] = train.add %[[DHEAD]], %[[DE]]
// CHECK: return %[[L]], %[[DT]], %[[G0]]#1, %[[G0]]#2, %[[G1]]#1, %[[G1]]#2
train.param @embed.weight {source = #train<source inline>, file = "m", trainable} : tensor<16x8xf32>
train.param @layers.0.norm.weight {source = #train<source inline>, file = "m", trainable} : tensor<8xf32>
train.param @layers.0.proj.weight {source = #train<source inline>, file = "m", trainable} : tensor<8x8xf32>
train.param @layers.1.norm.weight {source = #train<source inline>, file = "m", trainable} : tensor<8xf32>
train.param @layers.1.proj.weight {source = #train<source inline>, file = "m", trainable} : tensor<8x8xf32>
func.func private @layer(%h: tensor<2x8xf32>, %n: tensor<8xf32> {train.param = "norm.weight"}, %w: tensor<8x8xf32> {train.param = "proj.weight"}) -> tensor<2x8xf32> {
  %a = train.rms_norm %h, %n {eps = 1.0e-6 : f32} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %b = train.linear %a, %w {layout = #train<layout out_in>} : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %o = train.add %h, %b : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %o : tensor<2x8xf32>
}
func.func @model(%ids: tensor<2xi64>, %t: tensor<2xi64>) -> (tensor<f32> {train.loss}) {
  %emb = train.param.load @embed.weight : tensor<16x8xf32>
  %n0 = train.param.load @layers.0.norm.weight : tensor<8xf32>
  %p0 = train.param.load @layers.0.proj.weight : tensor<8x8xf32>
  %n1 = train.param.load @layers.1.norm.weight : tensor<8xf32>
  %p1 = train.param.load @layers.1.proj.weight : tensor<8x8xf32>
  %h = train.embedding %emb, %ids {padding_idx = 0 : i64} : (tensor<16x8xf32>, tensor<2xi64>) -> tensor<2x8xf32>
  %h0 = call @layer(%h, %n0, %p0) {train.layer = 0 : i64} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %h1 = call @layer(%h0, %n1, %p1) {train.layer = 1 : i64} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %lg = train.linear %h1, %emb {layout = #train<layout out_in>} : (tensor<2x8xf32>, tensor<16x8xf32>) -> tensor<2x16xf32>
  %l = train.cross_entropy %lg, %t {ignore_index = -100 : i64} : (tensor<2x16xf32>, tensor<2xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Frozen weights get no gradient; a bias gradient sums over the leading
// dims; broadcasting adds sum back to the operand's shape.
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: -> (tensor<f32> {train.loss}, tensor<4xf32> {train.grad_of = "b"})
// CHECK: %[[DX:.+]], %[[DW:.+]] = train.linear_grad
// CHECK: %[[DB:.+]] = train.reduce_sum %{{.*}} {axes = array<i64: 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4xf32>
// CHECK: return %{{.*}}, %[[DB]]
train.param @w {source = #train<source inline>, file = "m"} : tensor<4x8xf32>
train.param @b {source = #train<source inline>, file = "m", trainable} : tensor<4xf32>
func.func @model(%x: tensor<2x3x8xf32>, %t: tensor<2x3xi64>) -> (tensor<f32> {train.loss}) {
  %w = train.param.load @w : tensor<4x8xf32>
  %b = train.param.load @b : tensor<4xf32>
  %y = train.linear %x, %w, %b {layout = #train<layout out_in>} : (tensor<2x3x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %l = train.cross_entropy %y, %t {ignore_index = -100 : i64} : (tensor<2x3x4xf32>, tensor<2x3xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A parameter is a symbol: the gradient of one loaded twice (before CSE
// merges the loads) is the sum of its loads', and one no op loads gets a
// zero gradient, in the module's order of parameters.
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: -> (tensor<f32> {train.loss}, tensor<4xf32> {train.grad_of = "w"}, tensor<4xf32> {train.grad_of = "unused"})
// CHECK: %[[A:.+]] = train.param.load @w
// CHECK: %[[B:.+]] = train.param.load @w
// CHECK: %[[DM:.+]] = train.expand
// CHECK: %[[DA:.+]] = train.mul %[[DM]], %[[B]]
// CHECK: %[[DB:.+]] = train.mul %[[DM]], %[[A]]
// CHECK: %[[SUM:.+]] = train.add %[[DA]], %[[DB]]
// CHECK: %[[Z:.+]] = train.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK: return %{{.*}}, %[[SUM]], %[[Z]]
train.param @w {source = #train<source inline>, file = "m", trainable} : tensor<4xf32>
train.param @unused {source = #train<source inline>, file = "m", trainable} : tensor<4xf32>
func.func @model() -> (tensor<f32> {train.loss}) {
  %a = train.param.load @w : tensor<4xf32>
  %b = train.param.load @w : tensor<4xf32>
  %m = train.mul %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %l = train.reduce_sum %m {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
