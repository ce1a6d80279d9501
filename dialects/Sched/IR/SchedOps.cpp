//===- SchedOps.cpp - the `sched` dialect ---------------------------------===//
#include "dialects/Sched/IR/SchedOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mt::sched;

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
  if (int64_t(getBatch()) <= 0 || int64_t(getSeq()) <= 0 ||
      int64_t(getGradAccum()) <= 0 || int64_t(getVocab()) <= 0)
    return emitOpError("batch, seq, grad_accum and vocab must be positive");
  Type dt = getComputeDtype();
  if (!dt.isF32() && !dt.isBF16())
    return emitOpError("compute_dtype must be f32 or bf16, got ") << dt;
  return success();
}

LogicalResult ParameterOp::verify() {
  if (!getState().empty() && getState().size() != 3)
    return emitOpError("a trainable parameter has grad, exp_avg and "
                       "exp_avg_sq; a frozen one none");
  auto shapeOf = [](Value v) {
    return cast<BufferType>(v.getType()).getTensorType().getShape();
  };
  for (Value v : getState())
    if (shapeOf(v) != shapeOf(getMaster()))
      return emitOpError("state buffers must have the master's shape");
  if (!getState().empty()) {
    Type grad = cast<BufferType>(getState()[0].getType())
                    .getTensorType()
                    .getElementType();
    Type m = cast<BufferType>(getState()[1].getType())
                 .getTensorType()
                 .getElementType();
    Type v = cast<BufferType>(getState()[2].getType())
                 .getTensorType()
                 .getElementType();
    if (!grad.isF32() || m != v || !(m.isF32() || m.isBF16()))
      return emitOpError("the gradient must be f32 and the moments both f32 "
                         "or both bf16");
  }
  auto master = cast<BufferType>(getMaster().getType()).getTensorType();
  if (!master.getElementType().isF32())
    return emitOpError("the master must be f32");
  return success();
}

LogicalResult ExecOp::verify() {
  if (!SymbolTable::lookupNearestSymbolFrom<StreamOp>(*this, getStreamAttr()))
    return emitOpError("stream @") << getStream() << " is not declared";
  return success();
}

#define GET_OP_CLASSES
#include "dialects/Sched/IR/SchedOps.cpp.inc"

bool mt::sched::isGradient(Kernel k) {
  switch (k) {
  case Kernel::EmbeddingGrad:
  case Kernel::LinearGrad:
  case Kernel::RmsNormGrad:
  case Kernel::LayerNormGrad:
  case Kernel::RotaryGrad:
  case Kernel::AttentionGrad:
  case Kernel::ActivationGrad:
  case Kernel::GatedActivationGrad:
  case Kernel::CrossEntropyGrad:
  case Kernel::HeadCrossEntropyGrad:
    return true;
  default:
    return false;
  }
}

int64_t mt::sched::backwardStart(ArrayRef<ExecOp> order) {
  auto it =
      llvm::find_if(order, [](ExecOp e) { return isGradient(e.getKernel()); });
  return it - order.begin();
}
