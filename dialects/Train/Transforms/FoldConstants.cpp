//===- FoldConstants.cpp - fold what depends on no input or trainable weight
//-===//
//
// One walk over each function in program order: an op whose operands all
// have known values is evaluated by its fold hook and replaced by a
// constant. Values are known for constants and for frozen buffers that
// carry their data; trainable weights never are, so nothing that depends on
// them or on a graph input is folded.
//
//===----------------------------------------------------------------------===//
#include "dialects/Train/Transforms/Passes.h"

#include "dialects/Train/IR/ShapeInference.h"
#include "mlir/IR/Builders.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "mt-fold-constants"

namespace mt::train {
#define GEN_PASS_DEF_FOLDCONSTANTSPASS
#include "dialects/Train/Transforms/Passes.h.inc"
} // namespace mt::train

using namespace mlir;
using namespace mt::train;

namespace {

/// The value a frozen buffer (a load of a parameter of `params`) or a
/// constant stands for, if known.
Attribute knownValue(Operation *op, SymbolTable &params) {
  if (auto c = dyn_cast<ConstantOp>(op))
    return c.getValue();
  if (auto load = dyn_cast<ParamLoadOp>(op))
    if (auto w = params.lookup<ParamOp>(load.getParamAttr().getAttr());
        w && !w.getTrainable() && w.getValue())
      return *w.getValue();
  return nullptr;
}

/// sequence_at(split_to_sequence(x), i) becomes result i of one split of x.
Value rewriteSequenceAt(SequenceAtOp at, OpBuilder &b,
                        DenseMap<Operation *, Operation *> &splits) {
  auto seq = at.getSequence().getDefiningOp<SplitToSequenceOp>();
  if (!seq)
    return nullptr;
  Operation *&split = splits[seq];
  if (!split) {
    b.setInsertionPointAfter(seq);
    split = b.create<SplitOp>(seq.getLoc(), seq.getInput(), seq.getAxis(),
                              seq.getSizes());
  }
  int64_t n = seq.getSizes().size(), p = at.getPosition();
  Value part = split->getResult(p < 0 ? p + n : p);
  if (seq.getSqueeze()) {
    b.setInsertionPoint(at);
    int64_t axis = *normalizeAxis(
        seq.getAxis(), cast<RankedTensorType>(part.getType()).getRank());
    part =
        b.create<SqueezeOp>(at.getLoc(), part, b.getDenseI64ArrayAttr({axis}));
  }
  return part;
}

struct FoldConstants
    : public mt::train::impl::FoldConstantsPassBase<FoldConstants> {
  void runOnOperation() override {
    SymbolTable params(getOperation());
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal())
        foldBlock(func.getBody().front(), params);
  }

  void foldBlock(Block &block, SymbolTable &params) {
    DenseMap<Value, Attribute> known;
    DenseMap<Operation *, Operation *> splits;
    OpBuilder b(&getContext());
    for (Operation &op : llvm::make_early_inc_range(block)) {
      if (Attribute v = knownValue(&op, params)) {
        known[op.getResult(0)] = v;
        continue;
      }
      if (auto at = dyn_cast<SequenceAtOp>(op)) {
        if (Value part = rewriteSequenceAt(at, b, splits)) {
          at.getResult().replaceAllUsesWith(part);
          at.erase();
          ++numForwarded;
        }
        continue;
      }
      if (op.getNumResults() != 1 || op.getNumRegions() ||
          !isa<TrainDialect>(op.getDialect()))
        continue;
      SmallVector<Attribute> operands;
      for (Value v : op.getOperands())
        operands.push_back(known.lookup(v));
      SmallVector<OpFoldResult> results;
      if (failed(op.fold(operands, results)) || results.empty())
        continue;
      Value replacement;
      if (auto attr = dyn_cast<Attribute>(results[0])) {
        b.setInsertionPoint(&op);
        auto c = b.create<ConstantOp>(op.getLoc(), cast<ElementsAttr>(attr));
        known[c.getResult()] = attr;
        replacement = c.getResult();
        ++numFolded;
      } else {
        replacement = cast<Value>(results[0]);
        ++numForwarded;
      }
      op.getResult(0).replaceAllUsesWith(replacement);
      op.erase();
    }
    eraseUnused(block);
  }

  /// Erases pure ops without uses, last first (a parameter's loads too:
  /// the parameters, symbols of the module, stay).
  void eraseUnused(Block &block) {
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block))) {
      if (op.hasTrait<OpTrait::IsTerminator>() || !op.use_empty() ||
          !isPure(&op))
        continue;
      op.erase();
      ++numErased;
    }
  }
};

} // namespace
