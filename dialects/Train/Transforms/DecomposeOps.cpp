//===- DecomposeOps.cpp - ONNX-form ops as their primitives ---------------===//
//
// What fusion did not take and has no kernel of its own becomes the
// primitive ops that define it (each with a kernel and a gradient rule), so
// that a graph trains, only slower, instead of being refused when it is
// scheduled.
//
//===----------------------------------------------------------------------===//
#include "dialects/Train/IR/TrainOps.h"
#include "dialects/Train/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mt::train {
#define GEN_PASS_DEF_DECOMPOSEOPSPASS
#include "dialects/Train/Transforms/Passes.h.inc"
} // namespace mt::train

using namespace mlir;
using namespace mt::train;

namespace {

/// A scalar of `like`'s element type.
Value scalarLike(PatternRewriter &b, Location loc, Value like, double v) {
  auto type = RankedTensorType::get(
      {}, cast<RankedTensorType>(like.getType()).getElementType());
  return b.create<ConstantOp>(
      loc,
      DenseElementsAttr::get(type, b.getFloatAttr(type.getElementType(), v)));
}

/// Y = alpha op(A) op(B) + beta C, op a transpose where asked.
struct GemmAsMatMul : OpRewritePattern<GemmOp> {
  GemmAsMatMul(MLIRContext *ctx, llvm::Statistic &count)
      : OpRewritePattern(ctx), count(count) {}
  LogicalResult matchAndRewrite(GemmOp g, PatternRewriter &b) const override {
    Location loc = g.getLoc();
    auto swap = b.getDenseI64ArrayAttr({1, 0});
    Value a =
        g.getTransA() ? b.create<TransposeOp>(loc, g.getA(), swap) : g.getA();
    Value w =
        g.getTransB() ? b.create<TransposeOp>(loc, g.getB(), swap) : g.getB();
    Value y = b.create<MatMulOp>(loc, a, w);
    double alpha = g.getAlpha().convertToDouble();
    if (alpha != 1.0)
      y = b.create<MulOp>(loc, y, scalarLike(b, loc, y, alpha));
    if (Value c = g.getC()) {
      double beta = g.getBeta().convertToDouble();
      if (beta != 1.0)
        c = b.create<MulOp>(loc, c, scalarLike(b, loc, c, beta));
      y = b.create<AddOp>(loc, y, c);
    }
    b.replaceOp(g, y);
    ++count;
    return success();
  }
  llvm::Statistic &count;
};

struct DecomposeOps
    : public mt::train::impl::DecomposeOpsPassBase<DecomposeOps> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<GemmAsMatMul>(&getContext(), numDecomposed);
    GreedyRewriteConfig config;
    // The primitives made here need no rewriting of their own.
    config.strictMode = GreedyRewriteStrictness::ExistingOps;
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns),
                                            config)))
      signalPassFailure();
  }
};

} // namespace
