//===- Pipeline.cpp - the front-end pass pipeline -------------------------===//
#include "dialects/Train/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

void mt::train::buildFusionPipeline(mlir::OpPassManager &pm, bool explainFusion,
                                    bool fusePatterns) {
  pm.addPass(createFoldConstantsPass());
  FuseOpsPassOptions options;
  options.explain = explainFusion;
  options.onlyOneToOne = !fusePatterns;
  pm.addPass(createFuseOpsPass(options));
  pm.addPass(createDecomposeOpsPass());
  // Fusion leaves layout ops that cancel (transpose pairs, reshapes) and
  // equal ops of the layers' fused shapes. The stock cleanups may erase any
  // dead op: the parameters are symbols, not values. CSE first, so that the
  // layers' equal ops on one constant (the rotary tables' layouts) fold once,
  // not once per layer.
  pm.addPass(mlir::createCSEPass());
  pm.addPass(createFoldConstantsPass());
  pm.addPass(mlir::createCSEPass());
  pm.addPass(mlir::createCanonicalizerPass());
  if (explainFusion)
    pm.addPass(createExplainFusionPass());
}

void mt::train::buildOutlinePipeline(mlir::OpPassManager &pm,
                                     int64_t keepLast) {
  if (keepLast < 0)
    return;
  OutlineLayersPassOptions o;
  o.keepLast = keepLast;
  pm.addPass(createOutlineLayersPass(o));
}

void mt::train::buildFrontendPipeline(mlir::OpPassManager &pm,
                                      bool explainFusion, int64_t keepLast,
                                      bool fusePatterns) {
  buildFusionPipeline(pm, explainFusion, fusePatterns);
  buildOutlinePipeline(pm, keepLast);
}
