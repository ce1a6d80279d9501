//===- FuseOps.cpp - rewrite exporter patterns into fused ops -------------===//
//
// One rewrite pattern per exporter spelling of a fused op, grouped in
// families (linear, embedding, norms, activations, rotary, attention,
// cross-entropy) that run in a fixed order, each pattern over the ops of its
// root kind. A match replaces its root and erases what it left dead. Fused ops
// that work on heads take packed activations [B, S, H * D]; where the
// surrounding graph is in [B, H, S, D], the rewrite inserts the
// Reshape/Transpose pair, and inverse pairs fold away.
//
//===----------------------------------------------------------------------===//
#include "dialects/Train/IR/ConstEval.h"
#include "dialects/Train/IR/ElementAt.h"
#include "dialects/Train/IR/ShapeInference.h"
#include "dialects/Train/Transforms/Passes.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Debug.h"

#include <array>
#include <tuple>

#include <cmath>
#include <map>
#include <set>

#define DEBUG_TYPE "mt-fuse-ops"

namespace mt::train {
#define GEN_PASS_DEF_FUSEOPSPASS
#define GEN_PASS_DEF_EXPLAINFUSIONPASS
#include "dialects/Train/Transforms/Passes.h.inc"
} // namespace mt::train

using namespace mlir;
using namespace mt::train;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

template <typename OpTy> OpTy def(Value v) {
  return v ? v.getDefiningOp<OpTy>() : OpTy();
}

/// The value of a constant, or of a frozen weight that carries its value
/// (the folded masks of optimized exports).
bool constantValue(Value v, Attribute &attr) {
  if (!v)
    return false;
  if (matchPattern(v, m_Constant(&attr)))
    return true;
  auto load = v.getDefiningOp<ParamLoadOp>();
  ParamOp w = load ? load.getParamOp() : ParamOp();
  if (!w || w.getTrainable() || !w.getValue())
    return false;
  attr = *w.getValue();
  return true;
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

bool isWeight(Value v) { return def<ParamLoadOp>(v) != nullptr; }

/// Marks a weight that a fused op defines as non-trainable (mask, tables).
void freeze(Value v) {
  if (auto load = def<ParamLoadOp>(v))
    if (ParamOp w = load.getParamOp())
      w.removeTrainableAttr();
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

/// What the patterns share: the matchers of exporter idioms, the packing of
/// heads, and the verdict on each mask (layers share one).
struct Fusion {
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

  /// linear(x, w) + b with a 1-D weight b of the output size: the add goes.
  void absorbBias(PatternRewriter &b, LinearOp lin) {
    if (!lin->hasOneUse())
      return;
    auto add = dyn_cast<AddOp>(*lin->getUsers().begin());
    auto ops =
        operandsWhere(add, [&](Value v) { return v == lin.getResult(); });
    if (!ops || !isWeight(ops->second) ||
        typeOf(ops->second).getShape() !=
            ArrayRef<int64_t>{typeOf(lin).getShape().back()})
      return;
    b.modifyOpInPlace(lin, [&] { lin.getBiasMutable().assign(ops->second); });
    b.replaceOp(add, lin.getResult());
  }

  void setRole(Value v, InputRole role) {
    auto arg = dyn_cast<BlockArgument>(v);
    if (!arg)
      return;
    if (auto f = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()))
      f.setArgAttr(arg.getArgNumber(), "train.role",
                   InputRoleAttr::get(f.getContext(), role));
  }

  /// The same value, or one an equal op computes from the same operands
  /// (a layer norm's x - mean(x) written twice, before CSE merges them).
  static bool sameValue(Value a, Value b) {
    if (a == b)
      return true;
    Operation *x = a.getDefiningOp(), *y = b.getDefiningOp();
    return x && y && isPure(x) &&
           OperationEquivalence::isEquivalentTo(
               x, y, OperationEquivalence::IgnoreLocations);
  }

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
      if (!sameValue(pow.getLhs(), x) ||
          !near(splatValue(pow.getRhs()), 2.0, 0))
        return std::nullopt;
    } else if (auto m = def<MulOp>(sq)) {
      if (!sameValue(m.getLhs(), x) || !sameValue(m.getRhs(), x))
        return std::nullopt;
    } else {
      return std::nullopt;
    }
    return std::make_pair(x, eps);
  }

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
        if (!near(s, std::sqrt(2.0 / M_PI)))
          continue;
        // Bloom's spelling: sqrt(2 / pi) x (1 + 0.044715 x x).
        if (f.size() == 2 && (f[0] == x || f[1] == x)) {
          auto square =
              operandsWhere(def<AddOp>(f[0] == x ? f[1] : f[0]), [](Value c) {
                return near(splatValue(c), 1.0, 0);
              });
          SmallVector<Value> xx;
          double c = 1.0;
          if (square)
            collectFactors(square->second, xx, c);
          if (xx.size() == 2 && xx[0] == x && xx[1] == x && near(c, 0.044715))
            return std::make_pair(x, Activation::GeluTanh);
        }
        if (f.size() != 1)
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

  /// Whether `mask` (broadcast to [.., S, S]) keeps exactly the keys
  /// j <= i, within a window (i - j < W) or not: the window (0: none), or
  /// nullopt. `keepValue` marks a kept position (boolean masks) or, when
  /// null, an additive mask is 0 where kept and very negative elsewhere.
  std::optional<int64_t> causalWindow(Value mask,
                                      std::optional<bool> keepValue) {
    // Layers share one mask: decide once per value.
    auto key = std::make_pair(mask.getAsOpaquePointer(), keepValue.value_or(2));
    if (auto it = causalCache.find(key); it != causalCache.end())
      return it->second;
    return causalCache[key] = checkCausal(mask, keepValue);
  }
  std::map<std::pair<void *, int>, std::optional<int64_t>> causalCache;

  /// A constant mask is read whole. One the ops build (too large to fold:
  /// S x S elements) is read element by element through those ops
  /// (elementAt), at samples that cover its diagonal and the window's edge
  /// in rows spread over it, its corners, and its first and last batch.
  std::optional<int64_t> checkCausal(Value mask,
                                     std::optional<bool> keepValue) {
    auto type = typeOf(mask);
    if (!type.hasStaticShape() || type.getRank() < 2)
      return std::nullopt;
    ArrayRef<int64_t> shape = type.getShape();
    int64_t S = shape.back();
    if (S < 1 || shape[shape.size() - 2] != S)
      return std::nullopt;
    Attribute attr;
    std::optional<SmallVector<double>> values;
    if (constantValue(mask, attr)) {
      values = getFloatValues(attr);
      if (!values || int64_t(values->size()) != type.getNumElements())
        return std::nullopt;
    }
    SmallVector<int64_t> lead(shape.drop_back(2));
    auto element = [&](ArrayRef<int64_t> at, int64_t i,
                       int64_t j) -> std::optional<double> {
      SmallVector<int64_t> index(at);
      index.append({i, j});
      if (!values)
        return elementAt(mask, index);
      int64_t flat = 0;
      for (size_t d = 0; d < shape.size(); ++d)
        flat = flat * shape[d] + index[d];
      return (*values)[size_t(flat)];
    };
    auto kept = [&](double v) {
      return keepValue ? (v != 0) == *keepValue : v == 0.0;
    };
    auto masked = [&](double v) {
      return keepValue ? (v != 0) != *keepValue : v <= -1e9;
    };
    // The window from the last row: its first kept key (the kept keys of a
    // row are one run ending at the diagonal; the checks below say whether
    // they are).
    SmallVector<int64_t> first(lead.size(), 0);
    int64_t lo = 0, hi = S - 1;
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      auto v = element(first, S - 1, mid);
      if (!v)
        return std::nullopt;
      if (kept(*v))
        hi = mid;
      else
        lo = mid + 1;
    }
    int64_t window = lo == 0 ? 0 : S - lo;
    auto check = [&](ArrayRef<int64_t> at, int64_t i, int64_t j) {
      auto v = element(at, i, j);
      if (!v)
        return false;
      bool keep = j <= i && (window == 0 || i - j < window);
      return keep ? kept(*v) : masked(*v);
    };
    if (values) {
      // Every element of every batch and head.
      int64_t leads = type.getNumElements() / (S * S);
      for (int64_t l = 0; l < leads; ++l) {
        SmallVector<int64_t> at(lead.size());
        for (int64_t rest = l, d = int64_t(lead.size()) - 1; d >= 0; --d) {
          at[size_t(d)] = rest % lead[size_t(d)];
          rest /= lead[size_t(d)];
        }
        for (int64_t i = 0; i < S; ++i)
          for (int64_t j = 0; j < S; ++j)
            if (!check(at, i, j))
              return std::nullopt;
      }
      return window;
    }
    SmallVector<int64_t> last(lead);
    for (int64_t &d : last)
      d -= 1;
    std::set<int64_t> rows;
    for (int64_t k = 0; k < 4; ++k)
      rows.insert({k, S - 1 - k});
    for (int64_t k = 1; k < 16; ++k)
      rows.insert(k * S / 16);
    if (window)
      rows.insert({window - 1, window, window + 1});
    for (ArrayRef<int64_t> at :
         {ArrayRef<int64_t>(first), ArrayRef<int64_t>(last)})
      for (int64_t i : rows) {
        if (i < 0 || i >= S)
          continue;
        std::set<int64_t> columns{0, 1, S - 2, S - 1};
        for (int64_t d = -2; d <= 2; ++d)
          columns.insert(i + d);
        if (window)
          for (int64_t d = -1; d <= 1; ++d)
            columns.insert(i - window + d);
        for (int64_t k = 1; k < 8; ++k)
          columns.insert(k * S / 8);
        for (int64_t j : columns)
          if (j >= 0 && j < S && !check(at, i, j))
            return std::nullopt;
      }
    return window;
  }

  /// where(is_nan(p), 0, p) -> p: PyTorch's safe softmax (sdpa), which
  /// gives 0 instead of NaN on a row whose every key is masked with -inf.
  /// The fused attention gives 0 on such a row too.
  Value throughSafeSoftmax(Value v) {
    auto w = def<WhereOp>(v);
    if (!w || !near(splatValue(w.getX()), 0.0, 0))
      return v;
    auto isNaN = def<IsNaNOp>(w.getCondition());
    if (!isNaN || isNaN.getInput() != w.getY() ||
        w.getY().getType() != v.getType())
      return v;
    return w.getY();
  }

  /// x^T in its last two dims spelled over flattened leading dims, as
  /// PyTorch decomposes sdpa: reshape(transpose(reshape(x, [B * H, S, D]),
  /// [0, 2, 1]), [B, H, D, S]). Returns what the inner reshape flattened
  /// (x, or its GQA repetition [B, Hkv, n, S, D]), whose elements are x's
  /// in [B, H, S, D] order.
  Value matchFlatTranspose(Value v) {
    auto outer = def<ReshapeOp>(v);
    auto tr = outer ? def<TransposeOp>(outer.getInput()) : TransposeOp();
    auto inner = tr ? def<ReshapeOp>(tr.getInput()) : ReshapeOp();
    if (!inner || tr.getPerm() != ArrayRef<int64_t>{0, 2, 1})
      return nullptr;
    auto out = typeOf(v).getShape(), flat = typeOf(inner).getShape();
    if (out.size() != 4 || flat[0] != out[0] * out[1] || flat[1] != out[3] ||
        flat[2] != out[2])
      return nullptr;
    return inner.getInput();
  }

  /// True when `v` is a constant without infinities or NaNs.
  bool isFinite(Value v) {
    Attribute attr;
    if (!constantValue(v, attr))
      return false;
    auto values = getFloatValues(attr);
    return values &&
           llvm::all_of(*values, [](double x) { return std::isfinite(x); });
  }

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

  /// The constant starts, ends, axes and steps of a slice of one axis.
  static std::optional<std::array<int64_t, 4>> oneAxisSlice(SliceOp sl) {
    Attribute st, en, ax, sp;
    if (!sl || !matchPattern(sl.getStarts(), m_Constant(&st)) ||
        !matchPattern(sl.getEnds(), m_Constant(&en)) ||
        !matchPattern(sl.getAxes(), m_Constant(&ax)) ||
        !matchPattern(sl.getSteps(), m_Constant(&sp)))
      return std::nullopt;
    auto starts = getIntValues(st), ends = getIntValues(en),
         axes = getIntValues(ax), steps = getIntValues(sp);
    if (!starts || !ends || !axes || !steps || starts->size() != 1 ||
        ends->size() != 1 || axes->size() != 1 || steps->size() != 1)
      return std::nullopt;
    int64_t rank = typeOf(sl.getInput()).getRank(), axis = (*axes)[0];
    return std::array<int64_t, 4>{(*starts)[0], (*ends)[0],
                                  axis < 0 ? axis + rank : axis, (*steps)[0]};
  }

  /// The classic shift written out (nanoGPT's and most hand-written LMs'
  /// `cross_entropy(logits[:, :-1], labels[:, 1:])`): logits [B, S, V]
  /// without their last position and labels [B, S] without their first
  /// are the shifted cross-entropy of the whole of both (row t predicts
  /// label t + 1, the last row counts nothing): the raw logits and labels,
  /// or none.
  std::optional<std::pair<Value, Value>> matchDroppedEnds(Value logits,
                                                          Value labels) {
    auto lab = def<SliceOp>(labels);
    auto ls = oneAxisSlice(lab);
    if (!ls || typeOf(lab.getInput()).getRank() != 2)
      return std::nullopt;
    int64_t seq = typeOf(lab.getInput()).getDimSize(1);
    auto [start, end, axis, step] = *ls;
    if (start != 1 || end < seq || axis != 1 || step != 1)
      return std::nullopt;
    auto lg = def<SliceOp>(logits);
    auto gs = oneAxisSlice(lg);
    if (!gs || typeOf(lg.getInput()).getRank() != 3 ||
        typeOf(lg.getInput()).getShape().take_front(2) !=
            typeOf(lab.getInput()).getShape())
      return std::nullopt;
    auto [gStart, gEnd, gAxis, gStep] = *gs;
    if (gStart != 0 || (gEnd != seq - 1 && gEnd != -1) || gAxis != 1 ||
        gStep != 1)
      return std::nullopt;
    return std::make_pair(lg.getInput(), lab.getInput());
  }

  /// Whether integer input `v` is read as the classes of a loss: what it
  /// becomes through slices, reshapes, casts and masking (the ignored
  /// labels zeroed) is a GatherElements' indices into the log-probabilities
  /// (`nll_loss`, `log_probs.gather(-1, labels)`) or a loss's labels. An
  /// attention mask or position ids never are.
  static bool readAsClasses(Value v) {
    SmallVector<Value> work{v};
    DenseSet<Value> seen;
    while (!work.empty()) {
      Value x = work.pop_back_val();
      if (!seen.insert(x).second)
        continue;
      for (OpOperand &use : x.getUses()) {
        Operation *user = use.getOwner();
        if (auto g = dyn_cast<GatherElementsOp>(user);
            g && use.get() == g.getIndices())
          return true;
        if (isa<SoftmaxCrossEntropyLossOp, CrossEntropyOp>(user) &&
            use.getOperandNumber() == 1)
          return true;
        if (isa<SliceOp, ReshapeOp, FlattenOp, SqueezeOp, UnsqueezeOp, CastOp,
                PadOp, MulOp, WhereOp, IdentityOp>(user))
          work.append(user->result_begin(), user->result_end());
      }
    }
    return false;
  }

  /// Whether the graph shifts labels input `v` itself: it reads it from
  /// position 1 on (`labels[:, 1:]`), or padded at the end and then so
  /// (Hugging Face's shift).
  static bool shiftedInGraph(Value v) {
    int64_t seq = typeOf(v).getDimSize(1);
    auto fromSecond = [&](Operation *user) {
      auto ends = oneAxisSlice(dyn_cast<SliceOp>(user));
      return ends && (*ends)[0] == 1 && (*ends)[1] >= seq && (*ends)[2] == 1 &&
             (*ends)[3] == 1;
    };
    for (Operation *user : v.getUsers()) {
      if (fromSecond(user))
        return true;
      if (auto pad = dyn_cast<PadOp>(user)) {
        std::optional<PadLayout> layout = constantPad(pad);
        if (layout && layout->begins == ArrayRef<int64_t>{0, 0} &&
            layout->ends == ArrayRef<int64_t>{0, 1})
          for (Operation *next : pad->getUsers()) {
            auto ends = oneAxisSlice(dyn_cast<SliceOp>(next));
            if (ends && (*ends)[0] == 1 && (*ends)[2] == 1 && (*ends)[3] == 1)
              return true;
          }
      }
    }
    return false;
  }

  /// The roles fusion left unset, from how the graph reads each input
  /// rather than from a fused pattern (so that --fuse none feeds a graph
  /// the same data): an integer input of the tokens' shape that a loss
  /// reads as its classes is the labels when the graph shifts it itself,
  /// else the targets (the next tokens, read at the logits' positions).
  void assignDataRoles(func::FuncOp func) {
    std::optional<SmallVector<int64_t>> tokens;
    for (BlockArgument arg : func.getArguments())
      if (auto role = func.getArgAttrOfType<InputRoleAttr>(arg.getArgNumber(),
                                                           "train.role");
          role && role.getValue() == InputRole::Tokens)
        tokens = llvm::to_vector(typeOf(arg).getShape());
    if (!tokens || tokens->size() != 2)
      return;
    for (BlockArgument arg : func.getArguments()) {
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (func.getArgAttr(arg.getArgNumber(), "train.role") || !type ||
          !type.getElementType().isInteger(64) ||
          type.getShape() != ArrayRef<int64_t>(*tokens) || !readAsClasses(arg))
        continue;
      setRole(arg,
              shiftedInGraph(arg) ? InputRole::Labels : InputRole::Targets);
    }
  }
};

//===----------------------------------------------------------------------===//
// The patterns, one per fusion family. Each matches from the op that ends
// the exporter's pattern, says why when it does not match
// (notifyMatchFailure: shown by --mt-fuse-ops='explain=true', mtc
// --explain-fusion, and -debug-only=mt-fuse-ops where LLVM has debug
// output), and replaces the result; what the match leaves unused is erased
// by the fold pass that follows.
//===----------------------------------------------------------------------===//

template <typename OpTy> struct FusionPattern : OpRewritePattern<OpTy> {
  FusionPattern(MLIRContext *ctx, Fusion &f)
      : OpRewritePattern<OpTy>(ctx), f(f) {}
  Fusion &f;
};

/// MatMul on a transposed weight (out_in) or a pre-transposed one (in_out),
/// and a following Add of a 1-D weight as its bias.
struct LinearFromMatMul : FusionPattern<MatMulOp> {
  using FusionPattern::FusionPattern;
  LogicalResult matchAndRewrite(MatMulOp mm,
                                PatternRewriter &b) const override {
    Value rhs = mm.getRhs(), w;
    WeightLayout layout;
    if (typeOf(rhs).getRank() != 2 || typeOf(mm.getLhs()).getRank() < 2)
      return b.notifyMatchFailure(mm, "not [..., K] x [K, N]");
    if (auto tr = def<TransposeOp>(rhs); tr && isWeight(tr.getInput())) {
      w = tr.getInput();
      layout = WeightLayout::OutIn;
    } else if (isWeight(rhs)) {
      w = rhs;
      layout = WeightLayout::InOut;
    } else {
      return b.notifyMatchFailure(mm, "the right operand is not a weight or "
                                      "a weight's transpose");
    }
    auto lin = b.create<LinearOp>(mm.getLoc(), mm.getLhs(), w, Value(), layout);
    b.replaceOp(mm, lin);
    f.absorbBias(b, lin);
    return success();
  }
};

/// A mixture of experts' batched_mm spelling: each row's expert weight
/// gathered (GatherND of [E, O, K] by ids [N, 1], rows [N, O, K]) and
/// multiplied with the row as a column ([N, K, 1]), or the row ([N, 1, K])
/// with the gathered [E, K, O] weight. The expert linear reads the weight
/// in place: memory of the rows, not of N copies of expert matrices.
struct ExpertLinearFromGatherND : FusionPattern<MatMulOp> {
  using FusionPattern::FusionPattern;
  LogicalResult matchAndRewrite(MatMulOp mm,
                                PatternRewriter &b) const override {
    auto lhsGather = def<GatherNDOp>(mm.getLhs()),
         rhsGather = def<GatherNDOp>(mm.getRhs());
    GatherNDOp gather = lhsGather ? lhsGather : rhsGather;
    if (!gather)
      return b.notifyMatchFailure(mm, "neither operand is a GatherND");
    bool outIn = gather == lhsGather;
    auto w = typeOf(gather.getData()), idx = typeOf(gather.getIndices());
    if (gather.getBatchDims() != 0 || w.getRank() != 3 || idx.getRank() != 2 ||
        idx.getDimSize(1) != 1)
      return b.notifyMatchFailure(mm, "the GatherND does not take one [E, "
                                      "., .] matrix per row ([N, 1] ids)");
    int64_t n = idx.getDimSize(0);
    // The row: [N, K, 1] (out_in) or [N, 1, K] (in_out) of an [N, K] x.
    Value row = outIn ? mm.getRhs() : mm.getLhs();
    auto rowType = typeOf(row);
    int64_t k = w.getDimSize(outIn ? 2 : 1);
    SmallVector<int64_t> want =
        outIn ? SmallVector<int64_t>{n, k, 1} : SmallVector<int64_t>{n, 1, k};
    if (rowType.getShape() != ArrayRef<int64_t>(want))
      return b.notifyMatchFailure(mm, "the other operand is not one row per "
                                      "gathered matrix");
    Location l = mm.getLoc();
    Value x = f.reshape(b, l, row, {n, k});
    Value ids = f.reshape(b, l, gather.getIndices(), {n});
    auto lin = b.create<ExpertLinearOp>(l, x, ids, gather.getData(),
                                        outIn ? WeightLayout::OutIn
                                              : WeightLayout::InOut);
    int64_t o = typeOf(lin.getResult()).getDimSize(1);
    b.replaceOp(mm, f.reshape(b, l, lin,
                              outIn ? SmallVector<int64_t>{n, o, 1}
                                    : SmallVector<int64_t>{n, 1, o}));
    return success();
  }
};

/// Gemm without transA or scaling, on a weight (and a 1-D bias weight).
struct LinearFromGemm : FusionPattern<GemmOp> {
  using FusionPattern::FusionPattern;
  LogicalResult matchAndRewrite(GemmOp g, PatternRewriter &b) const override {
    if (g.getTransA() || g.getAlpha().convertToDouble() != 1.0 ||
        g.getBeta().convertToDouble() != 1.0)
      return b.notifyMatchFailure(g, "transA, alpha or beta is set");
    if (!isWeight(g.getB()))
      return b.notifyMatchFailure(g, "B is not a weight");
    Value bias = g.getC();
    if (bias && (!isWeight(bias) || typeOf(bias).getRank() != 1))
      return b.notifyMatchFailure(g, "C is not a 1-D weight");
    auto lin = b.create<LinearOp>(g.getLoc(), g.getA(), g.getB(), bias,
                                  g.getTransB() ? WeightLayout::OutIn
                                                : WeightLayout::InOut);
    b.replaceOp(g, lin);
    return success();
  }
};

/// Gather of rows of a 2-D weight; its indices are the tokens.
struct EmbeddingFromGather : FusionPattern<GatherOp> {
  using FusionPattern::FusionPattern;
  LogicalResult matchAndRewrite(GatherOp g, PatternRewriter &b) const override {
    if (g.getAxis() != 0 || !isWeight(g.getData()) ||
        typeOf(g.getData()).getRank() != 2)
      return b.notifyMatchFailure(g, "not rows of a 2-D weight");
    f.setRole(g.getIndices(), InputRole::Tokens);
    // The row torch's nn.Embedding(padding_idx=p) never trains, as the
    // importer read it from the exporter's metadata.
    b.replaceOp(
        g, b.create<EmbeddingOp>(g.getLoc(), g.getData(), g.getIndices(),
                                 g->getAttrOfType<IntegerAttr>(kPaddingIdx)));
    return success();
  }
};

/// w * (x * rsqrt(mean(x^2) + eps)) in its exported forms, also (1 + w);
/// and the layer norm spelled the same way over the centred c = X -
/// mean(X) (Cohere's), with the bias its one use adds when there is one.
struct RmsNormFromMul : FusionPattern<MulOp> {
  using FusionPattern::FusionPattern;
  LogicalResult matchAndRewrite(MulOp mul, PatternRewriter &b) const override {
    for (auto [w, core] : {std::make_pair(mul.getLhs(), mul.getRhs()),
                           std::make_pair(mul.getRhs(), mul.getLhs())}) {
      auto m = f.matchRmsCore(core);
      if (!m)
        continue;
      if (Value x = centredInput(m->first)) {
        SmallVector<int64_t, 1> vector{typeOf(x).getShape().back()};
        if (!isWeight(w) || typeOf(w).getShape() != ArrayRef(vector) ||
            typeOf(mul).getShape() != typeOf(x).getShape())
          continue;
        // + b, a 1-D weight, as the product's one use: the norm's bias.
        Operation *out = mul;
        Value bias;
        if (mul->hasOneUse())
          if (auto add = dyn_cast<AddOp>(*mul->user_begin()))
            if (auto ops = operandsWhere(
                    add, [&](Value v) { return v == mul.getResult(); });
                ops && isWeight(ops->second) &&
                typeOf(ops->second).getShape() == ArrayRef(vector)) {
              out = add;
              bias = ops->second;
            }
        b.setInsertionPoint(out);
        auto ln = b.create<LayerNormOp>(mul.getLoc(), x, w, bias,
                                        b.getF32FloatAttr(m->second));
        b.replaceOp(out, ln);
        if (out != mul.getOperation())
          b.eraseOp(mul);
        return success();
      }
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
      auto norm = b.create<RmsNormOp>(mul.getLoc(), m->first, weight,
                                      b.getF32FloatAttr(m->second),
                                      plusOne ? b.getUnitAttr() : UnitAttr());
      b.replaceOp(mul, norm);
      return success();
    }
    return b.notifyMatchFailure(mul, "no x * rsqrt(mean(x^2) + eps) times a "
                                     "1-D weight of the last dim");
  }

  /// X where c = X - mean(X) over the last dim (kept); null otherwise.
  static Value centredInput(Value c) {
    auto sub = def<SubOp>(c);
    auto mean = sub ? def<ReduceMeanOp>(sub.getRhs()) : ReduceMeanOp();
    if (!mean || mean.getInput() != sub.getLhs() || !mean.getKeepdims() ||
        mean.getAxes().size() != 1)
      return nullptr;
    int64_t rank = typeOf(sub.getLhs()).getRank(), axis = mean.getAxes()[0];
    return axis == -1 || axis == rank - 1 ? sub.getLhs() : Value();
  }
};

/// ONNX LayerNormalization over the last dim.
struct LayerNormFromOnnx : FusionPattern<LayerNormalizationOp> {
  using FusionPattern::FusionPattern;
  LogicalResult matchAndRewrite(LayerNormalizationOp ln,
                                PatternRewriter &b) const override {
    auto t = typeOf(ln.getInput());
    int64_t d = t.getShape().back();
    if ((ln.getAxis() != -1 && ln.getAxis() != t.getRank() - 1) ||
        typeOf(ln.getScale()).getShape() != ArrayRef<int64_t>{d} ||
        (ln.getBias() &&
         typeOf(ln.getBias()).getShape() != ArrayRef<int64_t>{d}))
      return b.notifyMatchFailure(ln, "not over the last dim with 1-D scale "
                                      "and bias");
    b.replaceOp(ln,
                b.create<LayerNormOp>(ln.getLoc(), ln.getInput(), ln.getScale(),
                                      ln.getBias(), ln.getEpsilonAttr()));
    return success();
  }
};

struct ActivationFromGelu : FusionPattern<GeluOp> {
  using FusionPattern::FusionPattern;
  LogicalResult matchAndRewrite(GeluOp g, PatternRewriter &b) const override {
    b.replaceOp(g, b.create<ActivationOp>(g.getLoc(), g.getInput(),
                                          g.getTanh() ? Activation::GeluTanh
                                                      : Activation::Gelu));
    return success();
  }
};

/// GELU (erf or tanh form) and SiLU spelled in primitives.
struct ActivationFromMul : FusionPattern<MulOp> {
  using FusionPattern::FusionPattern;
  LogicalResult matchAndRewrite(MulOp mul, PatternRewriter &b) const override {
    if (auto g = f.matchGelu(mul)) {
      b.replaceOp(mul,
                  b.create<ActivationOp>(mul.getLoc(), g->first, g->second));
      return success();
    }
    if (Value x = f.matchSilu(mul)) {
      b.replaceOp(mul,
                  b.create<ActivationOp>(mul.getLoc(), x, Activation::Silu));
      return success();
    }
    return b.notifyMatchFailure(mul, "neither GELU nor x * sigmoid(x)");
  }
};

/// act(gate) * up, with a single-use activation.
struct GatedActivationFromMul : FusionPattern<MulOp> {
  using FusionPattern::FusionPattern;
  LogicalResult matchAndRewrite(MulOp mul, PatternRewriter &b) const override {
    auto ops = operandsWhere(
        mul, [](Value a) { return def<ActivationOp>(a) && a.hasOneUse(); });
    if (!ops || ops->first.getType() != ops->second.getType())
      return b.notifyMatchFailure(mul, "no single-use activation times a "
                                       "tensor of its type");
    auto act = def<ActivationOp>(ops->first);
    b.replaceOp(mul, b.create<GatedActivationOp>(mul.getLoc(), act.getInput(),
                                                 ops->second, act.getAct()));
    return success();
  }
};

/// x * cos + rotate_half(x) * sin on [B, H, S, D].
struct RotaryFromAdd : FusionPattern<AddOp> {
  using FusionPattern::FusionPattern;
  LogicalResult matchAndRewrite(AddOp add, PatternRewriter &b) const override {
    auto t = typeOf(add);
    if (t.getRank() != 4 || !isa<FloatType>(t.getElementType()))
      return b.notifyMatchFailure(add, "not a 4-D float add");
    for (auto [a, c] : {std::make_pair(add.getLhs(), add.getRhs()),
                        std::make_pair(add.getRhs(), add.getLhs())}) {
      // a = x * cos, c = rotate_half(x) * sin.
      auto rot = operandsWhere(def<MulOp>(c), [&](Value r) {
        return f.matchRotateHalf(r) != nullptr;
      });
      if (!rot)
        continue;
      Value x = f.matchRotateHalf(rot->first), sin = rot->second;
      auto xc = operandsWhere(def<MulOp>(a), [&](Value v) { return v == x; });
      if (!xc || typeOf(x).getShape() != t.getShape())
        continue;
      Value cos = xc->second;
      int64_t B = t.getDimSize(0), H = t.getDimSize(1), S = t.getDimSize(2),
              D = t.getDimSize(3);
      Value cosT = f.normalizeTable(b, add.getLoc(), cos, B, S, D);
      Value sinT = f.normalizeTable(b, add.getLoc(), sin, B, S, D);
      if (!cosT || !sinT)
        continue;
      freeze(cos);
      freeze(sin);
      Value packed = f.packHeads(b, add.getLoc(), x);
      auto r = b.create<RotaryOp>(add.getLoc(), packed, cosT, sinT,
                                  b.getI64IntegerAttr(D), UnitAttr());
      b.replaceOp(add, f.unpackHeads(b, add.getLoc(), r, H));
      return success();
    }
    return b.notifyMatchFailure(add, "no x * cos + rotate_half(x) * sin with "
                                     "[S, D] or [B, S, D] tables");
  }
};

//===----------------------------------------------------------------------===//
// Heads merged into the batch ([B * H, S, D], as Bloom's baddbmm and bmm
// attention computes) lifted back to [B, H, S, D], op by op, so that the
// attention pattern sees its 4-D form. Not fusions: the same arithmetic.
//===----------------------------------------------------------------------===//

/// x ([B, H, M, N]) when v is x reshaped to [B * H, M, N]; null otherwise.
Value mergedHeads(Value v) {
  auto rs = def<ReshapeOp>(v);
  if (!rs)
    return nullptr;
  auto in = typeOf(rs.getInput()), out = typeOf(v);
  if (in.getRank() != 4 || out.getRank() != 3 || !in.hasStaticShape() ||
      !out.hasStaticShape() ||
      in.getDimSize(0) * in.getDimSize(1) != out.getDimSize(0) ||
      in.getShape().drop_front(2) != out.getShape().drop_front(1))
    return nullptr;
  return rs.getInput();
}

/// A batched MatMul of two tensors of merged heads: on the heads.
struct LiftMergedMatMul : FusionPattern<MatMulOp> {
  using FusionPattern::FusionPattern;
  LogicalResult matchAndRewrite(MatMulOp mm,
                                PatternRewriter &b) const override {
    Value x = mergedHeads(mm.getLhs()), y = mergedHeads(mm.getRhs());
    if (!x || !y ||
        typeOf(x).getShape().take_front(2) !=
            typeOf(y).getShape().take_front(2))
      return b.notifyMatchFailure(mm, "not two tensors of merged heads");
    auto heads = b.create<MatMulOp>(mm.getLoc(), x, y);
    b.replaceOp(mm, f.reshape(b, mm.getLoc(), heads, typeOf(mm).getShape()));
    return success();
  }
};

/// The last two dims of merged heads swapped: on the heads.
struct LiftMergedTranspose : FusionPattern<TransposeOp> {
  using FusionPattern::FusionPattern;
  LogicalResult matchAndRewrite(TransposeOp tr,
                                PatternRewriter &b) const override {
    Value x = mergedHeads(tr.getInput());
    if (!x || tr.getPerm() != ArrayRef<int64_t>{0, 2, 1})
      return b.notifyMatchFailure(tr, "not merged heads' last dims swapped");
    auto heads = b.create<TransposeOp>(tr.getLoc(), x,
                                       b.getDenseI64ArrayAttr({0, 1, 3, 2}));
    b.replaceOp(tr, f.reshape(b, tr.getLoc(), heads, typeOf(tr).getShape()));
    return success();
  }
};

/// An elementwise op (Add, Sub, Mul, Div, Where, IsNaN, Cast) on merged
/// heads and tensors that broadcast over them (a scale, a [S, S] mask,
/// Bloom's ALiBi bias of [B * H, 1, S], split per head), or a softmax over
/// the last dim of merged heads: on the heads.
template <typename OpTy> struct LiftMergedElementwise : FusionPattern<OpTy> {
  using FusionPattern<OpTy>::FusionPattern;
  LogicalResult matchAndRewrite(OpTy op, PatternRewriter &b) const override {
    auto out = typeOf(op->getResult(0));
    ArrayRef<int64_t> bh;
    for (Value v : op->getOperands())
      if (Value x = mergedHeads(v); x && bh.empty())
        bh = typeOf(x).getShape().take_front(2);
    if (bh.empty() || out.getRank() != 3 || !out.hasStaticShape() ||
        bh[0] * bh[1] != out.getDimSize(0))
      return b.notifyMatchFailure(op, "no merged heads");
    SmallVector<NamedAttribute> attrs(op->getAttrs());
    if constexpr (std::is_same_v<OpTy, SoftmaxOp>) {
      if (op.getAxis() != -1 && op.getAxis() != 2)
        return b.notifyMatchFailure(op, "not over the last dim");
      attrs = {b.getNamedAttr("axis", b.getI64IntegerAttr(-1))};
    }
    Location loc = op.getLoc();
    SmallVector<Value> operands;
    for (Value v : op->getOperands()) {
      auto t = typeOf(v);
      if (!t.hasStaticShape() || t.getRank() > 3)
        return b.notifyMatchFailure(op, "an operand of rank above 3");
      // Of lower rank, or one batch, it broadcasts over [B, H] as it did
      // over B * H; one per merged head is split as x is.
      if (t.getRank() < 3 || t.getDimSize(0) == 1) {
        operands.push_back(v);
        continue;
      }
      if (t.getDimSize(0) != bh[0] * bh[1])
        return b.notifyMatchFailure(op, "an operand of another batch");
      Value split = mergedHeads(v);
      operands.push_back(split && typeOf(split).getShape().take_front(2) == bh
                             ? split
                             : this->f.reshape(b, loc, v,
                                               {bh[0], bh[1], t.getDimSize(1),
                                                t.getDimSize(2)}));
    }
    SmallVector<int64_t> shape(bh);
    shape.append(out.getShape().drop_front().begin(), out.getShape().end());
    Operation *heads =
        b.create(loc, op->getName().getIdentifier(), operands,
                 {RankedTensorType::get(shape, out.getElementType())}, attrs);
    b.replaceOp(op,
                this->f.reshape(b, loc, heads->getResult(0), out.getShape()));
    return success();
  }
};

/// A reshape its folder removes, a chain back to where it started (what
/// the lifts leave between lifted ops): that tensor.
struct ReshapeBack : FusionPattern<ReshapeOp> {
  using FusionPattern::FusionPattern;
  LogicalResult matchAndRewrite(ReshapeOp rs,
                                PatternRewriter &b) const override {
    SmallVector<OpFoldResult, 1> folded;
    if (failed(rs->fold(folded)) || folded.size() != 1 ||
        !isa<Value>(folded[0]))
      return b.notifyMatchFailure(rs, "not a reshape back");
    b.replaceOp(rs, cast<Value>(folded[0]));
    return success();
  }
};

/// softmax(cap(q k^T * scale) + mask) v, with GQA head repetition, causal
/// and sliding-window masks recognised by their values, and the scores
/// optionally softcapped (cap(x) = c tanh(x / c)).
struct AttentionFromMatMul : FusionPattern<MatMulOp> {
  using FusionPattern::FusionPattern;
  LogicalResult matchAndRewrite(MatMulOp pv,
                                PatternRewriter &b) const override {
    Value probs = f.throughSafeSoftmax(pv.getLhs());
    bool safe = probs != pv.getLhs();
    auto sm = def<SoftmaxOp>(probs);
    auto outT = typeOf(pv);
    if (!sm || outT.getRank() != 4 || (sm.getAxis() != -1 && sm.getAxis() != 3))
      return b.notifyMatchFailure(pv, "not softmax(...) over the last dim "
                                      "times v, in 4-D");
    double scale = 1.0;
    Value scores = sm.getInput(), mask;
    bool causal = false;
    std::optional<int64_t> window;
    // Masks: a causal one (where(cond, scores, -inf), where(cond, -inf,
    // scores) or an additive one of causal values), an additive one (a
    // padding mask, ALiBi's per-head position bias), or a causal one over
    // an additive one, as ALiBi models write it.
    if (auto w = def<WhereOp>(scores)) {
      auto fillX = splatValue(w.getX()), fillY = splatValue(w.getY());
      if (fillY && *fillY <= -1e9 &&
          (window = f.causalWindow(w.getCondition(), true))) {
        scores = w.getX();
      } else if (fillX && *fillX <= -1e9 &&
                 (window = f.causalWindow(w.getCondition(), false))) {
        scores = w.getY();
      } else {
        return b.notifyMatchFailure(pv, "a Where mask that is not causal");
      }
      causal = true;
    }
    // An additive causal mask over scores + bias (Bloom's ALiBi): causal.
    if (auto outer = operandsWhere(def<AddOp>(scores),
                                   [](Value v) { return def<AddOp>(v); });
        outer && !causal) {
      if (auto inAdd = f.causalWindow(outer->second, std::nullopt)) {
        window = inAdd;
        causal = true;
        scores = outer->first;
      }
    }
    if (auto add = def<AddOp>(scores)) {
      auto ops = operandsWhere(add, [](Value v) {
        return def<MatMulOp>(v) || def<MulOp>(v) || def<DivOp>(v);
      });
      if (!ops)
        return b.notifyMatchFailure(pv, "an Add before the softmax that is "
                                        "not scores + mask");
      scores = ops->first;
      std::optional<int64_t> inAdd =
          causal ? std::nullopt : f.causalWindow(ops->second, std::nullopt);
      if (inAdd) {
        window = inAdd;
        causal = true;
      } else {
        mask = ops->second;
      }
    }
    // Softcapping, c tanh(x / c) of the scaled scores, under the masks (as
    // Gemma 2 writes it and mtc imports ONNX Attention's softcap): the
    // scale inside the tanh is then x's over c.
    double softcap = 0.0;
    if (auto capped = operandsWhere(def<MulOp>(scores), [](Value v) {
          return def<TanhOp>(v) && v.hasOneUse();
        })) {
      auto c = splatValue(capped->second);
      if (!c || !(*c > 0.0) || std::isinf(*c))
        return b.notifyMatchFailure(pv, "a tanh of the scores times what is "
                                        "not one positive constant");
      softcap = *c;
      scale = *c;
      scores = def<TanhOp>(capped->first).getInput();
    }
    // Scale after QK^T.
    SmallVector<Value> factors;
    collectFactors(scores, factors, scale);
    auto qk = factors.size() == 1 ? def<MatMulOp>(factors[0]) : MatMulOp();
    if (!qk)
      return b.notifyMatchFailure(pv, "the scores are not a scaled q k^T");
    // Scale on q and on k (or k^T), as decomposed SDPA emits.
    Value q = qk.getLhs(), kt = qk.getRhs();
    SmallVector<Value> qf, kf;
    collectFactors(q, qf, scale);
    collectFactors(kt, kf, scale);
    if (qf.size() != 1 || kf.size() != 1 || typeOf(kf[0]).getRank() != 4)
      return b.notifyMatchFailure(pv, "q or k is not one scaled 4-D tensor");
    q = qf[0];
    Location loc = pv.getLoc();
    // k = kt transposed in its last two dims; exporters may have merged
    // that transpose with the head transpose ([0, 2, 3, 1]).
    Value k;
    SmallVector<int64_t> swap{0, 1, 3, 2};
    if (auto tr = def<TransposeOp>(kf[0])) {
      SmallVector<Value> inner;
      collectFactors(tr.getInput(), inner, scale);
      if (inner.size() != 1)
        return b.notifyMatchFailure(pv, "k^T is not a transposed k");
      SmallVector<int64_t> perm;
      for (int64_t d : swap)
        perm.push_back(tr.getPerm()[d]);
      k = perm == SmallVector<int64_t>{0, 1, 2, 3}
              ? inner[0]
              : b.create<TransposeOp>(loc, inner[0],
                                      b.getDenseI64ArrayAttr(perm));
    } else if (Value flat = f.matchFlatTranspose(kf[0])) {
      k = f.reshape(b, loc, flat,
                    {typeOf(kf[0]).getDimSize(0), typeOf(kf[0]).getDimSize(1),
                     typeOf(kf[0]).getDimSize(3), typeOf(kf[0]).getDimSize(2)});
    } else {
      k = b.create<TransposeOp>(loc, kf[0], b.getDenseI64ArrayAttr(swap));
    }
    k = f.stripRepeat(k);
    Value v = f.stripRepeat(pv.getRhs());
    auto qT = typeOf(q), kT = typeOf(k), vT = typeOf(v);
    if (qT.getRank() != 4 || kT.getShape() != vT.getShape() ||
        qT.getShape() != outT.getShape() ||
        kT.getDimSize(3) != qT.getDimSize(3))
      return b.notifyMatchFailure(pv, "q, k and v shapes do not agree");
    int64_t H = qT.getDimSize(1), Hkv = kT.getDimSize(1);
    if (H % Hkv)
      return b.notifyMatchFailure(pv, "query heads are not a multiple of "
                                      "key/value heads");
    // The fused op's softmax is NaN on a row whose every key is -inf: the
    // safe softmax's 0 differs there. A causal mask keeps each query's own
    // key, and a constant mask without -inf hides no row.
    if (safe && mask && !causal && !f.isFinite(mask))
      return b.notifyMatchFailure(pv, "a safe softmax over a mask that may "
                                      "hide a whole row with -inf");
    if (mask) {
      freeze(mask);
      // A mask broadcast over the queries (MPT's ALiBi bias, [H, 1, S]):
      // the kernels take [.., S, S], so it is expanded (a constant mask
      // folds).
      auto shape = typeOf(mask).getShape();
      int64_t rank = int64_t(shape.size()), S = qT.getDimSize(2);
      if (rank >= 2 && shape[rank - 2] == 1 && S > 1) {
        SmallVector<int64_t> full(shape);
        full[rank - 2] = S;
        auto fullType =
            RankedTensorType::get(full, typeOf(mask).getElementType());
        auto dims = b.create<ConstantOp>(
            loc, DenseElementsAttr::get(
                     RankedTensorType::get({rank}, b.getI64Type()),
                     ArrayRef<int64_t>(full)));
        mask = b.create<ExpandOp>(loc, fullType, mask, dims);
      }
    }
    auto attn = b.create<AttentionOp>(
        loc, f.packHeads(b, loc, q), f.packHeads(b, loc, k),
        f.packHeads(b, loc, v), mask, b.getI64IntegerAttr(H),
        b.getI64IntegerAttr(Hkv), b.getF32FloatAttr(scale),
        causal ? b.getUnitAttr() : UnitAttr(),
        b.getI64IntegerAttr(window.value_or(0)), b.getF32FloatAttr(softcap));
    b.replaceOp(pv, f.unpackHeads(b, loc, attn, H));
    return success();
  }
};

/// SoftmaxCrossEntropyLoss (mean) over [N, C] scores, looking through
/// reshapes and the Hugging Face label shift, or over [N, C, d] scores (the
/// classes second, as `cross_entropy(logits.transpose(1, 2), labels)`
/// exports) as a cross-entropy of their transpose; the labels get their
/// role.
struct CrossEntropyFromOnnx : FusionPattern<SoftmaxCrossEntropyLossOp> {
  using FusionPattern::FusionPattern;
  LogicalResult matchAndRewrite(SoftmaxCrossEntropyLossOp ce,
                                PatternRewriter &b) const override {
    int64_t rank = typeOf(ce.getScores()).getRank();
    if (ce.getReduction() != Reduction::Mean || rank > 3)
      return b.notifyMatchFailure(
          ce, "not a mean over [N, C] or [N, C, d] scores (mtc trains "
              "reduction mean only: the fused cross-entropy divides by the "
              "tokens that count)");
    int64_t ignore = ce.getIgnoreIndex() ? *ce.getIgnoreIndex() : -100;
    Value logits, labels;
    if (rank == 3) {
      // The classes second: back last, through the export's own transpose
      // when there is one (logits.transpose(1, 2)), so that what it
      // transposed is seen (a shift's slice).
      auto tr = def<TransposeOp>(ce.getScores());
      logits = tr && tr.getPerm() == ArrayRef<int64_t>{0, 2, 1}
                   ? tr.getInput()
                   : b.create<TransposeOp>(ce.getLoc(), ce.getScores(),
                                           b.getDenseI64ArrayAttr({0, 2, 1}))
                         .getResult();
      labels = ce.getLabels();
    } else {
      logits = f.throughReshapes(ce.getScores());
      labels = f.throughReshapes(ce.getLabels());
      auto lt = typeOf(logits);
      if (lt.getShape().back() != typeOf(ce.getScores()).getShape().back() ||
          typeOf(labels).getShape() != lt.getShape().drop_back()) {
        logits = ce.getScores();
        labels = ce.getLabels();
      }
    }
    bool shift = false;
    if (Value raw = f.matchLabelShift(labels, ignore)) {
      labels = raw;
      shift = true;
    } else if (auto whole = f.matchDroppedEnds(logits, labels)) {
      std::tie(logits, labels) = *whole;
      shift = true;
    }
    auto fused = b.create<CrossEntropyOp>(ce.getLoc(), logits, labels,
                                          b.getI64IntegerAttr(ignore),
                                          shift ? b.getUnitAttr() : UnitAttr());
    Value loss = fused;
    if (typeOf(ce).getElementType() != typeOf(fused).getElementType())
      loss = b.create<CastOp>(ce.getLoc(), fused,
                              TypeAttr::get(typeOf(ce).getElementType()));
    b.replaceOp(ce, loss);
    f.setRole(labels, shift ? InputRole::Labels : InputRole::Targets);
    return success();
  }
};

/// Follows the rewrites for the driver: the roots a pattern has still to
/// visit (an erased one leaves them), and why each pattern did not match at
/// the op it started from (also printed in the debug output).
struct FusionListener : RewriterBase::Listener {
  StringRef family;
  /// Failures are not recorded (a normalizing family's).
  bool quiet = false;
  Operation *root = nullptr;
  DenseSet<Operation *> pending;
  /// The producers of the ops a match erased: dead now if that was their
  /// only user.
  llvm::SetVector<Operation *> maybeDead;
  DenseMap<Operation *, SmallVector<std::string>> reasons;
  void notifyOperationErased(Operation *op) override {
    for (Value v : op->getOperands())
      if (Operation *d = v.getDefiningOp())
        maybeDead.insert(d);
    pending.erase(op);
    maybeDead.remove(op);
    reasons.erase(op);
  }
  void notifyMatchFailure(Location loc,
                          function_ref<void(Diagnostic &)> reason) override {
    Diagnostic why(loc, DiagnosticSeverity::Remark);
    reason(why);
    LLVM_DEBUG(llvm::dbgs() << DEBUG_TYPE << ": " << family << " at " << loc
                            << ": " << why.str() << "\n");
    if (!quiet)
      reasons[root].push_back((family + ": " + why.str()).str());
  }
};

constexpr StringLiteral kUnfused = "train.unfused";

/// Patterns that run together, and the statistic of what they fused.
struct Family {
  const char *name;
  std::vector<std::unique_ptr<RewritePattern>> patterns;
  llvm::Statistic *fused;
  /// Rewrites that fuse nothing (a form made plain for the families
  /// after): where they do not apply is no reason an op stayed unfused.
  bool normalizes = false;
};

template <typename... Patterns>
Family family(const char *name, llvm::Statistic &fused, MLIRContext *ctx,
              Fusion &f) {
  Family fam{name, {}, &fused};
  (fam.patterns.push_back(std::make_unique<Patterns>(ctx, f)), ...);
  return fam;
}

struct FuseOps : public mt::train::impl::FuseOpsPassBase<FuseOps> {
  using Base::Base;

  /// Erases what a match left dead, from the matched root's producers up,
  /// as the greedy driver does: a later pattern's use counts (a single-use
  /// activation, a linear's one add) then see only the live graph.
  static void eraseDead(PatternRewriter &rewriter, FusionListener &listener) {
    while (!listener.maybeDead.empty()) {
      Operation *op = listener.maybeDead.pop_back_val();
      if (isOpTriviallyDead(op))
        rewriter.eraseOp(op);
    }
  }

  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    Fusion f;
    // In the order they must run: a later family matches the fused ops of
    // an earlier one (a gated activation the activations, attention the
    // linears); the Slices no family took become Splits in the
    // canonicalizer after (Canonicalize.cpp). One-to-one keeps
    // the rewrites of a single op into its kernel, the rest stays in
    // primitives, each with its own kernel and gradient rule.
    std::vector<Family> families;
    if (onlyOneToOne) {
      families.push_back(family<LinearFromGemm>("linear", numLinear, ctx, f));
      families.push_back(
          family<EmbeddingFromGather>("embedding", numEmbedding, ctx, f));
      families.push_back(family<LayerNormFromOnnx>("norm", numNorms, ctx, f));
      families.push_back(
          family<ActivationFromGelu>("activation", numActivations, ctx, f));
    } else {
      families.push_back(family<LinearFromMatMul, LinearFromGemm>(
          "linear", numLinear, ctx, f));
      families.push_back(
          family<ExpertLinearFromGatherND>("experts", numExperts, ctx, f));
      families.push_back(
          family<EmbeddingFromGather>("embedding", numEmbedding, ctx, f));
      families.push_back(
          family<RmsNormFromMul, LayerNormFromOnnx>("norm", numNorms, ctx, f));
      families.push_back(
          family<ActivationFromGelu, ActivationFromMul, GatedActivationFromMul>(
              "activation", numActivations, ctx, f));
      families.push_back(family<RotaryFromAdd>("rotary", numRotary, ctx, f));
      // In the order one lift feeds the next: k^T, q k^T, its scale, bias
      // and mask, the softmax, the reshapes back between them.
      families.push_back(
          family<LiftMergedTranspose, LiftMergedMatMul,
                 LiftMergedElementwise<MulOp>, LiftMergedElementwise<DivOp>,
                 LiftMergedElementwise<AddOp>, LiftMergedElementwise<SubOp>,
                 LiftMergedElementwise<WhereOp>, LiftMergedElementwise<IsNaNOp>,
                 LiftMergedElementwise<CastOp>,
                 LiftMergedElementwise<SoftmaxOp>, ReshapeBack>(
              "heads", numLifted, ctx, f));
      families.back().normalizes = true;
      families.push_back(
          family<AttentionFromMatMul>("attention", numAttention, ctx, f));
    }
    families.push_back(
        family<CrossEntropyFromOnnx>("cross_entropy", numCrossEntropy, ctx, f));
    FusionListener listener;
    PatternRewriter rewriter(ctx);
    rewriter.setListener(&listener);
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      for (Family &fam : families) {
        listener.family = fam.name;
        listener.quiet = fam.normalizes;
        // Each pattern in turn over the ops of its root kind, in program
        // order, as they are when it starts; a normalizing family again
        // until none applies (a lift may enable an earlier pattern's: the
        // softmax lifted, its bmm with v).
        for (bool again = true; again;) {
          again = false;
          for (const auto &pattern : fam.patterns) {
            SmallVector<Operation *> roots;
            func.walk([&](Operation *op) {
              if (op->getName() == *pattern->getRootKind())
                roots.push_back(op);
            });
            listener.pending =
                DenseSet<Operation *>(roots.begin(), roots.end());
            for (Operation *op : roots) {
              // Erased with an earlier match, or dead from the start (the
              // canonicalizer after erases it).
              if (!listener.pending.erase(op) || op->use_empty())
                continue;
              rewriter.setInsertionPoint(op);
              listener.root = op;
              if (failed(pattern->matchAndRewrite(op, rewriter)))
                continue;
              ++*fam.fused;
              numFused += fam.normalizes ? 0 : 1;
              again |= fam.normalizes;
              eraseDead(rewriter, listener);
            }
          }
        }
      }
      f.assignDataRoles(func);
    }
    if (!explain)
      return;
    // What the patterns found, at the ops still there (fused ones lost
    // theirs with the op).
    for (auto &[op, why] : listener.reasons) {
      SmallVector<Attribute> list;
      for (const std::string &w : why)
        list.push_back(StringAttr::get(ctx, w));
      op->setAttr(kUnfused, ArrayAttr::get(ctx, list));
    }
  }
};

struct ExplainFusion
    : public mt::train::impl::ExplainFusionPassBase<ExplainFusion> {
  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>())
      explain(func);
    getOperation().walk([](Operation *op) { op->removeAttr(kUnfused); });
  }

  static bool isFloat(Type t) {
    auto tensor = dyn_cast<RankedTensorType>(t);
    return tensor && isa<FloatType>(tensor.getElementType());
  }

  /// One remark at each op of `func` that stays a primitive kernel.
  static void explain(func::FuncOp func) {
    DenseSet<Operation *> live;
    SmallVector<Operation *> work;
    func.walk([&](func::ReturnOp r) { work.push_back(r); });
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      for (Value v : op->getOperands())
        if (Operation *d = v.getDefiningOp(); d && live.insert(d).second)
          work.push_back(d);
    }
    func.walk([&](Operation *op) {
      if (!live.contains(op) || op->hasTrait<FusedOp>() ||
          isa<ParamLoadOp, ConstantOp>(op) ||
          llvm::none_of(op->getResultTypes(), isFloat) ||
          llvm::all_of(op->getOperands(),
                       [](Value v) { return v.getDefiningOp<ConstantOp>(); }))
        return;
      InFlightDiagnostic d = op->emitRemark()
                             << op->getName() << " left unfused: ";
      auto why = op->getAttrOfType<ArrayAttr>(kUnfused);
      if (!why) {
        d << "no pattern starts at it";
        return;
      }
      llvm::interleave(
          why.getAsValueRange<StringAttr>(), [&](StringRef w) { d << w; },
          [&] { d << "; "; });
    });
  }
};

} // namespace
