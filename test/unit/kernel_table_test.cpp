// The runtime's kernel table (runtime/plan/kernel_table.h) has an entry for
// every value of plan.proto's Kernel: a kernel added to the schema and
// forgotten there fails here, not silently in a plan; so does an attributes
// message (Attrs' oneof) that no kernel takes.
#include "runtime/plan/kernel_table.h"
#include "runtime/plan/op_desc.h"

#include <gtest/gtest.h>

#include <cctype>
#include <iterator>
#include <optional>
#include <set>

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

// Each message a kernel's row names is one of Attrs' oneof, and every one
// of them is some kernel's: a message no kernel takes is a schema that
// drifted from the table.
TEST(KernelTable, EveryAttrsMessageBelongsToAKernel) {
  const auto *kernels = mt::plan::Kernel_descriptor();
  const auto *attrs = mt::plan::Attrs::descriptor();
  std::set<int> taken;
  for (int i = 0; i < kernels->value_count(); ++i)
    if (const KernelInfo *info =
            kernelInfo(mt::plan::Kernel(kernels->value(i)->number())))
      if (info->attrs != mt::plan::Attrs::KIND_NOT_SET) {
        ASSERT_NE(attrs->FindFieldByNumber(int(info->attrs)), nullptr)
            << kernels->value(i)->name();
        EXPECT_EQ(
            attrs->FindFieldByNumber(int(info->attrs))->containing_oneof(),
            attrs->oneof_decl(0));
        taken.insert(int(info->attrs));
      }
  for (int f = 0; f < attrs->field_count(); ++f)
    EXPECT_TRUE(taken.count(attrs->field(f)->number()))
        << attrs->field(f)->name() << " is no kernel's";
  EXPECT_EQ(attrsName(mt::plan::Attrs::kCumSum), "cum_sum");
  EXPECT_EQ(attrsName(mt::plan::Attrs::KIND_NOT_SET), "none");
}

// Every member of the unary, binary and comparison families has its own
// function: the backends run the family by the description alone, so a
// kernel missing from op_desc.cpp's mapping would otherwise run another's.
TEST(KernelTable, EveryFamilyMemberHasItsOwnFunction) {
  const auto *kernels = mt::plan::Kernel_descriptor();
  std::set<std::pair<Describe, int>> functions;
  int members = 0;
  for (int i = 0; i < kernels->value_count(); ++i) {
    auto kernel = mt::plan::Kernel(kernels->value(i)->number());
    const KernelInfo *info = kernelInfo(kernel);
    if (!info)
      continue;
    std::optional<int> f;
    if (info->describe == Describe::Unary)
      continue; // its function is an attribute (UnaryFunctionsAreTheSchemas)
    if (info->describe == Describe::Binary)
      f = binaryOf(kernel) ? std::optional<int>(int(*binaryOf(kernel)))
                           : std::nullopt;
    else if (info->describe == Describe::Compare)
      f = compareOf(kernel) ? std::optional<int>(int(*compareOf(kernel)))
                            : std::nullopt;
    else if (info->describe == Describe::Logic)
      f = logicOf(kernel) ? std::optional<int>(int(*logicOf(kernel)))
                          : std::nullopt;
    else {
      EXPECT_FALSE(binaryOf(kernel) || compareOf(kernel) || logicOf(kernel))
          << kernels->value(i)->name();
      continue;
    }
    ASSERT_TRUE(f) << kernels->value(i)->name() << " has no function";
    EXPECT_TRUE(functions.insert({info->describe, *f}).second)
        << kernels->value(i)->name() << " shares another's function";
    ++members;
  }
  EXPECT_EQ(members, 16);
  const auto *acts = mt::plan::Activation_descriptor();
  for (int i = 0; i < acts->value_count(); ++i) {
    auto act = mt::plan::Activation(acts->value(i)->number());
    EXPECT_EQ(activationOf(act).has_value(),
              act != mt::plan::ACTIVATION_UNSPECIFIED)
        << acts->value(i)->name();
  }
}

// UNARY's functions are plan.proto's UnaryFn and the kernels' Unary, one
// list generated from the schema (kernels/CMakeLists.txt): every value maps
// to the kernel function of its name, and the zero value to none.
TEST(KernelTable, UnaryFunctionsAreTheSchemas) {
  const auto *fns = mt::plan::UnaryFn_descriptor();
  ASSERT_EQ(size_t(fns->value_count()), std::size(mt::kernels::kUnaryFns) + 1);
  for (int i = 0; i < fns->value_count(); ++i) {
    auto fn = mt::plan::UnaryFn(fns->value(i)->number());
    std::optional<mt::kernels::Unary> f = unaryOf(fn);
    if (fn == mt::plan::FN_UNSPECIFIED) {
      EXPECT_FALSE(f);
      continue;
    }
    ASSERT_TRUE(f) << fns->value(i)->name();
    std::string name = mt::kernels::unaryName(*f);
    for (char &c : name)
      c = char(std::toupper(c));
    EXPECT_EQ("FN_" + name, fns->value(i)->name());
  }
  EXPECT_FALSE(unaryOf(mt::plan::UnaryFn(999)));
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
