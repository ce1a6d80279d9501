// The training loop (runtime/train/training.h): the learning-rate schedule, one
// step's loss, gradient norm, update and skips on a small plan, and the same
// steps on two ranks (threads joined by an in-process communicator) giving
// the one process's numbers and weights.
#include "runtime/hal/cpu/cpu_backend.h"
#include "runtime/train/training.h"
#include "test/unit/tiny_plan.h"

#include "runtime/plan/plan_io.h"

#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>
#include <unistd.h>

namespace {

using namespace mt::runtime;
using mt::test::tinyPlan;
using mt::test::tokenFile;
namespace pb = mt::plan;

TEST(Training, LearningRateWarmsUpThenHoldsOrDecays) {
  TrainingOptions o;
  o.lr = 1.0;
  o.steps = 10;
  o.warmup = 4;
  EXPECT_DOUBLE_EQ(learningRate(o, 1), 0.25);
  EXPECT_DOUBLE_EQ(learningRate(o, 4), 1.0);
  EXPECT_DOUBLE_EQ(learningRate(o, 10), 1.0);
  o.schedule = TrainingOptions::Schedule::Cosine;
  o.minLr = 0.1;
  EXPECT_DOUBLE_EQ(learningRate(o, 4), 1.0);
  EXPECT_DOUBLE_EQ(learningRate(o, 7), 0.1 + 0.45);
  EXPECT_NEAR(learningRate(o, 10), 0.1, 1e-15);
  o.schedule = TrainingOptions::Schedule::Linear;
  EXPECT_DOUBLE_EQ(learningRate(o, 7), 0.1 + 0.9 * 0.5);
  EXPECT_DOUBLE_EQ(learningRate(o, 10), 0.1);
}

TEST(Training, HuggingFaceSchedulesCountTheStepsDone) {
  // get_linear_schedule_with_warmup(warmup 2, total 6): lambda(k) at the
  // k = t - 1 steps done: 0, 1/2, then (6 - k) / 4.
  TrainingOptions o;
  o.huggingFace = true;
  o.lr = 1.0;
  o.steps = 6;
  o.warmup = 2;
  o.schedule = TrainingOptions::Schedule::Linear;
  std::vector<double> want = {0.0, 0.5, 1.0, 0.75, 0.5, 0.25};
  for (int t = 1; t <= 6; ++t)
    EXPECT_DOUBLE_EQ(learningRate(o, t), want[size_t(t - 1)]) << t;
  o.schedule = TrainingOptions::Schedule::Cosine;
  EXPECT_DOUBLE_EQ(learningRate(o, 3), 1.0);
  EXPECT_DOUBLE_EQ(learningRate(o, 5), 0.5);
  o.schedule = TrainingOptions::Schedule::Constant;
  o.warmup = 0;
  EXPECT_DOUBLE_EQ(learningRate(o, 1), 1.0);
}

/// Every collective of `size` threads, through shared slots: the rank
/// order MPI's would have.
class ThreadRanks {
public:
  explicit ThreadRanks(int size) : size_(size), slots_(size), sync_(size) {}

  class Rank : public Communicator {
  public:
    Rank(ThreadRanks &all, int rank) : all_(all), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return all_.size_; }
    int localRank() const override { return rank_; }
    Status reduceToOwner(
        int owner, const void *data, size_t bytes,
        const std::function<void(const void *, size_t, size_t)> &add) override {
      post(data, bytes);
      if (rank_ == owner)
        for (int r = 0; r < size(); ++r)
          add(all_.slots_[r].data(), 0, bytes);
      all_.sync_.arrive_and_wait();
      return Status::ok();
    }
    Status broadcast(int owner, void *data, size_t bytes) override {
      post(data, bytes);
      if (rank_ != owner)
        std::memcpy(data, all_.slots_[owner].data(), bytes);
      all_.sync_.arrive_and_wait();
      return Status::ok();
    }
    Status allGather(const void *mine, size_t bytes, void *all) override {
      post(mine, bytes);
      for (int r = 0; r < size(); ++r)
        std::memcpy(static_cast<char *>(all) + r * bytes, all_.slots_[r].data(),
                    bytes);
      all_.sync_.arrive_and_wait();
      return Status::ok();
    }
    Status send(int, const void *, size_t) override {
      return Status::error("not in these tests");
    }
    Status receive(int, void *, size_t) override {
      return Status::error("not in these tests");
    }
    Status barrier() override {
      all_.sync_.arrive_and_wait();
      return Status::ok();
    }
    [[noreturn]] void abort(int) override { std::abort(); }

  private:
    /// This rank's bytes in its slot, then everyone's are there.
    void post(const void *data, size_t bytes) {
      auto *p = static_cast<const char *>(data);
      all_.slots_[rank_].assign(p, p + bytes);
      all_.sync_.arrive_and_wait();
    }
    ThreadRanks &all_;
    int rank_;
  };

private:
  /// Every thread waits here until all have arrived (reusable).
  class Barrier {
  public:
    explicit Barrier(int n) : n_(n) {}
    void arrive_and_wait() {
      std::unique_lock<std::mutex> lock(mu_);
      int generation = generation_;
      if (++arrived_ == n_) {
        arrived_ = 0;
        ++generation_;
        all_.notify_all();
        return;
      }
      all_.wait(lock, [&] { return generation != generation_; });
    }

  private:
    std::mutex mu_;
    std::condition_variable all_;
    int n_, arrived_ = 0, generation_ = 0;
  };
  int size_;
  std::vector<std::vector<char>> slots_;
  Barrier sync_;
};

struct Trained {
  std::vector<StepResult> steps;
  std::vector<float> table;
  std::vector<std::string> notes;
  Status status;
};

/// `steps` steps of `plan` as rank `comm` (null: one process).
Trained train(const pb::Plan &plan, const std::string &tokens, int steps,
              TrainingOptions o, Communicator *comm = nullptr) {
  Trained run;
  if ((run.status = validatePlan(plan, "tiny.mtp")), !run.status)
    return run;
  TokenData data;
  if ((run.status = TokenData::open(tokens, TokenType::U16, 4, 1, 2,
                                    TargetKind::Labels, data)),
      !run.status)
    return run;
  auto backend = makeCpuBackend(1);
  backend->joinRanks(comm);
  if ((run.status = backend->allocate(plan)), !run.status)
    return run;
  RunState state;
  o.steps = steps;
  Trainer trainer(o, plan, *backend, data, state);
  trainer.note = [&](const std::string &text) { run.notes.push_back(text); };
  for (int t = 1; t <= steps; ++t) {
    StepResult r;
    if ((run.status = trainer.step(t, r)), !run.status)
      return run;
    run.steps.push_back(r);
  }
  run.table.resize(8);
  run.status = backend->read(plan.parameters(0).master(), run.table.data(),
                             run.table.size() * sizeof(float));
  return run;
}

TEST(Training, AStepAveragesTheMicroBatchesAndUpdates) {
  std::string tokens = tokenFile();
  TrainingOptions o;
  o.weightDecay = 0;
  Trained run = train(tinyPlan(2, 1, 3.0f), tokens, 2, o);
  ASSERT_TRUE(run.status.isOk()) << run.status.message();
  // Micro-batches [0 1] and [2 3]: each row's mean gradient is 1/2 of dy.
  EXPECT_EQ(run.steps[0].loss, 3.0);
  EXPECT_DOUBLE_EQ(run.steps[0].gradNorm, std::sqrt(8 * 0.25));
  EXPECT_EQ(run.steps[0].lr, 1e-3);
  // Adam's first step moves every weight by about lr against its gradient.
  for (float w : run.table)
    EXPECT_LT(w, -1e-3f);
  std::remove(tokens.c_str());
}

TEST(Training, ANonFiniteStepIsSkippedThenStopsTheRun) {
  std::string tokens = tokenFile();
  TrainingOptions o;
  o.maxSkips = 1;
  Trained run = train(tinyPlan(1, 1, INFINITY), tokens, 1, o);
  ASSERT_TRUE(run.status.isOk()) << run.status.message();
  EXPECT_TRUE(run.steps[0].skipped);
  for (float w : run.table)
    EXPECT_EQ(w, 0.0f) << "a skipped step does not update";
  ASSERT_EQ(run.notes.size(), 1u);
  EXPECT_EQ(run.notes[0], "step 1 skipped: the loss is inf (1 of --max-skips "
                          "1)");
  run = train(tinyPlan(1, 1, INFINITY), tokens, 2, o);
  EXPECT_EQ(run.status.message(),
            "step 2: the loss is inf; 2 step(s) skipped, more than "
            "--max-skips 1");
  std::remove(tokens.c_str());
}

/// `steps` steps of `plan` on two ranks, one thread each.
std::vector<Trained> trainOnTwo(const pb::Plan &plan, const std::string &tokens,
                                int steps, const TrainingOptions &o) {
  ThreadRanks ranks(2);
  std::vector<Trained> runs(2);
  std::thread threads[2];
  ThreadRanks::Rank comms[2] = {{ranks, 0}, {ranks, 1}};
  for (int r = 0; r < 2; ++r)
    threads[r] = std::thread(
        [&, r] { runs[r] = train(plan, tokens, steps, o, &comms[r]); });
  for (auto &t : threads)
    t.join();
  return runs;
}

TEST(Training, TwoRanksStepLikeOneProcessWithTheirMicroBatches) {
  // Rank r takes micro-batches r, r + 2, ...: 2 ranks x 1 micro-batch read
  // what 1 process x 2 reads; rank 1 owns the table's state and sends the
  // updated table to rank 0.
  std::string tokens = tokenFile();
  TrainingOptions o;
  o.gradClip = 0.5;
  Trained one = train(tinyPlan(2, 1, 2.5f), tokens, 3, o);
  ASSERT_TRUE(one.status.isOk()) << one.status.message();
  for (const Trained &run : trainOnTwo(tinyPlan(1, 2, 2.5f), tokens, 3, o)) {
    ASSERT_TRUE(run.status.isOk()) << run.status.message();
    for (int t = 0; t < 3; ++t) {
      EXPECT_EQ(run.steps[t].loss, one.steps[t].loss);
      EXPECT_EQ(run.steps[t].gradNorm, one.steps[t].gradNorm);
    }
    EXPECT_EQ(run.table, one.table);
  }
  std::remove(tokens.c_str());
}

TEST(Training, EveryRankSkipsANonFiniteStep) {
  // Rank 1 owns the weight; both see the same loss and norm, so both skip,
  // and only rank 0 says so.
  std::string tokens = tokenFile();
  TrainingOptions o;
  o.maxSkips = 1;
  std::vector<Trained> runs = trainOnTwo(tinyPlan(1, 2, NAN), tokens, 1, o);
  for (const Trained &run : runs) {
    ASSERT_TRUE(run.status.isOk()) << run.status.message();
    EXPECT_TRUE(run.steps[0].skipped);
    for (float w : run.table)
      EXPECT_EQ(w, 0.0f);
  }
  EXPECT_EQ(runs[0].notes.size(), 1u);
  EXPECT_EQ(runs[1].notes.size(), 0u);
  std::remove(tokens.c_str());
}

} // namespace
