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
#include "test/unit/evaluator.h"

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
using mt::test::Tensor;

const nlohmann::json &cases() {
  static const nlohmann::json all = [] {
    std::ifstream in(MT_SOURCE_DIR "/test/Import/Inputs/op_cases.json");
    EXPECT_TRUE(in) << "op_cases.json";
    return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  }();
  return all;
}

Tensor tensorOf(const nlohmann::json &j) {
  Tensor t;
  for (int64_t d : j["shape"])
    t.shape.push_back(d);
  for (const auto &v : j["data"]) {
    if (j["type"] == "float" && v.is_string()) // "inf" or "-inf"
      t.f.push_back(v == "inf" ? INFINITY : -INFINITY);
    else if (j["type"] == "float")
      t.f.push_back(v.is_null() ? NAN : v.get<float>());
    else
      t.i.push_back(v.get<int64_t>());
  }
  return t;
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
  const auto &want = c["outputs"];
  ASSERT_EQ(got.size(), want.size() + 1) << "the loss, then the op's outputs";
  for (size_t o = 0; o < want.size(); ++o) {
    Tensor w = tensorOf(want[o]);
    const Tensor &g = got[o + 1];
    EXPECT_EQ(g.shape, w.shape) << "output " << o;
    if (want[o]["type"] == "float") {
      ASSERT_EQ(g.f.size(), w.f.size()) << "output " << o;
      for (size_t i = 0; i < w.f.size(); ++i) {
        if (std::isnan(w.f[i])) {
          EXPECT_TRUE(std::isnan(g.f[i])) << "output " << o << "[" << i << "]";
          continue;
        }
        if (std::isinf(w.f[i])) {
          EXPECT_EQ(g.f[i], w.f[i]) << "output " << o << "[" << i << "]";
          continue;
        }
        EXPECT_NEAR(g.f[i], w.f[i], 2e-6f * std::max(1.0f, std::abs(w.f[i])))
            << "output " << o << "[" << i << "]";
      }
    } else {
      ASSERT_EQ(g.i.size(), w.i.size()) << "output " << o;
      for (size_t i = 0; i < w.i.size(); ++i) {
        int64_t gv = g.i[i];
        if (want[o]["type"] == "bool")
          gv = gv != 0;
        EXPECT_EQ(gv, w.i[i]) << "output " << o << "[" << i << "]";
      }
    }
  }
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
