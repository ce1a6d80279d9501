//===- FuseOps.cpp - rewrite exporter patterns into fused ops -------------===//
//
// Each fusion is a walk that matches from the op that ends the pattern and
// replaces its result; what the match leaves unused is erased by the fold
// pass that follows. Fused ops that work on heads take packed activations
// [B, S, H * D]; where the surrounding graph is in [B, H, S, D], the rewrite
// inserts the Reshape/Transpose pair, and inverse pairs fold away.
//
//===----------------------------------------------------------------------===//
#include "dialects/Train/IR/ConstEval.h"
#include "dialects/Train/IR/ShapeInference.h"
#include "dialects/Train/Transforms/Passes.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/Support/Debug.h"

#include <cmath>
#include <map>

#define DEBUG_TYPE "mt-fuse-ops"

namespace mt::train {
#define GEN_PASS_DEF_FUSEOPSPASS
#include "dialects/Train/Transforms/Passes.h.inc"
} // namespace mt::train

using namespace mlir;
using namespace mt::train;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

template <typename OpTy> OpTy def(Value v) {
  return v ? v.getDefiningOp<OpTy>() : OpTy();
}

/// The value of a constant whose elements are all equal.
std::optional<double> splatValue(Value v) {
  Attribute attr;
  if (!v || !matchPattern(v, m_Constant(&attr)))
    return std::nullopt;
  auto dense = dyn_cast<DenseElementsAttr>(attr);
  if (!dense || (!dense.isSplat() && dense.getNumElements() > 16))
    return std::nullopt;
  auto values = getFloatValues(attr);
  if (!values || values->empty())
    return std::nullopt;
  for (double x : *values)
    if (x != (*values)[0])
      return std::nullopt;
  return (*values)[0];
}

bool near(std::optional<double> v, double want, double tol = 1e-3) {
  return v && std::abs(*v - want) <= tol * std::max(1.0, std::abs(want));
}

bool isWeight(Value v) { return def<WeightOp>(v) != nullptr; }

/// Marks a weight that a fused op defines as non-trainable (mask, tables).
void freeze(Value v) {
  if (auto w = def<WeightOp>(v))
    w->removeAttr("trainable");
}

/// Operands of a commutative binary op, ordered so that `pred(first)` holds.
template <typename OpTy, typename Pred>
std::optional<std::pair<Value, Value>> operandsWhere(OpTy op, Pred pred) {
  if (!op)
    return std::nullopt;
  if (pred(op.getLhs()))
    return std::make_pair(op.getLhs(), op.getRhs());
  if (pred(op.getRhs()))
    return std::make_pair(op.getRhs(), op.getLhs());
  return std::nullopt;
}

/// Factors of a product tree of single-use Mul ops (and Div by a constant,
/// as a factor 1/c).
void collectFactors(Value v, SmallVectorImpl<Value> &factors, double &scale,
                    bool root = true) {
  if (auto mul = def<MulOp>(v); mul && (root || v.hasOneUse())) {
    collectFactors(mul.getLhs(), factors, scale, false);
    collectFactors(mul.getRhs(), factors, scale, false);
    return;
  }
  if (auto div = def<DivOp>(v); div && (root || v.hasOneUse())) {
    if (auto c = splatValue(div.getRhs())) {
      collectFactors(div.getLhs(), factors, scale, false);
      scale /= *c;
      return;
    }
  }
  if (auto c = splatValue(v)) {
    scale *= *c;
    return;
  }
  factors.push_back(v);
}

struct FuseOps : public mt::train::impl::FuseOpsPassBase<FuseOps> {
  void runOnOperation() override {
    causalCache.clear();
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      fuseLinear(func);
      fuseEmbedding(func);
      fuseNorms(func);
      fuseActivations(func);
      fuseRotary(func);
      fuseAttention(func);
      fuseCrossEntropy(func);
      splitSlices(func);
    }
  }

  template <typename OpTy, typename Fn> void forEach(func::FuncOp func, Fn fn) {
    SmallVector<OpTy> ops;
    func.walk([&](OpTy op) { ops.push_back(op); });
    for (OpTy op : ops)
      if (op->getBlock())
        fn(op);
  }

  void replace(Operation *op, Value with) {
    op->getResult(0).replaceAllUsesWith(with);
    ++numFused;
  }

  //===--------------------------------------------------------------------===//
  // Layout helpers for packed heads.
  //===--------------------------------------------------------------------===//

  /// [B, H, S, D] -> [B, S, H * D], looking through the inverse pair.
  Value packHeads(OpBuilder &b, Location loc, Value bhsd) {
    auto t = typeOf(bhsd);
    int64_t B = t.getDimSize(0), H = t.getDimSize(1), S = t.getDimSize(2),
            D = t.getDimSize(3);
    if (auto tr = def<TransposeOp>(bhsd);
        tr && tr.getPerm() == ArrayRef<int64_t>{0, 2, 1, 3})
      if (auto rs = def<ReshapeOp>(tr.getInput()))
        if (typeOf(rs.getInput()).getShape() == ArrayRef<int64_t>{B, S, H * D})
          return rs.getInput();
    auto tr =
        b.create<TransposeOp>(loc, bhsd, b.getDenseI64ArrayAttr({0, 2, 1, 3}));
    return reshape(b, loc, tr, {B, S, H * D});
  }

  /// [B, S, H * D] -> [B, H, S, D].
  Value unpackHeads(OpBuilder &b, Location loc, Value packed, int64_t H) {
    auto t = typeOf(packed);
    int64_t B = t.getDimSize(0), S = t.getDimSize(1), D = t.getDimSize(2) / H;
    Value r = reshape(b, loc, packed, {B, S, H, D});
    return b.create<TransposeOp>(loc, r, b.getDenseI64ArrayAttr({0, 2, 1, 3}));
  }

  Value reshape(OpBuilder &b, Location loc, Value v, ArrayRef<int64_t> shape) {
    if (typeOf(v).getShape() == shape)
      return v;
    auto st = RankedTensorType::get({int64_t(shape.size())}, b.getI64Type());
    auto c = b.create<ConstantOp>(loc, DenseElementsAttr::get(st, shape));
    return b.create<ReshapeOp>(
        loc, RankedTensorType::get(shape, typeOf(v).getElementType()), v, c,
        /*allowzero=*/false);
  }

  //===--------------------------------------------------------------------===//
  // linear and embedding
  //===--------------------------------------------------------------------===//

  void fuseLinear(func::FuncOp func) {
    forEach<MatMulOp>(func, [&](MatMulOp mm) {
      Value rhs = mm.getRhs(), w;
      WeightLayout layout;
      if (typeOf(rhs).getRank() != 2 || typeOf(mm.getLhs()).getRank() < 2)
        return;
      if (auto tr = def<TransposeOp>(rhs); tr && isWeight(tr.getInput())) {
        w = tr.getInput();
        layout = WeightLayout::OutIn;
      } else if (isWeight(rhs)) {
        w = rhs;
        layout = WeightLayout::InOut;
      } else {
        return;
      }
      OpBuilder b(mm);
      auto lin =
          b.create<LinearOp>(mm.getLoc(), mm.getLhs(), w, Value(), layout);
      replace(mm, lin);
      absorbBias(lin);
    });
    forEach<GemmOp>(func, [&](GemmOp g) {
      if (g.getTransA() || g.getAlpha().convertToDouble() != 1.0 ||
          g.getBeta().convertToDouble() != 1.0 || !isWeight(g.getB()))
        return;
      Value bias = g.getC();
      if (bias && (!isWeight(bias) || typeOf(bias).getRank() != 1))
        return;
      OpBuilder b(g);
      auto lin = b.create<LinearOp>(g.getLoc(), g.getA(), g.getB(), bias,
                                    g.getTransB() ? WeightLayout::OutIn
                                                  : WeightLayout::InOut);
      replace(g, lin);
    });
  }

  /// linear(x, w) + b with a 1-D weight b of the output size.
  void absorbBias(LinearOp lin) {
    if (!lin->hasOneUse())
      return;
    auto add = dyn_cast<AddOp>(*lin->getUsers().begin());
    auto ops =
        operandsWhere(add, [&](Value v) { return v == lin.getResult(); });
    if (!ops || !isWeight(ops->second) ||
        typeOf(ops->second).getShape() !=
            ArrayRef<int64_t>{typeOf(lin).getShape().back()})
      return;
    lin.getBiasMutable().assign(ops->second);
    add.getResult().replaceAllUsesWith(lin.getResult());
  }

  void fuseEmbedding(func::FuncOp func) {
    forEach<GatherOp>(func, [&](GatherOp g) {
      if (g.getAxis() != 0 || !isWeight(g.getData()) ||
          typeOf(g.getData()).getRank() != 2)
        return;
      OpBuilder b(g);
      replace(g,
              b.create<EmbeddingOp>(g.getLoc(), g.getData(), g.getIndices()));
      setRole(g.getIndices(), InputRole::Tokens);
    });
  }

  void setRole(Value v, InputRole role) {
    auto arg = dyn_cast<BlockArgument>(v);
    if (!arg)
      return;
    if (auto f = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()))
      f.setArgAttr(arg.getArgNumber(), "train.role",
                   InputRoleAttr::get(f.getContext(), role));
  }

  //===--------------------------------------------------------------------===//
  // rms_norm and layer_norm
  //===--------------------------------------------------------------------===//

  /// x * rsqrt(mean(x^2) + eps) in its exported forms; returns x and eps.
  std::optional<std::pair<Value, double>> matchRmsCore(Value v) {
    Value x, denom;
    if (auto div = def<DivOp>(v)) {
      x = div.getLhs();
      denom = div.getRhs();
    } else if (auto mul = def<MulOp>(v)) {
      // x * reciprocal(d), or x * (1 / d) as torch.rsqrt exports.
      auto inverse = [](Value r) -> Value {
        if (auto rec = def<ReciprocalOp>(r))
          return rec.getInput();
        if (auto div = def<DivOp>(r);
            div && near(splatValue(div.getLhs()), 1.0, 0))
          return div.getRhs();
        return nullptr;
      };
      auto ops =
          operandsWhere(mul, [&](Value r) { return inverse(r) != nullptr; });
      if (!ops)
        return std::nullopt;
      x = ops->second;
      denom = inverse(ops->first);
    } else {
      return std::nullopt;
    }
    auto sqrt = def<SqrtOp>(denom);
    if (!sqrt)
      return std::nullopt;
    auto add = def<AddOp>(sqrt.getInput());
    auto ops =
        operandsWhere(add, [](Value e) { return splatValue(e).has_value(); });
    if (!ops)
      return std::nullopt;
    double eps = *splatValue(ops->first);
    auto mean = def<ReduceMeanOp>(ops->second);
    int64_t rank = typeOf(x).getRank();
    if (!mean || !mean.getKeepdims() || mean.getAxes().size() != 1 ||
        (mean.getAxes()[0] != -1 && mean.getAxes()[0] != rank - 1))
      return std::nullopt;
    Value sq = mean.getInput();
    if (auto pow = def<PowOp>(sq)) {
      if (pow.getLhs() != x || !near(splatValue(pow.getRhs()), 2.0, 0))
        return std::nullopt;
    } else if (auto m = def<MulOp>(sq)) {
      if (m.getLhs() != x || m.getRhs() != x)
        return std::nullopt;
    } else {
      return std::nullopt;
    }
    return std::make_pair(x, eps);
  }

  void fuseNorms(func::FuncOp func) {
    forEach<MulOp>(func, [&](MulOp mul) {
      for (auto [w, core] : {std::make_pair(mul.getLhs(), mul.getRhs()),
                             std::make_pair(mul.getRhs(), mul.getLhs())}) {
        auto m = matchRmsCore(core);
        if (!m)
          continue;
        bool plusOne = false;
        Value weight = w;
        if (auto add = def<AddOp>(w)) {
          auto ops = operandsWhere(
              add, [](Value c) { return near(splatValue(c), 1.0, 0); });
          if (ops && isWeight(ops->second)) {
            plusOne = true;
            weight = ops->second;
          }
        }
        int64_t d = typeOf(m->first).getShape().back();
        if (!isWeight(weight) ||
            typeOf(weight).getShape() != ArrayRef<int64_t>{d} ||
            typeOf(mul).getShape() != typeOf(m->first).getShape())
          continue;
        OpBuilder b(mul);
        auto norm = b.create<RmsNormOp>(mul.getLoc(), m->first, weight,
                                        b.getF32FloatAttr(m->second),
                                        plusOne ? b.getUnitAttr() : UnitAttr());
        replace(mul, norm);
        return;
      }
    });
    forEach<LayerNormalizationOp>(func, [&](LayerNormalizationOp ln) {
      auto t = typeOf(ln.getInput());
      int64_t d = t.getShape().back();
      if ((ln.getAxis() != -1 && ln.getAxis() != t.getRank() - 1) ||
          typeOf(ln.getScale()).getShape() != ArrayRef<int64_t>{d} ||
          (ln.getBias() &&
           typeOf(ln.getBias()).getShape() != ArrayRef<int64_t>{d}))
        return;
      OpBuilder b(ln);
      replace(ln,
              b.create<LayerNormOp>(ln.getLoc(), ln.getInput(), ln.getScale(),
                                    ln.getBias(), ln.getEpsilonAttr()));
    });
  }

  //===--------------------------------------------------------------------===//
  // Activations
  //===--------------------------------------------------------------------===//

  /// x * sigmoid(x) -> x.
  Value matchSilu(Value v) {
    auto ops = operandsWhere(
        def<MulOp>(v), [](Value s) { return def<SigmoidOp>(s) != nullptr; });
    if (ops && def<SigmoidOp>(ops->first).getInput() == ops->second)
      return ops->second;
    return nullptr;
  }

  /// 0.5 * x * (1 + erf(x / sqrt(2))) or the tanh form; returns x.
  std::optional<std::pair<Value, Activation>> matchGelu(Value v) {
    SmallVector<Value> factors;
    double scale = 1.0;
    collectFactors(v, factors, scale);
    if (factors.size() != 2 || !near(scale, 0.5))
      return std::nullopt;
    for (auto pair : {std::make_pair(factors[0], factors[1]),
                      std::make_pair(factors[1], factors[0])}) {
      // Named copies: lambdas below capture x (C++17 cannot capture a
      // structured binding).
      Value x = pair.first, onePlus = pair.second;
      auto ops = operandsWhere(def<AddOp>(onePlus), [](Value c) {
        return near(splatValue(c), 1.0, 0);
      });
      if (!ops)
        continue;
      if (auto erf = def<ErfOp>(ops->second)) {
        SmallVector<Value> f;
        double s = 1.0;
        collectFactors(erf.getInput(), f, s);
        if (f.size() == 1 && f[0] == x && near(s, M_SQRT1_2))
          return std::make_pair(x, Activation::Gelu);
      }
      if (auto th = def<TanhOp>(ops->second)) {
        SmallVector<Value> f;
        double s = 1.0;
        collectFactors(th.getInput(), f, s);
        if (f.size() != 1 || !near(s, std::sqrt(2.0 / M_PI)))
          continue;
        auto inner =
            operandsWhere(def<AddOp>(f[0]), [&](Value a) { return a == x; });
        if (!inner)
          continue;
        SmallVector<Value> cube;
        double c = 1.0;
        collectFactors(inner->second, cube, c);
        bool isCube =
            (cube.size() == 1 && def<PowOp>(cube[0]) &&
             def<PowOp>(cube[0]).getLhs() == x &&
             near(splatValue(def<PowOp>(cube[0]).getRhs()), 3.0, 0)) ||
            (cube.size() == 3 &&
             llvm::all_of(cube, [&](Value y) { return y == x; }));
        if (isCube && near(c, 0.044715))
          return std::make_pair(x, Activation::GeluTanh);
      }
    }
    return std::nullopt;
  }

  void fuseActivations(func::FuncOp func) {
    forEach<GeluOp>(func, [&](GeluOp g) {
      OpBuilder b(g);
      replace(g, b.create<ActivationOp>(g.getLoc(), g.getInput(),
                                        g.getTanh() ? Activation::GeluTanh
                                                    : Activation::Gelu));
    });
    forEach<MulOp>(func, [&](MulOp mul) {
      if (!mul->getBlock())
        return;
      OpBuilder b(mul);
      if (auto g = matchGelu(mul)) {
        replace(mul, b.create<ActivationOp>(mul.getLoc(), g->first, g->second));
        return;
      }
      if (Value x = matchSilu(mul)) {
        replace(mul, b.create<ActivationOp>(mul.getLoc(), x, Activation::Silu));
        return;
      }
    });
    // act(gate) * up, with a single-use activation.
    forEach<MulOp>(func, [&](MulOp mul) {
      auto ops = operandsWhere(
          mul, [](Value a) { return def<ActivationOp>(a) && a.hasOneUse(); });
      if (!ops || ops->first.getType() != ops->second.getType())
        return;
      auto act = def<ActivationOp>(ops->first);
      OpBuilder b(mul);
      replace(mul, b.create<GatedActivationOp>(mul.getLoc(), act.getInput(),
                                               ops->second, act.getAct()));
    });
  }

  //===--------------------------------------------------------------------===//
  // rotary
  //===--------------------------------------------------------------------===//

  /// rotate_half(x) = concat(-x2, x1) on the last dim; returns x.
  Value matchRotateHalf(Value v) {
    auto cat = def<ConcatOp>(v);
    int64_t rank = typeOf(v).getRank();
    if (!cat || cat.getInputs().size() != 2 ||
        (cat.getAxis() != -1 && cat.getAxis() != rank - 1))
      return nullptr;
    auto neg = def<NegOp>(cat.getInputs()[0]);
    if (!neg)
      return nullptr;
    Value hi = neg.getInput(), lo = cat.getInputs()[1];
    int64_t d = typeOf(v).getShape().back(), half = d / 2;
    // Slice form: x[..., half:] and x[..., :half].
    auto lastDimSlice = [&](Value s, int64_t begin) -> Value {
      auto sl = def<SliceOp>(s);
      if (!sl || typeOf(s).getShape().back() != half)
        return nullptr;
      Attribute st, ax, sp;
      if (!matchPattern(sl.getStarts(), m_Constant(&st)) ||
          !matchPattern(sl.getAxes(), m_Constant(&ax)) ||
          !matchPattern(sl.getSteps(), m_Constant(&sp)))
        return nullptr;
      auto starts = getIntValues(st), axes = getIntValues(ax),
           steps = getIntValues(sp);
      if (!starts || starts->size() != 1 ||
          ((*axes)[0] != -1 && (*axes)[0] != rank - 1) || (*steps)[0] != 1 ||
          ((*starts)[0] != begin && (*starts)[0] != begin - d))
        return nullptr;
      return sl.getInput();
    };
    Value x1 = lastDimSlice(hi, half), x2 = lastDimSlice(lo, 0);
    if (x1 && x1 == x2)
      return x1;
    // Split form: (lo, hi) = split(x).
    auto splitHi = def<SplitOp>(hi);
    if (splitHi && splitHi == def<SplitOp>(lo) &&
        splitHi.getSizes().size() == 2 &&
        cast<OpResult>(hi).getResultNumber() == 1 &&
        cast<OpResult>(lo).getResultNumber() == 0 &&
        (splitHi.getAxis() == -1 || splitHi.getAxis() == rank - 1))
      return splitHi.getInput();
    return nullptr;
  }

  /// A rotary table broadcastable to [B, 1, S, D] as [S, D] or [B, S, D].
  Value normalizeTable(OpBuilder &b, Location loc, Value table, int64_t B,
                       int64_t S, int64_t D) {
    auto shape = typeOf(table).getShape();
    if (shape.size() < 2 || shape[shape.size() - 1] != D ||
        shape[shape.size() - 2] != S)
      return nullptr;
    auto lead = shape.drop_back(2);
    if (llvm::all_of(lead, [](int64_t d) { return d == 1; }))
      return reshape(b, loc, table, {S, D});
    if (lead.size() == 2 && lead[0] == B && lead[1] == 1)
      return reshape(b, loc, table, {B, S, D});
    return nullptr;
  }

  void fuseRotary(func::FuncOp func) {
    forEach<AddOp>(func, [&](AddOp add) {
      auto t = typeOf(add);
      if (t.getRank() != 4 || !isa<FloatType>(t.getElementType()))
        return;
      for (auto [a, c] : {std::make_pair(add.getLhs(), add.getRhs()),
                          std::make_pair(add.getRhs(), add.getLhs())}) {
        // a = x * cos, c = rotate_half(x) * sin.
        auto rot = operandsWhere(def<MulOp>(c), [&](Value r) {
          return matchRotateHalf(r) != nullptr;
        });
        if (!rot)
          continue;
        Value x = matchRotateHalf(rot->first), sin = rot->second;
        auto xc = operandsWhere(def<MulOp>(a), [&](Value v) { return v == x; });
        if (!xc || typeOf(x).getShape() != t.getShape())
          continue;
        Value cos = xc->second;
        int64_t B = t.getDimSize(0), H = t.getDimSize(1), S = t.getDimSize(2),
                D = t.getDimSize(3);
        OpBuilder b(add);
        Value cosT = normalizeTable(b, add.getLoc(), cos, B, S, D);
        Value sinT = normalizeTable(b, add.getLoc(), sin, B, S, D);
        if (!cosT || !sinT)
          continue;
        freeze(cos);
        freeze(sin);
        Value packed = packHeads(b, add.getLoc(), x);
        auto r = b.create<RotaryOp>(add.getLoc(), packed, cosT, sinT,
                                    b.getI64IntegerAttr(D), UnitAttr());
        replace(add, unpackHeads(b, add.getLoc(), r, H));
        return;
      }
    });
  }

  //===--------------------------------------------------------------------===//
  // attention
  //===--------------------------------------------------------------------===//

  /// Looks through GQA head repetition: reshape(expand(unsqueeze(k, 2))).
  Value stripRepeat(Value v) {
    auto rs = def<ReshapeOp>(v);
    if (!rs)
      return v;
    auto ex = def<ExpandOp>(rs.getInput());
    auto un = ex ? def<UnsqueezeOp>(ex.getInput()) : UnsqueezeOp();
    if (!un || un.getAxes() != ArrayRef<int64_t>{2} ||
        typeOf(un.getInput()).getRank() != 4)
      return v;
    auto kv = typeOf(un.getInput()).getShape(), full = typeOf(v).getShape();
    if (kv[0] != full[0] || kv[2] != full[2] || kv[3] != full[3] ||
        full[1] % kv[1])
      return v;
    return un.getInput();
  }

  /// True when `mask` (broadcast to [.., S, S]) keeps exactly j <= i:
  /// `keepValue` marks a kept position (boolean masks) or, when null, an
  /// additive mask is 0 where kept and very negative elsewhere.
  bool isCausal(Value mask, std::optional<bool> keepValue) {
    // Layers share one mask: decide once per value.
    auto key = std::make_pair(mask.getAsOpaquePointer(), keepValue.value_or(2));
    if (auto it = causalCache.find(key); it != causalCache.end())
      return it->second;
    return causalCache[key] = checkCausal(mask, keepValue);
  }
  std::map<std::pair<void *, int>, bool> causalCache;

  bool checkCausal(Value mask, std::optional<bool> keepValue) {
    Attribute attr;
    if (!matchPattern(mask, m_Constant(&attr)))
      return false;
    auto values = getFloatValues(attr);
    auto shape = typeOf(mask).getShape();
    if (!values || shape.size() < 2 || shape.back() != shape[shape.size() - 2])
      return false;
    int64_t S = shape.back();
    for (size_t k = 0; k < values->size(); ++k) {
      int64_t i = (k / S) % S, j = k % S;
      double v = (*values)[k];
      bool kept = keepValue ? (v != 0) == *keepValue : v == 0.0;
      bool masked = keepValue ? !kept : v <= -1e9;
      if ((j <= i && !kept) || (j > i && !masked))
        return false;
    }
    return true;
  }

  void fuseAttention(func::FuncOp func) {
    forEach<MatMulOp>(func, [&](MatMulOp pv) {
      auto sm = def<SoftmaxOp>(pv.getLhs());
      auto outT = typeOf(pv);
      if (!sm || outT.getRank() != 4 ||
          (sm.getAxis() != -1 && sm.getAxis() != 3))
        return;
      double scale = 1.0;
      Value scores = sm.getInput(), mask;
      bool causal = false;
      // Mask: additive, or where(cond, scores, -inf) / where(cond, -inf,
      // scores).
      if (auto w = def<WhereOp>(scores)) {
        auto fillX = splatValue(w.getX()), fillY = splatValue(w.getY());
        if (fillY && *fillY <= -1e9 && isCausal(w.getCondition(), true)) {
          scores = w.getX();
        } else if (fillX && *fillX <= -1e9 &&
                   isCausal(w.getCondition(), false)) {
          scores = w.getY();
        } else {
          return;
        }
        causal = true;
      } else if (auto add = def<AddOp>(scores)) {
        auto ops = operandsWhere(add, [](Value v) {
          return def<MatMulOp>(v) || def<MulOp>(v) || def<DivOp>(v);
        });
        if (!ops)
          return;
        scores = ops->first;
        if (isCausal(ops->second, std::nullopt))
          causal = true;
        else
          mask = ops->second;
      }
      // Scale after QK^T.
      SmallVector<Value> factors;
      collectFactors(scores, factors, scale);
      if (factors.size() != 1)
        return;
      auto qk = def<MatMulOp>(factors[0]);
      if (!qk)
        return;
      // Scale on q and on k (or k^T), as decomposed SDPA emits.
      Value q = qk.getLhs(), kt = qk.getRhs();
      SmallVector<Value> qf, kf;
      collectFactors(q, qf, scale);
      if (qf.size() != 1)
        return;
      q = qf[0];
      collectFactors(kt, kf, scale);
      if (kf.size() != 1 || typeOf(kf[0]).getRank() != 4)
        return;
      OpBuilder b(pv);
      Location loc = pv.getLoc();
      // k = kt transposed in its last two dims; exporters may have merged
      // that transpose with the head transpose ([0, 2, 3, 1]).
      Value k;
      SmallVector<int64_t> swap{0, 1, 3, 2};
      if (auto tr = def<TransposeOp>(kf[0])) {
        SmallVector<Value> inner;
        collectFactors(tr.getInput(), inner, scale);
        if (inner.size() != 1)
          return;
        SmallVector<int64_t> perm;
        for (int64_t d : swap)
          perm.push_back(tr.getPerm()[d]);
        k = perm == SmallVector<int64_t>{0, 1, 2, 3}
                ? inner[0]
                : b.create<TransposeOp>(loc, inner[0],
                                        b.getDenseI64ArrayAttr(perm));
      } else {
        k = b.create<TransposeOp>(loc, kf[0], b.getDenseI64ArrayAttr(swap));
      }
      k = stripRepeat(k);
      Value v = stripRepeat(pv.getRhs());
      auto qT = typeOf(q), kT = typeOf(k), vT = typeOf(v);
      if (qT.getRank() != 4 || kT.getShape() != vT.getShape() ||
          qT.getShape() != outT.getShape() ||
          kT.getDimSize(3) != qT.getDimSize(3))
        return;
      int64_t H = qT.getDimSize(1), Hkv = kT.getDimSize(1);
      if (H % Hkv)
        return;
      if (mask)
        freeze(mask);
      auto attn = b.create<AttentionOp>(
          loc, packHeads(b, loc, q), packHeads(b, loc, k), packHeads(b, loc, v),
          mask, b.getI64IntegerAttr(H), b.getI64IntegerAttr(Hkv),
          b.getF32FloatAttr(scale), causal ? b.getUnitAttr() : UnitAttr(),
          b.getI64IntegerAttr(0));
      replace(pv, unpackHeads(b, loc, attn, H));
    });
  }

  //===--------------------------------------------------------------------===//
  // cross_entropy
  //===--------------------------------------------------------------------===//

  Value throughReshapes(Value v) {
    while (auto rs = def<ReshapeOp>(v))
      v = rs.getInput();
    return v;
  }

  /// slice(pad(labels, end of dim 1 by one, ignore), 1:, dim 1) -> labels.
  Value matchLabelShift(Value v, int64_t ignore) {
    auto sl = def<SliceOp>(v);
    auto pad = sl ? def<PadOp>(sl.getInput()) : PadOp();
    if (!pad || typeOf(pad.getInput()).getRank() != 2)
      return nullptr;
    Attribute p, st, en, ax, sp;
    if (!matchPattern(pad.getPads(), m_Constant(&p)) ||
        !matchPattern(sl.getStarts(), m_Constant(&st)) ||
        !matchPattern(sl.getAxes(), m_Constant(&ax)) ||
        !matchPattern(sl.getSteps(), m_Constant(&sp)))
      return nullptr;
    auto pads = getIntValues(p), starts = getIntValues(st),
         axes = getIntValues(ax), steps = getIntValues(sp);
    if (*pads != SmallVector<int64_t>{0, 0, 0, 1} || starts->size() != 1 ||
        (*starts)[0] != 1 || ((*axes)[0] != 1 && (*axes)[0] != -1) ||
        (*steps)[0] != 1 ||
        !near(splatValue(pad.getValue()), double(ignore), 0) ||
        typeOf(v).getShape() != typeOf(pad.getInput()).getShape())
      return nullptr;
    return pad.getInput();
  }

  //===--------------------------------------------------------------------===//
  // Slices of activations
  //===--------------------------------------------------------------------===//

  /// A Slice of a float tensor with constant bounds and step 1 on each of
  /// its axes becomes a Split per axis, keeping the middle part: the
  /// runtime has SPLIT, and its gradient (a Concat with zeros for the
  /// parts nothing reads) is exact. Other steps stay Slices (reversals and
  /// strides have no gradient rule, and the training step says so).
  void splitSlices(func::FuncOp func) {
    forEach<SliceOp>(func, [&](SliceOp s) {
      auto type = typeOf(s.getInput());
      if (!isa<FloatType>(type.getElementType()))
        return;
      Attribute st, en, ax, sp;
      if (!matchPattern(s.getStarts(), m_Constant(&st)) ||
          !matchPattern(s.getEnds(), m_Constant(&en)) ||
          !matchPattern(s.getAxes(), m_Constant(&ax)) ||
          !matchPattern(s.getSteps(), m_Constant(&sp)))
        return;
      auto starts = getIntValues(st), ends = getIntValues(en),
           axes = getIntValues(ax), steps = getIntValues(sp);
      if (!starts || !ends || !axes || !steps ||
          starts->size() != axes->size() || ends->size() != axes->size() ||
          steps->size() != axes->size())
        return;
      if (llvm::any_of(*steps, [](int64_t step) { return step != 1; })) {
        LLVM_DEBUG(llvm::dbgs() << "mt-fuse-ops: slice at " << s.getLoc()
                                << " has a step other than 1\n");
        return;
      }
      OpBuilder b(s);
      if (typeOf(s).getNumElements() == 0) {
        // Nothing (the pass-through part of a rotary that covers the whole
        // head): a constant, so that no gradient flows through it.
        s.getResult().replaceAllUsesWith(b.create<ConstantOp>(
            s.getLoc(), DenseElementsAttr::get(typeOf(s), ArrayRef<Attribute>{})));
        ++numSlicesSplit;
        return;
      }
      Value v = s.getInput();
      for (size_t i = 0; i < axes->size(); ++i) {
        auto t = typeOf(v);
        int64_t rank = t.getRank(), axis = (*axes)[i];
        if (axis < 0)
          axis += rank;
        if (axis < 0 || axis >= rank)
          return;
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
      if (v.getType() != s.getType())
        return; // an empty slice, or bounds the shapes disagree with
      s.getResult().replaceAllUsesWith(v);
      ++numSlicesSplit;
    });
    // A Concat of an empty part is the Concat of the others.
    forEach<ConcatOp>(func, [&](ConcatOp c) {
      SmallVector<Value> kept;
      for (Value v : c.getInputs())
        if (typeOf(v).getNumElements() != 0)
          kept.push_back(v);
      if (kept.size() == c.getInputs().size() || kept.empty())
        return;
      OpBuilder b(c);
      Value with = kept.size() == 1
                       ? kept[0]
                       : b.create<ConcatOp>(c.getLoc(), kept, c.getAxisAttr())
                             .getResult();
      c.getResult().replaceAllUsesWith(with);
    });
  }

  void fuseCrossEntropy(func::FuncOp func) {
    forEach<SoftmaxCrossEntropyLossOp>(func, [&](SoftmaxCrossEntropyLossOp ce) {
      if (ce.getReduction() != "mean" || typeOf(ce.getScores()).getRank() != 2)
        return;
      int64_t ignore = ce.getIgnoreIndex() ? *ce.getIgnoreIndex() : -100;
      Value logits = throughReshapes(ce.getScores());
      Value labels = throughReshapes(ce.getLabels());
      auto lt = typeOf(logits);
      if (lt.getShape().back() != typeOf(ce.getScores()).getShape().back() ||
          typeOf(labels).getShape() != lt.getShape().drop_back()) {
        logits = ce.getScores();
        labels = ce.getLabels();
      }
      bool shift = false;
      if (Value raw = matchLabelShift(labels, ignore)) {
        labels = raw;
        shift = true;
      }
      OpBuilder b(ce);
      auto fused = b.create<CrossEntropyOp>(
          ce.getLoc(), logits, labels, b.getI64IntegerAttr(ignore),
          shift ? b.getUnitAttr() : UnitAttr());
      Value loss = fused;
      if (typeOf(ce).getElementType() != typeOf(fused).getElementType())
        loss = b.create<CastOp>(ce.getLoc(), fused,
                                TypeAttr::get(typeOf(ce).getElementType()));
      replace(ce, loss);
      setRole(labels, shift ? InputRole::Labels : InputRole::Targets);
    });
  }
};

} // namespace
