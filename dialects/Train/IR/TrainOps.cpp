//===- TrainOps.cpp - type inference, verifiers and folds of train ops ----===//
#include "dialects/Train/IR/TrainOps.h"

#include "dialects/Train/IR/ConstEval.h"
#include "dialects/Train/IR/ShapeInference.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OpImplementation.h"

#include <cmath>

using namespace mlir;
using namespace mt::train;

namespace {

RankedTensorType rankedType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// A type-inference error under construction: `return fail(loc, "x") << y;`
/// reports at `loc` when a location was given and fails either way.
class Failure {
public:
  Failure(std::optional<Location> loc, const Twine &msg)
      : loc(loc), msg(msg.str()) {}
  template <typename T> Failure &operator<<(const T &v) {
    llvm::raw_string_ostream(msg) << v;
    return *this;
  }
  operator LogicalResult() const { return emitOptionalError(loc, msg); }

private:
  std::optional<Location> loc;
  std::string msg;
};

Failure fail(std::optional<Location> loc, const Twine &msg) {
  return Failure(loc, msg);
}

/// result = tensor<shape x elementType>.
LogicalResult push(SmallVectorImpl<Type> &types, ArrayRef<int64_t> shape,
                   Type elementType) {
  types.push_back(RankedTensorType::get(shape, elementType));
  return success();
}

LogicalResult sameAs(SmallVectorImpl<Type> &types, Value v) {
  types.push_back(v.getType());
  return success();
}

/// Values of `v` when it is defined by a constant.
std::optional<SmallVector<int64_t>> constInts(Value v) {
  Attribute attr;
  if (!matchPattern(v, m_Constant(&attr)))
    return std::nullopt;
  return getIntValues(attr);
}

LogicalResult checkResult(Operation *op, ArrayRef<int64_t> expected) {
  auto actual = cast<RankedTensorType>(op->getResult(0).getType()).getShape();
  if (actual != expected)
    return op->emitOpError("result shape ")
           << shapeStr(actual) << " differs from the inferred "
           << shapeStr(expected);
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Weights and constants
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  if (getSymName().empty())
    return emitOpError("needs a name");
  // Parts: runs of the weight's elements that tile it, each once, all or
  // none of them with a place in a file.
  SmallVector<std::pair<int64_t, int64_t>> runs;
  int located = 0;
  ArrayAttr parts = getPartsAttr();
  for (Attribute a : parts ? parts.getValue() : ArrayRef<Attribute>()) {
    auto part = cast<DictionaryAttr>(a);
    auto name = part.getAs<StringAttr>("name");
    auto at = part.getAs<IntegerAttr>("at");
    auto shape = part.getAs<DenseI64ArrayAttr>("shape");
    if (!name || name.getValue().empty() || !at || at.getInt() < 0 || !shape)
      return emitOpError("part ") << part << " needs name, at and shape";
    int64_t n = 1;
    for (int64_t d : shape.asArrayRef()) {
      if (d < 1)
        return emitOpError("part '")
               << name.getValue() << "' has an empty shape";
      n *= d;
    }
    runs.push_back({at.getInt(), n});
    located += part.get("file") && part.get("offset") && part.get("length");
  }
  if (!runs.empty()) {
    llvm::sort(runs);
    int64_t covered = 0;
    for (auto [at, n] : runs)
      covered = at == covered ? covered + n : -1;
    if (covered != getTensorType().getNumElements())
      return emitOpError("parts are not its ")
             << getTensorType().getNumElements() << " elements, each once";
    if (getSavedAs())
      return emitOpError("has both saved_as and parts");
    if (located != 0 && located != int(runs.size()))
      return emitOpError("has parts with and without a file");
    if (located && (getFile() || getDataTransposed()))
      return emitOpError("is read from its parts and has a file of its own");
  }
  bool fromFile = getSource() == WeightSource::External ||
                  getSource() == WeightSource::Safetensors;
  if (fromFile && !located && (!getFile() || !getOffset() || !getLength()))
    return emitOpError("of source ")
           << stringifyWeightSource(getSource())
           << " needs file, offset and length, or parts that have them";
  if (getValue()) {
    if (getTrainable())
      return emitOpError("is trainable and must not carry its value");
    if (cast<ShapedType>(getValue()->getType()) != getType())
      return emitOpError("value type differs from its type");
  }
  if (getDataTransposed() && getTensorType().getRank() != 2)
    return emitOpError("with data_transposed must be 2-D");
  return success();
}

ParamOp ParamLoadOp::getParamOp() {
  return SymbolTable::lookupNearestSymbolFrom<ParamOp>(*this, getParamAttr());
}

LogicalResult
ParamLoadOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto param =
      symbolTable.lookupNearestSymbolFrom<ParamOp>(*this, getParamAttr());
  if (!param)
    return emitOpError("names no train.param: @") << getParam();
  if (param.getType() != getType())
    return emitOpError("of a ")
           << param.getType() << " parameter has type " << getType();
  return success();
}

LogicalResult ConstantOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> loc,
                                           Adaptor a,
                                           SmallVectorImpl<Type> &types) {
  auto type = dyn_cast<RankedTensorType>(a.getValue().getType());
  if (!type)
    return fail(loc, "constant value must be a ranked tensor");
  types.push_back(type);
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

//===----------------------------------------------------------------------===//
// Type inference
//===----------------------------------------------------------------------===//

#define MT_INFER(OP)                                                           \
  LogicalResult OP::inferReturnTypes(MLIRContext *ctx,                         \
                                     std::optional<Location> loc, Adaptor a,   \
                                     SmallVectorImpl<Type> &types)

#define MT_INFER_SAME(OP)                                                      \
  MT_INFER(OP) { return sameAs(types, a.getInput()); }

MT_INFER(IsNaNOp) {
  return push(types, rankedType(a.getInput()).getShape(),
              IntegerType::get(ctx, 1));
}
MT_INFER_SAME(GeluOp)
MT_INFER_SAME(UnaryGradOp)
MT_INFER_SAME(DropoutOp)
MT_INFER_SAME(CumSumOp)
MT_INFER_SAME(TriluOp)
MT_INFER_SAME(ActivationOp)

static LogicalResult inferBroadcast(std::optional<Location> loc, Value lhs,
                                    Value rhs, Type elementType,
                                    SmallVectorImpl<Type> &types) {
  auto l = rankedType(lhs), r = rankedType(rhs);
  if (l.getElementType() != r.getElementType())
    return fail(loc, "operand element types differ: ")
           << l.getElementType() << " and " << r.getElementType();
  Shape out;
  std::string err;
  if (!broadcastShapes(l.getShape(), r.getShape(), out, err))
    return fail(loc, err);
  return push(types, out, elementType ? elementType : l.getElementType());
}

#define MT_INFER_BINARY(OP)                                                    \
  MT_INFER(OP) {                                                               \
    return inferBroadcast(loc, a.getLhs(), a.getRhs(), Type(), types);         \
  }
#define MT_INFER_COMPARE(OP)                                                   \
  MT_INFER(OP) {                                                               \
    return inferBroadcast(loc, a.getLhs(), a.getRhs(),                         \
                          IntegerType::get(ctx, 1), types);                    \
  }
MT_INFER_BINARY(AddOp)
MT_INFER_BINARY(SubOp)
MT_INFER_BINARY(MulOp)
MT_INFER_BINARY(DivOp)
MT_INFER_BINARY(MaxOp)
MT_INFER_BINARY(MinOp)
MT_INFER_BINARY(AndOp)
MT_INFER_BINARY(OrOp)
MT_INFER_BINARY(XorOp)
MT_INFER_COMPARE(EqualOp)
MT_INFER_COMPARE(LessOp)
MT_INFER_COMPARE(LessOrEqualOp)
MT_INFER_COMPARE(GreaterOp)
MT_INFER_COMPARE(GreaterOrEqualOp)

MT_INFER(PowOp) {
  // Pow's exponent may have another element type; the result follows the base.
  Shape out;
  std::string err;
  auto l = rankedType(a.getLhs());
  if (!broadcastShapes(l.getShape(), rankedType(a.getRhs()).getShape(), out,
                       err))
    return fail(loc, err);
  return push(types, out, l.getElementType());
}

MT_INFER(WhereOp) {
  auto x = rankedType(a.getX()), y = rankedType(a.getY());
  if (x.getElementType() != y.getElementType())
    return fail(loc, "where branches differ in element type");
  Shape xy, out;
  std::string err;
  if (!broadcastShapes(x.getShape(), y.getShape(), xy, err) ||
      !broadcastShapes(rankedType(a.getCondition()).getShape(), xy, out, err))
    return fail(loc, err);
  return push(types, out, x.getElementType());
}

MT_INFER(CastOp) {
  return push(types, rankedType(a.getInput()).getShape(), a.getTo());
}

MT_INFER(CastLikeOp) {
  return push(types, rankedType(a.getInput()).getShape(),
              rankedType(a.getTarget()).getElementType());
}

MT_INFER(MatMulOp) {
  auto l = rankedType(a.getLhs()), r = rankedType(a.getRhs());
  if (l.getElementType() != r.getElementType())
    return fail(loc, "matmul operand element types differ");
  Shape out;
  std::string err;
  if (!matmulShape(l.getShape(), r.getShape(), out, err))
    return fail(loc, err);
  return push(types, out, l.getElementType());
}

MT_INFER(GemmOp) {
  auto at = rankedType(a.getA()), bt = rankedType(a.getB());
  if (at.getRank() != 2 || bt.getRank() != 2)
    return fail(loc, "gemm operands must be 2-D");
  int64_t m = at.getDimSize(a.getTransA() ? 1 : 0);
  int64_t k = at.getDimSize(a.getTransA() ? 0 : 1);
  int64_t k2 = bt.getDimSize(a.getTransB() ? 1 : 0);
  int64_t n = bt.getDimSize(a.getTransB() ? 0 : 1);
  if (k != k2)
    return fail(loc, "gemm contraction dims differ: ") << k << " vs " << k2;
  if (a.getC()) {
    Shape out;
    std::string err;
    if (!broadcastShapes(rankedType(a.getC()).getShape(), {m, n}, out, err) ||
        out != Shape{m, n})
      return fail(loc, "gemm C does not broadcast to [")
             << m << "," << n << "]";
  }
  return push(types, {m, n}, at.getElementType());
}

static LogicalResult inferAxisSame(std::optional<Location> loc, Value in,
                                   int64_t axis, SmallVectorImpl<Type> &types) {
  if (!normalizeAxis(axis, rankedType(in).getRank()))
    return fail(loc, "axis ") << axis << " is out of range";
  return sameAs(types, in);
}
MT_INFER(SoftmaxOp) {
  return inferAxisSame(loc, a.getInput(), a.getAxis(), types);
}
MT_INFER(LogSoftmaxOp) {
  return inferAxisSame(loc, a.getInput(), a.getAxis(), types);
}

MT_INFER(LayerNormalizationOp) {
  auto in = rankedType(a.getInput());
  auto axis = normalizeAxis(a.getAxis(), in.getRank());
  if (!axis)
    return fail(loc, "axis out of range");
  auto normShape = in.getShape().drop_front(*axis);
  Shape out;
  std::string err;
  if (!broadcastShapes(rankedType(a.getScale()).getShape(), normShape, out,
                       err) ||
      ArrayRef<int64_t>(out) != normShape)
    return fail(loc, "scale does not broadcast to the normalised dims ")
           << shapeStr(normShape);
  return sameAs(types, a.getInput());
}

static LogicalResult inferReduce(std::optional<Location> loc, Value input,
                                 ArrayRef<int64_t> axesAttr, bool keepdims,
                                 SmallVectorImpl<Type> &types) {
  auto in = rankedType(input);
  Shape axes;
  std::string err;
  if (!normalizeAxes(axesAttr, in.getRank(), axes, err))
    return fail(loc, err);
  Shape out;
  for (int64_t d = 0; d < in.getRank(); ++d) {
    bool reduced = axesAttr.empty() || llvm::is_contained(axes, d);
    if (!reduced)
      out.push_back(in.getDimSize(d));
    else if (keepdims)
      out.push_back(1);
  }
  return push(types, out, in.getElementType());
}
MT_INFER(ReduceMeanOp) {
  return inferReduce(loc, a.getInput(), a.getAxes(), a.getKeepdims(), types);
}
MT_INFER(ReduceSumOp) {
  return inferReduce(loc, a.getInput(), a.getAxes(), a.getKeepdims(), types);
}
MT_INFER(ReduceMaxOp) {
  return inferReduce(loc, a.getInput(), a.getAxes(), a.getKeepdims(), types);
}

MT_INFER(SoftmaxCrossEntropyLossOp) {
  auto s = rankedType(a.getScores()), l = rankedType(a.getLabels());
  if (s.getRank() < 2 || l.getRank() != s.getRank() - 1 ||
      l.getDimSize(0) != s.getDimSize(0) ||
      l.getShape().drop_front() != s.getShape().drop_front(2))
    return fail(loc, "scores ")
           << shapeStr(s.getShape()) << " and labels " << shapeStr(l.getShape())
           << " do not match ([N,C,d...] and [N,d...])";
  if (a.getReduction() == Reduction::None)
    return push(types, l.getShape(), s.getElementType());
  return push(types, {}, s.getElementType());
}

MT_INFER(TransposeOp) {
  auto in = rankedType(a.getInput());
  ArrayRef<int64_t> perm = a.getPerm();
  Shape sorted;
  std::string err;
  if (int64_t(perm.size()) != in.getRank() ||
      !normalizeAxes(perm, in.getRank(), sorted, err) ||
      llvm::any_of(perm, [](int64_t p) { return p < 0; }))
    return fail(loc, "perm ") << shapeStr(perm) << " is not a permutation of "
                              << in.getRank() << " dims";
  Shape out;
  for (int64_t p : perm)
    out.push_back(in.getDimSize(p));
  return push(types, out, in.getElementType());
}

MT_INFER(UnsqueezeOp) {
  auto in = rankedType(a.getInput());
  int64_t rank = in.getRank() + a.getAxes().size();
  Shape axes;
  std::string err;
  if (!normalizeAxes(a.getAxes(), rank, axes, err))
    return fail(loc, err);
  Shape out;
  auto src = in.getShape().begin();
  for (int64_t d = 0; d < rank; ++d)
    out.push_back(llvm::is_contained(axes, d) ? 1 : *src++);
  return push(types, out, in.getElementType());
}

MT_INFER(SqueezeOp) {
  auto in = rankedType(a.getInput());
  Shape axes;
  std::string err;
  if (!normalizeAxes(a.getAxes(), in.getRank(), axes, err))
    return fail(loc, err);
  Shape out;
  for (int64_t d = 0; d < in.getRank(); ++d) {
    bool listed = llvm::is_contained(axes, d);
    if (listed && in.getDimSize(d) != 1)
      return fail(loc, "cannot squeeze dim ")
             << d << " of size " << in.getDimSize(d);
    if (!(listed || (axes.empty() && in.getDimSize(d) == 1)))
      out.push_back(in.getDimSize(d));
  }
  return push(types, out, in.getElementType());
}

MT_INFER(FlattenOp) {
  auto in = rankedType(a.getInput());
  // I64Attr's accessor is unsigned: a negative axis counts from the end.
  int64_t axis = int64_t(a.getAxis());
  if (axis < 0)
    axis += in.getRank();
  if (axis < 0 || axis > in.getRank())
    return fail(loc, "flatten axis out of range");
  return push(types,
              {numElements(in.getShape().take_front(axis)),
               numElements(in.getShape().drop_front(axis))},
              in.getElementType());
}

MT_INFER(ConcatOp) {
  if (a.getInputs().empty())
    return fail(loc, "concat needs at least one input");
  auto first = rankedType(a.getInputs()[0]);
  auto axis = normalizeAxis(a.getAxis(), first.getRank());
  if (!axis)
    return fail(loc, "concat axis out of range");
  Shape out(first.getShape());
  out[*axis] = 0;
  for (Value v : a.getInputs()) {
    auto t = rankedType(v);
    if (t.getRank() != first.getRank() ||
        t.getElementType() != first.getElementType())
      return fail(loc, "concat inputs differ in rank or element type");
    for (int64_t d = 0; d < t.getRank(); ++d)
      if (d != *axis && t.getDimSize(d) != first.getDimSize(d))
        return fail(loc, "concat inputs differ in dim ") << d;
    out[*axis] += t.getDimSize(*axis);
  }
  return push(types, out, first.getElementType());
}

static LogicalResult splitTypes(std::optional<Location> loc, Value input,
                                int64_t axisAttr, ArrayRef<int64_t> sizes,
                                bool squeeze, SmallVectorImpl<Type> &types) {
  auto in = rankedType(input);
  auto axis = normalizeAxis(axisAttr, in.getRank());
  if (!axis)
    return fail(loc, "split axis out of range");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0)
      return fail(loc, "split sizes must be >= 0");
    total += s;
  }
  if (total != in.getDimSize(*axis))
    return fail(loc, "split sizes ")
           << shapeStr(sizes) << " do not add up to dim " << *axis << " ("
           << in.getDimSize(*axis) << ")";
  for (int64_t s : sizes) {
    Shape out(in.getShape());
    out[*axis] = s;
    if (squeeze)
      out.erase(out.begin() + *axis);
    types.push_back(RankedTensorType::get(out, in.getElementType()));
  }
  return success();
}

MT_INFER(SplitOp) {
  return splitTypes(loc, a.getInput(), a.getAxis(), a.getSizes(), false, types);
}

MT_INFER(SplitToSequenceOp) {
  SmallVector<Type> parts;
  if (a.getSqueeze() &&
      llvm::any_of(a.getSizes(), [](int64_t s) { return s != 1; }))
    return fail(loc, "keepdims=0 needs parts of size 1");
  if (failed(splitTypes(loc, a.getInput(), a.getAxis(), a.getSizes(),
                        a.getSqueeze(), parts)))
    return failure();
  types.push_back(SequenceType::get(ctx, parts));
  return success();
}

MT_INFER(SequenceAtOp) {
  auto seq = cast<SequenceType>(a.getSequence().getType());
  int64_t n = seq.getElementTypes().size(), p = a.getPosition();
  if (p < -n || p >= n)
    return fail(loc, "position ") << p << " is outside a sequence of " << n;
  types.push_back(seq.getElementTypes()[p < 0 ? p + n : p]);
  return success();
}

MT_INFER(GatherOp) {
  auto data = rankedType(a.getData());
  auto axis = normalizeAxis(a.getAxis(), data.getRank());
  if (!axis)
    return fail(loc, "gather axis out of range");
  Shape out(data.getShape().take_front(*axis));
  llvm::append_range(out, rankedType(a.getIndices()).getShape());
  llvm::append_range(out, data.getShape().drop_front(*axis + 1));
  return push(types, out, data.getElementType());
}

/// The result shape of a GatherND (batch_dims 0) of `data` by index tuples
/// `idx` whose last dim (the tuple length) is at most data's rank.
static SmallVector<int64_t> gatherNDShape(ArrayRef<int64_t> data,
                                          ArrayRef<int64_t> idx) {
  SmallVector<int64_t> out(idx.drop_back());
  llvm::append_range(out, data.drop_front(idx.back()));
  return out;
}

MT_INFER(GatherNDOp) {
  auto data = rankedType(a.getData()), idx = rankedType(a.getIndices());
  int64_t q = idx.getRank() ? idx.getShape().back() : 0;
  if (a.getBatchDims() != 0 || idx.getRank() < 1 || q > data.getRank())
    return fail(loc,
                "gather_nd supports batch_dims = 0 with index depth <= rank");
  return push(types, gatherNDShape(data.getShape(), idx.getShape()),
              data.getElementType());
}

/// Whether `idx` has the dims of `data` but along `axis` (any size there):
/// the lines of GatherElements and ScatterElements.
static bool elementsAlong(ArrayRef<int64_t> data, ArrayRef<int64_t> idx,
                          int64_t axis) {
  if (data.size() != idx.size())
    return false;
  for (size_t d = 0; d < data.size(); ++d)
    if (int64_t(d) != axis && data[d] != idx[d])
      return false;
  return true;
}

MT_INFER(GatherElementsOp) {
  auto data = rankedType(a.getData()), idx = rankedType(a.getIndices());
  auto axis = normalizeAxis(a.getAxis(), data.getRank());
  if (!axis)
    return fail(loc, "gather_elements: axis ")
           << a.getAxis() << " is outside rank " << data.getRank();
  if (!elementsAlong(data.getShape(), idx.getShape(), *axis))
    return fail(loc, "gather_elements: indices ")
           << shapeStr(idx.getShape()) << " must have the dims of the data "
           << shapeStr(data.getShape()) << " but along axis " << *axis
           << " (smaller index dims off the axis are not supported)";
  return push(types, idx.getShape(), data.getElementType());
}

MT_INFER(ScatterElementsOp) {
  auto data = rankedType(a.getData()), idx = rankedType(a.getIndices()),
       upd = rankedType(a.getUpdates());
  auto axis = normalizeAxis(a.getAxis(), data.getRank());
  if (!axis)
    return fail(loc, "scatter_elements: axis ")
           << a.getAxis() << " is outside rank " << data.getRank();
  if (idx.getShape() != upd.getShape() ||
      !elementsAlong(data.getShape(), idx.getShape(), *axis))
    return fail(loc, "scatter_elements: indices ")
           << shapeStr(idx.getShape()) << " and updates "
           << shapeStr(upd.getShape())
           << " must have one shape, the dims of the data "
           << shapeStr(data.getShape()) << " but along axis " << *axis
           << " (smaller index dims off the axis are not supported)";
  if (upd.getElementType() != data.getElementType())
    return fail(loc, "scatter_elements: updates of ")
           << upd.getElementType() << " into data of " << data.getElementType();
  return push(types, data.getShape(), data.getElementType());
}

MT_INFER(TopKOp) {
  auto in = rankedType(a.getInput());
  auto axis = normalizeAxis(a.getAxis(), in.getRank());
  int64_t k = static_cast<int64_t>(a.getK());
  if (!axis)
    return fail(loc, "topk: axis ")
           << a.getAxis() << " is outside rank " << in.getRank();
  if (k < 0 || k > in.getDimSize(*axis))
    return fail(loc, "topk: k = ")
           << k << " is outside [0, " << in.getDimSize(*axis) << "], axis "
           << *axis << " of " << in;
  SmallVector<int64_t> out(in.getShape());
  out[*axis] = k;
  // The values, then their indices.
  types.push_back(RankedTensorType::get(out, in.getElementType()));
  return push(types, out, IntegerType::get(ctx, 64));
}

MT_INFER(ShapeOp) {
  int64_t rank = rankedType(a.getInput()).getRank();
  // I64Attr getters are unsigned: compare as signed values.
  int64_t start = static_cast<int64_t>(a.getStart()),
          end = static_cast<int64_t>(a.getEnd());
  if (start < 0 || end > rank || start > end)
    return fail(loc, "shape start/end must be normalised within the rank");
  return push(types, {end - start}, IntegerType::get(ctx, 64));
}

MT_INFER(SizeOp) { return push(types, {}, IntegerType::get(ctx, 64)); }

//===----------------------------------------------------------------------===//
// Fused ops
//===----------------------------------------------------------------------===//

MT_INFER(EmbeddingOp) {
  auto table = rankedType(a.getTable());
  if (table.getRank() != 2)
    return fail(loc, "embedding table must be [vocab, dim]");
  Shape out(rankedType(a.getIds()).getShape());
  out.push_back(table.getDimSize(1));
  return push(types, out, table.getElementType());
}

MT_INFER(LinearOp) {
  auto x = rankedType(a.getInput()), w = rankedType(a.getWeight());
  if (w.getRank() != 2 || x.getRank() < 1)
    return fail(loc, "linear weight must be 2-D");
  bool outIn = a.getLayout() == WeightLayout::OutIn;
  int64_t k = w.getDimSize(outIn ? 1 : 0), n = w.getDimSize(outIn ? 0 : 1);
  if (x.getShape().back() != k)
    return fail(loc, "linear input dim ")
           << x.getShape().back() << " does not match weight "
           << shapeStr(w.getShape());
  if (a.getBias() && rankedType(a.getBias()).getShape() != ArrayRef<int64_t>{n})
    return fail(loc, "linear bias must be [") << n << "]";
  Shape out(x.getShape().drop_back());
  out.push_back(n);
  return push(types, out, x.getElementType());
}

/// The result of expert_linear(input, ids, weight).
static LogicalResult expertLinearType(std::optional<Location> loc, Value input,
                                      Value idsValue, Value weight,
                                      WeightLayout layout,
                                      SmallVectorImpl<Type> &types) {
  auto x = rankedType(input), ids = rankedType(idsValue),
       w = rankedType(weight);
  if (w.getRank() != 3 || x.getRank() != 2 || ids.getRank() != 1)
    return fail(loc, "expert_linear takes x [N, K], ids [N] and a weight "
                     "[E, O, K] or [E, K, O]");
  bool outIn = layout == WeightLayout::OutIn;
  int64_t k = w.getDimSize(outIn ? 2 : 1), o = w.getDimSize(outIn ? 1 : 2);
  if (x.getDimSize(1) != k || ids.getDimSize(0) != x.getDimSize(0))
    return fail(loc, "expert_linear input ")
           << shapeStr(x.getShape()) << " and ids " << shapeStr(ids.getShape())
           << " do not match the weight " << shapeStr(w.getShape());
  return push(types, {x.getDimSize(0), o}, x.getElementType());
}

MT_INFER(ExpertLinearOp) {
  return expertLinearType(loc, a.getInput(), a.getIds(), a.getWeight(),
                          a.getLayout(), types);
}

static LogicalResult checkLastDimParam(std::optional<Location> loc, Value x,
                                       Value p, StringRef what) {
  if (!p)
    return success();
  int64_t d = rankedType(x).getShape().back();
  if (rankedType(p).getShape() != ArrayRef<int64_t>{d})
    return fail(loc, what) << " must be [" << d << "]";
  return success();
}

MT_INFER(RmsNormOp) {
  if (failed(checkLastDimParam(loc, a.getInput(), a.getWeight(),
                               "rms_norm weight")))
    return failure();
  return sameAs(types, a.getInput());
}

MT_INFER(LayerNormOp) {
  if (failed(checkLastDimParam(loc, a.getInput(), a.getWeight(),
                               "layer_norm weight")) ||
      failed(
          checkLastDimParam(loc, a.getInput(), a.getBias(), "layer_norm bias")))
    return failure();
  return sameAs(types, a.getInput());
}

MT_INFER(RotaryOp) {
  auto x = rankedType(a.getInput());
  int64_t hd = a.getHeadDim();
  if (x.getRank() != 3 || hd <= 0 || hd % 2 || x.getDimSize(2) % hd)
    return fail(
        loc, "rotary input must be [B, S, H * head_dim] with an even head_dim");
  for (Value t : {a.getCos(), a.getSin()}) {
    auto s = rankedType(t).getShape();
    bool ok = (s.size() == 2 && s[0] == x.getDimSize(1) && s[1] == hd) ||
              (s.size() == 3 && s[0] == x.getDimSize(0) &&
               s[1] == x.getDimSize(1) && s[2] == hd);
    if (!ok)
      return fail(loc, "rotary tables must be [S, head_dim] or [B, S, "
                       "head_dim], got ")
             << shapeStr(s);
  }
  return sameAs(types, a.getInput());
}

MT_INFER(AttentionOp) {
  auto q = rankedType(a.getQ()), k = rankedType(a.getK()),
       v = rankedType(a.getV());
  int64_t h = a.getNumHeads(), hkv = a.getNumKvHeads();
  if (q.getRank() != 3 || h <= 0 || hkv <= 0 || h % hkv || q.getDimSize(2) % h)
    return fail(loc, "attention q must be [B, S, num_heads * D] with num_heads "
                     "a multiple of num_kv_heads");
  int64_t d = q.getDimSize(2) / h;
  Shape kv{q.getDimSize(0), q.getDimSize(1), hkv * d};
  if (k.getShape() != ArrayRef<int64_t>(kv) ||
      v.getShape() != ArrayRef<int64_t>(kv))
    return fail(loc, "attention k and v must be ") << shapeStr(kv);
  float cap = a.getSoftcap().convertToFloat();
  if (!(cap >= 0.0f) || std::isinf(cap))
    return fail(loc, "attention softcap must be finite and >= 0 (0: none)");
  if (a.getMask()) {
    Shape out;
    std::string err;
    Shape scores{q.getDimSize(0), h, q.getDimSize(1), q.getDimSize(1)};
    if (!broadcastShapes(rankedType(a.getMask()).getShape(), scores, out,
                         err) ||
        out != scores)
      return fail(loc, "attention mask does not broadcast to ")
             << shapeStr(scores);
  }
  return sameAs(types, a.getQ());
}

MT_INFER(GatedActivationOp) {
  if (a.getGate().getType() != a.getUp().getType())
    return fail(loc, "gate and up differ in type");
  return sameAs(types, a.getGate());
}

MT_INFER(CrossEntropyOp) {
  auto l = rankedType(a.getLogits()), t = rankedType(a.getLabels());
  if (l.getRank() < 2 || t.getShape() != l.getShape().drop_back())
    return fail(loc, "cross_entropy labels ")
           << shapeStr(t.getShape()) << " must be the logits' leading dims of "
           << shapeStr(l.getShape());
  if (a.getShift() && t.getRank() < 1)
    return fail(loc, "shifted labels need a sequence dim");
  return push(types, {}, Float32Type::get(ctx));
}

//===----------------------------------------------------------------------===//
// Value-shaped ops: verified when the shape operand is a constant.
//===----------------------------------------------------------------------===//

LogicalResult UnaryGradOp::verify() {
  if (getGrad().getType() != getInput().getType())
    return emitOpError("the gradient ")
           << getGrad().getType() << " is not of the operand's type "
           << getInput().getType();
  return success();
}

LogicalResult ReshapeOp::verify() {
  auto shape = constInts(getShape());
  if (!shape)
    return success();
  Shape out;
  std::string err;
  if (!reshapeShape(rankedType(getInput()).getShape(), *shape, getAllowzero(),
                    out, err))
    return emitOpError(err);
  return checkResult(*this, out);
}

LogicalResult ExpandOp::verify() {
  auto shape = constInts(getShape());
  if (!shape)
    return success();
  Shape out;
  std::string err;
  if (!broadcastShapes(rankedType(getInput()).getShape(), *shape, out, err))
    return emitOpError(err);
  return checkResult(*this, out);
}

LogicalResult TileOp::verify() {
  auto reps = constInts(getRepeats());
  if (!reps)
    return success();
  Shape out;
  std::string err;
  if (!tileShape(rankedType(getInput()).getShape(), *reps, out, err))
    return emitOpError(err);
  return checkResult(*this, out);
}

LogicalResult SliceOp::verify() {
  auto s = constInts(getStarts()), e = constInts(getEnds()),
       ax = constInts(getAxes()), st = constInts(getSteps());
  if (!s || !e || !ax || !st)
    return success();
  SliceParams p;
  std::string err;
  if (!sliceShape(rankedType(getInput()).getShape(), *s, *e, *ax, *st, p, err))
    return emitOpError(err);
  return checkResult(*this, p.size);
}

LogicalResult TopKGradOp::verify() {
  auto dy = rankedType(getGrad()).getShape(),
       idx = rankedType(getIndices()).getShape(),
       dx = rankedType(getInputGrad()).getShape();
  auto axis = normalizeAxis(getAxis(), int64_t(dx.size()));
  if (!axis)
    return emitOpError("axis ")
           << getAxis() << " is outside the rank " << dx.size() << " of dx";
  bool lines = dy == idx && dy.size() == dx.size();
  for (size_t d = 0; lines && d < dx.size(); ++d)
    lines = int64_t(d) == *axis ? dy[d] <= dx[d] : dy[d] == dx[d];
  if (!lines)
    return emitOpError("dy ")
           << shapeStr(dy) << " and indices " << shapeStr(idx)
           << " are not the top k along axis " << *axis << " of "
           << shapeStr(dx);
  if (rankedType(getGrad()).getElementType() !=
      rankedType(getInputGrad()).getElementType())
    return emitOpError("dy and dx differ in element type");
  return success();
}

LogicalResult GatherElementsGradOp::verify() {
  auto dy = rankedType(getGrad()).getShape(),
       idx = rankedType(getIndices()).getShape(),
       dx = rankedType(getInputGrad()).getShape();
  auto axis = normalizeAxis(getAxis(), int64_t(dx.size()));
  if (!axis)
    return emitOpError("axis ")
           << getAxis() << " is outside the rank " << dx.size() << " of dx";
  if (dy != idx || !elementsAlong(dx, idx, *axis))
    return emitOpError("dy ")
           << shapeStr(dy) << " and indices " << shapeStr(idx)
           << " are not a gather of elements along axis " << *axis << " of "
           << shapeStr(dx);
  if (rankedType(getGrad()).getElementType() !=
      rankedType(getInputGrad()).getElementType())
    return emitOpError("dy and dx differ in element type");
  return success();
}

LogicalResult GatherNDGradOp::verify() {
  auto dy = rankedType(getGrad()).getShape(),
       idx = rankedType(getIndices()).getShape(),
       dx = rankedType(getInputGrad()).getShape();
  if (idx.empty() || idx.back() > int64_t(dx.size()))
    return emitOpError("indices ")
           << shapeStr(idx) << " need tuples of at most " << dx.size()
           << " indices into dx " << shapeStr(dx);
  if (ArrayRef<int64_t>(gatherNDShape(dx, idx)) != dy)
    return emitOpError("dy ")
           << shapeStr(dy) << " is not the gather of " << shapeStr(idx)
           << " index tuples of " << shapeStr(dx);
  if (rankedType(getGrad()).getElementType() !=
      rankedType(getInputGrad()).getElementType())
    return emitOpError("dy and dx differ in element type");
  return success();
}

LogicalResult GatherGradOp::verify() {
  auto dy = rankedType(getGrad()).getShape(),
       idx = rankedType(getIndices()).getShape(),
       dx = rankedType(getInputGrad()).getShape();
  auto axis = normalizeAxis(getAxis(), int64_t(dx.size()));
  if (!axis)
    return emitOpError("axis ")
           << getAxis() << " is outside the rank " << dx.size() << " of dx";
  SmallVector<int64_t> want(dx.begin(), dx.begin() + *axis);
  want.append(idx.begin(), idx.end());
  want.append(dx.begin() + *axis + 1, dx.end());
  if (ArrayRef<int64_t>(want) != dy)
    return emitOpError("dy ")
           << shapeStr(dy) << " is not the gather of " << shapeStr(idx)
           << " indices along axis " << *axis << " of " << shapeStr(dx);
  if (rankedType(getGrad()).getElementType() !=
      rankedType(getInputGrad()).getElementType())
    return emitOpError("dy and dx differ in element type");
  return success();
}

LogicalResult SliceGradOp::verify() {
  auto dy = rankedType(getGrad()).getShape(),
       dx = rankedType(getInputGrad()).getShape();
  if (dy.size() != dx.size() || getStarts().size() != dx.size() ||
      getSteps().size() != dx.size())
    return emitOpError("starts and steps need one entry per dim of dy and dx");
  for (size_t d = 0; d < dx.size(); ++d) {
    if (dy[d] == 0)
      continue;
    int64_t first = getStarts()[d], last = first + (dy[d] - 1) * getSteps()[d];
    if (getSteps()[d] == 0 || std::min(first, last) < 0 ||
        std::max(first, last) >= dx[d])
      return emitOpError("dim ")
             << d << ": " << dy[d] << " elements from " << first << " by "
             << getSteps()[d] << " leave [0, " << dx[d] << ")";
  }
  return success();
}

LogicalResult PadOp::verify() {
  if (rankedType(getValue()).getRank() > 1 ||
      numElements(rankedType(getValue()).getShape()) != 1)
    return emitOpError("pad value must be a single element");
  auto pads = constInts(getPads());
  if (!pads)
    return success();
  Shape out;
  std::string err;
  if (!padShape(rankedType(getInput()).getShape(), *pads, out, err))
    return emitOpError(err);
  return checkResult(*this, out);
}

LogicalResult RangeOp::verify() {
  for (Value v : {getStart(), getLimit(), getDelta()})
    if (rankedType(v).getRank() != 0)
      return emitOpError("start, limit and delta must be scalars");
  if (getType().getRank() != 1)
    return emitOpError("result must be 1-D");
  Attribute s, l, d;
  if (!matchPattern(getStart(), m_Constant(&s)) ||
      !matchPattern(getLimit(), m_Constant(&l)) ||
      !matchPattern(getDelta(), m_Constant(&d)))
    return success();
  int64_t n;
  std::string err;
  if (!rangeLength((*getFloatValues(s))[0], (*getFloatValues(l))[0],
                   (*getFloatValues(d))[0], n, err))
    return emitOpError(err);
  return checkResult(*this, {n});
}

LogicalResult ConstantOfShapeOp::verify() {
  if (cast<ShapedType>(getValue().getType()).getNumElements() != 1)
    return emitOpError("value must hold one element");
  auto shape = constInts(getShape());
  if (shape)
    return checkResult(*this, *shape);
  return success();
}

//===----------------------------------------------------------------------===//
// Gradient ops: each gradient has the type of what it is the gradient of.
//===----------------------------------------------------------------------===//

static LogicalResult sameTypes(Operation *op,
                               ArrayRef<std::pair<Value, Value>> pairs) {
  for (auto [grad, of] : pairs)
    if (grad.getType() != of.getType())
      return op->emitOpError("gradient type ")
             << grad.getType() << " differs from " << of.getType();
  return success();
}

LogicalResult EmbeddingGradOp::verify() {
  auto table = getTableGrad().getType(), g = getGrad().getType();
  SmallVector<int64_t> expected(getIds().getType().getShape());
  expected.push_back(table.getRank() == 2 ? table.getDimSize(1) : -1);
  if (table.getRank() != 2 || g.getShape() != ArrayRef<int64_t>(expected) ||
      table.getElementType() != g.getElementType())
    return emitOpError("gradient ")
           << shapeStr(g.getShape()) << " does not match ids "
           << shapeStr(getIds().getType().getShape()) << " and table "
           << shapeStr(table.getShape());
  return success();
}

LogicalResult LinearGradOp::verify() {
  auto x = rankedType(getInput()), w = rankedType(getWeight());
  bool outIn = getLayout() == WeightLayout::OutIn;
  SmallVector<int64_t> y(x.getShape().drop_back());
  y.push_back(w.getRank() == 2 ? w.getDimSize(outIn ? 0 : 1) : -1);
  if (w.getRank() != 2 ||
      rankedType(getGrad()).getShape() != ArrayRef<int64_t>(y))
    return emitOpError("gradient does not have the linear's output shape ")
           << shapeStr(y);
  return sameTypes(
      *this, {{getInputGrad(), getInput()}, {getWeightGrad(), getWeight()}});
}

LogicalResult ExpertLinearGradOp::verify() {
  SmallVector<Type> y;
  if (failed(expertLinearType(getLoc(), getInput(), getIds(), getWeight(),
                              getLayout(), y)))
    return failure();
  if (getGrad().getType() != y[0])
    return emitOpError("gradient does not have the expert_linear's output "
                       "type ")
           << y[0];
  return sameTypes(
      *this, {{getInputGrad(), getInput()}, {getWeightGrad(), getWeight()}});
}

LogicalResult RmsNormGradOp::verify() {
  return sameTypes(*this, {{getGrad(), getInput()},
                           {getInputGrad(), getInput()},
                           {getWeightGrad(), getWeight()}});
}

LogicalResult LayerNormGradOp::verify() {
  return sameTypes(*this, {{getGrad(), getInput()},
                           {getInputGrad(), getInput()},
                           {getWeightGrad(), getWeight()}});
}

LogicalResult RotaryGradOp::verify() {
  return sameTypes(*this, {{getInputGrad(), getGrad()}});
}

LogicalResult AttentionGradOp::verify() {
  return sameTypes(*this, {{getGrad(), getQ()},
                           {getQGrad(), getQ()},
                           {getKGrad(), getK()},
                           {getVGrad(), getV()}});
}

LogicalResult ActivationGradOp::verify() {
  return sameTypes(*this,
                   {{getGrad(), getInput()}, {getInputGrad(), getInput()}});
}

LogicalResult GatedActivationGradOp::verify() {
  return sameTypes(*this, {{getGrad(), getGate()},
                           {getGateGrad(), getGate()},
                           {getUpGrad(), getUp()}});
}

MT_INFER(HeadCrossEntropyOp) {
  auto x = rankedType(a.getInput()), w = rankedType(a.getWeight());
  bool outIn = a.getLayout() == WeightLayout::OutIn;
  if (w.getRank() != 2 || x.getRank() < 2 ||
      x.getShape().back() != w.getDimSize(outIn ? 1 : 0) ||
      rankedType(a.getLabels()).getShape() != x.getShape().drop_back() ||
      int64_t(a.getChunkRows()) <= 0)
    return fail(loc, "head_cross_entropy needs x [..., D], a [V, D] or "
                     "[D, V] weight, labels of x's leading dims and "
                     "chunk_rows > 0");
  return push(types, {}, Float32Type::get(ctx));
}

LogicalResult HeadCrossEntropyGradOp::verify() {
  if (getGrad().getType().getRank() != 0)
    return emitOpError("the loss gradient must be a scalar");
  return sameTypes(
      *this, {{getInputGrad(), getInput()}, {getWeightGrad(), getWeight()}});
}

/// Whether gate, up [I, D] and down [D, I] (out_in; transposed for in_out)
/// fit x [..., D]; sets the hidden size I.
static bool gatedMlpShapes(Type input, Type gate, Type up, Type down,
                           WeightLayout layout, int64_t &hidden) {
  auto x = cast<RankedTensorType>(input), g = cast<RankedTensorType>(gate),
       u = cast<RankedTensorType>(up), d = cast<RankedTensorType>(down);
  if (x.getRank() < 1 || g.getRank() != 2 || g != u || d.getRank() != 2)
    return false;
  bool outIn = layout == WeightLayout::OutIn;
  int64_t dim = x.getShape().back();
  hidden = g.getDimSize(outIn ? 0 : 1);
  return g.getDimSize(outIn ? 1 : 0) == dim &&
         d.getDimSize(outIn ? 0 : 1) == dim &&
         d.getDimSize(outIn ? 1 : 0) == hidden;
}

MT_INFER(GatedMlpOp) {
  int64_t hidden = 0;
  if (!gatedMlpShapes(a.getInput().getType(), a.getGate().getType(),
                      a.getUp().getType(), a.getDown().getType(), a.getLayout(),
                      hidden) ||
      int64_t(a.getChunkRows()) <= 0)
    return fail(loc, "gated_mlp needs x [..., D], gate and up [I, D], down "
                     "[D, I] (transposed for in_out) and chunk_rows > 0");
  return sameAs(types, a.getInput());
}

LogicalResult GatedMlpGradOp::verify() {
  int64_t hidden = 0;
  if (!gatedMlpShapes(getInput().getType(), getGate().getType(),
                      getUp().getType(), getDown().getType(), getLayout(),
                      hidden) ||
      int64_t(getChunkRows()) <= 0)
    return emitOpError("needs x [..., D], gate and up [I, D], down [D, I] "
                       "(transposed for in_out) and chunk_rows > 0");
  return sameTypes(*this, {{getGrad(), getInput()},
                           {getInputGrad(), getInput()},
                           {getGateGrad(), getGate()},
                           {getUpGrad(), getUp()},
                           {getDownGrad(), getDown()}});
}

LogicalResult CrossEntropyGradOp::verify() {
  if (getGrad().getType().getRank() != 0)
    return emitOpError("the loss gradient must be a scalar");
  return sameTypes(*this, {{getLogitsGrad(), getLogits()}});
}

//===----------------------------------------------------------------------===//
// Folds: all through the constant evaluator.
//===----------------------------------------------------------------------===//

#define MT_FOLD(OP)                                                            \
  OpFoldResult OP::fold(FoldAdaptor a) {                                       \
    return foldTrainOp(getOperation(), a.getOperands());                       \
  }
MT_FOLD(IsNaNOp)
MT_FOLD(AddOp)
MT_FOLD(SubOp)
MT_FOLD(MulOp)
MT_FOLD(DivOp)
MT_FOLD(PowOp)
MT_FOLD(MaxOp)
MT_FOLD(MinOp)
MT_FOLD(AndOp)
MT_FOLD(OrOp)
MT_FOLD(XorOp)
MT_FOLD(EqualOp)
MT_FOLD(LessOp)
MT_FOLD(LessOrEqualOp)
MT_FOLD(GreaterOp)
MT_FOLD(GreaterOrEqualOp)
MT_FOLD(WhereOp)
MT_FOLD(CastOp)
MT_FOLD(CastLikeOp)
MT_FOLD(DropoutOp)
MT_FOLD(MatMulOp)
MT_FOLD(ReduceMeanOp)
MT_FOLD(ReduceSumOp)
MT_FOLD(ReduceMaxOp)
MT_FOLD(CumSumOp)
MT_FOLD(TriluOp)
MT_FOLD(TransposeOp)
MT_FOLD(ReshapeOp)
MT_FOLD(UnsqueezeOp)
MT_FOLD(SqueezeOp)
MT_FOLD(FlattenOp)
MT_FOLD(ConcatOp)
MT_FOLD(SliceOp)
MT_FOLD(GatherOp)
MT_FOLD(GatherNDOp)
MT_FOLD(GatherElementsOp)
MT_FOLD(ScatterElementsOp)
MT_FOLD(ExpandOp)
MT_FOLD(TileOp)
MT_FOLD(PadOp)
MT_FOLD(RangeOp)
MT_FOLD(ConstantOfShapeOp)
MT_FOLD(ShapeOp)
MT_FOLD(SizeOp)

std::optional<SliceLayout> mt::train::constantSlice(SliceOp op) {
  auto s = constInts(op.getStarts()), e = constInts(op.getEnds()),
       ax = constInts(op.getAxes()), st = constInts(op.getSteps());
  if (!s || !e || !ax || !st)
    return std::nullopt;
  SliceParams p;
  std::string err;
  if (!sliceShape(rankedType(op.getInput()).getShape(), *s, *e, *ax, *st, p,
                  err))
    return std::nullopt;
  return SliceLayout{SmallVector<int64_t>(p.start.begin(), p.start.end()),
                     SmallVector<int64_t>(p.step.begin(), p.step.end())};
}

std::optional<PadLayout> mt::train::constantPad(PadOp op) {
  auto pads = constInts(op.getPads());
  Attribute value;
  if (!pads || !matchPattern(op.getValue(), m_Constant(&value)))
    return std::nullopt;
  auto dense = dyn_cast<DenseElementsAttr>(value);
  if (!dense || !dense.isSplat() || !isa<FloatType>(dense.getElementType()))
    return std::nullopt;
  size_t rank = pads->size() / 2;
  return PadLayout{SmallVector<int64_t>(pads->begin(), pads->begin() + rank),
                   SmallVector<int64_t>(pads->begin() + rank, pads->end()),
                   dense.getSplatValue<APFloat>().convertToDouble()};
}

int64_t mt::train::elementBytes(Type type) {
  return type.isInteger(1) ? 1 : (type.getIntOrFloatBitWidth() + 7) / 8;
}

#include "dialects/Train/IR/TrainOpInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "dialects/Train/IR/TrainOps.cpp.inc"
