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
#include "dialects/Train/IR/Gradient.h"
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

/// On a template's gradient function: the arguments whose gradient it
/// returns as zeros because none reaches them (no path from them to the
/// results carries one).
constexpr StringLiteral kNoGradArgs = "train.no_grad_args";

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

bool isFloat(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

/// Emits the backward of a sequence of forward ops into one block: each op
/// that reaches the loss adds its operands' gradients through its rule
/// (GradientOpInterface, dialects/Train/IR/Gradients.cpp); a call of a layer
/// template calls that template's gradient function.
class Backprop : public GradientBuilder {
public:
  Backprop(OpBuilder &b, DenseSet<Value> active,
           std::function<func::FuncOp(StringRef)> gradientOf)
      : GradientBuilder(b), active(std::move(active)),
        gradientOf(std::move(gradientOf)) {}

  bool isActive(Value v) const override { return active.contains(v); }

  void accumulate(Value v, Value g) override {
    if (!g || !isActive(v))
      return;
    Value &slot = grads[v];
    slot = slot ? b.create<AddOp>(g.getLoc(), slot, g).getResult() : g;
  }

  Value dy(Operation *op, unsigned i = 0) override {
    Value g = grads.lookup(op->getResult(i));
    return g ? g : zeros(op->getLoc(), op->getResult(i).getType());
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
  LogicalResult rule(Operation *op) {
    // Parameters are where gradients end.
    if (isa<ParamLoadOp>(op))
      return success();
    if (auto rule = dyn_cast<GradientOpInterface>(op))
      return rule.buildGradient(*this);
    if (auto c = dyn_cast<func::CallOp>(op))
      return callGradient(c);
    StringRef node = "";
    if (auto name = dyn_cast<NameLoc>(op->getLoc()))
      node = name.getName().strref();
    return op->emitError("no gradient rule for '")
           << op->getName() << "'" << (node.empty() ? "" : " (ONNX node '")
           << node << (node.empty() ? "" : "')")
           << "; it lies on a path from a trainable weight to the loss";
  }

  LogicalResult callGradient(func::CallOp c) {
    func::FuncOp grad = gradientOf(c.getCallee());
    if (!grad)
      return c->emitError("no gradient function for @") << c.getCallee();
    SmallVector<Value> operands(c.getOperands());
    for (unsigned i = 0; i < c.getNumResults(); ++i)
      operands.push_back(dy(c, i));
    auto call = b.create<func::CallOp>(c.getLoc(), grad, operands);
    if (Attribute layer = c->getAttr("train.layer"))
      call->setAttr("train.layer", layer);
    // The zeros the template returns for an argument no gradient reaches
    // are no gradient: a weight that only they would reach gets none.
    auto none = grad->getAttrOfType<DenseI64ArrayAttr>(kNoGradArgs);
    for (unsigned i = 0; i < c.getNumOperands(); ++i)
      if (!none || !llvm::is_contained(none.asArrayRef(), int64_t(i)))
        accumulate(c.getOperand(i), call.getResult(i));
    return success();
  }

  DenseSet<Value> active;
  std::function<func::FuncOp(StringRef)> gradientOf;
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
    Backprop bp(b, activeValues(forward, sources), gradOf);
    for (auto [i, v] : llvm::enumerate(ret->getOperands()))
      bp.accumulate(map.lookup(v),
                    entry->getArgument(fn.getNumArguments() + i));
    if (failed(bp.run(forward)))
      return nullptr;
    numGradOps += bp.emitted;
    b.setInsertionPointToEnd(entry);
    SmallVector<Value> results;
    SmallVector<int64_t> none;
    for (unsigned i = 0; i < fn.getNumArguments(); ++i) {
      Value g = bp.gradOf(entry->getArgument(i));
      if (!g) {
        g = bp.zeros(fn.getLoc(), entry->getArgument(i).getType());
        none.push_back(i);
      }
      results.push_back(g);
    }
    b.create<func::ReturnOp>(fn.getLoc(), results);
    grad->setAttr(kNoGradArgs, b.getDenseI64ArrayAttr(none));
    return grad;
  }

  /// A weight the step reads but no gradient reaches (its paths to the
  /// loss pass only through indices, comparisons or choices: Ernie 4.5's
  /// e_score_correction_bias, added to the router's scores before TopK)
  /// is frozen, as PyTorch's AdamW skips a parameter without a gradient
  /// (a zero one would still decay); a checkpoint copies its tensors from
  /// the user's weights unchanged (`train.kept`). Said in one remark.
  void freezeGradientless(ParamOp p) {
    p.removeTrainableAttr();
    ModuleOp module = p->getParentOfType<ModuleOp>();
    Builder b(p.getContext());
    SmallVector<Attribute> kept;
    if (auto old = module->getAttrOfType<ArrayAttr>("train.kept"))
      kept.assign(old.begin(), old.end());
    size_t before = kept.size();
    auto dtype = p->getAttrOfType<StringAttr>("data_dtype");
    auto entry = [&](StringRef name, StringAttr file, IntegerAttr offset,
                     IntegerAttr length, ArrayRef<int64_t> shape,
                     StringAttr savedFile) {
      SmallVector<NamedAttribute> fields{
          b.getNamedAttr("name", b.getStringAttr(name)),
          b.getNamedAttr("why", b.getStringAttr("no gradient reaches it")),
          b.getNamedAttr("file", file),
          b.getNamedAttr("offset", offset),
          b.getNamedAttr("length", length),
          b.getNamedAttr("dtype", dtype ? dtype : b.getStringAttr("F32")),
          b.getNamedAttr("shape", b.getDenseI64ArrayAttr(shape))};
      if (savedFile)
        fields.push_back(b.getNamedAttr("saved_file", savedFile));
      kept.push_back(b.getDictionaryAttr(fields));
    };
    if (p.getSource() == WeightSource::Safetensors && p.getFileAttr()) {
      // The user's tensor in its own layout.
      SmallVector<int64_t> shape(p.getTensorType().getShape());
      if (p.getDataTransposed())
        std::reverse(shape.begin(), shape.end());
      ArrayAttr names = p.getSavedAsAttr();
      for (Attribute n : names ? names.getValue() : ArrayRef<Attribute>{})
        entry(cast<StringAttr>(n).getValue(), p.getFileAttr(),
              p.getOffsetAttr(), p.getLengthAttr(), shape,
              p.getSavedFileAttr());
    } else if (ArrayAttr parts = p.getPartsAttr()) {
      for (auto part : parts.getAsRange<DictionaryAttr>())
        if (auto file = part.getAs<StringAttr>("file"))
          entry(part.getAs<StringAttr>("name").getValue(), file,
                part.getAs<IntegerAttr>("offset"),
                part.getAs<IntegerAttr>("length"),
                part.getAs<DenseI64ArrayAttr>("shape").asArrayRef(),
                part.getAs<StringAttr>("saved_file"));
    }
    if (kept.size() > before)
      module->setAttr("train.kept", b.getArrayAttr(kept));
    mlir::emitRemark(module.getLoc(), "parameter '")
        << p.getSymName()
        << "' gets no gradient (every path from it to the loss passes "
           "through indices, comparisons or choices): not trained, as "
           "PyTorch's optimizer leaves a parameter without one"
        << (kept.size() > before
                ? "; checkpoints copy it from the weights as it is"
                : "");
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
    // Every trainable parameter of the module, in its order (one whose
    // loads are all gone gets a zero gradient; one that no gradient reaches
    // is frozen below), and its loads in the step.
    SmallVector<ParamOp> trainable;
    llvm::StringMap<SmallVector<Value, 1>> loads;
    for (auto p : model->getParentOfType<ModuleOp>().getOps<ParamOp>())
      if (p.getTrainable()) {
        trainable.push_back(p);
        loads[p.getSymName()];
      }
    SmallVector<Value> sources;
    for (Operation &op : body.without_terminator()) {
      forward.push_back(&op);
      if (auto load = dyn_cast<ParamLoadOp>(op))
        if (auto it = loads.find(load.getName()); it != loads.end()) {
          it->second.push_back(load.getResult());
          sources.push_back(load.getResult());
        }
    }
    b.setInsertionPoint(ret);
    Backprop bp(b, activeValues(forward, sources), gradOf);
    if (!bp.isActive(loss)) {
      model.emitError("the loss does not depend on any trainable weight");
      return false;
    }
    // The backward starts from the loss's gradient, an input of the step
    // (its scale): a run gives each micro-batch the weight of its trained
    // tokens in the whole step's, so that the step's gradient is that of
    // the mean over all of them (1 where every micro-batch trains as many).
    unsigned scaleIndex = step.getNumArguments();
    step.insertArgument(
        scaleIndex, typeOf(loss),
        b.getDictionaryAttr(
            {b.getNamedAttr("train.name", b.getStringAttr("loss_scale")),
             b.getNamedAttr(
                 "train.role",
                 InputRoleAttr::get(b.getContext(), InputRole::LossScale))}),
        model.getLoc());
    bp.accumulate(loss, body.getArgument(scaleIndex));
    if (failed(bp.run(forward)))
      return false;
    numGradOps += bp.emitted;
    b.setInsertionPoint(ret);
    SmallVector<Value> results{loss};
    SmallVector<Type> types{loss.getType()};
    SmallVector<Attribute> attrs{
        b.getDictionaryAttr({b.getNamedAttr("train.loss", b.getUnitAttr())})};
    for (ParamOp p : trainable) {
      // The sum of the gradients of its loads.
      Value g;
      for (Value load : loads.lookup(p.getSymName()))
        if (Value part = bp.gradOf(load))
          g = g ? b.create<AddOp>(p.getLoc(), g, part).getResult() : part;
      if (!g && !loads.lookup(p.getSymName()).empty()) {
        freezeGradientless(p);
        continue;
      }
      if (!g)
        g = bp.zeros(p.getLoc(), p.getTensorType());
      results.push_back(g);
      types.push_back(g.getType());
      attrs.push_back(b.getDictionaryAttr(
          {b.getNamedAttr("train.grad_of", p.getSymNameAttr())}));
    }
    b.create<func::ReturnOp>(ret.getLoc(), results);
    ret.erase();
    step.setFunctionType(b.getFunctionType(step.getArgumentTypes(), types));
    step.setAllResultAttrs(attrs);
    return true;
  }
};

} // namespace
