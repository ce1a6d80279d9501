// The training loop (see training.h).
#include "runtime/train/training.h"

#include "runtime/exec/host_ops.h"
#include "runtime/plan/plan_io.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mt::runtime {

double learningRate(const TrainingOptions &o, int64_t t) {
  using S = TrainingOptions::Schedule;
  if (o.huggingFace) {
    // Hugging Face's schedulers (torch's LambdaLR): evaluated at the steps
    // done before this one, warming up from 0, decaying to 0 at the last.
    double k = double(t - 1), w = double(o.warmup), n = double(o.steps);
    if (k < w)
      return o.lr * k / w;
    double progress = n > w ? (k - w) / (n - w) : 1.0;
    switch (o.schedule) {
    case S::Linear:
      return o.lr * std::max(0.0, 1.0 - progress);
    case S::Cosine:
      return o.lr * std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));
    default: // constant_with_warmup (constant: without warmup)
      return o.lr;
    }
  }
  if (o.warmup > 0 && t <= o.warmup)
    return o.lr * double(t) / double(o.warmup);
  if (o.schedule == S::Constant || o.steps <= o.warmup)
    return o.lr;
  double progress = double(t - o.warmup) / double(o.steps - o.warmup);
  if (o.schedule == S::Linear)
    return o.minLr + (o.lr - o.minLr) * (1.0 - progress);
  return o.minLr + 0.5 * (o.lr - o.minLr) * (1.0 + std::cos(M_PI * progress));
}

Trainer::Trainer(const TrainingOptions &o, const mt::plan::Plan &plan,
                 Backend &backend, TokenData &data, RunState &state)
    : o(o), plan(plan), backend(backend), data(data), state(state),
      comm(backend.communicator()), ranks(planRanks(plan)),
      transientGradients(
          std::any_of(plan.parameters().begin(), plan.parameters().end(),
                      [](const auto &p) { return p.grad_transient(); })),
      rule(lossRule(plan)) {}

LossRule lossRule(const mt::plan::Plan &plan) {
  LossRule rule;
  for (const auto &phase : plan.phases())
    for (const auto &op : phase.ops())
      if (op.kernel() == mt::plan::CROSS_ENTROPY ||
          op.kernel() == mt::plan::HEAD_CROSS_ENTROPY) {
        bool head = op.kernel() == mt::plan::HEAD_CROSS_ENTROPY;
        rule.shift = head ? op.attrs().head().shift()
                          : op.attrs().cross_entropy().shift();
        rule.ignoreIndex = head ? op.attrs().head().ignore_index()
                                : op.attrs().cross_entropy().ignore_index();
        rule.counts = true;
      }
  return rule;
}

int64_t Trainer::trainedTokens(const TokenBatch &batch) const {
  int64_t seq = plan.shapes().seq(), n = 0,
          tokens = int64_t(batch.targets.size());
  for (int64_t t = 0; t < tokens; ++t) {
    if (!rule.counts) {
      ++n;
      continue;
    }
    // As the loss: a shifted position predicts the next label of its row.
    if (rule.shift && t % seq == seq - 1)
      continue;
    n += batch.targets[rule.shift ? t + 1 : t] != rule.ignoreIndex;
  }
  return n;
}

Status Trainer::readStep() {
  int64_t micro = plan.shapes().grad_accum();
  batches.assign(size_t(micro), {});
  std::vector<int64_t> mine(static_cast<size_t>(micro));
  for (int64_t i = 0; i < micro; ++i) {
    // This rank's micro-batch of every `ranks` in the data's order.
    for (uint32_t r = 0; r < ranks; ++r) {
      TokenBatch read;
      data.next(read);
      if (r == backend.rank())
        batches[size_t(i)] = std::move(read);
    }
    mine[size_t(i)] = trainedTokens(batches[size_t(i)]);
  }
  tokenCounts = mine;
  if (ranks > 1) {
    tokenCounts.resize(mine.size() * ranks);
    if (Status st = comm->allGather(mine.data(), mine.size() * sizeof(int64_t),
                                    tokenCounts.data());
        !st)
      return st;
  }
  stepTokens = 0;
  for (int64_t n : tokenCounts)
    stepTokens += n;
  return Status::ok();
}

Status Trainer::step(int64_t t, StepResult &r) {
  trace.clear();
  StepConfig config;
  config.step = t;
  r.lr = learningRate(o, t);
  config.adamw = {r.lr, o.beta1, o.beta2, o.eps, o.weightDecay};
  bool deferred = plan.optimizer_overlap() == mt::plan::NEXT_FORWARD;
  int64_t micro = plan.shapes().grad_accum();
  // Transient gradients are gone by the end of the phase: the updates
  // measure the norm.
  GradientStats gradients;
  if (transientGradients)
    config.gradients = &gradients;
  // The mean over every rank's micro-batches: each micro-batch's gradient
  // is scaled by its share of the step's trained tokens (LOSS_SCALE).
  double scale = 1.0 / double(micro * int64_t(ranks));
  losses.clear();
  if (Status st = readStep(); !st)
    return st;
  r.trainedTokens = stepTokens;
  for (int ph = 0; ph < plan.phases_size(); ++ph) {
    const auto &phase = plan.phases(ph);
    if (phase.kind() == mt::plan::FINISH)
      continue;
    if (phase.kind() == mt::plan::MICRO_BATCH) {
      // A NEXT_FORWARD plan applies the previous step's update in the
      // first micro-batch; updates during the backward see the mean of
      // the micro-batches' gradients (mtrun refuses clipping with them).
      StepConfig run = deferred ? pendingConfig() : config;
      run.runStep = t;
      if (!deferred)
        run.gradScale = float(scale);
      // A layer-major plan runs the phase once for all micro-batches.
      int64_t runs = microBatchPhaseRuns(plan);
      for (int64_t m = 0; m < runs; ++m) {
        run.firstMicroBatch = m == 0;
        run.lastMicroBatch = m == runs - 1;
        if (Status st = microBatch(m, ph, phase, run); !st)
          return st;
      }
      if (Status st = stepLoss(r.loss); !st)
        return st;
      // Clip the mean gradient's global norm, as torch's clip_grad_norm_.
      std::string notFinite = gradients.firstNotFinite;
      double norm = std::sqrt(gradients.sumOfSquares);
      if (!config.gradients)
        if (Status st = gradientNorm(norm, notFinite); !st)
          return st;
      r.gradNorm = norm * scale;
      double coef = o.gradClip > 0 && r.gradNorm > o.gradClip
                        ? o.gradClip / (r.gradNorm + 1e-6)
                        : 1.0;
      config.gradScale = float(coef * scale);
      config.gradients = nullptr; // the later phases' ops see none
      if (!std::isfinite(r.loss) || !std::isfinite(r.gradNorm)) {
        if (Status st = skip(t, r, notFinite); !st)
          return st;
        // The accumulators are reset before the next step's gradients.
        state.pending = false;
        return Status::ok();
      }
      state.pendingConfig = config;
      state.pending = deferred;
      continue;
    }
    if (Status st = runPhase(plan, phase, backend, config,
                             tracing ? &trace : nullptr, ph, 0, monitor);
        !st)
      return st;
  }
  return Status::ok();
}

Status Trainer::finish() {
  for (int ph = 0; ph < plan.phases_size(); ++ph)
    if (plan.phases(ph).kind() == mt::plan::FINISH)
      if (Status st = runPhase(plan, plan.phases(ph), backend, pendingConfig(),
                               nullptr, ph, 0, monitor);
          !st)
        return st;
  state.pending = false;
  return Status::ok();
}

Status Trainer::microBatch(int64_t m, int phaseIndex,
                           const mt::plan::Phase &phase,
                           const StepConfig &config) {
  bool layerMajor = plan.shapes().layer_major();
  int64_t sets = layerMajor ? plan.shapes().grad_accum() : 1;
  int64_t all = plan.shapes().grad_accum() * int64_t(ranks);
  for (int64_t k = 0; k < sets; ++k) {
    size_t i = size_t(m * sets + k);
    const TokenBatch &batch = batches[i];
    for (const auto &in : plan.inputs()) {
      if (int64_t(in.micro_batch()) != k)
        continue;
      if (in.role() == mt::plan::LOSS_SCALE) {
        // Its share of the step's trained tokens, times the step's
        // micro-batches: exactly 1 when every one trains as many.
        int64_t n = tokenCounts[size_t(backend.rank()) * batches.size() + i];
        float s = stepTokens
                      ? float(double(n) * double(all) / double(stepTokens))
                      : 0.0f;
        if (Status st = backend.write(in.buffer(), &s, sizeof s); !st)
          return st;
        continue;
      }
      const auto &ids =
          in.role() == mt::plan::TOKENS ? batch.inputs : batch.targets;
      if (Status st = backend.write(in.buffer(), ids.data(),
                                    ids.size() * sizeof(int64_t));
          !st)
        return st;
    }
  }
  if (Status st =
          runPhase(plan, phase, backend, config, tracing ? &trace : nullptr,
                   phaseIndex, int(m), monitor);
      !st)
    return st;
  std::vector<uint32_t> lossBuffers(plan.losses().begin(), plan.losses().end());
  if (!layerMajor)
    lossBuffers = {plan.loss()};
  for (uint32_t b : lossBuffers) {
    float l;
    if (Status st = backend.read(b, &l, sizeof l); !st)
      return st;
    losses.push_back(l);
  }
  return Status::ok();
}

Status Trainer::stepLoss(double &loss) {
  std::vector<float> all = losses;
  if (ranks > 1) {
    all.resize(losses.size() * ranks);
    if (Status st = comm->allGather(losses.data(),
                                    losses.size() * sizeof(float), all.data());
        !st)
      return st;
  }
  // all[r * K + k] is micro-batch k x ranks + r of the step: the mean over
  // the step's trained tokens weighs each micro-batch's mean by its own
  // (one that trains none adds nothing, though its mean is NaN).
  size_t perRank = losses.size();
  if (!stepTokens) {
    loss = std::nan("");
    return Status::ok();
  }
  double sum = 0;
  for (size_t k = 0; k < perRank; ++k)
    for (uint32_t r = 0; r < ranks; ++r)
      if (int64_t n = tokenCounts[r * perRank + k])
        sum += double(all[r * perRank + k]) * double(n);
  loss = sum / double(stepTokens);
  return Status::ok();
}

StepConfig Trainer::pendingConfig() const {
  StepConfig c = state.pendingConfig;
  c.applyUpdates = state.pending;
  return c;
}

Status Trainer::skip(int64_t t, StepResult &r, const std::string &notFinite) {
  r.skipped = true;
  ++state.skipped;
  stoppedNonFinite = true; // until the step is found skippable
  std::string where = "the loss is " + std::to_string(r.loss);
  if (!notFinite.empty())
    where += ", and the gradient of '" + notFinite + "' is not finite";
  if (plan.optimizer_overlap() == mt::plan::BACKWARD)
    return Status::error("step " + std::to_string(t) + ": " + where +
                         "; this plan updated the weights during the "
                         "backward, so the step cannot be skipped");
  if (state.skipped > o.maxSkips)
    return Status::error("step " + std::to_string(t) + ": " + where + "; " +
                         std::to_string(state.skipped) +
                         " step(s) skipped, more than --max-skips " +
                         std::to_string(o.maxSkips));
  stoppedNonFinite = false;
  if (note && backend.rank() == 0)
    note("step " + std::to_string(t) + " skipped: " + where + " (" +
         std::to_string(state.skipped) + " of --max-skips " +
         std::to_string(o.maxSkips) + ")");
  return Status::ok();
}

Status Trainer::gradientNorm(double &norm, std::string &notFinite) {
  std::vector<double> squares;
  for (const auto &p : plan.parameters())
    if (p.trainable())
      squares.push_back(onRank(plan, p.grad(), backend.rank())
                            ? sumOfSquares(backend.hostF32(p.grad()),
                                           bufferElements(plan, p.grad()))
                            : 0.0);
  std::vector<double> all = squares;
  if (ranks > 1) {
    all.resize(squares.size() * ranks);
    if (Status st = comm->allGather(
            squares.data(), squares.size() * sizeof(double), all.data());
        !st)
      return st;
  }
  double sum = 0;
  size_t i = 0;
  for (const auto &p : plan.parameters()) {
    if (!p.trainable())
      continue;
    int64_t owner = std::max<int64_t>(ownerOf(plan, p), 0);
    double s = all[size_t(owner) * squares.size() + i++];
    if (!std::isfinite(s) && notFinite.empty())
      notFinite = p.name();
    sum += s;
  }
  norm = std::sqrt(sum);
  return Status::ok();
}

} // namespace mt::runtime
