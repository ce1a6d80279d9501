//===- PlanEmitter.h - serialise a sched.program as a plan ----------------===//
#ifndef MT_COMPILER_PLANEMITTER_H
#define MT_COMPILER_PLANEMITTER_H

#include "runtime/schema/plan.pb.h"

#include "mlir/IR/BuiltinOps.h"

namespace mt {

/// Converts the module's sched.program (after mt-plan-memory) into a plan.
/// Fails with a diagnostic on anything the schema cannot express.
mlir::LogicalResult emitPlan(mlir::ModuleOp module, plan::Plan &out);

} // namespace mt

#endif // MT_COMPILER_PLANEMITTER_H
