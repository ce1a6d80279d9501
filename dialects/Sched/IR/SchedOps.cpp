//===- SchedOps.cpp - the `sched` dialect ---------------------------------===//
#include "dialects/Sched/IR/SchedOps.h"
#include "runtime/schema/moments.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mt::sched;

#include "dialects/Sched/IR/KernelOpInterface.cpp.inc"
#include "dialects/Sched/IR/SchedDialect.cpp.inc"
#include "dialects/Sched/IR/SchedEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "dialects/Sched/IR/SchedAttrs.cpp.inc"
#define GET_TYPEDEF_CLASSES
#include "dialects/Sched/IR/SchedTypes.cpp.inc"

void SchedDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Sched/IR/SchedOps.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/Sched/IR/SchedTypes.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/Sched/IR/SchedAttrs.cpp.inc"
      >();
}

LogicalResult ProgramOp::verify() {
  // A forward-only program without a tokens input has no batch, seq or
  // vocab (0); it runs once per call, as one micro-batch.
  bool forward = getForwardOnly();
  int64_t least = forward ? 0 : 1;
  if (int64_t(getBatch()) < least || int64_t(getSeq()) < least ||
      int64_t(getGradAccum()) <= 0 || int64_t(getVocab()) < least)
    return emitOpError("batch, seq, grad_accum and vocab must be positive")
           << (forward ? " (or 0, but grad_accum, without a tokens input)"
                       : "");
  if (forward && (getGradAccum() != 1 || getLayerMajor()))
    return emitOpError("a forward-only program has one micro-batch");
  Type dt = getComputeDtype();
  if (!dt.isF32() && !dt.isBF16())
    return emitOpError("compute_dtype must be f32 or bf16, got ") << dt;
  if (int64_t(getRanks()) < 1)
    return emitOpError("ranks must be at least 1");
  // Layer-major: one loss per micro-batch and inputs of each; otherwise
  // the one set, refilled for every micro-batch.
  int64_t k = getLayerMajor() ? int64_t(getGradAccum()) : 1;
  SmallVector<int> losses(k, 0);
  for (Operation &op : getBody().front()) {
    int64_t m = -1;
    if (auto in = dyn_cast<InputOp>(op))
      m = in.getMicroBatch();
    else if (auto loss = dyn_cast<LossOp>(op))
      m = loss.getMicroBatch();
    else
      continue;
    if (m < 0 || m >= k)
      return op.emitOpError("micro_batch ")
             << m << " is outside the program's " << k
             << (getLayerMajor() ? " (layer-major)" : " (one set of inputs)");
    if (isa<LossOp>(op))
      ++losses[m];
  }
  for (int64_t m = 0; m < k; ++m)
    if (losses[m] > 1 || (getLayerMajor() && losses[m] != 1))
      return emitOpError("needs one loss for micro-batch ") << m;
  // A training program's results are its loss and its updates; a forward
  // program's its outputs and its loss, if any.
  llvm::StringSet<> outputs;
  for (auto out : getBody().front().getOps<OutputOp>()) {
    if (!forward)
      return out.emitOpError("is in a training program; only a forward-only "
                             "program has outputs");
    if (out.getName().empty() || !outputs.insert(out.getName()).second)
      return out.emitOpError("needs a name of its own, got '")
             << out.getName() << "'";
  }
  if (forward && outputs.empty() && !losses[0])
    return emitOpError("a forward-only program needs an output or a loss");
  return success();
}

LogicalResult ParameterOp::verify() {
  auto typeOf = [](Value v) {
    return cast<BufferType>(v.getType()).getTensorType();
  };
  auto master = typeOf(getMaster());
  if (!master.getElementType().isF32())
    return emitOpError("the master must be f32");
  if (Value c = getCompute())
    if (typeOf(c).getShape() != master.getShape() ||
        !typeOf(c).getElementType().isBF16())
      return emitOpError("the compute copy is a bf16 buffer of the master's "
                         "shape");
  auto state = getState();
  if (state.empty())
    return success();
  if (state.size() != 3 && state.size() != 5)
    return emitOpError("a trainable parameter has a gradient, two moments "
                       "and, for 8-bit or 4-bit moments, their two scales; a "
                       "frozen one none");
  Type g = typeOf(state[0]).getElementType(),
       m = typeOf(state[1]).getElementType(),
       v = typeOf(state[2]).getElementType();
  int64_t n = master.getNumElements();
  // 4-bit moments pack two elements a byte: ui8 of ceil(n / 2) each.
  auto packed = [&](Value x) {
    return typeOf(x).getElementType().isUnsignedInteger(8) &&
           typeOf(x).getShape() == ArrayRef<int64_t>{(n + 1) / 2};
  };
  bool q4 = packed(state[1]) && packed(state[2]);
  if (typeOf(state[0]).getShape() != master.getShape() ||
      (!q4 && (typeOf(state[1]).getShape() != master.getShape() ||
               typeOf(state[2]).getShape() != master.getShape())))
    return emitOpError("the gradient and moments must have the master's "
                       "shape (4-bit moments: ui8 of ")
           << (n + 1) / 2 << " elements)";
  bool q8 = m.isSignedInteger(8) && v.isUnsignedInteger(8);
  if (!g.isF32() || !((m == v && (m.isF32() || m.isBF16())) || q8 || q4))
    return emitOpError("the gradient must be f32 and the moments both f32, "
                       "both bf16, si8 and ui8, or packed ui8");
  if ((q8 || q4) != (state.size() == 5))
    return emitOpError("8-bit and 4-bit moments, and only they, have two "
                       "scales");
  if (q8 || q4) {
    int64_t blocks = plan::momentBlocks(n);
    for (Value s : state.drop_front(3))
      if (!typeOf(s).getElementType().isF32() ||
          typeOf(s).getShape() != ArrayRef<int64_t>{blocks})
        return emitOpError(q8 ? "8-bit" : "4-bit")
               << " moments have f32 scales of " << blocks
               << " elements (one per " << plan::kMomentBlock << ")";
  }
  return success();
}

LogicalResult ExecOp::verify() {
  auto stream =
      SymbolTable::lookupNearestSymbolFrom<StreamOp>(*this, getStreamAttr());
  if (!stream)
    return emitOpError("stream @") << getStream() << " is not declared";
  auto program = (*this)->getParentOfType<ProgramOp>();
  int64_t ranks = program ? int64_t(program.getRanks()) : 1;
  if (auto rank = getRank(); rank && (*rank < 0 || int64_t(*rank) >= ranks))
    return emitOpError("rank ")
           << *rank << " is not below the program's " << ranks << " rank(s)";
  bool collective =
      getKernel() == Kernel::ReduceToOwner || getKernel() == Kernel::Broadcast;
  if (collective != (stream.getKind() == StreamKind::Network))
    return emitOpError(collective ? "a collective runs on a network stream"
                                  : "only collectives run on a network stream");
  if (collective) {
    auto owner = getAttrs().getAs<IntegerAttr>("owner");
    if (!owner || owner.getInt() < 0 || owner.getInt() >= ranks)
      return emitOpError("a collective needs attrs.owner below the program's ")
             << ranks << " rank(s)";
    if (getRank())
      return emitOpError("a collective runs on every rank, not on rank ")
             << *getRank();
  }
  return success();
}

// custom<EnumKeyword>: an enum attribute as its bare keyword
// (`tier device`). The attributes' own format starts with a space, which
// after the op's would print two.
template <typename AttrT>
static void printEnumKeyword(OpAsmPrinter &printer, Operation *, AttrT attr) {
  printer << stringifyEnum(attr.getValue());
}

template <typename AttrT>
static ParseResult parseEnumKeyword(OpAsmParser &parser, AttrT &attr) {
  using EnumT = decltype(std::declval<AttrT>().getValue());
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseKeyword(&keyword))
    return failure();
  std::optional<EnumT> value = symbolizeEnum<EnumT>(keyword);
  if (!value)
    return parser.emitError(loc)
           << "unknown " << AttrT::getMnemonic() << " '" << keyword << "'";
  attr = AttrT::get(parser.getContext(), *value);
  return success();
}

#define GET_OP_CLASSES
#include "dialects/Sched/IR/SchedOps.cpp.inc"

bool mt::sched::isGradient(Kernel k) {
  // By name, so that no gradient kernel can be left out: each is *_grad.
  return stringifyKernel(k).ends_with("_grad");
}

unsigned mt::sched::microBatchRuns(ExecOp op) {
  return op.getFirstMicroBatch() ? 2u : op.getLastMicroBatch() ? 4u : 1u;
}

int64_t mt::sched::backwardStart(ArrayRef<ExecOp> order) {
  auto it =
      llvm::find_if(order, [](ExecOp e) { return isGradient(e.getKernel()); });
  return it - order.begin();
}

/// The last op of type T in the program's body, or null.
template <typename T> static Operation *lastOf(ProgramOp program) {
  Operation *last = nullptr;
  for (auto op : program.getOps<T>())
    last = op;
  return last;
}

void mt::sched::insertAfterArenas(OpBuilder &b, ProgramOp program) {
  if (Operation *last = lastOf<ArenaOp>(program))
    b.setInsertionPointAfter(last);
  else
    b.setInsertionPointToStart(&program.getBody().front());
}

void mt::sched::insertAfterStreams(OpBuilder &b, ProgramOp program) {
  if (Operation *last = lastOf<StreamOp>(program))
    b.setInsertionPointAfter(last);
  else
    insertAfterArenas(b, program);
}

PhaseOp mt::sched::findPhase(ProgramOp program, PhaseKind kind) {
  for (auto phase : program.getOps<PhaseOp>())
    if (phase.getKind() == kind)
      return phase;
  return {};
}

mt::sched::ProgramOrder::ProgramOrder(PhaseOp phase)
    : ops(phase.getOps<ExecOp>()) {
  for (auto [i, e] : llvm::enumerate(ops))
    index[e] = int64_t(i);
  backward = backwardStart(ops);
}
