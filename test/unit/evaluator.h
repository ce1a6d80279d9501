// An interpreter of the train dialect for tests: runs the functions of a
// module after the front-end pipeline (and the derivation of the training
// step) with the CPU reference kernels. Weights are read from their files
// once and kept (or set beforehand), so that a test can update them between
// calls.
#ifndef MT_TEST_UNIT_EVALUATOR_H
#define MT_TEST_UNIT_EVALUATOR_H

#include "dialects/Train/IR/TrainOps.h"
#include "kernels/cpu/fused_ops.h"
#include "kernels/cpu/primitive_ops.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include <gtest/gtest.h>

#include <fstream>
#include <map>

namespace mt::test {

using namespace mlir;
using namespace mt::train;
namespace k = mt::kernels::cpu;

struct Tensor {
  SmallVector<int64_t> shape;
  std::vector<float> f;   ///< floating values
  std::vector<int64_t> i; ///< integer values
};

inline int64_t numel(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

inline Tensor fromAttr(ElementsAttr attr) {
  auto dense = cast<DenseElementsAttr>(attr);
  auto type = cast<RankedTensorType>(dense.getType());
  Tensor t;
  t.shape.assign(type.getShape().begin(), type.getShape().end());
  if (isa<FloatType>(type.getElementType()))
    for (APFloat v : dense.getValues<APFloat>())
      t.f.push_back(v.convertToFloat());
  else
    for (APInt v : dense.getValues<APInt>())
      t.i.push_back(v.getSExtValue());
  return t;
}

/// Interprets the functions of a module after the front-end pipeline (and
/// the derivation of the training step). Weights are read from their files
/// once and kept, so that an optimizer can update them between calls.
class Evaluator {
public:
  std::map<std::string, Tensor> weights;

  std::vector<Tensor> call(func::FuncOp fn, std::vector<Tensor> args) {
    // A training step's loss scale (the gradient its backward starts
    // from) is 1 unless given.
    if (args.size() + 1 == fn.getNumArguments() &&
        fn.getArgAttr(fn.getNumArguments() - 1, "train.role") ==
            mt::train::InputRoleAttr::get(fn.getContext(),
                                          mt::train::InputRole::LossScale)) {
      Tensor one;
      one.f = {1.0f};
      args.push_back(one);
    }
    DenseMap<Value, Tensor> env;
    for (auto [arg, t] : llvm::zip(fn.getArguments(), args))
      env[arg] = t;
    for (Operation &op : fn.getBody().front()) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        std::vector<Tensor> out;
        for (Value v : ret.getOperands())
          out.push_back(env[v]);
        return out;
      }
      if (auto c = dyn_cast<func::CallOp>(op)) {
        std::vector<Tensor> in;
        for (Value v : c.getOperands())
          in.push_back(env[v]);
        auto callee =
            fn->getParentOfType<ModuleOp>().lookupSymbol<func::FuncOp>(
                c.getCallee());
        auto out = call(callee, in);
        for (auto [r, t] : llvm::zip(c.getResults(), out))
          env[r] = t;
        continue;
      }
      std::vector<Tensor> results = eval(op, env);
      if (results.size() != op.getNumResults()) {
        ADD_FAILURE() << "cannot evaluate "
                      << op.getName().getStringRef().str();
        return {};
      }
      for (auto [r, t] : llvm::zip(op.getResults(), results))
        env[r] = std::move(t);
    }
    return {};
  }

private:
  std::vector<Tensor> eval(Operation &op, DenseMap<Value, Tensor> &env) {
    auto in = [&](unsigned i) -> Tensor & { return env[op.getOperand(i)]; };
    auto outShape = [&](unsigned r = 0) {
      auto s = cast<RankedTensorType>(op.getResult(r).getType()).getShape();
      return SmallVector<int64_t>(s.begin(), s.end());
    };
    auto floats = [&](unsigned r = 0) {
      Tensor t;
      t.shape = outShape(r);
      t.f.resize(numel(t.shape));
      return t;
    };
    if (auto c = dyn_cast<ConstantOp>(op))
      return {fromAttr(c.getValue())};
    if (auto load = dyn_cast<ParamLoadOp>(op))
      return {readWeight(load.getParamOp())};
    if (auto e = dyn_cast<EmbeddingOp>(op)) {
      Tensor t = floats();
      auto table = in(0);
      EXPECT_TRUE(k::embeddingForward(table.f.data(), in(1).i.data(),
                                      in(1).i.size(), table.shape[0],
                                      table.shape[1], t.f.data()));
      return {t};
    }
    if (auto n = dyn_cast<RmsNormOp>(op)) {
      Tensor t = floats();
      int64_t d = t.shape.back();
      k::rmsNormForward(in(0).f.data(), in(1).f.data(), numel(t.shape) / d, d,
                        n.getEps().convertToFloat(), n.getPlusOne(),
                        t.f.data());
      return {t};
    }
    if (auto n = dyn_cast<LayerNormOp>(op)) {
      Tensor t = floats();
      int64_t d = t.shape.back();
      k::layerNormForward(in(0).f.data(), in(1).f.data(),
                          n.getBias() ? in(2).f.data() : nullptr,
                          numel(t.shape) / d, d, n.getEps().convertToFloat(),
                          t.f.data());
      return {t};
    }
    if (auto l = dyn_cast<LinearOp>(op)) {
      Tensor t = floats();
      int64_t inDim = in(0).shape.back(), outDim = t.shape.back();
      k::linearForward(in(0).f.data(), in(1).f.data(),
                       l.getBias() ? in(2).f.data() : nullptr,
                       numel(t.shape) / outDim, inDim, outDim,
                       l.getLayout() == WeightLayout::OutIn, t.f.data());
      return {t};
    }
    if (auto l = dyn_cast<ExpertLinearOp>(op)) {
      Tensor t = floats();
      auto w = cast<RankedTensorType>(l.getWeight().getType()).getShape();
      bool outIn = l.getLayout() == WeightLayout::OutIn;
      int64_t inDim = in(0).shape.back();
      EXPECT_TRUE(k::expertLinearForward(
          in(0).f.data(), in(1).i.data(), in(2).f.data(), in(0).shape[0], w[0],
          inDim, w[outIn ? 1 : 2], outIn, t.f.data()));
      return {t};
    }
    if (auto r = dyn_cast<RotaryOp>(op)) {
      Tensor t = floats();
      int64_t hd = r.getHeadDim();
      k::RotaryShape s{t.shape[0],
                       t.shape[1],
                       t.shape[2] / hd,
                       hd,
                       in(1).shape.size() == 3,
                       r.getInterleaved()};
      k::rotaryForward(in(0).f.data(), in(1).f.data(), in(2).f.data(), s,
                       t.f.data());
      return {t};
    }
    if (auto a = dyn_cast<AttentionOp>(op)) {
      Tensor t = floats();
      int64_t h = a.getNumHeads();
      k::AttentionShape s{t.shape[0],
                          t.shape[1],
                          h,
                          int64_t(a.getNumKvHeads()),
                          t.shape[2] / h,
                          a.getScale().convertToFloat(),
                          a.getCausal(),
                          int64_t(a.getWindow())};
      s.softcap = a.getSoftcap().convertToFloat();
      const float *mask = nullptr;
      if (a.getMask()) {
        auto md = in(3).shape;
        while (md.size() < 4)
          md.insert(md.begin(), 1);
        s.maskBatch = md[0];
        s.maskHeads = md[1];
        mask = in(3).f.data();
      }
      k::attentionForward(in(0).f.data(), in(1).f.data(), in(2).f.data(), mask,
                          s, t.f.data());
      return {t};
    }
    auto activation = [](Activation a) {
      switch (a) {
      case Activation::Gelu:
        return k::Activation::Gelu;
      case Activation::GeluTanh:
        return k::Activation::GeluTanh;
      case Activation::Silu:
        return k::Activation::Silu;
      case Activation::Relu:
        return k::Activation::Relu;
      }
      return k::Activation::Relu;
    };
    if (auto a = dyn_cast<ActivationOp>(op)) {
      Tensor t = floats();
      k::activationForward(in(0).f.data(), t.f.size(), activation(a.getAct()),
                           t.f.data());
      return {t};
    }
    if (auto g = dyn_cast<GatedActivationOp>(op)) {
      Tensor t = floats();
      k::gatedForward(in(0).f.data(), in(1).f.data(), t.f.size(),
                      activation(g.getAct()), t.f.data());
      return {t};
    }
    if (auto ce = dyn_cast<CrossEntropyOp>(op)) {
      auto &logits = in(0);
      int64_t v = logits.shape.back(), rows = numel(logits.shape) / v;
      int64_t seq = ce.getShift() ? in(1).shape.back() : rows;
      k::CrossEntropyShape s{rows / seq, seq, v, int64_t(ce.getIgnoreIndex()),
                             ce.getShift()};
      Tensor t;
      t.f = {
          k::crossEntropyForward(logits.f.data(), in(1).i.data(), s, nullptr)};
      return {t};
    }
    bool floatOperands =
        op.getNumOperands() > 0 &&
        isa<FloatType>(cast<RankedTensorType>(op.getOperand(0).getType())
                           .getElementType());
    if (isa<AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp>(op) &&
        floatOperands) {
      // numpy broadcasting, both ways.
      Tensor t = floats();
      auto &a = in(0), &b = in(1);
      k::Binary kind = isa<AddOp>(op)   ? k::Binary::Add
                       : isa<SubOp>(op) ? k::Binary::Sub
                       : isa<DivOp>(op) ? k::Binary::Div
                       : isa<PowOp>(op) ? k::Binary::Pow
                       : isa<MaxOp>(op) ? k::Binary::Max
                       : isa<MinOp>(op) ? k::Binary::Min
                                        : k::Binary::Mul;
      k::binaryForward(kind, a.f.data(), {a.shape.begin(), a.shape.end()},
                       b.f.data(), {b.shape.begin(), b.shape.end()}, t.f.data(),
                       {t.shape.begin(), t.shape.end()});
      return {t};
    }
    if (isa<EqualOp, LessOp, LessOrEqualOp, GreaterOp, GreaterOrEqualOp>(op) &&
        floatOperands) {
      // Booleans as integers, 1 for true.
      auto &a = in(0), &b = in(1);
      Tensor t;
      t.shape = outShape();
      std::vector<uint8_t> out(numel(t.shape));
      k::Compare c = isa<EqualOp>(op)         ? k::Compare::Equal
                     : isa<LessOp>(op)        ? k::Compare::Less
                     : isa<LessOrEqualOp>(op) ? k::Compare::LessOrEqual
                     : isa<GreaterOp>(op)     ? k::Compare::Greater
                                              : k::Compare::GreaterOrEqual;
      k::compareForward(c, a.f.data(), {a.shape.begin(), a.shape.end()},
                        b.f.data(), {b.shape.begin(), b.shape.end()},
                        out.data(), {t.shape.begin(), t.shape.end()});
      t.i.assign(out.begin(), out.end());
      return {t};
    }
    if (isa<NotOp, AndOp, OrOp, XorOp>(op)) {
      // Booleans as integers, any nonzero true.
      auto bytes = [](const Tensor &x) {
        return std::vector<uint8_t>(x.i.begin(), x.i.end());
      };
      auto &a = in(0);
      const Tensor &b = isa<NotOp>(op) ? a : in(1);
      std::vector<uint8_t> ab = bytes(a), bb = bytes(b);
      Tensor t;
      t.shape = outShape();
      std::vector<uint8_t> out(numel(t.shape));
      k::Logic l = isa<NotOp>(op)   ? k::Logic::Not
                   : isa<AndOp>(op) ? k::Logic::And
                   : isa<OrOp>(op)  ? k::Logic::Or
                                    : k::Logic::Xor;
      k::logicForward(l, ab.data(), {a.shape.begin(), a.shape.end()}, bb.data(),
                      {b.shape.begin(), b.shape.end()}, out.data(),
                      {t.shape.begin(), t.shape.end()});
      t.i.assign(out.begin(), out.end());
      return {t};
    }
    if (auto p = dyn_cast<PointwiseOpInterface>(op)) {
      Tensor t = in(0);
      k::unaryForward(
          {k::Unary(int(p.getFn())), p.getAlphaValue(), p.getBetaValue()},
          t.f.data(), t.f.data(), int64_t(t.f.size()));
      return {t};
    }
    if (auto g = dyn_cast<UnaryGradOp>(op)) {
      Tensor t = in(1);
      k::unaryBackward({k::Unary(int(g.getFn())), g.getAlpha().convertToFloat(),
                        g.getBeta().convertToFloat()},
                       in(0).f.data(), t.f.data(), t.f.data(),
                       int64_t(t.f.size()));
      return {t};
    }
    if (isa<MatMulOp>(op)) {
      Tensor t = floats();
      auto &a = in(0), &b = in(1);
      k::batchMatmul(a.f.data(), {a.shape.begin(), a.shape.end()}, b.f.data(),
                     {b.shape.begin(), b.shape.end()}, t.f.data(),
                     {t.shape.begin(), t.shape.end()});
      return {t};
    }
    if (isa<ExpandOp>(op)) {
      Tensor t = floats();
      auto &x = in(0);
      k::expand(x.f.data(), {x.shape.begin(), x.shape.end()}, t.f.data(),
                {t.shape.begin(), t.shape.end()});
      return {t};
    }
    if (isa<SoftmaxOp, LogSoftmaxOp>(op)) {
      Tensor t = floats();
      auto &x = in(0);
      int64_t rank = int64_t(x.shape.size()),
              axis = op.getAttrOfType<IntegerAttr>("axis").getInt();
      k::softmax(x.f.data(), {x.shape.begin(), x.shape.end()},
                 axis < 0 ? axis + rank : axis, t.f.data(),
                 isa<LogSoftmaxOp>(op));
      return {t};
    }
    if (isa<IsNaNOp>(op)) {
      // Booleans as integers, nonzero for true.
      Tensor t;
      t.shape = outShape();
      std::vector<uint8_t> nan(in(0).f.size());
      k::isNaN(in(0).f.data(), nan.data(), int64_t(nan.size()));
      t.i.assign(nan.begin(), nan.end());
      return {t};
    }
    if (isa<WhereOp>(op)) {
      Tensor t = floats();
      auto &c = in(0), &a = in(1), &b = in(2);
      std::vector<uint8_t> cond(c.i.begin(), c.i.end());
      k::where(cond.data(), {c.shape.begin(), c.shape.end()}, a.f.data(),
               {a.shape.begin(), a.shape.end()}, b.f.data(),
               {b.shape.begin(), b.shape.end()}, t.f.data(),
               {t.shape.begin(), t.shape.end()});
      return {t};
    }
    if (auto sl = dyn_cast<SliceOp>(op); sl && floatOperands) {
      std::optional<mt::train::SliceLayout> layout = constantSlice(sl);
      if (!layout)
        return {};
      Tensor t = floats();
      auto &x = in(0);
      k::slice(x.f.data(), {x.shape.begin(), x.shape.end()},
               {layout->starts.begin(), layout->starts.end()},
               {layout->steps.begin(), layout->steps.end()}, t.f.data(),
               {t.shape.begin(), t.shape.end()});
      return {t};
    }
    if (isa<GatherOp, GatherGradOp>(op) && floatOperands) {
      Tensor t = floats();
      auto &x = in(0), &idx = in(1);
      bool grad = isa<GatherGradOp>(op);
      const Tensor &data = grad ? t : x;
      int64_t rank = int64_t(data.shape.size()),
              axis = op.getAttrOfType<IntegerAttr>("axis").getInt();
      if (axis < 0)
        axis += rank;
      mt::kernels::cpu::Dims dims(data.shape.begin(), data.shape.end());
      bool ok = grad ? k::gatherGrad(x.f.data(), dims, axis, idx.i.data(),
                                     int64_t(idx.i.size()), t.f.data())
                     : k::gather(x.f.data(), dims, axis, idx.i.data(),
                                 int64_t(idx.i.size()), t.f.data());
      EXPECT_TRUE(ok) << "an index outside the axis";
      return {t};
    }
    if (auto tk = dyn_cast<TopKOp>(op)) {
      Tensor v = floats(), idx;
      idx.shape = outShape(1);
      idx.i.resize(numel(idx.shape));
      auto &x = in(0);
      int64_t rank = int64_t(x.shape.size()), axis = tk.getAxis();
      k::topK(x.f.data(), {x.shape.begin(), x.shape.end()},
              axis < 0 ? axis + rank : axis, int64_t(tk.getK()),
              tk.getSmallest(), v.f.data(), idx.i.data());
      return {v, idx};
    }
    if (auto tg = dyn_cast<TopKGradOp>(op)) {
      Tensor t = floats();
      auto &dy = in(0), &idx = in(1);
      int64_t rank = int64_t(t.shape.size()), axis = tg.getAxis();
      axis = axis < 0 ? axis + rank : axis;
      EXPECT_TRUE(k::gatherElementsGrad(dy.f.data(), idx.i.data(),
                                        {t.shape.begin(), t.shape.end()}, axis,
                                        dy.shape[size_t(axis)], t.f.data()));
      return {t};
    }
    if (isa<GatherElementsOp, GatherElementsGradOp, ScatterElementsOp>(op) &&
        floatOperands) {
      Tensor t = floats();
      auto &x = in(0), &idx = in(1);
      bool grad = isa<GatherElementsGradOp>(op);
      const Tensor &data = grad ? t : x;
      int64_t rank = int64_t(data.shape.size()),
              axis = op.getAttrOfType<IntegerAttr>("axis").getInt();
      if (axis < 0)
        axis += rank;
      mt::kernels::cpu::Dims dims(data.shape.begin(), data.shape.end());
      int64_t k = idx.shape[size_t(axis)];
      bool ok = isa<GatherElementsOp>(op)
                    ? k::gatherElements(x.f.data(), dims, axis, idx.i.data(), k,
                                        t.f.data())
                : grad
                    ? k::gatherElementsGrad(x.f.data(), idx.i.data(), dims,
                                            axis, k, t.f.data())
                    : k::scatterElements(x.f.data(), dims, axis, idx.i.data(),
                                         in(2).f.data(), k, t.f.data());
      EXPECT_TRUE(ok) << "an index outside the axis";
      return {t};
    }
    if (isa<GatherNDOp, GatherNDGradOp>(op) && floatOperands) {
      Tensor t = floats();
      auto &x = in(0), &idx = in(1);
      bool grad = isa<GatherNDGradOp>(op);
      const Tensor &data = grad ? t : x;
      int64_t k = idx.shape.back(),
              tuples = numel(ArrayRef<int64_t>(idx.shape).drop_back());
      mt::kernels::cpu::Dims dims(data.shape.begin(), data.shape.end());
      bool ok = grad ? k::gatherNDGrad(x.f.data(), dims, idx.i.data(), tuples,
                                       k, t.f.data())
                     : k::gatherND(x.f.data(), dims, idx.i.data(), tuples, k,
                                   t.f.data());
      EXPECT_TRUE(ok) << "an index outside its dim";
      return {t};
    }
    if (auto pad = dyn_cast<PadOp>(op); pad && floatOperands) {
      std::optional<mt::train::PadLayout> layout = constantPad(pad);
      if (!layout)
        return {};
      Tensor t = floats();
      auto &x = in(0);
      k::pad(x.f.data(), {x.shape.begin(), x.shape.end()},
             {layout->begins.begin(), layout->begins.end()},
             float(layout->value), t.f.data(),
             {t.shape.begin(), t.shape.end()});
      return {t};
    }
    if (auto tr = dyn_cast<TriluOp>(op); tr && floatOperands) {
      Tensor t = floats();
      auto &x = in(0);
      k::trilu(x.f.data(), {x.shape.begin(), x.shape.end()}, tr.getUpper(),
               tr.getK(), t.f.data());
      return {t};
    }
    if (auto cs = dyn_cast<CumSumOp>(op); cs && floatOperands) {
      Tensor t = floats();
      auto &x = in(0);
      int64_t rank = int64_t(x.shape.size()), axis = cs.getAxis();
      k::cumSum(x.f.data(), {x.shape.begin(), x.shape.end()},
                axis < 0 ? axis + rank : axis, cs.getExclusive(),
                cs.getReverse(), t.f.data());
      return {t};
    }
    if (isa<TileOp>(op) && floatOperands) {
      Tensor t = floats();
      auto &x = in(0);
      k::tile(x.f.data(), {x.shape.begin(), x.shape.end()}, t.f.data(),
              {t.shape.begin(), t.shape.end()});
      return {t};
    }
    if (auto sg = dyn_cast<SliceGradOp>(op)) {
      Tensor t = floats();
      auto &dy = in(0);
      k::sliceGrad(dy.f.data(), {dy.shape.begin(), dy.shape.end()},
                   {sg.getStarts().begin(), sg.getStarts().end()},
                   {sg.getSteps().begin(), sg.getSteps().end()}, t.f.data(),
                   {t.shape.begin(), t.shape.end()});
      return {t};
    }
    if (auto tr = dyn_cast<TransposeOp>(op)) {
      Tensor t = floats();
      auto &x = in(0);
      k::transpose(x.f.data(), {x.shape.begin(), x.shape.end()},
                   {tr.getPerm().begin(), tr.getPerm().end()}, t.f.data());
      return {t};
    }
    Type from = op.getNumOperands()
                    ? cast<RankedTensorType>(op.getOperand(0).getType())
                          .getElementType()
                    : Type(),
         to = op.getNumResults()
                  ? cast<RankedTensorType>(op.getResult(0).getType())
                        .getElementType()
                  : Type();
    if (isa<IdentityOp, CastOp, SqueezeOp, UnsqueezeOp, FlattenOp>(op) &&
        (from == to || (isa<FloatType>(from) && isa<FloatType>(to)))) {
      // The same values (floats held as fp32, integers as int64) in the
      // result's shape.
      Tensor t = in(0);
      t.shape = outShape();
      return {t};
    }
    if (isa<CastOp>(op) && from && to) {
      // Between integers (booleans: 0 or 1) and floats, as the COPY kernel
      // converts: floats to integers toward zero, anything to a boolean by
      // being nonzero.
      const Tensor &a = in(0);
      Tensor t;
      t.shape = outShape();
      bool fromFloat = isa<FloatType>(from);
      for (size_t i = 0; i < (fromFloat ? a.f.size() : a.i.size()); ++i) {
        double v = fromFloat ? double(a.f[i]) : double(a.i[i]);
        if (isa<FloatType>(to))
          t.f.push_back(float(v));
        else
          t.i.push_back(to.isInteger(1) ? int64_t(v != 0) : int64_t(v));
      }
      return {t};
    }
    if (auto g = dyn_cast<EmbeddingGradOp>(op)) {
      Tensor t = floats();
      k::embeddingBackward(in(0).f.data(), in(1).i.data(), in(1).i.size(),
                           t.shape[0], t.shape[1], t.f.data());
      return {t};
    }
    if (auto g = dyn_cast<LinearGradOp>(op)) {
      Tensor dx = floats(0), dw = floats(1);
      int64_t inDim = in(0).shape.back(), outDim = in(2).shape.back();
      k::linearBackward(in(0).f.data(), in(1).f.data(), in(2).f.data(),
                        numel(in(0).shape) / inDim, inDim, outDim,
                        g.getLayout() == WeightLayout::OutIn, dx.f.data(),
                        dw.f.data(), nullptr);
      return {dx, dw};
    }
    if (auto g = dyn_cast<ExpertLinearGradOp>(op)) {
      Tensor dx = floats(0), dw = floats(1);
      auto w = cast<RankedTensorType>(g.getWeight().getType()).getShape();
      bool outIn = g.getLayout() == WeightLayout::OutIn;
      int64_t inDim = in(0).shape.back();
      EXPECT_TRUE(k::expertLinearBackward(
          in(0).f.data(), in(1).i.data(), in(2).f.data(), in(3).f.data(),
          in(0).shape[0], w[0], inDim, w[outIn ? 1 : 2], outIn, dx.f.data(),
          dw.f.data()));
      return {dx, dw};
    }
    if (auto g = dyn_cast<RmsNormGradOp>(op)) {
      Tensor dx = floats(0), dw = floats(1);
      int64_t d = dx.shape.back();
      k::rmsNormBackward(in(0).f.data(), in(1).f.data(), in(2).f.data(),
                         numel(dx.shape) / d, d, g.getEps().convertToFloat(),
                         g.getPlusOne(), dx.f.data(), dw.f.data());
      return {dx, dw};
    }
    if (auto g = dyn_cast<LayerNormGradOp>(op)) {
      Tensor dx = floats(0), dw = floats(1);
      int64_t d = dx.shape.back();
      k::layerNormBackward(in(0).f.data(), in(1).f.data(), in(2).f.data(),
                           numel(dx.shape) / d, d, g.getEps().convertToFloat(),
                           dx.f.data(), dw.f.data(), nullptr);
      return {dx, dw};
    }
    if (auto r = dyn_cast<RotaryGradOp>(op)) {
      Tensor t = floats();
      int64_t hd = r.getHeadDim();
      k::RotaryShape s{t.shape[0],
                       t.shape[1],
                       t.shape[2] / hd,
                       hd,
                       in(1).shape.size() == 3,
                       r.getInterleaved()};
      k::rotaryBackward(in(0).f.data(), in(1).f.data(), in(2).f.data(), s,
                        t.f.data());
      return {t};
    }
    if (auto a = dyn_cast<AttentionGradOp>(op)) {
      Tensor dq = floats(0), dk = floats(1), dv = floats(2);
      int64_t h = a.getNumHeads();
      k::AttentionShape s{dq.shape[0],
                          dq.shape[1],
                          h,
                          int64_t(a.getNumKvHeads()),
                          dq.shape[2] / h,
                          a.getScale().convertToFloat(),
                          a.getCausal(),
                          int64_t(a.getWindow())};
      s.softcap = a.getSoftcap().convertToFloat();
      const float *mask = nullptr;
      if (a.getMask()) {
        auto md = in(3).shape;
        while (md.size() < 4)
          md.insert(md.begin(), 1);
        s.maskBatch = md[0];
        s.maskHeads = md[1];
        mask = in(3).f.data();
      }
      k::attentionBackward(in(0).f.data(), in(1).f.data(), in(2).f.data(), mask,
                           env[a.getGrad()].f.data(), s, dq.f.data(),
                           dk.f.data(), dv.f.data());
      return {dq, dk, dv};
    }
    if (auto a = dyn_cast<ActivationGradOp>(op)) {
      Tensor t = floats();
      k::activationBackward(in(0).f.data(), in(1).f.data(), t.f.size(),
                            activation(a.getAct()), t.f.data());
      return {t};
    }
    if (auto g = dyn_cast<GatedActivationGradOp>(op)) {
      Tensor dg = floats(0), du = floats(1);
      k::gatedBackward(in(0).f.data(), in(1).f.data(), in(2).f.data(),
                       dg.f.size(), activation(g.getAct()), dg.f.data(),
                       du.f.data());
      return {dg, du};
    }
    if (auto ce = dyn_cast<CrossEntropyGradOp>(op)) {
      Tensor t = floats();
      int64_t v = t.shape.back(), rows = numel(t.shape) / v;
      int64_t seq = ce.getShift() ? in(1).shape.back() : rows;
      k::CrossEntropyShape s{rows / seq, seq, v, int64_t(ce.getIgnoreIndex()),
                             ce.getShift()};
      k::crossEntropyBackward(in(0).f.data(), in(1).i.data(), s, in(2).f[0],
                              t.f.data());
      return {t};
    }
    if (auto r = dyn_cast<ReduceMaxOp>(op); r && floatOperands) {
      auto &x = in(0);
      Tensor t = floats();
      k::reduceMax(x.f.data(), {x.shape.begin(), x.shape.end()},
                   {r.getAxes().begin(), r.getAxes().end()}, t.f.data());
      return {t};
    }
    if (isa<ReduceSumOp, ReduceMeanOp>(op)) {
      // Sums over the listed axes of the input into the result's layout
      // (a mean divides by the elements each sum took).
      auto &x = in(0);
      Tensor t = floats();
      ArrayRef<int64_t> axes = isa<ReduceSumOp>(op)
                                   ? cast<ReduceSumOp>(op).getAxes()
                                   : cast<ReduceMeanOp>(op).getAxes();
      SmallVector<bool> reduced(x.shape.size(), axes.empty());
      for (int64_t a : axes)
        reduced[a < 0 ? a + int64_t(x.shape.size()) : a] = true;
      std::vector<double> acc(t.f.size(), 0.0);
      SmallVector<int64_t> idx(x.shape.size(), 0);
      for (size_t j = 0; j < x.f.size(); ++j) {
        int64_t o = 0;
        for (size_t d = 0; d < x.shape.size(); ++d)
          if (!reduced[d])
            o = o * x.shape[d] + idx[d];
        acc[o] += x.f[j];
        for (int64_t d = int64_t(x.shape.size()) - 1; d >= 0; --d) {
          if (++idx[d] < x.shape[d])
            break;
          idx[d] = 0;
        }
      }
      double per = isa<ReduceMeanOp>(op) ? double(x.f.size()) / t.f.size() : 1;
      for (size_t i = 0; i < t.f.size(); ++i)
        t.f[i] = float(acc[i] / per);
      return {t};
    }
    if (isa<ReshapeOp>(op)) {
      Tensor t = in(0);
      t.shape = outShape();
      return {t};
    }
    if (isa<NegOp>(op)) {
      Tensor t = in(0);
      for (float &v : t.f)
        v = -v;
      return {t};
    }
    if (auto c = dyn_cast<ConcatOp>(op)) {
      Tensor t = floats();
      int64_t axis = int64_t(c.getAxis()) < 0
                         ? int64_t(c.getAxis()) + int64_t(t.shape.size())
                         : int64_t(c.getAxis());
      int64_t outer = numel(ArrayRef<int64_t>(t.shape).take_front(axis));
      int64_t k = 0;
      for (int64_t o = 0; o < outer; ++o)
        for (unsigned i = 0; i < op.getNumOperands(); ++i) {
          auto &x = in(i);
          int64_t chunk = numel(ArrayRef<int64_t>(x.shape).drop_front(axis));
          std::copy_n(x.f.begin() + o * chunk, chunk, t.f.begin() + k);
          k += chunk;
        }
      return {t};
    }
    if (auto sp = dyn_cast<SplitOp>(op)) {
      auto &x = in(0);
      int64_t axis = int64_t(sp.getAxis()) < 0
                         ? int64_t(sp.getAxis()) + int64_t(x.shape.size())
                         : int64_t(sp.getAxis());
      int64_t inner = numel(ArrayRef<int64_t>(x.shape).drop_front(axis + 1));
      int64_t outer = numel(ArrayRef<int64_t>(x.shape).take_front(axis));
      std::vector<Tensor> parts;
      int64_t begin = 0;
      for (unsigned r = 0; r < op.getNumResults(); ++r) {
        Tensor t = floats(r);
        int64_t size = sp.getSizes()[r];
        for (int64_t o = 0; o < outer; ++o)
          std::copy_n(x.f.begin() + (o * x.shape[axis] + begin) * inner,
                      size * inner, t.f.begin() + o * size * inner);
        begin += size;
        parts.push_back(std::move(t));
      }
      return parts;
    }
    return {};
  }

  Tensor &readWeight(ParamOp w) {
    auto [it, fresh] = weights.try_emplace(w.getSymName().str());
    if (fresh)
      it->second = loadWeight(w);
    return it->second;
  }

  Tensor loadWeight(ParamOp w) {
    if (w.getValue())
      return fromAttr(*w.getValue());
    Tensor t;
    auto type = w.getTensorType();
    t.shape.assign(type.getShape().begin(), type.getShape().end());
    t.f.resize(numel(t.shape));
    EXPECT_TRUE(type.getElementType().isF32());
    EXPECT_EQ(int64_t(*w.getLength()), int64_t(t.f.size() * sizeof(float)));
    std::ifstream f(w.getFile()->str(), std::ios::binary);
    f.seekg(*w.getOffset());
    EXPECT_TRUE(f.read(reinterpret_cast<char *>(t.f.data()), *w.getLength()))
        << w.getSymName().str();
    return t;
  }
};

} // namespace mt::test

#endif // MT_TEST_UNIT_EVALUATOR_H
