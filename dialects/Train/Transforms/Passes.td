//===- Passes.td - front-end passes of the train dialect ---*- tablegen -*-===//
#ifndef MT_TRAIN_PASSES
#define MT_TRAIN_PASSES

include "mlir/Pass/PassBase.td"

def FoldConstantsPass : Pass<"mt-fold-constants", "mlir::ModuleOp"> {
  let summary = "Fold everything that depends on neither graph inputs nor trainable weights";
  let description = [{
    Evaluates, in one pass over each function in program order, every op
    whose operands are constants or frozen buffers with known values (shape
    chains, causal masks, position ids, rotary tables), replaces it with a
    `train.constant`, removes value-preserving ops (Identity, no-op Cast and
    CastLike, Dropout with ratio 0 or training off, inverse Transposes),
    turns `sequence_at(split_to_sequence)` into `split`, and erases what is
    left unused. Trainable weights are never read.

    Before:
    ```mlir
    %s = train.shape %x {start = 0 : i64, end = 2 : i64} : (tensor<2x16x64xf32>) -> tensor<2xi64>
    %r = train.reshape %x, %s2 : ...
    %i = train.identity %y : tensor<2x16xf32>
    ```
    After:
    ```mlir
    %s = train.constant dense<[2, 16]> : tensor<2xi64>
    ```
  }];
  let dependentDialects = ["::mt::train::TrainDialect"];
  let statistics = [
    Statistic<"numFolded", "folded", "ops replaced by constants">,
    Statistic<"numForwarded", "forwarded", "value-preserving ops removed">,
    Statistic<"numErased", "erased", "unused ops erased">,
  ];
}

def FuseOpsPass : Pass<"mt-fuse-ops", "mlir::ModuleOp"> {
  let summary = "Rewrite exporter patterns into fused ops";
  let description = [{
    Recognises what PyTorch's TorchScript and dynamo exporters emit and
    rewrites it to fused ops: embedding (Gather on a weight), linear
    (MatMul on a transposed or pre-transposed weight, Gemm, + bias),
    rms_norm (Pow/ReduceMean/Add/Sqrt/Reciprocal or Div/Mul, also (1+w)),
    layer_norm (LayerNormalization), rotary (Slice/Neg/Concat/Mul/Add or
    Split), attention (QK^T, scale, mask, Softmax, V, with GQA head
    repetition), SwiGLU and GELU (exact and tanh), and cross_entropy
    (SoftmaxCrossEntropyLoss, with the Hugging Face label shift). Operands
    that a fused op defines as non-trainable (masks, rotary tables) are
    frozen. Graph inputs get their role (tokens, labels, targets). Each
    match replaces the op it started from and erases the ops it left dead.
    A Slice of activations left after the fusions (a fused projection's
    `qkv_proj` output cut into q, k and v) becomes a Split in the
    canonicalizer that runs after (train.slice's canonicalization).

    Before:
    ```mlir
    %t = train.transpose %w {perm = array<i64: 1, 0>} : (tensor<128x64xf32>) -> tensor<64x128xf32>
    %y = train.matmul %x, %t : (tensor<2x16x64xf32>, tensor<64x128xf32>) -> tensor<2x16x128xf32>
    ```
    After:
    ```mlir
    %y = train.linear %x, %w {layout = #train<layout out_in>} : (tensor<2x16x64xf32>, tensor<128x64xf32>) -> tensor<2x16x128xf32>
    ```
  }];
  let dependentDialects = ["::mt::train::TrainDialect"];
  let statistics = [
    Statistic<"numFused", "fused", "fused ops created">,
    Statistic<"numLinear", "linear", "linears from MatMul or Gemm">,
    Statistic<"numExperts", "experts", "expert linears from a MatMul of gathered expert weights">,
    Statistic<"numEmbedding", "embedding", "embeddings from Gather">,
    Statistic<"numNorms", "norms", "rms_norms and layer_norms">,
    Statistic<"numActivations", "activations", "activations and gated activations">,
    Statistic<"numRotary", "rotary", "rotary embeddings">,
    Statistic<"numAttention", "attention", "attentions">,
    Statistic<"numLifted", "lifted", "ops on heads merged into the batch lifted back to [B, H, ., .]">,
    Statistic<"numCrossEntropy", "cross-entropy", "cross-entropy losses">,
  ];
  let options = [
    Option<"explain", "explain", "bool", /*default=*/"false",
           "Keep at each op why each pattern that started there did not "
           "match (a train.unfused attribute), for mt-explain-fusion">,
    Option<"onlyOneToOne", "one-to-one", "bool", /*default=*/"false",
           "Rewrite only single ops into their kernels (Gather of a weight, "
           "Gemm, LayerNormalization, Gelu, SoftmaxCrossEntropyLoss, Slice); "
           "leave every pattern of several ops in primitives">,
  ];
}

def ExplainFusionPass : Pass<"mt-explain-fusion", "mlir::ModuleOp"> {
  let summary = "Say at each op left unfused why (remarks)";
  let description = [{
    After fusion and folding: one remark at each op that stays a primitive
    kernel of the step (its results reach a return, it is not a fused op,
    and it computes floats from something other than constants), naming
    what each pattern that started there found instead (the
    `train.unfused` reasons mt-fuse-ops{explain} kept), or that none
    starts at it. The reasons are then removed.

    ```
    remark: train.matmul left unfused: linear: not [..., K] x [K, N]; attention: the scores are not a scaled q k^T
    ```
  }];
}

def OutlineLayersPass : Pass<"mt-outline-layers", "mlir::ModuleOp"> {
  let summary = "Outline repeated decoder layers into one template per structure";
  let description = [{
    Groups the ops of the model function by the decoder layer whose
    trainable weights they use (the layer index in the weight name, such as
    `layers.3.` or `h.3.`), outlines each group into a private function with
    its activations and weights as arguments, and keeps one function per
    distinct structure: every layer then is a `func.call` of a template.

    After (two layers of one structure):
    ```mlir
    func.func private @layer(%h: tensor<2x16x64xf32>, %w0: ..., ...) -> tensor<2x16x64xf32>
    %h1 = func.call @layer(%h0, %a0, ...) {train.layer = 0 : i64}
    %h2 = func.call @layer(%h1, %a1, ...) {train.layer = 1 : i64}
    ```
  }];
  let dependentDialects = ["::mt::train::TrainDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"minLayers", "min-layers", "int64_t", "2",
           "Outline only when at least this many layers are found">,
    Option<"keepLast", "keep-last", "int64_t", "0",
           "Leave the last this many layers inline: the backward keeps "
           "their activations instead of recomputing them from the layer "
           "input (the first to be needed by the backward, so they are "
           "held the shortest)">,
  ];
  let statistics = [
    Statistic<"numLayers", "layers", "layer calls created">,
    Statistic<"numTemplates", "templates", "distinct layer templates">,
  ];
}

def DecomposeOpsPass : Pass<"mt-decompose-ops", "mlir::ModuleOp"> {
  let summary = "ONNX-form ops that fusion left, as the primitives they are made of";
  let description = [{
    Runs after mt-fuse-ops: an op of ONNX's form that has no kernel of its
    own and that no fused op took becomes the primitive ops it is defined
    by, so that it still trains (only slower) instead of being refused at
    scheduling. Gemm (an activation times an activation, or with transA,
    alpha or beta):

    Before:
    ```mlir
    %y = train.gemm %a, %b, %c {transB, alpha = 2.0 : f32} : (tensor<2x4xf32>, tensor<3x4xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    ```
    After:
    ```mlir
    %t = train.transpose %b {perm = array<i64: 1, 0>} : (tensor<3x4xf32>) -> tensor<4x3xf32>
    %p = train.matmul %a, %t : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
    %s = train.mul %p, %alpha : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
    %y = train.add %s, %c : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    ```
  }];
  let dependentDialects = ["::mt::train::TrainDialect"];
  let statistics = [
    Statistic<"numDecomposed", "decomposed", "ops replaced by their primitives">,
  ];
}

def DeriveForwardStepPass : Pass<"mt-derive-forward-step", "mlir::ModuleOp"> {
  let summary = "The forward step: the model's forward alone, every weight frozen";
  let description = [{
    Creates `@forward_step`, the outlined model's forward with its inputs
    and results: what a forward-only plan runs (mtc --forward; the
    evaluation of a model). Every weight of the module becomes frozen (no
    gradient, no optimizer state), each input without a role becomes a
    given tensor (`data`), and each result, the loss too, is an output
    (`train.output`). Nothing is differentiated, so any op with a kernel
    may be on the way to a result.

    After:
    ```mlir
    func.func @forward_step(%x: tensor<2x3xf32> {train.name = "x", train.role = #train<role data>})
        -> (tensor<2x3xf32> {train.name = "y", train.output}) { ... }
    ```
  }];
}

def DeriveTrainingStepPass : Pass<"mt-derive-training-step", "mlir::ModuleOp"> {
  let summary = "Derive the backward pass: one backward per layer template and the training step";
  let description = [{
    Reverse-mode differentiation of the outlined model. For every layer
    template `@T(acts..., weights...) -> outs` it creates
    `@T_grad(acts..., weights..., d_outs...) -> (d_acts..., d_weights...)`,
    which recomputes the layer's forward from its inputs (the layer
    boundary is the checkpoint) and then runs its backward. It creates
    `@train_step` with the inputs of `@model`, returning the loss and the
    gradient of every trainable weight (result attribute `train.grad_of`),
    in the order of the weights. Fused ops differentiate through their
    gradient ops (`train.linear_grad`, ...); a primitive op on a
    differentiable path without a gradient rule is an error that names the
    op and its ONNX node.

    After:
    ```mlir
    func.func private @layer_grad(%h: tensor<2x16x64xf32>, %w: ..., %dh: tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, ...)
    func.func @train_step(%ids: tensor<2x16xi64>, %labels: tensor<2x16xi64>) -> (tensor<f32> {train.loss}, tensor<256x64xf32> {train.grad_of = "embed.weight"}, ...)
    ```
  }];
  let dependentDialects = ["::mt::train::TrainDialect", "::mlir::func::FuncDialect"];
  let statistics = [
    Statistic<"numGradOps", "grad-ops", "gradient ops emitted">,
  ];
}

def ChunkHeadPass : Pass<"mt-chunk-head", "mlir::ModuleOp"> {
  let summary = "Compute the head and the loss in row chunks so that full logits never exist";
  let description = [{
    In `@train_step`, the head's `linear` whose logits only the loss and
    its gradient read, with that `cross_entropy`, `cross_entropy_grad` and
    the head's `linear_grad`, become `head_cross_entropy` and
    `head_cross_entropy_grad`, which compute `chunk-rows` rows of logits at
    a time (the backward recomputes them). The logits of the whole batch,
    and their gradient, are gone from the schedule.

    Before:
    ```mlir
    %lg = train.linear %h, %w ...
    %l = train.cross_entropy %lg, %labels ...
    %dlg = train.cross_entropy_grad %lg, %labels, %one ...
    %dh, %dw = train.linear_grad %h, %w, %dlg ...
    ```
    After:
    ```mlir
    %l = train.head_cross_entropy %h, %w, %labels {chunk_rows = 4096 : i64, ...}
    %dh, %dw = train.head_cross_entropy_grad %h, %w, %labels, %one {chunk_rows = 4096 : i64, ...}
    ```
  }];
  let options = [
    Option<"chunkRows", "chunk-rows", "int64_t", "4096",
           "Rows (tokens) of logits computed at a time">,
  ];
  let statistics = [
    Statistic<"numChunked", "chunked", "heads computed in chunks">,
  ];
}

def ChunkMlpPass : Pass<"mt-chunk-mlp", "mlir::ModuleOp"> {
  let summary = "Compute gated MLPs in row chunks so that their [rows, hidden] intermediates never exist";
  let description = [{
    In every function of the module (the layers, their gradients with
    their recompute, and `@train_step`), a gated MLP, the `linear`s of gate
    and up from one input, their `gated_activation` and the down `linear`,
    becomes `gated_mlp`, which computes `chunk-rows` rows at a time; with
    its backward (the down `linear_grad`, the `gated_activation_grad`, the
    gate and up `linear_grad`s and the `add` of their input gradients) it
    becomes `gated_mlp_grad`, which recomputes each chunk's intermediates.
    The forward a gradient function recomputes only to reach the layer's
    output is erased. An MLP whose values have other readers is left as it
    is.

    Before:
    ```mlir
    %g = train.linear %x, %wg ...
    %u = train.linear %x, %wu ...
    %a = train.gated_activation %g, %u {act = #train<act silu>}
    %y = train.linear %a, %wd ...
    %da, %dwd = train.linear_grad %a, %wd, %dy ...
    %dg, %du = train.gated_activation_grad %g, %u, %da ...
    %dxu, %dwu = train.linear_grad %x, %wu, %du ...
    %dxg, %dwg = train.linear_grad %x, %wg, %dg ...
    %dx = train.add %dxu, %dxg
    ```
    After:
    ```mlir
    %y = train.gated_mlp %x, %wg, %wu, %wd {chunk_rows = 4096 : i64, ...}
    %dx, %dwg, %dwu, %dwd = train.gated_mlp_grad %x, %wg, %wu, %wd, %dy {chunk_rows = 4096 : i64, ...}
    ```
  }];
  let options = [
    Option<"chunkRows", "chunk-rows", "int64_t", "4096",
           "Rows (tokens) of the intermediates computed at a time">,
  ];
  let statistics = [
    Statistic<"numForward", "forward", "MLP forwards computed in chunks">,
    Statistic<"numBackward", "backward", "MLP backwards computed in chunks">,
  ];
}

#endif // MT_TRAIN_PASSES
