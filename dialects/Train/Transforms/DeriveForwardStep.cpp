//===- DeriveForwardStep.cpp - the model's forward as a step of its own ---===//
//
// @forward_step is @model as it is, with every weight frozen: what a
// forward-only plan runs (mtc --forward, an evaluation). Its inputs without
// a role are tensors the caller gives (`data`); its results, the loss among
// them, are outputs, read back after the run.
//
//===----------------------------------------------------------------------===//
#include "dialects/Train/IR/TrainOps.h"
#include "dialects/Train/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mt::train {
#define GEN_PASS_DEF_DERIVEFORWARDSTEPPASS
#include "dialects/Train/Transforms/Passes.h.inc"
} // namespace mt::train

using namespace mlir;
using namespace mt::train;

namespace {

struct DeriveForwardStep
    : public mt::train::impl::DeriveForwardStepPassBase<DeriveForwardStep> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto model = module.lookupSymbol<func::FuncOp>("model");
    if (!model || model.isExternal()) {
      module.emitError("no @model function to run forward");
      return signalPassFailure();
    }
    // Nothing is trained: no weight needs a gradient or an optimizer state.
    for (auto p : module.getOps<ParamOp>())
      p.setTrainable(false);
    OpBuilder b(model);
    b.setInsertionPointAfter(model);
    auto step = cast<func::FuncOp>(b.clone(*model));
    step.setSymName("forward_step");
    MLIRContext *ctx = &getContext();
    for (unsigned i = 0; i < step.getNumArguments(); ++i) {
      auto role = step.getArgAttrOfType<InputRoleAttr>(i, "train.role");
      if (!role || role.getValue() == InputRole::Other)
        step.setArgAttr(i, "train.role",
                        InputRoleAttr::get(ctx, InputRole::Data));
    }
    for (unsigned i = 0; i < step.getNumResults(); ++i)
      step.setResultAttr(i, "train.output", UnitAttr::get(ctx));
  }
};

} // namespace
