// The planner's decisions, each on its own: the search space under the
// user's constraints, the memory bounds that prune without compiling, the
// offload rule, the offload-fraction walk, the choice, its runner-up and
// ties, and the refusal when nothing fits. Plans are synthetic: a fake back
// end gives each schedule arenas and one op whose time the test decides.
#include "compiler/Planner.h"
#include "runtime/cost/cost_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <set>

using namespace mt::planner;
using mt::plan::Plan;

namespace {

constexpr int64_t KiB = 1024;

/// A plan with device, pinned and host arenas of the given sizes and one
/// compute op of `flops` on the target.
Plan fakePlan(int64_t device, int64_t pinned, int64_t host, double flops) {
  Plan p;
  p.mutable_shapes()->set_batch(1);
  p.mutable_shapes()->set_seq(1);
  p.mutable_shapes()->set_grad_accum(1);
  p.set_compute_dtype(mt::plan::F32);
  for (auto [name, tier, size] :
       {std::tuple{"device", mt::plan::DEVICE, device},
        {"host_pinned", mt::plan::HOST_PINNED, pinned},
        {"host", mt::plan::HOST, host}}) {
    auto *a = p.add_arenas();
    a->set_name(name);
    a->set_tier(tier);
    a->set_size_bytes(uint64_t(size));
  }
  auto *s = p.add_streams();
  s->set_name("compute");
  s->set_kind(mt::plan::COMPUTE);
  auto *phase = p.add_phases();
  phase->set_kind(mt::plan::MICRO_BATCH);
  auto *op = phase->add_ops();
  op->set_kernel(mt::plan::FILL);
  op->set_flops(flops);
  return p;
}

mt::plan::Target target() {
  mt::plan::Target t;
  EXPECT_TRUE(mt::runtime::loadTarget("cpu", t).isOk());
  return t;
}

/// A back end whose plans' device bytes and step time are functions of
/// the schedule (a schedule `refuses` is refused); it counts what it
/// compiled, and may be called from several threads.
struct FakeBackEnd {
  std::function<int64_t(const Schedule &)> device = [](const Schedule &) {
    return 10 * KiB;
  };
  std::function<double(const Schedule &)> flops = [](const Schedule &) {
    return 1e9;
  };
  std::function<bool(const Schedule &)> refuses = [](const Schedule &) {
    return false;
  };
  std::vector<Schedule> compiled;
  std::mutex mutex;
  CompileFn fn() {
    return [this](const Schedule &s, Plan &plan, std::string &error) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        compiled.push_back(s);
      }
      if (refuses(s)) {
        error = "refused: " + s.flags();
        return false;
      }
      plan = fakePlan(device(s), KiB, 64 * KiB, flops(s));
      *plan.mutable_target() = target();
      return true;
    };
  }
};

Budgets roomy() { return {1 << 30, 1 << 30, int64_t(1) << 32, 0}; }

ModelSize small() { return {1000, 0, 8.0}; }

size_t count(const std::vector<Schedule> &v,
             const std::function<bool(const Schedule &)> &f) {
  return size_t(std::count_if(v.begin(), v.end(), f));
}

TEST(Planner, SpaceEveryGivenChoiceIsAConstraint) {
  Schedule base;
  Constraints free;
  // fp32: 2 recompute choices; layers: stream x offload x 3 overlaps, none:
  // stream x 3 overlaps; one micro-batch, so no order to choose.
  std::vector<Schedule> all = searchSpace(base, free);
  EXPECT_EQ(all.size(), 12u + 6u);
  EXPECT_EQ(count(all, [](auto &s) { return s.keep && s.offloadActivations; }),
            0u)
      << "nothing recomputed: no checkpoints to offload";
  EXPECT_EQ(
      count(all,
            [](auto &s) { return s.weightLink == mt::sched::WeightLink::F32; }),
      0u)
      << "the link is a choice only with bf16 compute";
  Constraints fixed;
  fixed.optimizerOverlap = Overlap::NextForward;
  fixed.streamWeights = true;
  fixed.keep = false;
  std::vector<Schedule> one = searchSpace(base, fixed);
  EXPECT_EQ(one.size(), 2u); // offload or not
  for (const Schedule &s : one)
    EXPECT_TRUE(s.streamWeights && !s.keep &&
                s.optimizerOverlap == Overlap::NextForward);
}

TEST(Planner, SpaceClippingRulesOutTheBackwardOverlap) {
  Constraints c;
  c.clipping = true;
  for (const Schedule &s : searchSpace(Schedule{}, c))
    EXPECT_NE(s.optimizerOverlap, Overlap::Backward) << s.flags();
}

TEST(Planner, SpaceLayerOrderAndOffloadNeedRecompute) {
  Schedule base;
  base.gradAccum = 4;
  Constraints c;
  std::vector<Schedule> all = searchSpace(base, c);
  EXPECT_GT(count(all, [](auto &s) { return s.layerMajor; }), 0u);
  EXPECT_EQ(count(all, [](auto &s) { return s.layerMajor && s.keep; }), 0u);
  c.layerMajor = true;
  for (const Schedule &s : searchSpace(base, c))
    EXPECT_TRUE(s.layerMajor && !s.keep) << s.flags();
  Constraints offload;
  offload.offloadActivations = true;
  for (const Schedule &s : searchSpace(base, offload))
    EXPECT_FALSE(s.keep) << s.flags();
  // One micro-batch has no order: the flag asks for nothing.
  Constraints lone;
  lone.layerMajor = true;
  for (const Schedule &s : searchSpace(Schedule{}, lone))
    EXPECT_FALSE(s.layerMajor);
}

TEST(Planner, SpaceBatchSplitsKeepTheTokensPerStep) {
  Schedule base;
  base.batch = 6;
  Constraints c;
  c.keep = false;
  c.streamWeights = false;
  c.offloadActivations = false;
  c.optimizerOverlap = Overlap::After;
  c.layerMajor = false;
  EXPECT_EQ(searchSpace(base, c).size(), 1u) << "not splittable";
  c.splitBatch = true;
  std::vector<Schedule> split = searchSpace(base, c);
  ASSERT_EQ(split.size(), 2u); // 6 = 6 x 1 = 3 x 2; 4 and 8 do not divide
  EXPECT_EQ(split[1].batch, 3);
  EXPECT_EQ(split[1].gradAccum, 2);
}

TEST(Planner, SpaceBf16SearchesTheLinkAndDiskTheMoments) {
  Schedule bf16;
  bf16.computeDtype = mt::sched::ComputeDtype::BF16;
  Constraints c;
  c.diskGiven = true;
  std::vector<Schedule> all = searchSpace(bf16, c);
  EXPECT_EQ(all.size(), 18u * 2 * 2);
  c.weightLink = mt::sched::WeightLink::F32;
  c.momentsOnDisk = false;
  for (const Schedule &s : searchSpace(bf16, c))
    EXPECT_TRUE(s.weightLink == mt::sched::WeightLink::F32 && !s.momentsOnDisk);
}

TEST(Planner, SpaceKeptLayersAQuarterAtATime) {
  Constraints c;
  c.layers = 8;
  c.streamWeights = false;
  c.offloadActivations = false;
  c.optimizerOverlap = Overlap::After;
  std::vector<int64_t> kept;
  for (const Schedule &s : searchSpace(Schedule{}, c))
    kept.push_back(s.keep ? -1 : s.keepLast);
  EXPECT_EQ(kept, (std::vector<int64_t>{0, 2, 4, 6, -1}));
  c.keepLast = 3; // given: that and nothing else
  for (const Schedule &s : searchSpace(Schedule{}, c))
    EXPECT_EQ(s.keepLast, 3);
}

TEST(Planner, SearchMoreKeptLayersOnlyWhileFewerFit) {
  FakeBackEnd be;
  Budgets b = roomy();
  b.device = 100 * KiB;
  // 30 KiB per kept layer (everything for --recompute none).
  be.device = [](const Schedule &s) {
    return 10 * KiB + 30 * KiB * (s.keep ? 8 : s.keepLast);
  };
  be.flops = [](const Schedule &s) {
    return 1e9 * (1.0 - 0.03 * double(s.keep ? 8 : s.keepLast));
  };
  Constraints c;
  c.layers = 8;
  c.streamWeights = false;
  c.offloadActivations = false;
  c.optimizerOverlap = Overlap::After;
  Result r = search(Schedule{}, c, b, small(), target(), be.fn());
  std::vector<int64_t> compiled;
  for (const Schedule &s : be.compiled)
    compiled.push_back(s.keep ? -1 : s.keepLast);
  // 4 kept layers need 130 KiB: 6 and all are not compiled.
  EXPECT_EQ(compiled, (std::vector<int64_t>{0, 2, 4}));
  ASSERT_TRUE(r.best);
  EXPECT_EQ(r.candidates[*r.best].schedule.keepLast, 2)
      << "the most kept layers that fit: the least recompute";
}

TEST(Planner, BoundsHostBytesPerParameter) {
  ModelSize m{1000, 100, 8.0};
  Schedule s; // after: master 4, moments 8, accumulator 4
  EXPECT_EQ(hostLowerBound(s, m), 16 * 1000 + 4 * 100);
  s.momentsOnDisk = true;
  EXPECT_EQ(hostLowerBound(s, m), 8 * 1000 + 4 * 100);
  s.momentsOnDisk = false;
  s.computeDtype = mt::sched::ComputeDtype::BF16;
  EXPECT_EQ(hostLowerBound(s, m), 18 * 1000 + 4 * 100)
      << "bf16 with the compute link: the pinned bf16 copy";
  s.weightLink = mt::sched::WeightLink::F32;
  s.optimizerOverlap = Overlap::Backward;
  s.gradAccum = 8;
  s.layerMajor = true; // transient gradients: 12 bytes
  EXPECT_EQ(hostLowerBound(s, m), 12 * 1000 + 4 * 100);
  s.layerMajor = false; // 8 micro-batches accumulate on the host
  EXPECT_EQ(hostLowerBound(s, m), 16 * 1000 + 4 * 100);
  EXPECT_EQ(residentDeviceLowerBound(m, true), 2 * 1000);
}

TEST(Planner, SearchOverABoundIsNotCompiled) {
  FakeBackEnd be;
  Budgets b = roomy();
  b.host = 13 * 1000; // only transient gradients fit: 12 bytes a parameter
  b.device = 1000;    // resident weights need 4000
  Schedule base;
  Constraints c;
  Result r = search(base, c, b, small(), target(), be.fn());
  for (const Schedule &s : be.compiled) {
    EXPECT_EQ(s.optimizerOverlap, Overlap::Backward) << s.flags();
    EXPECT_TRUE(s.streamWeights) << s.flags();
  }
  EXPECT_GT(r.overBound(), 0u);
}

TEST(Planner, SearchOffloadOnlyWhereTheDeviceNeedsIt) {
  FakeBackEnd be;
  Budgets b = roomy();
  b.device = 100 * KiB;
  // Streamed schedules need 200 KiB without offload, 50 KiB with it.
  be.device = [](const Schedule &s) {
    return s.offloadActivations ? 50 * KiB
           : s.streamWeights    ? 200 * KiB
                                : 20 * KiB;
  };
  Constraints c;
  c.keep = false;
  c.optimizerOverlap = Overlap::After;
  search(Schedule{}, c, b, small(), target(), be.fn());
  // Resident fits: its offloaded variant is not compiled; streamed does
  // not: offloaded at 1, 0.75, 0.5 and 0.25 (all fit).
  EXPECT_EQ(
      count(be.compiled,
            [](auto &s) { return s.offloadActivations && !s.streamWeights; }),
      0u);
  EXPECT_EQ(
      count(be.compiled,
            [](auto &s) { return s.offloadActivations && s.streamWeights; }),
      4u);
}

TEST(Planner, SearchFewerOffloadsWhileTheyFitAndWinTies) {
  FakeBackEnd be;
  Budgets b = roomy();
  b.device = 100 * KiB;
  // Fewer offloads need more device memory: 0.5 and below do not fit.
  be.device = [](const Schedule &s) {
    return !s.offloadActivations
               ? 1000 * KiB
               : int64_t(200 * KiB * (1.0 - s.offloadFraction)) + KiB;
  };
  Constraints c;
  c.keep = false;
  c.streamWeights = true;
  c.optimizerOverlap = Overlap::After;
  Result r = search(Schedule{}, c, b, small(), target(), be.fn());
  std::vector<double> fractions;
  for (const Schedule &s : be.compiled)
    if (s.offloadActivations)
      fractions.push_back(s.offloadFraction);
  EXPECT_EQ(fractions, (std::vector<double>{1.0, 0.75, 0.5}))
      << "0.5 does not fit: 0.25 is not tried";
  ASSERT_TRUE(r.best);
  EXPECT_EQ(r.candidates[*r.best].schedule.offloadFraction, 0.75)
      << "as fast as 1 and fewer offloads";
}

/// A search over resident, unoffloaded schedules whose speeds differ: the
/// backward overlap fastest, then keeping every layer.
Result searchOfThreeSpeeds() {
  FakeBackEnd be;
  be.flops = [](const Schedule &s) {
    return s.optimizerOverlap == Overlap::Backward ? 1e9 : s.keep ? 2e9 : 3e9;
  };
  Constraints c;
  c.streamWeights = false;
  c.offloadActivations = false;
  return search(Schedule{}, c, roomy(), small(), target(), be.fn());
}

TEST(Planner, SearchTheFastestWinsAndTheNextIsTheRunnerUp) {
  Result r = searchOfThreeSpeeds();
  ASSERT_TRUE(r.best && r.runnerUp);
  const Schedule &best = r.candidates[*r.best].schedule;
  EXPECT_EQ(best.optimizerOverlap, Overlap::Backward);
  EXPECT_GE(r.candidates[*r.best].tokensPerSecond(),
            r.candidates[*r.runnerUp].tokensPerSecond());
  EXPECT_NE(*r.best, *r.runnerUp);
}

TEST(Planner, SearchOnlyTheBestAndTheRunnerUpKeepTheirPlans) {
  Result r = searchOfThreeSpeeds();
  ASSERT_TRUE(r.best && r.runnerUp);
  ASSERT_GT(r.candidates.size(), 2u);
  for (size_t i = 0; i < r.candidates.size(); ++i) {
    const Candidate &x = r.candidates[i];
    bool kept = i == *r.best || i == *r.runnerUp;
    EXPECT_EQ(x.plan.ByteSizeLong() > 0, kept) << x.schedule.flags();
    // What is shown and compared of every candidate outlives its plan.
    EXPECT_GT(x.tokensPerSecond(), 0) << x.schedule.flags();
    EXPECT_GT(x.rows, 0) << x.schedule.flags();
    EXPECT_GT(x.tiers.device, 0) << x.schedule.flags();
  }
}

TEST(Planner, SearchNothingFitsNamesTheClosest) {
  FakeBackEnd be;
  Budgets b = roomy();
  b.device = KiB; // every plan needs 10 KiB
  Result r = search(Schedule{}, Constraints{}, b, small(), target(), be.fn());
  EXPECT_FALSE(r.best);
  std::string why = closestRefusal(r, b);
  EXPECT_NE(why.find("the closest, --grad-accum 1"), std::string::npos) << why;
  EXPECT_NE(why.find("of device memory but the budget is 1.00 KiB"),
            std::string::npos)
      << why;
  // Everything over a bound: the least over it is compiled for its exact
  // needs.
  FakeBackEnd none;
  Budgets tiny = roomy();
  tiny.host = 100; // every schedule needs at least 12000
  Result pruned =
      search(Schedule{}, Constraints{}, tiny, small(), target(), none.fn());
  ASSERT_EQ(none.compiled.size(), 1u);
  EXPECT_EQ(none.compiled[0].optimizerOverlap, Overlap::Backward)
      << "12 bytes a parameter: the least over the bound";
  EXPECT_NE(closestRefusal(pruned, tiny).find("of host (pinned included)"),
            std::string::npos);
}

TEST(Planner, SearchThreadsDecideAsInOrder) {
  // A space with every decision: kept layers pruned where fewer did not
  // fit, offloads only where needed and their fractions while they fit,
  // refusals, ties; each schedule's compile takes a different amount of
  // work, so that with threads they finish out of order.
  auto run = [](unsigned threads, std::set<std::string> &compiled) {
    FakeBackEnd be;
    be.device = [](const Schedule &s) {
      int64_t kept = s.keep ? 8 : s.keepLast;
      int64_t bytes = (s.streamWeights ? 40 : 90) * KiB + 15 * KiB * kept;
      if (s.offloadActivations)
        bytes -= int64_t(60 * KiB * s.offloadFraction);
      return std::max<int64_t>(bytes, KiB);
    };
    be.flops = [](const Schedule &s) {
      // Ties: the link and the moments' home change nothing.
      double kept = double(s.keep ? 8 : s.keepLast);
      return 1e9 * (4.0 - 0.1 * kept - (s.layerMajor ? 1.0 : 0.0) -
                    (s.optimizerOverlap == Overlap::Backward ? 0.5 : 0.0) +
                    (s.offloadActivations ? 0.2 * s.offloadFraction : 0.0));
    };
    be.refuses = [](const Schedule &s) {
      return s.optimizerOverlap == Overlap::NextForward && s.keepLast == 2;
    };
    CompileFn slow = [inner = be.fn()](const Schedule &s, Plan &plan,
                                       std::string &error) {
      volatile uint64_t spin = 0;
      uint64_t work = std::hash<std::string>()(s.flags()) % 7 * 20000;
      for (uint64_t i = 0; i < work; ++i)
        spin = spin + i;
      return inner(s, plan, error);
    };
    Budgets b = roomy();
    b.device = 100 * KiB;
    Schedule base;
    base.gradAccum = 4;
    base.computeDtype = mt::sched::ComputeDtype::BF16;
    Constraints c;
    c.layers = 8;
    Result r = search(base, c, b, small(), target(), slow, threads);
    for (const Schedule &s : be.compiled)
      compiled.insert(s.flags());
    EXPECT_EQ(be.compiled.size(), compiled.size()) << "compiled once each";
    return r;
  };
  std::set<std::string> inOrder, onThreads;
  Result one = run(1, inOrder);
  Result four = run(4, onThreads);
  EXPECT_EQ(inOrder, onThreads);
  ASSERT_EQ(one.candidates.size(), four.candidates.size());
  for (size_t i = 0; i < one.candidates.size(); ++i) {
    const Candidate &x = one.candidates[i], &y = four.candidates[i];
    EXPECT_EQ(x.schedule.flags(), y.schedule.flags()) << i;
    EXPECT_EQ(x.fits, y.fits) << x.schedule.flags();
    EXPECT_EQ(x.tokensPerSecond(), y.tokensPerSecond()) << x.schedule.flags();
    EXPECT_EQ(x.why, y.why) << x.schedule.flags();
    EXPECT_EQ(x.plan.ByteSizeLong(), y.plan.ByteSizeLong())
        << "the same two keep their plans: " << x.schedule.flags();
  }
  auto flags = [](const std::vector<Dropped> &v) {
    std::vector<std::string> out;
    for (const Dropped &d : v)
      out.push_back(d.schedule.flags() + ": " + d.why);
    return out;
  };
  EXPECT_EQ(flags(one.pruned), flags(four.pruned));
  EXPECT_EQ(flags(one.failed), flags(four.failed));
  EXPECT_EQ(one.best, four.best);
  EXPECT_EQ(one.runnerUp, four.runnerUp);
  EXPECT_EQ(one.firstRefusal, four.firstRefusal);
  // The space exercised what it is meant to.
  auto pruned = [&](const char *why) {
    return std::count_if(
        one.pruned.begin(), one.pruned.end(),
        [&](const Dropped &d) { return d.why.find(why) != std::string::npos; });
  };
  EXPECT_GT(pruned("keeping fewer layers did not fit"), 0);
  EXPECT_GT(pruned("fits the device without it"), 0);
  EXPECT_FALSE(one.failed.empty());
  EXPECT_GT(std::count_if(one.candidates.begin(), one.candidates.end(),
                          [](const Candidate &x) {
                            return x.schedule.offloadActivations &&
                                   x.schedule.offloadFraction < 1;
                          }),
            0)
      << "fewer offloads tried";
  ASSERT_TRUE(one.best && one.runnerUp);
}

TEST(Planner, FitsTheRefusalNamesTheTierAndTheSmallestBudget) {
  Plan p = fakePlan(5000, 10, 100, 1);
  Budgets b{4096, 1 << 20, 1 << 20, 0};
  std::string why;
  Schedule s;
  EXPECT_FALSE(fits(p, b, s, false, why));
  EXPECT_NE(why.find("the plan needs 4.88 KiB of device memory but the budget "
                     "is 4.00 KiB (--gpu-mem or the target's); the smallest "
                     "budget that fits this plan is 5000 bytes; "
                     "--stream-weights lowers it"),
            std::string::npos)
      << why;
  b.device = 5000;
  EXPECT_TRUE(fits(p, b, s, false, why));
}

} // namespace
