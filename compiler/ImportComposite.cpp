//===- ImportComposite.cpp - ONNX operators imported as their definition
//---===//
//
// Operators of the standard that are compositions of the train dialect's
// ops, imported as the formula that defines them (ONNX's own function
// bodies say the same): they need no kernel and no gradient rule of their
// own, and a new one is a handler and a row here. The reductions' forms of
// opsets 14-17 (axes an attribute) and 18-23 (axes an input) have a row
// each.
//
//===----------------------------------------------------------------------===//
#include "compiler/Importer.h"

#include <cmath>

namespace mt::importer {

using namespace mlir;
using namespace mt::train;

Value Importer::scalarLike(Value v, double x) {
  Type t = typeOf(v).getElementType();
  auto type = RankedTensorType::get({}, t);
  Attribute element = isa<FloatType>(t) ? Attribute(b.getFloatAttr(t, x))
                                        : Attribute(b.getIntegerAttr(t, x));
  auto attr = DenseElementsAttr::get(type, element);
  auto c = b.create<ConstantOp>(loc, cast<ElementsAttr>(attr));
  known[c] = attr;
  return c;
}

// Each handler builds its formula op by op with `resultOf(make<...>)`: a
// null value is an op that failed (make reported it with the node), after
// which the handler returns.

/// ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp and
/// ReduceMin: a ReduceSum (or ReduceMax) of an elementwise function of the
/// input. With noop_with_empty_axes and no axes, the function alone.
/// The product of x over `axes` (all when empty), kept as dims of 1 or
/// dropped: along each axis, the first half times the second (an odd
/// length padded with a one) until one is left, log2 of its length Muls of
/// Slices, so that the gradient is every other factor's product exactly,
/// zeros included (no logarithm).
Value Importer::productOver(Value x, ArrayRef<int64_t> axes, bool keep) {
  int64_t rank = typeOf(x).getRank();
  SmallVector<int64_t> all;
  for (int64_t d = 0; d < rank; ++d)
    if (axes.empty() || llvm::is_contained(axes, d) ||
        llvm::is_contained(axes, d - rank))
      all.push_back(d);
  Value v = x;
  for (int64_t axis : all) {
    while (v && typeOf(v).getDimSize(axis) > 1) {
      int64_t n = typeOf(v).getDimSize(axis);
      if (n % 2) { // a one at the end
        SmallVector<int64_t> shape(typeOf(v).getShape());
        shape[axis] = 1;
        Value one = constantOf(shape, typeOf(v).getElementType(),
                               [](int64_t) { return 1.0; });
        v = resultOf(make<ConcatOp>(
            {v, one}, {named("axis", b.getI64IntegerAttr(axis))}));
        ++n;
      }
      Value lo = v ? sliced(v, axis, 0, n / 2) : v;
      Value hi = lo ? sliced(v, axis, n / 2, n) : lo;
      v = hi ? resultOf(make<MulOp>({lo, hi})) : hi;
    }
  }
  if (!v || keep)
    return v;
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d)
    if (!llvm::is_contained(all, d))
      shape.push_back(typeOf(v).getDimSize(d));
  return reshaped(v, shape);
}

template <bool axesInput> LogicalResult Importer::importReduceComposite() {
  FailureOr<ReduceArgs> args = reduceArgs<axesInput>();
  if (failed(args))
    return failure();
  const SmallVector<int64_t> &axes = args->axes;
  bool keep = args->keep, reduce = !(axes.empty() && args->noop);
  auto sum = [&](auto tag, Value v, bool keepdims) -> Value {
    using OpTy = decltype(tag);
    if (!v || !reduce)
      return v;
    SmallVector<NamedAttribute> attrs{
        named("axes", b.getDenseI64ArrayAttr(axes))};
    if (keepdims)
      attrs.push_back(named("keepdims", b.getUnitAttr()));
    return resultOf(make<OpTy>({v}, attrs));
  };
  auto unary = [&](auto tag, Value v) -> Value {
    using OpTy = decltype(tag);
    return v ? resultOf(make<OpTy>({v})) : v;
  };
  Value x = in(0), out;
  StringRef op = opType();
  if (op == "ReduceL1") {
    out = sum(ReduceSumOp(), unary(AbsOp(), x), keep);
  } else if (op == "ReduceL2" || op == "ReduceSumSquare") {
    out = sum(ReduceSumOp(), resultOf(make<MulOp>({x, x})), keep);
    if (op == "ReduceL2")
      out = unary(SqrtOp(), out);
  } else if (op == "ReduceLogSum") {
    out = unary(LogOp(), sum(ReduceSumOp(), x, keep));
  } else if (op == "ReduceLogSumExp") {
    // max + log(sum(exp(x - max))): no exp overflows, and the gradients
    // through the two maxima cancel.
    Value m = sum(ReduceMaxOp(), x, true);
    Value d = m ? resultOf(make<SubOp>({x, m})) : m;
    Value l = unary(LogOp(), sum(ReduceSumOp(), unary(ExpOp(), d), keep));
    Value top = l ? sum(ReduceMaxOp(), x, keep) : l;
    out = top ? resultOf(make<AddOp>({l, top})) : top;
  } else if (op == "ReduceProd") {
    out = reduce ? productOver(x, axes, keep) : x;
  } else if (typeOf(x).getElementType().isInteger(1)) { // ReduceMin of
    // booleans: all, not(any(not x))
    out = unary(NotOp(), sum(ReduceMaxOp(), unary(NotOp(), x), keep));
  } else { // ReduceMin: -max(-x)
    out = unary(NegOp(), sum(ReduceMaxOp(), unary(NegOp(), x), keep));
  }
  return bindValue(out);
}

/// Mean: the inputs' sum (broadcast) over their count.
LogicalResult Importer::importMean() {
  if (failed(needInputs(1, 64)))
    return failure();
  Value acc = in(0);
  for (int i = 1; i < node->input_size() && acc; ++i)
    acc = resultOf(make<AddOp>({acc, in(i)}));
  if (!acc)
    return failure();
  return bind(make<DivOp>({acc, scalarLike(acc, double(node->input_size()))}));
}

/// MatMul as numpy's matmul: a 1-D operand is a matrix of one row (the
/// first) or one column (the second) for the product, and that dimension
/// is dropped from the result.
LogicalResult Importer::importMatMul() {
  if (failed(needInputs(2, 2)))
    return failure();
  Value a = in(0), b = in(1);
  if (!a || !b)
    return failure();
  ArrayRef<int64_t> as = typeOf(a).getShape(), bs = typeOf(b).getShape();
  if (as.empty() || bs.empty())
    return nodeError() << "MatMul of a scalar (rank 0) operand; the standard "
                          "needs rank 1 or more";
  if (as.size() >= 2 && bs.size() >= 2)
    return bind(make<MatMulOp>({a, b}));
  Value lhs = as.size() == 1 ? reshaped(a, {1, as[0]}) : a;
  Value rhs = bs.size() == 1 ? reshaped(b, {bs[0], 1}) : b;
  Value product = resultOf(make<MatMulOp>({lhs, rhs}));
  if (!product)
    return failure();
  SmallVector<int64_t> shape(typeOf(product).getShape());
  if (bs.size() == 1)
    shape.pop_back();
  if (as.size() == 1)
    shape.erase(shape.end() - (bs.size() == 1 ? 1 : 2));
  return bindValue(reshaped(product, shape));
}

/// Pow of a float by an integer exponent: the exponent as the base's float
/// type (it folds when constant), since the kernel computes in floats. An
/// integer base is as it is (its values fold, or the kernel refuses them).
LogicalResult Importer::importPow() {
  if (failed(needInputs(2, 2)))
    return failure();
  Value base = in(0), exponent = in(1);
  if (!base || !exponent)
    return failure();
  Type bt = typeOf(base).getElementType();
  if (isa<FloatType>(bt) && !isa<FloatType>(typeOf(exponent).getElementType()))
    exponent =
        resultOf(make<CastOp>({exponent}, {named("to", TypeAttr::get(bt))}));
  return exponent ? bind(make<PowOp>({base, exponent})) : failure();
}

/// `data` with update element u of `updates` written at the flat position
/// `at[u]` of the data, positions known when mtc compiles: each output
/// position reads the update written there, else the data. Where a
/// position is written several times, the k-th write of each is one more
/// layer: reduction none keeps the last, add, mul, max and min combine the
/// writes with the data in their order. Each layer is a Gather of the
/// flattened updates at a constant index map and a Where on a constant
/// mask, so that the data and the updates get their gradients by the rules
/// of those. Its cost: two constants of the data's size per layer (8 + 1
/// bytes an element), fine for masks and small tables, heavy for an
/// activation-sized scatter.
Value Importer::scatteredAt(Value data, Value updates, ArrayRef<int64_t> at,
                            StringRef reduction) {
  if (reduction != "none" && reduction != "add" && reduction != "mul" &&
      reduction != "max" && reduction != "min")
    return nodeError() << "reduction '" << reduction
                       << "' is not none, add, mul, max or min",
           Value();
  ArrayRef<int64_t> shape = typeOf(data).getShape();
  int64_t n = typeOf(data).getNumElements();
  // layers[j][p]: the update element of the j-th write to position p, or -1.
  SmallVector<SmallVector<int64_t>> layers;
  SmallVector<int64_t> writes(n, 0);
  for (auto [u, p] : llvm::enumerate(at)) {
    int64_t layer = reduction == "none" ? 0 : writes[p]++;
    if (layer == int64_t(layers.size()))
      layers.emplace_back(n, -1);
    layers[layer][p] = int64_t(u); // none: the last write stays
  }
  Value flat = reshaped(updates, {typeOf(updates).getNumElements()});
  Type i64 = b.getIntegerType(64);
  Value out = data;
  for (const SmallVector<int64_t> &layer : layers) {
    Value from = constantOf(shape, i64, [&](int64_t p) {
      return double(std::max<int64_t>(layer[p], 0));
    });
    Value written = constantOf(shape, b.getI1Type(), [&](int64_t p) {
      return layer[p] >= 0 ? 1.0 : 0.0;
    });
    Value picked =
        flat ? resultOf(make<GatherOp>({flat, from},
                                       {named("axis", b.getI64IntegerAttr(0))}))
             : flat;
    Value combined = picked;
    if (picked && reduction == "add")
      combined = resultOf(make<AddOp>({out, picked}));
    else if (picked && reduction == "mul")
      combined = resultOf(make<MulOp>({out, picked}));
    else if (picked && reduction == "max")
      combined = resultOf(make<MaxOp>({out, picked}));
    else if (picked && reduction == "min")
      combined = resultOf(make<MinOp>({out, picked}));
    out =
        combined ? resultOf(make<WhereOp>({written, combined, out})) : combined;
    if (!out)
      return Value();
  }
  return out;
}

/// ScatterND with constant indices (a slice or element assignment, as an
/// export of `x[idx] = y` or index_put_ has it): scatteredAt the flat
/// positions of its index tuples' slices.
LogicalResult Importer::importScatterND() {
  if (failed(needInputs(3, 3)))
    return failure();
  auto reduction = attrString("reduction", "none");
  if (failed(reduction))
    return failure();
  Value data = in(0), indices = in(1), updates = in(2);
  if (!data || !indices || !updates)
    return failure();
  auto idx = constInts(indices, "input 'indices'");
  if (failed(idx))
    return failure();
  ArrayRef<int64_t> shape = typeOf(data).getShape(),
                    ishape = typeOf(indices).getShape();
  int64_t k = ishape.empty() ? 0 : ishape.back();
  if (ishape.empty() || k < 1 || k > int64_t(shape.size()))
    return nodeError() << "ScatterND needs indices [..., k] with 1 <= k <= "
                          "the data's rank";
  // Elements of one slice (the dims past k).
  int64_t slice = 1;
  for (int64_t d = k; d < int64_t(shape.size()); ++d)
    slice *= shape[d];
  int64_t tuples = int64_t(idx->size()) / k;
  if (typeOf(updates).getNumElements() != tuples * slice)
    return nodeError() << "updates hold " << typeOf(updates).getNumElements()
                       << " elements; " << tuples
                       << " index tuples of slices of " << slice << " need "
                       << tuples * slice;
  SmallVector<int64_t> at;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t start = 0;
    for (int64_t d = 0; d < k; ++d) {
      int64_t i = (*idx)[t * k + d];
      if (i < -shape[d] || i >= shape[d])
        return nodeError() << "index " << i << " of tuple " << t
                           << " is outside dim " << d << " of size "
                           << shape[d];
      start = start * shape[d] + (i < 0 ? i + shape[d] : i);
    }
    for (int64_t e = 0; e < slice; ++e)
      at.push_back(start * slice + e);
  }
  return bindValue(scatteredAt(data, updates, at, *reduction));
}

/// ScatterElements with a reduction (add, mul, max, min: scatter_add_ and
/// index_add_ export so) and constant indices: scatteredAt each update's
/// position, its own with the axis's coordinate its index. Reduction none
/// is the SCATTER_ELEMENTS kernel's, indices data or not.
LogicalResult Importer::importScatterElements() {
  if (failed(needInputs(3, 3)))
    return failure();
  auto axis = attrInt("axis", 0);
  auto reduction = attrString("reduction", "none");
  if (failed(axis) || failed(reduction))
    return failure();
  Value data = in(0), indices = in(1), updates = in(2);
  if (!data || !indices || !updates)
    return failure();
  if (*reduction == "none")
    return bind(make<ScatterElementsOp>(
        {data, indices, updates}, {named("axis", b.getI64IntegerAttr(*axis))}));
  auto idx = constInts(indices, "input 'indices' of a ScatterElements with "
                                "reduction '" +
                                    *reduction + "'");
  if (failed(idx))
    return failure();
  ArrayRef<int64_t> shape = typeOf(data).getShape(),
                    ushape = typeOf(indices).getShape();
  int64_t rank = int64_t(shape.size());
  int64_t ax = *axis < 0 ? *axis + rank : *axis;
  if (ax < 0 || ax >= rank || int64_t(ushape.size()) != rank ||
      typeOf(updates).getShape() != ushape)
    return nodeError() << "ScatterElements needs indices and updates of one "
                          "shape, of the data's rank, and an axis inside it";
  SmallVector<int64_t> at(idx->size());
  for (int64_t u = 0; u < int64_t(idx->size()); ++u) {
    // u's coordinates in the updates, the axis's replaced by its index.
    int64_t rest = u, flatAt = 0, stride = 1;
    for (int64_t d = rank - 1; d >= 0; --d) {
      int64_t c = rest % ushape[d];
      rest /= ushape[d];
      if (d == ax) {
        int64_t i = (*idx)[u];
        if (i < -shape[d] || i >= shape[d])
          return nodeError() << "index " << i << " is outside dim " << d
                             << " of size " << shape[d];
        c = i < 0 ? i + shape[d] : i;
      }
      flatAt += c * stride;
      stride *= shape[d];
    }
    at[u] = flatAt;
  }
  return bindValue(scatteredAt(data, updates, at, *reduction));
}

/// PRelu: x < 0 ? slope x : x, the slope broadcast to x.
LogicalResult Importer::importPRelu() {
  if (failed(needInputs(2, 2)))
    return failure();
  Value x = in(0);
  Value below = resultOf(make<LessOp>({x, scalarLike(x, 0.0)}));
  Value scaled = below ? resultOf(make<MulOp>({x, in(1)})) : below;
  if (!scaled)
    return failure();
  return bind(make<WhereOp>({below, scaled, x}));
}

/// Mod: a - d q with q the quotient rounded toward zero (fmod = 1, C's
/// fmod) or down (fmod = 0, Python's %: the divisor's sign).
LogicalResult Importer::importMod() {
  if (failed(needInputs(2, 2)))
    return failure();
  auto fmod = attrInt("fmod", 0);
  if (failed(fmod))
    return failure();
  Value a = in(0), d = in(1);
  bool floats = isa<FloatType>(typeOf(a).getElementType());
  if (floats && !*fmod)
    return nodeError() << "Mod of floats needs fmod=1 (the ONNX standard's "
                          "rule)";
  Value q = resultOf(make<DivOp>({a, d}));
  if (q && floats) { // toward zero: q < 0 ? ceil(q) : floor(q)
    Value neg = resultOf(make<LessOp>({q, scalarLike(q, 0.0)}));
    Value up = neg ? resultOf(make<CeilOp>({q})) : neg;
    Value down = up ? resultOf(make<FloorOp>({q})) : up;
    q = down ? resultOf(make<WhereOp>({neg, up, down})) : down;
  } // an integer division truncates already
  Value p = q ? resultOf(make<MulOp>({d, q})) : q;
  Value r = p ? resultOf(make<SubOp>({a, p})) : p;
  if (!r || *fmod)
    return bindValue(r);
  // Python's sign: a nonzero remainder whose sign is not the divisor's
  // moves by one divisor.
  Value zero = scalarLike(r, 0.0);
  Value isZero = resultOf(make<EqualOp>({r, zero}));
  Value nonzero = isZero ? resultOf(make<NotOp>({isZero})) : isZero;
  Value rNeg = nonzero ? resultOf(make<LessOp>({r, zero})) : nonzero;
  Value dNeg = rNeg ? resultOf(make<LessOp>({d, zero})) : rNeg;
  Value differ = dNeg ? resultOf(make<XorOp>({rNeg, dNeg})) : dNeg;
  Value fix = differ ? resultOf(make<AndOp>({nonzero, differ})) : differ;
  Value moved = fix ? resultOf(make<AddOp>({r, d})) : fix;
  if (!moved)
    return failure();
  return bind(make<WhereOp>({fix, moved, r}));
}

/// An Einsum operand: its value and the label of each of its dims.
struct Labeled {
  Value v;
  std::string labels;
};

/// Einsum: each operand's labels summed out where nothing later reads
/// them, then the operands contracted pairwise, left to right, as one
/// batched MatMul each ([batch..., left, summed] x [batch..., summed,
/// right], the batch dims broadcast as MatMul broadcasts them), and the
/// result summed and transposed to the output's labels. "..." is a run of
/// labels of its own, aligned from the right across operands. A label
/// repeated in one operand (a diagonal) is refused.
LogicalResult Importer::importEinsum() {
  if (failed(needInputs(1, 64)))
    return failure();
  auto eq = attrString("equation", "");
  if (failed(eq))
    return failure();
  std::string equation;
  for (char c : *eq)
    if (c != ' ')
      equation += c;
  size_t arrow = equation.find("->");
  std::string lhs = equation.substr(0, arrow);
  SmallVector<StringRef> parts;
  StringRef(lhs).split(parts, ',');
  SmallVector<std::string> terms;
  for (StringRef t : parts)
    terms.push_back(t.str());
  if (int(terms.size()) != node->input_size())
    return nodeError() << "equation '" << *eq << "' has " << terms.size()
                       << " operands, the node " << node->input_size();
  // "..." becomes labels '0', '1', ... of the broadcast dims, right-aligned.
  int64_t ellipsis = 0;
  for (int i = 0; i < node->input_size(); ++i)
    if (terms[i].find("...") != std::string::npos)
      ellipsis = std::max<int64_t>(ellipsis, typeOf(in(i)).getRank() -
                                                 int64_t(terms[i].size() - 3));
  auto expand = [&](std::string t, int64_t dims) {
    size_t at = t.find("...");
    if (at == std::string::npos)
      return t;
    std::string run;
    for (int64_t k = ellipsis - dims; k < ellipsis; ++k)
      run += char('0' + k);
    return t.substr(0, at) + run + t.substr(at + 3);
  };
  SmallVector<Labeled> ops;
  llvm::StringMap<int> count;
  for (int i = 0; i < node->input_size(); ++i) {
    int64_t rank = typeOf(in(i)).getRank();
    bool dots = terms[i].find("...") != std::string::npos;
    std::string labels =
        expand(terms[i], dots ? rank - int64_t(terms[i].size() - 3) : 0);
    if (int64_t(labels.size()) != rank || ellipsis > 10)
      return nodeError() << "operand " << i << " has rank " << rank
                         << ", its term '" << terms[i] << "' does not";
    for (char c : labels) {
      if (llvm::count(labels, c) > 1)
        return nodeError() << "label '" << c << "' repeats in operand " << i
                           << " (a diagonal), which is not supported";
      ++count[std::string(1, c)];
    }
    ops.push_back({in(i), labels});
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = expand(equation.substr(arrow + 2), ellipsis);
  } else { // implicit: the broadcast dims, then the labels seen once, sorted
    for (int64_t k = 0; k < ellipsis; ++k)
      out += char('0' + k);
    std::string once;
    for (auto &e : count)
      if (e.second == 1 && !std::isdigit(e.first()[0]))
        once += e.first();
    llvm::sort(once);
    out += once;
  }
  auto shapeOf = [&](Value v) { return typeOf(v).getShape(); };
  auto transpose = [&](Labeled x, StringRef order) -> Labeled {
    if (!x.v || x.labels == order)
      return x;
    SmallVector<int64_t> perm;
    for (char c : order)
      perm.push_back(int64_t(x.labels.find(c)));
    return {transposed(x.v, perm), order.str()};
  };
  // Sums out of x the labels that `keep` lacks.
  auto sumOut = [&](Labeled x, StringRef keep) -> Labeled {
    SmallVector<int64_t> axes;
    std::string left;
    for (size_t d = 0; d < x.labels.size(); ++d) {
      if (keep.contains(x.labels[d]))
        left += x.labels[d];
      else
        axes.push_back(int64_t(d));
    }
    if (!x.v || axes.empty())
      return x;
    return {resultOf(make<ReduceSumOp>(
                {x.v}, {named("axes", b.getDenseI64ArrayAttr(axes))})),
            left};
  };
  // The labels any operand after `i`, or the output, reads.
  auto needed = [&](size_t i) {
    std::string n = out;
    for (size_t j = i + 1; j < ops.size(); ++j)
      n += ops[j].labels;
    return n;
  };
  Labeled acc =
      sumOut(ops[0], needed(0) + (ops.size() > 1 ? ops[1].labels : ""));
  for (size_t i = 1; i < ops.size() && acc.v; ++i) {
    std::string later = needed(i);
    Labeled a = acc, c = sumOut(ops[i], later + a.labels);
    std::string batch, left, summed, right;
    for (char l : a.labels) {
      bool inC = c.labels.find(l) != std::string::npos;
      bool kept = later.find(l) != std::string::npos;
      (inC ? (kept ? batch : summed) : left) += l;
    }
    for (char l : c.labels)
      if (a.labels.find(l) == std::string::npos)
        right += l;
    a = transpose(a, batch + left + summed);
    c = transpose(c, batch + summed + right);
    if (!a.v || !c.v)
      return failure();
    auto size = [&](const Labeled &x, char l) {
      return shapeOf(x.v)[x.labels.find(l)];
    };
    SmallVector<int64_t> aShape, cShape, rShape;
    int64_t m = 1, k = 1, n = 1;
    for (char l : batch) {
      aShape.push_back(size(a, l));
      cShape.push_back(size(c, l));
      int64_t sa = size(a, l), sc = size(c, l);
      if (sa != sc && sa != 1 && sc != 1)
        return nodeError() << "label '" << l << "' has sizes " << sa << " and "
                           << sc;
      rShape.push_back(std::max(sa, sc));
    }
    for (char l : left)
      m *= size(a, l), rShape.push_back(size(a, l));
    for (char l : summed) {
      if (size(a, l) != size(c, l))
        return nodeError() << "summed label '" << l << "' has sizes "
                           << size(a, l) << " and " << size(c, l);
      k *= size(a, l);
    }
    for (char l : right)
      n *= size(c, l), rShape.push_back(size(c, l));
    aShape.append({m, k});
    cShape.append({k, n});
    Value p = resultOf(
        make<MatMulOp>({reshaped(a.v, aShape), reshaped(c.v, cShape)}));
    acc = {reshaped(p, rShape), batch + left + right};
  }
  acc = transpose(sumOut(acc, out), out);
  if (!acc.v)
    return failure();
  if (acc.v == in(0)) // nothing to do: "ij->ij"
    return bind(make<IdentityOp>({acc.v}));
  return bindValue(acc.v);
}

/// Conv (N spatial dims, groups, strides, dilations, pads or auto_pad):
/// the input padded with zeros, one strided Slice per kernel position
/// (each [N, C, out...]) concatenated along the channels, and one batched
/// MatMul per group of the weight [G, M/G, K C/G] with those columns
/// [N, G, K C/G, out], then the bias. The slices are as many as the
/// kernel has positions.
LogicalResult Importer::importConv() {
  if (failed(needInputs(2, 3)))
    return failure();
  Value x = in(0), w = in(1), bias = in(2);
  ArrayRef<int64_t> xs = typeOf(x).getShape(), ws = typeOf(w).getShape();
  int64_t dims = int64_t(xs.size()) - 2;
  if (dims < 1 || ws.size() != xs.size())
    return nodeError() << "Conv needs an input [N, C, spatial...] and a "
                          "weight of the same rank";
  auto group = attrInt("group", 1);
  auto autoPad = attrString("auto_pad", "NOTSET");
  if (failed(group) || failed(autoPad))
    return failure();
  auto ints = [&](StringRef name, int64_t n, int64_t dflt) {
    SmallVector<int64_t> v = attrInts(name).value_or(SmallVector<int64_t>{});
    if (v.empty())
      v.assign(n, dflt);
    return v;
  };
  SmallVector<int64_t> strides = ints("strides", dims, 1),
                       dil = ints("dilations", dims, 1),
                       pads = ints("pads", 2 * dims, 0);
  SmallVector<int64_t> kernel(ws.begin() + 2, ws.end());
  int64_t n = xs[0], c = xs[1], m = ws[0], g = *group;
  if (int64_t(strides.size()) != dims || int64_t(dil.size()) != dims ||
      int64_t(pads.size()) != 2 * dims || g < 1 || c % g || m % g ||
      ws[1] != c / g)
    return nodeError() << "Conv's strides, dilations, pads or group do not "
                          "fit its input "
                       << typeOf(x) << " and weight " << typeOf(w);
  SmallVector<int64_t> out;
  for (int64_t d = 0; d < dims; ++d) {
    int64_t span = dil[d] * (kernel[d] - 1) + 1, size = xs[2 + d];
    if (*autoPad == "VALID") {
      pads[d] = pads[dims + d] = 0;
    } else if (*autoPad == "SAME_UPPER" || *autoPad == "SAME_LOWER") {
      int64_t total = std::max<int64_t>(
          0, ((size + strides[d] - 1) / strides[d] - 1) * strides[d] + span -
                 size);
      int64_t small = total / 2;
      pads[d] = *autoPad == "SAME_UPPER" ? small : total - small;
      pads[dims + d] = total - pads[d];
    } else if (*autoPad != "NOTSET") {
      return nodeError() << "auto_pad '" << *autoPad << "' is not one of "
                         << "NOTSET, VALID, SAME_UPPER, SAME_LOWER";
    }
    int64_t padded = size + pads[d] + pads[dims + d];
    if (padded < span)
      return nodeError() << "the kernel spans " << span << " of spatial dim "
                         << d << ", which has " << padded;
    out.push_back((padded - span) / strides[d] + 1);
  }
  Type element = typeOf(x).getElementType();
  // Zeros around the spatial dims.
  if (llvm::any_of(pads, [](int64_t p) { return p != 0; })) {
    SmallVector<int64_t> all(2 * (dims + 2), 0), shape(xs);
    for (int64_t d = 0; d < dims; ++d) {
      all[2 + d] = pads[d];
      all[dims + 4 + d] = pads[dims + d];
      shape[2 + d] += pads[d] + pads[dims + d];
    }
    FailureOr<Value> p = intConst(all);
    if (failed(p))
      return failure();
    x = resultOf(makeTyped<PadOp>({x, *p, scalarLike(x, 0.0)}, {},
                                  {RankedTensorType::get(shape, element)}));
    if (!x)
      return failure();
  }
  // One strided slice per kernel position, in row-major order.
  int64_t positions = 1;
  for (int64_t k : kernel)
    positions *= k;
  SmallVector<Value> columns;
  SmallVector<int64_t> axes, steps(strides);
  for (int64_t d = 0; d < dims; ++d)
    axes.push_back(2 + d);
  SmallVector<int64_t> sliceShape{n, c};
  sliceShape.append(out);
  for (int64_t pos = 0; pos < positions; ++pos) {
    SmallVector<int64_t> starts(dims), ends(dims);
    for (int64_t d = dims - 1, rest = pos; d >= 0; --d) {
      int64_t k = rest % kernel[d];
      rest /= kernel[d];
      starts[d] = k * dil[d];
      ends[d] = starts[d] + (out[d] - 1) * strides[d] + 1;
    }
    FailureOr<Value> sv = intConst(starts), ev = intConst(ends),
                     av = intConst(axes), tv = intConst(steps);
    if (failed(sv) || failed(ev) || failed(av) || failed(tv))
      return failure();
    Value col = resultOf(
        makeTyped<SliceOp>({x, *sv, *ev, *av, *tv}, {},
                           {RankedTensorType::get(sliceShape, element)}));
    if (!col)
      return failure();
    columns.push_back(col);
  }
  Value cols = columns.size() == 1
                   ? columns[0]
                   : resultOf(make<ConcatOp>(
                         columns, {named("axis", b.getI64IntegerAttr(1))}));
  // [N, K, G, C/G, out] -> [N, G, K, C/G, out] -> [N, G, K C/G, out].
  int64_t flat = 1;
  for (int64_t o : out)
    flat *= o;
  int64_t cg = c / g, mg = m / g;
  cols = reshaped(
      transposed(reshaped(cols, {n, positions, g, cg, flat}), {0, 2, 1, 3, 4}),
      {n, g, positions * cg, flat});
  // [M, C/G, K] -> [G, M/G, C/G, K] -> [G, M/G, K, C/G] -> [G, M/G, K C/G].
  Value wk =
      reshaped(transposed(reshaped(w, {g, mg, cg, positions}), {0, 1, 3, 2}),
               {g, mg, positions * cg});
  Value y = cols && wk ? resultOf(make<MatMulOp>({wk, cols})) : Value();
  SmallVector<int64_t> yShape{n, m};
  yShape.append(out);
  y = reshaped(y, yShape);
  if (y && bias) {
    SmallVector<int64_t> bShape(dims + 1, 1);
    bShape[0] = m;
    y = resultOf(make<AddOp>({y, reshaped(bias, bShape)}));
  }
  return bindValue(y);
}

//===----------------------------------------------------------------------===//
// Normalizations: (x - mean) / sqrt(var + eps) over some axes, then a scale
// and a bias per channel (dim 1).
//===----------------------------------------------------------------------===//

Value Importer::reduceOf(StringRef kind, Value v, ArrayRef<int64_t> axes) {
  if (!v)
    return v;
  SmallVector<NamedAttribute> attrs{named("axes", b.getDenseI64ArrayAttr(axes)),
                                    named("keepdims", b.getUnitAttr())};
  if (kind == "mean")
    return resultOf(make<ReduceMeanOp>({v}, attrs));
  return resultOf(make<ReduceSumOp>({v}, attrs));
}

Value Importer::normalized(Value x, ArrayRef<int64_t> axes, double eps) {
  Value m = reduceOf("mean", x, axes);
  Value d = m ? resultOf(make<SubOp>({x, m})) : m;
  Value var = d ? reduceOf("mean", resultOf(make<MulOp>({d, d})), axes) : d;
  Value sd = var ? resultOf(make<SqrtOp>(
                       {resultOf(make<AddOp>({var, scalarLike(var, eps)}))}))
                 : var;
  return sd ? resultOf(make<DivOp>({d, sd})) : sd;
}

Value Importer::reshaped(Value v, ArrayRef<int64_t> shape) {
  if (!v || typeOf(v).getShape() == shape)
    return v;
  FailureOr<Value> s = intConst(shape);
  if (failed(s))
    return Value();
  return resultOf(makeTyped<ReshapeOp>(
      {v, *s}, {}, {RankedTensorType::get(shape, typeOf(v).getElementType())}));
}

Value Importer::sliced(Value v, int64_t axis, int64_t from, int64_t to,
                       int64_t step) {
  if (!v)
    return v;
  SliceParams p;
  std::string err;
  if (!sliceShape(typeOf(v).getShape(), {from}, {to}, {axis}, {step}, p, err))
    return nodeError() << err, Value();
  FailureOr<Value> st = intConst({from}), en = intConst({to}),
                   ax = intConst({axis}), sp = intConst({step});
  if (failed(st) || failed(en) || failed(ax) || failed(sp))
    return Value();
  return resultOf(makeTyped<SliceOp>(
      {v, *st, *en, *ax, *sp}, {},
      {RankedTensorType::get(p.size, typeOf(v).getElementType())}));
}

Value Importer::transposed(Value v, ArrayRef<int64_t> perm) {
  return v ? resultOf(make<TransposeOp>(
                 {v}, {named("perm", b.getDenseI64ArrayAttr(perm))}))
           : v;
}

/// v [C] as [C, 1, ...] against x [N, C, spatial...]: a value per channel.
Value Importer::perChannel(Value v, Value x) {
  SmallVector<int64_t> shape(typeOf(x).getRank() - 1, 1);
  shape[0] = typeOf(v).getNumElements();
  return reshaped(v, shape);
}

/// y * scale + bias, each [C] broadcast per channel of y (null: none).
Value Importer::scaleShift(Value y, Value scale, Value bias) {
  if (y && scale)
    y = resultOf(make<MulOp>({y, perChannel(scale, y)}));
  if (y && bias)
    y = resultOf(make<AddOp>({y, perChannel(bias, y)}));
  return y;
}

/// The spatial dims of x [N, C, spatial...].
static SmallVector<int64_t> spatialAxes(int64_t rank) {
  SmallVector<int64_t> axes;
  for (int64_t d = 2; d < rank; ++d)
    axes.push_back(d);
  return axes;
}

/// InstanceNormalization: each channel of each sample over its spatial
/// dims.
LogicalResult Importer::importInstanceNormalization() {
  if (failed(needInputs(3, 3)))
    return failure();
  auto eps = attrFloat("epsilon", 1e-5f);
  if (failed(eps))
    return failure();
  Value x = in(0);
  if (typeOf(x).getRank() < 3)
    return nodeError() << "InstanceNormalization needs [N, C, spatial...]";
  return bindValue(scaleShift(
      normalized(x, spatialAxes(typeOf(x).getRank()), *eps), in(1), in(2)));
}

/// GroupNormalization: each group of channels of each sample, then a scale
/// and a bias per channel (opset 21; opset 18's form, with them per group,
/// is deprecated and not read).
LogicalResult Importer::importGroupNormalization() {
  if (failed(needInputs(3, 3)))
    return failure();
  auto eps = attrFloat("epsilon", 1e-5f);
  auto groups = attrInt("num_groups", std::nullopt);
  if (failed(eps) || failed(groups))
    return failure();
  Value x = in(0);
  ArrayRef<int64_t> xs = typeOf(x).getShape();
  int64_t g = *groups, c = xs.size() > 1 ? xs[1] : 0;
  if (xs.size() < 2 || g < 1 || c % g)
    return nodeError() << "num_groups " << g << " does not divide the " << c
                       << " channels";
  int64_t rest = typeOf(x).getNumElements() / (xs[0] * g);
  Value y = normalized(reshaped(x, {xs[0], g, rest}), {2}, *eps);
  return bindValue(scaleShift(reshaped(y, xs), in(1), in(2)));
}

/// BatchNormalization: by the running statistics (inference), or in
/// training_mode by the batch's over every dim but the channels, with the
/// running statistics updated as its outputs 1 and 2 (r momentum + batch
/// (1 - momentum), the population variance).
LogicalResult Importer::importBatchNormalization() {
  if (failed(needInputs(5, 5)))
    return failure();
  auto eps = attrFloat("epsilon", 1e-5f);
  auto momentum = attrFloat("momentum", 0.9f);
  auto training = attrInt("training_mode", 0);
  if (failed(eps) || failed(momentum) || failed(training))
    return failure();
  Value x = in(0);
  int64_t rank = typeOf(x).getRank();
  if (rank < 2)
    return nodeError() << "BatchNormalization needs [N, C, ...]";
  Value mean = perChannel(in(3), x), var = perChannel(in(4), x);
  SmallVector<int64_t> axes{0};
  axes.append(spatialAxes(rank));
  if (*training) {
    mean = reduceOf("mean", x, axes);
    Value d = mean ? resultOf(make<SubOp>({x, mean})) : mean;
    var = d ? reduceOf("mean", resultOf(make<MulOp>({d, d})), axes) : d;
  }
  Value d = mean ? resultOf(make<SubOp>({x, mean})) : mean;
  Value sd = var ? resultOf(make<SqrtOp>(
                       {resultOf(make<AddOp>({var, scalarLike(var, *eps)}))}))
                 : var;
  Value y = d && sd ? resultOf(make<DivOp>({d, sd})) : Value();
  y = scaleShift(y, in(1), in(2));
  if (!y)
    return failure();
  if (!*training)
    return bindValue(y);
  // Three outputs, from three ops.
  values[node->output(0)] = y;
  for (int i = 1; i <= 2; ++i) {
    if (i >= node->output_size() || node->output(i).empty())
      continue;
    Value running = in(2 + i), batch = i == 1 ? mean : var;
    batch = reshaped(batch, typeOf(running).getShape());
    Value kept =
        resultOf(make<MulOp>({running, scalarLike(running, *momentum)}));
    Value added =
        batch
            ? resultOf(make<MulOp>({batch, scalarLike(batch, 1.0 - *momentum)}))
            : batch;
    Value updated =
        kept && added ? resultOf(make<AddOp>({kept, added})) : Value();
    if (!updated)
      return failure();
    values[node->output(i)] = updated;
  }
  return success();
}

/// LpNormalization: x over its L1 or L2 norm along an axis.
LogicalResult Importer::importLpNormalization() {
  if (failed(needInputs(1, 1)))
    return failure();
  auto axis = attrInt("axis", -1), p = attrInt("p", 2);
  if (failed(axis) || failed(p))
    return failure();
  if (*p != 1 && *p != 2)
    return nodeError() << "p=" << *p << " is not 1 or 2";
  Value x = in(0);
  Value f =
      *p == 1 ? resultOf(make<AbsOp>({x})) : resultOf(make<MulOp>({x, x}));
  Value norm = reduceOf("sum", f, {*axis});
  if (norm && *p == 2)
    norm = resultOf(make<SqrtOp>({norm}));
  // A zero norm is a line of zeros, which stays 0 (ONNX's reference): the
  // division is by 1 there, so that no NaN reaches a gradient either.
  Value zero =
      norm ? resultOf(make<EqualOp>({norm, scalarLike(norm, 0.0)})) : norm;
  Value safe =
      zero ? resultOf(make<WhereOp>({zero, scalarLike(norm, 1.0), norm}))
           : zero;
  return bindValue(safe ? resultOf(make<DivOp>({x, safe})) : safe);
}

/// MeanVarianceNormalization: (x - mean) / (sqrt(mean(x^2) - mean^2) +
/// 1e-9) over `axes` (default 0, 2, 3), as ONNX's function body.
LogicalResult Importer::importMeanVarianceNormalization() {
  if (failed(needInputs(1, 1)))
    return failure();
  SmallVector<int64_t> axes =
      attrInts("axes").value_or(SmallVector<int64_t>{0, 2, 3});
  Value x = in(0);
  Value m = reduceOf("mean", x, axes);
  Value sq = reduceOf("mean", resultOf(make<MulOp>({x, x})), axes);
  Value var = m && sq
                  ? resultOf(make<SubOp>({sq, resultOf(make<MulOp>({m, m}))}))
                  : Value();
  Value sd = var ? resultOf(make<AddOp>(
                       {resultOf(make<SqrtOp>({var})), scalarLike(var, 1e-9)}))
                 : var;
  Value d = sd ? resultOf(make<SubOp>({x, m})) : sd;
  return bindValue(d ? resultOf(make<DivOp>({d, sd})) : d);
}

//===----------------------------------------------------------------------===//
// Masks and one-hot tensors
//===----------------------------------------------------------------------===//

/// A constant of `shape` and element type `t` with value f(i) at the flat
/// index i.
Value Importer::constantOf(ArrayRef<int64_t> shape, Type t,
                           llvm::function_ref<double(int64_t)> f) {
  auto type = RankedTensorType::get(shape, t);
  SmallVector<Attribute> elements;
  for (int64_t i = 0; i < type.getNumElements(); ++i)
    elements.push_back(isa<FloatType>(t)
                           ? Attribute(b.getFloatAttr(t, f(i)))
                           : Attribute(b.getIntegerAttr(t, int64_t(f(i)))));
  auto attr = DenseElementsAttr::get(type, elements);
  auto c = b.create<ConstantOp>(loc, cast<ElementsAttr>(attr));
  known[c] = attr;
  return c;
}

/// IsInf: x equal to +inf (detect_positive), or to -inf (detect_negative).
LogicalResult Importer::importIsInf() {
  if (failed(needInputs(1, 1)))
    return failure();
  auto pos = attrInt("detect_positive", 1), neg = attrInt("detect_negative", 1);
  if (failed(pos) || failed(neg))
    return failure();
  Value x = in(0);
  if (!isa<FloatType>(typeOf(x).getElementType()))
    return nodeError() << "IsInf of " << typeOf(x).getElementType()
                       << " (floats only)";
  auto equal = [&](double v) {
    return resultOf(make<EqualOp>({x, scalarLike(x, v)}));
  };
  Value up = *pos ? equal(INFINITY) : Value(),
        down = *neg ? equal(-INFINITY) : Value();
  if (*pos && *neg)
    return bindValue(up && down ? resultOf(make<OrOp>({up, down})) : Value());
  if (*pos || *neg)
    return bindValue(*pos ? up : down);
  // Neither: false everywhere.
  return bindValue(resultOf(make<EqualOp>({x, scalarLike(x, NAN)})));
}

/// EyeLike: a constant of the input's shape (2-D), ones on diagonal k.
LogicalResult Importer::importEyeLike() {
  if (failed(needInputs(1, 1)))
    return failure();
  auto k = attrInt("k", 0);
  auto dtype = attrInt("dtype", -1);
  if (failed(k) || failed(dtype))
    return failure();
  ArrayRef<int64_t> shape = typeOf(in(0)).getShape();
  Type t =
      *dtype < 0 ? typeOf(in(0)).getElementType() : elementTypeOf(ctx, *dtype);
  if (shape.size() != 2 || !t)
    return nodeError() << "EyeLike needs a 2-D input and a known dtype";
  int64_t cols = shape[1];
  return bindValue(constantOf(shape, t, [&](int64_t i) {
    return i % cols - i / cols == *k ? 1.0 : 0.0;
  }));
}

/// `axis` of a rank-`rank` result, negative from the end.
/// The float iota 0 .. n-1 along `axis` of a rank-`rank` tensor (size 1 in
/// the other dims).
Value Importer::iotaAlong(int64_t n, int64_t axis, int64_t rank) {
  SmallVector<int64_t> shape(rank, 1);
  shape[axis] = n;
  return constantOf(shape, b.getF32Type(), [](int64_t i) { return double(i); });
}

/// OneHot: the indices (negative from the end of depth) unsqueezed at axis
/// and compared in floats with 0 .. depth-1, then the mask chooses between
/// values[1] (on) and values[0] (off).
LogicalResult Importer::importOneHot() {
  if (failed(needInputs(3, 3)))
    return failure();
  auto axisAttr = attrInt("axis", -1);
  if (failed(axisAttr))
    return failure();
  auto depthValues = getIntValues(known.lookup(in(1)));
  std::optional<SmallVector<double>> depthFloats;
  if (!depthValues)
    depthFloats = getFloatValues(known.lookup(in(1)));
  if ((!depthValues || depthValues->size() != 1) &&
      (!depthFloats || depthFloats->size() != 1))
    return nodeError() << "OneHot's depth must be a constant scalar";
  int64_t depth = depthValues ? (*depthValues)[0] : int64_t((*depthFloats)[0]);
  Value idx = in(0), values = in(2);
  int64_t rank = typeOf(idx).getRank() + 1, axis = axisOf(*axisAttr, rank);
  if (depth < 1 || axis < 0 || axis >= rank ||
      typeOf(values).getNumElements() != 2)
    return nodeError() << "OneHot needs a depth >= 1, an axis inside rank "
                       << rank << " and two values";
  Value f = resultOf(
      make<CastOp>({idx}, {named("to", TypeAttr::get(b.getF32Type()))}));
  Value neg = f ? resultOf(make<LessOp>({f, scalarLike(f, 0.0)})) : f;
  Value wrapped =
      neg ? resultOf(make<AddOp>({f, scalarLike(f, double(depth))})) : neg;
  Value pos = wrapped ? resultOf(make<WhereOp>({neg, wrapped, f})) : wrapped;
  Value un = pos ? resultOf(make<UnsqueezeOp>(
                       {pos}, {named("axes", b.getDenseI64ArrayAttr({axis}))}))
                 : pos;
  Value mask =
      un ? resultOf(make<EqualOp>({un, iotaAlong(depth, axis, rank)})) : un;
  auto pick = [&](int64_t i) {
    FailureOr<Value> at = intConst({i});
    Value flat = reshaped(values, {2});
    return succeeded(at) && flat
               ? resultOf(make<GatherOp>(
                     {flat, *at}, {named("axis", b.getI64IntegerAttr(0))}))
               : Value();
  };
  Value on = mask ? pick(1) : mask, off = on ? pick(0) : on;
  return bindValue(off ? resultOf(make<WhereOp>({mask, on, off})) : off);
}

/// RotaryEmbedding (opset 23): the first rotary_embedding_dim (r) features
/// of each head rotated by the caches' angles, the rest kept. The input is
/// [B, H, S, D], or [B, S, H * D] with num_heads; the caches [P, r / 2]
/// read at position_ids [B, S], or [B, S, r / 2] without them. Halves
/// (x1, x2) of the rotated part, or its even and odd features
/// (interleaved), give x1 cos - x2 sin and x1 sin + x2 cos. The halves'
/// form is written as x cos' + rotate_half(x) sin' with the caches
/// doubled (cos' = [cos, cos]), the spelling the rotary fusion knows.
LogicalResult Importer::importRotaryEmbedding() {
  if (failed(needInputs(3, 4)))
    return failure();
  auto interleavedAttr = attrInt("interleaved", 0),
       dimAttr = attrInt("rotary_embedding_dim", 0),
       headsAttr = attrInt("num_heads", 0);
  if (failed(interleavedAttr) || failed(dimAttr) || failed(headsAttr))
    return failure();
  Value x = in(0), cos = in(1), sin = in(2), positions = in(3);
  auto xt = typeOf(x);
  if (!xt.hasStaticShape() || (xt.getRank() != 3 && xt.getRank() != 4))
    return nodeError() << "RotaryEmbedding's input must be [B, H, S, D] or "
                          "[B, S, H * D] of static shape";
  ArrayRef<int64_t> shape = xt.getShape();
  int64_t B = shape[0], heads = *headsAttr;
  // The heads' layout this computes in: [B, H, S, D] (4-D input) or
  // [B, S, H, D] (3-D input); the caches unsqueezed at the heads' axis.
  int64_t headAxis = xt.getRank() == 4 ? 1 : 2, S = shape[xt.getRank() - 2];
  if (xt.getRank() == 3) {
    S = shape[1];
    if (heads <= 0 || shape[2] % heads)
      return nodeError() << "RotaryEmbedding of a 3-D input needs num_heads "
                            "dividing its last dim ("
                         << shape[2] << ")";
  }
  int64_t D = xt.getRank() == 4 ? shape[3] : shape[2] / heads;
  int64_t r = *dimAttr == 0 ? D : *dimAttr;
  if (r <= 0 || r > D || r % 2)
    return nodeError() << "RotaryEmbedding's rotary_embedding_dim " << r
                       << " must be even and at most the head size " << D;
  int64_t half = r / 2;
  // The caches per position: [B, S, r / 2].
  auto rows = [&](Value cache) -> Value {
    if (!positions)
      return typeOf(cache).getShape() == ArrayRef<int64_t>{B, S, half}
                 ? cache
                 : Value();
    if (typeOf(cache).getRank() != 2 || typeOf(cache).getDimSize(1) != half)
      return Value();
    return resultOf(make<GatherOp>({cache, positions},
                                   {named("axis", b.getI64IntegerAttr(0))}));
  };
  Value c = rows(cos), s = c ? rows(sin) : c;
  if (!c || !s || typeOf(c).getShape() != ArrayRef<int64_t>{B, S, half} ||
      typeOf(s).getShape() != typeOf(c).getShape())
    return nodeError() << "RotaryEmbedding's caches must be [positions, "
                       << half << "] with position_ids [" << B << ", " << S
                       << "], or [" << B << ", " << S << ", " << half
                       << "] without";
  auto unsqueezed = [&](Value v) {
    return v ? resultOf(make<UnsqueezeOp>(
                   {v}, {named("axes", b.getDenseI64ArrayAttr({headAxis}))}))
             : v;
  };
  c = unsqueezed(c);
  s = unsqueezed(s);
  Value heads4 = xt.getRank() == 4 ? x : reshaped(x, {B, S, heads, D});
  // Features [from, to) by `step` along the last axis.
  auto features = [&](Value v, int64_t from, int64_t to, int64_t step) {
    return sliced(v, -1, from, to, step);
  };
  auto concat = [&](ValueRange parts) -> Value {
    if (llvm::any_of(parts, [](Value v) { return !v; }))
      return Value();
    return resultOf(
        make<ConcatOp>(parts, {named("axis", b.getI64IntegerAttr(-1))}));
  };
  auto binary = [&](auto tag, Value l, Value r) -> Value {
    using OpTy = decltype(tag);
    return l && r ? resultOf(make<OpTy>({l, r})) : Value();
  };
  Value rot = r == D ? heads4 : features(heads4, 0, r, 1);
  Value rotated;
  if (*interleavedAttr) {
    Value x1 = features(rot, 0, r, 2), x2 = features(rot, 1, r, 2);
    Value real =
        binary(SubOp(), binary(MulOp(), x1, c), binary(MulOp(), x2, s));
    Value imag =
        binary(AddOp(), binary(MulOp(), x1, s), binary(MulOp(), x2, c));
    // Back to even and odd features: [.., r / 2, 2] flattened.
    SmallVector<int64_t> pairs(typeOf(rot).getShape());
    pairs.back() = half;
    pairs.push_back(1);
    Value pair = concat({reshaped(real, pairs), reshaped(imag, pairs)});
    rotated = pair ? reshaped(pair, typeOf(rot).getShape()) : pair;
  } else {
    Value x1 = features(rot, 0, half, 1), x2 = features(rot, half, r, 1);
    Value negX2 = x2 ? resultOf(make<NegOp>({x2})) : x2;
    rotated = binary(AddOp(), binary(MulOp(), rot, concat({c, c})),
                     binary(MulOp(), concat({negX2, x1}), concat({s, s})));
  }
  Value out = r == D ? rotated : concat({rotated, features(heads4, r, D, 1)});
  return bindValue(xt.getRank() == 4 ? out : reshaped(out, shape));
}

/// Hardmax: 1 at the first maximum along the axis, 0 elsewhere (TopK of
/// one's index compared with the axis' positions).
LogicalResult Importer::importHardmax() {
  if (failed(needInputs(1, 1)))
    return failure();
  auto axisAttr = attrInt("axis", -1);
  if (failed(axisAttr))
    return failure();
  Value x = in(0);
  int64_t rank = typeOf(x).getRank(), axis = axisOf(*axisAttr, rank);
  if (axis < 0 || axis >= rank || !isa<FloatType>(typeOf(x).getElementType()))
    return nodeError() << "Hardmax needs floats and an axis inside rank "
                       << rank;
  FailureOr<Operation *> top =
      make<TopKOp>({x}, {named("k", b.getI64IntegerAttr(1)),
                         named("axis", b.getI64IntegerAttr(axis))});
  if (failed(top))
    return failure();
  Value idx = resultOf(make<CastOp>(
      {(*top)->getResult(1)}, {named("to", TypeAttr::get(b.getF32Type()))}));
  int64_t n = typeOf(x).getShape()[axis];
  Value mask =
      idx ? resultOf(make<EqualOp>({idx, iotaAlong(n, axis, rank)})) : idx;
  return bindValue(
      mask ? resultOf(make<CastOp>(
                 {mask},
                 {named("to", TypeAttr::get(typeOf(x).getElementType()))}))
           : mask);
}

/// The negative log-likelihood of `logProb` [N, C, ...] at `target` [N,
/// ...]: -logProb[n, target[n, ...], ...] times the target's class weight
/// (1 without `weight`), 0 where the target is `ignore`; reduction none,
/// sum, or mean (over the weights of the targets not ignored). The targets
/// are compared and masked in floats, so that every step has a device
/// kernel. Null (said) when a step fails.
Value Importer::nllLoss(Value logProb, Value target, Value weight,
                        std::optional<int64_t> ignore, StringRef reduction) {
  Type f32 = b.getF32Type();
  auto castTo = [&](Value v, Type t) {
    return v ? resultOf(make<CastOp>({v}, {named("to", TypeAttr::get(t))})) : v;
  };
  Value tf = castTo(target, f32);
  // 1 where the target counts, 0 where it is ignored.
  Value keep;
  if (ignore) {
    Value same =
        tf ? resultOf(make<EqualOp>({tf, scalarLike(tf, double(*ignore))}))
           : tf;
    Value counts = same ? resultOf(make<NotOp>({same})) : same;
    keep = castTo(counts, f32);
  } else {
    keep = tf ? resultOf(make<AddOp>(
                    {resultOf(make<MulOp>({tf, scalarLike(tf, 0.0)})),
                     scalarLike(tf, 1.0)}))
              : tf;
  }
  // An ignored target reads class 0 (then weighs 0).
  Value safe = keep ? castTo(resultOf(make<MulOp>({tf, keep})),
                             typeOf(target).getElementType())
                    : keep;
  Value at = safe ? resultOf(make<UnsqueezeOp>(
                        {safe}, {named("axes", b.getDenseI64ArrayAttr({1}))}))
                  : safe;
  Value picked =
      at ? resultOf(make<GatherElementsOp>(
               {logProb, at}, {named("axis", b.getI64IntegerAttr(1))}))
         : at;
  picked = picked ? resultOf(make<SqueezeOp>(
                        {picked}, {named("axes", b.getDenseI64ArrayAttr({1}))}))
                  : picked;
  Value w = keep;
  if (w && weight) {
    Value classW = resultOf(make<GatherOp>(
        {weight, safe}, {named("axis", b.getI64IntegerAttr(0))}));
    w = classW ? resultOf(make<MulOp>(
                     {classW, castTo(keep, typeOf(classW).getElementType())}))
               : classW;
  }
  if (!picked || !w)
    return Value();
  if (typeOf(w).getElementType() != typeOf(picked).getElementType())
    w = castTo(w, typeOf(picked).getElementType());
  Value loss =
      w ? resultOf(make<NegOp>({resultOf(make<MulOp>({picked, w}))})) : w;
  if (!loss || reduction == "none")
    return loss;
  SmallVector<int64_t> all;
  for (int64_t d = 0; d < typeOf(loss).getRank(); ++d)
    all.push_back(d);
  auto total = [&](Value v) {
    return resultOf(
        make<ReduceSumOp>({v}, {named("axes", b.getDenseI64ArrayAttr(all))}));
  };
  Value sum = total(loss);
  if (!sum || reduction == "sum")
    return sum;
  Value count = total(w);
  return count ? resultOf(make<DivOp>({sum, count})) : count;
}

/// The ignore_index attribute, when the node has one.
FailureOr<std::optional<int64_t>> Importer::ignoreIndex() {
  if (!attr("ignore_index"))
    return std::optional<int64_t>();
  auto index = attrInt("ignore_index", std::nullopt);
  if (failed(index))
    return failure();
  return std::optional<int64_t>(*index);
}

/// The reduction attribute: mean (the default), sum or none.
FailureOr<std::string> Importer::lossReduction() {
  auto reduction = attrString("reduction", "mean");
  if (failed(reduction))
    return failure();
  if (*reduction != "mean" && *reduction != "sum" && *reduction != "none")
    return nodeError() << "reduction '" << *reduction
                       << "' is not mean, sum or none";
  return *reduction;
}

/// NegativeLogLikelihoodLoss: nllLoss of its input; of a log-softmax over
/// the classes (`nll_loss(log_softmax(logits))`, reshaped between or not),
/// the softmax cross-entropy of the logits, which is the same number and
/// the fused op's form when its mean is asked for.
LogicalResult Importer::importNegativeLogLikelihoodLoss() {
  if (failed(needInputs(2, 3)))
    return failure();
  auto reduction = lossReduction();
  auto ignore = ignoreIndex();
  if (failed(reduction) || failed(ignore))
    return failure();
  Value x = in(0), target = in(1);
  int64_t rank = typeOf(x).getRank();
  if (rank < 2 || typeOf(target).getRank() != rank - 1)
    return nodeError() << "NegativeLogLikelihoodLoss needs input [N, C, "
                          "...] and target [N, ...]";
  Value logits;
  Value v = x;
  while (auto rs = v.getDefiningOp<ReshapeOp>())
    v = rs.getInput();
  if (auto ls = v.getDefiningOp<LogSoftmaxOp>(); ls && rank <= 3) {
    int64_t lsRank = typeOf(ls).getRank(), axis = int64_t(ls.getAxis());
    if (axis < 0)
      axis += lsRank;
    // The classes are the log-softmax's axis before and dim 1 after: the
    // last of both when x is [N, C], or x is the log-softmax itself.
    int64_t classes = typeOf(x).getDimSize(1);
    if (v == x ? axis == 1
               : rank == 2 && axis == lsRank - 1 &&
                     typeOf(ls).getShape().back() == classes)
      logits = reshaped(ls.getInput(), typeOf(x).getShape());
  }
  if (logits && *reduction == "mean" && !in(2)) {
    SmallVector<NamedAttribute> attrs{
        named("reduction", ReductionAttr::get(&ctx, Reduction::Mean))};
    if (*ignore)
      attrs.push_back(named("ignore_index", b.getI64IntegerAttr(**ignore)));
    return bind(make<SoftmaxCrossEntropyLossOp>({logits, target}, attrs));
  }
  return bindValue(nllLoss(x, target, in(2), *ignore, *reduction));
}

/// SoftmaxCrossEntropyLoss: the one op in the form the fused cross-entropy
/// takes (a mean over [N, C] or [N, C, d] scores, no class weights, no
/// log_prob output); otherwise its formula, nllLoss of LogSoftmax over the
/// classes (dim 1), with log_prob bound when it is asked for.
LogicalResult Importer::importSoftmaxCrossEntropyLoss() {
  if (failed(needInputs(2, 3)))
    return failure();
  auto reduction = lossReduction();
  auto ignore = ignoreIndex();
  if (failed(reduction) || failed(ignore))
    return failure();
  Value scores = in(0), labels = in(1), weight = in(2);
  int64_t rank = typeOf(scores).getRank();
  if (rank < 2 || typeOf(labels).getRank() != rank - 1)
    return nodeError() << "SoftmaxCrossEntropyLoss needs scores [N, C, ...] "
                          "and labels [N, ...]";
  bool logProbUsed = node->output_size() > 1 && !node->output(1).empty();
  if (*reduction == "mean" && !weight && !logProbUsed && rank <= 3) {
    SmallVector<NamedAttribute> attrs{
        named("reduction", ReductionAttr::get(&ctx, Reduction::Mean))};
    if (*ignore)
      attrs.push_back(named("ignore_index", b.getI64IntegerAttr(**ignore)));
    return bind(make<SoftmaxCrossEntropyLossOp>({scores, labels}, attrs));
  }
  Value logProb = resultOf(
      make<LogSoftmaxOp>({scores}, {named("axis", b.getI64IntegerAttr(1))}));
  Value loss =
      logProb ? nllLoss(logProb, labels, weight, *ignore, *reduction) : logProb;
  if (!loss)
    return failure();
  values[node->output(0)] = loss;
  if (logProbUsed)
    values[node->output(1)] = logProb;
  return success();
}

ArrayRef<OpRule> compositeRules() {
  static const OpRule rules[] = {
      {"MatMul", kMinOpset, kMaxOpset, &Importer::importMatMul},
      {"Pow", kMinOpset, kMaxOpset, &Importer::importPow},
      {"ScatterND", kMinOpset, kMaxOpset, &Importer::importScatterND},
      {"ScatterElements", kMinOpset, kMaxOpset,
       &Importer::importScatterElements},
      {"ReduceL1", kMinOpset, 17, &Importer::importReduceComposite<false>},
      {"ReduceL1", 18, kMaxOpset, &Importer::importReduceComposite<true>},
      {"ReduceL2", kMinOpset, 17, &Importer::importReduceComposite<false>},
      {"ReduceL2", 18, kMaxOpset, &Importer::importReduceComposite<true>},
      {"ReduceSumSquare", kMinOpset, 17,
       &Importer::importReduceComposite<false>},
      {"ReduceSumSquare", 18, kMaxOpset,
       &Importer::importReduceComposite<true>},
      {"ReduceProd", kMinOpset, 17, &Importer::importReduceComposite<false>},
      {"ReduceProd", 18, kMaxOpset, &Importer::importReduceComposite<true>},
      {"ReduceLogSum", kMinOpset, 17, &Importer::importReduceComposite<false>},
      {"ReduceLogSum", 18, kMaxOpset, &Importer::importReduceComposite<true>},
      {"ReduceLogSumExp", kMinOpset, 17,
       &Importer::importReduceComposite<false>},
      {"ReduceLogSumExp", 18, kMaxOpset,
       &Importer::importReduceComposite<true>},
      {"ReduceMin", kMinOpset, 17, &Importer::importReduceComposite<false>},
      {"ReduceMin", 18, kMaxOpset, &Importer::importReduceComposite<true>},
      {"Sum", kMinOpset, kMaxOpset, &Importer::importVariadic<AddOp>},
      {"Mean", kMinOpset, kMaxOpset, &Importer::importMean},
      {"PRelu", kMinOpset, kMaxOpset, &Importer::importPRelu},
      {"Mod", kMinOpset, kMaxOpset, &Importer::importMod},
      {"Einsum", kMinOpset, kMaxOpset, &Importer::importEinsum},
      {"Conv", kMinOpset, kMaxOpset, &Importer::importConv},
      {"InstanceNormalization", kMinOpset, kMaxOpset,
       &Importer::importInstanceNormalization},
      {"GroupNormalization", 21, kMaxOpset,
       &Importer::importGroupNormalization},
      {"BatchNormalization", kMinOpset, kMaxOpset,
       &Importer::importBatchNormalization},
      {"LpNormalization", kMinOpset, kMaxOpset,
       &Importer::importLpNormalization},
      {"MeanVarianceNormalization", kMinOpset, kMaxOpset,
       &Importer::importMeanVarianceNormalization},
      {"IsInf", kMinOpset, kMaxOpset, &Importer::importIsInf},
      {"EyeLike", kMinOpset, kMaxOpset, &Importer::importEyeLike},
      {"OneHot", kMinOpset, kMaxOpset, &Importer::importOneHot},
      {"RotaryEmbedding", 23, kMaxOpset, &Importer::importRotaryEmbedding},
      {"Hardmax", kMinOpset, kMaxOpset, &Importer::importHardmax},
      {"NegativeLogLikelihoodLoss", kMinOpset, kMaxOpset,
       &Importer::importNegativeLogLikelihoodLoss},
      {"SoftmaxCrossEntropyLoss", kMinOpset, kMaxOpset,
       &Importer::importSoftmaxCrossEntropyLoss}};
  return rules;
}

} // namespace mt::importer
