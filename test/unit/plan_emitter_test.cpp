// The plan emitter's attributes: each exec's attributes land in the message
// of Attrs' oneof that the runtime's kernel table names for its kernel,
// field by field, and one the message has no field for, or whose field
// cannot hold it, is an error naming the attribute, the kernel and the
// message. Programs are written in the sched dialect.
#include "compiler/PlanEmitter.h"
#include "dialects/Sched/IR/SchedOps.h"
#include "dialects/Train/IR/TrainDialect.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace mlir;

namespace {

/// Emits a program whose one op is `exec` (reading %a, writing %b, both
/// 2x3 f32) and returns the error it reported, or "" with the op in `op`.
std::string emit(const std::string &exec, mt::plan::Op &op) {
  MLIRContext context;
  context.loadDialect<mt::sched::SchedDialect, mt::train::TrainDialect>();
  std::string source =
      "sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum "
      "= 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = \"m\"} {\n"
      "  sched.arena @device tier device size 64\n"
      "  sched.stream @compute kind compute\n"
      "  %a = sched.buffer \"a\" in @device at 0 : "
      "!sched.buffer<tensor<2x3xf32>>\n"
      "  %b = sched.buffer \"b\" in @device at 32 : "
      "!sched.buffer<tensor<2x3xf32>>\n"
      "  sched.phase micro_batch {\n    %t = sched.exec " +
      exec +
      " : (!sched.buffer<tensor<2x3xf32>>, !sched.buffer<tensor<2x3xf32>>) "
      "-> !sched.token\n  }\n}\n";
  std::string error;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &d) {
    error = d.str();
    return success();
  });
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(source, ParserConfig(&context));
  if (!module)
    return "parse: " + error;
  mt::plan::Plan plan;
  if (failed(mt::emitPlan(*module, plan)))
    return error.empty() ? "failed without a message" : error;
  op = plan.phases(0).ops(0);
  return "";
}

TEST(PlanEmitter, AttributesFillTheKernelsMessageByName) {
  mt::plan::Op op;
  ASSERT_EQ(emit("trilu ins(%a) outs(%b) on @compute {attrs = {diagonal = -1 "
                 ": i64, upper}}",
                 op),
            "");
  ASSERT_EQ(op.attrs().kind_case(), mt::plan::Attrs::kTrilu);
  EXPECT_EQ(op.attrs().trilu().diagonal(), -1);
  EXPECT_TRUE(op.attrs().trilu().upper());

  ASSERT_EQ(emit("cumsum ins(%a) outs(%b) on @compute {attrs = {axis = 1 : "
                 "i64, reverse}}",
                 op),
            "");
  ASSERT_EQ(op.attrs().kind_case(), mt::plan::Attrs::kCumSum);
  EXPECT_EQ(op.attrs().cum_sum().axis(), 1);
  EXPECT_FALSE(op.attrs().cum_sum().exclusive());
  EXPECT_TRUE(op.attrs().cum_sum().reverse());

  ASSERT_EQ(emit("transpose ins(%a) outs(%b) on @compute {attrs = {perm = "
                 "array<i64: 1, 0>}}",
                 op),
            "");
  ASSERT_EQ(op.attrs().transpose().perm_size(), 2);
  EXPECT_EQ(op.attrs().transpose().perm(0), 1);
}

TEST(PlanEmitter, ConstantsAreWrittenElementByElementOrAsOneSplat) {
  MLIRContext context;
  context.loadDialect<mt::sched::SchedDialect, mt::train::TrainDialect>();
  const char *source = R"(
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @device tier device size 256
  sched.stream @compute kind compute
  %s = sched.buffer "splat" in @device at 0 {value = dense<1.5> : tensor<2x3xf32>} : !sched.buffer<tensor<2x3xf32>>
  %i = sched.buffer "ids" in @device at 64 {value = dense<[7, -2, 1099511627776]> : tensor<3xi64>} : !sched.buffer<tensor<3xi64>>
  %m = sched.buffer "mask" in @device at 128 {value = dense<[true, false, false, true, true]> : tensor<5xi1>} : !sched.buffer<tensor<5xi1>>
  %b = sched.buffer "b" in @device at 192 : !sched.buffer<tensor<2x3xf32>>
  sched.phase micro_batch {
    %t = sched.exec neg ins(%s) outs(%b) on @compute : (!sched.buffer<tensor<2x3xf32>>, !sched.buffer<tensor<2x3xf32>>) -> !sched.token
  }
}
)";
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(source, ParserConfig(&context));
  ASSERT_TRUE(module);
  mt::plan::Plan plan;
  ASSERT_TRUE(succeeded(mt::emitPlan(*module, plan)));
  ASSERT_EQ(plan.constants_size(), 3);
  auto bytes = [](const auto &values) {
    return std::string(reinterpret_cast<const char *>(values.data()),
                       values.size() * sizeof(values[0]));
  };
  // A splat's one element, marked to repeat; packed values as they are;
  // a byte per boolean (MLIR keeps them as bits).
  EXPECT_EQ(plan.constants(0).data(), bytes(std::vector<float>(1, 1.5f)));
  EXPECT_TRUE(plan.constants(0).splat());
  EXPECT_EQ(plan.constants(1).data(),
            bytes(std::vector<int64_t>{7, -2, int64_t(1) << 40}));
  EXPECT_FALSE(plan.constants(1).splat());
  EXPECT_EQ(plan.constants(2).data(), std::string("\1\0\0\1\1", 5));
  EXPECT_FALSE(plan.constants(2).splat());
}

TEST(PlanEmitter, AKernelWithAMessageCarriesItWithNoAttributes) {
  mt::plan::Op op;
  ASSERT_EQ(emit("trilu ins(%a) outs(%b) on @compute", op), "");
  EXPECT_EQ(op.attrs().kind_case(), mt::plan::Attrs::kTrilu);
  ASSERT_EQ(emit("neg ins(%a) outs(%b) on @compute", op), "");
  EXPECT_EQ(op.attrs().kind_case(), mt::plan::Attrs::KIND_NOT_SET);
}

TEST(PlanEmitter, AnAttributeWithoutAFieldIsAnError) {
  mt::plan::Op op;
  EXPECT_EQ(emit("trilu ins(%a) outs(%b) on @compute {attrs = {axis = 1 : "
                 "i64}}",
                 op),
            "attribute 'axis' of kernel 'TRILU' has no field in its plan "
            "attributes (trilu); add it to that message in plan.proto");
  EXPECT_EQ(emit("neg ins(%a) outs(%b) on @compute {attrs = {axis = 1 : "
                 "i64}}",
                 op),
            "attribute 'axis' of kernel 'NEG' has no field in its plan "
            "attributes (none); add it to that message in plan.proto");
}

TEST(PlanEmitter, AnAttributeItsFieldCannotHoldIsAnError) {
  mt::plan::Op op;
  EXPECT_EQ(emit("trilu ins(%a) outs(%b) on @compute {attrs = {diagonal = "
                 "1.5 : f32}}",
                 op),
            "attribute 'diagonal' of kernel 'TRILU' (1.500000e+00 : f32) does "
            "not fit the plan's field mt.plan.TriluAttrs.diagonal (int64)");
  EXPECT_EQ(emit("cumsum ins(%a) outs(%b) on @compute {attrs = {axis = "
                 "array<i64: 1>}}",
                 op),
            "attribute 'axis' of kernel 'CUMSUM' (array<i64: 1>) does not fit "
            "the plan's field mt.plan.CumSumAttrs.axis (int64)");
}

} // namespace
