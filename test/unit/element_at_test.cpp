// elementAt against folding: masks built the ways exporters build them
// (a Trilu of a fill, comparisons of ranges with a sliding window, a
// Where over a broadcast condition, a slice and a transpose of a table),
// small enough to fold, read element by element through their ops: every
// element must be the folded value. A value that depends on an input is
// not known.
#include "dialects/Train/IR/ConstEval.h"
#include "dialects/Train/IR/ElementAt.h"
#include "dialects/Train/IR/TrainDialect.h"
#include "dialects/Train/IR/TrainOps.h"
#include "dialects/Train/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include <gtest/gtest.h>

namespace {

using namespace mlir;

struct MaskCase {
  const char *name;
  /// The body of @mask, ending in %m.
  const char *body;
  const char *type; ///< of %m
};

std::string moduleText(const MaskCase &c) {
  return std::string("func.func @mask(%x: tensor<6xi64>) -> ") + c.type +
         " {\n" + c.body + "\n  return %m : " + c.type + "\n}\n";
}

/// The value @mask returns.
Value returned(ModuleOp module) {
  auto fn = *module.getOps<func::FuncOp>().begin();
  return fn.getBody().front().getTerminator()->getOperand(0);
}

class ElementAt : public ::testing::TestWithParam<MaskCase> {};

TEST_P(ElementAt, EveryElementIsTheFoldedValue) {
  MLIRContext ctx;
  ctx.loadDialect<mt::train::TrainDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> ops =
      parseSourceString<ModuleOp>(moduleText(GetParam()), &ctx);
  ASSERT_TRUE(ops) << moduleText(GetParam());
  OwningOpRef<ModuleOp> folded = ops->clone();
  PassManager pm(&ctx);
  pm.addPass(mt::train::createFoldConstantsPass());
  ASSERT_TRUE(succeeded(pm.run(*folded)));
  Attribute attr;
  ASSERT_TRUE(matchPattern(returned(*folded), m_Constant(&attr)))
      << "the case folds whole";
  auto values = mt::train::getFloatValues(attr);
  ASSERT_TRUE(values);
  Value m = returned(*ops);
  ASSERT_FALSE(m.getDefiningOp<mt::train::ConstantOp>()) << "built by ops";
  auto shape = cast<RankedTensorType>(m.getType()).getShape();
  for (size_t flat = 0; flat < values->size(); ++flat) {
    SmallVector<int64_t> index(shape.size());
    for (size_t d = shape.size(), rest = flat; d-- > 0;) {
      index[d] = int64_t(rest % size_t(shape[d]));
      rest /= size_t(shape[d]);
    }
    std::optional<double> v = mt::train::elementAt(m, index);
    ASSERT_TRUE(v) << "element " << flat;
    EXPECT_EQ(*v, (*values)[flat]) << "element " << flat;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Masks, ElementAt,
    ::testing::Values(
        // examples/big/make_graph.py: -inf above the diagonal.
        MaskCase{"TriluOfAFill", R"(
  %s = train.constant dense<[6, 6]> : tensor<2xi64>
  %f = train.constant_of_shape %s {value = dense<0xFF800000> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<6x6xf32>
  %m = train.trilu %f {k = 1 : i64, upper} : (tensor<6x6xf32>) -> tensor<6x6xf32>)",
                 "tensor<6x6xf32>"},
        // Hugging Face's mask builders: kv <= q and kv > q - 3 (a sliding
        // window of 3), as 0 / -inf, broadcast over a batch of 2.
        MaskCase{"RangesComparedWithAWindow", R"(
  %a = train.constant dense<0> : tensor<i64>
  %n = train.constant dense<6> : tensor<i64>
  %d = train.constant dense<1> : tensor<i64>
  %r = train.range %a, %n, %d : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<6xi64>
  %q = train.unsqueeze %r {axes = array<i64: -1>} : (tensor<6xi64>) -> tensor<6x1xi64>
  %kv = train.unsqueeze %r {axes = array<i64: 0>} : (tensor<6xi64>) -> tensor<1x6xi64>
  %le = train.less_or_equal %kv, %q : (tensor<1x6xi64>, tensor<6x1xi64>) -> tensor<6x6xi1>
  %w = train.constant dense<3> : tensor<i64>
  %back = train.sub %q, %w : (tensor<6x1xi64>, tensor<i64>) -> tensor<6x1xi64>
  %in = train.greater %kv, %back : (tensor<1x6xi64>, tensor<6x1xi64>) -> tensor<6x6xi1>
  %keep = train.and %le, %in : (tensor<6x6xi1>, tensor<6x6xi1>) -> tensor<6x6xi1>
  %s = train.constant dense<[2, 1, 6, 6]> : tensor<4xi64>
  %c = train.expand %keep, %s : (tensor<6x6xi1>, tensor<4xi64>) -> tensor<2x1x6x6xi1>
  %z = train.constant dense<0.0> : tensor<f32>
  %ninf = train.constant dense<0xFF800000> : tensor<f32>
  %m = train.where %c, %z, %ninf : (tensor<2x1x6x6xi1>, tensor<f32>, tensor<f32>) -> tensor<2x1x6x6xf32>)",
                 "tensor<2x1x6x6xf32>"},
        // A table sliced (every other row from the second, backwards from
        // the last column), transposed, cast and negated.
        MaskCase{"SliceTransposeCast", R"(
  %t = train.constant dense<[[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11], [12, 13, 14], [15, 16, 17]]> : tensor<6x3xi64>
  %st = train.constant dense<[1, -1]> : tensor<2xi64>
  %en = train.constant dense<[6, -4]> : tensor<2xi64>
  %ax = train.constant dense<[0, 1]> : tensor<2xi64>
  %sp = train.constant dense<[2, -1]> : tensor<2xi64>
  %s = train.slice %t, %st, %en, %ax, %sp : (tensor<6x3xi64>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<3x3xi64>
  %tr = train.transpose %s {perm = array<i64: 1, 0>} : (tensor<3x3xi64>) -> tensor<3x3xi64>
  %f = train.cast %tr {to = f32} : (tensor<3x3xi64>) -> tensor<3x3xf32>
  %m = train.neg %f : (tensor<3x3xf32>) -> tensor<3x3xf32>)",
                 "tensor<3x3xf32>"}),
    [](const auto &info) { return std::string(info.param.name); });

TEST(ElementAt, AValueOfTheStepsInputsIsNotKnown) {
  MLIRContext ctx;
  ctx.loadDialect<mt::train::TrainDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(moduleText({"", R"(
  %q = train.unsqueeze %x {axes = array<i64: -1>} : (tensor<6xi64>) -> tensor<6x1xi64>
  %kv = train.unsqueeze %x {axes = array<i64: 0>} : (tensor<6xi64>) -> tensor<1x6xi64>
  %m = train.less_or_equal %kv, %q : (tensor<1x6xi64>, tensor<6x1xi64>) -> tensor<6x6xi1>)",
                                              "tensor<6x6xi1>"}),
                                  &ctx);
  ASSERT_TRUE(module);
  EXPECT_FALSE(mt::train::elementAt(returned(*module), {2, 3}));
}

TEST(ElementAt, ASliceStepThatIsNoIntegerIsNotKnown) {
  // Its step is 1 / 0: no index at all, not undefined behaviour.
  MLIRContext ctx;
  ctx.loadDialect<mt::train::TrainDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(moduleText({"", R"(
  %t = train.constant dense<[0, 1, 2, 3, 4, 5, 6, 7]> : tensor<8xi64>
  %one = train.constant dense<[1]> : tensor<1xi64>
  %zero = train.constant dense<[0]> : tensor<1xi64>
  %step = train.div %one, %zero : (tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %st = train.constant dense<[0]> : tensor<1xi64>
  %en = train.constant dense<[6]> : tensor<1xi64>
  %ax = train.constant dense<[0]> : tensor<1xi64>
  %m = train.slice %t, %st, %en, %ax, %step : (tensor<8xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<6xi64>)",
                                              "tensor<6xi64>"}),
                                  &ctx);
  ASSERT_TRUE(module);
  EXPECT_FALSE(mt::train::elementAt(returned(*module), {2}));
}

TEST(ElementAt, AWalkThatWouldNotEndIsCutShort) {
  // Each add reads the one before twice: 2^200 paths to the constant.
  std::string body = "  %v0 = train.constant dense<1> : tensor<6x6xi64>\n";
  for (int k = 1; k <= 200; ++k)
    body += "  %v" + std::to_string(k) + " = train.add %v" +
            std::to_string(k - 1) + ", %v" + std::to_string(k - 1) +
            " : (tensor<6x6xi64>, tensor<6x6xi64>) -> tensor<6x6xi64>\n";
  body += "  %m = train.less_or_equal %v200, %v200 : (tensor<6x6xi64>, "
          "tensor<6x6xi64>) -> tensor<6x6xi1>";
  MLIRContext ctx;
  ctx.loadDialect<mt::train::TrainDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(
      moduleText({"", body.c_str(), "tensor<6x6xi1>"}), &ctx);
  ASSERT_TRUE(module);
  EXPECT_FALSE(mt::train::elementAt(returned(*module), {2, 3}));
}

} // namespace
