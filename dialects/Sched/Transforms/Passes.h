//===- Passes.h - passes that build the schedule --------------------------===//
#ifndef MT_DIALECTS_SCHED_TRANSFORMS_PASSES_H
#define MT_DIALECTS_SCHED_TRANSFORMS_PASSES_H

#include "dialects/Sched/IR/SchedOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mt::sched {

#define GEN_PASS_DECL
#include "dialects/Sched/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "dialects/Sched/Transforms/Passes.h.inc"

} // namespace mt::sched

#endif // MT_DIALECTS_SCHED_TRANSFORMS_PASSES_H
