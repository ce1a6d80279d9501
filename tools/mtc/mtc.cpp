//===- mtc.cpp - the mt compiler driver -----------------------------------===//
//
// mtc MODEL.onnx -o PLAN.mtp [--batch B --seq S --grad-accum K
//     --compute-dtype fp32|bf16] [--weights FILE.safetensors]
//     [--trainable REGEX] [--frozen REGEX]
// mtc MODEL.onnx --emit=summary|import|mlir|step|sched
//
//===----------------------------------------------------------------------===//
#include "compiler/OnnxImporter.h"
#include "compiler/PlanEmitter.h"
#include "compiler/Summary.h"
#include "dialects/Sched/Transforms/Passes.h"
#include "dialects/Train/Transforms/Passes.h"
#include "runtime/cost_model.h"
#include "runtime/plan_io.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"

#include <sys/statvfs.h>

#include <map>

using namespace llvm;

namespace {

enum class Emit { Summary, Import, Mlir, Step, Sched, Plan };

cl::OptionCategory category("mtc options");
cl::opt<std::string> inputPath(cl::Positional, cl::desc("<model.onnx>"),
                               cl::Required, cl::cat(category));
cl::opt<std::string> outputPath("o",
                                cl::desc("Output file (default: stdout); a "
                                         "name ending in .mtp gets the plan"),
                                cl::value_desc("file"), cl::init("-"),
                                cl::cat(category));
cl::opt<Emit> emit(
    "emit", cl::desc("What to print"), cl::init(Emit::Summary),
    cl::values(clEnumValN(Emit::Summary, "summary",
                          "JSON: parameters, trainable/frozen names, layers, "
                          "templates, inputs, fused and primitive op counts"),
               clEnumValN(Emit::Import, "import",
                          "the train dialect right after import"),
               clEnumValN(Emit::Mlir, "mlir",
                          "the train dialect after the front-end pipeline"),
               clEnumValN(Emit::Step, "step",
                          "the training step: forward, backward and the "
                          "gradient of every trainable weight"),
               clEnumValN(Emit::Sched, "sched",
                          "the schedule: streams, tokens, placed buffers"),
               clEnumValN(Emit::Plan, "plan",
                          "the plan file for mtrun (the default for -o "
                          "*.mtp)")),
    cl::cat(category));
cl::opt<std::string> weightsPath(
    "weights",
    cl::desc("safetensors file whose tensors are the trainable set (matched "
             "by name or by a unique suffix)"),
    cl::value_desc("file"), cl::cat(category));
cl::opt<std::string>
    trainableRe("trainable",
                cl::desc("Mark initializers whose name matches as trainable"),
                cl::value_desc("regex"), cl::cat(category));
cl::opt<std::string>
    frozenRe("frozen",
             cl::desc("Mark initializers whose name matches as frozen"),
             cl::value_desc("regex"), cl::cat(category));
cl::opt<bool> explainFusion(
    "explain-fusion",
    cl::desc("Say, as remarks at each op, why an exporter pattern did not "
             "become a fused op (linear, norm, attention, ...)"),
    cl::cat(category));
cl::opt<int64_t> batch("batch",
                       cl::desc("Batch size for a dynamic dim 0 of inputs"),
                       cl::init(0), cl::cat(category));
cl::opt<int64_t>
    seqLen("seq", cl::desc("Sequence length for a dynamic dim 1 of inputs"),
           cl::init(0), cl::cat(category));
cl::opt<int64_t> gradAccum("grad-accum",
                           cl::desc("Micro-batches per optimizer step"),
                           cl::init(1), cl::cat(category));
enum class Order { MicroBatch, Layer };
cl::opt<Order> microBatchOrder(
    "micro-batch-order",
    cl::desc("With --grad-accum K > 1, the order of the step's work: "
             "micro-batch (default: the whole forward and backward of one "
             "micro-batch, then the next: streamed weights cross 2K times, "
             "gradients leave K times) or layer (each layer over all K "
             "micro-batches before the next: weights cross at most twice, "
             "each gradient is summed on the device and leaves once, for "
             "K sets of layer checkpoints). Exact either way: the same "
             "losses to the bit"),
    cl::init(Order::MicroBatch),
    cl::values(clEnumValN(Order::MicroBatch, "micro-batch",
                          "one micro-batch after another"),
               clEnumValN(Order::Layer, "layer",
                          "each layer over all micro-batches")),
    cl::cat(category));
cl::opt<bool> streamWeights(
    "stream-weights",
    cl::desc("Copy each layer's weights to the device just before its "
             "forward and again before its backward, instead of keeping all "
             "weights on the device"),
    cl::init(false), cl::cat(category));
cl::opt<std::string> lookahead(
    "lookahead",
    cl::desc("With --stream-weights: issue each copy this many weights ahead "
             "of its first use, or auto: plan with 2, 4, 8, 16 and 32 and "
             "keep the fastest that fits (five compilations)"),
    cl::init("8"), cl::cat(category));
cl::opt<std::string> residentBelow(
    "resident-below",
    cl::desc("With --stream-weights: keep weights smaller than this on the "
             "device, copied once per step (norm scales, biases)"),
    cl::init("1MiB"), cl::cat(category));
cl::opt<int64_t> chunkHeadRows(
    "chunk-head-rows",
    cl::desc("Compute the head and the loss this many tokens at a time so "
             "that the whole batch's logits never exist (0: in one piece)"),
    cl::init(4096), cl::cat(category));
enum class Recompute { Layers, None };
cl::opt<Recompute> recompute(
    "recompute",
    cl::desc("What the backward recomputes: layers (default: each layer's "
             "forward from its input, which is all the step keeps) or none "
             "(every activation the backward reads is kept: a quarter less "
             "work, more device memory; exact either way)"),
    cl::init(Recompute::Layers),
    cl::values(clEnumValN(Recompute::Layers, "layers",
                          "recompute each layer from its input"),
               clEnumValN(Recompute::None, "none", "keep the activations")),
    cl::cat(category));
cl::opt<std::string> weightLink(
    "weight-link",
    cl::desc("With --compute-dtype bf16, what a trainable weight's copy to "
             "the device carries: compute (default: a bf16 copy of every "
             "weight in pinned memory, refreshed after each update: 2 more "
             "host bytes per parameter) or fp32 (the master itself, cast to "
             "bf16 on the device: twice the bytes over the link, no copy on "
             "the host). Exact either way: the same bf16 values"),
    cl::init("compute"), cl::cat(category));
cl::opt<bool> offloadActivations(
    "offload-activations",
    cl::desc("Keep the checkpoints the backward recomputes from (layer "
             "inputs) in pinned host memory between forward and backward"),
    cl::init(false), cl::cat(category));
cl::opt<std::string> offloadFraction(
    "offload-fraction",
    cl::desc("With --offload-activations: offload this fraction of the "
             "checkpoints (those away from the device longest; the rest stay "
             "on it), or auto: plan with 0.25, 0.5, 0.75 and 1 and keep the "
             "fastest that fits (fewer offloads when equally fast)"),
    cl::init("1"), cl::cat(category));
cl::opt<std::string> target(
    "target",
    cl::desc("The machine to plan for: h200, h100, a100, rtx4090, cpu, or a "
             "JSON target file"),
    cl::init("cpu"), cl::cat(category));
cl::opt<std::string>
    gpuMem("gpu-mem",
           cl::desc("Device memory budget (e.g. 80GiB; default: the target's)"),
           cl::cat(category));
cl::opt<std::string> hostMem(
    "host-mem",
    cl::desc("Host memory budget for master weights, gradients and moments "
             "(default: the target's host memory)"),
    cl::cat(category));
cl::opt<std::string> diskDir(
    "disk",
    cl::desc("Directory for the disk tier: with it, the AdamW moments may "
             "live on disk (see --moments); mtrun uses it unless told "
             "otherwise"),
    cl::value_desc("dir"), cl::cat(category));
cl::opt<std::string>
    diskMem("disk-mem",
            cl::desc("Disk budget (default: the free space of --disk)"),
            cl::cat(category));
cl::opt<std::string> momentsHome(
    "moments",
    cl::desc("Where the AdamW moments live: host, disk (needs --disk), or "
             "auto (host when it fits the host budget, else disk when --disk "
             "is given)"),
    cl::init("auto"), cl::cat(category));
cl::opt<std::string> diskFormat(
    "disk-format",
    cl::desc("How the disk tier stores moments: raw, or shuffle-zstd "
             "(lossless: bytes regrouped by position, then zstd; fewer "
             "bytes written for host CPU time)"),
    cl::init("raw"), cl::cat(category));
cl::opt<std::string> pinnedMem(
    "pinned-mem",
    cl::desc("Pinned host memory budget (default: a quarter of the host "
             "budget)"),
    cl::cat(category));
cl::opt<bool> suggest(
    "suggest",
    cl::desc("Search micro-batch size (with --batch), weight streaming, "
             "activation offload and optimizer overlap for the fastest plan "
             "that fits the budgets; print the candidates and write the best"),
    cl::init(false), cl::cat(category));
cl::opt<bool> explain(
    "explain",
    cl::desc("Print the plan's predicted step (with -o, or alone without "
             "writing a plan): time per stream, bytes per link, memory per "
             "tier against its budget, the bottleneck"),
    cl::init(false), cl::cat(category));
cl::opt<std::string> optimizerStates(
    "optimizer-states",
    cl::desc("AdamW moments: fp32 (default, exact), bf16 (LOSSY: half the "
             "bytes), 8bit (LOSSY: blockwise 8-bit with a scale per 256 "
             "elements, about a quarter) or 4bit (LOSSY: blockwise 4-bit, "
             "two a byte, the same scales: about an eighth); lossy formats "
             "only when asked for"),
    cl::init("fp32"), cl::cat(category));
cl::opt<std::string> optimizerOverlap(
    "optimizer-overlap",
    cl::desc("When AdamW runs: after (the whole backward), backward (each "
             "weight as soon as its gradient is complete; exact without "
             "clipping) or next-forward (each weight in the next step, just "
             "before its copy to the device; exact with clipping)"),
    cl::init("after"), cl::cat(category));
cl::opt<std::string> computeDtype(
    "compute-dtype",
    cl::desc("Storage of activations and device weights: fp32 or bf16 "
             "(fp32 math, fp32 master weights and moments either way)"),
    cl::init("fp32"), cl::cat(category));

/// Prints diagnostics as "mtc: error: <file>: node '<name>': <message>".
/// Importer messages already name the file and node; others get them from
/// their location.
std::string describe(mlir::Location loc) {
  if (auto name = dyn_cast<mlir::NameLoc>(loc)) {
    std::string file;
    if (auto f = dyn_cast<mlir::FileLineColLoc>(name.getChildLoc()))
      file = f.getFilename().str();
    return file + ": node '" + name.getName().str() + "': ";
  }
  if (auto f = dyn_cast<mlir::FileLineColLoc>(loc))
    return f.getFilename().str() + ": ";
  return "";
}

/// The largest --batch, --seq, --grad-accum and --chunk-head-rows: small
/// enough that no element or byte count they multiply overflows.
constexpr int64_t kMaxDim = int64_t(1) << 24;

/// Bytes of "80GiB", "1.5TB", "512MiB" or a plain number; -1 if invalid.
int64_t parseSize(StringRef text) {
  static const std::pair<const char *, double> units[] = {
      {"TiB", 1099511627776.0},
      {"GiB", 1073741824.0},
      {"MiB", 1048576.0},
      {"KiB", 1024.0},
      {"TB", 1e12},
      {"GB", 1e9},
      {"MB", 1e6},
      {"KB", 1e3},
      {"B", 1.0}};
  double scale = 1;
  for (auto [suffix, factor] : units)
    if (text.consume_back(suffix)) {
      scale = factor;
      break;
    }
  double value;
  // Finite, not negative, and below 2^63 bytes once scaled.
  if (text.trim().getAsDouble(value) || !(value >= 0) ||
      !(value * scale < 9.2e18))
    return -1;
  return int64_t(value * scale);
}

/// Bytes in GiB, or in MiB or KiB below one of the larger unit.
std::string gib(double bytes) {
  if (bytes >= 1073741824.0)
    return llvm::formatv("{0:F2} GiB", bytes / 1073741824.0).str();
  if (bytes >= 1048576.0)
    return llvm::formatv("{0:F2} MiB", bytes / 1048576.0).str();
  return llvm::formatv("{0:F2} KiB", bytes / 1024.0).str();
}

/// What --suggest searches over (and what the flags choose without it).
struct Schedule {
  int64_t batch, gradAccum;
  bool stream, offload;
  std::string overlap;
  bool momentsOnDisk = false;
  int64_t lookahead = 8;
  double offloadFraction = 1.0;
  bool keep = false;     ///< --recompute none: the backward recomputes nothing
  bool fp32Link = false; ///< --weight-link fp32
  bool layerMajor = false; ///< --micro-batch-order layer
  std::string flags() const {
    std::string f;
    if (batch)
      f += "--batch " + std::to_string(batch) + " ";
    f += "--grad-accum " + std::to_string(gradAccum);
    if (stream)
      f += " --stream-weights --lookahead " + std::to_string(lookahead);
    if (offload)
      f += " --offload-activations --offload-fraction " +
           llvm::formatv("{0}", offloadFraction).str();
    f += " --optimizer-overlap " + overlap;
    f += keep ? " --recompute none" : " --recompute layers";
    if (fp32Link)
      f += " --weight-link fp32";
    if (layerMajor)
      f += " --micro-batch-order layer";
    return f + (momentsOnDisk ? " --moments disk" : " --moments host");
  }
};

/// Schedules around `user`: micro-batches of the user's batch split 1, 2, 4
/// or 8 ways (when the model's batch is dynamic: `splittable`), weights
/// resident or streamed, activations kept or offloaded, the optimizer after
/// the backward, during it, or during the next forward, and (unless the
/// user gave --recompute) each layer recomputed in the backward or nothing
/// recomputed. Precision and state formats are never changed: every
/// candidate is as exact as the user's.
std::vector<Schedule> searchSpace(const Schedule &user, bool splittable,
                                  bool recomputeGiven, bool linkChoice) {
  std::vector<bool> keeps = {user.keep}, links = {user.fp32Link};
  if (!recomputeGiven)
    keeps = {false, true};
  if (linkChoice)
    links = {false, true};
  std::vector<Schedule> out;
  for (int64_t split : {1, 2, 4, 8}) {
    if (split > 1 && (!splittable || user.batch == 0 || user.batch % split))
      continue;
    for (bool keep : keeps)
      for (bool link : links)
        for (bool stream : {false, true})
          for (bool offload : {false, true})
            for (const char *overlap : {"after", "backward", "next-forward"}) {
              // Without recompute there are no layer checkpoints to offload.
              if (keep && offload)
                continue;
              out.push_back({user.batch / split, user.gradAccum * split, stream,
                             offload, overlap, user.momentsOnDisk,
                             user.lookahead, user.offloadFraction, keep, link});
            }
  }
  return out;
}

/// The model through the front end, for `what` (up to the training step
/// for the back end).
mlir::OwningOpRef<mlir::ModuleOp> frontEnd(mlir::MLIRContext &context,
                                           const mt::ImportOptions &options,
                                           Emit what, bool keep,
                                           mlir::TimingScope &timing) {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  {
    mlir::TimingScope importTiming = timing.nest("Import");
    module = mt::importOnnxModel(context, options);
  }
  if (!module || what == Emit::Import)
    return module;
  mlir::PassManager pm(&context);
  if (failed(mlir::applyPassManagerCLOptions(pm)))
    return nullptr;
  pm.enableTiming(timing);
  mt::train::buildFrontendPipeline(pm, explainFusion, /*outline=*/!keep);
  if (what == Emit::Step || what == Emit::Sched || what == Emit::Plan)
    pm.addPass(mt::train::createDeriveTrainingStepPass());
  if (failed(pm.run(*module)))
    return nullptr;
  return module;
}

/// The back end of one schedule on a copy of the training step.
mlir::OwningOpRef<mlir::ModuleOp>
backEnd(mlir::ModuleOp step, const Schedule &s, mlir::TimingScope &timing) {
  mlir::OwningOpRef<mlir::ModuleOp> module = step.clone();
  mlir::PassManager pm(step.getContext());
  if (failed(mlir::applyPassManagerCLOptions(pm)))
    return nullptr;
  pm.enableTiming(timing);
  mt::sched::BackendOptions o;
  o.chunkHeadRows = chunkHeadRows.getValue();
  o.gradAccum = s.gradAccum;
  o.computeDtype = computeDtype.getValue();
  o.optimizerOverlap = s.overlap;
  o.optimizerStates = optimizerStates.getValue();
  o.weightLink = s.fp32Link ? "fp32" : "compute";
  o.layerMajor = s.layerMajor && s.gradAccum > 1;
  o.streamWeights = s.stream;
  o.lookahead = s.lookahead;
  o.residentBelow = parseSize(residentBelow);
  o.offloadActivations = s.offload;
  o.offloadFraction = s.offloadFraction;
  o.momentsOnDisk = s.momentsOnDisk;
  o.diskFormat = diskFormat.getValue();
  mt::sched::buildBackendPipeline(pm, o);
  if (failed(pm.run(*module)))
    return nullptr;
  return module;
}

/// The front end of each micro-batch size once (importing is most of a
/// compile on a large model), then each schedule's back end on a copy.
class Compiler {
public:
  Compiler(mlir::MLIRContext &context, mlir::TimingScope &timing)
      : context_(context), timing_(timing) {}

  /// The training step of `options`' micro-batch size, with or without
  /// recompute (`keep`), or null (said).
  mlir::ModuleOp step(const mt::ImportOptions &options, bool keep) {
    auto key = std::make_pair(options.batch, keep);
    auto it = steps_.find(key);
    if (it == steps_.end()) {
      mlir::OwningOpRef<mlir::ModuleOp> step =
          frontEnd(context_, options, Emit::Step, keep, timing_);
      if (!step)
        return nullptr; // not kept: the next try says it again
      it = steps_.emplace(key, std::move(step)).first;
    }
    return *it->second;
  }

  mlir::OwningOpRef<mlir::ModuleOp> compile(const mt::ImportOptions &options,
                                            Emit what, const Schedule &s) {
    if (what != Emit::Step && what != Emit::Sched && what != Emit::Plan)
      return frontEnd(context_, options, what, s.keep, timing_);
    mlir::ModuleOp trainStep = step(options, s.keep);
    if (!trainStep)
      return nullptr;
    if (what == Emit::Step)
      return trainStep.clone();
    return backEnd(trainStep, s, timing_);
  }

private:
  mlir::MLIRContext &context_;
  mlir::TimingScope &timing_;
  /// By micro-batch size and whether nothing is recomputed.
  std::map<std::pair<int64_t, bool>, mlir::OwningOpRef<mlir::ModuleOp>> steps_;
};

/// Memory budgets per tier, in bytes.
struct Budgets {
  int64_t device, pinned, host, disk;
};

/// The flags, or the target's memories (pinned: a quarter of the host's;
/// disk: the free space of --disk).
bool readBudgets(const mt::plan::Target &t, Budgets &b) {
  b.device = int64_t(t.gpu_memory_bytes());
  b.host = int64_t(t.host_memory_bytes());
  b.disk = 0;
  if (!diskDir.empty()) {
    struct statvfs fs {};
    if (::statvfs(diskDir.c_str(), &fs) != 0) {
      errs() << "mtc: error: --disk '" << diskDir
             << "' is not a directory that can be read\n";
      return false;
    }
    b.disk = int64_t(fs.f_bavail) * int64_t(fs.f_frsize);
  }
  for (auto [flag, text, value] :
       {std::tuple<const char *, std::string, int64_t *>{"--gpu-mem", gpuMem,
                                                         &b.device},
        {"--host-mem", hostMem, &b.host},
        {"--disk-mem", diskMem, &b.disk}})
    if (!text.empty() && (*value = parseSize(text)) < 0) {
      errs() << "mtc: error: " << flag << " '" << text
             << "' is not a size (e.g. 80GiB)\n";
      return false;
    }
  b.pinned = b.host / 4;
  if (!pinnedMem.empty() && (b.pinned = parseSize(pinnedMem)) < 0) {
    errs() << "mtc: error: --pinned-mem '" << pinnedMem
           << "' is not a size (e.g. 80GiB)\n";
    return false;
  }
  return true;
}

/// Bytes of the plan's arenas of each tier; host counts pinned memory too.
struct TierBytes {
  int64_t device = 0, pinned = 0, host = 0, disk = 0;
};

TierBytes tierBytes(const mt::plan::Plan &plan) {
  TierBytes t;
  for (const auto &a : plan.arenas()) {
    int64_t n = int64_t(a.size_bytes());
    switch (a.tier()) {
    case mt::plan::DEVICE:
      t.device += n;
      break;
    case mt::plan::HOST_PINNED:
      t.pinned += n;
      t.host += n;
      break;
    case mt::plan::DISK:
      t.disk += n;
      break;
    default:
      t.host += n;
    }
  }
  return t;
}

/// The plan's peaks are exact: whether every tier fits, and if not, the
/// reason with the smallest budget that would.
bool fits(const mt::plan::Plan &plan, const Budgets &b, const Schedule &s,
          std::string &why) {
  TierBytes need = tierBytes(plan);
  double moments = double(mt::runtime::momentBytes(plan));
  struct Check {
    const char *tier, *flag, *byDefault;
    int64_t need, budget;
    std::string hint;
  };
  std::string hostHint =
      s.momentsOnDisk
          ? "the moments are on disk already; host memory holds the fp32 "
            "master weights and gradient accumulators (8 bytes per "
            "parameter) and, with bf16 compute, the weights' pinned bf16 "
            "copy (2 bytes), which stay there"
      : diskDir.empty() ? "--disk DIR lets the AdamW moments (" + gib(moments) +
                              ") live on disk"
                        : "--moments disk keeps the AdamW moments (" +
                              gib(moments) + ") on disk";
  Check checks[] = {
      {"device", "--gpu-mem", "the target's", need.device, b.device,
       !s.stream               ? "--stream-weights lowers it"
       : !s.offload            ? "--offload-activations lowers it"
       : s.offloadFraction < 1 ? "a larger --offload-fraction lowers it"
                               : "a smaller --batch or --seq lowers it"},
      {"host (pinned included)", "--host-mem", "the target's", need.host,
       b.host, hostHint},
      {"pinned host", "--pinned-mem", "a quarter of the host budget",
       need.pinned, b.pinned,
       "pinned memory is host memory: raise --pinned-mem"},
      {"disk", diskDir.empty() ? "--disk" : "--disk-mem",
       "the free space of --disk", need.disk, b.disk,
       diskDir.empty() ? "--disk DIR names where it goes"
                       : "free space on --disk or a raised --disk-mem"},
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

/// The --explain table of a plan on its target.
void printExplain(const mt::plan::Plan &plan, const mt::runtime::Prediction &r,
                  const Budgets &budgets, raw_ostream &os) {
  const auto &t = plan.target();
  const auto &s = plan.shapes();
  double tokens = double(s.batch() * s.seq() * s.grad_accum());
  std::string lossy = mt::runtime::lossyMoments(plan);
  if (!lossy.empty())
    os << "LOSSY: AdamW moments are stored in " << lossy
       << " (--optimizer-states " << optimizerStates << ")\n";
  os << llvm::formatv("predicted on {0}: {1:F3} s/step, {2:F0} tokens/s, "
                      "{3:F1} TFLOP/s of model math\n",
                      t.name(), r.stepSeconds, tokens / r.stepSeconds,
                      r.flops / r.stepSeconds / 1e12);
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
    std::string budget =
        a.tier() == mt::plan::DEVICE ? gib(double(budgets.device))
        : a.tier() == mt::plan::HOST_PINNED
            ? gib(double(budgets.pinned)) + " pinned"
        : a.tier() == mt::plan::DISK ? gib(double(budgets.disk)) + " disk"
                                     : "";
    os << llvm::formatv("  {0,-14} {1,12}   {2}\n", a.name(),
                        gib(double(a.size_bytes())), budget);
  }
  os << llvm::formatv("  {0,-14} {1,12}   {2}\n", "host, in all",
                      gib(double(tierBytes(plan).host)),
                      gib(double(budgets.host)));
  int b = r.bottleneckStream;
  os << "\n" << mt::runtime::describeCrossings(plan) << "\n";
  os << "\nbottleneck: the " << plan.streams(b).name() << " stream ("
     << llvm::formatv("{0:F0}", 100 * r.streamBusySeconds[b] / r.stepSeconds)
     << "% of the step busy)";
  switch (plan.streams(b).kind()) {
  case mt::plan::COMPUTE:
    os << (plan.compute_dtype() == mt::plan::F32
               ? ": compute-bound; bf16 compute (--compute-dtype bf16) raises "
                 "the matmul rate\n"
               : ": compute-bound, as it should be: the transfers and the "
                 "optimizer hide behind the math\n");
    break;
  case mt::plan::HOST_TO_DEVICE:
  case mt::plan::DEVICE_TO_HOST:
    os << ": transfer-bound; a larger batch gives each copied byte more "
          "math to hide behind\n";
    break;
  case mt::plan::DISK_IO:
    os << ": disk-bound: every step reads and writes all the moments; "
          "host memory for them (--moments host), bf16 moments "
          "(--optimizer-states bf16, lossy) or more micro-batches per step "
          "(--grad-accum) help\n";
    break;
  default:
    os << ": optimizer-bound; more host threads or fewer optimizer steps "
          "(--grad-accum) help\n";
  }
}

void printCandidate(const mt::plan::Plan &plan,
                    const mt::runtime::Prediction &r, const Schedule &s,
                    bool ok, raw_ostream &os) {
  TierBytes t = tierBytes(plan);
  double tokens = double(plan.shapes().batch() * plan.shapes().seq() *
                         plan.shapes().grad_accum());
  os << llvm::formatv(
      "{0,5} x {1,-11}  {2,-8}  {3,-9}  {4,-12}  {5,-9}  {6,-7}  {7,-7}  "
      "{8,10}  {9,10}  {10,10}  {11,8:F3}  {12,9:F0}  {13}\n",
      plan.shapes().batch(), s.gradAccum, s.stream ? "yes" : "no",
      s.offload ? "yes" : "no", s.overlap, s.keep ? "none" : "layers",
      s.fp32Link ? "fp32" : "compute", s.momentsOnDisk ? "disk" : "host",
      gib(double(t.device)), gib(double(t.pinned)), gib(double(t.host)),
      r.stepSeconds, tokens / r.stepSeconds, ok ? "yes" : "no");
}

} // namespace

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  mlir::registerMLIRContextCLOptions();
  mlir::registerPassManagerCLOptions();
  mlir::registerDefaultTimingManagerCLOptions();
  mlir::registerAsmPrinterCLOptions();
  cl::ParseCommandLineOptions(
      argc, argv,
      "mtc: compile an ONNX export of a decoder-only LLM for training\n\n"
      "Imports the model into the train dialect (never reading weight data),\n"
      "folds constants, fuses what exporters emit into fused ops, outlines\n"
      "the repeated decoder layers, and prints what it understood.\n");

  mlir::MLIRContext context;
  context.printOpOnDiagnostic(false);
  mlir::ScopedDiagnosticHandler handler(&context, [](mlir::Diagnostic &d) {
    std::string msg = d.str();
    std::string where = describe(d.getLocation());
    if (!where.empty() &&
        StringRef(msg).starts_with(where.substr(0, where.find(':'))))
      where.clear();
    errs() << "mtc: "
           << (d.getSeverity() == mlir::DiagnosticSeverity::Error ? "error: "
                                                                  : "note: ")
           << where << msg << "\n";
    return mlir::success();
  });

  mt::ImportOptions options;
  options.modelPath = inputPath;
  options.weightsPath = weightsPath;
  options.trainableRegex = trainableRe;
  options.frozenRegex = frozenRe;
  options.batch = batch;
  options.seq = seqLen;
  if (computeDtype != "fp32" && computeDtype != "bf16") {
    errs() << "mtc: error: --compute-dtype must be fp32 or bf16, got '"
           << computeDtype << "'\n";
    return 1;
  }
  if (optimizerStates != "fp32" && optimizerStates != "bf16" &&
      optimizerStates != "8bit" && optimizerStates != "4bit") {
    errs() << "mtc: error: --optimizer-states must be fp32, bf16, 8bit or "
              "4bit, got '"
           << optimizerStates << "'\n";
    return 1;
  }
  if (optimizerOverlap != "after" && optimizerOverlap != "backward" &&
      optimizerOverlap != "next-forward") {
    errs() << "mtc: error: --optimizer-overlap must be after, backward or "
              "next-forward, got '"
           << optimizerOverlap << "'\n";
    return 1;
  }
  if (weightLink != "compute" && weightLink != "fp32") {
    errs() << "mtc: error: --weight-link must be compute or fp32, got '"
           << weightLink << "'\n";
    return 1;
  }
  if (microBatchOrder == Order::Layer && recompute == Recompute::None) {
    errs() << "mtc: error: --micro-batch-order layer orders the step by its "
              "outlined layers, which --recompute none does not have; use "
              "--recompute layers\n";
    return 1;
  }
  if (lookahead != "auto" &&
      (lookahead.empty() ||
       !std::all_of(lookahead.begin(), lookahead.end(), ::isdigit) ||
       lookahead.size() > 6 || std::stoll(lookahead) < 1)) {
    errs() << "mtc: error: --lookahead must be auto or a number of weights "
              "from 1 to 999999, got '"
           << lookahead << "'\n";
    return 1;
  }
  if (offloadFraction != "auto") {
    char *end = nullptr;
    double f = std::strtod(offloadFraction.c_str(), &end);
    if (offloadFraction.empty() || *end || !(f >= 0 && f <= 1)) {
      errs() << "mtc: error: --offload-fraction must be auto or a number from "
                "0 to 1, got '"
             << offloadFraction << "'\n";
      return 1;
    }
  }
  if (parseSize(residentBelow) < 0) {
    errs() << "mtc: error: --resident-below '" << residentBelow
           << "' is not a size (e.g. 1MiB)\n";
    return 1;
  }
  if (chunkHeadRows < 0 || chunkHeadRows > kMaxDim) {
    errs() << "mtc: error: --chunk-head-rows must be from 0 (one piece) to "
           << kMaxDim << ", got " << int64_t(chunkHeadRows) << "\n";
    return 1;
  }
  // Counts of tokens and micro-batches: given, they are at least 1, and
  // small enough that no shape or byte count they multiply overflows.
  for (auto [flag, option] :
       {std::pair<const char *, cl::opt<int64_t> *>{"--batch", &batch},
        {"--seq", &seqLen},
        {"--grad-accum", &gradAccum}}) {
    if (option->getNumOccurrences() && (*option < 1 || *option > kMaxDim)) {
      errs() << "mtc: error: " << flag << " must be from 1 to " << kMaxDim
             << ", got " << int64_t(*option) << "\n";
      return 1;
    }
  }

  mlir::DefaultTimingManager tm;
  mlir::applyDefaultTimingManagerCLOptions(tm);
  mlir::TimingScope timing = tm.getRootScope();

  Emit what = emit;
  if (emit.getNumOccurrences() == 0 && StringRef(outputPath).ends_with(".mtp"))
    what = Emit::Plan;
  // --suggest and --explain plan, with or without -o: what they print is
  // about the plan.
  if (suggest || (explain && emit.getNumOccurrences() == 0))
    what = Emit::Plan;
  Schedule chosen{batch, gradAccum, streamWeights, offloadActivations,
                  optimizerOverlap};
  chosen.keep = recompute == Recompute::None;
  chosen.fp32Link = weightLink == "fp32";
  chosen.layerMajor = microBatchOrder == Order::Layer;
  Compiler compiler(context, timing);
  if (what != Emit::Plan) {
    mlir::OwningOpRef<mlir::ModuleOp> module =
        compiler.compile(options, what, chosen);
    if (!module)
      return 1;
    std::string error;
    auto output = mlir::openOutputFile(outputPath, &error);
    if (!output) {
      errs() << "mtc: error: " << error << "\n";
      return 1;
    }
    if (what == Emit::Summary)
      mt::printSummary(*module, output->os());
    else
      module->print(output->os());
    output->keep();
    return 0;
  }

  Budgets budgets;
  mt::plan::Target targetDesc;
  if (mt::runtime::Status st = mt::runtime::loadTarget(target, targetDesc);
      !st) {
    errs() << "mtc: error: --target: " << st.message() << "\n";
    return 1;
  }
  if (!readBudgets(targetDesc, budgets))
    return 1;
  if (momentsHome != "host" && momentsHome != "disk" && momentsHome != "auto") {
    errs() << "mtc: error: --moments must be host, disk or auto, got '"
           << momentsHome << "'\n";
    return 1;
  }
  if (diskFormat != "raw" && diskFormat != "shuffle-zstd") {
    errs() << "mtc: error: --disk-format must be raw or shuffle-zstd, got '"
           << diskFormat << "'\n";
    return 1;
  }
  if (momentsHome == "disk" && diskDir.empty()) {
    errs() << "mtc: error: --moments disk needs a directory: --disk DIR\n";
    return 1;
  }
  // auto: host first (faster), disk as well when there is a disk.
  std::vector<bool> homes = {momentsHome == "disk"};
  if (momentsHome == "auto" && !diskDir.empty())
    homes = {false, true};
  // --offload-fraction auto: fewer offloads first (kept when as fast).
  std::vector<double> fractions = {1.0};
  if (offloadFraction == "auto")
    fractions = {0.25, 0.5, 0.75, 1.0};
  else
    fractions = {std::stod(offloadFraction)};
  // --lookahead auto: each streamed schedule with every prefetch distance.
  std::vector<int64_t> lookaheads = {8};
  if (lookahead == "auto")
    lookaheads = {2, 4, 8, 16, 32};
  else
    lookaheads = {std::stoll(lookahead)};
  // The micro-batch can be split only when the export leaves the batch
  // dynamic.
  bool splittable = false;
  if (suggest) {
    // The model itself must compile (with the user's batch): its errors
    // are reported as such, not as 48 skipped candidates.
    if (!compiler.step(options, chosen.keep))
      return 1;
    auto fixed = mt::fixedBatchOf(context, inputPath);
    if (failed(fixed))
      return 1;
    splittable = !fixed->has_value();
    if (!splittable && batch > 1)
      errs() << "mtc: note: the model fixes the batch at " << **fixed
             << ", so --suggest does not split it into micro-batches\n";
  }
  std::vector<Schedule> candidates;
  for (bool onDisk : homes) {
    Schedule c = chosen;
    c.momentsOnDisk = onDisk;
    for (Schedule x :
         suggest ? searchSpace(c, splittable, recompute.getNumOccurrences() > 0,
                               computeDtype == "bf16" &&
                                   weightLink.getNumOccurrences() == 0)
                 : std::vector{c})
      for (int64_t ahead : x.stream ? lookaheads : std::vector<int64_t>{8})
        for (double f : x.offload ? fractions : std::vector<double>{1.0}) {
          x.lookahead = ahead;
          x.offloadFraction = f;
          candidates.push_back(x);
        }
  }
  SmallString<256> diskPath(diskDir);
  if (!diskDir.empty())
    llvm::sys::fs::make_absolute(diskPath);
  mt::plan::Plan best;
  mt::runtime::Prediction bestPrediction;
  std::optional<Schedule> bestSchedule;
  std::string why;
  if (suggest)
    outs()
        << "micro-batch x accum  streamed  offloaded  optimizer     "
           "recompute  link     moments      device      pinned   host (all)  "
           "  s/step   tokens/s  fits\n";
  for (const Schedule &c : candidates) {
    mt::ImportOptions o = options;
    o.batch = c.batch;
    // With --suggest, a candidate that does not compile (a split batch the
    // model's shapes refuse) is skipped with its reason (the first error),
    // and the search goes on.
    std::string failure;
    std::optional<mlir::ScopedDiagnosticHandler> capture;
    if (suggest)
      capture.emplace(&context, [&](mlir::Diagnostic &d) {
        if (failure.empty() &&
            d.getSeverity() == mlir::DiagnosticSeverity::Error)
          failure = d.str();
        return mlir::success();
      });
    mlir::OwningOpRef<mlir::ModuleOp> module =
        compiler.compile(o, Emit::Plan, c);
    capture.reset();
    if (!module && suggest) {
      outs() << "  skipped " << c.flags() << ": " << failure << "\n";
      if (why.empty())
        why = failure;
      continue;
    }
    if (!module)
      return 1;
    mt::plan::Plan plan;
    if (failed(mt::emitPlan(*module, plan)))
      return 1;
    *plan.mutable_target() = targetDesc;
    if (c.momentsOnDisk)
      plan.set_disk_dir(diskPath.str().str());
    mt::runtime::Prediction prediction =
        mt::runtime::simulate(plan, targetDesc);
    plan.set_predicted_step_seconds(prediction.stepSeconds);
    std::string reason;
    bool ok = fits(plan, budgets, c, reason);
    if (suggest)
      printCandidate(plan, prediction, c, ok, outs());
    if (!ok) {
      // Without --suggest, the last refusal is the one with the least host
      // memory (the moments on disk when auto tried both).
      if (homes.size() > 1)
        reason = std::string(c.momentsOnDisk ? "with the AdamW moments on "
                                               "disk, "
                                             : "with the AdamW moments in "
                                               "host memory, ") +
                 reason;
      if (why.empty() || !suggest)
        why = reason;
      continue;
    }
    double tokens = double(plan.shapes().batch() * plan.shapes().seq() *
                           plan.shapes().grad_accum());
    double bestTokens =
        bestSchedule ? double(best.shapes().batch() * best.shapes().seq() *
                              best.shapes().grad_accum()) /
                           bestPrediction.stepSeconds
                     : 0;
    if (!bestSchedule || tokens / prediction.stepSeconds > bestTokens) {
      best = plan;
      bestPrediction = prediction;
      bestSchedule = c;
    }
  }
  if (!bestSchedule) {
    if (suggest)
      errs() << "mtc: error: no schedule fits the budgets; the first "
                "refusal: "
             << why << "\n";
    else
      errs() << "mtc: error: " << why << "\n";
    return 1;
  }
  if (suggest)
    outs() << "fastest that fits: " << bestSchedule->flags() << "\n";
  else if (lookaheads.size() > 1 && bestSchedule->stream)
    errs() << "mtc: note: --lookahead auto chose " << bestSchedule->lookahead
           << " (the fastest that fits)\n";
  if (!suggest && fractions.size() > 1 && bestSchedule->offload)
    errs() << "mtc: note: --offload-fraction auto chose "
           << llvm::formatv("{0}", bestSchedule->offloadFraction)
           << " (the fastest that fits)\n";
  if (explain)
    printExplain(best, bestPrediction, budgets, outs());
  if (outputPath == "-") {
    if (suggest || explain)
      return 0;
    errs() << "mtc: error: a plan needs an output file: -o PLAN.mtp\n";
    return 1;
  }
  // The model's bytes are found from the plan's folder, so that the two
  // can move together.
  mt::runtime::relocateData(best, outputPath);
  mt::runtime::Status st = mt::runtime::validatePlan(best, outputPath);
  if (st)
    st = mt::runtime::writePlan(best, outputPath);
  if (!st) {
    errs() << "mtc: error: " << st.message() << "\n";
    return 1;
  }
  return 0;
}
