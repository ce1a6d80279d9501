// A training run (runtime/train/session.h) on the tiny plan: what it tells
// its observer around each step, its metrics lines, the checkpoints it
// saves and resumes, a stop asked between steps, and what open() refuses
// before anything is allocated.
#include "runtime/hal/cpu/cpu_backend.h"
#include "runtime/plan/plan_io.h"
#include "runtime/train/session.h"
#include "test/unit/tiny_plan.h"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>

namespace {

using namespace mt::runtime;
namespace fs = std::filesystem;

/// What a session told it, and a stop to ask for after a given step.
struct Recorder : SessionObserver {
  std::vector<std::string> said;
  std::vector<int64_t> begun;
  std::vector<StepReport> ended;
  int64_t stopAfter = 0; ///< 0: never
  void say(const std::string &text) override { said.push_back(text); }
  void stepBegins(int64_t step) override { begun.push_back(step); }
  void stepEnds(const StepReport &r) override { ended.push_back(r); }
  int stopSignal() override {
    return stopAfter && !ended.empty() && ended.back().step >= stopAfter
               ? SIGTERM
               : 0;
  }
  bool saidLine(const std::string &start) const {
    for (const std::string &line : said)
      if (line.rfind(start, 0) == 0)
        return true;
    return false;
  }
};

class SessionTest : public ::testing::Test {
protected:
  void SetUp() override {
    char path[] = "/tmp/mt-session-XXXXXX";
    ASSERT_NE(mkdtemp(path), nullptr);
    dir = path;
    tokens = mt::test::tokenFile();
    plan = dir + "/tiny.mtp";
    ASSERT_TRUE(writePlan(mt::test::tinyPlan(2, 1, 3.0f), plan).isOk());
    o.plan = plan;
    o.data = tokens;
    o.train.steps = 3;
    o.weights.initNormal = true; // the tiny plan's table has no data
    o.backend = [](const std::string &) { return makeCpuBackend(1); };
  }
  void TearDown() override {
    fs::remove_all(dir);
    std::remove(tokens.c_str());
  }
  /// Opens and runs `o`; the status of whichever failed.
  Status train(Recorder &r, int &stopped) {
    std::unique_ptr<Session> s;
    if (Status st = Session::open(o, r, s); !st)
      return st;
    return s->run(stopped);
  }
  std::vector<std::string> lines(const std::string &path) {
    std::ifstream in(path);
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);)
      out.push_back(line);
    return out;
  }

  std::string dir, tokens, plan;
  SessionOptions o;
};

TEST_F(SessionTest, TrainsToTheLastStepWithMetricsAndACheckpoint) {
  o.metrics = dir + "/m.jsonl";
  o.save = dir + "/ckpt";
  Recorder r;
  int stopped = -1;
  Status st = train(r, stopped);
  ASSERT_TRUE(st.isOk()) << st.message();
  EXPECT_EQ(stopped, 0);
  EXPECT_EQ(r.begun, (std::vector<int64_t>{1, 2, 3}));
  ASSERT_EQ(r.ended.size(), 3u);
  EXPECT_EQ(r.ended[2].lastStep, 3);
  EXPECT_EQ(r.ended[0].result.loss, 3.0);
  // batch 1 x seq 2 x 2 micro-batches per step.
  EXPECT_EQ(r.ended[2].tokens, 3 * 4);
  std::vector<std::string> m = lines(o.metrics);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].rfind("{\"step\": 1, \"loss\": 3, ", 0), 0u) << m[0];
  EXPECT_NE(m[2].find("\"tokens\": 12,"), std::string::npos) << m[2];
  EXPECT_TRUE(fs::exists(o.save + "/step-00000003/state.json"));
  EXPECT_TRUE(r.saidLine("initialised 1 weights from scratch"));
  EXPECT_TRUE(r.saidLine("saved step 3 to " + o.save));
}

TEST_F(SessionTest, MetricsGoToAGivenStreamLeftOpen) {
  std::FILE *stream = std::tmpfile();
  ASSERT_NE(stream, nullptr);
  o.metricsStream = stream;
  o.train.steps = 2;
  Recorder r;
  int stopped = 0;
  ASSERT_TRUE(train(r, stopped).isOk());
  // Still open: the session did not close what it did not open.
  std::rewind(stream);
  char line[512];
  int lines = 0;
  while (std::fgets(line, sizeof line, stream))
    EXPECT_EQ(
        std::string(line).rfind("{\"step\": " + std::to_string(++lines), 0), 0u)
        << line;
  EXPECT_EQ(lines, 2);
  std::fclose(stream);
}

TEST_F(SessionTest, ResumesWhereTheCheckpointEndsAndAppendsMetrics) {
  o.metrics = dir + "/m.jsonl";
  o.save = dir + "/ckpt";
  o.train.steps = 2;
  Recorder first;
  int stopped = 0;
  ASSERT_TRUE(train(first, stopped).isOk());
  o.train.steps = 3;
  o.resume = o.save;
  Recorder second;
  Status st = train(second, stopped);
  ASSERT_TRUE(st.isOk()) << st.message();
  EXPECT_EQ(second.begun, (std::vector<int64_t>{3}));
  EXPECT_TRUE(second.saidLine("resumed from " + o.save +
                              "/step-00000002 at "
                              "step 2"));
  // Resumed weights are the checkpoint's, not initialised again.
  EXPECT_FALSE(second.saidLine("initialised"));
  std::vector<std::string> m = lines(o.metrics);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[2].rfind("{\"step\": 3,", 0), 0u) << m[2];
}

TEST_F(SessionTest, AStopAfterAStepSavesItAndSaysTheSignal) {
  o.save = dir + "/ckpt";
  Recorder r;
  r.stopAfter = 1;
  int stopped = 0;
  Status st = train(r, stopped);
  ASSERT_TRUE(st.isOk()) << st.message();
  EXPECT_EQ(stopped, SIGTERM);
  EXPECT_EQ(r.begun, (std::vector<int64_t>{1}));
  EXPECT_TRUE(fs::exists(o.save + "/step-00000001/state.json"));
  EXPECT_FALSE(fs::exists(o.save + "/step-00000003"));
  EXPECT_TRUE(r.saidLine("stopped by signal " + std::to_string(SIGTERM) +
                         " after step 1"));
}

TEST_F(SessionTest, OpenRefusesWhatCannotRunBeforeAllocating) {
  int stopped = 0;
  auto refused = [&](const std::string &want) {
    Recorder r;
    Status st = train(r, stopped);
    EXPECT_FALSE(st.isOk()) << want;
    EXPECT_NE(st.message().find(want), std::string::npos) << st.message();
    EXPECT_TRUE(r.begun.empty());
  };
  o.train.steps = 0;
  refused("--steps must be at least 1, got 0");
  o.train.steps = 3;
  o.train.beta2 = 1;
  refused("--beta2 must be in [0, 1), got 1");
  o.train.beta2 = 0.999;
  o.pad = true;
  refused("--pad fills rows with examples");
  o.pad = false;
  // A folder below a file cannot be made.
  o.save = tokens + "/ckpt";
  refused("--save " + o.save + ": cannot write there");
  o.save.clear();
  o.weights.initNormal = false;
  refused("table");
  o.weights.initNormal = true;
  ASSERT_TRUE(writePlan(mt::test::tinyPlan(2, 2, 3.0f), plan).isOk());
  refused(plan +
          " is a plan for 2 data-parallel ranks: run it as mpirun -np "
          "2 mtrun " +
          plan);
  o.plan = dir + "/missing.mtp";
  refused("missing.mtp");
}

TEST_F(SessionTest, CheckOptionsNamesEveryRangeByItsFlag) {
  EXPECT_TRUE(checkOptions(o).isOk());
  o.train.eps = 0;
  EXPECT_EQ(checkOptions(o).message(),
            "--eps must be a finite number > 0, got 0");
  o.train.eps = 1e-8;
  o.threads = 0;
  EXPECT_EQ(checkOptions(o).message(),
            "--threads must be from 1 to 4096, got 0");
  o.threads = 1;
  o.weights.initStd = -1;
  EXPECT_EQ(checkOptions(o).message(),
            "--init-std must be a finite number > 0, got -1");
}

} // namespace
