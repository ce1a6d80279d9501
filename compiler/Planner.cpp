//===- Planner.cpp - the fastest schedule that fits the budgets -----------===//
#include "compiler/Planner.h"

#include "dialects/Train/IR/TrainOps.h"
#include "runtime/base/bytes.h"
#include "runtime/plan/plan_io.h"
#include "runtime/schema/moments.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ThreadPool.h"

#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

namespace mt::planner {

ModelSize modelSize(mlir::ModuleOp module) {
  ModelSize m;
  auto step = module.lookupSymbol<mlir::func::FuncOp>("train_step");
  if (!step)
    return m;
  for (auto w : module.getOps<train::ParamOp>()) {
    int64_t n = w.getTensorType().getNumElements();
    if (w.getTrainable())
      m.trainable += n;
    else if (!w.getValue())
      m.frozen += n;
  }
  return m;
}

int64_t mlpChunkFor(mlir::ModuleOp module) {
  int64_t chunk = 0;
  module.walk([&](mt::train::GatedActivationOp a) {
    auto gate = mlir::cast<mlir::RankedTensorType>(a.getGate().getType());
    auto down =
        a->getUsers().empty()
            ? nullptr
            : mlir::dyn_cast<mt::train::LinearOp>(*a->getUsers().begin());
    if (!down || gate.getRank() < 1)
      return;
    int64_t hidden = gate.getShape().back();
    int64_t tokens = gate.getNumElements() / hidden;
    int64_t dim =
        mlir::cast<mlir::RankedTensorType>(down.getType()).getShape().back();
    int64_t fit = tokens * dim / (3 * hidden), c = 1024;
    while (c * 2 <= fit)
      c *= 2;
    if (c < tokens)
      chunk = std::max(chunk, c);
  });
  return chunk;
}

int64_t layerCount(mlir::ModuleOp module) {
  auto step = module.lookupSymbol<mlir::func::FuncOp>("train_step");
  llvm::SmallDenseSet<int64_t> layers;
  if (step)
    step.walk([&](mlir::func::CallOp call) {
      if (auto l = call->getAttrOfType<mlir::IntegerAttr>("train.layer"))
        layers.insert(l.getInt());
    });
  return int64_t(layers.size());
}

const char *overlapName(Overlap o) {
  switch (o) {
  case Overlap::Backward:
    return "backward";
  case Overlap::NextForward:
    return "next-forward";
  default:
    return "after";
  }
}

std::string Schedule::flags() const {
  std::string f;
  if (batch)
    f += "--batch " + std::to_string(batch) + " ";
  f += "--grad-accum " + std::to_string(gradAccum);
  if (streamWeights)
    f += " --stream-weights --lookahead " + std::to_string(lookahead);
  if (offloadActivations)
    f += " --offload-activations --offload-fraction " +
         llvm::formatv("{0}", offloadFraction).str();
  f += std::string(" --optimizer-overlap ") + overlapName(optimizerOverlap);
  f += keep ? " --recompute none" : " --recompute layers";
  if (!keep && keepLast > 0)
    f += " --keep-layers " + std::to_string(keepLast);
  if (weightLink == mt::sched::WeightLink::F32)
    f += " --weight-link fp32";
  if (layerMajor)
    f += " --micro-batch-order layer";
  f += momentsOnDisk ? " --moments disk" : " --moments host";
  if (chunkMlpRows > 0)
    f += " --chunk-mlp-rows " + std::to_string(chunkMlpRows);
  if (ranks > 1)
    f += " --ranks " + std::to_string(ranks);
  return f;
}

namespace {

/// The plan's network stream (mt-shard-state's), or its first stream.
int networkStream(const plan::Plan &plan) {
  for (int i = 0; i < plan.streams_size(); ++i)
    if (plan.streams(i).kind() == plan::NETWORK)
      return i;
  return 0;
}

/// Bytes in GiB, or in MiB or KiB below one of the larger unit: budgets
/// are set in GiB, however many.
std::string gib(double bytes) {
  return runtime::bytesText(bytes, runtime::ByteUnit::KiB,
                            runtime::ByteUnit::GiB);
}

/// The tokens of a step: every rank's micro-batches.
double tokensOf(const plan::Plan &p) {
  return double(p.shapes().batch() * p.shapes().seq() *
                p.shapes().grad_accum()) *
         double(runtime::planRanks(p));
}

} // namespace

size_t Result::overBound() const {
  size_t n = 0;
  for (const Dropped &d : pruned)
    n += d.overflow > 0;
  return n;
}

double Candidate::tokensPerSecond() const {
  return tokens / prediction.stepSeconds;
}

double momentBytesPerElement(mt::sched::MomentFormat format) {
  switch (format) {
  case mt::sched::MomentFormat::BF16:
    return 4.0;
  case mt::sched::MomentFormat::Q8:
    return 2.0 + 8.0 / plan::kMomentBlock;
  case mt::sched::MomentFormat::Q4:
    return 1.0 + 8.0 / plan::kMomentBlock;
  default:
    return 8.0;
  }
}

TierBytes tierBytes(const plan::Plan &plan) {
  TierBytes t;
  // The ranks' own arenas are host memory (mt-shard-state): the largest.
  std::vector<int64_t> owned(runtime::planRanks(plan), 0);
  for (const auto &a : plan.arenas())
    if (a.has_rank() && a.rank() < owned.size())
      owned[a.rank()] += int64_t(a.size_bytes());
  t.host = *std::max_element(owned.begin(), owned.end());
  for (const auto &a : plan.arenas()) {
    if (a.has_rank())
      continue;
    int64_t n = int64_t(a.size_bytes());
    switch (a.tier()) {
    case plan::DEVICE:
      t.device += n;
      break;
    case plan::HOST_PINNED:
      t.pinned += n;
      t.host += n;
      break;
    case plan::DISK:
      t.disk += n;
      break;
    default:
      t.host += n;
    }
  }
  return t;
}

int64_t hostLowerBound(const Schedule &s, const ModelSize &m) {
  // Per trainable element: the fp32 master (4), the moments unless on
  // disk, the fp32 accumulator unless the gradient is read where it
  // arrives (LowerToSched's rule: updates during the backward of one run
  // of gradients a step, one micro-batch or layer-major, on one rank),
  // the pinned bf16 copy with the compute link (2); per frozen element its
  // fp32 master.
  // With ranks, the accumulator, the moments and (beside a compute copy)
  // the master are split among them: a rank holds at least the average.
  bool transient = s.optimizerOverlap == Overlap::Backward && s.ranks == 1 &&
                   (s.gradAccum == 1 || s.layerMajor);
  bool computeCopy = s.computeDtype == mt::sched::ComputeDtype::BF16 &&
                     s.weightLink == mt::sched::WeightLink::Compute;
  double shared = computeCopy ? 2.0 : 4.0;
  double split = (s.momentsOnDisk ? 0.0 : m.momentBytes) +
                 (transient ? 0.0 : 4.0) + (computeCopy ? 4.0 : 0.0);
  double perElement = shared + split / double(std::max<int64_t>(1, s.ranks));
  return int64_t(perElement * double(m.trainable)) + 4 * m.frozen;
}

int64_t residentDeviceLowerBound(const ModelSize &m, bool bf16) {
  return (bf16 ? 2 : 4) * m.trainable;
}

bool fits(const plan::Plan &plan, const Budgets &b, const Schedule &s,
          bool diskGiven, std::string &why) {
  TierBytes need = tierBytes(plan);
  double moments = double(runtime::momentBytes(plan));
  struct Check {
    const char *tier, *flag, *byDefault;
    int64_t need, budget;
    std::string hint;
  };
  std::string hostHint =
      s.momentsOnDisk
          ? "the moments are on disk already; host memory holds the fp32 "
            "master weights and, unless each gradient is applied where it "
            "arrives (--optimizer-overlap backward with one micro-batch or "
            "--micro-batch-order layer), their accumulators (4 bytes per "
            "parameter each) and, with bf16 compute and --weight-link "
            "compute, the weights' pinned bf16 copy (2 bytes)"
      : !diskGiven ? "--disk DIR lets the AdamW moments (" + gib(moments) +
                         ") live on disk"
                   : "--moments disk keeps the AdamW moments (" + gib(moments) +
                         ") on disk";
  Check checks[] = {
      {"device", "--gpu-mem", "the target's", need.device, b.device,
       !s.streamWeights        ? "--stream-weights lowers it"
       : s.keep                ? "--recompute layers lowers it"
       : !s.offloadActivations ? "--offload-activations lowers it"
       : s.offloadFraction < 1 ? "a larger --offload-fraction lowers it"
                               : "a smaller --batch or --seq lowers it"},
      {"host (pinned included)", "--host-mem", "the target's", need.host,
       b.host, hostHint},
      {"pinned host", "--pinned-mem", "a quarter of the host budget",
       need.pinned, b.pinned,
       "pinned memory is host memory: raise --pinned-mem"},
      {"disk", diskGiven ? "--disk-mem" : "--disk", "the free space of --disk",
       need.disk, b.disk,
       diskGiven ? "free space on --disk or a raised --disk-mem"
                 : "--disk DIR names where it goes"},
  };
  for (const Check &c : checks) {
    if (c.need <= c.budget)
      continue;
    why = "the plan needs " + gib(double(c.need)) + " of " + c.tier +
          " memory but the budget is " + gib(double(c.budget)) + " (" + c.flag +
          " or " + c.byDefault + "); the smallest budget that fits this plan " +
          "is " + std::to_string(c.need) + " bytes; " + c.hint;
    return false;
  }
  return true;
}

namespace {
/// Each schedule of `space` replaced, in place and in order, by one copy
/// per value of `values(schedule)`, `set` giving it the value: expanding
/// the dimensions one after another orders the space with the first
/// outermost.
template <typename T, typename Values, typename Set>
void expand(std::vector<Schedule> &space, const Values &values,
            const Set &set) {
  std::vector<Schedule> out;
  for (const Schedule &s : space)
    for (T v : values(s)) {
      Schedule x = s;
      set(x, v);
      out.push_back(x);
    }
  space = std::move(out);
}
} // namespace

std::vector<Schedule> searchSpace(const Schedule &base, const Constraints &c) {
  auto choices = [](std::optional<bool> fixed) {
    return fixed ? std::vector<bool>{*fixed} : std::vector<bool>{false, true};
  };
  std::vector<Overlap> overlaps = {Overlap::After, Overlap::Backward,
                                   Overlap::NextForward};
  if (c.optimizerOverlap)
    overlaps = {*c.optimizerOverlap};
  else if (c.clipping)
    overlaps = {Overlap::After, Overlap::NextForward};
  // Data-parallel ranks (mt-shard-state) update within the step, in the
  // micro-batch order, from host memory.
  bool ranked = base.ranks > 1;
  if (ranked && !c.optimizerOverlap)
    llvm::erase_if(overlaps,
                   [](Overlap o) { return o == Overlap::NextForward; });
  // Keeping everything leaves no layers to order, no checkpoints to offload
  // and no count of kept layers: a user who asked for any asked for
  // recompute.
  std::vector<bool> keeps = choices(c.keep);
  if (!c.keep && (c.layerMajor.value_or(false) ||
                  c.offloadActivations.value_or(false) || c.keepLast))
    keeps = {false};
  // Layers kept while recomputing the others: fewer first.
  std::vector<int64_t> partial = {0};
  if (c.keepLast)
    partial = {*c.keepLast};
  else
    for (int64_t q : {1, 2, 3})
      if (int64_t n = c.layers * q / 4; n > partial.back() && n < c.layers)
        partial.push_back(n);
  // The link is a choice only where bf16 compute gives it one.
  using mt::sched::WeightLink;
  std::vector<WeightLink> links = {c.weightLink.value_or(WeightLink::Compute)};
  if (!c.weightLink && base.computeDtype == mt::sched::ComputeDtype::BF16)
    links = {WeightLink::Compute, WeightLink::F32};
  std::vector<bool> homes =
      c.momentsOnDisk          ? std::vector<bool>{*c.momentsOnDisk}
      : c.diskGiven && !ranked ? std::vector<bool>{false, true}
                               : std::vector<bool>{false};
  std::vector<int64_t> splits = {1};
  for (int64_t split : {2, 4, 8})
    if (c.splitBatch && base.batch % split == 0)
      splits.push_back(split);
  Schedule first = base;
  first.offloadFraction = c.offloadFraction.value_or(1.0);
  std::vector<Schedule> space = {first};
  auto all = [](auto values) {
    return [values](const Schedule &) { return values; };
  };
  expand<int64_t>(space, all(splits), [&](Schedule &s, int64_t split) {
    s.batch = base.batch / split;
    s.gradAccum = base.gradAccum * split;
  });
  expand<bool>(space, all(keeps), [](Schedule &s, bool v) { s.keep = v; });
  expand<int64_t>(
      space,
      [&](const Schedule &s) {
        return s.keep ? std::vector<int64_t>{0} : partial;
      },
      [](Schedule &s, int64_t v) { s.keepLast = v; });
  // The layer order needs layers (recompute) and micro-batches.
  expand<bool>(
      space,
      [&](const Schedule &s) {
        return s.keep || s.gradAccum == 1 || (ranked && !c.layerMajor)
                   ? std::vector<bool>{false}
                   : choices(c.layerMajor);
      },
      [](Schedule &s, bool v) { s.layerMajor = v; });
  expand<WeightLink>(space, all(links),
                     [](Schedule &s, WeightLink v) { s.weightLink = v; });
  expand<Overlap>(space, all(overlaps),
                  [](Schedule &s, Overlap v) { s.optimizerOverlap = v; });
  expand<bool>(space, all(homes),
               [](Schedule &s, bool v) { s.momentsOnDisk = v; });
  expand<bool>(space, all(choices(c.streamWeights)),
               [](Schedule &s, bool v) { s.streamWeights = v; });
  expand<int64_t>(
      space,
      [&](const Schedule &s) {
        return s.streamWeights ? c.lookaheads : std::vector<int64_t>{8};
      },
      [](Schedule &s, int64_t v) { s.lookahead = v; });
  expand<bool>(
      space,
      [&](const Schedule &s) {
        return s.keep ? std::vector<bool>{false}
                      : choices(c.offloadActivations);
      },
      [](Schedule &s, bool v) { s.offloadActivations = v; });
  return space;
}

namespace {
bool sameExceptOffload(const Schedule &a, const Schedule &b) {
  return a.batch == b.batch && a.gradAccum == b.gradAccum &&
         a.streamWeights == b.streamWeights && a.lookahead == b.lookahead &&
         a.optimizerOverlap == b.optimizerOverlap && a.keep == b.keep &&
         a.keepLast == b.keepLast && a.weightLink == b.weightLink &&
         a.layerMajor == b.layerMajor && a.momentsOnDisk == b.momentsOnDisk &&
         a.ranks == b.ranks;
  // Not the MLP chunk: a schedule's chunked variant is one of its
  // evaluations (search's evaluateAll).
}

/// The same schedule with fewer kept layers (or with recompute where `b`
/// keeps everything).
bool keepsFewer(const Schedule &a, const Schedule &b) {
  Schedule x = a;
  x.keep = b.keep;
  x.keepLast = b.keepLast;
  bool fewer = b.keep ? !a.keep : (!a.keep && a.keepLast < b.keepLast);
  return fewer && sameExceptOffload(x, b) &&
         a.offloadActivations == b.offloadActivations &&
         (!a.offloadActivations || a.offloadFraction == b.offloadFraction);
}

/// Whether the candidates of `a` (its offload fractions included) may
/// decide whether `b` is compiled: they differ at most in what is kept and
/// offloaded.
bool mayPrune(const Schedule &a, const Schedule &b) {
  Schedule x = a;
  x.keep = b.keep;
  x.keepLast = b.keepLast;
  return sameExceptOffload(x, b);
}

/// One compile: a candidate, or the back end's refusal.
struct Evaluation {
  Candidate candidate; ///< its schedule always; the rest when compiled
  std::optional<std::string> error;
};

/// What became of one schedule of the space.
struct Slot {
  enum State { Waiting, Running, Done } state = Waiting;
  std::optional<Dropped> pruned;
  /// Compiled: the schedule, then its fewer offloads while they fit.
  std::vector<Evaluation> evaluations;
  /// Where each evaluation's candidate went in the result, once committed.
  std::vector<size_t> committedAt;
};

/// A compiled candidate: its slot and its place among the slot's
/// evaluations.
using Ref = std::pair<size_t, size_t>;
} // namespace

Result search(const Schedule &base, const Constraints &c, const Budgets &b,
              const ModelSize &m, const plan::Target &target,
              const CompileFn &compile, unsigned threads) {
  Result r;
  std::vector<Schedule> space = searchSpace(base, c);
  std::vector<Slot> slots(space.size());
  // The decisions about one schedule (its bounds, whether the same
  // schedule keeping fewer layers fit, whether it fits without offload)
  // read only the candidates of earlier schedules that differ from it in
  // what is kept and offloaded. Each schedule is decided once those are
  // done, so that compiling several at once decides exactly as compiling
  // them in order.
  std::vector<std::vector<size_t>> deps(space.size());
  for (size_t i = 0; i < space.size(); ++i)
    if (space[i].keep || space[i].keepLast > 0 ||
        (space[i].offloadActivations && !c.offloadActivations))
      for (size_t j = 0; j < i; ++j)
        if (mayPrune(space[j], space[i]))
          deps[i].push_back(j);
  auto settled = [&](size_t i) {
    return llvm::all_of(deps[i],
                        [&](size_t j) { return slots[j].state == Slot::Done; });
  };
  // Whether a compiled candidate of an earlier (done) schedule holds.
  auto anyEarlier = [&](size_t i, auto &&holds) {
    for (size_t j : deps[i])
      for (const Evaluation &e : slots[j].evaluations)
        if (!e.error && holds(e.candidate))
          return true;
    return false;
  };
  auto prune = [&](size_t i) -> std::optional<Dropped> {
    const Schedule &s = space[i];
    if (int64_t bound = hostLowerBound(s, m); bound > b.host)
      return Dropped{s,
                     "host memory: at least " + gib(double(bound)) + " of " +
                         gib(double(b.host)),
                     double(bound) / double(std::max<int64_t>(1, b.host))};
    int64_t resident = residentDeviceLowerBound(
        m, s.computeDtype == mt::sched::ComputeDtype::BF16);
    if (!s.streamWeights && resident > b.device)
      return Dropped{s,
                     "device memory: its resident weights alone are " +
                         gib(double(resident)) + " of " + gib(double(b.device)),
                     double(resident) / double(std::max<int64_t>(1, b.device))};
    // Keeping more layers needs more device memory: not when the same
    // schedule keeping fewer did not fit.
    // (The same with its MLPs chunked, where that was tried.)
    if ((s.keep || s.keepLast > 0) && anyEarlier(i, [&](const Candidate &x) {
          return keepsFewer(x.schedule, s) &&
                 x.schedule.chunkMlpRows ==
                     (c.mlpChunk > 0 ? c.mlpChunk : s.chunkMlpRows) &&
                 x.tiers.device > b.device;
        }))
      return Dropped{s,
                     "device memory: the same schedule keeping fewer layers "
                     "did not fit",
                     1.0};
    // An offloaded variant is worth compiling only when the same schedule
    // without offload did not fit the device.
    if (s.offloadActivations && !c.offloadActivations &&
        anyEarlier(i, [&](const Candidate &x) {
          return !x.schedule.offloadActivations &&
                 sameExceptOffload(x.schedule, s) && x.tiers.device <= b.device;
        }))
      return Dropped{s, "offload: the schedule fits the device without it",
                     0.0};
    return std::nullopt;
  };
  // Compiles and times one schedule: called on the workers.
  auto evaluate = [&](const Schedule &s) {
    Evaluation e;
    Candidate &cand = e.candidate;
    cand.schedule = s;
    std::string error;
    if (!compile(s, cand.plan, error)) {
      e.error = error;
      return e;
    }
    cand.prediction = runtime::simulate(cand.plan, target);
    cand.plan.set_predicted_step_seconds(cand.prediction.stepSeconds);
    cand.tiers = tierBytes(cand.plan);
    cand.rows = int64_t(cand.plan.shapes().batch());
    cand.tokens = tokensOf(cand.plan);
    cand.fits = fits(cand.plan, b, s, c.diskGiven, cand.why);
    return e;
  };
  // A schedule, then fewer offloads while they fit: each moves fewer bytes.
  // Over the device budget, the same with its MLPs chunked.
  auto evaluateAll = [&](const Schedule &s) {
    std::vector<Evaluation> all;
    all.push_back(evaluate(s));
    Schedule base = s;
    if (!all.back().error && all.back().candidate.tiers.device > b.device &&
        c.mlpChunk > 0 && s.chunkMlpRows == 0) {
      base.chunkMlpRows = c.mlpChunk;
      all.push_back(evaluate(base));
    }
    if (all.back().error || !all.back().candidate.fits ||
        !base.offloadActivations || c.offloadFraction)
      return all;
    for (double f : {0.75, 0.5, 0.25}) {
      Schedule fewer = base;
      fewer.offloadFraction = f;
      all.push_back(evaluate(fewer));
      if (all.back().error || !all.back().candidate.fits)
        break;
    }
    return all;
  };

  // The best two so far. The order is total, so that the candidates may
  // be ranked as they finish: the most tokens per second; among equals
  // the first in the search, except that a smaller offload fraction of the
  // same schedule (tried after it) wins: it moves fewer bytes for the same
  // time.
  auto candidateAt = [&](Ref x) -> Candidate & {
    Slot &slot = slots[x.first];
    return slot.committedAt.empty() ? slot.evaluations[x.second].candidate
                                    : r.candidates[slot.committedAt[x.second]];
  };
  auto before = [&](Ref x, Ref y) {
    const Candidate &a = candidateAt(x), &bc = candidateAt(y);
    if (a.tokensPerSecond() != bc.tokensPerSecond())
      return a.tokensPerSecond() > bc.tokensPerSecond();
    if (a.schedule.offloadActivations && bc.schedule.offloadActivations &&
        sameExceptOffload(a.schedule, bc.schedule) &&
        a.schedule.offloadFraction != bc.schedule.offloadFraction)
      return a.schedule.offloadFraction < bc.schedule.offloadFraction;
    return x < y;
  };
  // Only the best two keep their plans: the others' (each with the
  // model's constants) would grow the search's memory with every
  // candidate.
  std::optional<Ref> best, runnerUp;
  auto rank = [&](size_t i) {
    for (size_t k = 0; k < slots[i].evaluations.size(); ++k) {
      Evaluation &e = slots[i].evaluations[k];
      if (e.error)
        continue;
      Ref x{i, k};
      std::optional<Ref> dropped;
      if (!e.candidate.fits) {
        dropped = x;
      } else if (!best || before(x, *best)) {
        dropped = runnerUp;
        runnerUp = best;
        best = x;
      } else if (!runnerUp || before(x, *runnerUp)) {
        dropped = runnerUp;
        runnerUp = x;
      } else {
        dropped = x;
      }
      if (dropped)
        plan::Plan().Swap(&candidateAt(*dropped).plan);
    }
  };
  // The result lists what became of each schedule in search order.
  auto commit = [&](size_t i) {
    Slot &slot = slots[i];
    if (slot.pruned) {
      r.pruned.push_back(std::move(*slot.pruned));
      return;
    }
    std::vector<size_t> at;
    for (Evaluation &e : slot.evaluations) {
      if (e.error) {
        if (r.firstRefusal.empty())
          r.firstRefusal = *e.error;
        r.failed.push_back({e.candidate.schedule, *e.error});
        at.push_back(0); // a refusal is never ranked
        continue;
      }
      if (!e.candidate.fits && r.firstRefusal.empty())
        r.firstRefusal = e.candidate.why;
      at.push_back(r.candidates.size());
      r.candidates.push_back(std::move(e.candidate));
    }
    slot.committedAt = std::move(at);
  };

  std::mutex mutex;
  std::condition_variable finishedOne;
  std::vector<std::pair<size_t, std::vector<Evaluation>>> finished;
  // Declared last: destroyed first, it waits for its workers to let go of
  // the mutex.
  std::optional<llvm::StdThreadPool> pool;
  if (threads > 1)
    pool.emplace(llvm::hardware_concurrency(threads));
  size_t running = 0, committed = 0;
  while (committed < space.size()) {
    // Decide every schedule that can be, in order; compile on the workers
    // while one is free.
    for (size_t i = committed; i < space.size(); ++i) {
      Slot &slot = slots[i];
      if (slot.state != Slot::Waiting || !settled(i))
        continue;
      if ((slot.pruned = prune(i))) {
        slot.state = Slot::Done;
      } else if (!pool) {
        slot.evaluations = evaluateAll(space[i]);
        slot.state = Slot::Done;
        rank(i);
      } else if (running < threads) {
        slot.state = Slot::Running;
        ++running;
        pool->async([&, i] {
          std::vector<Evaluation> all = evaluateAll(space[i]);
          std::lock_guard<std::mutex> lock(mutex);
          finished.emplace_back(i, std::move(all));
          finishedOne.notify_one();
        });
      }
    }
    while (committed < space.size() && slots[committed].state == Slot::Done)
      commit(committed++);
    if (committed == space.size())
      break;
    // The first schedule not done is running, or waits for one that is.
    std::unique_lock<std::mutex> lock(mutex);
    finishedOne.wait(lock, [&] { return !finished.empty(); });
    for (auto &[i, all] : finished) {
      slots[i].evaluations = std::move(all);
      slots[i].state = Slot::Done;
      --running;
      rank(i);
    }
    finished.clear();
  }
  // Nothing compiled: the schedule least over its bound, for exact needs.
  if (r.candidates.empty() && !r.pruned.empty()) {
    const Dropped *least = &r.pruned.front();
    for (const Dropped &d : r.pruned)
      if (d.overflow > 0 &&
          (least->overflow == 0 || d.overflow < least->overflow))
        least = &d;
    slots.emplace_back().evaluations.push_back(evaluate(least->schedule));
    rank(slots.size() - 1);
    commit(slots.size() - 1);
  }
  if (best)
    r.best = slots[best->first].committedAt[best->second];
  if (runnerUp)
    r.runnerUp = slots[runnerUp->first].committedAt[runnerUp->second];
  if (r.firstRefusal.empty() && !r.pruned.empty())
    r.firstRefusal = r.pruned.front().why;
  return r;
}

std::string closestRefusal(const Result &r, const Budgets &b) {
  // The worst ratio of need to budget over the tiers, per candidate.
  auto overflow = [&](const Candidate &x) {
    const TierBytes &t = x.tiers;
    double worst = 0;
    for (auto [need, budget] : {std::pair{t.device, b.device},
                                {t.host, b.host},
                                {t.pinned, b.pinned},
                                {t.disk, b.disk}})
      if (need > 0)
        worst = std::max(worst,
                         double(need) / double(std::max<int64_t>(1, budget)));
    return worst;
  };
  const Candidate *closest = nullptr;
  for (const Candidate &x : r.candidates)
    if (!x.fits && (!closest || overflow(x) < overflow(*closest)))
      closest = &x;
  if (closest)
    return "the closest, " + closest->schedule.flags() + ": " + closest->why;
  if (!r.failed.empty())
    return "the back end refused " + r.failed.front().schedule.flags() + ": " +
           r.failed.front().why;
  return r.firstRefusal.empty() ? "the search space is empty" : r.firstRefusal;
}

/// A mixture of experts: every expert's weights are in the state and
/// cross like the others, while the math is the routed rows' only (each
/// row through the one expert it chose).
void explainExperts(const plan::Plan &plan, const runtime::Prediction &r,
                    int64_t params, llvm::raw_ostream &os) {
  double all = 0, routed = 0;
  std::set<std::string> weights;
  for (const auto &phase : plan.phases())
    for (const auto &op : phase.ops()) {
      all += op.flops();
      if (op.kernel() != plan::EXPERT_LINEAR &&
          op.kernel() != plan::EXPERT_LINEAR_GRAD)
        continue;
      routed += op.flops();
      // The weight's device buffer is named after its parameter.
      const std::string &name = plan.buffers(int(op.operands(2))).name();
      weights.insert(name.substr(0, name.find(".device")));
    }
  if (weights.empty())
    return;
  int64_t expertElements = 0;
  for (const auto &p : plan.parameters())
    if (weights.count(p.name()))
      expertElements += runtime::bufferElements(plan, p.master());
  double share = all > 0 ? routed / all : 0;
  os << llvm::formatv(
      "experts: {0} expert weights, {1:F1}% of the trainable parameters "
      "({2} of fp32 masters), all in the state and crossing as the others; "
      "their routed math {3:F1} TFLOP a step, {4:F1}% of the model's (each "
      "row through the one expert it chose)\n",
      weights.size(),
      100.0 * double(expertElements) / double(std::max<int64_t>(1, params)),
      gib(4.0 * double(expertElements)), share * r.flops / 1e12, 100.0 * share);
}

/// The compute streams' predicted time by kernel, with the rate each was
/// costed at (its longest op's): what the prediction rests on.
void explainCompute(const plan::Plan &plan, const runtime::Prediction &r,
                    llvm::raw_ostream &os) {
  struct Row {
    int64_t runs = 0;
    double seconds = 0, longest = -1;
    std::string rate;
  };
  std::map<plan::Kernel, Row> rows;
  for (const runtime::OpTime &o : r.timeline) {
    const plan::Op &op = plan.phases(o.phase).ops(o.op);
    if (plan.streams(int(op.stream())).kind() != plan::COMPUTE)
      continue;
    runtime::OpCost cost = runtime::opCost(plan, op, plan.target());
    Row &row = rows[op.kernel()];
    ++row.runs;
    row.seconds += o.end - o.start;
    if (cost.seconds > row.longest) {
      row.longest = cost.seconds;
      row.rate = cost.rate;
    }
  }
  std::vector<std::pair<plan::Kernel, Row>> sorted(rows.begin(), rows.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](auto &a, auto &b) {
    return a.second.seconds > b.second.seconds;
  });
  os << "\ncompute by kernel            runs   busy (s)   costed at\n";
  for (const auto &[kernel, row] : sorted)
    os << llvm::formatv("  {0,-24} {1,6} {2,10:F4}   {3}\n",
                        plan::Kernel_Name(kernel), row.runs, row.seconds,
                        row.rate);
}

void explain(const Candidate &chosen, const Budgets &budgets,
             const Result *search, llvm::raw_ostream &os) {
  const plan::Plan &plan = chosen.plan;
  const runtime::Prediction &r = chosen.prediction;
  const auto &t = plan.target();
  std::string lossy = runtime::lossyMoments(plan);
  if (!lossy.empty())
    os << "LOSSY: AdamW moments are stored in " << lossy
       << " (mtc --optimizer-states)\n";
  os << llvm::formatv("predicted on {0}: {1:F3} s/step, {2:F0} tokens/s, "
                      "{3:F1} TFLOP/s of model math\n",
                      t.name(), r.stepSeconds, tokensOf(plan) / r.stepSeconds,
                      r.flops / r.stepSeconds / 1e12);
  os << "rates: " << runtime::rateSource(t) << "\n";
  explainCompute(plan, r, os);
  os << "\nstream            busy (s)   share of step\n";
  for (int i = 0; i < plan.streams_size(); ++i)
    os << llvm::formatv("  {0,-14} {1,9:F3}   {2,5:F1}%\n",
                        plan.streams(i).name(), r.streamBusySeconds[i],
                        100 * r.streamBusySeconds[i] / r.stepSeconds);
  os << "\nlink              bytes/step     at bandwidth\n";
  os << llvm::formatv("  host->device   {0,12}   {1:F3} s at {2:F1} GB/s\n",
                      gib(r.h2dBytes), r.h2dBytes / t.h2d_bytes_per_s(),
                      t.h2d_bytes_per_s() / 1e9);
  os << llvm::formatv("  device->host   {0,12}   {1:F3} s at {2:F1} GB/s\n",
                      gib(r.d2hBytes), r.d2hBytes / t.d2h_bytes_per_s(),
                      t.d2h_bytes_per_s() / 1e9);
  if (uint32_t ranks = runtime::planRanks(plan); ranks > 1)
    os << llvm::formatv(
        "  network        {0,12}   {1:F3} s busy at {2:F1} "
        "GB/s, {3:F1} us latency ({4} ranks: each "
        "micro-batch's gradients reduced to their owners in "
        "rank order, updated weights broadcast)\n",
        gib(r.networkBytes), r.streamBusySeconds[networkStream(plan)],
        t.network_bytes_per_s() / 1e9, t.network_latency_s() * 1e6, ranks);
  if (r.diskReadBytes > 0 || r.diskWriteBytes > 0) {
    os << llvm::formatv("  disk->host     {0,12}   {1:F3} s at {2:F1} GB/s\n",
                        gib(r.diskReadBytes),
                        r.diskReadBytes / t.disk_read_bytes_per_s(),
                        t.disk_read_bytes_per_s() / 1e9);
    os << llvm::formatv("  host->disk     {0,12}   {1:F3} s at {2:F1} GB/s\n",
                        gib(r.diskWriteBytes),
                        r.diskWriteBytes / t.disk_write_bytes_per_s(),
                        t.disk_write_bytes_per_s() / 1e9);
  }
  os << "\ntier              peak           budget\n";
  for (const auto &a : plan.arenas()) {
    std::string budget = a.tier() == plan::DEVICE ? gib(double(budgets.device))
                         : a.tier() == plan::HOST_PINNED
                             ? gib(double(budgets.pinned)) + " pinned"
                         : a.tier() == plan::DISK
                             ? gib(double(budgets.disk)) + " disk"
                             : "";
    os << llvm::formatv("  {0,-14} {1,12}   {2}\n", a.name(),
                        gib(double(a.size_bytes())), budget);
  }
  TierBytes all = tierBytes(plan);
  int64_t params = 0;
  for (const auto &p : plan.parameters())
    if (p.trainable())
      params += runtime::bufferElements(plan, p.master());
  uint32_t ranks = runtime::planRanks(plan);
  if (ranks > 1) {
    // What each rank owns of the state, beside what every rank has.
    std::vector<int64_t> owned(ranks, 0);
    for (const auto &p : plan.parameters())
      if (int64_t o = runtime::ownerOf(plan, p); o >= 0)
        owned[size_t(o)] += runtime::bufferElements(plan, p.master());
    for (const auto &a : plan.arenas())
      if (a.has_rank())
        os << llvm::formatv("    rank {0}: owns {1:F1}% of the trainable "
                            "weights' state\n",
                            a.rank(),
                            100.0 * double(owned[a.rank()]) /
                                double(std::max<int64_t>(1, params)));
  }
  os << llvm::formatv("  {0,-14} {1,12}   {2}",
                      ranks > 1 ? "host, per rank" : "host, in all",
                      gib(double(all.host)), gib(double(budgets.host)));
  if (params > 0)
    os << llvm::formatv("   ({0:F2} bytes per trainable parameter, {1:F2} "
                        "outside pinned memory)",
                        double(all.host) / double(params),
                        double(all.host - all.pinned) / double(params));
  os << "\n\n" << runtime::describeCrossings(plan) << "\n";
  explainExperts(plan, r, params, os);
  int b = r.bottleneckStream;
  os << "\nbottleneck: the " << plan.streams(b).name() << " stream ("
     << llvm::formatv("{0:F0}", 100 * r.streamBusySeconds[b] / r.stepSeconds)
     << "% of the step busy)";
  switch (plan.streams(b).kind()) {
  case plan::COMPUTE:
    os << (plan.compute_dtype() == plan::F32
               ? ": compute-bound; bf16 compute (--compute-dtype bf16) raises "
                 "the matmul rate\n"
               : ": compute-bound, as it should be: the transfers and the "
                 "optimizer hide behind the math\n");
    break;
  case plan::HOST_TO_DEVICE:
  case plan::DEVICE_TO_HOST:
    os << ": transfer-bound; a larger batch gives each copied byte more "
          "math to hide behind\n";
    break;
  case plan::NETWORK:
    os << ": network-bound: every micro-batch's gradients go to their "
          "owners (the exact order); more tokens per micro-batch (--batch, "
          "--seq) give each byte more math to hide behind\n";
    break;
  case plan::DISK_IO:
    os << ": disk-bound: every step reads and writes all the moments; "
          "host memory for them (--moments host), bf16 moments "
          "(--optimizer-states bf16, lossy) or more micro-batches per step "
          "(--grad-accum) help\n";
    break;
  default:
    os << ": optimizer-bound; more host threads or fewer optimizer steps "
          "(--grad-accum) help\n";
  }
  if (!search)
    return;
  size_t fitting = 0;
  for (const Candidate &x : search->candidates)
    fitting += x.fits;
  os << "\nchosen: " << chosen.schedule.flags() << "\n";
  os << llvm::formatv("  the fastest of {0} schedules that fit ({1} "
                      "compiled; not compiled: {2} over a memory bound, {3} "
                      "offloaded where nothing needed it; {4} refused by "
                      "the back end)\n",
                      fitting, search->candidates.size(), search->overBound(),
                      search->pruned.size() - search->overBound(),
                      search->failed.size());
  // Why not faster: the fastest compiled schedule that did not fit.
  const Candidate *faster = nullptr;
  for (const Candidate &x : search->candidates)
    if (!x.fits && x.tokensPerSecond() > chosen.tokensPerSecond() &&
        (!faster || x.tokensPerSecond() > faster->tokensPerSecond()))
      faster = &x;
  if (faster)
    os << llvm::formatv("  faster but over budget: {0} ({1:F3} s/step): ",
                        faster->schedule.flags(),
                        faster->prediction.stepSeconds)
       << faster->why << "\n";
  if (search->runnerUp) {
    const Candidate &next = search->candidates[*search->runnerUp];
    os << llvm::formatv(
        "runner-up: {0} ({1:F3} s/step, {2:F1}% slower)\n",
        next.schedule.flags(), next.prediction.stepSeconds,
        100 * (chosen.tokensPerSecond() / next.tokensPerSecond() - 1));
  } else {
    os << "runner-up: none (no other schedule fits)\n";
  }
}

void printCandidateHeader(llvm::raw_ostream &os) {
  os << "micro-batch x accum  order  streamed  offloaded  optimizer     "
        "recompute  link     moments  mlp chunk      device      pinned   "
        "host (all)    s/step   tokens/s  fits\n";
}

void printCandidate(const Candidate &c, llvm::raw_ostream &os) {
  const Schedule &s = c.schedule;
  const TierBytes &t = c.tiers;
  std::string offload = s.offloadActivations
                            ? llvm::formatv("{0}", s.offloadFraction).str()
                            : "no";
  os << llvm::formatv(
      "{0,5} x {1,-11}  {2,-5}  {3,-8}  {4,-9}  {5,-12}  {6,-9}  {7,-7}  "
      "{8,-7}  {9,-9}  {10,10}  {11,10}  {12,10}  {13,8:F3}  {14,9:F0}  "
      "{15}\n",
      c.rows, s.gradAccum, s.layerMajor ? "layer" : "mb",
      s.streamWeights ? "yes" : "no", offload, overlapName(s.optimizerOverlap),
      s.keep           ? "none"
      : s.keepLast > 0 ? "keep " + std::to_string(s.keepLast)
                       : "layers",
      s.weightLink == mt::sched::WeightLink::F32 ? "fp32" : "compute",
      s.momentsOnDisk ? "disk" : "host",
      s.chunkMlpRows > 0 ? std::to_string(s.chunkMlpRows) : "whole",
      gib(double(t.device)), gib(double(t.pinned)), gib(double(t.host)),
      c.prediction.stepSeconds, c.tokensPerSecond(), c.fits ? "yes" : "no");
}

} // namespace mt::planner
