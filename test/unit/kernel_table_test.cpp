// The runtime's kernel table (runtime/kernel_table.h) has an entry for every
// value of plan.proto's Kernel: a kernel added to the schema and forgotten
// there fails here, not silently in a plan.
#include "runtime/kernel_table.h"
#include "runtime/op_desc.h"

#include <gtest/gtest.h>

namespace {

using namespace mt::runtime;

TEST(KernelTable, EveryPlanKernelHasAnEntry) {
  const auto *kernels = mt::plan::Kernel_descriptor();
  int host = 0;
  for (int i = 0; i < kernels->value_count(); ++i) {
    auto kernel = mt::plan::Kernel(kernels->value(i)->number());
    const KernelInfo *info = kernelInfo(kernel);
    if (kernel == mt::plan::KERNEL_UNSPECIFIED) {
      EXPECT_EQ(info, nullptr);
      continue;
    }
    ASSERT_NE(info, nullptr) << kernels->value(i)->name();
    EXPECT_LE(info->minOperands, info->maxOperands)
        << kernels->value(i)->name();
    EXPECT_LE(info->minResults, info->maxResults) << kernels->value(i)->name();
    EXPECT_GE(info->minResults, 1) << kernels->value(i)->name();
    host += info->runs == Runs::Host;
  }
  // The optimizer, the disk and the network.
  EXPECT_EQ(host, 6);
  EXPECT_EQ(kernelInfo(mt::plan::Kernel(999)), nullptr);
}

// A value the table does not know is refused by name when an op of it is
// described (a plan from a newer mtc).
TEST(KernelTable, UnknownKernelIsNotDescribed) {
  mt::plan::Plan plan;
  mt::plan::Op op;
  op.set_kernel(mt::plan::Kernel(999));
  OpDesc d;
  Status st = describeOp(plan, op, d);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("no description of kernel 999"),
            std::string::npos)
      << st.message();
}

} // namespace
