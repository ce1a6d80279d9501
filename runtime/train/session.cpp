#include "runtime/train/session.h"

#include "runtime/base/bytes.h"
#include "runtime/cost/cost_model.h"
#include "runtime/cost/trace.h"
#include "runtime/plan/plan_io.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>

namespace mt::runtime {

namespace {

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

/// A number for the metrics JSON: null when it is not finite (JSON has no
/// NaN or infinity).
std::string jsonNumber(double v) {
  if (!std::isfinite(v))
    return "null";
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

/// Before allocating: the plan's host memory (with a backend whose device
/// is the host, its DEVICE arenas too) against what the machine has
/// available.
Status checkHostMemory(const mt::plan::Plan &plan, bool deviceApart,
                       uint32_t rank) {
  uint64_t need = 0;
  for (const auto &a : plan.arenas())
    if (a.tier() != mt::plan::DISK &&
        !(deviceApart && a.tier() == mt::plan::DEVICE) &&
        (!a.has_rank() || a.rank() == rank))
      need += a.size_bytes();
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (in >> key >> kib) {
    if (key == "MemAvailable:")
      break;
    in.ignore(1 << 10, '\n');
  }
  uint64_t have = kib * 1024;
  if (!in || have == 0 || need <= have)
    return Status::ok();
  return Status::error("the plan needs " + gibText(double(need)) +
                       " of host memory (its arenas) but this machine has " +
                       gibText(double(have)) +
                       " available; plan for this machine (mtc --target "
                       "with --host-mem, or mtrun --calibrate) or free memory");
}

/// The plan's ranks against the processes mpirun started.
Status checkRanks(const mt::plan::Plan &plan, const std::string &path,
                  Communicator *comm) {
  uint32_t ranks = planRanks(plan);
  if (ranks > 1 && (!comm || uint32_t(comm->size()) != ranks))
    return Status::error(
        path + " is a plan for " + std::to_string(ranks) +
        " data-parallel ranks" +
        (comm ? ", and mpirun started " + std::to_string(comm->size())
              : std::string()) +
        ": run it as mpirun -np " + std::to_string(ranks) + " mtrun " + path +
        " ...");
  if (comm && ranks == 1)
    return Status::error(path +
                         " is a plan for one process, and mpirun "
                         "started " +
                         std::to_string(comm->size()) +
                         ": compile it with mtc --ranks " +
                         std::to_string(comm->size()));
  return Status::ok();
}

} // namespace

Status checkOptions(const SessionOptions &o) {
  auto bad = [](const std::string &flag, const std::string &rule,
                const std::string &got) {
    return Status::error(flag + " must be " + rule + ", got " + got);
  };
  auto finite = [](double v) { return std::isfinite(v); };
  const TrainingOptions &t = o.train;
  if (t.steps < 1)
    return bad("--steps", "at least 1", std::to_string(t.steps));
  if (!finite(t.lr) || t.lr < 0)
    return bad("--lr", "a finite number >= 0", number(t.lr));
  if (!(t.beta1 >= 0 && t.beta1 < 1))
    return bad("--beta1", "in [0, 1)", number(t.beta1));
  if (!(t.beta2 >= 0 && t.beta2 < 1))
    return bad("--beta2", "in [0, 1)", number(t.beta2));
  if (!finite(t.eps) || t.eps <= 0)
    return bad("--eps", "a finite number > 0", number(t.eps));
  if (!finite(t.weightDecay) || t.weightDecay < 0)
    return bad("--weight-decay", "a finite number >= 0", number(t.weightDecay));
  if (!finite(t.gradClip) || t.gradClip < 0)
    return bad("--grad-clip", "a finite number >= 0 (0: off)",
               number(t.gradClip));
  if (t.warmup < 0)
    return bad("--warmup", "0 or more steps", std::to_string(t.warmup));
  if (!finite(t.minLr) || t.minLr < 0)
    return bad("--min-lr", "a finite number >= 0", number(t.minLr));
  if (o.saveEvery < 0)
    return bad("--save-every", "0 (only at the end) or more steps",
               std::to_string(o.saveEvery));
  if (o.keep < 0)
    return bad("--keep", "0 (all) or more", std::to_string(o.keep));
  if (t.maxSkips < 0)
    return bad("--max-skips", "0 or more", std::to_string(t.maxSkips));
  if (o.threads < 1 || o.threads > 4096)
    return bad("--threads", "from 1 to 4096", std::to_string(o.threads));
  if (!finite(o.weights.initStd) || o.weights.initStd <= 0)
    return bad("--init-std", "a finite number > 0", number(o.weights.initStd));
  return Status::ok();
}

Status Session::open(const SessionOptions &o, SessionObserver &observer,
                     std::unique_ptr<Session> &out) {
  if (Status st = checkOptions(o); !st)
    return st;
  if (!o.backend)
    return Status::error("a session needs a backend to run on");
  std::unique_ptr<Session> s(new Session(o, observer));
  s->leader_ = !o.comm || o.comm->rank() == 0;
  if (Status st = readPlan(o.plan, s->plan_); !st)
    return st;
  if (s->plan_.forward_only())
    return Status::error(o.plan +
                         " is a forward-only plan (mtc --forward): it trains "
                         "nothing; run it on tensors with mtrun " +
                         o.plan +
                         " --inputs IN.safetensors --outputs "
                         "OUT.safetensors");
  if (Status st = checkRanks(s->plan_, o.plan, o.comm); !st)
    return st;
  if (std::string lossy = lossyMoments(s->plan_); !lossy.empty())
    observer.say("note: LOSSY: this plan stores the AdamW moments in " + lossy +
                 " (mtc --optimizer-states)");
  if (s->plan_.optimizer_overlap() == mt::plan::BACKWARD &&
      o.train.gradClip > 0)
    return Status::error(
        o.plan + " updates each weight during the backward, before the "
                 "global gradient norm is known; clipping needs a plan "
                 "compiled with mtc --clipping (or --optimizer-overlap after "
                 "or next-forward)");
  if (Status st = s->openData(); !st)
    return st;
  if (Status st = checkHostMemory(s->plan_, o.deviceApart,
                                  o.comm ? uint32_t(o.comm->rank()) : 0);
      !st)
    return st;
  if (!o.save.empty() && s->leader_) {
    // Rank 0 writes the checkpoints.
    std::error_code ec;
    std::filesystem::create_directories(o.save, ec);
    std::string probe = o.save + "/.mtrun-write-test";
    if (!std::ofstream(probe))
      return Status::error("--save " + o.save +
                           ": cannot write there (a directory mtrun can "
                           "create and write is needed for checkpoints)");
    std::remove(probe.c_str());
  }
  // The op times are written after the last step: a file that cannot be
  // is said before training (opened here, it is written then).
  if (!o.opTimes.empty() && s->leader_ && !std::ofstream(o.opTimes))
    return Status::error("--op-times " + o.opTimes + ": cannot write it");
  if (Status st = s->openBackend(); !st)
    return st;
  if (o.metricsStream && s->leader_) {
    s->metrics_ = o.metricsStream;
  } else if (!o.metrics.empty() && s->leader_) {
    if (!(s->metrics_ =
              std::fopen(o.metrics.c_str(), o.resume.empty() ? "w" : "a")))
      return Status::error(o.metrics + ": cannot open the metrics file");
    s->ownsMetrics_ = true;
  }
  // A write past a file size limit fails with EFBIG instead of killing us.
  std::signal(SIGXFSZ, SIG_IGN);
  s->trainer_ = std::make_unique<Trainer>(s->o_.train, s->plan_, *s->backend_,
                                          s->data_, s->state_);
  s->trainer_->tracing = !o.trace.empty();
  s->trainer_->monitor = o.monitor;
  Session *self = s.get();
  s->trainer_->note = [self](const std::string &text) {
    self->observer_.say(text);
  };
  out = std::move(s);
  return Status::ok();
}

Session::~Session() {
  if (ownsMetrics_)
    std::fclose(metrics_);
}

Status Session::openData() {
  const auto &shapes = plan_.shapes();
  TargetKind kind = TargetKind::Targets;
  for (const auto &in : plan_.inputs())
    if (in.role() == mt::plan::LABELS)
      kind = TargetKind::Labels;
  namespace fs = std::filesystem;
  std::error_code ec;
  bool examples = fs::is_directory(o_.data, ec) ||
                  fs::path(o_.data).extension() == ".jsonl";
  if (o_.pad && !examples)
    return Status::error("--pad fills rows with examples: give --data a "
                         ".jsonl file or a directory of them");
  if (!examples)
    return TokenData::open(o_.data, o_.dataType, shapes.vocab(), shapes.batch(),
                           shapes.seq(), kind, data_);
  int64_t untrained = 0;
  std::string first;
  if (Status st = TokenData::openExamples(
          o_.data, shapes.vocab(), shapes.batch(), shapes.seq(), kind,
          o_.pad ? Fill::Pad : Fill::Pack, lossRule(plan_).ignoreIndex, data_,
          untrained, first);
      !st)
    return st;
  if (untrained && leader_)
    observer_.say("warning: " + std::to_string(untrained) +
                  " example(s) have no token trained on (every label -100; "
                  "the first at " +
                  first + "): they add no loss");
  return Status::ok();
}

Status Session::openBackend() {
  backend_ = o_.backend(o_.disk.empty() ? plan_.disk_dir() : o_.disk);
  backend_->joinRanks(o_.comm);
  if (Status st = backend_->allocate(plan_); !st)
    return st;
  if (leader_)
    for (const std::string &note : backend_->notes())
      observer_.say("note: " + note);
  WeightSource source = o_.weights;
  source.planPath = o_.plan;
  source.threads = o_.threads;
  int initialised = 0;
  if (Status st = loadParameters(plan_, *backend_, source, o_.resume.empty(),
                                 initialised);
      !st)
    return st;
  if (Status st = locateKept(plan_, source, kept_); !st)
    return st;
  if (initialised && leader_)
    observer_.say("initialised " + std::to_string(initialised) +
                  " weights from scratch (normal, std " +
                  number(source.initStd) + ", seed " +
                  std::to_string(source.seed) + "; norm scales 1, biases 0)");
  if (o_.resume.empty())
    return Status::ok();
  std::string dir;
  if (Status st = findCheckpoint(o_.resume, dir); !st)
    return st;
  std::vector<std::string> notes;
  if (Status st = loadCheckpoint(dir, plan_, *backend_, state_, notes); !st)
    return st;
  data_.seek(state_.dataPosition);
  if (leader_) {
    for (const std::string &note : notes)
      observer_.say("note: " + note);
    observer_.say("resumed from " + dir + " at step " +
                  std::to_string(state_.step));
  }
  return Status::ok();
}

Status Session::save() {
  Status st = saveCheckpoint(o_.save, plan_, *backend_, state_, o_.keep, kept_);
  if (st && leader_)
    observer_.say("saved step " + std::to_string(state_.step) + " to " +
                  o_.save);
  return st;
}

Status Session::agreedStop(int &signal) {
  int32_t mine = observer_.stopSignal();
  signal = mine;
  if (!o_.comm)
    return Status::ok();
  std::vector<int32_t> all(size_t(o_.comm->size()));
  if (Status st = o_.comm->allGather(&mine, sizeof mine, all.data()); !st)
    return st;
  signal = 0;
  for (int32_t sig : all)
    if (sig && !signal)
      signal = sig;
  return Status::ok();
}

Status Session::writeOpTimes() {
  std::vector<OpSeconds> times;
  if (Status st = backend_->synchronize(); !st)
    return st;
  if (Status st = backend_->takeOpTimes(times); !st)
    return st;
  if (!leader_)
    return Status::ok();
  std::ofstream out(o_.opTimes);
  out << opTimesTable(plan_, times, plan_.target());
  out.close();
  if (!out)
    return Status::error("--op-times " + o_.opTimes + ": cannot write it");
  return Status::ok();
}

void Session::writeMetrics(const StepReport &r) {
  if (!metrics_)
    return;
  std::fprintf(metrics_,
               "{\"step\": %lld, \"loss\": %s, \"lr\": %.9g, "
               "\"grad_norm\": %s, \"tokens\": %lld, "
               "\"trained_tokens\": %lld, "
               "\"step_time_s\": %.6f, \"skipped\": %s}\n",
               (long long)r.step, jsonNumber(r.result.loss).c_str(),
               r.result.lr, jsonNumber(r.result.gradNorm).c_str(),
               (long long)r.tokens, (long long)r.result.trainedTokens,
               r.seconds, r.result.skipped ? "true" : "false");
  std::fflush(metrics_);
}

Status Session::run(int &stoppedBy) {
  stoppedBy = 0;
  const auto &shapes = plan_.shapes();
  int64_t tokensPerStep = shapes.batch() * shapes.seq() * shapes.grad_accum() *
                          int64_t(planRanks(plan_));
  using Clock = std::chrono::steady_clock;
  using Seconds = std::chrono::duration<double>;
  auto start = Clock::now();
  int64_t first = state_.step + 1;
  int stopped = 0;
  if (Status st = agreedStop(stopped); !st)
    return st;
  for (int64_t t = first; t <= o_.train.steps && !stopped; ++t) {
    auto stepStart = Clock::now();
    StepReport r;
    r.step = t;
    r.lastStep = o_.train.steps;
    observer_.stepBegins(t);
    bool timed = !o_.opTimes.empty() && t == o_.train.steps;
    if (timed)
      backend_->timeOps();
    if (Status st = trainer_->step(t, r.result); !st)
      return st;
    if (timed)
      if (Status st = writeOpTimes(); !st)
        return st;
    auto now = Clock::now();
    r.seconds = Seconds(now - stepStart).count();
    r.elapsed = Seconds(now - start).count();
    r.eta = r.elapsed / double(t - first + 1) * double(o_.train.steps - t);
    r.tokens = tokensPerStep * t;
    r.tokensPerSecond = double(tokensPerStep) / r.seconds;
    state_.step = t;
    state_.dataPosition = data_.position();
    observer_.stepEnds(r);
    if (Status st = agreedStop(stopped); !st)
      return st;
    writeMetrics(r);
    if (!o_.save.empty() && o_.saveEvery > 0 && t % o_.saveEvery == 0 &&
        t < o_.train.steps && !stopped)
      if (Status st = save(); !st)
        return st;
  }
  if (stopped) {
    // Stopped between steps: the checkpoint keeps any pending update as
    // it is, so that a resumed run continues exactly.
    stoppedBy = stopped;
    if (!o_.save.empty())
      if (Status st = save(); !st)
        return st;
    if (leader_)
      observer_.say("stopped by signal " + std::to_string(stopped) +
                    " after step " + std::to_string(state_.step) +
                    (o_.save.empty() ? " (no --save: nothing saved)" : ""));
    return Status::ok();
  }
  if (Status st = trainer_->finish(); !st)
    return st;
  if (uint64_t stored = backend_->diskStoredBytes(); stored && leader_) {
    uint64_t raw = 0;
    for (const auto &a : plan_.arenas())
      if (a.tier() == mt::plan::DISK)
        raw += a.size_bytes();
    char line[160];
    std::snprintf(line, sizeof line,
                  "disk tier: %.3f GiB stored for %.3f GiB of state (shuffle "
                  "+ zstd: %.1f%%)",
                  double(stored) / double(1ull << 30),
                  double(raw) / double(1ull << 30),
                  100.0 * double(stored) / double(raw));
    observer_.say(line);
  }
  if (!o_.trace.empty() && leader_)
    if (Status st = writeChromeTrace(plan_, trainer_->trace, o_.trace); !st)
      return st;
  if (!o_.save.empty())
    if (Status st = save(); !st)
      return st;
  return Status::ok();
}

} // namespace mt::runtime
