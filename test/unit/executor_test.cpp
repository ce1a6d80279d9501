// The executor's token rules and its monitor: every plan the validator
// accepts runs to the end whatever the streams' interleaving, and a held op
// is reported with the waits that depend on it.
#include "runtime/exec/executor.h"
#include "runtime/plan/plan_io.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

namespace {

using namespace mt::runtime;
using mt::plan::Plan;

/// A backend whose ops do nothing (the executor's ordering is under test).
class NullBackend : public Backend {
public:
  Status allocate(const Plan &) override { return Status::ok(); }
  Status run(const mt::plan::Op &, const StepConfig &) override {
    std::this_thread::yield(); // other streams get to interleave
    return Status::ok();
  }
  Status write(uint32_t, const void *, size_t) override { return Status::ok(); }
  Status read(uint32_t, void *, size_t) override { return Status::ok(); }
  float *hostF32(uint32_t) override { return nullptr; }
  uint64_t diskStoredBytes() const override { return 0; }
};

/// A plan of `streams` streams and one MICRO_BATCH phase of FILL ops on a
/// one-element buffer (enough for validatePlan), no waits or signals yet.
Plan fillPlan(int streams, int ops, std::mt19937 *rng = nullptr) {
  using namespace mt::plan;
  Plan p;
  p.set_version(VERSION_CURRENT);
  p.mutable_shapes()->set_batch(1);
  p.mutable_shapes()->set_seq(1);
  p.mutable_shapes()->set_grad_accum(1);
  p.mutable_shapes()->set_vocab(2);
  p.set_compute_dtype(F32);
  auto *arena = p.add_arenas();
  arena->set_name("host");
  arena->set_tier(HOST);
  arena->set_size_bytes(16);
  auto *loss = p.add_buffers();
  loss->set_name("loss");
  loss->set_arena(0);
  loss->set_dtype(F32);
  p.set_loss(0);
  for (int s = 0; s < streams; ++s) {
    auto *st = p.add_streams();
    st->set_name("s" + std::to_string(s));
    st->set_kind(COMPUTE);
  }
  auto *phase = p.add_phases();
  phase->set_kind(MICRO_BATCH);
  for (int i = 0; i < ops; ++i) {
    auto *op = phase->add_ops();
    op->set_kernel(FILL);
    op->mutable_attrs()->mutable_fill();
    op->add_results(0);
    op->set_stream(rng ? uint32_t((*rng)() % streams) : uint32_t(i % streams));
  }
  return p;
}

TEST(Executor, EveryAcceptedPlanRunsToTheEnd) {
  // Random signals and waits over 3 streams: the validator accepts a plan
  // only when each wait's token comes from an earlier op; every accepted
  // one must finish (a deadlock would hang this test), and a wait on a
  // later op's token must be refused.
  std::mt19937 rng(7);
  int accepted = 0, refused = 0;
  for (int trial = 0; trial < 300; ++trial) {
    int n = 2 + int(rng() % 10);
    Plan p = fillPlan(3, n, &rng);
    p.set_num_tokens(uint32_t(n));
    auto *phase = p.mutable_phases(0);
    // Op i signals token i; each op waits on up to two tokens of any op.
    bool later = false;
    for (int i = 0; i < n; ++i) {
      phase->mutable_ops(i)->add_signals(uint32_t(i));
      for (int w = int(rng() % 3); w > 0; --w) {
        uint32_t t = uint32_t(rng() % n);
        if (int(t) == i)
          continue;
        phase->mutable_ops(i)->add_waits(t);
        later |= int(t) > i;
      }
    }
    Status st = validatePlan(p, "random.mtp");
    ASSERT_EQ(st.isOk(), !later) << st.message();
    if (!st) {
      EXPECT_NE(st.message().find("which only a later op of the phase "
                                  "signals"),
                std::string::npos)
          << st.message();
      ++refused;
      continue;
    }
    NullBackend backend;
    PhaseMonitor monitor;
    ASSERT_TRUE(
        runPhase(p, p.phases(0), backend, StepConfig{}, nullptr, 0, 0, &monitor)
            .isOk());
    EXPECT_EQ(monitor.describe(), "") << "no phase runs after runPhase";
    ++accepted;
  }
  EXPECT_GT(accepted, 30);
  EXPECT_GT(refused, 30);
}

TEST(Executor, CrossWaitsAreRefusedBeforeTheyCanHang) {
  // Stream 0's op waits on stream 1's, which waits on stream 0's: a cycle.
  Plan p = fillPlan(2, 2);
  p.set_num_tokens(2);
  auto *ops = p.mutable_phases(0)->mutable_ops();
  ops->Mutable(0)->add_waits(1);
  ops->Mutable(0)->add_signals(0);
  ops->Mutable(1)->add_waits(0);
  ops->Mutable(1)->add_signals(1);
  Status st = validatePlan(p, "cycle.mtp");
  ASSERT_FALSE(st.isOk());
  EXPECT_EQ(st.message(),
            "cycle.mtp: phase 0, op 0 (FILL): waits on token 1, which only a "
            "later op of the phase signals (the streams could wait on each "
            "other forever); a token must be signalled before its waits in "
            "the op list");
}

TEST(Executor, MonitorNamesTheHeldOpAndTheWaitsOnIt) {
  // s0: op 0 (held), then op 2; s1: op 1 waits on op 0's token.
  Plan p = fillPlan(2, 3);
  p.set_num_tokens(1);
  auto *ops = p.mutable_phases(0)->mutable_ops();
  ops->Mutable(0)->add_signals(0);
  ops->Mutable(1)->add_waits(0);
  ops->Mutable(2)->set_stream(0);
  ASSERT_TRUE(validatePlan(p, "held.mtp").isOk());
  NullBackend backend;
  PhaseMonitor monitor;
  // Called once s1 waits too, whichever thread gets there last.
  std::atomic<bool> stuck{false};
  std::string text;
  monitor.hold(/*step=*/3, /*op=*/0, /*forever=*/false, [&] {
    text = monitor.describe();
    stuck = true;
  });
  StepConfig step;
  step.step = 3;
  Status result;
  std::thread run([&] {
    result = runPhase(p, p.phases(0), backend, step, nullptr, 0, 0, &monitor);
  });
  while (!stuck)
    std::this_thread::yield();
  EXPECT_EQ(text, "MICRO_BATCH phase of step 3:\n"
                  "  stream 's0' is held before op 0 (FILL) (MT_TEST_HOLD)\n"
                  "  stream 's1' waits on token 0 before op 1 (FILL), which "
                  "op 0 (FILL) on stream 's0' signals");
  monitor.release();
  run.join();
  EXPECT_TRUE(result.isOk()) << result.message();
}

TEST(Executor, SaysWhenTheOpIsHeldAndOnlyOnce) {
  // mtrun's signal tests act on this call: it must come once the op is
  // held and the other streams can go no further (s0 runs op 0 and is held
  // before op 2; s1 runs op 1 and is done), not before.
  Plan p = fillPlan(2, 3);
  NullBackend backend;
  PhaseMonitor monitor;
  std::atomic<int> calls{0};
  std::string seen;
  monitor.hold(/*step=*/1, /*op=*/2, /*forever=*/false, [&] {
    seen = monitor.describe();
    ++calls;
  });
  StepConfig step;
  step.step = 1;
  Status result;
  std::thread run([&] {
    result = runPhase(p, p.phases(0), backend, step, nullptr, 0, 0, &monitor);
  });
  while (calls == 0)
    std::this_thread::yield();
  EXPECT_EQ(seen, "MICRO_BATCH phase of step 1:\n"
                  "  stream 's0' is held before op 2 (FILL) (MT_TEST_HOLD)\n"
                  "  stream 's1' has run all its ops");
  monitor.release();
  run.join();
  EXPECT_TRUE(result.isOk()) << result.message();
  // Released: the same op runs again without a hold or a second call.
  EXPECT_TRUE(
      runPhase(p, p.phases(0), backend, step, nullptr, 0, 0, &monitor).isOk());
  EXPECT_EQ(calls, 1);
}

TEST(Executor, HoldsOnlyItsStepAndAForeverHoldIsNotReleased) {
  Plan p = fillPlan(1, 1);
  NullBackend backend;
  PhaseMonitor monitor;
  monitor.hold(2, 0, /*forever=*/true);
  monitor.release();
  StepConfig other;
  other.step = 1;
  // Step 1 is not held; step 2 would be, released or not (not run here).
  EXPECT_TRUE(
      runPhase(p, p.phases(0), backend, other, nullptr, 0, 0, &monitor).isOk());
}

} // namespace
