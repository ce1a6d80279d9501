// The compiler preserves the model's numbers. The fused, outlined IR of each
// model, evaluated with the CPU reference kernels, gives the loss PyTorch
// recorded for the same batch (ref.json): this checks import, folding
// (masks, rotary tables), every fusion (scales, layouts, GQA head mapping,
// label shift) and outlining. The derived training step gives PyTorch's
// gradient norms, and five AdamW steps on it give PyTorch's losses: this
// checks the backward of every op. (The same numbers through plans and
// mtrun are checked by the runtime's tests.)
#include "compiler/OnnxImporter.h"
#include "dialects/Train/IR/TrainOps.h"
#include "dialects/Train/Transforms/Passes.h"
#include "runtime/optim/adamw.h"
#include "test/unit/evaluator.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <map>

using namespace mlir;
using namespace mt::train;
namespace k = mt::kernels::cpu;

namespace {

using mt::test::Evaluator;
using mt::test::Tensor;

std::string sharedDir() {
  const char *env = std::getenv("MT_SHARED");
  return env ? env : MT_SOURCE_DIR "/../shared";
}

/// Loss of `model` on the batch of `refPath`, after the front end.
void expectLoss(const std::string &model, const std::string &refPath,
                const char *targetsKey) {
  std::ifstream refFile(refPath);
  ASSERT_TRUE(refFile) << refPath;
  auto ref = nlohmann::json::parse(refFile);
  MLIRContext ctx;
  mt::ImportOptions opts;
  opts.modelPath = model;
  OwningOpRef<ModuleOp> module = mt::importOnnxModel(ctx, opts);
  ASSERT_TRUE(module);
  PassManager pm(&ctx);
  buildFrontendPipeline(pm);
  ASSERT_TRUE(succeeded(pm.run(*module)));

  auto toTensor = [](const nlohmann::json &rows) {
    Tensor t;
    t.shape = {int64_t(rows.size()), int64_t(rows[0].size())};
    for (const auto &row : rows)
      for (int64_t v : row)
        t.i.push_back(v);
    return t;
  };
  Tensor ids = toTensor(ref["input_ids"]);
  Tensor targets = targetsKey ? toTensor(ref[targetsKey]) : ids;
  Evaluator eval;
  auto outputs =
      eval.call(module->lookupSymbol<func::FuncOp>("model"), {ids, targets});
  ASSERT_FALSE(outputs.empty());
  float loss = outputs[0].f.at(0), expected = ref["loss"].get<float>();
  EXPECT_NEAR(loss, expected, 1e-5 * expected) << model;
}

/// The derived training step: its gradient norms (when ref.json has them)
/// and the losses of five AdamW steps on the batch.
void expectTraining(const std::string &model, const std::string &refPath,
                    const char *targetsKey) {
  std::ifstream refFile(refPath);
  ASSERT_TRUE(refFile) << refPath;
  auto ref = nlohmann::json::parse(refFile);
  MLIRContext ctx;
  mt::ImportOptions opts;
  opts.modelPath = model;
  OwningOpRef<ModuleOp> module = mt::importOnnxModel(ctx, opts);
  ASSERT_TRUE(module);
  PassManager pm(&ctx);
  buildFrontendPipeline(pm);
  pm.addPass(createDeriveTrainingStepPass());
  ASSERT_TRUE(succeeded(pm.run(*module)));
  auto step = module->lookupSymbol<func::FuncOp>("train_step");
  ASSERT_TRUE(step);

  auto toTensor = [](const nlohmann::json &rows) {
    Tensor t;
    t.shape = {int64_t(rows.size()), int64_t(rows[0].size())};
    for (const auto &row : rows)
      for (int64_t v : row)
        t.i.push_back(v);
    return t;
  };
  Tensor ids = toTensor(ref["input_ids"]);
  Tensor targets = targetsKey ? toTensor(ref[targetsKey]) : ids;
  Evaluator eval;
  mt::runtime::AdamWConfig adamw{ref["adamw"]["lr"], ref["adamw"]["betas"][0],
                                 ref["adamw"]["betas"][1], ref["adamw"]["eps"],
                                 ref["adamw"]["weight_decay"]};
  std::map<std::string, std::pair<std::vector<float>, std::vector<float>>>
      moments;
  const auto &expected = ref["adamw_losses"];
  for (size_t s = 0; s < expected.size(); ++s) {
    auto out = eval.call(step, {ids, targets});
    ASSERT_EQ(out.size(), step.getNumResults());
    float loss = out[0].f.at(0), want = expected[s].get<float>();
    EXPECT_NEAR(loss, want, 1e-4 * want) << model << " step " << s;
    for (unsigned r = 1; r < out.size(); ++r) {
      std::string name =
          step.getResultAttrOfType<StringAttr>(r, "train.grad_of").str();
      if (s == 0 && ref.contains("grad_norms")) {
        // ref.json names parameters without the wrapper's "m." prefix.
        double norm = 0;
        for (float g : out[r].f)
          norm += double(g) * g;
        std::string key = name.substr(name.find('.') + 1);
        ASSERT_TRUE(ref["grad_norms"].contains(key)) << key;
        double want = ref["grad_norms"][key].get<double>();
        EXPECT_NEAR(std::sqrt(norm), want, 1e-4 * want) << key;
      }
      Tensor &w = eval.weights.at(name);
      auto &[m, v] = moments[name];
      m.resize(w.f.size(), 0.0f);
      v.resize(w.f.size(), 0.0f);
      mt::runtime::adamwStep(w.f.data(), out[r].f.data(), m.data(), v.data(),
                             w.f.size(), s + 1, adamw);
    }
  }
}

TEST(FrontendNumerics, LlamaHfGradientsAndAdamWMatchPyTorch) {
  std::string dir = sharedDir() + "/fixtures/llama-hf";
  if (!std::ifstream(dir + "/ref.json"))
    GTEST_SKIP() << "no shared fixtures at " << dir << " (set MT_SHARED)";
  expectTraining(dir + "/model.onnx", dir + "/ref.json", nullptr);
}

TEST(FrontendNumerics, LlamaExampleAdamWMatchesPyTorch) {
  std::string dir = MT_SOURCE_DIR "/examples/llama";
  expectTraining(dir + "/model.onnx", dir + "/ref.json", "targets");
}

TEST(FrontendNumerics, Gpt2ExampleAdamWMatchesPyTorch) {
  std::string dir = MT_SOURCE_DIR "/examples/gpt2";
  expectTraining(dir + "/model.onnx", dir + "/ref.json", "targets");
}

TEST(FrontendNumerics, LlamaHfDynamoExportMatchesPyTorch) {
  std::string dir = sharedDir() + "/fixtures/llama-hf";
  if (!std::ifstream(dir + "/ref.json"))
    GTEST_SKIP() << "no shared fixtures at " << dir << " (set MT_SHARED)";
  expectLoss(dir + "/model.onnx", dir + "/ref.json", nullptr);
}

TEST(FrontendNumerics, LlamaExampleMatchesPyTorch) {
  std::string dir = MT_SOURCE_DIR "/examples/llama";
  expectLoss(dir + "/model.onnx", dir + "/ref.json", "targets");
}

TEST(FrontendNumerics, Gpt2ExampleMatchesPyTorch) {
  std::string dir = MT_SOURCE_DIR "/examples/gpt2";
  expectLoss(dir + "/model.onnx", dir + "/ref.json", "targets");
}

} // namespace
