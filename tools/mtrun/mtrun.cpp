// mtrun: execute a training plan written by mtc.
//
//   mtrun PLAN.mtp --data TOKENS --steps N [--data-dtype u16|u32]
//         [--device cpu|cuda|auto] [--lr --beta1 --beta2 --eps --weight-decay]
//         [--grad-clip C] [--warmup W] [--lr-schedule constant|cosine|linear]
//         [--min-lr L] [--metrics FILE.jsonl] [--save DIR] [--threads T]
#include "kernels/cpu/parallel.h"
#include "runtime/exec/executor.h"
#include "runtime/hal/backends.h"
#include "runtime/io/token_data.h"
#include "runtime/plan/plan_io.h"
#include "runtime/train/calibrate.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/training.h"
#include "runtime/train/weights.h"
#include "tools/mtrun/stop_watch.h"

#include <CLI/CLI.hpp>

#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace mt::runtime;
using mt::mtrun::StopWatch;

namespace {

struct Options {
  std::string plan, data, dataDtype = "u16", device = "auto",
                          schedule = "constant";
  std::string metrics, save, trace, calibrate, disk, init = "none", resume;
  std::vector<std::string> modelDirs;
  int64_t saveEvery = 0;
  int keep = 3;
  bool pad = false;
  float initStd = 0.02f;
  uint64_t seed = 0;
  /// The loop's own (steps, schedule, AdamW, clipping, skips); --lr-schedule
  /// is parsed into it after the options.
  TrainingOptions train;
  int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  double stopTimeout = -1; ///< seconds; < 0: StopWatch chooses
};

/// The numeric options in the ranges torch's AdamW and schedulers accept,
/// checked before anything is read or allocated: one sentence for the
/// first that is not. `stopTimeoutGiven`: whether --stop-timeout was on the
/// command line (its default, "choose", is not a number of seconds).
Status checkOptions(const Options &o, bool stopTimeoutGiven) {
  auto bad = [](const std::string &flag, const std::string &rule,
                const std::string &got) {
    return Status::error(flag + " must be " + rule + ", got " + got);
  };
  auto num = [](double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", v);
    return std::string(text);
  };
  auto finite = [](double v) { return std::isfinite(v); };
  if (o.train.steps < 1)
    return bad("--steps", "at least 1", std::to_string(o.train.steps));
  if (!finite(o.train.lr) || o.train.lr < 0)
    return bad("--lr", "a finite number >= 0", num(o.train.lr));
  if (!(o.train.beta1 >= 0 && o.train.beta1 < 1))
    return bad("--beta1", "in [0, 1)", num(o.train.beta1));
  if (!(o.train.beta2 >= 0 && o.train.beta2 < 1))
    return bad("--beta2", "in [0, 1)", num(o.train.beta2));
  if (!finite(o.train.eps) || o.train.eps <= 0)
    return bad("--eps", "a finite number > 0", num(o.train.eps));
  if (!finite(o.train.weightDecay) || o.train.weightDecay < 0)
    return bad("--weight-decay", "a finite number >= 0",
               num(o.train.weightDecay));
  if (!finite(o.train.gradClip) || o.train.gradClip < 0)
    return bad("--grad-clip", "a finite number >= 0 (0: off)",
               num(o.train.gradClip));
  if (o.train.warmup < 0)
    return bad("--warmup", "0 or more steps", std::to_string(o.train.warmup));
  if (!finite(o.train.minLr) || o.train.minLr < 0)
    return bad("--min-lr", "a finite number >= 0", num(o.train.minLr));
  if (o.saveEvery < 0)
    return bad("--save-every", "0 (only at the end) or more steps",
               std::to_string(o.saveEvery));
  if (o.keep < 0)
    return bad("--keep", "0 (all) or more", std::to_string(o.keep));
  if (o.train.maxSkips < 0)
    return bad("--max-skips", "0 or more", std::to_string(o.train.maxSkips));
  if (o.threads < 1 || o.threads > 4096)
    return bad("--threads", "from 1 to 4096", std::to_string(o.threads));
  if (!finite(o.initStd) || o.initStd <= 0)
    return bad("--init-std", "a finite number > 0", num(o.initStd));
  if (stopTimeoutGiven && (!finite(o.stopTimeout) || o.stopTimeout < 0))
    return bad("--stop-timeout", "a finite number of seconds >= 0",
               num(o.stopTimeout));
  return Status::ok();
}

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

/// MT_TEST_HOLD=STEP:OP[:forever], a test hook: op OP of step STEP's first
/// micro-batch waits until the run is asked to stop (or forever), so that
/// tests of signals do not depend on how long a step takes. mtrun says so on
/// stderr when the op is held (a test signals after reading it).
Status readTestHold(PhaseMonitor &monitor) {
  const char *text = std::getenv("MT_TEST_HOLD");
  if (!text)
    return Status::ok();
  long long step = 0;
  int op = 0, used = 0;
  char mode[16] = "";
  int n = std::sscanf(text, "%lld:%d%n:%15s", &step, &op, &used, mode);
  bool forever = n == 3 && std::string(mode) == "forever";
  if (n < 2 || step < 1 || op < 0 || (n == 2 && text[used]) ||
      (n == 3 && !forever))
    return Status::error("MT_TEST_HOLD='" + std::string(text) +
                         "': expected STEP:OP or STEP:OP:forever");
  monitor.hold(step, op, forever, [=] {
    std::fprintf(stderr, "mtrun: MT_TEST_HOLD: op %d of step %lld waits %s\n",
                 op, step, forever ? "forever" : "for a stop signal");
  });
  return Status::ok();
}

/// --calibrate: the rates of this machine into a target file (with
/// `cuda`, the GPU's), and what was measured on stderr.
Status calibrateTo(const std::string &path, int threads, bool cuda,
                   Communicator *comm) {
  CalibrateOptions c;
  c.path = path;
  c.threads = threads;
  c.comm = comm;
  c.device = deviceMeasure(cuda);
  Calibration got;
  if (Status st = calibrate(c, got); !st)
    return st;
  if (!got.written)
    return Status::ok();
  const mt::plan::Target &t = got.target;
  if (c.device)
    std::fprintf(stderr,
                 "calibrated %s: h2d %.1f GB/s, d2h %.1f GB/s, both %.1f "
                 "GB/s, device copy %.0f GB/s, GEMM bf16 %.0f / fp32 %.1f "
                 "TFLOP/s\n",
                 got.deviceName.c_str(), t.h2d_bytes_per_s() / 1e9,
                 t.d2h_bytes_per_s() / 1e9, t.duplex_bytes_per_s() / 1e9,
                 t.hbm_bytes_per_s() / 1e9, t.matmul_flops_bf16() / 1e12,
                 t.matmul_flops_f32() / 1e12);
  if (comm)
    std::fprintf(stderr,
                 "calibrated the network between ranks 0 and 1 of %d: %.2f "
                 "GB/s, %.1f us latency\n",
                 comm->size(), t.network_bytes_per_s() / 1e9,
                 t.network_latency_s() * 1e6);
  std::fprintf(stderr,
               "calibrated: copy %.2f GB/s, matmul %.2f GFLOP/s, AdamW %.3g "
               "params/s, disk write %.2f / read %.2f GB/s -> %s\n",
               t.host_bytes_per_s() / 1e9, got.hostMatmulFlops / 1e9,
               t.optimizer_params_per_s(), t.disk_write_bytes_per_s() / 1e9,
               t.disk_read_bytes_per_s() / 1e9, path.c_str());
  return Status::ok();
}

// Exit codes (README, "Exit codes"); a signal stops with 128 + its number.
constexpr int kExitNonFinite = 3; // a non-finite step past --max-skips

/// Before allocating: the plan's host memory (with the CPU backend, device
/// arenas are host memory too) against what the machine has available.
Status checkHostMemory(const mt::plan::Plan &plan, bool cuda, uint32_t rank) {
  uint64_t need = 0;
  for (const auto &a : plan.arenas())
    if (a.tier() != mt::plan::DISK && !(cuda && a.tier() == mt::plan::DEVICE) &&
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
  auto gib = [](uint64_t b) {
    char t[32];
    std::snprintf(t, sizeof t, "%.2f GiB", double(b) / double(1ull << 30));
    return std::string(t);
  };
  return Status::error("the plan needs " + gib(need) +
                       " of host memory (its arenas) but this machine has " +
                       gib(have) +
                       " available; plan for this machine (mtc --target "
                       "with --host-mem, or mtrun --calibrate) or free memory");
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

/// The signal every rank stops for after this step (the first any rank
/// was sent; 0: none), so that all stop after the same step.
int agreedStop(const StopWatch &stopWatch, Communicator *comm) {
  int32_t mine = stopWatch.stopSignal();
  if (!comm)
    return mine;
  std::vector<int32_t> all(size_t(comm->size()));
  if (Status st = comm->allGather(&mine, sizeof mine, all.data()); !st)
    return fail(st.message());
  for (int32_t sig : all)
    if (sig)
      return sig;
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  CLI::App app{"mtrun: train with a plan compiled by mtc (mtc MODEL.onnx -o "
               "PLAN.mtp)"};
  app.add_option("plan", o.plan, "The plan file");
  app.add_option("--data", o.data,
                 "Training data, read in order and from the start again at "
                 "its end: a token file (flat little-endian ids, batch x seq "
                 "per micro-batch, every token trained on), or examples: a "
                 ".jsonl file, or a directory of them, one per line with "
                 "input_ids and optionally labels (-100: not trained on, as "
                 "Hugging Face's) or attention_mask (0: padding, dropped). "
                 "Examples are packed (concatenated, each row cut at seq, "
                 "nothing trained across an example's boundary) unless --pad. "
                 "A step's loss is the mean over all its trained tokens");
  app.add_flag("--pad", o.pad,
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
  app.add_option("--steps", o.train.steps, "Optimizer steps (at least 1)")
      ->check(wholeNumber<int64_t>());
  app.add_option("--device", o.device,
                 "Backend: cuda (the GPU; needs a build with CUDA and a "
                 "device), cpu (the reference kernels, host memory only), or "
                 "auto (cuda when there is a usable device, else cpu)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  app.add_option("--lr", o.train.lr, "Peak learning rate (>= 0)");
  app.add_option("--beta1", o.train.beta1, "AdamW beta1, in [0, 1)");
  app.add_option("--beta2", o.train.beta2, "AdamW beta2, in [0, 1)");
  app.add_option("--eps", o.train.eps, "AdamW epsilon (> 0)");
  app.add_option("--weight-decay", o.train.weightDecay,
                 "Decoupled weight decay (>= 0)");
  app.add_option("--grad-clip", o.train.gradClip,
                 "Clip the global gradient norm to this (0: off)");
  app.add_option("--warmup", o.train.warmup, "Linear warmup steps (>= 0)")
      ->check(wholeNumber<int64_t>());
  app.add_option("--lr-schedule", o.schedule,
                 "After warmup: constant, or a cosine or linear decay to "
                 "--min-lr at the last step")
      ->check(CLI::IsMember({"constant", "cosine", "linear"}));
  app.add_flag("--lr-schedule-hf", o.train.huggingFace,
               "Evaluate the schedule as Hugging Face's Trainer does: at the "
               "steps done before each (0 for the first), warming up from 0 "
               "over --warmup steps, decaying to 0 (--min-lr unused): "
               "constant (with warmup), linear, cosine");
  app.add_option("--min-lr", o.train.minLr,
                 "Final learning rate of the cosine (>= 0)");
  app.add_option("--metrics", o.metrics, "Write one JSON line per step here");
  app.add_option("--save", o.save,
                 "Write checkpoints to DIR/step-NNNNNNNN (model.safetensors "
                 "under the model's names, optimizer.safetensors, state.json) "
                 "at the end, every --save-every steps, and on SIGINT or "
                 "SIGTERM; atomically");
  app.add_option("--save-every", o.saveEvery,
                 "Checkpoint every N steps (0: only at the end)")
      ->check(wholeNumber<int64_t>());
  app.add_option("--keep", o.keep,
                 "Keep the newest K checkpoints in --save DIR (0: all)")
      ->check(wholeNumber<int64_t>());
  app.add_option("--resume", o.resume,
                 "Continue from a checkpoint: a step-* directory, or the "
                 "newest one in DIR; --steps is the total to reach");
  app.add_option("--max-skips", o.train.maxSkips,
                 "Skip (and count) up to N steps whose loss or gradient norm "
                 "is not finite; one more stops the run with exit code 3")
      ->check(wholeNumber<int64_t>());
  app.add_option("--threads", o.threads,
                 "Host threads for the CPU kernels and the optimizer (1 to "
                 "4096; default: the machine's)")
      ->check(wholeNumber<int64_t>());
  app.add_option("--init", o.init,
                 "normal: start trainable weights whose data file is missing "
                 "from scratch (normal(0, --init-std); norm scales 1, biases "
                 "0, as the compiler marked them), so a graph-only model "
                 "trains; none: every weight must have its data")
      ->check(CLI::IsMember({"none", "normal"}));
  app.add_option("--init-std", o.initStd,
                 "Standard deviation of --init normal (> 0)");
  app.add_option("--seed", o.seed,
                 "Seed of --init (each weight's values depend on it and the "
                 "weight's name only)")
      ->check(wholeNumber<uint64_t>());
  app.add_option("--model-dir", o.modelDirs,
                 "Where the model's files are now, when they have moved "
                 "away from the plan (repeatable; looked in first, then the "
                 "folders the plan names relative to itself)")
      ->allow_extra_args(false);
  app.add_option("--disk", o.disk,
                 "Directory for the plan's disk tier (AdamW moments; default: "
                 "the one given to mtc --disk). Its files are unlinked at "
                 "creation, so nothing is left behind");
  app.add_option("--trace", o.trace,
                 "Write the measured timeline of the last step as Chrome "
                 "trace JSON (the format of mt-inspect --trace)");
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
  mt::kernels::cpu::setThreads(o.threads);
  PhaseMonitor monitor;
  StopWatch stopWatch(monitor, o.stopTimeout);
  if (Status st = checkOptions(o, app.count("--stop-timeout") > 0); !st)
    return fail(st.message());
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
  bool leader = !comm || comm->rank() == 0;
  bool cuda = false;
  if (Status st = chooseDevice(o.device, cuda); !st)
    return fail(st.message());
  if (!o.calibrate.empty()) {
    if (Status st = calibrateTo(o.calibrate, o.threads, cuda, comm); !st)
      return fail(st.message());
    return 0;
  }
  if (o.plan.empty() || o.data.empty())
    return fail("a plan and --data are required (mtrun PLAN.mtp --data "
                "TOKENS); see --help");

  mt::plan::Plan plan;
  if (Status st = readPlan(o.plan, plan); !st)
    return fail(st.message());
  if (planRanks(plan) > 1 &&
      (!comm || uint32_t(comm->size()) != planRanks(plan)))
    return fail(o.plan + " is a plan for " + std::to_string(planRanks(plan)) +
                " data-parallel ranks" +
                (comm ? ", and mpirun started " + std::to_string(comm->size())
                      : std::string()) +
                ": run it as mpirun -np " + std::to_string(planRanks(plan)) +
                " mtrun " + o.plan + " ...");
  if (comm && planRanks(plan) == 1)
    return fail(o.plan + " is a plan for one process, and mpirun started " +
                std::to_string(comm->size()) +
                ": compile it with mtc --ranks " +
                std::to_string(comm->size()));
  if (std::string lossy = lossyMoments(plan); !lossy.empty())
    std::fprintf(stderr,
                 "mtrun: note: LOSSY: this plan stores the AdamW moments in "
                 "%s (mtc --optimizer-states)\n",
                 lossy.c_str());
  if (plan.optimizer_overlap() == mt::plan::BACKWARD && o.train.gradClip > 0)
    return fail(o.plan +
                " updates each weight during the backward, before "
                "the global gradient norm is known; clipping needs a "
                "plan compiled with mtc --clipping (or --optimizer-overlap "
                "after or next-forward)");
  const auto &shapes = plan.shapes();
  TargetKind kind = TargetKind::Targets;
  for (const auto &in : plan.inputs())
    if (in.role() == mt::plan::LABELS)
      kind = TargetKind::Labels;
  TokenData data;
  namespace fs = std::filesystem;
  std::error_code ec;
  bool examples =
      fs::is_directory(o.data, ec) || fs::path(o.data).extension() == ".jsonl";
  if (o.pad && !examples)
    return fail("--pad fills rows with examples: give --data a .jsonl file "
                "or a directory of them");
  if (examples) {
    int64_t untrained = 0;
    std::string first;
    if (Status st = TokenData::openExamples(
            o.data, shapes.vocab(), shapes.batch(), shapes.seq(), kind,
            o.pad ? Fill::Pad : Fill::Pack, lossRule(plan).ignoreIndex, data,
            untrained, first);
        !st)
      return fail(st.message());
    if (untrained && leader)
      std::fprintf(stderr,
                   "mtrun: warning: %lld example(s) have no token trained on "
                   "(every label -100; the first at %s): they add no loss\n",
                   (long long)untrained, first.c_str());
  } else if (Status st = TokenData::open(
                 o.data, o.dataDtype == "u16" ? TokenType::U16 : TokenType::U32,
                 shapes.vocab(), shapes.batch(), shapes.seq(), kind, data);
             !st) {
    return fail(st.message());
  }

  if (Status st = checkHostMemory(plan, cuda, comm ? comm->rank() : 0); !st)
    return fail(st.message());
  if (!o.save.empty() && leader) {
    // Found out now, not after the training it would have kept (rank 0
    // writes the checkpoints).
    std::error_code ec;
    std::filesystem::create_directories(o.save, ec);
    std::string probe = o.save + "/.mtrun-write-test";
    if (!std::ofstream(probe))
      return fail("--save " + o.save +
                  ": cannot write there (a directory mtrun can create and "
                  "write is needed for checkpoints)");
    std::remove(probe.c_str());
  }
  std::string diskDir = o.disk.empty() ? plan.disk_dir() : o.disk;
  std::unique_ptr<Backend> backend = makeBackend(cuda, o.threads, diskDir);
  backend->joinRanks(comm);
  if (Status st = backend->allocate(plan); !st)
    return fail(st.message());
  if (leader)
    for (const std::string &note : backend->notes())
      std::fprintf(stderr, "mtrun: note: %s\n", note.c_str());
  RunState state;
  WeightSource source{o.plan,    o.modelDirs, o.init == "normal",
                      o.initStd, o.seed,      o.threads};
  int initialised = 0;
  if (Status st =
          loadParameters(plan, *backend, source, o.resume.empty(), initialised);
      !st)
    return fail(st.message());
  if (initialised && leader)
    std::fprintf(stderr,
                 "mtrun: initialised %d weights from scratch (normal, std %g, "
                 "seed %llu; norm scales 1, biases 0)\n",
                 initialised, double(o.initStd), (unsigned long long)o.seed);
  if (!o.resume.empty()) {
    std::string dir;
    if (Status st = findCheckpoint(o.resume, dir); !st)
      return fail(st.message());
    std::vector<std::string> notes;
    if (Status st = loadCheckpoint(dir, plan, *backend, state, notes); !st)
      return fail(st.message());
    if (leader)
      for (const std::string &note : notes)
        std::fprintf(stderr, "mtrun: note: %s\n", note.c_str());
    data.seek(state.dataPosition);
    if (leader)
      std::fprintf(stderr, "mtrun: resumed from %s at step %lld\n", dir.c_str(),
                   (long long)state.step);
  }
  std::FILE *metrics = nullptr;
  if (!o.metrics.empty() && leader &&
      !(metrics = std::fopen(o.metrics.c_str(), o.resume.empty() ? "w" : "a")))
    return fail(o.metrics + ": cannot open the metrics file");
  // A write past a file size limit fails with EFBIG instead of killing us.
  std::signal(SIGXFSZ, SIG_IGN);

  o.train.schedule = o.schedule == "cosine" ? TrainingOptions::Schedule::Cosine
                     : o.schedule == "linear"
                         ? TrainingOptions::Schedule::Linear
                         : TrainingOptions::Schedule::Constant;
  Trainer trainer{o.train, plan, *backend, data, state};
  trainer.tracing = !o.trace.empty();
  trainer.monitor = &monitor;
  trainer.note = [](const std::string &text) {
    std::fprintf(stderr, "mtrun: %s\n", text.c_str());
  };
  stopWatch.trainingBegins(plan.predicted_step_seconds());
  auto start = std::chrono::steady_clock::now();
  int64_t tokensPerStep = shapes.batch() * shapes.seq() * shapes.grad_accum() *
                          int64_t(planRanks(plan));
  int64_t first = state.step + 1;
  auto save = [&] {
    Status st = saveCheckpoint(o.save, plan, *backend, state, o.keep);
    if (st && leader)
      std::fprintf(stderr, "mtrun: saved step %lld to %s\n",
                   (long long)state.step, o.save.c_str());
    return st;
  };
  int stopped = agreedStop(stopWatch, comm); // the signal all ranks stop for
  for (int64_t t = first; t <= o.train.steps && !stopped; ++t) {
    auto stepStart = std::chrono::steady_clock::now();
    StepResult r;
    stopWatch.stepBegins(t);
    if (Status st = trainer.step(t, r); !st)
      return fail(st.message(), trainer.stoppedNonFinite ? kExitNonFinite : 1);
    using Seconds = std::chrono::duration<double>;
    auto now = std::chrono::steady_clock::now();
    double secs = Seconds(now - stepStart).count();
    stopWatch.stepEnds(secs);
    state.step = t;
    state.dataPosition = data.position();
    double elapsed = Seconds(now - start).count();
    stopped = agreedStop(stopWatch, comm);
    if (leader)
      std::fprintf(stderr,
                   "step %lld/%lld  loss %.4f  lr %.2e  %.0f tokens/s  "
                   "elapsed %.1fs  eta %.1fs%s\n",
                   (long long)t, (long long)o.train.steps, r.loss, r.lr,
                   tokensPerStep / secs, elapsed,
                   elapsed / double(t - first + 1) * double(o.train.steps - t),
                   r.skipped ? "  (skipped)" : "");
    if (metrics) {
      std::fprintf(metrics,
                   "{\"step\": %lld, \"loss\": %s, \"lr\": %.9g, "
                   "\"grad_norm\": %s, \"tokens\": %lld, "
                   "\"trained_tokens\": %lld, "
                   "\"step_time_s\": %.6f, \"skipped\": %s}\n",
                   (long long)t, jsonNumber(r.loss).c_str(), r.lr,
                   jsonNumber(r.gradNorm).c_str(),
                   (long long)(tokensPerStep * t), (long long)r.trainedTokens,
                   secs, r.skipped ? "true" : "false");
      std::fflush(metrics);
    }
    if (!o.save.empty() && o.saveEvery > 0 && t % o.saveEvery == 0 &&
        t < o.train.steps && !stopped)
      if (Status st = save(); !st)
        return fail(st.message());
  }
  if (metrics)
    std::fclose(metrics);
  if (int sig = stopped) {
    // Stopped between steps: the checkpoint keeps any pending update as
    // it is, so that a resumed run continues exactly.
    if (!o.save.empty()) {
      if (Status st = save(); !st)
        return fail(st.message());
    }
    if (leader)
      std::fprintf(stderr, "mtrun: stopped by signal %d after step %lld%s\n",
                   sig, (long long)state.step,
                   o.save.empty() ? " (no --save: nothing saved)" : "");
    return 128 + sig;
  }
  if (Status st = trainer.finish(); !st)
    return fail(st.message());
  if (uint64_t stored = backend->diskStoredBytes()) {
    uint64_t raw = 0;
    for (const auto &a : plan.arenas())
      if (a.tier() == mt::plan::DISK)
        raw += a.size_bytes();
    std::fprintf(stderr,
                 "disk tier: %.3f GiB stored for %.3f GiB of state "
                 "(shuffle + zstd: %.1f%%)\n",
                 double(stored) / double(1ull << 30),
                 double(raw) / double(1ull << 30),
                 100.0 * double(stored) / double(raw));
  }
  if (!o.trace.empty() && leader)
    if (Status st = writeChromeTrace(plan, trainer.trace, o.trace); !st)
      return fail(st.message());
  if (!o.save.empty())
    if (Status st = save(); !st)
      return fail(st.message());
  return 0;
}
