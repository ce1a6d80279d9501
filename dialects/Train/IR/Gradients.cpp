//===- Gradients.cpp - the gradient rule of each differentiable op --------===//
//
// One function per op, attached to the op as its GradientOpInterface (an
// external model, as MLIR attaches interfaces that live apart from the op
// definitions). Each rule reads the gradients of the op's results and adds
// those of its operands; fused ops emit their *_grad op, primitives are
// expressed in primitives, and a pointwise function without a rule here
// emits its derivative's op (train.unary_grad). Every rule has a
// finite-difference test (test/unit/gradient_rules_test.cpp).
//
//===----------------------------------------------------------------------===//
#include "dialects/Train/IR/Gradient.h"
#include "dialects/Train/IR/ShapeInference.h"
#include "dialects/Train/IR/TrainOps.h"

#include <cmath>

using namespace mlir;

namespace mt::train {

#include "dialects/Train/IR/GradientOpInterface.cpp.inc"

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

using G = GradientBuilder;

//===----------------------------------------------------------------------===//
// Fused ops: their *_grad op.
//===----------------------------------------------------------------------===//

LogicalResult gradient(EmbeddingOp e, G &g) {
  g.accumulate(e.getTable(), g.emit<EmbeddingGradOp>(
                                 e.getLoc(), e.getTable().getType(), g.dy(e),
                                 e.getIds(), e.getPaddingIdxAttr()));
  return success();
}

LogicalResult gradient(LinearOp l, G &g) {
  Value dy = g.dy(l);
  auto grad = g.emit<LinearGradOp>(
      l.getLoc(), TypeRange{l.getInput().getType(), l.getWeight().getType()},
      l.getInput(), l.getWeight(), dy, l.getLayoutAttr());
  g.accumulate(l.getInput(), grad.getInputGrad());
  g.accumulate(l.getWeight(), grad.getWeightGrad());
  if (l.getBias())
    g.accumulate(l.getBias(),
                 g.unbroadcast(l.getLoc(), dy, l.getBias().getType()));
  return success();
}

/// The ids choose the experts and carry no gradient (TopK's indices).
LogicalResult gradient(ExpertLinearOp l, G &g) {
  auto grad = g.emit<ExpertLinearGradOp>(
      l.getLoc(), TypeRange{l.getInput().getType(), l.getWeight().getType()},
      l.getInput(), l.getIds(), l.getWeight(), g.dy(l), l.getLayoutAttr());
  g.accumulate(l.getInput(), grad.getInputGrad());
  g.accumulate(l.getWeight(), grad.getWeightGrad());
  return success();
}

LogicalResult gradient(RmsNormOp n, G &g) {
  auto grad = g.emit<RmsNormGradOp>(
      n.getLoc(), TypeRange{n.getInput().getType(), n.getWeight().getType()},
      n.getInput(), n.getWeight(), g.dy(n), n.getEpsAttr(), n.getPlusOneAttr());
  g.accumulate(n.getInput(), grad.getInputGrad());
  g.accumulate(n.getWeight(), grad.getWeightGrad());
  return success();
}

LogicalResult gradient(LayerNormOp n, G &g) {
  Value dy = g.dy(n);
  auto grad = g.emit<LayerNormGradOp>(
      n.getLoc(), TypeRange{n.getInput().getType(), n.getWeight().getType()},
      n.getInput(), n.getWeight(), dy, n.getEpsAttr());
  g.accumulate(n.getInput(), grad.getInputGrad());
  g.accumulate(n.getWeight(), grad.getWeightGrad());
  if (n.getBias())
    g.accumulate(n.getBias(),
                 g.unbroadcast(n.getLoc(), dy, n.getBias().getType()));
  return success();
}

LogicalResult gradient(RotaryOp r, G &g) {
  g.accumulate(r.getInput(),
               g.emit<RotaryGradOp>(r.getLoc(), r.getInput().getType(), g.dy(r),
                                    r.getCos(), r.getSin(), r.getHeadDimAttr(),
                                    r.getInterleavedAttr()));
  return success();
}

LogicalResult gradient(AttentionOp a, G &g) {
  auto grad = g.emit<AttentionGradOp>(
      a.getLoc(),
      TypeRange{a.getQ().getType(), a.getK().getType(), a.getV().getType()},
      a.getQ(), a.getK(), a.getV(), a.getMask(), g.dy(a), a.getNumHeadsAttr(),
      a.getNumKvHeadsAttr(), a.getScaleAttr(), a.getCausalAttr(),
      a.getWindowAttr(), a.getSoftcapAttr());
  g.accumulate(a.getQ(), grad.getQGrad());
  g.accumulate(a.getK(), grad.getKGrad());
  g.accumulate(a.getV(), grad.getVGrad());
  return success();
}

LogicalResult gradient(ActivationOp a, G &g) {
  g.accumulate(a.getInput(),
               g.emit<ActivationGradOp>(a.getLoc(), a.getInput().getType(),
                                        a.getInput(), g.dy(a), a.getActAttr()));
  return success();
}

LogicalResult gradient(GatedActivationOp a, G &g) {
  auto grad = g.emit<GatedActivationGradOp>(
      a.getLoc(), TypeRange{a.getGate().getType(), a.getUp().getType()},
      a.getGate(), a.getUp(), g.dy(a), a.getActAttr());
  g.accumulate(a.getGate(), grad.getGateGrad());
  g.accumulate(a.getUp(), grad.getUpGrad());
  return success();
}

LogicalResult gradient(CrossEntropyOp ce, G &g) {
  g.accumulate(ce.getLogits(), g.emit<CrossEntropyGradOp>(
                                   ce.getLoc(), ce.getLogits().getType(),
                                   ce.getLogits(), ce.getLabels(), g.dy(ce),
                                   ce.getIgnoreIndexAttr(), ce.getShiftAttr()));
  return success();
}

//===----------------------------------------------------------------------===//
// Primitives that remain on a differentiable path after fusion.
//===----------------------------------------------------------------------===//

/// d(a + b) = (dy, dy) and d(a - b) = (dy, -dy), each summed back over
/// what the operand broadcast.
template <typename OpTy> LogicalResult addOrSub(OpTy op, G &g) {
  OpBuilder &b = g.builder();
  Location loc = op.getLoc();
  Value dy = g.dy(op);
  g.accumulate(op.getLhs(), g.unbroadcast(loc, dy, op.getLhs().getType()));
  Value rhs =
      std::is_same_v<OpTy, SubOp> ? b.create<NegOp>(loc, dy).getResult() : dy;
  g.accumulate(op.getRhs(), g.unbroadcast(loc, rhs, op.getRhs().getType()));
  return success();
}
LogicalResult gradient(AddOp op, G &g) { return addOrSub(op, g); }
LogicalResult gradient(SubOp op, G &g) { return addOrSub(op, g); }

LogicalResult gradient(MulOp m, G &g) {
  OpBuilder &b = g.builder();
  Location loc = m.getLoc();
  Value dy = g.dy(m);
  if (g.isActive(m.getLhs()))
    g.accumulate(m.getLhs(),
                 g.unbroadcast(loc, b.create<MulOp>(loc, dy, m.getRhs()),
                               m.getLhs().getType()));
  if (g.isActive(m.getRhs()))
    g.accumulate(m.getRhs(),
                 g.unbroadcast(loc, b.create<MulOp>(loc, dy, m.getLhs()),
                               m.getRhs().getType()));
  return success();
}

/// A scalar constant of v's element type.
Value scalar(OpBuilder &b, Location loc, Value like, double value) {
  auto type = RankedTensorType::get({}, typeOf(like).getElementType());
  return b.create<ConstantOp>(
      loc, DenseElementsAttr::get(
               type, b.getFloatAttr(type.getElementType(), value)));
}

/// d(a / b) = (dy / b, -(dy y) / b), y = a / b, each summed back over what
/// the operand broadcast.
LogicalResult gradient(DivOp d, G &g) {
  OpBuilder &b = g.builder();
  Location loc = d.getLoc();
  Value dy = g.dy(d);
  if (g.isActive(d.getLhs()))
    g.accumulate(d.getLhs(),
                 g.unbroadcast(loc, b.create<DivOp>(loc, dy, d.getRhs()),
                               d.getLhs().getType()));
  if (g.isActive(d.getRhs())) {
    Value dyy = b.create<MulOp>(loc, dy, d.getResult());
    Value q = b.create<DivOp>(loc, dyy, d.getRhs());
    g.accumulate(d.getRhs(), g.unbroadcast(loc, b.create<NegOp>(loc, q),
                                           d.getRhs().getType()));
  }
  return success();
}

/// d(a ^ b) = (dy b a^(b - 1), dy y log(a)), y = a ^ b, each summed back
/// over what the operand broadcast; a float exponent only.
LogicalResult gradient(PowOp p, G &g) {
  OpBuilder &b = g.builder();
  Location loc = p.getLoc();
  Value base = p.getLhs(), exponent = p.getRhs(), dy = g.dy(p);
  if (typeOf(exponent).getElementType() != typeOf(base).getElementType())
    return p.emitOpError("with an exponent of another type than its base has "
                         "no gradient rule; it lies on a path from a "
                         "trainable weight to the loss");
  if (g.isActive(base)) {
    Value less = b.create<SubOp>(loc, exponent, scalar(b, loc, exponent, 1.0));
    Value d = b.create<MulOp>(loc, exponent, b.create<PowOp>(loc, base, less));
    g.accumulate(
        base, g.unbroadcast(loc, b.create<MulOp>(loc, dy, d), base.getType()));
  }
  if (g.isActive(exponent)) {
    Value dyy = b.create<MulOp>(loc, dy, p.getResult());
    Value d = b.create<MulOp>(loc, dyy, b.create<LogOp>(loc, base));
    g.accumulate(exponent, g.unbroadcast(loc, d, exponent.getType()));
  }
  return success();
}

/// x's type with the reduced `axes` (all when empty) of size 1, and in `n`
/// the elements each reduction takes.
RankedTensorType keptType(RankedTensorType x, ArrayRef<int64_t> axes,
                          int64_t &n) {
  SmallVector<int64_t> kept(x.getShape());
  n = 1;
  for (int64_t d = 0; d < x.getRank(); ++d)
    if (axes.empty() || llvm::any_of(axes, [&](int64_t a) {
          return a == d || a + x.getRank() == d;
        })) {
      n *= kept[d];
      kept[d] = 1;
    }
  return RankedTensorType::get(kept, x.getElementType());
}

/// dx = dy * scale expanded back over the reduced axes: a sum's scale is
/// 1, a mean's 1 over the elements of each.
template <typename OpTy> LogicalResult reduceBack(OpTy r, G &g, bool mean) {
  OpBuilder &b = g.builder();
  Location loc = r.getLoc();
  auto x = typeOf(r.getInput());
  int64_t n;
  Value dy = g.reshapeTo(loc, g.dy(r), keptType(x, r.getAxes(), n));
  if (mean)
    dy = b.create<MulOp>(loc, dy, scalar(b, loc, dy, 1.0 / double(n)));
  auto st = RankedTensorType::get({x.getRank()}, b.getI64Type());
  Value shape =
      b.create<ConstantOp>(loc, DenseElementsAttr::get(st, x.getShape()));
  g.accumulate(r.getInput(), b.create<ExpandOp>(loc, x, dy, shape));
  return success();
}
LogicalResult gradient(ReduceSumOp r, G &g) { return reduceBack(r, g, false); }
LogicalResult gradient(ReduceMeanOp r, G &g) { return reduceBack(r, g, true); }

/// dx = dy / count where x is the maximum of its reduced elements (ties
/// share it evenly, as torch.amax), 0 elsewhere.
LogicalResult gradient(ReduceMaxOp r, G &g) {
  OpBuilder &b = g.builder();
  Location loc = r.getLoc();
  Value x = r.getInput();
  auto xt = typeOf(x);
  int64_t n;
  RankedTensorType kept = keptType(xt, r.getAxes(), n);
  Value y = g.reshapeTo(loc, r.getResult(), kept);
  Value dy = g.reshapeTo(loc, g.dy(r), kept);
  Value isMax = b.create<EqualOp>(loc, x, y);
  Value zero = scalar(b, loc, x, 0.0), one = scalar(b, loc, x, 1.0);
  Value count =
      b.create<ReduceSumOp>(loc, b.create<WhereOp>(loc, isMax, one, zero),
                            r.getAxesAttr(), b.getUnitAttr());
  Value share = b.create<DivOp>(loc, dy, count);
  g.accumulate(x, b.create<WhereOp>(loc, isMax, share, zero));
  return success();
}

/// max(a, b): dy to the larger, half to each where they tie (as
/// torch.maximum); min the same with the smaller. Each summed back over
/// what its operand broadcast.
template <typename OpTy> LogicalResult maxOrMin(OpTy op, G &g) {
  OpBuilder &b = g.builder();
  Location loc = op.getLoc();
  Value lhs = op.getLhs(), rhs = op.getRhs(), dy = g.dy(op);
  constexpr bool isMax = std::is_same_v<OpTy, MaxOp>;
  Value zero = scalar(b, loc, dy, 0.0);
  Value half = b.create<MulOp>(loc, dy, scalar(b, loc, dy, 0.5));
  Value tie = b.create<EqualOp>(loc, lhs, rhs);
  auto share = [&](Value self, Value other) {
    Value wins = isMax ? b.create<GreaterOp>(loc, self, other).getResult()
                       : b.create<LessOp>(loc, self, other).getResult();
    Value strict = b.create<WhereOp>(loc, wins, dy, zero);
    return g.unbroadcast(loc, b.create<WhereOp>(loc, tie, half, strict),
                         self.getType());
  };
  if (g.isActive(lhs))
    g.accumulate(lhs, share(lhs, rhs));
  if (g.isActive(rhs))
    g.accumulate(rhs, share(rhs, lhs));
  return success();
}
LogicalResult gradient(MaxOp op, G &g) { return maxOrMin(op, g); }
LogicalResult gradient(MinOp op, G &g) { return maxOrMin(op, g); }

/// The gradient goes to the branch each element chose (zeros to the other),
/// summed back over what that branch broadcast; the condition has none.
LogicalResult gradient(WhereOp w, G &g) {
  OpBuilder &b = g.builder();
  Location loc = w.getLoc();
  Value dy = g.dy(w), zero = scalar(b, loc, dy, 0.0);
  if (g.isActive(w.getX()))
    g.accumulate(
        w.getX(),
        g.unbroadcast(loc, b.create<WhereOp>(loc, w.getCondition(), dy, zero),
                      w.getX().getType()));
  if (g.isActive(w.getY()))
    g.accumulate(
        w.getY(),
        g.unbroadcast(loc, b.create<WhereOp>(loc, w.getCondition(), zero, dy),
                      w.getY().getType()));
  return success();
}

/// The unary functions, each from its result y where that is cheaper.
LogicalResult gradient(ExpOp e, G &g) { // dy y
  g.accumulate(e.getInput(),
               g.builder().create<MulOp>(e.getLoc(), g.dy(e), e.getResult()));
  return success();
}

LogicalResult gradient(LogOp l, G &g) { // dy / x
  g.accumulate(l.getInput(),
               g.builder().create<DivOp>(l.getLoc(), g.dy(l), l.getInput()));
  return success();
}

LogicalResult gradient(TanhOp t, G &g) { // dy (1 - y^2)
  OpBuilder &b = g.builder();
  Location loc = t.getLoc();
  Value y = t.getResult();
  Value y2 = b.create<MulOp>(loc, y, y);
  Value d = b.create<SubOp>(loc, scalar(b, loc, y, 1.0), y2);
  g.accumulate(t.getInput(), b.create<MulOp>(loc, g.dy(t), d));
  return success();
}

LogicalResult gradient(SqrtOp s, G &g) { // (dy / y) / 2
  OpBuilder &b = g.builder();
  Location loc = s.getLoc();
  Value q = b.create<DivOp>(loc, g.dy(s), s.getResult());
  g.accumulate(s.getInput(), b.create<MulOp>(loc, q, scalar(b, loc, q, 0.5)));
  return success();
}

LogicalResult gradient(AbsOp a, G &g) { // dy sign(x), with sign(0) = 0
  OpBuilder &b = g.builder();
  Location loc = a.getLoc();
  Value x = a.getInput(), dy = g.dy(a), zero = scalar(b, loc, x, 0.0);
  Value up = b.create<WhereOp>(loc, b.create<GreaterOp>(loc, x, zero), dy,
                               scalar(b, loc, dy, 0.0));
  g.accumulate(x, b.create<WhereOp>(loc, b.create<LessOp>(loc, x, zero),
                                    b.create<NegOp>(loc, dy), up));
  return success();
}

LogicalResult gradient(ErfOp e, G &g) { // dy 2/sqrt(pi) exp(-x^2)
  OpBuilder &b = g.builder();
  Location loc = e.getLoc();
  Value x = e.getInput();
  Value gauss =
      b.create<ExpOp>(loc, b.create<NegOp>(loc, b.create<MulOp>(loc, x, x)));
  Value d = b.create<MulOp>(loc, gauss, scalar(b, loc, x, M_2_SQRTPI));
  g.accumulate(x, b.create<MulOp>(loc, g.dy(e), d));
  return success();
}

LogicalResult gradient(SinOp s, G &g) { // dy cos(x)
  OpBuilder &b = g.builder();
  Location loc = s.getLoc();
  g.accumulate(
      s.getInput(),
      b.create<MulOp>(loc, g.dy(s), b.create<CosOp>(loc, s.getInput())));
  return success();
}

LogicalResult gradient(CosOp c, G &g) { // -dy sin(x)
  OpBuilder &b = g.builder();
  Location loc = c.getLoc();
  Value d = b.create<MulOp>(loc, g.dy(c), b.create<SinOp>(loc, c.getInput()));
  g.accumulate(c.getInput(), b.create<NegOp>(loc, d));
  return success();
}

LogicalResult gradient(ReciprocalOp r, G &g) { // -dy y^2
  OpBuilder &b = g.builder();
  Location loc = r.getLoc();
  Value y = r.getResult();
  Value dyy2 = b.create<MulOp>(loc, g.dy(r), b.create<MulOp>(loc, y, y));
  g.accumulate(r.getInput(), b.create<NegOp>(loc, dyy2));
  return success();
}

LogicalResult gradient(SigmoidOp s, G &g) { // dy y (1 - y)
  OpBuilder &b = g.builder();
  Location loc = s.getLoc();
  Value y = s.getResult();
  Value oneMinus = b.create<SubOp>(loc, scalar(b, loc, y, 1.0), y);
  Value d = b.create<MulOp>(loc, y, oneMinus);
  g.accumulate(s.getInput(), b.create<MulOp>(loc, g.dy(s), d));
  return success();
}

/// The last two dims of v swapped.
Value swapLastTwo(OpBuilder &b, Location loc, Value v) {
  SmallVector<int64_t> perm;
  for (int64_t d = 0; d < typeOf(v).getRank(); ++d)
    perm.push_back(d);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return b.create<TransposeOp>(loc, v, b.getDenseI64ArrayAttr(perm));
}

/// d(A B) = (dY B^T, A^T dY), each summed back over the batch dims the
/// operand broadcast (a product of two activations that no fused op took:
/// attention under `--fuse none`).
LogicalResult gradient(MatMulOp m, G &g) {
  OpBuilder &b = g.builder();
  Location loc = m.getLoc();
  if (typeOf(m.getLhs()).getRank() < 2 || typeOf(m.getRhs()).getRank() < 2)
    return m.emitOpError("of a 1-D operand has no gradient rule; it lies on a "
                         "path from a trainable weight to the loss");
  Value dy = g.dy(m);
  if (g.isActive(m.getLhs()))
    g.accumulate(
        m.getLhs(),
        g.unbroadcast(
            loc, b.create<MatMulOp>(loc, dy, swapLastTwo(b, loc, m.getRhs())),
            m.getLhs().getType()));
  if (g.isActive(m.getRhs()))
    g.accumulate(
        m.getRhs(),
        g.unbroadcast(
            loc, b.create<MatMulOp>(loc, swapLastTwo(b, loc, m.getLhs()), dy),
            m.getRhs().getType()));
  return success();
}

/// The gradient summed back over what the input was broadcast along (GQA's
/// repeated key/value heads when attention is not fused).
LogicalResult gradient(ExpandOp e, G &g) {
  g.accumulate(e.getInput(),
               g.unbroadcast(e.getLoc(), g.dy(e), e.getInput().getType()));
  return success();
}

/// dx = y (dy - sum(dy y)) along the softmax's axis.
LogicalResult gradient(SoftmaxOp s, G &g) {
  OpBuilder &b = g.builder();
  Location loc = s.getLoc();
  Value y = s.getResult(), dy = g.dy(s);
  Value dyy = b.create<MulOp>(loc, dy, y);
  Value sum = b.create<ReduceSumOp>(
      loc, dyy, b.getDenseI64ArrayAttr({int64_t(s.getAxis())}),
      b.getUnitAttr());
  Value centered = b.create<SubOp>(loc, dy, sum);
  g.accumulate(s.getInput(), b.create<MulOp>(loc, y, centered));
  return success();
}

/// dx = dy - exp(y) sum(dy) along the axis (exp(y) is the softmax).
LogicalResult gradient(LogSoftmaxOp s, G &g) {
  OpBuilder &b = g.builder();
  Location loc = s.getLoc();
  Value dy = g.dy(s);
  Value sum = b.create<ReduceSumOp>(
      loc, dy, b.getDenseI64ArrayAttr({int64_t(s.getAxis())}), b.getUnitAttr());
  Value p = b.create<ExpOp>(loc, s.getResult());
  g.accumulate(s.getInput(),
               b.create<SubOp>(loc, dy, b.create<MulOp>(loc, p, sum)));
  return success();
}

LogicalResult gradient(NegOp n, G &g) {
  g.accumulate(n.getInput(),
               g.builder().create<NegOp>(n.getLoc(), g.dy(n)).getResult());
  return success();
}

LogicalResult gradient(IdentityOp i, G &g) {
  g.accumulate(i.getInput(), g.dy(i));
  return success();
}

/// Reshape, Flatten, Squeeze, Unsqueeze: the gradient reshaped back.
template <typename OpTy> LogicalResult reshapeBack(OpTy op, G &g) {
  Value input = op->getOperand(0);
  g.accumulate(input, g.reshapeTo(op.getLoc(), g.dy(op), input.getType()));
  return success();
}
LogicalResult gradient(ReshapeOp op, G &g) { return reshapeBack(op, g); }
LogicalResult gradient(FlattenOp op, G &g) { return reshapeBack(op, g); }
LogicalResult gradient(SqueezeOp op, G &g) { return reshapeBack(op, g); }
LogicalResult gradient(UnsqueezeOp op, G &g) { return reshapeBack(op, g); }

LogicalResult gradient(TransposeOp t, G &g) {
  SmallVector<int64_t> inverse(t.getPerm().size());
  for (auto [i, p] : llvm::enumerate(t.getPerm()))
    inverse[p] = int64_t(i);
  OpBuilder &b = g.builder();
  g.accumulate(t.getInput(),
               b.create<TransposeOp>(t.getLoc(), g.dy(t),
                                     b.getDenseI64ArrayAttr(inverse))
                   .getResult());
  return success();
}

/// The parts' gradients side by side (zeros for a part nothing read).
LogicalResult gradient(SplitOp s, G &g) {
  SmallVector<Value> parts;
  for (unsigned i = 0; i < s->getNumResults(); ++i)
    parts.push_back(g.dy(s, i));
  g.accumulate(s.getInput(),
               g.builder()
                   .create<ConcatOp>(s.getLoc(), parts, s.getAxisAttr())
                   .getResult());
  return success();
}

/// The gradient cut back into the inputs' sizes.
LogicalResult gradient(ConcatOp c, G &g) {
  int64_t axis = *normalizeAxis(c.getAxis(), typeOf(c).getRank());
  SmallVector<int64_t> sizes;
  for (Value v : c.getInputs())
    sizes.push_back(typeOf(v).getDimSize(axis));
  OpBuilder &b = g.builder();
  auto split = b.create<SplitOp>(c.getLoc(), g.dy(c), c.getAxisAttr(),
                                 b.getDenseI64ArrayAttr(sizes));
  for (auto [v, part] : llvm::zip(c.getInputs(), split.getResults()))
    g.accumulate(v, part);
  return success();
}

/// dy summed back into the rows (along the axis) the indices read; the
/// indices have no gradient.
LogicalResult gradient(GatherOp gather, G &g) {
  OpBuilder &b = g.builder();
  g.accumulate(gather.getData(),
               b.create<GatherGradOp>(gather.getLoc(),
                                      gather.getData().getType(), g.dy(gather),
                                      gather.getIndices(), gather.getAxisAttr())
                   .getResult());
  return success();
}

/// Trilu keeps or zeroes each element by its place alone: the same Trilu
/// of dy.
LogicalResult gradient(TriluOp t, G &g) {
  g.accumulate(
      t.getInput(),
      g.builder()
          .create<TriluOp>(t.getLoc(), g.dy(t), t.getUpperAttr(), t.getKAttr())
          .getResult());
  return success();
}

/// Element j is in the sums of the elements after it (before it, when
/// reversed): the CumSum of dy the other way, as exclusive as the forward.
LogicalResult gradient(CumSumOp c, G &g) {
  OpBuilder &b = g.builder();
  g.accumulate(c.getInput(),
               b.create<CumSumOp>(c.getLoc(), g.dy(c), c.getAxisAttr(),
                                  c.getExclusiveAttr(),
                                  c.getReverse() ? UnitAttr() : b.getUnitAttr())
                   .getResult());
  return success();
}

/// Each element is read once per repeat: dy as [r0, d0, r1, d1, ...] summed
/// over the repeats.
LogicalResult gradient(TileOp t, G &g) {
  OpBuilder &b = g.builder();
  Location loc = t.getLoc();
  auto in = typeOf(t.getInput()), out = typeOf(t);
  SmallVector<int64_t> split, axes;
  for (int64_t d = 0; d < in.getRank(); ++d) {
    int64_t n = in.getDimSize(d);
    split.push_back(n ? out.getDimSize(d) / n : 0);
    split.push_back(n);
    axes.push_back(2 * d);
  }
  Value dy = g.reshapeTo(loc, g.dy(t),
                         RankedTensorType::get(split, in.getElementType()));
  Value sum = b.create<ReduceSumOp>(loc, dy, b.getDenseI64ArrayAttr(axes),
                                    /*keepdims=*/nullptr);
  g.accumulate(t.getInput(), g.reshapeTo(loc, sum, in));
  return success();
}

/// dy summed back into the slices the index tuples read; the indices have
/// no gradient.
LogicalResult gradient(GatherNDOp gather, G &g) {
  g.accumulate(gather.getData(),
               g.builder()
                   .create<GatherNDGradOp>(gather.getLoc(),
                                           gather.getData().getType(),
                                           g.dy(gather), gather.getIndices())
                   .getResult());
  return success();
}

/// dy summed back into the places the indices read; the indices have no
/// gradient.
LogicalResult gradient(GatherElementsOp gather, G &g) {
  g.accumulate(gather.getData(),
               g.builder()
                   .create<GatherElementsGradOp>(
                       gather.getLoc(), gather.getData().getType(),
                       g.dy(gather), gather.getIndices(), gather.getAxisAttr())
                   .getResult());
  return success();
}

/// The data's gradient is dy but at the places written over (zeros there:
/// a scatter of zeros), the updates' is dy at the places they went (a
/// gather); the indices have none.
LogicalResult gradient(ScatterElementsOp scatter, G &g) {
  OpBuilder &b = g.builder();
  Location loc = scatter.getLoc();
  Value dy = g.dy(scatter);
  if (g.isActive(scatter.getData())) {
    auto type = cast<RankedTensorType>(scatter.getUpdates().getType());
    Value zeros = b.create<ConstantOp>(
        loc, DenseElementsAttr::get(
                 type, b.getFloatAttr(type.getElementType(), 0.0)));
    g.accumulate(scatter.getData(),
                 b.create<ScatterElementsOp>(loc, dy, scatter.getIndices(),
                                             zeros, scatter.getAxisAttr())
                     .getResult());
  }
  if (g.isActive(scatter.getUpdates()))
    g.accumulate(scatter.getUpdates(),
                 b.create<GatherElementsOp>(loc, dy, scatter.getIndices(),
                                            scatter.getAxisAttr())
                     .getResult());
  return success();
}

/// The values' gradient back at the places they were taken from; the
/// indices carry none.
LogicalResult gradient(TopKOp t, G &g) {
  g.accumulate(t.getInput(),
               g.builder()
                   .create<TopKGradOp>(t.getLoc(), t.getInput().getType(),
                                       g.dy(t, 0), t.getIndices(),
                                       t.getAxisAttr())
                   .getResult());
  return success();
}

/// A Pad by a constant: dy where the input sits, zeros where the pad
/// cropped it; that is the Pad of dy by the negated pads and 0.
LogicalResult gradient(PadOp p, G &g) {
  std::optional<PadLayout> layout = constantPad(p);
  if (!layout)
    return p.emitOpError("with pads or a value that are computed has no "
                         "gradient rule; it lies on a path from a trainable "
                         "weight to the loss");
  OpBuilder &b = g.builder();
  Location loc = p.getLoc();
  auto in = typeOf(p.getInput());
  SmallVector<int64_t> back;
  for (int64_t pad : llvm::concat<int64_t>(layout->begins, layout->ends))
    back.push_back(-pad);
  auto padsType = RankedTensorType::get({int64_t(back.size())}, b.getI64Type());
  auto zero = RankedTensorType::get({}, in.getElementType());
  g.accumulate(
      p.getInput(),
      b.create<PadOp>(
           loc, in, g.dy(p),
           b.create<ConstantOp>(
               loc, DenseElementsAttr::get(padsType, ArrayRef<int64_t>(back))),
           b.create<ConstantOp>(
               loc, DenseElementsAttr::get(
                        zero, b.getFloatAttr(in.getElementType(), 0.0))))
          .getResult());
  return success();
}

/// dy back at the places the slice read (any steps), zeros elsewhere.
LogicalResult gradient(SliceOp s, G &g) {
  std::optional<SliceLayout> layout = constantSlice(s);
  if (!layout)
    return s.emitOpError("with bounds that are not constant has no gradient "
                         "rule; it lies on a path from a trainable weight to "
                         "the loss");
  OpBuilder &b = g.builder();
  g.accumulate(s.getInput(), b.create<SliceGradOp>(
                                  s.getLoc(), s.getInput().getType(), g.dy(s),
                                  b.getDenseI64ArrayAttr(layout->starts),
                                  b.getDenseI64ArrayAttr(layout->steps))
                                 .getResult());
  return success();
}

/// Back to the input's float type; an integer input has no gradient.
LogicalResult gradient(CastOp c, G &g) {
  Type from = typeOf(c.getInput()).getElementType();
  if (isa<FloatType>(from))
    g.accumulate(c.getInput(),
                 g.builder()
                     .create<CastOp>(c.getLoc(), g.dy(c), TypeAttr::get(from))
                     .getResult());
  return success();
}

//===----------------------------------------------------------------------===//
// A pointwise function without a rule above: dy f'(x), the UNARY_GRAD kernel
// (the function's derivative beside it in kernels/cpu/primitive_ops.h).
//===----------------------------------------------------------------------===//

template <typename OpTy>
using IfPointwise =
    std::enable_if_t<OpTy::template hasTrait<PointwiseOpInterface::Trait>(),
                     LogicalResult>;

template <typename OpTy> IfPointwise<OpTy> gradient(OpTy op, G &g) {
  OpBuilder &b = g.builder();
  g.accumulate(op.getInput(), b.create<UnaryGradOp>(
                                  op.getLoc(), op.getInput(), g.dy(op),
                                  UnaryFnAttr::get(op.getContext(), op.getFn()),
                                  op.getAlphaAttr(), op.getBetaAttr()));
  return success();
}

//===----------------------------------------------------------------------===//
// Attaching: every op of the dialect that has a `gradient` above.
//===----------------------------------------------------------------------===//

template <typename OpTy>
struct Rule : GradientOpInterface::ExternalModel<Rule<OpTy>, OpTy> {
  LogicalResult buildGradient(Operation *op, GradientBuilder &g) const {
    return gradient(cast<OpTy>(op), g);
  }
};

/// Whether `gradient(OpTy, G &)` names a rule.
template <typename OpTy, typename = void> struct HasRule : std::false_type {};
template <typename OpTy>
struct HasRule<OpTy, std::void_t<decltype(gradient(std::declval<OpTy>(),
                                                   std::declval<G &>()))>>
    : std::true_type {};

template <typename OpTy> void attachOne(MLIRContext &context) {
  if constexpr (HasRule<OpTy>::value)
    OpTy::template attachInterface<Rule<OpTy>>(context);
}
template <typename... OpTys> void attach(MLIRContext &context) {
  (attachOne<OpTys>(context), ...);
}

} // namespace

Value GradientBuilder::unbroadcast(Location loc, Value g, Type target) {
  auto gt = typeOf(g), tt = cast<RankedTensorType>(target);
  if (gt.getShape() == tt.getShape())
    return g;
  int64_t lead = gt.getRank() - tt.getRank();
  SmallVector<int64_t> axes;
  for (int64_t d = 0; d < gt.getRank(); ++d)
    if (d < lead || (tt.getDimSize(d - lead) == 1 && gt.getDimSize(d) != 1))
      axes.push_back(d);
  Value sum = b.create<ReduceSumOp>(loc, g, b.getDenseI64ArrayAttr(axes),
                                    /*keepdims=*/nullptr);
  return reshapeTo(loc, sum, tt);
}

Value GradientBuilder::reshapeTo(Location loc, Value v, Type target) {
  auto tt = cast<RankedTensorType>(target);
  if (v.getType() == target)
    return v;
  auto st = RankedTensorType::get({tt.getRank()}, b.getI64Type());
  auto shape =
      b.create<ConstantOp>(loc, DenseElementsAttr::get(st, tt.getShape()));
  return b.create<ReshapeOp>(loc, tt, v, shape, /*allowzero=*/nullptr);
}

// The op list is the dialect's own (ODS generates it): an op gets its rule
// by having one, with no list to keep beside the rules.
void attachGradientRules(MLIRContext &context) {
  attach<
#define GET_OP_LIST
#include "dialects/Train/IR/TrainOps.cpp.inc"
      >(context);
}

} // namespace mt::train
