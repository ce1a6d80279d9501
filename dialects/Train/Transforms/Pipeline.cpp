//===- Pipeline.cpp - the front-end pass pipeline -------------------------===//
#include "dialects/Train/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

void mt::train::buildFrontendPipeline(mlir::OpPassManager &pm) {
  pm.addPass(createFoldConstantsPass());
  pm.addPass(mlir::createCSEPass());
  pm.addPass(createFuseOpsPass());
  // Fusion leaves layout ops that cancel (transpose pairs, reshapes).
  pm.addPass(createFoldConstantsPass());
  pm.addPass(mlir::createCSEPass());
  pm.addPass(createOutlineLayersPass());
}
