//===- SchedOps.h - the `sched` dialect -----------------------------------===//
#ifndef MT_DIALECTS_SCHED_IR_SCHEDOPS_H
#define MT_DIALECTS_SCHED_IR_SCHEDOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>

#include "dialects/Sched/IR/SchedDialect.h.inc"
#include "dialects/Sched/IR/SchedEnums.h.inc"
// After the enums: the interface returns a Kernel.
#include "dialects/Sched/IR/KernelOpInterface.h.inc"
#define GET_ATTRDEF_CLASSES
#include "dialects/Sched/IR/SchedAttrs.h.inc"
#define GET_TYPEDEF_CLASSES
#include "dialects/Sched/IR/SchedTypes.h.inc"
#define GET_OP_CLASSES
#include "dialects/Sched/IR/SchedOps.h.inc"

namespace mt::sched {
/// Whether `k` computes gradients (a backward kernel).
bool isGradient(Kernel k);
/// Where a micro-batch's backward begins in its program order: at the first
/// gradient kernel (a layer's recompute comes after it), or order.size().
int64_t backwardStart(llvm::ArrayRef<ExecOp> order);
/// In which micro-batches an op runs, as a bit: 1 every one, 2 only the
/// first, 4 only the last. A buffer whose ops' bits differ is used across
/// micro-batches and needs bytes of its own.
unsigned microBatchRuns(ExecOp op);
/// The program's phase of `kind`, or null.
PhaseOp findPhase(ProgramOp program, PhaseKind kind);
/// Sets `b` where a pass declares a new arena of `program`: after its last
/// one, or at the start of its body; and a new stream: after its last one,
/// or after its arenas (the order a program lists them in).
void insertAfterArenas(mlir::OpBuilder &b, ProgramOp program);
void insertAfterStreams(mlir::OpBuilder &b, ProgramOp program);
/// A phase's ops in program order, each op's place in it, and where the
/// backward begins (backwardStart).
struct ProgramOrder {
  explicit ProgramOrder(PhaseOp phase);
  llvm::SmallVector<ExecOp> ops;
  llvm::DenseMap<mlir::Operation *, int64_t> index;
  int64_t backward;
};
} // namespace mt::sched

#endif // MT_DIALECTS_SCHED_IR_SCHEDOPS_H
