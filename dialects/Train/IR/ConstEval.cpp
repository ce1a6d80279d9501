//===- ConstEval.cpp - evaluate train ops on constant operands ------------===//
#include "dialects/Train/IR/ConstEval.h"

#include "dialects/Train/IR/ShapeInference.h"
#include "dialects/Train/IR/TrainOps.h"
#include "kernels/pointwise.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <functional>

using namespace mlir;

namespace mt::train {
namespace {

/// A dense tensor of values: doubles for floating types, int64 for integers
/// and booleans. Floating values are rounded to their element type whenever
/// a result is produced, so each op rounds as the framework would.
struct CTensor {
  Shape shape;
  Type elementType;
  std::vector<double> f;
  std::vector<int64_t> i;

  bool isFloat() const { return isa<FloatType>(elementType); }
  int64_t size() const { return numElements(shape); }
  double get(int64_t k) const { return isFloat() ? f[k] : double(i[k]); }
  int64_t getInt(int64_t k) const { return isFloat() ? int64_t(f[k]) : i[k]; }
};

std::optional<CTensor> toCTensor(Attribute attr) {
  auto dense = dyn_cast_or_null<DenseElementsAttr>(attr);
  if (!dense)
    return std::nullopt;
  auto type = cast<RankedTensorType>(dense.getType());
  CTensor t;
  t.shape.assign(type.getShape().begin(), type.getShape().end());
  t.elementType = type.getElementType();
  int64_t n = t.size();
  // Typed iteration is an order of magnitude faster than APFloat/APInt for
  // the large tables (masks) this sees.
  if (t.elementType.isF32()) {
    t.f.reserve(n);
    for (float v : dense.getValues<float>())
      t.f.push_back(v);
  } else if (t.elementType.isF64()) {
    t.f.reserve(n);
    for (double v : dense.getValues<double>())
      t.f.push_back(v);
  } else if (t.isFloat()) {
    t.f.reserve(n);
    for (APFloat v : dense.getValues<APFloat>())
      t.f.push_back(v.convertToDouble());
  } else if (t.elementType.isInteger(64)) {
    t.i.reserve(n);
    for (int64_t v : dense.getValues<int64_t>())
      t.i.push_back(v);
  } else if (t.elementType.isInteger(1)) {
    t.i.reserve(n);
    for (bool v : dense.getValues<bool>())
      t.i.push_back(v);
  } else if (auto it = dyn_cast<IntegerType>(t.elementType)) {
    t.i.reserve(n);
    for (APInt v : dense.getValues<APInt>())
      t.i.push_back(it.isUnsigned() ? int64_t(v.getZExtValue())
                                    : v.getSExtValue());
  } else {
    return std::nullopt;
  }
  return t;
}

/// Rounds `v` to what `type` can hold.
double roundTo(Type type, double v) {
  if (type.isF32())
    return double(float(v));
  if (type.isF64())
    return v;
  bool lost;
  APFloat ap(v);
  ap.convert(cast<FloatType>(type).getFloatSemantics(),
             APFloat::rmNearestTiesToEven, &lost);
  return ap.convertToDouble();
}

int64_t wrapInt(Type type, int64_t v) {
  unsigned w = cast<IntegerType>(type).getWidth();
  if (w == 1)
    return v != 0;
  if (w >= 64)
    return v;
  APInt ap(64, v, /*isSigned=*/true);
  return ap.trunc(w).getSExtValue();
}

Attribute toAttr(CTensor &t, RankedTensorType type) {
  if (auto ft = dyn_cast<FloatType>(type.getElementType())) {
    if (ft.isF32()) {
      std::vector<float> v(t.f.begin(), t.f.end());
      return DenseElementsAttr::get(type, llvm::ArrayRef<float>(v));
    }
    SmallVector<APFloat> v;
    v.reserve(t.f.size());
    for (double d : t.f) {
      bool lost;
      APFloat ap(d);
      ap.convert(ft.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
      v.push_back(ap);
    }
    return DenseElementsAttr::get(type, v);
  }
  auto it = cast<IntegerType>(type.getElementType());
  if (it.getWidth() == 1) {
    SmallVector<bool> v(t.i.begin(), t.i.end());
    return DenseElementsAttr::get(type, llvm::ArrayRef<bool>(v));
  }
  SmallVector<APInt> v;
  v.reserve(t.i.size());
  for (int64_t x : t.i)
    v.push_back(APInt(it.getWidth(), uint64_t(x), /*isSigned=*/true));
  return DenseElementsAttr::get(type, v);
}

Shape stridesOf(ArrayRef<int64_t> shape) {
  Shape s(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    s[d] = s[d + 1] * shape[d + 1];
  return s;
}

/// Iterates over every multi-index of `shape`, calling fn(flat, idx).
template <typename Fn> void forEachIndex(ArrayRef<int64_t> shape, Fn fn) {
  int64_t n = numElements(shape), rank = shape.size();
  Shape idx(rank, 0);
  for (int64_t k = 0; k < n; ++k) {
    fn(k, idx);
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++idx[d] < shape[d])
        break;
      idx[d] = 0;
    }
  }
}

/// Maps each flat index of `outShape` to the flat index of a tensor of
/// `inShape` broadcast to it.
std::vector<int64_t> broadcastIndex(ArrayRef<int64_t> inShape,
                                    ArrayRef<int64_t> outShape) {
  int64_t off = int64_t(outShape.size()) - int64_t(inShape.size());
  Shape inStrides = stridesOf(inShape);
  std::vector<int64_t> map(numElements(outShape));
  forEachIndex(outShape, [&](int64_t k, ArrayRef<int64_t> idx) {
    int64_t src = 0;
    for (size_t d = off; d < idx.size(); ++d)
      if (inShape[d - off] != 1)
        src += idx[d] * inStrides[d - off];
    map[k] = src;
  });
  return map;
}

/// A result tensor of `type`, with storage for its values.
CTensor makeResult(RankedTensorType type) {
  CTensor r;
  r.shape.assign(type.getShape().begin(), type.getShape().end());
  r.elementType = type.getElementType();
  if (r.isFloat())
    r.f.resize(r.size());
  else
    r.i.resize(r.size());
  return r;
}

void setValue(CTensor &r, int64_t k, double v) {
  if (r.isFloat())
    r.f[k] = roundTo(r.elementType, v);
  else
    r.i[k] = wrapInt(r.elementType, int64_t(v));
}

/// Copies elements of `in` into a result of `type` by a source-index map.
CTensor gatherBy(const CTensor &in, RankedTensorType type,
                 const std::vector<int64_t> &src) {
  CTensor r = makeResult(type);
  for (size_t k = 0; k < src.size(); ++k) {
    if (r.isFloat())
      r.f[k] = in.f[src[k]];
    else
      r.i[k] = in.i[src[k]];
  }
  return r;
}

/// The flat index into `data` of each element of `indices` along `axis`
/// (GatherElements, ScatterElements: the indices have the data's dims but
/// along the axis), or none for an index outside the axis.
std::optional<std::vector<int64_t>>
elementPlaces(ArrayRef<int64_t> data, const CTensor &indices, int64_t axis) {
  Shape strides = stridesOf(data);
  int64_t dim = data[axis];
  std::vector<int64_t> places(indices.size());
  bool inside = true;
  forEachIndex(indices.shape, [&](int64_t k, ArrayRef<int64_t> at) {
    int64_t i = indices.i[k];
    inside = inside && i >= -dim && i < dim;
    int64_t flat = 0;
    for (size_t d = 0; d < at.size(); ++d)
      flat += (int64_t(d) == axis ? (i < 0 ? i + dim : i) : at[d]) * strides[d];
    places[k] = flat;
  });
  if (!inside)
    return std::nullopt;
  return places;
}

using Binary = std::function<double(double, double)>;
using IntBinary = std::function<int64_t(int64_t, int64_t)>;

std::optional<CTensor> binary(const CTensor &a, const CTensor &b,
                              RankedTensorType type, const Binary &f,
                              const IntBinary &fi) {
  CTensor r = makeResult(type);
  auto ia = broadcastIndex(a.shape, r.shape);
  auto ib = broadcastIndex(b.shape, r.shape);
  bool intMath = !a.isFloat() && !b.isFloat() && fi;
  for (int64_t k = 0; k < r.size(); ++k) {
    if (intMath) {
      int64_t v = fi(a.i[ia[k]], b.i[ib[k]]);
      if (r.isFloat())
        r.f[k] = roundTo(r.elementType, double(v));
      else
        r.i[k] = wrapInt(r.elementType, v);
    } else {
      setValue(r, k, f(a.get(ia[k]), b.get(ib[k])));
    }
  }
  return r;
}

std::optional<CTensor> unary(const CTensor &a, RankedTensorType type,
                             double (*f)(double)) {
  CTensor r = makeResult(type);
  for (int64_t k = 0; k < r.size(); ++k)
    setValue(r, k, f(a.get(k)));
  return r;
}

std::optional<CTensor> reduce(const CTensor &a, RankedTensorType type,
                              ArrayRef<int64_t> axesIn, int kind) {
  int64_t rank = a.shape.size();
  Shape axes;
  std::string err;
  if (axesIn.empty())
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  else if (!normalizeAxes(axesIn, rank, axes, err))
    return std::nullopt;
  SmallVector<bool> reduced(rank, false);
  for (int64_t d : axes)
    reduced[d] = true;
  // Output index over the kept dims, in the keepdims layout.
  Shape keepShape(a.shape);
  for (int64_t d : axes)
    keepShape[d] = 1;
  Shape outStrides = stridesOf(keepShape);
  CTensor r = makeResult(type);
  std::vector<double> acc(r.size(), kind == 2 ? -INFINITY : 0.0);
  forEachIndex(a.shape, [&](int64_t k, ArrayRef<int64_t> idx) {
    int64_t o = 0;
    for (int64_t d = 0; d < rank; ++d)
      if (!reduced[d])
        o += idx[d] * outStrides[d];
    double v = a.get(k);
    acc[o] = kind == 2 ? std::max(acc[o], v) : acc[o] + v;
  });
  int64_t count = a.size() / std::max<int64_t>(1, r.size());
  for (int64_t k = 0; k < r.size(); ++k)
    setValue(r, k, kind == 0 ? acc[k] / double(count) : acc[k]);
  return r;
}

/// Flat source index of each result element of a permutation.
std::vector<int64_t> transposeIndex(ArrayRef<int64_t> inShape,
                                    ArrayRef<int64_t> perm) {
  Shape inStrides = stridesOf(inShape);
  Shape outShape;
  for (int64_t p : perm)
    outShape.push_back(inShape[p]);
  std::vector<int64_t> map(numElements(outShape));
  forEachIndex(outShape, [&](int64_t k, ArrayRef<int64_t> idx) {
    int64_t src = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      src += idx[d] * inStrides[perm[d]];
    map[k] = src;
  });
  return map;
}

double negate(double x) { return -x; }
double logicalNot(double x) { return x == 0; }
double isNaN(double x) { return std::isnan(x); }
double identity(double x) { return x; }

/// Value-preserving folds that need no constant operands.
OpFoldResult foldStructural(Operation *op) {
  Value in = op->getNumOperands() ? op->getOperand(0) : Value();
  Type resultType = op->getNumResults() ? op->getResult(0).getType() : Type();
  return TypeSwitch<Operation *, OpFoldResult>(op)
      .Case<IdentityOp>([&](auto) { return in; })
      .Case<CastOp, CastLikeOp>([&](auto) {
        return in.getType() == resultType ? OpFoldResult(in) : nullptr;
      })
      .Case<DropoutOp>([&](DropoutOp d) {
        return !d.getTraining() || d.getRatio().isZero() ? OpFoldResult(in)
                                                         : nullptr;
      })
      .Case<ReshapeOp, UnsqueezeOp, SqueezeOp, FlattenOp, ExpandOp>(
          [&](auto) -> OpFoldResult {
            if (in.getType() == resultType)
              return in;
            // A chain of reshapes that ends where it started.
            Operation *inner = in.getDefiningOp();
            if (inner &&
                isa<ReshapeOp, UnsqueezeOp, SqueezeOp, FlattenOp>(inner) &&
                !isa<ExpandOp>(op) &&
                inner->getOperand(0).getType() == resultType)
              return inner->getOperand(0);
            return nullptr;
          })
      .Case<TransposeOp>([&](TransposeOp t) -> OpFoldResult {
        auto perm = t.getPerm();
        bool isIdentity = true;
        for (size_t d = 0; d < perm.size(); ++d)
          isIdentity &= perm[d] == int64_t(d);
        if (isIdentity)
          return in;
        // transpose(transpose(x, p), q) is x when q inverts p.
        if (auto inner = in.getDefiningOp<TransposeOp>()) {
          auto p = inner.getPerm();
          bool inverse = true;
          for (size_t d = 0; d < perm.size(); ++d)
            inverse &= p[perm[d]] == int64_t(d);
          if (inverse)
            return inner.getInput();
        }
        return nullptr;
      })
      // A concat of one part is that part (the exporters' index tuples of
      // length 1, as a MoE's expert ids for GatherND).
      .Case<ConcatOp>([&](ConcatOp c) {
        return c.getInputs().size() == 1 ? OpFoldResult(in) : nullptr;
      })
      .Default([](Operation *) { return nullptr; });
}

std::optional<CTensor> evaluate(Operation *op, ArrayRef<CTensor *> in,
                                RankedTensorType type) {
  using R = std::optional<CTensor>;
  // Ops that need no operand values.
  if (auto s = dyn_cast<ShapeOp>(op)) {
    auto inShape = cast<RankedTensorType>(s.getInput().getType()).getShape();
    CTensor r = makeResult(type);
    for (int64_t k = 0; k < r.size(); ++k)
      r.i[k] = inShape[s.getStart() + k];
    return r;
  }
  if (auto s = dyn_cast<SizeOp>(op)) {
    CTensor r = makeResult(type);
    r.i[0] =
        numElements(cast<RankedTensorType>(s.getInput().getType()).getShape());
    return r;
  }
  // CastLike reads only the type of its second operand.
  if (isa<CastLikeOp>(op) ? !in[0] : !llvm::all_of(in, [](CTensor *t) {
        return t != nullptr;
      }))
    return std::nullopt;
  const CTensor *a = in.empty() ? nullptr : in[0];
  const CTensor *b = in.size() > 1 ? in[1] : nullptr;
  auto same = [](const CTensor &t, RankedTensorType type) {
    CTensor r = t;
    r.shape.assign(type.getShape().begin(), type.getShape().end());
    return r;
  };
  auto cmp = [&](auto f) { return binary(*a, *b, type, f, nullptr); };
  return TypeSwitch<Operation *, R>(op)
      .Case<ConstantOfShapeOp>([&](ConstantOfShapeOp c) -> R {
        auto v = toCTensor(c.getValue());
        if (!v || v->size() != 1)
          return std::nullopt;
        CTensor r = makeResult(type);
        for (int64_t k = 0; k < r.size(); ++k)
          setValue(r, k, v->get(0));
        return r;
      })
      .Case<NegOp>([&](auto) { return unary(*a, type, negate); })
      // The pointwise functions fold through the kernels' own code, in
      // fp32 as they run: a folded table is what the kernel would compute.
      .Case<PointwiseOpInterface>([&](PointwiseOpInterface p) -> R {
        kernels::UnaryParams f{kernels::Unary(int(p.getFn())),
                               p.getAlphaValue(), p.getBetaValue()};
        CTensor r = makeResult(type);
        for (int64_t k = 0; k < r.size(); ++k)
          setValue(r, k, kernels::applyUnary(f, float(a->get(k))));
        return r;
      })
      .Case<NotOp>([&](auto) { return unary(*a, type, logicalNot); })
      .Case<IsNaNOp>([&](auto) { return unary(*a, type, isNaN); })
      .Case<CastOp, CastLikeOp>([&](auto) {
        // Float to integer truncates toward zero, as C casts do.
        return unary(*a, type, identity);
      })
      .Case<AddOp>([&](auto) {
        return binary(*a, *b, type, std::plus<double>(), std::plus<int64_t>());
      })
      .Case<SubOp>([&](auto) {
        return binary(*a, *b, type, std::minus<double>(),
                      std::minus<int64_t>());
      })
      .Case<MulOp>([&](auto) {
        return binary(*a, *b, type, std::multiplies<double>(),
                      std::multiplies<int64_t>());
      })
      .Case<DivOp>([&](auto) -> R {
        if (!a->isFloat())
          for (int64_t v : b->i)
            if (v == 0)
              return std::nullopt;
        return binary(*a, *b, type, std::divides<double>(),
                      std::divides<int64_t>());
      })
      .Case<PowOp>([&](auto) {
        return binary(
            *a, *b, type, [](double x, double y) { return std::pow(x, y); },
            nullptr);
      })
      .Case<MaxOp>([&](auto) {
        return binary(
            *a, *b, type, [](double x, double y) { return std::max(x, y); },
            [](int64_t x, int64_t y) { return std::max(x, y); });
      })
      .Case<MinOp>([&](auto) {
        return binary(
            *a, *b, type, [](double x, double y) { return std::min(x, y); },
            [](int64_t x, int64_t y) { return std::min(x, y); });
      })
      .Case<AndOp>([&](auto) {
        return cmp([](double x, double y) { return double(x && y); });
      })
      .Case<OrOp>([&](auto) {
        return cmp([](double x, double y) { return double(x || y); });
      })
      .Case<XorOp>([&](auto) {
        return cmp([](double x, double y) { return double(!x != !y); });
      })
      .Case<EqualOp>([&](auto) -> R {
        return binary(
            *a, *b, type, [](double x, double y) { return double(x == y); },
            [](int64_t x, int64_t y) { return int64_t(x == y); });
      })
      .Case<LessOp>([&](auto) {
        return binary(
            *a, *b, type, [](double x, double y) { return double(x < y); },
            [](int64_t x, int64_t y) { return int64_t(x < y); });
      })
      .Case<LessOrEqualOp>([&](auto) {
        return binary(
            *a, *b, type, [](double x, double y) { return double(x <= y); },
            [](int64_t x, int64_t y) { return int64_t(x <= y); });
      })
      .Case<GreaterOp>([&](auto) {
        return binary(
            *a, *b, type, [](double x, double y) { return double(x > y); },
            [](int64_t x, int64_t y) { return int64_t(x > y); });
      })
      .Case<GreaterOrEqualOp>([&](auto) {
        return binary(
            *a, *b, type, [](double x, double y) { return double(x >= y); },
            [](int64_t x, int64_t y) { return int64_t(x >= y); });
      })
      .Case<WhereOp>([&](auto) -> R {
        const CTensor &c = *in[0], &x = *in[1], &y = *in[2];
        CTensor r = makeResult(type);
        auto ic = broadcastIndex(c.shape, r.shape);
        auto ix = broadcastIndex(x.shape, r.shape);
        auto iy = broadcastIndex(y.shape, r.shape);
        for (int64_t k = 0; k < r.size(); ++k) {
          const CTensor &src = c.i[ic[k]] ? x : y;
          int64_t j = c.i[ic[k]] ? ix[k] : iy[k];
          if (r.isFloat())
            r.f[k] = src.get(j);
          else
            r.i[k] = src.i[j];
        }
        return r;
      })
      .Case<ReshapeOp, UnsqueezeOp, SqueezeOp, FlattenOp>(
          [&](auto) -> R { return same(*a, type); })
      .Case<TransposeOp>([&](TransposeOp t) -> R {
        return gatherBy(*a, type, transposeIndex(a->shape, t.getPerm()));
      })
      .Case<ExpandOp>([&](auto) -> R {
        return gatherBy(*a, type, broadcastIndex(a->shape, type.getShape()));
      })
      .Case<TileOp>([&](auto) -> R {
        std::vector<int64_t> src(numElements(type.getShape()));
        Shape inStrides = stridesOf(a->shape);
        forEachIndex(type.getShape(), [&](int64_t k, ArrayRef<int64_t> idx) {
          int64_t s = 0;
          for (size_t d = 0; d < idx.size(); ++d)
            s += (idx[d] % a->shape[d]) * inStrides[d];
          src[k] = s;
        });
        return gatherBy(*a, type, src);
      })
      .Case<ConcatOp>([&](ConcatOp c) -> R {
        int64_t axis = *normalizeAxis(c.getAxis(), type.getRank());
        CTensor r = makeResult(type);
        int64_t outer = numElements(type.getShape().take_front(axis));
        int64_t k = 0;
        for (int64_t o = 0; o < outer; ++o)
          for (CTensor *t : in) {
            int64_t chunk =
                numElements(ArrayRef<int64_t>(t->shape).drop_front(axis));
            for (int64_t j = 0; j < chunk; ++j, ++k) {
              if (r.isFloat())
                r.f[k] = t->get(o * chunk + j);
              else
                r.i[k] = t->i[o * chunk + j];
            }
          }
        return r;
      })
      .Case<SliceOp>([&](SliceOp) -> R {
        SliceParams p;
        std::string err;
        if (!sliceShape(a->shape, in[1]->i, in[2]->i, in[3]->i, in[4]->i, p,
                        err))
          return std::nullopt;
        Shape inStrides = stridesOf(a->shape);
        std::vector<int64_t> src(numElements(p.size));
        forEachIndex(p.size, [&](int64_t k, ArrayRef<int64_t> idx) {
          int64_t s = 0;
          for (size_t d = 0; d < idx.size(); ++d)
            s += (p.start[d] + idx[d] * p.step[d]) * inStrides[d];
          src[k] = s;
        });
        return gatherBy(*a, type, src);
      })
      .Case<GatherOp>([&](GatherOp g) -> R {
        int64_t rank = a->shape.size();
        int64_t axis = *normalizeAxis(g.getAxis(), rank);
        int64_t outer =
            numElements(ArrayRef<int64_t>(a->shape).take_front(axis));
        int64_t inner =
            numElements(ArrayRef<int64_t>(a->shape).drop_front(axis + 1));
        int64_t dim = a->shape[axis];
        std::vector<int64_t> src;
        src.reserve(numElements(type.getShape()));
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t idx : b->i) {
            if (idx < -dim || idx >= dim)
              return std::nullopt;
            idx = idx < 0 ? idx + dim : idx;
            for (int64_t j = 0; j < inner; ++j)
              src.push_back((o * dim + idx) * inner + j);
          }
        return gatherBy(*a, type, src);
      })
      .Case<GatherElementsOp>([&](GatherElementsOp g) -> R {
        auto axis = normalizeAxis(g.getAxis(), int64_t(a->shape.size()));
        auto places = axis ? elementPlaces(a->shape, *b, *axis) : std::nullopt;
        if (!places)
          return std::nullopt;
        return gatherBy(*a, type, *places);
      })
      .Case<ScatterElementsOp>([&](ScatterElementsOp sc) -> R {
        const CTensor &updates = *in[2];
        auto axis = normalizeAxis(sc.getAxis(), int64_t(a->shape.size()));
        auto places = axis ? elementPlaces(a->shape, *b, *axis) : std::nullopt;
        if (!places)
          return std::nullopt;
        CTensor r = *a;
        for (size_t k = 0; k < places->size(); ++k) {
          if (r.isFloat())
            r.f[(*places)[k]] = updates.f[k];
          else
            r.i[(*places)[k]] = updates.i[k];
        }
        return r;
      })
      .Case<GatherNDOp>([&](GatherNDOp g) -> R {
        if (g.getBatchDims() != 0)
          return std::nullopt;
        int64_t q = b->shape.back();
        Shape inStrides = stridesOf(a->shape);
        int64_t inner = numElements(ArrayRef<int64_t>(a->shape).drop_front(q));
        int64_t tuples = b->size() / std::max<int64_t>(q, 1);
        std::vector<int64_t> src;
        src.reserve(tuples * inner);
        for (int64_t t = 0; t < tuples; ++t) {
          int64_t base = 0;
          for (int64_t d = 0; d < q; ++d) {
            int64_t idx = b->i[t * q + d], dim = a->shape[d];
            if (idx < -dim || idx >= dim)
              return std::nullopt;
            base += (idx < 0 ? idx + dim : idx) * inStrides[d];
          }
          for (int64_t j = 0; j < inner; ++j)
            src.push_back(base + j);
        }
        return gatherBy(*a, type, src);
      })
      .Case<PadOp>([&](PadOp) -> R {
        const CTensor &pads = *in[1], &value = *in[2];
        int64_t rank = a->shape.size();
        Shape inStrides = stridesOf(a->shape);
        CTensor r = makeResult(type);
        forEachIndex(type.getShape(), [&](int64_t k, ArrayRef<int64_t> idx) {
          int64_t s = 0;
          bool inside = true;
          for (int64_t d = 0; d < rank; ++d) {
            int64_t i = idx[d] - pads.i[d];
            inside &= i >= 0 && i < a->shape[d];
            s += i * inStrides[d];
          }
          setValue(r, k, inside ? a->get(s) : value.get(0));
        });
        return r;
      })
      .Case<RangeOp>([&](RangeOp) -> R {
        CTensor r = makeResult(type);
        for (int64_t k = 0; k < r.size(); ++k) {
          if (r.isFloat())
            r.f[k] = roundTo(r.elementType, a->get(0) + k * in[2]->get(0));
          else
            r.i[k] = a->i[0] + k * in[2]->i[0];
        }
        return r;
      })
      .Case<CumSumOp>([&](CumSumOp c) -> R {
        int64_t rank = a->shape.size();
        int64_t axis = *normalizeAxis(c.getAxis(), rank);
        int64_t dim = a->shape[axis];
        int64_t inner =
            numElements(ArrayRef<int64_t>(a->shape).drop_front(axis + 1));
        int64_t outer = a->size() / std::max<int64_t>(1, dim * inner);
        CTensor r = makeResult(type);
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t j = 0; j < inner; ++j) {
            double acc = 0;
            for (int64_t t = 0; t < dim; ++t) {
              int64_t tt = c.getReverse() ? dim - 1 - t : t;
              int64_t k = (o * dim + tt) * inner + j;
              if (!c.getExclusive())
                acc += a->get(k);
              setValue(r, k, acc);
              if (c.getExclusive())
                acc += a->get(k);
            }
          }
        return r;
      })
      .Case<TriluOp>([&](TriluOp t) -> R {
        int64_t rank = a->shape.size();
        int64_t rows = a->shape[rank - 2], cols = a->shape[rank - 1];
        CTensor r = makeResult(type);
        // I64Attr getters are unsigned; the diagonal is signed.
        int64_t diag = static_cast<int64_t>(t.getK());
        bool upper = t.getUpper();
        for (int64_t k = 0; k < r.size(); ++k) {
          int64_t i = (k / cols) % rows, j = k % cols;
          bool keep = upper ? j - i >= diag : j - i <= diag;
          setValue(r, k, keep ? a->get(k) : 0.0);
        }
        return r;
      })
      .Case<ReduceMeanOp>(
          [&](ReduceMeanOp o) { return reduce(*a, type, o.getAxes(), 0); })
      .Case<ReduceSumOp>(
          [&](ReduceSumOp o) { return reduce(*a, type, o.getAxes(), 1); })
      .Case<ReduceMaxOp>(
          [&](ReduceMaxOp o) { return reduce(*a, type, o.getAxes(), 2); })
      .Case<MatMulOp>([&](auto) -> R {
        // Small constant products only (rotary frequencies times positions).
        if (a->shape.size() < 2 || b->shape.size() < 2)
          return std::nullopt;
        int64_t m = a->shape[a->shape.size() - 2], kk = a->shape.back();
        int64_t n = b->shape.back();
        Shape batch(type.getShape().drop_back(2));
        Shape aBatch(ArrayRef<int64_t>(a->shape).drop_back(2));
        Shape bBatch(ArrayRef<int64_t>(b->shape).drop_back(2));
        auto ia = broadcastIndex(aBatch, batch),
             ib = broadcastIndex(bBatch, batch);
        CTensor r = makeResult(type);
        for (size_t t = 0; t < ia.size(); ++t)
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double acc = 0;
              for (int64_t p = 0; p < kk; ++p)
                acc += a->get((ia[t] * m + i) * kk + p) *
                       b->get((ib[t] * kk + p) * n + j);
              setValue(r, (t * m + i) * n + j, acc);
            }
        return r;
      })
      .Default([](Operation *) -> R { return std::nullopt; });
}

} // namespace

std::optional<SmallVector<int64_t>> getIntValues(Attribute attr) {
  auto dense = dyn_cast_or_null<DenseIntElementsAttr>(attr);
  if (!dense)
    return std::nullopt;
  SmallVector<int64_t> out;
  for (APInt v : dense.getValues<APInt>())
    out.push_back(v.getBitWidth() == 1 ? int64_t(v.getZExtValue())
                                       : v.getSExtValue());
  return out;
}

std::optional<SmallVector<double>> getFloatValues(Attribute attr) {
  auto t = toCTensor(attr);
  if (!t)
    return std::nullopt;
  SmallVector<double> out;
  for (int64_t k = 0; k < t->size(); ++k)
    out.push_back(t->get(k));
  return out;
}

OpFoldResult foldTrainOp(Operation *op, ArrayRef<Attribute> operands) {
  if (OpFoldResult r = foldStructural(op))
    return r;
  if (op->getNumResults() != 1)
    return nullptr;
  auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!type || !type.hasStaticShape() ||
      numElements(type.getShape()) > kMaxFoldElements)
    return nullptr;
  // Only Shape and Size fold without knowing every operand, and CastLike
  // without its second (only its type matters); checking first avoids
  // converting a large known operand for nothing.
  if (isa<CastLikeOp>(op)
          ? !operands[0]
          : !isa<ShapeOp, SizeOp>(op) &&
                llvm::any_of(operands, [](Attribute a) { return !a; }))
    return nullptr;
  SmallVector<std::optional<CTensor>> values;
  SmallVector<CTensor *> ptrs;
  values.reserve(operands.size());
  for (Attribute a : operands)
    values.push_back(toCTensor(a));
  for (auto &v : values)
    ptrs.push_back(v ? &*v : nullptr);
  std::optional<CTensor> r = evaluate(op, ptrs, type);
  if (!r || r->size() != numElements(type.getShape()))
    return nullptr;
  return toAttr(*r, type);
}

} // namespace mt::train
