// One case of ONNX's own node test suite (onnx.backend.test.case.node),
// written by scripts/onnx_conformance.py as JSON (the format of
// op_cases.json, with the suite's tolerances) and named by
// MT_CONFORMANCE_CASE: imported as mtc imports, the front end run without
// fusing patterns (as mtc --fuse none), evaluated with the CPU kernels and
// compared with the suite's outputs at its tolerances (|got - want| <= atol
// + rtol |want|). A model the importer or the front end refuses prints
// "REFUSED: " and the first diagnostic, and passes: the script counts it
// as refused, a failure as failed.
#include "compiler/OnnxImporter.h"
#include "dialects/Train/IR/TrainDialect.h"
#include "dialects/Train/Transforms/Passes.h"
#include "test/unit/evaluator.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/Base64.h"
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace {

using namespace mlir;
using mt::test::Evaluator;
using mt::test::Tensor;

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

void refuse(const std::string &why) {
  std::printf("REFUSED: %s\n", why.c_str());
}

TEST(Conformance, Case) {
  const char *path = std::getenv("MT_CONFORMANCE_CASE");
  if (!path)
    GTEST_SKIP() << "MT_CONFORMANCE_CASE names no case "
                    "(scripts/onnx-conformance.sh runs this)";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  nlohmann::json c = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(c.is_discarded()) << path;
  std::vector<char> bytes;
  ASSERT_FALSE(bool(llvm::decodeBase64(c["model"].get<std::string>(), bytes)));
  std::string model = std::string(path) + ".onnx";
  {
    std::ofstream out(model, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
  }
  MLIRContext ctx;
  std::string first;
  ScopedDiagnosticHandler capture(&ctx, [&](Diagnostic &d) {
    if (first.empty() && d.getSeverity() == DiagnosticSeverity::Error)
      first = d.str();
    return success();
  });
  mt::ImportOptions opts;
  opts.modelPath = model;
  opts.frozenRegex = ".*"; // the script makes integer inputs initializers
  OwningOpRef<ModuleOp> module = mt::importOnnxModel(ctx, opts);
  std::remove(model.c_str());
  if (!module)
    return refuse(first.empty() ? "the importer refused it" : first);
  PassManager pm(&ctx);
  mt::train::buildFrontendPipeline(pm, /*explainFusion=*/false,
                                   /*keepLast=*/-1, /*fusePatterns=*/false);
  if (failed(pm.run(*module)))
    return refuse(first.empty() ? "the front end refused it" : first);
  auto fn = module->lookupSymbol<func::FuncOp>("model");
  ASSERT_TRUE(fn);
  std::vector<Tensor> inputs;
  for (const auto &t : c["inputs"])
    inputs.push_back(tensorOf(t));
  Evaluator eval;
  std::vector<Tensor> got = eval.call(fn, inputs);
  const auto &want = c["outputs"];
  ASSERT_EQ(got.size(), want.size() + 1) << "the loss, then the outputs";
  double rtol = c["rtol"], atol = c["atol"];
  for (size_t o = 0; o < want.size(); ++o) {
    Tensor w = tensorOf(want[o]);
    const Tensor &g = got[o + 1];
    ASSERT_EQ(g.shape, w.shape) << "output " << o;
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
        EXPECT_LE(std::abs(double(g.f[i]) - w.f[i]),
                  atol + rtol * std::abs(double(w.f[i])))
            << "output " << o << "[" << i << "]: " << g.f[i] << " vs "
            << w.f[i];
      }
    } else {
      ASSERT_EQ(g.i.size(), w.i.size()) << "output " << o;
      for (size_t i = 0; i < w.i.size(); ++i) {
        int64_t gv = want[o]["type"] == "bool" ? g.i[i] != 0 : g.i[i];
        EXPECT_EQ(gv, w.i[i]) << "output " << o << "[" << i << "]";
      }
    }
  }
}

} // namespace
