// Every op the importer reads, at the first and the last opset of each row
// of its tables, against onnxruntime (test/Import/Inputs/op_cases.json,
// made by make_op_cases.py in the test venv): each small graph is imported,
// the front end runs without fusing patterns (single ops still become their
// kernel, as with mtc --fuse none), and the result is evaluated with the
// CPU kernels (mode "input": the data are graph inputs) or, where the data
// are frozen initializers (mode "frozen"), folded into constants by the
// front end (ops with a kernel of their own still run it).
#include "compiler/Importer.h"
#include "compiler/OnnxImporter.h"
#include "dialects/Train/IR/TrainDialect.h"
#include "dialects/Train/Transforms/Passes.h"
#include "test/unit/onnx_case.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/Base64.h"
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

namespace {

using namespace mlir;
using mt::test::Evaluator;
using mt::test::expectOutputs;
using mt::test::Tensor;
using mt::test::tensorOf;

const nlohmann::json &cases() {
  static const nlohmann::json all = [] {
    std::ifstream in(MT_SOURCE_DIR "/test/Import/Inputs/op_cases.json");
    EXPECT_TRUE(in) << "op_cases.json";
    return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  }();
  return all;
}

class OpReference : public ::testing::TestWithParam<size_t> {};

TEST_P(OpReference, MatchesOnnxRuntime) {
  const nlohmann::json &c = cases()["cases"][GetParam()];
  SCOPED_TRACE(c["name"].get<std::string>());
  std::vector<char> bytes;
  ASSERT_FALSE(bool(llvm::decodeBase64(c["model"].get<std::string>(), bytes)));
  std::string path =
      ::testing::TempDir() + "/op_case_" + std::to_string(GetParam()) + ".onnx";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
  }
  MLIRContext ctx;
  mt::ImportOptions opts;
  opts.modelPath = path;
  // The data of mode frozen, and the constants of both, are frozen
  // initializers whose values the front end folds.
  opts.frozenRegex = ".*";
  OwningOpRef<ModuleOp> module = mt::importOnnxModel(ctx, opts);
  ASSERT_TRUE(module);
  PassManager pm(&ctx);
  mt::train::buildFrontendPipeline(pm, /*explainFusion=*/false,
                                   /*keepLast=*/-1, /*fusePatterns=*/false);
  ASSERT_TRUE(succeeded(pm.run(*module)));
  auto model = module->lookupSymbol<func::FuncOp>("model");
  ASSERT_TRUE(model);
  std::vector<Tensor> inputs;
  for (const auto &in : c["inputs"])
    inputs.push_back(tensorOf(in));
  Evaluator eval;
  std::vector<Tensor> got = eval.call(model, inputs);
  got.erase(got.begin()); // the loss the case's model adds, then its outputs
  // The bound EXPECT_NEAR had: 2e-6 relative (at least absolute), in float.
  expectOutputs(got, c["outputs"], [](double w) {
    return double(2e-6f * std::max(1.0f, std::abs(float(w))));
  });
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Cases, OpReference,
                         ::testing::Range(size_t(0), cases()["cases"].size()),
                         [](const ::testing::TestParamInfo<size_t> &info) {
                           std::string name =
                               cases()["cases"][info.param]["name"];
                           for (char &ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch)))
                               ch = '_';
                           return name;
                         });

// Each row of the importer's tables has cases at its first opset (or the
// first the op exists at) and at its last.
TEST(OpReference, EveryRowAtBothEnds) {
  std::map<std::string, std::set<int64_t>> opsets;
  for (const auto &c : cases()["cases"])
    opsets[c["op"]].insert(c["opset"].get<int64_t>());
  const auto &since = cases()["since"];
  using namespace mt::importer;
  for (ArrayRef<OpRule> rules : ruleTables())
    for (const OpRule &rule : rules) {
      std::string op = rule.op;
      if (op == "SequenceAt")
        op = "SplitToSequence"; // one case reads both
      ASSERT_TRUE(since.contains(op)) << op << " has no case";
      int64_t first = std::max<int64_t>(rule.firstOpset, since[op]);
      EXPECT_TRUE(opsets[op].count(first)) << op << " at opset " << first;
      EXPECT_TRUE(opsets[op].count(rule.lastOpset))
          << op << " at opset " << rule.lastOpset;
    }
}

} // namespace
