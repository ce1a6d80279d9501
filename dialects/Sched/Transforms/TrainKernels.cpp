//===- TrainKernels.cpp - the plan kernel of each train op ----------------===//
//
// The KernelOpInterface of the train ops that reach the schedule, attached
// as external models (the train dialect knows nothing of plans). Each op
// states its kernel in one `kernelOf` overload below; the few whose kernel
// reads fewer operands or takes attributes other than the op's add an
// `operandsOf` or `attrsOf`. Its FLOPs are declared with the op
// (Train_Flops) or, where no count per element fits, a `flopsOf` formula;
// an op with a kernel and neither does not build.
// The pointwise functions (Train_PointwiseOp) share one of each, read from
// their descriptions. Every op of the dialect with a `kernelOf` gets the
// interface (registerTrainKernels); one without has no kernel: lowering it
// is an error that names it, never a silent default.
//
//===----------------------------------------------------------------------===//
#include "dialects/Sched/Transforms/TrainKernels.h"
#include "dialects/Sched/IR/SchedOps.h"
#include "dialects/Train/IR/TrainDialect.h"
#include "dialects/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectRegistry.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace mt::train;

namespace mt::sched {
namespace {

RankedTensorType tensorOf(Value v) {
  return cast<RankedTensorType>(v.getType());
}
double elements(Value v) { return double(tensorOf(v).getNumElements()); }

/// `k` for an op on floats; none on integers (shape arithmetic, folded).
std::optional<Kernel> floats(Value v, Kernel k) {
  if (!isa<FloatType>(tensorOf(v).getElementType()))
    return std::nullopt;
  return k;
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

using K = std::optional<Kernel>;
K kernelOf(EmbeddingOp) { return Kernel::Embedding; }
K kernelOf(EmbeddingGradOp) { return Kernel::EmbeddingGrad; }
K kernelOf(LinearOp) { return Kernel::Linear; }
K kernelOf(ExpertLinearOp) { return Kernel::ExpertLinear; }
K kernelOf(ExpertLinearGradOp) { return Kernel::ExpertLinearGrad; }
K kernelOf(LinearGradOp) { return Kernel::LinearGrad; }
K kernelOf(RmsNormOp) { return Kernel::RmsNorm; }
K kernelOf(RmsNormGradOp) { return Kernel::RmsNormGrad; }
K kernelOf(LayerNormOp) { return Kernel::LayerNorm; }
K kernelOf(LayerNormGradOp) { return Kernel::LayerNormGrad; }
K kernelOf(RotaryOp) { return Kernel::Rotary; }
K kernelOf(RotaryGradOp) { return Kernel::RotaryGrad; }
K kernelOf(AttentionOp) { return Kernel::Attention; }
K kernelOf(AttentionGradOp) { return Kernel::AttentionGrad; }
K kernelOf(ActivationOp) { return Kernel::Activation; }
K kernelOf(ActivationGradOp) { return Kernel::ActivationGrad; }
K kernelOf(GatedActivationOp) { return Kernel::GatedActivation; }
K kernelOf(GatedActivationGradOp) { return Kernel::GatedActivationGrad; }
K kernelOf(CrossEntropyOp) { return Kernel::CrossEntropy; }
K kernelOf(CrossEntropyGradOp) { return Kernel::CrossEntropyGrad; }
K kernelOf(HeadCrossEntropyOp) { return Kernel::HeadCrossEntropy; }
K kernelOf(HeadCrossEntropyGradOp) { return Kernel::HeadCrossEntropyGrad; }
K kernelOf(GatedMlpOp) { return Kernel::GatedMlp; }
K kernelOf(GatedMlpGradOp) { return Kernel::GatedMlpGrad; }
K kernelOf(AddOp) { return Kernel::Add; }
K kernelOf(SubOp) { return Kernel::Sub; }
K kernelOf(MulOp) { return Kernel::Mul; }
K kernelOf(NegOp) { return Kernel::Neg; }
K kernelOf(DivOp) { return Kernel::Div; }
K kernelOf(PowOp) { return Kernel::Pow; }
K kernelOf(MatMulOp) { return Kernel::Matmul; }
K kernelOf(UnaryGradOp) { return Kernel::UnaryGrad; }
K kernelOf(SoftmaxOp) { return Kernel::Softmax; }
K kernelOf(LogSoftmaxOp) { return Kernel::LogSoftmax; }
K kernelOf(MaxOp m) { return floats(m, Kernel::Max); }
K kernelOf(MinOp m) { return floats(m, Kernel::Min); }
K kernelOf(ReduceMaxOp r) { return floats(r, Kernel::ReduceMax); }
K kernelOf(EqualOp c) { return floats(c.getLhs(), Kernel::Equal); }
K kernelOf(LessOp c) { return floats(c.getLhs(), Kernel::Less); }
K kernelOf(LessOrEqualOp c) { return floats(c.getLhs(), Kernel::LessOrEqual); }
K kernelOf(GreaterOp c) { return floats(c.getLhs(), Kernel::Greater); }
K kernelOf(GreaterOrEqualOp c) {
  return floats(c.getLhs(), Kernel::GreaterOrEqual);
}
K kernelOf(ExpandOp) { return Kernel::Expand; }
K kernelOf(ReduceSumOp) { return Kernel::ReduceSum; }
K kernelOf(ReduceMeanOp) { return Kernel::ReduceMean; }
K kernelOf(IsNaNOp) { return Kernel::IsNan; }
K kernelOf(NotOp) { return Kernel::Not; }
K kernelOf(AndOp) { return Kernel::And; }
K kernelOf(OrOp) { return Kernel::Or; }
K kernelOf(XorOp) { return Kernel::Xor; }
K kernelOf(WhereOp w) { return floats(w, Kernel::Where); }
// Of floats, or of ids (labels[:, 1:] of a loss written out).
K kernelOf(SliceOp s) {
  if (!constantSlice(s))
    return std::nullopt;
  return tensorOf(s).getElementType().isInteger(64) ? Kernel::Slice
                                                    : floats(s, Kernel::Slice);
}
K kernelOf(SliceGradOp) { return Kernel::SliceGrad; }
K kernelOf(PadOp p) {
  return constantPad(p) ? floats(p, Kernel::Pad) : std::nullopt;
}
K kernelOf(TriluOp t) { return floats(t, Kernel::Trilu); }
K kernelOf(CumSumOp c) { return floats(c, Kernel::Cumsum); }
K kernelOf(TileOp t) { return floats(t, Kernel::Tile); }
K kernelOf(GatherOp g) { return floats(g, Kernel::Gather); }
K kernelOf(GatherGradOp) { return Kernel::GatherGrad; }
K kernelOf(TopKOp) { return Kernel::Topk; }
K kernelOf(TopKGradOp) { return Kernel::TopkGrad; }
K kernelOf(GatherNDOp g) { return floats(g, Kernel::GatherNd); }
K kernelOf(GatherNDGradOp) { return Kernel::GatherNdGrad; }
K kernelOf(GatherElementsOp g) { return floats(g, Kernel::GatherElements); }
K kernelOf(GatherElementsGradOp) { return Kernel::GatherElementsGrad; }
K kernelOf(ScatterElementsOp s) { return floats(s, Kernel::ScatterElements); }
K kernelOf(ConcatOp) { return Kernel::Concat; }
K kernelOf(SplitOp) { return Kernel::Split; }
K kernelOf(TransposeOp) { return Kernel::Transpose; }
// Copies: the data stays, the result's type gives the shape or the dtype.
K kernelOf(ReshapeOp) { return Kernel::Copy; }
K kernelOf(FlattenOp) { return Kernel::Copy; }
K kernelOf(SqueezeOp) { return Kernel::Copy; }
K kernelOf(UnsqueezeOp) { return Kernel::Copy; }
K kernelOf(IdentityOp) { return Kernel::Copy; }
/// A cast between the dtypes copies convert (F32, BF16, I64 and booleans,
/// as ONNX Cast: floats to integers toward zero, anything to a boolean by
/// being nonzero); none for another (a U8 or I8 number).
K castBetween(Value from, Value to) {
  auto convertible = [](Type t) {
    return t.isF32() || t.isBF16() || t.isInteger(64) || t.isInteger(1);
  };
  if (!convertible(tensorOf(from).getElementType()) ||
      !convertible(tensorOf(to).getElementType()))
    return std::nullopt;
  return Kernel::Copy;
}
K kernelOf(CastOp c) { return castBetween(c.getInput(), c.getResult()); }
K kernelOf(CastLikeOp c) { return castBetween(c.getInput(), c.getResult()); }

/// The pointwise functions: UNARY, with the function and its parameters
/// as its attributes, and the FLOPs the op's description states.
template <typename OpTy>
using IfPointwise =
    std::enable_if_t<OpTy::template hasTrait<PointwiseOpInterface::Trait>(), K>;
template <typename OpTy> IfPointwise<OpTy> kernelOf(OpTy) {
  return Kernel::Unary;
}

//===----------------------------------------------------------------------===//
// Operands: all, but for the ops whose other operands the types or the
// exec's attributes carry.
//===----------------------------------------------------------------------===//

unsigned operandsOf(Operation *op) { return op->getNumOperands(); }
unsigned operandsOf(ReshapeOp) { return 1; }
unsigned operandsOf(CastLikeOp) { return 1; } // the second gives the type
unsigned operandsOf(SqueezeOp) { return 1; }
unsigned operandsOf(UnsqueezeOp) { return 1; }
unsigned operandsOf(ExpandOp) { return 1; }
unsigned operandsOf(SliceOp) { return 1; }
unsigned operandsOf(PadOp) { return 1; }
unsigned operandsOf(TileOp) { return 1; }

//===----------------------------------------------------------------------===//
// Attributes: the op's own, but for the ops whose kernel takes a layout
// computed from constant operands, or fewer than the op has. The plan
// emitter puts each into the field of the same name of the kernel's
// attributes in plan.proto, and refuses one without a field.
//===----------------------------------------------------------------------===//

DictionaryAttr attrsOf(Operation *op) { return op->getAttrDictionary(); }

DictionaryAttr attrsOf(SliceOp s) {
  std::optional<SliceLayout> layout = constantSlice(s);
  Builder b(s.getContext());
  return b.getDictionaryAttr(
      {b.getNamedAttr("starts", b.getDenseI64ArrayAttr(layout->starts)),
       b.getNamedAttr("steps", b.getDenseI64ArrayAttr(layout->steps))});
}
DictionaryAttr attrsOf(PadOp p) {
  std::optional<PadLayout> layout = constantPad(p);
  Builder b(p.getContext());
  return b.getDictionaryAttr(
      {b.getNamedAttr("starts", b.getDenseI64ArrayAttr(layout->begins)),
       b.getNamedAttr("value", b.getF64FloatAttr(layout->value))});
}

/// UNARY's and UNARY_GRAD's attributes (plan.proto's UnaryAttrs): the
/// function by its name in the schema, and both parameters, defaults too.
DictionaryAttr unaryAttrs(Operation *op, UnaryFn fn, float alpha, float beta) {
  Builder b(op->getContext());
  return b.getDictionaryAttr(
      {b.getNamedAttr("fn", b.getStringAttr("FN_" + stringifyEnum(fn).upper())),
       b.getNamedAttr("alpha", b.getF32FloatAttr(alpha)),
       b.getNamedAttr("beta", b.getF32FloatAttr(beta))});
}
template <typename OpTy>
std::enable_if_t<OpTy::template hasTrait<PointwiseOpInterface::Trait>(),
                 DictionaryAttr>
attrsOf(OpTy op) {
  return unaryAttrs(op, op.getFn(), op.getAlphaValue(), op.getBetaValue());
}
DictionaryAttr attrsOf(UnaryGradOp g) {
  return unaryAttrs(g, g.getFn(), g.getAlpha().convertToFloat(),
                    g.getBeta().convertToFloat());
}

DictionaryAttr none(Operation *op) {
  return Builder(op->getContext()).getDictionaryAttr({});
}
// None: batch_dims is 0 (the op's verifier), the tuple length in the shapes.
DictionaryAttr attrsOf(GatherNDOp g) { return none(g); }
// Copies: the result buffer's type is the shape (Reshape's allowzero,
// Flatten's axis, the squeezed axes) or the dtype (Cast's to).
DictionaryAttr attrsOf(ReshapeOp r) { return none(r); }
DictionaryAttr attrsOf(FlattenOp f) { return none(f); }
DictionaryAttr attrsOf(SqueezeOp s) { return none(s); }
DictionaryAttr attrsOf(UnsqueezeOp u) { return none(u); }
DictionaryAttr attrsOf(CastOp c) { return none(c); }
DictionaryAttr attrsOf(CastLikeOp c) { return none(c); }
// The axis: the parts' sizes are the result buffers'.
DictionaryAttr attrsOf(SplitOp s) {
  Builder b(s.getContext());
  return b.getDictionaryAttr(
      {b.getNamedAttr("axis", b.getI64IntegerAttr(s.getAxis()))});
}

DictionaryAttr attrsOf(TriluOp t) {
  Builder b(t.getContext());
  SmallVector<NamedAttribute> attrs{
      b.getNamedAttr("diagonal", b.getI64IntegerAttr(t.getK()))};
  if (t.getUpper())
    attrs.push_back(b.getNamedAttr("upper", b.getUnitAttr()));
  return b.getDictionaryAttr(attrs);
}

// k is the values' size along the axis.
DictionaryAttr attrsOf(TopKOp t) {
  Builder b(t.getContext());
  SmallVector<NamedAttribute> attrs{b.getNamedAttr("axis", t.getAxisAttr())};
  if (t.getSmallest())
    attrs.push_back(b.getNamedAttr("smallest", b.getUnitAttr()));
  return b.getDictionaryAttr(attrs);
}

//===----------------------------------------------------------------------===//
// FLOPs (a multiply-add counts 2): per element, as the op's ODS definition
// declares them (Train_Flops), or by a formula below.
//===----------------------------------------------------------------------===//

/// Whether the op declares its FLOPs per element (Train_Flops).
template <typename OpTy, typename = void>
struct DeclaresFlops : std::false_type {};
template <typename OpTy>
struct DeclaresFlops<OpTy, std::void_t<decltype(OpTy::kFlopsPerElement)>>
    : std::true_type {};

/// Elements of the op's largest operand or result: a reduction's input, a
/// broadcast's result, a gradient's table.
double largestElements(Operation *op) {
  double most = 0.0;
  auto consider = [&](Type type) {
    if (auto tensor = dyn_cast<RankedTensorType>(type))
      most = std::max(most, double(tensor.getNumElements()));
  };
  for (Type t : op->getOperandTypes())
    consider(t);
  for (Type t : op->getResultTypes())
    consider(t);
  return most;
}
template <typename OpTy>
std::enable_if_t<DeclaresFlops<OpTy>::value, double> flopsOf(OpTy op) {
  return OpTy::kFlopsPerElement * largestElements(op);
}

/// The FLOPs per element of the pointwise op of function `fn`, from the
/// ops' descriptions.
template <typename... OpTys> double flopsPerElement(UnaryFn fn) {
  double flops = 0.0;
  auto one = [&](auto *tag) {
    using OpTy = std::remove_pointer_t<decltype(tag)>;
    if constexpr (OpTy::template hasTrait<PointwiseOpInterface::Trait>())
      if (OpTy::kFn == fn)
        flops = OpTy::kFlopsPerElement;
  };
  (one(static_cast<OpTys *>(nullptr)), ...);
  return flops;
}
// The derivative: about the function again, and the product with dy.
double flopsOf(UnaryGradOp g) {
  double perElement = flopsPerElement<
#define GET_OP_LIST
#include "dialects/Train/IR/TrainOps.cpp.inc"
      >(g.getFn());
  return (perElement + 1.0) * elements(g);
}
// An MLP activation, from the functions it is made of.
double perElement(Activation act) {
  switch (act) {
  case Activation::Gelu: // x/2 (1 + erf(x/√2))
    return ErfOp::kFlopsPerElement + 4.0;
  case Activation::GeluTanh: // x/2 (1 + tanh(√(2/π) (x + 0.044715 x³)))
    return TanhOp::kFlopsPerElement + 7.0;
  case Activation::Silu: // x σ(x)
    return SigmoidOp::kFlopsPerElement + 1.0;
  case Activation::Relu:
    return ReluOp::kFlopsPerElement;
  }
  llvm_unreachable("an activation without its FLOPs");
}
// The backward recomputes the function for its derivative and multiplies
// by dy; a gated one also multiplies by up (forward) and by both (backward).
double flopsOf(ActivationOp a) { return perElement(a.getAct()) * elements(a); }
double flopsOf(ActivationGradOp a) {
  return (perElement(a.getAct()) + 2.0) * elements(a);
}
double flopsOf(GatedActivationOp a) {
  return (perElement(a.getAct()) + 1.0) * elements(a);
}
double flopsOf(GatedActivationGradOp a) {
  return (perElement(a.getAct()) + 4.0) * elements(a.getGate());
}
// A selection of k along the axis: about log2(k) comparisons per element.
double flopsOf(TopKOp t) {
  ArrayRef<int64_t> shape = tensorOf(t.getValues()).getShape();
  // I64Attr's getter is unsigned: the axis may be negative.
  int64_t axis = int64_t(t.getAxis());
  if (axis < 0)
    axis += int64_t(shape.size());
  double k = double(shape[axis]);
  return std::max(1.0, std::ceil(std::log2(k))) * elements(t.getInput());
}
// A GEMM of x [rows, in] into `out`, and its two gradient GEMMs. An expert
// linear's rows are the routed ones only: each row through one expert (k
// of E per token).
double gemmFlops(Value input, Value out, double products) {
  return 2.0 * products * elements(out) * tensorOf(input).getShape().back();
}
double flopsOf(LinearOp l) { return gemmFlops(l.getInput(), l, 1); }
double flopsOf(LinearGradOp l) {
  return gemmFlops(l.getInput(), l.getGrad(), 2);
}
double flopsOf(ExpertLinearOp l) { return gemmFlops(l.getInput(), l, 1); }
double flopsOf(ExpertLinearGradOp l) {
  return gemmFlops(l.getInput(), l.getGrad(), 2);
}
double flopsOf(MatMulOp m) {
  return 2.0 * elements(m) * tensorOf(m.getLhs()).getShape().back();
}
// The (query, key) pairs of a sequence of `seq` that the causal mask and
// the window (keys at most `window` back, 0: all) leave, which the kernels
// alone visit: sum over i of the keys in [lo_i, hi_i).
double keptPairs(double seq, bool causal, int64_t window) {
  double w = double(window);
  if (window <= 0 || w >= seq)
    return causal ? seq * (seq + 1) / 2 : seq * seq;
  return causal ? w * (w + 1) / 2 + (seq - w) * w
                : seq * seq - (seq - w) * (seq - w + 1) / 2;
}
// q [batch, seq, heads * head_dim]: QK^T and PV forward over the kept
// pairs; the backward recomputes the scores and takes three more products.
double flopsOf(AttentionOp a) {
  auto q = tensorOf(a.getQ()).getShape();
  return 4.0 * q[0] * keptPairs(q[1], a.getCausal(), a.getWindow()) * q[2];
}
double flopsOf(AttentionGradOp a) {
  auto q = tensorOf(a.getQ()).getShape();
  return 10.0 * q[0] * keptPairs(q[1], a.getCausal(), a.getWindow()) * q[2];
}
// The logits GEMM, and for the backward its two gradient GEMMs too.
double headFlops(Value input, Value weight, double products) {
  return products * elements(input) * elements(weight) /
         tensorOf(input).getShape().back();
}
double flopsOf(HeadCrossEntropyOp h) {
  return headFlops(h.getInput(), h.getWeight(), 2.0);
}
double flopsOf(HeadCrossEntropyGradOp h) {
  return headFlops(h.getInput(), h.getWeight(), 6.0);
}
// Each GEMM of a gated MLP is [rows, dim] x [dim, hidden] (or its
// transpose): three forward; the backward recomputes gate and up and
// takes the six gradient GEMMs.
double mlpFlops(Value input, Value gate, double gemms) {
  return gemms * 2.0 * elements(input) * elements(gate) /
         tensorOf(input).getShape().back();
}
double flopsOf(GatedMlpOp m) { return mlpFlops(m.getInput(), m.getGate(), 3); }
double flopsOf(GatedMlpGradOp m) {
  return mlpFlops(m.getInput(), m.getGate(), 8);
}

template <typename OpTy>
struct Model : KernelOpInterface::ExternalModel<Model<OpTy>, OpTy> {
  std::optional<Kernel> getKernel(Operation *op) const {
    return kernelOf(cast<OpTy>(op));
  }
  unsigned getKernelOperands(Operation *op) const {
    return operandsOf(cast<OpTy>(op));
  }
  DictionaryAttr getKernelAttrs(Operation *op) const {
    return attrsOf(cast<OpTy>(op));
  }
  double getFlops(Operation *op) const { return flopsOf(cast<OpTy>(op)); }
};

/// Whether `kernelOf(OpTy)` names the op's kernel.
template <typename OpTy, typename = void> struct HasKernel : std::false_type {};
template <typename OpTy>
struct HasKernel<OpTy, std::void_t<decltype(kernelOf(std::declval<OpTy>()))>>
    : std::true_type {};

/// Whether the op's FLOPs are declared or have a formula.
template <typename OpTy, typename = void> struct HasFlops : std::false_type {};
template <typename OpTy>
struct HasFlops<OpTy, std::void_t<decltype(flopsOf(std::declval<OpTy>()))>>
    : std::true_type {};

template <typename OpTy> void attachOne(MLIRContext *context) {
  if constexpr (HasKernel<OpTy>::value) {
    static_assert(HasFlops<OpTy>::value,
                  "an op with a plan kernel states its FLOPs: Train_Flops<N> "
                  "in its definition (TrainOps.td), or a flopsOf formula in "
                  "TrainKernels.cpp");
    OpTy::template attachInterface<Model<OpTy>>(*context);
  }
}
template <typename... OpTys> void attach(MLIRContext *context) {
  (attachOne<OpTys>(context), ...);
}

} // namespace

void registerTrainKernels(DialectRegistry &registry) {
  // Every op of the dialect (ODS's list) that has a `kernelOf` above.
  registry.addExtension(+[](MLIRContext *context, train::TrainDialect *) {
    attach<
#define GET_OP_LIST
#include "dialects/Train/IR/TrainOps.cpp.inc"
        >(context);
  });
}

} // namespace mt::sched
