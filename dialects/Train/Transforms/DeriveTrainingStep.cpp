//===- DeriveTrainingStep.cpp - reverse-mode differentiation of the model -===//
//
// Each layer template gets a gradient function that recomputes the layer
// from its inputs and then walks its ops in reverse; @train_step runs the
// model's forward, then its backward, calling the templates' gradient
// functions in reverse layer order. Gradients of a value used several times
// are summed; a value gets a gradient only when it depends on a trainable
// weight (in @train_step) or on a floating argument (in a template).
//
//===----------------------------------------------------------------------===//
#include "dialects/Train/IR/ShapeInference.h"
#include "dialects/Train/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "mt-derive-training-step"

namespace mt::train {
#define GEN_PASS_DEF_DERIVETRAININGSTEPPASS
#include "dialects/Train/Transforms/Passes.h.inc"
} // namespace mt::train

using namespace mlir;
using namespace mt::train;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

bool isFloat(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

/// Emits the backward of a sequence of forward ops into one block.
class Backprop {
public:
  Backprop(OpBuilder &b, DenseSet<Value> active,
           std::function<func::FuncOp(StringRef)> gradientOf, int64_t &count)
      : b(b), active(std::move(active)), gradientOf(std::move(gradientOf)),
        count(count) {}

  bool isActive(Value v) const { return active.contains(v); }

  /// Adds g to the gradient of v (only for active values).
  void accumulate(Value v, Value g) {
    if (!g || !isActive(v))
      return;
    Value &slot = grads[v];
    slot = slot ? b.create<AddOp>(g.getLoc(), slot, g).getResult() : g;
  }

  Value gradOf(Value v) const { return grads.lookup(v); }

  Value zeros(Location loc, Type type) {
    auto t = cast<RankedTensorType>(type);
    Attribute zero = b.getFloatAttr(t.getElementType(), 0.0);
    return b.create<ConstantOp>(loc, DenseElementsAttr::get(t, zero));
  }

  /// Walks `ops` (in program order) backwards.
  LogicalResult run(ArrayRef<Operation *> ops) {
    for (Operation *op : llvm::reverse(ops)) {
      if (llvm::none_of(op->getResults(),
                        [&](Value r) { return grads.count(r); }))
        continue;
      if (failed(rule(op)))
        return failure();
    }
    return success();
  }

private:
  /// dy of result i, or zeros when nothing used it.
  Value dy(Operation *op, unsigned i = 0) {
    Value g = grads.lookup(op->getResult(i));
    return g ? g : zeros(op->getLoc(), op->getResult(i).getType());
  }

  template <typename OpTy, typename... Args>
  OpTy emit(Location loc, TypeRange types, Args &&...args) {
    ++count;
    return b.create<OpTy>(loc, types, std::forward<Args>(args)...);
  }

  /// Sums g over the dims that `target` broadcast to reach g's shape.
  Value unbroadcast(Location loc, Value g, Type target) {
    auto gt = typeOf(g), tt = cast<RankedTensorType>(target);
    if (gt.getShape() == tt.getShape())
      return g;
    int64_t lead = gt.getRank() - tt.getRank();
    SmallVector<int64_t> axes;
    for (int64_t d = 0; d < gt.getRank(); ++d)
      if (d < lead || (tt.getDimSize(d - lead) == 1 && gt.getDimSize(d) != 1))
        axes.push_back(d);
    Shape kept;
    for (int64_t d = 0; d < gt.getRank(); ++d)
      if (!llvm::is_contained(axes, d))
        kept.push_back(gt.getDimSize(d));
    Value sum = b.create<ReduceSumOp>(loc, g, b.getDenseI64ArrayAttr(axes),
                                      /*keepdims=*/nullptr);
    return reshapeTo(loc, sum, tt);
  }

  Value reshapeTo(Location loc, Value v, Type target) {
    auto tt = cast<RankedTensorType>(target);
    if (v.getType() == target)
      return v;
    auto st = RankedTensorType::get({tt.getRank()}, b.getI64Type());
    auto shape =
        b.create<ConstantOp>(loc, DenseElementsAttr::get(st, tt.getShape()));
    return b.create<ReshapeOp>(loc, tt, v, shape, /*allowzero=*/nullptr);
  }

  LogicalResult rule(Operation *op) {
    Location loc = op->getLoc();
    // Weights are where gradients end.
    if (isa<WeightOp>(op))
      return success();
    if (auto e = dyn_cast<EmbeddingOp>(op)) {
      accumulate(e.getTable(),
                 emit<EmbeddingGradOp>(loc, e.getTable().getType(), dy(op),
                                       e.getIds()));
      return success();
    }
    if (auto l = dyn_cast<LinearOp>(op)) {
      Value g = dy(op);
      auto grad = emit<LinearGradOp>(
          loc, TypeRange{l.getInput().getType(), l.getWeight().getType()},
          l.getInput(), l.getWeight(), g, l.getLayoutAttr());
      accumulate(l.getInput(), grad.getInputGrad());
      accumulate(l.getWeight(), grad.getWeightGrad());
      if (l.getBias())
        accumulate(l.getBias(), unbroadcast(loc, g, l.getBias().getType()));
      return success();
    }
    if (auto n = dyn_cast<RmsNormOp>(op)) {
      auto grad = emit<RmsNormGradOp>(
          loc, TypeRange{n.getInput().getType(), n.getWeight().getType()},
          n.getInput(), n.getWeight(), dy(op), n.getEpsAttr(),
          n.getPlusOneAttr());
      accumulate(n.getInput(), grad.getInputGrad());
      accumulate(n.getWeight(), grad.getWeightGrad());
      return success();
    }
    if (auto n = dyn_cast<LayerNormOp>(op)) {
      Value g = dy(op);
      auto grad = emit<LayerNormGradOp>(
          loc, TypeRange{n.getInput().getType(), n.getWeight().getType()},
          n.getInput(), n.getWeight(), g, n.getEpsAttr());
      accumulate(n.getInput(), grad.getInputGrad());
      accumulate(n.getWeight(), grad.getWeightGrad());
      if (n.getBias())
        accumulate(n.getBias(), unbroadcast(loc, g, n.getBias().getType()));
      return success();
    }
    if (auto r = dyn_cast<RotaryOp>(op)) {
      accumulate(r.getInput(),
                 emit<RotaryGradOp>(loc, r.getInput().getType(), dy(op),
                                    r.getCos(), r.getSin(), r.getHeadDimAttr(),
                                    r.getInterleavedAttr()));
      return success();
    }
    if (auto a = dyn_cast<AttentionOp>(op)) {
      auto grad = emit<AttentionGradOp>(
          loc,
          TypeRange{a.getQ().getType(), a.getK().getType(), a.getV().getType()},
          a.getQ(), a.getK(), a.getV(), a.getMask(), dy(op),
          a.getNumHeadsAttr(), a.getNumKvHeadsAttr(), a.getScaleAttr(),
          a.getCausalAttr(), a.getWindowAttr());
      accumulate(a.getQ(), grad.getQGrad());
      accumulate(a.getK(), grad.getKGrad());
      accumulate(a.getV(), grad.getVGrad());
      return success();
    }
    if (auto a = dyn_cast<ActivationOp>(op)) {
      accumulate(a.getInput(),
                 emit<ActivationGradOp>(loc, a.getInput().getType(),
                                        a.getInput(), dy(op), a.getActAttr()));
      return success();
    }
    if (auto g = dyn_cast<GatedActivationOp>(op)) {
      auto grad = emit<GatedActivationGradOp>(
          loc, TypeRange{g.getGate().getType(), g.getUp().getType()},
          g.getGate(), g.getUp(), dy(op), g.getActAttr());
      accumulate(g.getGate(), grad.getGateGrad());
      accumulate(g.getUp(), grad.getUpGrad());
      return success();
    }
    if (auto ce = dyn_cast<CrossEntropyOp>(op)) {
      accumulate(ce.getLogits(),
                 emit<CrossEntropyGradOp>(loc, ce.getLogits().getType(),
                                          ce.getLogits(), ce.getLabels(),
                                          dy(op), ce.getIgnoreIndexAttr(),
                                          ce.getShiftAttr()));
      return success();
    }
    if (auto c = dyn_cast<func::CallOp>(op)) {
      func::FuncOp grad = gradientOf(c.getCallee());
      if (!grad)
        return op->emitError("no gradient function for @") << c.getCallee();
      SmallVector<Value> operands(c.getOperands());
      for (unsigned i = 0; i < c.getNumResults(); ++i)
        operands.push_back(dy(op, i));
      auto call = b.create<func::CallOp>(loc, grad, operands);
      if (Attribute layer = c->getAttr("train.layer"))
        call->setAttr("train.layer", layer);
      for (auto [operand, g] : llvm::zip(c.getOperands(), call.getResults()))
        accumulate(operand, g);
      return success();
    }
    // Primitive ops that survive fusion on a differentiable path.
    if (isa<AddOp, SubOp>(op)) {
      Value g = dy(op);
      accumulate(op->getOperand(0),
                 unbroadcast(loc, g, op->getOperand(0).getType()));
      Value g1 = isa<SubOp>(op) ? b.create<NegOp>(loc, g).getResult() : g;
      accumulate(op->getOperand(1),
                 unbroadcast(loc, g1, op->getOperand(1).getType()));
      return success();
    }
    if (auto m = dyn_cast<MulOp>(op)) {
      Value g = dy(op);
      if (isActive(m.getLhs()))
        accumulate(m.getLhs(),
                   unbroadcast(loc, b.create<MulOp>(loc, g, m.getRhs()),
                               m.getLhs().getType()));
      if (isActive(m.getRhs()))
        accumulate(m.getRhs(),
                   unbroadcast(loc, b.create<MulOp>(loc, g, m.getLhs()),
                               m.getRhs().getType()));
      return success();
    }
    if (isa<NegOp>(op)) {
      accumulate(op->getOperand(0), b.create<NegOp>(loc, dy(op)));
      return success();
    }
    if (isa<IdentityOp>(op)) {
      accumulate(op->getOperand(0), dy(op));
      return success();
    }
    if (isa<ReshapeOp, FlattenOp, SqueezeOp, UnsqueezeOp>(op)) {
      accumulate(op->getOperand(0),
                 reshapeTo(loc, dy(op), op->getOperand(0).getType()));
      return success();
    }
    if (auto t = dyn_cast<TransposeOp>(op)) {
      SmallVector<int64_t> inverse(t.getPerm().size());
      for (auto [i, p] : llvm::enumerate(t.getPerm()))
        inverse[p] = i;
      accumulate(
          t.getInput(),
          b.create<TransposeOp>(loc, dy(op), b.getDenseI64ArrayAttr(inverse)));
      return success();
    }
    if (auto s = dyn_cast<SplitOp>(op)) {
      SmallVector<Value> parts;
      for (unsigned i = 0; i < op->getNumResults(); ++i)
        parts.push_back(dy(op, i));
      accumulate(s.getInput(),
                 b.create<ConcatOp>(loc, parts, s.getAxisAttr()).getResult());
      return success();
    }
    if (auto c = dyn_cast<ConcatOp>(op)) {
      int64_t axis = *normalizeAxis(c.getAxis(), typeOf(c).getRank());
      SmallVector<int64_t> sizes;
      for (Value v : c.getInputs())
        sizes.push_back(typeOf(v).getDimSize(axis));
      auto split = b.create<SplitOp>(loc, dy(op), c.getAxisAttr(),
                                     b.getDenseI64ArrayAttr(sizes));
      for (auto [v, g] : llvm::zip(c.getInputs(), split.getResults()))
        accumulate(v, g);
      return success();
    }
    if (auto c = dyn_cast<CastOp>(op)) {
      if (isFloat(c.getInput()))
        accumulate(c.getInput(),
                   b.create<CastOp>(
                       loc, dy(op),
                       TypeAttr::get(typeOf(c.getInput()).getElementType())));
      return success();
    }
    StringRef node = "";
    if (auto name = dyn_cast<NameLoc>(loc))
      node = name.getName().strref();
    return op->emitError("no gradient rule for '")
           << op->getName() << "'" << (node.empty() ? "" : " (ONNX node '")
           << node << (node.empty() ? "" : "')")
           << "; it lies on a path from a trainable weight to the loss";
  }

  OpBuilder &b;
  DenseSet<Value> active;
  std::function<func::FuncOp(StringRef)> gradientOf;
  int64_t &count;
  DenseMap<Value, Value> grads;
};

/// Values that depend on one of `sources`, in program order of `ops`.
DenseSet<Value> activeValues(ArrayRef<Operation *> ops,
                             ArrayRef<Value> sources) {
  DenseSet<Value> active(sources.begin(), sources.end());
  for (Operation *op : ops)
    if (llvm::any_of(op->getOperands(),
                     [&](Value v) { return active.contains(v); }))
      for (Value r : op->getResults())
        if (isFloat(r))
          active.insert(r);
  return active;
}

struct DeriveTrainingStep
    : public mt::train::impl::DeriveTrainingStepPassBase<DeriveTrainingStep> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto model = module.lookupSymbol<func::FuncOp>("model");
    if (!model || model.isExternal()) {
      module.emitError("no @model function to differentiate");
      return signalPassFailure();
    }
    llvm::StringMap<func::FuncOp> grads;
    bool failed = false;
    std::function<func::FuncOp(StringRef)> gradientOf =
        [&](StringRef name) -> func::FuncOp {
      if (auto it = grads.find(name); it != grads.end())
        return it->second;
      auto fn = module.lookupSymbol<func::FuncOp>(name);
      func::FuncOp g = fn ? deriveTemplate(fn, gradientOf) : nullptr;
      failed |= !g;
      return grads[name] = g;
    };
    if (!deriveStep(model, gradientOf) || failed)
      signalPassFailure();
  }

  /// @T_grad(args..., d_results...) -> (d_args...).
  func::FuncOp deriveTemplate(func::FuncOp fn,
                              std::function<func::FuncOp(StringRef)> &gradOf) {
    OpBuilder b(fn);
    auto type = fn.getFunctionType();
    SmallVector<Type> inputs(type.getInputs());
    inputs.append(type.getResults().begin(), type.getResults().end());
    auto grad =
        b.create<func::FuncOp>(fn.getLoc(), (fn.getSymName() + "_grad").str(),
                               b.getFunctionType(inputs, type.getInputs()));
    grad.setPrivate();
    for (unsigned i = 0; i < fn.getNumArguments(); ++i)
      if (DictionaryAttr attrs = fn.getArgAttrDict(i))
        grad.setArgAttrs(i, attrs);
    Block *entry = grad.addEntryBlock();
    b.setInsertionPointToStart(entry);
    // Recompute the forward from the layer's inputs.
    IRMapping map;
    for (unsigned i = 0; i < fn.getNumArguments(); ++i)
      map.map(fn.getArgument(i), entry->getArgument(i));
    SmallVector<Operation *> forward;
    Operation *ret = nullptr;
    for (Operation &op : fn.getBody().front()) {
      if (isa<func::ReturnOp>(op)) {
        ret = &op;
        continue;
      }
      forward.push_back(b.clone(op, map));
    }
    SmallVector<Value> sources;
    for (unsigned i = 0; i < fn.getNumArguments(); ++i)
      if (isFloat(entry->getArgument(i)))
        sources.push_back(entry->getArgument(i));
    int64_t count = 0;
    Backprop bp(b, activeValues(forward, sources), gradOf, count);
    for (auto [i, v] : llvm::enumerate(ret->getOperands()))
      bp.accumulate(map.lookup(v),
                    entry->getArgument(fn.getNumArguments() + i));
    if (failed(bp.run(forward)))
      return nullptr;
    numGradOps += count;
    b.setInsertionPointToEnd(entry);
    SmallVector<Value> results;
    for (unsigned i = 0; i < fn.getNumArguments(); ++i) {
      Value g = bp.gradOf(entry->getArgument(i));
      if (!g)
        g = bp.zeros(fn.getLoc(), entry->getArgument(i).getType());
      results.push_back(g);
    }
    b.create<func::ReturnOp>(fn.getLoc(), results);
    return grad;
  }

  /// @train_step(inputs...) -> (loss, d trainable weights...).
  bool deriveStep(func::FuncOp model,
                  std::function<func::FuncOp(StringRef)> &gradOf) {
    OpBuilder b(model);
    b.setInsertionPointAfter(model);
    auto step = cast<func::FuncOp>(b.clone(*model));
    step.setSymName("train_step");
    Block &body = step.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    int lossIndex = -1;
    for (unsigned i = 0; i < model.getNumResults(); ++i)
      if (model.getResultAttr(i, "train.loss"))
        lossIndex = i;
    if (lossIndex < 0) {
      model.emitError("@model has no result marked train.loss");
      return false;
    }
    Value loss = ret.getOperand(lossIndex);
    SmallVector<Operation *> forward;
    SmallVector<WeightOp> trainable;
    for (Operation &op : body.without_terminator()) {
      forward.push_back(&op);
      if (auto w = dyn_cast<WeightOp>(op); w && w.getTrainable())
        trainable.push_back(w);
    }
    SmallVector<Value> sources;
    for (WeightOp w : trainable)
      sources.push_back(w.getResult());
    b.setInsertionPoint(ret);
    int64_t count = 0;
    Backprop bp(b, activeValues(forward, sources), gradOf, count);
    if (!bp.isActive(loss)) {
      model.emitError("the loss does not depend on any trainable weight");
      return false;
    }
    auto one = DenseElementsAttr::get(
        typeOf(loss), b.getFloatAttr(typeOf(loss).getElementType(), 1.0));
    bp.accumulate(loss, b.create<ConstantOp>(model.getLoc(), one));
    if (failed(bp.run(forward)))
      return false;
    numGradOps += count;
    b.setInsertionPoint(ret);
    SmallVector<Value> results{loss};
    SmallVector<Type> types{loss.getType()};
    SmallVector<Attribute> attrs{
        b.getDictionaryAttr({b.getNamedAttr("train.loss", b.getUnitAttr())})};
    for (WeightOp w : trainable) {
      Value g = bp.gradOf(w.getResult());
      if (!g)
        g = bp.zeros(w.getLoc(), w.getType());
      results.push_back(g);
      types.push_back(g.getType());
      attrs.push_back(b.getDictionaryAttr(
          {b.getNamedAttr("train.grad_of", w.getNameAttr())}));
    }
    b.create<func::ReturnOp>(ret.getLoc(), results);
    ret.erase();
    step.setFunctionType(b.getFunctionType(step.getArgumentTypes(), types));
    step.setAllResultAttrs(attrs);
    return true;
  }
};

} // namespace
