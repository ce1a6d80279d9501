//===- Passes.h - front-end passes of the train dialect -------------------===//
#ifndef MT_DIALECTS_TRAIN_TRANSFORMS_PASSES_H
#define MT_DIALECTS_TRAIN_TRANSFORMS_PASSES_H

#include "dialects/Train/IR/TrainOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mt::train {

#define GEN_PASS_DECL
#include "dialects/Train/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "dialects/Train/Transforms/Passes.h.inc"

/// The front-end pipeline: fold, fuse, fold again, outline layers. With
/// `explainFusion`, the fusion says at each op why a pattern did not match.
/// The last `keepLast` layers stay inline (all with a negative count, the
/// pass not run), so that the backward the step derives reads their
/// forward's activations instead of recomputing each from its input (more
/// memory, a quarter less work for each). Without `fusePatterns`, only
/// single ops become fused ops; every pattern of several stays primitive.
void buildFrontendPipeline(mlir::OpPassManager &pm, bool explainFusion = false,
                           int64_t keepLast = 0, bool fusePatterns = true);

/// The front end in two parts, so that one fused model serves every count
/// of kept layers (mtc's planner tries several): folding and fusion, then
/// the outlining of the layers (nothing with a negative `keepLast`).
void buildFusionPipeline(mlir::OpPassManager &pm, bool explainFusion,
                         bool fusePatterns);
void buildOutlinePipeline(mlir::OpPassManager &pm, int64_t keepLast);

} // namespace mt::train

#endif // MT_DIALECTS_TRAIN_TRANSFORMS_PASSES_H
