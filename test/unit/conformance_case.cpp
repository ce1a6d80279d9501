// One case of ONNX's own node test suite (onnx.backend.test.case.node),
// written by scripts/onnx_conformance.py as JSON (the format of
// op_cases.json, with the suite's tolerances) and named by
// MT_CONFORMANCE_CASE: compiled as `mtc --forward --fuse none` compiles it
// (driver::compile: the graph's outputs as they are, each op its own
// kernel) into a forward-only plan, which the CPU backend runs as `mtrun
// --inputs` runs it (runForward); its outputs are compared with the suite's
// at its tolerances (|got - want| <= atol + rtol |want|). A model mtc
// refuses prints "REFUSED: " and the first diagnostic, and passes: the
// script counts it as refused, a failure as failed.
#include "compiler/Driver.h"
#include "dialects/Sched/Transforms/TrainKernels.h"
#include "runtime/hal/backends.h"
#include "runtime/plan/plan_io.h"
#include "runtime/train/forward.h"
#include "runtime/train/weights.h"
#include "test/unit/onnx_case.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "llvm/Support/Base64.h"
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace {

using namespace mlir;
namespace runtime = mt::runtime;
using mt::test::expectOutputs;
using mt::test::Tensor;
using mt::test::tensorOf;

void refuse(const std::string &why) {
  std::printf("REFUSED: %s\n", why.c_str());
}

/// A case's input as the tensor runForward is given: floats as F32,
/// integers as I64 (the script makes them initializers; a case may still
/// take one as an input).
runtime::NamedTensor givenTensor(const std::string &name, const Tensor &t) {
  runtime::NamedTensor n;
  n.name = name;
  n.shape.assign(t.shape.begin(), t.shape.end());
  bool floating = !t.f.empty() || t.i.empty();
  n.dtype = floating ? "F32" : "I64";
  const char *bytes = floating ? reinterpret_cast<const char *>(t.f.data())
                               : reinterpret_cast<const char *>(t.i.data());
  size_t size = floating ? t.f.size() * 4 : t.i.size() * 8;
  n.data.assign(bytes, bytes + size);
  return n;
}

/// An output read back as the comparison takes it: floats and integers
/// (booleans as 0 or 1).
Tensor outputTensor(const runtime::NamedTensor &n) {
  Tensor t;
  t.shape.assign(n.shape.begin(), n.shape.end());
  size_t count = 1;
  for (int64_t d : n.shape)
    count *= size_t(d);
  for (size_t i = 0; i < count; ++i) {
    const char *p = n.data.data();
    if (n.dtype == "F32") {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      t.f.push_back(v);
    } else if (n.dtype == "I64") {
      int64_t v;
      std::memcpy(&v, p + 8 * i, 8);
      t.i.push_back(v);
    } else {
      t.i.push_back(uint8_t(p[i]));
    }
  }
  return t;
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
  std::string planPath = std::string(path) + ".mtp";
  {
    std::ofstream out(model, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
  }
  struct Remove {
    std::vector<std::string> files;
    ~Remove() {
      for (const std::string &f : files)
        std::remove(f.c_str());
    }
  } remove{{model, planPath}};
  // What mtc's main registers: the driver applies these options.
  mlir::registerMLIRContextCLOptions();
  mlir::registerPassManagerCLOptions();
  mlir::registerDefaultTimingManagerCLOptions();
  DialectRegistry registry;
  mt::sched::registerTrainKernels(registry);
  MLIRContext ctx(registry);
  std::string first;
  ScopedDiagnosticHandler capture(&ctx, [&](Diagnostic &d) {
    if (first.empty() && d.getSeverity() == DiagnosticSeverity::Error)
      first = d.str();
    return success();
  });
  mt::driver::Request r;
  r.import.modelPath = model;
  r.import.frozenRegex = ".*"; // the script makes integer inputs initializers
  r.import.forward = true;
  r.options.fusePatterns = false;
  r.emit = mt::driver::Emit::Plan;
  r.outputPath = planPath;
  if (failed(mt::driver::compile(ctx, r)))
    return refuse(first.empty() ? "mtc refused it" : first);

  mt::plan::Plan plan;
  runtime::Status st = runtime::readPlan(planPath, plan);
  ASSERT_TRUE(st) << st.message();
  std::unique_ptr<runtime::Backend> backend =
      runtime::makeBackend(/*gpu=*/false, /*threads=*/1, "");
  st = backend->allocate(plan);
  ASSERT_TRUE(st) << st.message();
  runtime::WeightSource weights;
  weights.planPath = planPath;
  int initialised = 0;
  st = runtime::loadParameters(plan, *backend, weights, /*trainable=*/false,
                               initialised);
  ASSERT_TRUE(st) << st.message();
  // The case's inputs in the order of the graph's, by name.
  std::vector<runtime::NamedTensor> inputs;
  for (size_t i = 0; i < c["inputs"].size(); ++i)
    inputs.push_back(givenTensor(c["input_names"][i].get<std::string>(),
                                 tensorOf(c["inputs"][i])));
  std::vector<runtime::NamedTensor> outputs;
  std::optional<double> loss;
  st = runtime::runForward(plan, *backend, inputs, outputs, loss);
  ASSERT_TRUE(st) << st.message();
  std::vector<Tensor> got;
  for (const runtime::NamedTensor &o : outputs)
    got.push_back(outputTensor(o));
  double rtol = c["rtol"], atol = c["atol"];
  expectOutputs(got, c["outputs"],
                [&](double w) { return atol + rtol * std::abs(w); });
}

} // namespace
