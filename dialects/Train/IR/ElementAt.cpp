//===- ElementAt.cpp - one element of a tensor, from the ops that make it -===//
#include "dialects/Train/IR/ElementAt.h"

#include "dialects/Train/IR/TrainOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;

namespace mt::train {
namespace {

/// Ops between a mask and the values it is built from: a walk deeper than
/// this is not a mask's.
constexpr int kMaxDepth = 128;
/// Ops visited for one element, at most: an op that reads a value twice
/// would otherwise make a hostile graph's walk exponential in its depth.
constexpr int64_t kMaxVisits = 4096;

using Index = SmallVector<int64_t, 4>;

std::optional<ArrayRef<int64_t>> staticShape(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  if (!t || !t.hasStaticShape())
    return std::nullopt;
  return t.getShape();
}

int64_t flatIndex(ArrayRef<int64_t> index, ArrayRef<int64_t> shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    flat = flat * shape[d] + index[d];
  return flat;
}

Index unflatten(int64_t flat, ArrayRef<int64_t> shape) {
  Index index(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return index;
}

/// The operand's index that broadcasting reads for the result's `index`.
std::optional<Index> broadcastIndex(Value operand, ArrayRef<int64_t> index) {
  auto shape = staticShape(operand);
  if (!shape || shape->size() > index.size())
    return std::nullopt;
  size_t lead = index.size() - shape->size();
  Index at(shape->size(), 0);
  for (size_t d = 0; d < shape->size(); ++d)
    at[d] = (*shape)[d] == 1 ? 0 : index[lead + d];
  return at;
}

std::optional<double> elementOfAttr(Attribute attr, ArrayRef<int64_t> index,
                                    ArrayRef<int64_t> shape) {
  auto dense = dyn_cast<DenseElementsAttr>(attr);
  if (!dense)
    return std::nullopt;
  int64_t flat = dense.isSplat() ? 0 : flatIndex(index, shape);
  Type element = dense.getElementType();
  if (isa<FloatType>(element))
    return (dense.isSplat() ? dense.getSplatValue<APFloat>()
                            : dense.getValues<APFloat>()[flat])
        .convertToDouble();
  if (auto integer = dyn_cast<IntegerType>(element)) {
    APInt v = dense.isSplat() ? dense.getSplatValue<APInt>()
                              : dense.getValues<APInt>()[flat];
    return integer.getWidth() == 1 ? double(v.getBoolValue())
                                   : double(v.getSExtValue());
  }
  return std::nullopt;
}

/// A value converted to an element type as a cast (or an integer
/// operation's result) stores it.
double convert(double x, Type to) {
  if (auto integer = dyn_cast<IntegerType>(to))
    return integer.getWidth() == 1 ? double(x != 0) : std::trunc(x);
  return x;
}

class Walker {
public:
  std::optional<double> at(Value v, ArrayRef<int64_t> index, int depth) {
    auto shape = staticShape(v);
    if (depth > kMaxDepth || ++visits > kMaxVisits || !shape ||
        shape->size() != index.size())
      return std::nullopt;
    for (size_t d = 0; d < index.size(); ++d)
      if (index[d] < 0 || index[d] >= (*shape)[d])
        return std::nullopt;
    Operation *op = v.getDefiningOp();
    if (!op)
      return std::nullopt;
    Type element = cast<RankedTensorType>(v.getType()).getElementType();
    ++depth;
    // An elementwise op: its operands at the broadcast indices.
    auto operand = [&](Value x) -> std::optional<double> {
      auto i = broadcastIndex(x, index);
      return i ? at(x, *i, depth) : std::nullopt;
    };
    auto binary = [&](auto fn) -> std::optional<double> {
      auto a = operand(op->getOperand(0)), b = operand(op->getOperand(1));
      if (!a || !b)
        return std::nullopt;
      return convert(fn(*a, *b), element);
    };
    // An op that only reshapes: the same element in row-major order.
    auto reshaped = [&](Value input) -> std::optional<double> {
      auto in = staticShape(input);
      if (!in)
        return std::nullopt;
      return at(input, unflatten(flatIndex(index, *shape), *in), depth);
    };
    return TypeSwitch<Operation *, std::optional<double>>(op)
        .Case([&](ConstantOp c) {
          return elementOfAttr(c.getValue(), index, *shape);
        })
        .Case([&](ParamLoadOp load) -> std::optional<double> {
          ParamOp w = load.getParamOp();
          if (!w || w.getTrainable() || !w.getValue())
            return std::nullopt;
          return elementOfAttr(*w.getValue(), index, *shape);
        })
        .Case([&](ConstantOfShapeOp c) {
          return elementOfAttr(c.getValue(), {}, {});
        })
        .Case([&](RangeOp r) -> std::optional<double> {
          auto start = at(r.getStart(), {}, depth);
          auto delta = at(r.getDelta(), {}, depth);
          if (!start || !delta || index.size() != 1)
            return std::nullopt;
          return convert(*start + double(index[0]) * *delta, element);
        })
        .Case([&](TriluOp t) -> std::optional<double> {
          if (index.size() < 2)
            return std::nullopt;
          // The attribute reads as unsigned: its value is signed.
          int64_t i = index[index.size() - 2], j = index.back(),
                  k = int64_t(t.getK());
          bool kept = t.getUpper() ? j - i >= k : j - i <= k;
          return kept ? at(t.getInput(), index, depth) : 0.0;
        })
        .Case<ReshapeOp, UnsqueezeOp, SqueezeOp, FlattenOp, IdentityOp>(
            [&](Operation *o) { return reshaped(o->getOperand(0)); })
        .Case([&](ExpandOp e) { return operand(e.getInput()); })
        .Case([&](TransposeOp t) -> std::optional<double> {
          ArrayRef<int64_t> perm = t.getPerm();
          if (perm.size() != index.size())
            return std::nullopt;
          Index in(index.size());
          for (size_t k = 0; k < perm.size(); ++k)
            in[size_t(perm[k])] = index[k];
          return at(t.getInput(), in, depth);
        })
        .Case([&](SliceOp s) { return sliced(s, index, depth); })
        .Case<CastOp, CastLikeOp>([&](Operation *o) -> std::optional<double> {
          auto x = operand(o->getOperand(0));
          return x ? std::optional<double>(convert(*x, element)) : std::nullopt;
        })
        .Case([&](NegOp) -> std::optional<double> {
          auto x = operand(op->getOperand(0));
          return x ? std::optional<double>(-*x) : std::nullopt;
        })
        .Case([&](NotOp) -> std::optional<double> {
          auto x = operand(op->getOperand(0));
          return x ? std::optional<double>(*x == 0) : std::nullopt;
        })
        .Case([&](WhereOp w) -> std::optional<double> {
          auto c = operand(w.getCondition());
          if (!c)
            return std::nullopt;
          return operand(*c != 0 ? w.getX() : w.getY());
        })
        .Case([&](AddOp) { return binary(std::plus<double>()); })
        .Case([&](SubOp) { return binary(std::minus<double>()); })
        .Case([&](MulOp) { return binary(std::multiplies<double>()); })
        .Case([&](DivOp) { return binary(std::divides<double>()); })
        .Case([&](MaxOp) {
          return binary([](double a, double b) { return std::max(a, b); });
        })
        .Case([&](MinOp) {
          return binary([](double a, double b) { return std::min(a, b); });
        })
        .Case([&](AndOp) {
          return binary([](double a, double b) { return a != 0 && b != 0; });
        })
        .Case([&](OrOp) {
          return binary([](double a, double b) { return a != 0 || b != 0; });
        })
        .Case([&](XorOp) {
          return binary(
              [](double a, double b) { return (a != 0) != (b != 0); });
        })
        .Case([&](EqualOp) { return binary(std::equal_to<double>()); })
        .Case([&](LessOp) { return binary(std::less<double>()); })
        .Case([&](LessOrEqualOp) { return binary(std::less_equal<double>()); })
        .Case([&](GreaterOp) { return binary(std::greater<double>()); })
        .Case([&](GreaterOrEqualOp) {
          return binary(std::greater_equal<double>());
        })
        .Default([](Operation *) { return std::nullopt; });
  }

private:
  int64_t visits = 0;

  /// ONNX Slice with constant starts, ends, axes and steps: each sliced
  /// axis reads start + index * step.
  std::optional<double> sliced(SliceOp s, ArrayRef<int64_t> index, int depth) {
    auto in = staticShape(s.getInput());
    if (!in)
      return std::nullopt;
    auto starts = ints(s.getStarts(), depth), axes = ints(s.getAxes(), depth),
         steps = ints(s.getSteps(), depth);
    if (!starts || !axes || !steps || starts->size() != axes->size() ||
        steps->size() != axes->size())
      return std::nullopt;
    Index at(index.begin(), index.end());
    int64_t rank = int64_t(in->size());
    for (size_t k = 0; k < axes->size(); ++k) {
      int64_t axis = (*axes)[k] < 0 ? (*axes)[k] + rank : (*axes)[k];
      int64_t step = (*steps)[k];
      if (axis < 0 || axis >= rank || step == 0)
        return std::nullopt;
      int64_t dim = (*in)[size_t(axis)], start = (*starts)[k];
      if (start < 0)
        start += dim;
      start = step > 0 ? std::clamp<int64_t>(start, 0, dim)
                       : std::clamp<int64_t>(start, 0, dim - 1);
      at[size_t(axis)] = start + index[size_t(axis)] * step;
    }
    return this->at(s.getInput(), at, depth);
  }

  /// A small integer operand's values (a slice's starts, axes, steps).
  std::optional<Index> ints(Value v, int depth) {
    auto shape = staticShape(v);
    if (!shape || shape->size() != 1 || (*shape)[0] > 16)
      return std::nullopt;
    Index out;
    for (int64_t k = 0; k < (*shape)[0]; ++k) {
      auto x = at(v, {k}, depth + 1);
      // A computed index (1 / 0, say) may be no int64.
      if (!x || !(std::abs(*x) < 0x1p62))
        return std::nullopt;
      out.push_back(int64_t(*x));
    }
    return out;
  }
};

} // namespace

std::optional<double> elementAt(Value v, ArrayRef<int64_t> index) {
  return Walker().at(v, index, 0);
}

} // namespace mt::train
