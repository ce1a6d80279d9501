//===- Planner.h - the fastest schedule that fits the budgets -------------===//
//
// The planner searches the schedules of one model (how the step is ordered
// and where its bytes live: never its precision or state format, which are
// the user's) for the fastest that fits the memory budgets of a target.
// Every choice the user made is a constraint; every other is searched.
// Schedules that cannot fit are pruned by lower bounds on their memory
// before anything is compiled; the others are compiled by the caller (mtc
// runs the back end on a copy of the training step), proved to fit by their
// plan's exact peaks, and timed by the cost model.
//
//===----------------------------------------------------------------------===//
#ifndef MT_COMPILER_PLANNER_H
#define MT_COMPILER_PLANNER_H

#include "dialects/Sched/IR/SchedOps.h"
#include "dialects/Sched/Transforms/Passes.h"
#include "runtime/cost/cost_model.h"
#include "runtime/schema/plan.pb.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mt::planner {

/// When AdamW runs (mtc --optimizer-overlap), and its flag's spelling.
using Overlap = mt::sched::OptimizerOverlap;
const char *overlapName(Overlap o);

/// One schedule: what the front end outlines (the micro-batch, what is
/// kept) and the back end's choices (mt::sched::Schedule, whose names are
/// the flags' and whose defaults are everyone's).
struct Schedule : mt::sched::Schedule {
  int64_t batch = 0; ///< sequences per micro-batch (0: the model's own)
  bool keep = false; ///< nothing recomputed (mtc --recompute none)
  /// Without `keep`: the last this many layers keep their activations, the
  /// others are recomputed from their input (mtc --keep-layers).
  int64_t keepLast = 0;

  /// The mtc flags that build it (those the planner varies, and the
  /// user's ranks).
  std::string flags() const;
};

/// What the user fixed; every field left unset is searched.
struct Constraints {
  /// The batch may be split into micro-batches (the model's batch is
  /// dynamic, --batch was given and --grad-accum was not): 1, 2, 4 or 8
  /// ways, the tokens per step unchanged.
  bool splitBatch = false;
  std::optional<bool> streamWeights, offloadActivations, keep, layerMajor,
      momentsOnDisk;
  std::optional<mt::sched::WeightLink> weightLink;
  /// The kept layers, when given (--keep-layers); else, unless `keep` says
  /// otherwise, 0, a quarter, half and three quarters of `layers`, more
  /// only while the same schedule with fewer fit the device.
  std::optional<int64_t> keepLast;
  int64_t layers = 0; ///< the model's outlined layers
  std::optional<Overlap> optimizerOverlap;
  /// Unset: 1, then 0.75, 0.5 and 0.25 while they fit (fewer offloads
  /// free less memory but move fewer bytes).
  std::optional<double> offloadFraction;
  std::vector<int64_t> lookaheads = {8};
  /// mtrun --grad-clip must work: the optimizer never runs during the
  /// backward (it would update before the global norm is known).
  bool clipping = false;
  /// The chunk (tokens) of the gated MLPs a schedule over the device
  /// budget is compiled again with (mt-chunk-mlp): its [tokens, hidden]
  /// intermediates shrink to a chunk's at no cost in FLOPs where layers are
  /// recomputed. 0: none (no gated MLP, or the user fixed the chunk).
  int64_t mlpChunk = 0;
  bool diskGiven = false; ///< a disk tier exists (mtc --disk)
};

/// Memory budgets per tier, in bytes (host includes pinned).
struct Budgets {
  int64_t device = 0, pinned = 0, host = 0, disk = 0;
};

/// What the model needs whatever its schedule: the bounds' inputs.
struct ModelSize {
  int64_t trainable = 0; ///< elements of trainable weights
  int64_t frozen = 0;    ///< elements of frozen weights with data
  /// Bytes per element of both AdamW moments with their scales (8 for
  /// fp32, 4 for bf16, 2 + 8 / 256 for 8 bits, 1 + 8 / 256 for 4 bits).
  double momentBytes = 8;
};

/// Bytes per element of both AdamW moments with their scales in `format`
/// (one fp32 scale each per 256 elements for the blockwise formats).
double momentBytesPerElement(mt::sched::MomentFormat format);

/// Bytes of a plan's arenas by tier, on its rank that needs the most (the
/// arenas of every rank, plus the largest rank's own); host counts pinned
/// memory too.
struct TierBytes {
  int64_t device = 0, pinned = 0, host = 0, disk = 0;
};
TierBytes tierBytes(const plan::Plan &plan);

/// The least host memory the schedule can need (masters, the moments it
/// keeps in host memory, accumulators, bf16 weight copies), and the least
/// device memory a schedule with resident weights can need (every
/// trainable weight in the compute dtype): a schedule over either budget
/// is not compiled.
int64_t hostLowerBound(const Schedule &s, const ModelSize &m);
int64_t residentDeviceLowerBound(const ModelSize &m, bool bf16);

/// Whether the plan's exact peaks fit every budget; if not, `why` names
/// the tier, the smallest budget that fits and what would lower the need.
bool fits(const plan::Plan &plan, const Budgets &b, const Schedule &s,
          bool diskGiven, std::string &why);

/// One compiled schedule.
struct Candidate {
  Schedule schedule;
  plan::Plan plan; ///< empty unless it is the best or the runner-up
  runtime::Prediction prediction;
  TierBytes tiers;   ///< its plan's memory per tier
  int64_t rows = 0;  ///< its plan's micro-batch
  double tokens = 0; ///< its plan's tokens per step
  bool fits = false;
  std::string why; ///< why it does not fit
  double tokensPerSecond() const;
};

/// A schedule that was not compiled or did not compile, and why.
struct Dropped {
  Schedule schedule;
  std::string why;
  double overflow = 0; ///< pruned: its bound over the budget (> 1)
};

struct Result {
  std::vector<Candidate> candidates; ///< compiled, in search order
  /// Not compiled: over a memory bound (overflow > 1), or an offloaded
  /// variant of a schedule that fits the device without it (overflow 0).
  std::vector<Dropped> pruned;
  std::vector<Dropped> failed;          ///< the back end refused them
  std::optional<size_t> best, runnerUp; ///< indices into candidates
  /// The first refusal: of the first compiled candidate that did not fit,
  /// else of the first pruned one.
  std::string firstRefusal;
  /// How many pruned schedules were over a memory bound.
  size_t overBound() const;
};

/// Compiles one schedule into `plan` (its target filled in), or returns
/// false with the first error in `error`. With several threads, it is
/// called on several at once.
using CompileFn =
    std::function<bool(const Schedule &, plan::Plan &plan, std::string &error)>;

/// The schedules of `constraints` around `base` (the user's batch and
/// micro-batches, disk and lookahead), in search order.
std::vector<Schedule> searchSpace(const Schedule &base,
                                  const Constraints &constraints);

/// Searches the space: bounds first, then each survivor compiled and
/// timed on `target`. Per schedule, checkpoints are offloaded only when the
/// same schedule without offload does not fit the device (offloading adds
/// copies and saves nothing else), and lower offload fractions are tried
/// only while they fit; a schedule over the device budget is compiled
/// again with its MLPs chunked (constraints.mlpChunk). The best is the most
/// tokens per second; the runner-up the next distinct schedule. When every
/// schedule is over a bound, the one least over it is compiled, so that the
/// refusal can name exact needs. `threads` compile at once; the result is the
/// same for any number of them.
Result search(const Schedule &base, const Constraints &constraints,
              const Budgets &budgets, const ModelSize &model,
              const plan::Target &target, const CompileFn &compile,
              unsigned threads = 1);

/// Why nothing fits, from the compiled candidate least over its budgets:
/// "the closest: FLAGS: the plan needs ...".
std::string closestRefusal(const Result &result, const Budgets &budgets);

/// The trainable and frozen weights of a training step's module (its
/// train.param symbols); momentBytes is left for the caller.
ModelSize modelSize(mlir::ModuleOp step);
/// The chunk (tokens) of the gated MLPs of a training step that the
/// planner tries when a schedule is over the device budget: the largest
/// power of two, at least 1024, whose intermediates (a chunk's gate, up and
/// activation, [chunk, hidden] each) are no larger than one [tokens, dim]
/// activation; 0 without a gated MLP or when that is all the tokens.
int64_t mlpChunkFor(mlir::ModuleOp step);
/// The outlined layers of a training step (the train.layer calls of its
/// forward).
int64_t layerCount(mlir::ModuleOp step);

/// The --explain report of a chosen plan: time per stream, bytes per link,
/// each tier's peak against its budget, the bottleneck; with a search, the
/// choice, why, and the runner-up.
void explain(const Candidate &chosen, const Budgets &budgets,
             const Result *search, llvm::raw_ostream &os);

/// One row of the --suggest table, and its header.
void printCandidateHeader(llvm::raw_ostream &os);
void printCandidate(const Candidate &c, llvm::raw_ostream &os);

} // namespace mt::planner

#endif // MT_COMPILER_PLANNER_H
