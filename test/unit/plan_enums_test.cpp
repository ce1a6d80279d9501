// The dialects' enums and the plan schema's are one contract by name: every
// value of each side has the other's of the same name, both ways.
#include "compiler/PlanEnums.h"

#include <gtest/gtest.h>

#include <set>

namespace {

using namespace mt;

/// Walks every value of a dialect enum (0 to its largest) and every value
/// of the plan enum but the UNSPECIFIED zero: each dialect value maps to
/// the plan value of its name, and every plan value is reached.
template <typename DialectEnum, typename PlanEnum>
void expectParity(unsigned maxValue,
                  std::optional<DialectEnum> (*symbolize)(uint32_t),
                  const google::protobuf::EnumDescriptor *plan,
                  bool planHasUnspecified = true) {
  std::set<int> reached;
  for (unsigned i = 0; i <= maxValue; ++i) {
    std::optional<DialectEnum> value = symbolize(i);
    if (!value)
      continue; // a gap in the dialect's numbering
    std::optional<PlanEnum> mapped = toPlan(*value);
    ASSERT_TRUE(mapped.has_value()) << plan->name() << " has no value named '"
                                    << stringifyEnum(*value).str() << "'";
    EXPECT_EQ(plan->FindValueByNumber(int(*mapped))->name(),
              llvm::StringRef(stringifyEnum(*value)).upper());
    reached.insert(int(*mapped));
  }
  for (int i = 0; i < plan->value_count(); ++i) {
    const auto *v = plan->value(i);
    if (planHasUnspecified && v->number() == 0)
      continue;
    EXPECT_TRUE(reached.count(v->number()))
        << plan->name() << "." << v->name()
        << " has no value of the same name in the dialect";
  }
}

TEST(PlanEnums, EveryValueHasItsNamesakeBothWays) {
  using namespace mt::sched;
  expectParity<Tier, plan::Tier>(getMaxEnumValForTier(), symbolizeTier,
                                 plan::Tier_descriptor());
  expectParity<DiskFormat, plan::DiskFormat>(getMaxEnumValForDiskFormat(),
                                             symbolizeDiskFormat,
                                             plan::DiskFormat_descriptor());
  expectParity<StreamKind, plan::StreamKind>(getMaxEnumValForStreamKind(),
                                             symbolizeStreamKind,
                                             plan::StreamKind_descriptor());
  expectParity<Role, plan::Role>(getMaxEnumValForRole(), symbolizeRole,
                                 plan::Role_descriptor());
  expectParity<PhaseKind, plan::PhaseKind>(getMaxEnumValForPhaseKind(),
                                           symbolizePhaseKind,
                                           plan::PhaseKind_descriptor());
  expectParity<OptimizerOverlap, plan::OptimizerOverlap>(
      getMaxEnumValForOptimizerOverlap(), symbolizeOptimizerOverlap,
      plan::OptimizerOverlap_descriptor());
  expectParity<Kernel, plan::Kernel>(getMaxEnumValForKernel(), symbolizeKernel,
                                     plan::Kernel_descriptor());
  expectParity<mt::train::Activation, plan::Activation>(
      mt::train::getMaxEnumValForActivation(), mt::train::symbolizeActivation,
      plan::Activation_descriptor());
}

TEST(PlanEnums, ValuesNeedNotShareNumbers) {
  // Train's gelu is 0 and the plan's GELU is 1: the name decides.
  EXPECT_EQ(int(mt::train::Activation::Gelu), 0);
  EXPECT_EQ(toPlan(mt::train::Activation::Gelu), plan::GELU);
  EXPECT_EQ(toPlan(mt::sched::Kernel::Adamw), plan::ADAMW);
  EXPECT_EQ(toPlan(mt::sched::Tier::HostPinned), plan::HOST_PINNED);
}

} // namespace
