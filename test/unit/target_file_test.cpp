// Target files (runtime/cost/cost_model.h): what writeTarget writes,
// loadTarget reads back the same, and a target without a network keeps
// none.
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

} // namespace
