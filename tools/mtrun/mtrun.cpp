// mtrun PLAN.mtp --data TOKENS --steps N ...: train with a plan of mtc;
// mtrun PLAN.mtp --inputs IN --outputs OUT: run a forward-only plan once.
// Flags and printing: the run is a Session (runtime/train/session.h), the
// stop on SIGINT and SIGTERM a StopWatch; a forward run is runForward
// (runtime/train/forward.h).
#include "kernels/cpu/parallel.h"
#include "runtime/hal/backends.h"
#include "runtime/io/safetensors.h"
#include "runtime/train/calibrate.h"
#include "runtime/train/forward.h"
#include "runtime/train/session.h"
#include "tools/mtrun/stop_watch.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <thread>

using namespace mt::runtime;
using mt::mtrun::readTestHold;
using mt::mtrun::StopWatch;

namespace {

struct Options {
  SessionOptions run; ///< with --threads defaulting to the machine's
  Options() {
    run.threads = int(std::max(1u, std::thread::hardware_concurrency()));
  }
  std::string dataDtype = "u16", device = "auto", schedule = "constant",
              init = "none", calibrate;
  /// A forward-only plan's inputs and where its outputs go (safetensors).
  std::string inputs, outputs;
  double stopTimeout = -1; ///< seconds; < 0: StopWatch chooses
};

/// A whole number that fits in 64 bits, checked on the option's text:
/// CLI11 itself saturates one that does not (--steps 99999999999999999999
/// would run 9.2e18 steps).
template <typename T> CLI::Validator wholeNumber() {
  return CLI::Validator(
      [](std::string &text) -> std::string {
        T value;
        auto [end, ec] =
            std::from_chars(text.data(), text.data() + text.size(), value);
        if (ec == std::errc() && end == text.data() + text.size())
          return "";
        return "'" + text + "' is not a whole number" +
               (ec == std::errc::result_out_of_range ? " that fits in 64 bits"
                                                     : "");
      },
      "");
}

// Exit codes (README, "Exit codes"); a signal stops with 128 + its number.
constexpr int kExitNonFinite = 3; // a non-finite step past --max-skips

/// The ranks of a data-parallel run (null: one process): an error on one
/// rank ends them all, so that none waits for it forever.
Communicator *gRanks = nullptr;

int fail(const std::string &msg, int code = 1) {
  if (gRanks) {
    std::fprintf(stderr, "mtrun: error: rank %d of %d: %s\n", gRanks->rank(),
                 gRanks->size(), msg.c_str());
    std::fflush(stderr);
    gRanks->abort(code);
  }
  std::fprintf(stderr, "mtrun: error: %s\n", msg.c_str());
  return code;
}

/// The run's lines on stderr (rank 0's), its steps timed for the stop.
class Printer : public SessionObserver {
public:
  Printer(StopWatch &stopWatch, bool leader)
      : stopWatch_(stopWatch), leader_(leader) {}
  void say(const std::string &text) override {
    std::fprintf(stderr, "mtrun: %s\n", text.c_str());
  }
  void stepBegins(int64_t step) override { stopWatch_.stepBegins(step); }
  int stopSignal() override { return stopWatch_.stopSignal(); }
  void stepEnds(const StepReport &r) override {
    stopWatch_.stepEnds(r.seconds);
    if (leader_) // what mt.Trainer reads is the metrics, not this line
      std::fprintf(stderr,
                   "step %lld/%lld  loss %.4f  lr %.2e  %.0f tokens/s  "
                   "elapsed %.1fs  eta %.1fs%s\n",
                   (long long)r.step, (long long)r.lastStep, r.result.loss,
                   r.result.lr, r.tokensPerSecond, r.elapsed, r.eta,
                   r.result.skipped ? "  (skipped)" : "");
  }

private:
  StopWatch &stopWatch_;
  const bool leader_;
};

/// The tensors of a safetensors file, each read whole (their sizes were
/// checked against the file by the header's reader).
Status readTensors(const std::string &path, std::vector<NamedTensor> &out) {
  SafetensorsHeader header;
  if (Status st = readSafetensorsHeader(path, header); !st)
    return st;
  for (const SafetensorsEntry &e : header.entries) {
    NamedTensor t{e.name, e.dtype, e.shape, {}};
    if (Status st = readSafetensorsData(header, e, t.data); !st)
      return st;
    out.push_back(std::move(t));
  }
  return Status::ok();
}

/// mtrun PLAN --inputs IN --outputs OUT: the forward-only plan run once on
/// IN's tensors (by input name), its outputs written to OUT by name, its
/// loss, if it has one, said.
int runForwardPlan(const Options &o, bool cuda) {
  mt::plan::Plan plan;
  if (Status st = readPlan(o.run.plan, plan); !st)
    return fail(st.message());
  if (!plan.forward_only())
    return fail(o.run.plan +
                " is a training plan: --inputs and --outputs run a "
                "forward-only plan (mtc --forward); train this one with "
                "--data");
  std::vector<NamedTensor> inputs, outputs;
  if (Status st = readTensors(o.inputs, inputs); !st)
    return fail(st.message());
  std::unique_ptr<Backend> backend = makeBackend(cuda, o.run.threads, "");
  for (const std::string &note : backend->notes())
    std::fprintf(stderr, "mtrun: %s\n", note.c_str());
  if (Status st = backend->allocate(plan); !st)
    return fail(st.message());
  int initialised = 0;
  WeightSource weights = o.run.weights;
  weights.planPath = o.run.plan;
  weights.threads = o.run.threads;
  if (Status st = loadParameters(plan, *backend, weights, /*trainable=*/false,
                                 initialised);
      !st)
    return fail(st.message());
  std::optional<double> loss;
  if (Status st = runForward(plan, *backend, inputs, outputs, loss); !st)
    return fail(o.inputs + ": " + st.message());
  std::vector<TensorView> views;
  for (const NamedTensor &t : outputs)
    views.push_back({t.name, t.shape, t.data.data(), t.dtype});
  if (Status st = writeSafetensors(o.outputs, views); !st)
    return fail(st.message());
  if (loss)
    std::fprintf(stderr, "mtrun: loss %.6f\n", *loss);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  CLI::App app{"mtrun: train with a plan compiled by mtc (mtc MODEL.onnx -o "
               "PLAN.mtp)"};
  app.add_option("plan", o.run.plan, "The plan file");
  app.add_option("--data", o.run.data,
                 "Training data, read in order and from the start again at "
                 "its end: a token file (flat little-endian ids, batch x seq "
                 "per micro-batch, every token trained on), or examples: a "
                 ".jsonl file, or a directory of them, one per line with "
                 "input_ids and optionally labels (-100: not trained on, as "
                 "Hugging Face's) or attention_mask (0: padding, dropped). "
                 "Examples are packed (concatenated, each row cut at seq, "
                 "nothing trained across an example's boundary) unless --pad. "
                 "A step's loss is the mean over all its trained tokens");
  app.add_flag("--pad", o.run.pad,
               "With examples: one per row, truncated to seq, the rest of "
               "the row padding that is not trained on");
  app.add_option("--calibrate", o.calibrate,
                 "Measure this machine's rates and write them as a target "
                 "file for mtc --target (no plan needed): the GPU's (pinned "
                 "copies, GEMMs, device copies) with --device cuda or auto "
                 "and a GPU, else the CPU backend's standing for the device; "
                 "under mpirun also the network between ranks 0 and 1");
  app.add_option("--data-dtype", o.dataDtype, "Token width")
      ->check(CLI::IsMember({"u16", "u32"}));
  app.add_option("--steps", o.run.train.steps, "Optimizer steps (at least 1)")
      ->check(wholeNumber<int64_t>());
  app.add_option("--device", o.device,
                 "Backend: cuda (the GPU; needs a build with CUDA and a "
                 "device), cpu (the reference kernels, host memory only), or "
                 "auto (cuda when there is a usable device, else cpu)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  app.add_option("--lr", o.run.train.lr, "Peak learning rate (>= 0)");
  app.add_option("--beta1", o.run.train.beta1, "AdamW beta1, in [0, 1)");
  app.add_option("--beta2", o.run.train.beta2, "AdamW beta2, in [0, 1)");
  app.add_option("--eps", o.run.train.eps, "AdamW epsilon (> 0)");
  app.add_option("--weight-decay", o.run.train.weightDecay,
                 "Decoupled weight decay (>= 0)");
  app.add_option("--grad-clip", o.run.train.gradClip,
                 "Clip the global gradient norm to this (0: off)");
  app.add_option("--warmup", o.run.train.warmup, "Linear warmup steps (>= 0)")
      ->check(wholeNumber<int64_t>());
  app.add_option("--lr-schedule", o.schedule,
                 "After warmup: constant, or a cosine or linear decay to "
                 "--min-lr at the last step")
      ->check(CLI::IsMember({"constant", "cosine", "linear"}));
  app.add_flag("--lr-schedule-hf", o.run.train.huggingFace,
               "Evaluate the schedule as Hugging Face's Trainer does: at the "
               "steps done before each (0 for the first), warming up from 0 "
               "over --warmup steps, decaying to 0 (--min-lr unused): "
               "constant (with warmup), linear, cosine");
  app.add_option("--min-lr", o.run.train.minLr,
                 "Final learning rate of the cosine (>= 0)");
  app.add_option("--metrics", o.run.metrics,
                 "Write one JSON line per step here (-: standard output)");
  app.add_option("--save", o.run.save,
                 "Write checkpoints to DIR/step-NNNNNNNN (model.safetensors "
                 "under the model's names, optimizer.safetensors, state.json) "
                 "at the end, every --save-every steps, and on SIGINT or "
                 "SIGTERM; atomically");
  app.add_option("--save-every", o.run.saveEvery,
                 "Checkpoint every N steps (0: only at the end)")
      ->check(wholeNumber<int64_t>());
  app.add_option("--keep", o.run.keep,
                 "Keep the newest K checkpoints in --save DIR (0: all)")
      ->check(wholeNumber<int64_t>());
  app.add_option("--resume", o.run.resume,
                 "Continue from a checkpoint: a step-* directory, or the "
                 "newest one in DIR; --steps is the total to reach");
  app.add_option("--max-skips", o.run.train.maxSkips,
                 "Skip (and count) up to N steps whose loss or gradient norm "
                 "is not finite; one more stops the run with exit code 3")
      ->check(wholeNumber<int64_t>());
  app.add_option("--threads", o.run.threads,
                 "Host threads for the CPU kernels and the optimizer (1 to "
                 "4096; default: the machine's)")
      ->check(wholeNumber<int64_t>());
  app.add_option("--init", o.init,
                 "normal: start trainable weights whose data file is missing "
                 "from scratch (normal(0, --init-std); norm scales 1, biases "
                 "0, as the compiler marked them), so a graph-only model "
                 "trains; none: every weight must have its data")
      ->check(CLI::IsMember({"none", "normal"}));
  app.add_option("--init-std", o.run.weights.initStd,
                 "Standard deviation of --init normal (> 0)");
  app.add_option("--seed", o.run.weights.seed,
                 "Seed of --init (each weight's values depend on it and the "
                 "weight's name only)")
      ->check(wholeNumber<uint64_t>());
  app.add_option("--model-dir", o.run.weights.modelDirs,
                 "Where the model's files are now, when they have moved "
                 "away from the plan (repeatable; looked in first, then the "
                 "folders the plan names relative to itself)")
      ->allow_extra_args(false);
  app.add_option("--disk", o.run.disk,
                 "Directory for the plan's disk tier (AdamW moments; default: "
                 "the one given to mtc --disk). Its files are unlinked at "
                 "creation, so nothing is left behind");
  app.add_option("--trace", o.run.trace,
                 "Write the measured timeline of the last step as Chrome "
                 "trace JSON (the format of mt-inspect --trace)");
  app.add_option("--op-times", o.run.opTimes,
                 "Time every op of the last step where it runs (on the GPU: "
                 "CUDA events around each op) and write the times summed by "
                 "kernel beside the plan's target's prediction for the same "
                 "ops, as a Markdown table");
  app.add_option("--inputs", o.inputs,
                 "Run a forward-only plan (mtc --forward) once: its inputs "
                 "are this safetensors file's tensors, by input name (floats "
                 "are rounded to the plan's compute dtype; integers and "
                 "booleans are ids and masks); needs --outputs");
  app.add_option("--outputs", o.outputs,
                 "Where a forward-only plan's outputs go: a safetensors file "
                 "of its graph outputs by name, in the plan's dtypes "
                 "(booleans as U8)");
  app.add_option("--stop-timeout", o.stopTimeout,
                 "After SIGINT or SIGTERM, wait this many seconds for the "
                 "step to end before stopping without a checkpoint, naming "
                 "the op each stream is on (default: three times the "
                 "longest step so far, or the plan's predicted step before "
                 "the first, at least 60)");
  app.footer("Data-parallel ranks: a plan of mtc --ranks N runs as mpirun -np "
             "N mtrun PLAN ...: each rank reads its share of every step's "
             "micro-batches and owns part of the host state; rank 0 reports, "
             "writes --metrics and the checkpoints (the files one process "
             "writes: a run resumes on any rank count).\n"
             "Exit codes: 0 trained; 1 bad input, plan, data or options, or "
             "an I/O error (the message says which); 3 a step's loss or "
             "gradient norm was not finite past --max-skips; 130 stopped by "
             "SIGINT, 143 by SIGTERM: after the current step (with --save, "
             "a checkpoint of it was written), or at once on a second "
             "signal or when the step does not end within --stop-timeout "
             "(nothing saved; earlier checkpoints are intact).");
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success &e) { // --help
    return app.exit(e);
  } catch (const CLI::ParseError &e) {
    // One line in mtrun's form, exit code 1 like every bad option.
    return fail(std::string(e.what()) + "; see --help");
  }
  // Before any thread exists (the BLAS's, started when the program loaded,
  // are stopped here): signals go to the watcher thread only.
  mt::kernels::cpu::setThreads(o.run.threads);
  PhaseMonitor monitor;
  StopWatch stopWatch(monitor, o.stopTimeout);
  if (Status st = checkOptions(o.run); !st)
    return fail(st.message());
  if (app.count("--stop-timeout") &&
      (!std::isfinite(o.stopTimeout) || o.stopTimeout < 0))
    return fail("--stop-timeout must be a finite number of seconds >= 0, "
                "got " +
                app.get_option("--stop-timeout")->as<std::string>());
  if (Status st = readTestHold(monitor); !st)
    return fail(st.message());
  // Under mpirun: one rank of a data-parallel run. Started after the
  // signals are blocked, so that MPI's threads do not take them either.
  std::string mpiWhy;
  std::unique_ptr<Communicator> ranks = makeMpiCommunicator(argc, argv, mpiWhy);
  if (!mpiWhy.empty())
    return fail(mpiWhy);
  Communicator *comm = ranks && ranks->size() > 1 ? ranks.get() : nullptr;
  gRanks = comm;
  bool cuda = false;
  if (Status st = chooseDevice(o.device, cuda); !st)
    return fail(st.message());
  if (!o.calibrate.empty()) {
    CalibrateOptions c{o.calibrate, o.run.threads, comm, deviceMeasure(cuda)};
    Calibration got;
    if (Status st = calibrate(c, got); !st)
      return fail(st.message());
    for (const std::string &line : describe(c, got))
      std::fprintf(stderr, "%s\n", line.c_str());
    return 0;
  }
  if (!o.inputs.empty() || !o.outputs.empty()) {
    if (o.inputs.empty() || o.outputs.empty() || o.run.plan.empty())
      return fail("a forward run needs a plan, --inputs and --outputs "
                  "(mtrun PLAN.mtp --inputs IN.safetensors --outputs "
                  "OUT.safetensors)");
    for (const char *training :
         {"--data", "--steps", "--save", "--resume", "--metrics", "--trace",
          "--op-times", "--init"})
      if (app.count(training))
        return fail(std::string(training) +
                    " is about training; a forward run takes --inputs and "
                    "--outputs");
    if (comm)
      return fail("a forward run is one process; run it without mpirun");
    return runForwardPlan(o, cuda);
  }
  if (o.run.plan.empty() || o.run.data.empty())
    return fail("a plan and --data are required (mtrun PLAN.mtp --data "
                "TOKENS); see --help");
  SessionOptions &run = o.run;
  run.dataType = o.dataDtype == "u16" ? TokenType::U16 : TokenType::U32;
  run.train.schedule =
      o.schedule == "cosine"   ? TrainingOptions::Schedule::Cosine
      : o.schedule == "linear" ? TrainingOptions::Schedule::Linear
                               : TrainingOptions::Schedule::Constant;
  run.weights.initNormal = o.init == "normal";
  run.backend = [cuda, threads = run.threads](const std::string &diskDir) {
    return makeBackend(cuda, threads, diskDir);
  };
  if (run.metrics == "-") { // the lines on stdout: nothing else goes there
    run.metricsStream = stdout;
    run.metrics.clear();
  }
  run.deviceApart = cuda;
  run.comm = comm;
  run.monitor = &monitor;
  Printer printer(stopWatch, !comm || comm->rank() == 0);
  std::unique_ptr<Session> session;
  if (Status st = Session::open(run, printer, session); !st)
    return fail(st.message());
  stopWatch.trainingBegins(session->predictedStepSeconds());
  int stopped = 0;
  if (Status st = session->run(stopped); !st)
    return fail(st.message(), session->stoppedNonFinite() ? kExitNonFinite : 1);
  return stopped ? 128 + stopped : 0;
}
