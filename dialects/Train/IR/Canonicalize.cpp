//===- Canonicalize.cpp - the train ops' canonicalization patterns --------===//
//
// Rewrites that hold wherever the ops appear, run by MLIR's canonicalizer
// (the front end runs it after fusion: the fused patterns match the Slices
// an exporter wrote, before they become Splits).
//
//===----------------------------------------------------------------------===//
#include "dialects/Train/IR/ConstEval.h"
#include "dialects/Train/IR/TrainOps.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

#include <algorithm>

using namespace mlir;
using namespace mt::train;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// A Slice of a float tensor with constant bounds and step 1 on each of
/// its axes becomes a Split per axis, keeping the middle part: the runtime
/// has SPLIT, and its gradient (a Concat with zeros for the parts nothing
/// reads) is exact. Other steps stay Slices (reversals and strides: the
/// SLICE kernel, and SLICE_GRAD for their gradient).
struct SplitFromSlice : OpRewritePattern<SliceOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(SliceOp s, PatternRewriter &b) const override {
    auto type = typeOf(s.getInput());
    if (!isa<FloatType>(type.getElementType()))
      return b.notifyMatchFailure(s, "not a float tensor");
    Attribute st, en, ax, sp;
    if (!matchPattern(s.getStarts(), m_Constant(&st)) ||
        !matchPattern(s.getEnds(), m_Constant(&en)) ||
        !matchPattern(s.getAxes(), m_Constant(&ax)) ||
        !matchPattern(s.getSteps(), m_Constant(&sp)))
      return b.notifyMatchFailure(s, "bounds that are not constant");
    auto starts = getIntValues(st), ends = getIntValues(en),
         axes = getIntValues(ax), steps = getIntValues(sp);
    if (!starts || !ends || !axes || !steps || starts->size() != axes->size() ||
        ends->size() != axes->size() || steps->size() != axes->size())
      return b.notifyMatchFailure(s, "bounds of different lengths");
    if (llvm::any_of(*steps, [](int64_t step) { return step != 1; }))
      return b.notifyMatchFailure(s, "a step other than 1");
    if (typeOf(s).getNumElements() == 0) {
      // Nothing (the pass-through part of a rotary that covers the whole
      // head): a constant, so that no gradient flows through it.
      b.replaceOpWithNewOp<ConstantOp>(
          s, DenseElementsAttr::get(typeOf(s), ArrayRef<Attribute>{}));
      return success();
    }
    Value v = s.getInput();
    for (size_t i = 0; i < axes->size(); ++i) {
      auto t = typeOf(v);
      int64_t rank = t.getRank(), axis = (*axes)[i];
      if (axis < 0)
        axis += rank;
      if (axis < 0 || axis >= rank)
        return b.notifyMatchFailure(s, "an axis out of range");
      // ONNX's clamping of out-of-range and negative bounds.
      int64_t n = t.getDimSize(axis);
      auto clampTo = [n](int64_t x) {
        return std::clamp<int64_t>(x < 0 ? x + n : x, 0, n);
      };
      int64_t begin = clampTo((*starts)[i]), end = clampTo((*ends)[i]);
      if (end <= begin || (begin == 0 && end == n))
        continue;
      SmallVector<int64_t> sizes;
      if (begin > 0)
        sizes.push_back(begin);
      sizes.push_back(end - begin);
      if (end < n)
        sizes.push_back(n - end);
      auto split = b.create<SplitOp>(s.getLoc(), v, b.getI64IntegerAttr(axis),
                                     b.getDenseI64ArrayAttr(sizes));
      v = split.getResult(begin > 0 ? 1 : 0);
    }
    // An empty slice, or bounds the shapes disagree with.
    if (v.getType() != s.getType())
      return b.notifyMatchFailure(s, "bounds that do not give its type");
    b.replaceOp(s, v);
    return success();
  }
};

/// A Concat of an empty part is the Concat of the others.
struct ConcatWithoutEmpty : OpRewritePattern<ConcatOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ConcatOp c, PatternRewriter &b) const override {
    SmallVector<Value> kept;
    for (Value v : c.getInputs())
      if (typeOf(v).getNumElements() != 0)
        kept.push_back(v);
    if (kept.size() == c.getInputs().size() || kept.empty())
      return b.notifyMatchFailure(c, "no empty part");
    Value with =
        kept.size() == 1
            ? kept[0]
            : b.create<ConcatOp>(c.getLoc(), kept, c.getAxisAttr()).getResult();
    b.replaceOp(c, with);
    return success();
  }
};

} // namespace

void SliceOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                          MLIRContext *context) {
  patterns.add<SplitFromSlice>(context);
}

void ConcatOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                           MLIRContext *context) {
  patterns.add<ConcatWithoutEmpty>(context);
}
