// The sched passes keep nothing of one run for the next: a pass manager
// (and the pass instance in it) that lowered one step lowers another as a
// fresh one does.
#include "dialects/Sched/IR/SchedOps.h"
#include "dialects/Sched/Transforms/Passes.h"
#include "dialects/Sched/Transforms/TrainKernels.h"
#include "dialects/Train/IR/TrainDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <string>

using namespace mlir;

namespace {

/// A step of one embedding and its loss, its weight named `weight`, its
/// tokens [2, seq].
std::string stepSource(const std::string &weight, int seq) {
  std::string t = "tensor<2x" + std::to_string(seq) + "xi64>",
              h = "tensor<2x" + std::to_string(seq) + "x8xf32>";
  return "train.param @\"" + weight +
         "\" {source = #train<source inline>, file = \"m\", trainable} : "
         "tensor<16x8xf32>\n"
         "func.func @train_step(%ids: " +
         t +
         " {train.name = \"ids\", train.role = #train<role tokens>}) -> "
         "(tensor<f32> {train.loss}) {\n"
         "  %w = train.param.load @\"" +
         weight +
         "\" : tensor<16x8xf32>\n"
         "  %h = train.embedding %w, %ids : (tensor<16x8xf32>, " +
         t + ") -> " + h +
         "\n"
         "  %l = train.cross_entropy %h, %ids {ignore_index = -100 : i64} : (" +
         h + ", " + t +
         ") -> tensor<f32>\n"
         "  return %l : tensor<f32>\n}\n";
}

std::string printed(ModuleOp m) {
  std::string text;
  llvm::raw_string_ostream os(text);
  m.print(os);
  return text;
}

TEST(LowerToSched, ASecondRunOfOnePassLowersAsAFreshOne) {
  DialectRegistry registry;
  registry.insert<func::FuncDialect, mt::train::TrainDialect,
                  mt::sched::SchedDialect>();
  mt::sched::registerTrainKernels(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  auto parse = [&](const std::string &source) {
    return parseSourceString<ModuleOp>(source, ParserConfig(&context));
  };
  // The same weight's name in both, at another sequence length.
  OwningOpRef<ModuleOp> first = parse(stepSource("emb", 4)),
                        second = parse(stepSource("emb", 6)),
                        alone = parse(stepSource("emb", 6));
  ASSERT_TRUE(first && second && alone);
  PassManager reused(&context);
  reused.addPass(mt::sched::createLowerToSchedPass());
  ASSERT_TRUE(succeeded(reused.run(*first)));
  // `first` is destroyed before the second run: nothing may point into it.
  first = nullptr;
  ASSERT_TRUE(succeeded(reused.run(*second)));
  PassManager fresh(&context);
  fresh.addPass(mt::sched::createLowerToSchedPass());
  ASSERT_TRUE(succeeded(fresh.run(*alone)));
  EXPECT_EQ(printed(*second), printed(*alone));
}

} // namespace
