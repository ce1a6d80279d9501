//===- PlanEnums.h - the dialects' enums as the plan's --------------------===//
//
// The Sched dialect (and Train's activation) and the plan schema each have
// their enums: tiers, disk formats, stream kinds, input roles, phases,
// optimizer overlaps, kernels, activations. They are one contract by name,
// not by number: sched's `host_pinned` is the plan's HOST_PINNED, whatever
// either's value. test/unit/plan_enums_test.cpp walks every value of both
// sides, so a value added to one and not the other fails there.
//
//===----------------------------------------------------------------------===//
#ifndef MT_COMPILER_PLANENUMS_H
#define MT_COMPILER_PLANENUMS_H

#include "dialects/Sched/IR/SchedOps.h"
#include "dialects/Train/IR/TrainOps.h"
#include "runtime/schema/plan.pb.h"

#include "llvm/ADT/StringExtras.h"

#include <optional>

namespace mt {

/// The plan value named as `value` is (upper case), if the plan has one.
template <typename PlanEnum, typename DialectEnum>
std::optional<PlanEnum>
planValueOf(DialectEnum value, bool (*parse)(const std::string &, PlanEnum *)) {
  PlanEnum out;
  if (!parse(llvm::StringRef(stringifyEnum(value)).upper(), &out))
    return std::nullopt;
  return out;
}

inline std::optional<plan::Tier> toPlan(sched::Tier v) {
  return planValueOf(v, plan::Tier_Parse);
}
inline std::optional<plan::DiskFormat> toPlan(sched::DiskFormat v) {
  return planValueOf(v, plan::DiskFormat_Parse);
}
inline std::optional<plan::StreamKind> toPlan(sched::StreamKind v) {
  return planValueOf(v, plan::StreamKind_Parse);
}
inline std::optional<plan::Role> toPlan(sched::Role v) {
  return planValueOf(v, plan::Role_Parse);
}
inline std::optional<plan::PhaseKind> toPlan(sched::PhaseKind v) {
  return planValueOf(v, plan::PhaseKind_Parse);
}
inline std::optional<plan::OptimizerOverlap> toPlan(sched::OptimizerOverlap v) {
  return planValueOf(v, plan::OptimizerOverlap_Parse);
}
inline std::optional<plan::Kernel> toPlan(sched::Kernel v) {
  return planValueOf(v, plan::Kernel_Parse);
}
inline std::optional<plan::Activation> toPlan(train::Activation v) {
  return planValueOf(v, plan::Activation_Parse);
}

} // namespace mt

#endif // MT_COMPILER_PLANENUMS_H
