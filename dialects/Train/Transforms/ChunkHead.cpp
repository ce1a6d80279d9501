//===- ChunkHead.cpp - head and loss in row chunks ------------------------===//
#include "dialects/Train/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "mt-chunk-head"

namespace mt::train {
#define GEN_PASS_DEF_CHUNKHEADPASS
#include "dialects/Train/Transforms/Passes.h.inc"
} // namespace mt::train

using namespace mlir;
using namespace mt::train;

namespace {

struct ChunkHead : public mt::train::impl::ChunkHeadPassBase<ChunkHead> {
  using Base::Base;

  void runOnOperation() override {
    if (chunkRows <= 0) {
      getOperation().emitError("mt-chunk-head: chunk-rows must be at least "
                               "1, got ")
          << int64_t(chunkRows);
      return signalPassFailure();
    }
    auto step = getOperation().lookupSymbol<func::FuncOp>("train_step");
    if (!step)
      return;
    SmallVector<CrossEntropyOp> losses;
    step.walk([&](CrossEntropyOp ce) { losses.push_back(ce); });
    for (CrossEntropyOp ce : losses)
      rewrite(ce);
  }

  void rewrite(CrossEntropyOp ce) {
    auto head = ce.getLogits().getDefiningOp<LinearOp>();
    if (!head || head.getBias())
      return;
    // The logits feed the loss and its gradient only; the gradient feeds
    // the head's linear_grad only.
    CrossEntropyGradOp grad;
    for (Operation *user : head->getUsers()) {
      if (user == ce)
        continue;
      auto g = dyn_cast<CrossEntropyGradOp>(user);
      if (!g || grad || g.getLabels() != ce.getLabels() ||
          g.getIgnoreIndex() != ce.getIgnoreIndex() ||
          g.getShift() != ce.getShift())
        return;
      grad = g;
    }
    if (!grad || !grad->hasOneUse())
      return;
    auto linearGrad = dyn_cast<LinearGradOp>(*grad->getUsers().begin());
    if (!linearGrad || linearGrad.getInput() != head.getInput() ||
        linearGrad.getWeight() != head.getWeight())
      return;
    OpBuilder b(ce);
    auto chunk = b.getI64IntegerAttr(chunkRows);
    auto loss = b.create<HeadCrossEntropyOp>(
        ce.getLoc(), head.getInput(), head.getWeight(), ce.getLabels(),
        head.getLayoutAttr(), ce.getIgnoreIndexAttr(), ce.getShiftAttr(),
        chunk);
    ce.getResult().replaceAllUsesWith(loss.getResult());
    b.setInsertionPoint(linearGrad);
    auto g = b.create<HeadCrossEntropyGradOp>(
        linearGrad.getLoc(),
        TypeRange{head.getInput().getType(), head.getWeight().getType()},
        head.getInput(), head.getWeight(), ce.getLabels(), grad.getGrad(),
        head.getLayoutAttr(), ce.getIgnoreIndexAttr(), ce.getShiftAttr(),
        chunk);
    linearGrad.getInputGrad().replaceAllUsesWith(g.getInputGrad());
    linearGrad.getWeightGrad().replaceAllUsesWith(g.getWeightGrad());
    linearGrad.erase();
    grad.erase();
    ce.erase();
    // The model's other outputs (the logits) are not results of the step.
    if (head->use_empty())
      head.erase();
    ++numChunked;
  }
};

} // namespace
