// Target files (runtime/cost/cost_model.h): what writeTarget writes,
// loadTarget reads back the same, and a target without a network (or
// attention rates) keeps none.
#include "runtime/cost/cost_model.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

using namespace mt::runtime;

namespace {

std::string tempPath(const char *name) {
  return std::string(::testing::TempDir()) + name;
}

TEST(TargetFile, EveryBuiltinRoundTrips) {
  for (const std::string &name : builtinTargets()) {
    mt::plan::Target t, back;
    ASSERT_TRUE(loadTarget(name, t).isOk()) << name;
    std::string path = tempPath("target.json");
    ASSERT_TRUE(writeTarget(t, path).isOk()) << name;
    Status st = loadTarget(path, back);
    ASSERT_TRUE(st.isOk()) << name << ": " << st.message();
    EXPECT_EQ(back.SerializeAsString(), t.SerializeAsString()) << name;
    std::remove(path.c_str());
  }
}

TEST(TargetFile, OneRankWritesNoNetwork) {
  mt::plan::Target t;
  ASSERT_TRUE(loadTarget("cpu", t).isOk());
  t.clear_network_bytes_per_s();
  t.clear_network_latency_s();
  std::string path = tempPath("no_network.json");
  ASSERT_TRUE(writeTarget(t, path).isOk());
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  EXPECT_EQ(text.str().find("network"), std::string::npos) << text.str();
  mt::plan::Target back;
  ASSERT_TRUE(loadTarget(path, back).isOk());
  EXPECT_EQ(back.network_bytes_per_s(), 0.0);
  EXPECT_EQ(back.host_bytes_per_s(), t.host_bytes_per_s());
  std::remove(path.c_str());
}

TEST(TargetFile, AnUnwritableFolderIsSaid) {
  mt::plan::Target t;
  ASSERT_TRUE(loadTarget("cpu", t).isOk());
  Status st = writeTarget(t, "/nonexistent-folder/target.json");
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("/nonexistent-folder/target.json: cannot write"),
            std::string::npos)
      << st.message();
}

TEST(TargetFile, AttentionRatesAreOptionalAndCostAttention) {
  // A file without the attention rates (older than them) loads with none,
  // and an attention op is costed at the matmul rate; with them, at its
  // own, and the cost names the rate it used.
  mt::plan::Target t;
  ASSERT_TRUE(loadTarget("h200", t).isOk());
  EXPECT_EQ(t.attention_flops_bf16(), 301e12);
  std::string path = tempPath("no_attention.json");
  mt::plan::Target old = t;
  old.clear_attention_flops_f32();
  old.clear_attention_flops_bf16();
  ASSERT_TRUE(writeTarget(old, path).isOk());
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  EXPECT_EQ(text.str().find("attention"), std::string::npos) << text.str();
  mt::plan::Target back;
  ASSERT_TRUE(loadTarget(path, back).isOk());
  EXPECT_EQ(back.attention_flops_bf16(), 0.0);
  std::remove(path.c_str());

  mt::plan::Plan plan;
  plan.set_compute_dtype(mt::plan::BF16);
  plan.add_streams()->set_kind(mt::plan::COMPUTE);
  mt::plan::Op op;
  op.set_kernel(mt::plan::ATTENTION);
  op.set_flops(690e12);
  OpCost own = opCost(plan, op, t), fallback = opCost(plan, op, back);
  EXPECT_DOUBLE_EQ(own.seconds, 690.0 / 301.0);
  EXPECT_EQ(own.rate, "attention bf16 301.0 TFLOP/s");
  EXPECT_DOUBLE_EQ(fallback.seconds, 1.0);
  EXPECT_EQ(fallback.rate, "matmul bf16 690.0 TFLOP/s");
  EXPECT_NE(rateSource(t).find("measured on the H200 machine"),
            std::string::npos);
  EXPECT_NE(rateSource(back).find("a target file"), std::string::npos);
  mt::plan::Target h100;
  ASSERT_TRUE(loadTarget("h100", h100).isOk());
  EXPECT_NE(rateSource(h100).find("nominal"), std::string::npos);
}

} // namespace
