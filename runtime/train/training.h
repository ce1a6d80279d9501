// The training loop of a plan, the same for one process and for each rank
// of a data-parallel run: micro-batches and their data, loss averaging,
// the global gradient norm and clipping, non-finite steps skipped, updates
// left pending across steps, and the learning-rate schedule. mtrun is its
// command line.
#ifndef MT_RUNTIME_TRAIN_TRAINING_H
#define MT_RUNTIME_TRAIN_TRAINING_H

#include "runtime/exec/executor.h"
#include "runtime/io/token_data.h"
#include "runtime/train/checkpoint.h"

#include <functional>
#include <string>
#include <vector>

namespace mt::runtime {

/// How a run trains (mtrun's flags of the same names).
struct TrainingOptions {
  int64_t steps = 1;  ///< the last step of the run
  int64_t warmup = 0; ///< linear warmup steps
  enum class Schedule {
    Constant,
    Cosine,
    Linear
  } schedule = Schedule::Constant;
  /// The schedule as Hugging Face's Trainer evaluates it (mtrun
  /// --lr-schedule-hf): at the optimizer steps done before this one,
  /// warming up from 0, decaying to 0 (see learningRate).
  bool huggingFace = false;
  double lr = 1e-3, minLr = 0; ///< peak, and where the decay ends
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0.01;
  double gradClip = 0;  ///< the global norm's bound (0: off)
  int64_t maxSkips = 0; ///< non-finite steps skipped before the run stops
};

/// The learning rate of step t (from 1): linear warmup, then constant, or a
/// cosine or linear decay to minLr at the last step. With huggingFace, what
/// Hugging Face's get_{constant,linear,cosine}_schedule_with_warmup give
/// at the steps done before t (minLr unused: they decay to 0).
double learningRate(const TrainingOptions &o, int64_t t);

/// Which tokens a plan's loss counts: its cross-entropy's rule (a shifted
/// position predicts the next label of its row; the ignore index is not
/// trained on). Without a cross-entropy every token counts.
struct LossRule {
  bool counts = false, shift = false;
  int64_t ignoreIndex = -100;
};
LossRule lossRule(const mt::plan::Plan &plan);

/// What a step did.
struct StepResult {
  double loss = 0, lr = 0, gradNorm = 0;
  /// Tokens the step trained on (every rank's), which the loss is the
  /// mean over.
  int64_t trainedTokens = 0;
  bool skipped = false;
};

/// Runs optimizer steps: the plan's phases in order, the micro-batch phase
/// once per micro-batch with fresh inputs, and clipping from the global
/// gradient norm before the optimizer phase. With several ranks, each runs
/// its share of the micro-batches (micro-batch k of rank r is the step's
/// k x ranks + r) and every rank takes the same decisions from the same
/// numbers: the step's loss and gradient norm are combined in one order.
class Trainer {
public:
  /// Steps of `plan` on `backend` (allocated, its weights loaded, joined
  /// to its ranks), reading `data` from its position, carrying `state`.
  Trainer(const TrainingOptions &o, const mt::plan::Plan &plan,
          Backend &backend, TokenData &data, RunState &state);

  /// The measured ops of the last step (when tracing).
  std::vector<OpTime> trace;
  bool tracing = false;
  /// Where the streams are, for a run stopped while a step hangs.
  PhaseMonitor *monitor = nullptr;
  /// Whether the run stopped on a non-finite step.
  bool stoppedNonFinite = false;
  /// Told what the run should say (a skipped step), on rank 0 only: the
  /// runtime itself never writes to the terminal.
  std::function<void(const std::string &)> note;

  /// Optimizer step t (from 1): every phase of the plan, the micro-batch
  /// phase once per micro-batch (of this rank), clipping from the global
  /// gradient norm, and a step whose loss or norm is not finite skipped
  /// (and counted) up to maxSkips.
  Status step(int64_t t, StepResult &r);

  /// Applies the update the last step left pending (NEXT_FORWARD plans).
  Status finish();

private:
  /// One run of the micro-batch phase: one micro-batch, or all of the
  /// step's in a layer-major plan (each input names its micro-batch, each
  /// has its loss).
  Status microBatch(int64_t m, int phaseIndex, const mt::plan::Phase &phase,
                    const StepConfig &config);

  /// The sum of the step's micro-batch losses in the data's order (every
  /// rank's), as one process adds them; a non-finite loss is dealt with by
  /// the caller.
  Status stepLoss(double &loss);

  /// This rank's micro-batches of the step, read before any runs, and
  /// every rank's trained tokens in each (allGathered), so that each
  /// micro-batch's gradient can weigh its share of the step's.
  Status readStep();
  /// The tokens of `batch` the loss counts (as its cross-entropy does:
  /// shifted within each row when the graph shifts, the ignore index not).
  int64_t trainedTokens(const TokenBatch &batch) const;

  /// The update the step before left for this one, if any.
  StepConfig pendingConfig() const;

  /// A step whose loss or gradient norm is not finite: its update is
  /// skipped and counted; past --max-skips, or when the plan has already
  /// updated the weights during the backward, the run stops, naming the
  /// first weight whose gradient is not finite.
  Status skip(int64_t t, StepResult &r, const std::string &notFinite);

  /// L2 norm of the accumulated (summed) gradients of every trainable
  /// weight: each weight's sum of squares (on its owner), added in the
  /// plan's order; the first weight whose gradient is not finite (whose
  /// sum is not) in `notFinite`.
  Status gradientNorm(double &norm, std::string &notFinite);

  const TrainingOptions &o;
  const mt::plan::Plan &plan;
  Backend &backend;
  TokenData &data;
  RunState &state;
  Communicator *comm;
  const uint32_t ranks;
  /// This rank's micro-batch losses of the step, in order.
  std::vector<float> losses;
  /// This rank's micro-batches of the step, in order.
  std::vector<TokenBatch> batches;
  /// The trained tokens of every micro-batch of the step, rank-major (as
  /// allGather gives them), and their sum.
  std::vector<int64_t> tokenCounts;
  int64_t stepTokens = 0;
  const LossRule rule;
  /// Whether the updates measure the gradient norm (a plan whose gradients
  /// are gone by the end of the micro-batch phase).
  const bool transientGradients;
};

} // namespace mt::runtime

#endif // MT_RUNTIME_TRAIN_TRAINING_H
