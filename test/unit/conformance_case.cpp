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
#include "test/unit/onnx_case.h"

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
using mt::test::expectOutputs;
using mt::test::Tensor;
using mt::test::tensorOf;

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
  double rtol = c["rtol"], atol = c["atol"];
  expectOutputs(got, c["outputs"],
                [&](double w) { return atol + rtol * std::abs(w); });
}

} // namespace
