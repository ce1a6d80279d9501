//===- mtc.cpp - the mt compiler driver -----------------------------------===//
//
// mtc MODEL.onnx -o PLAN.mtp [--target T --gpu-mem G --host-mem H --disk D]
//     [--batch B --seq S --grad-accum K] [--compute-dtype fp32|bf16]
//     [--optimizer-states ...] [schedule flags] [--explain] [--suggest]
// mtc MODEL.onnx --emit=summary|import|mlir|step|sched
//
// Flag parsing and printing; the search for the fastest schedule that fits
// is compiler/Planner.h, each candidate's back end one pipeline
// (mt::sched::buildBackendPipeline) on a copy of the training step.
//
//===----------------------------------------------------------------------===//
#include "compiler/Driver.h"
#include "compiler/OnnxImporter.h"
#include "compiler/PlanEmitter.h"
#include "compiler/Planner.h"
#include "compiler/Summary.h"
#include "dialects/Sched/Transforms/Passes.h"
#include "dialects/Sched/Transforms/TrainKernels.h"
#include "dialects/Train/Transforms/Passes.h"
#include "runtime/cost/cost_model.h"
#include "runtime/plan/plan_io.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/ToolOutputFile.h"

#include <sys/statvfs.h>

using namespace llvm;

namespace {

using mt::driver::Emit;

/// Where the diagnostics of the candidate this thread compiles go (its
/// first error), or null outside a candidate.
thread_local std::string *candidateError = nullptr;

/// An enum flag whose refusal of a value names the ones it takes
/// ("must be fp32 or bf16, got 'fp16'"), not only the one it does not.
template <typename T> class Choice : public cl::parser<T> {
public:
  using cl::parser<T>::parser;
  bool parse(cl::Option &o, StringRef name, StringRef arg, T &value) {
    std::string names;
    for (unsigned i = 0, n = this->getNumOptions(); i < n; ++i) {
      if (arg == this->getOption(i)) {
        value = this->Values[i].V.getValue();
        return false;
      }
      names += std::string(i == 0       ? ""
                           : i + 1 == n ? " or "
                                        : ", ") +
               this->getOption(i).str();
    }
    return o.error("must be " + names + ", got '" + arg + "'", name);
  }
};
template <typename T> using ChoiceOpt = cl::opt<T, false, Choice<T>>;

cl::OptionCategory category("mtc options");
cl::opt<std::string> inputPath(cl::Positional, cl::desc("<model.onnx>"),
                               cl::Required, cl::cat(category));
cl::opt<std::string> outputPath("o",
                                cl::desc("Output file (default: stdout); a "
                                         "name ending in .mtp gets the plan"),
                                cl::value_desc("file"), cl::init("-"),
                                cl::cat(category));
ChoiceOpt<Emit> emit(
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
                          "the planned schedule: streams, tokens, placed "
                          "buffers"),
               clEnumValN(Emit::Plan, "plan",
                          "the plan file for mtrun (the default for -o "
                          "*.mtp)")),
    cl::cat(category));
cl::opt<std::string> weightsPath(
    "weights",
    cl::desc("safetensors file whose tensors are the trainable set (matched "
             "by name or by a unique suffix); the config.json and "
             "generation_config.json beside it go into every checkpoint"),
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
    cl::desc("Name, as a remark at each op left unfused (each op that runs "
             "as its own primitive kernel), why each pattern that starts "
             "there did not make it part of a fused op (linear, norm, "
             "attention, ...)"),
    cl::cat(category));
enum class Fuse { All, None };
ChoiceOpt<Fuse> fuse(
    "fuse",
    cl::desc("Which exporter patterns become fused ops (the losses agree "
             "either way, up to float rounding)"),
    cl::init(Fuse::All),
    cl::values(clEnumValN(Fuse::All, "all",
                          "every pattern that matches: linear, norm, "
                          "activation, rotary, attention, cross_entropy"),
               clEnumValN(Fuse::None, "none",
                          "no pattern of several ops: each op runs as its own "
                          "kernel with its own gradient (a Gather of weight "
                          "rows, a Gemm, LayerNormalization, Gelu and "
                          "SoftmaxCrossEntropyLoss are single ops); slower, "
                          "to check fusion or train what it does not know")),
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
cl::opt<int64_t> ranks(
    "ranks",
    cl::desc("Data-parallel ranks that run the plan together (mpirun -np N "
             "mtrun PLAN): each reads its share of every step's micro-batches "
             "(N x --grad-accum of them, the order one process with that many "
             "reads), owns about 1/N of the host state (fp32 masters, "
             "gradient accumulators, AdamW moments), receives every rank's "
             "gradients of the weights it owns in rank order, updates them "
             "and broadcasts them: the losses and weights of one process "
             "with N x --grad-accum micro-batches, to the bit"),
    cl::init(1), cl::cat(category));
enum class Order { MicroBatch, Layer };
ChoiceOpt<Order> microBatchOrder(
    "micro-batch-order",
    cl::desc("With K > 1 micro-batches per step, the order of the step's "
             "work: micro-batch (the whole forward and backward of one "
             "micro-batch, then the next: streamed weights cross 2K times, "
             "gradients leave K times) or layer (each layer over all K "
             "micro-batches before the next: weights cross at most twice, "
             "each gradient is summed on the device and leaves once, for "
             "K sets of layer checkpoints). Exact either way: the same "
             "losses to the bit. Unless given, the planner chooses"),
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
             "weights on the device (unless given, the planner chooses)"),
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
cl::opt<std::string> chunkMlpRows(
    "chunk-mlp-rows",
    cl::desc("Compute each gated MLP (gate, up, activation, down, and their "
             "gradients) this many tokens at a time, so that its [tokens, "
             "hidden] intermediates never exist whole: auto (the planner "
             "chunks a schedule that is over the device budget), 0 (never) "
             "or a count of tokens"),
    cl::init("auto"), cl::cat(category));
enum class Recompute { Layers, None };
ChoiceOpt<Recompute> recompute(
    "recompute",
    cl::desc("What the backward recomputes: layers (each layer's forward "
             "from its input, which is all the step keeps) or none (every "
             "activation the backward reads is kept: a quarter less work, "
             "more device memory; exact either way). Unless given, the "
             "planner chooses"),
    cl::init(Recompute::Layers),
    cl::values(clEnumValN(Recompute::Layers, "layers",
                          "recompute each layer from its input"),
               clEnumValN(Recompute::None, "none", "keep the activations")),
    cl::cat(category));
cl::opt<int64_t> keepLayers(
    "keep-layers",
    cl::desc("With --recompute layers (or unless --recompute none): the last "
             "this many layers keep their activations for the backward, the "
             "others are recomputed from their input (unless given, the "
             "planner chooses 0, a quarter, half or three quarters)"),
    cl::init(0), cl::cat(category));
ChoiceOpt<mt::sched::WeightLink> weightLink(
    "weight-link",
    cl::desc("With --compute-dtype bf16, what a trainable weight's copy to "
             "the device carries: compute (a bf16 copy of every weight in "
             "pinned memory, refreshed after each update: 2 more host bytes "
             "per parameter) or fp32 (the master itself, cast to bf16 on the "
             "device: twice the bytes over the link, no copy on the host). "
             "Exact either way: the same bf16 values. Unless given, the "
             "planner chooses"),
    cl::init(mt::sched::WeightLink::Compute), mt::sched::weightLinkValues(),
    cl::cat(category));
cl::opt<bool> offloadActivations(
    "offload-activations",
    cl::desc("Keep the checkpoints the backward recomputes from (layer "
             "inputs) in pinned host memory between forward and backward "
             "(unless given, the planner chooses)"),
    cl::init(false), cl::cat(category));
cl::opt<std::string> offloadFraction(
    "offload-fraction",
    cl::desc("With --offload-activations: offload this fraction of the "
             "checkpoints (those away from the device longest; the rest stay "
             "on it), or auto (default): 1, then 0.75, 0.5 and 0.25 while "
             "they fit, the fastest kept (fewer offloads when equally fast)"),
    cl::init("auto"), cl::cat(category));
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
ChoiceOpt<mt::sched::DiskFormat> diskFormat(
    "disk-format",
    cl::desc("How the disk tier stores moments: raw, or shuffle-zstd "
             "(lossless: bytes regrouped by position, then zstd; fewer "
             "bytes written for host CPU time)"),
    cl::init(mt::sched::DiskFormat::Raw), mt::sched::diskFormatValues(),
    cl::cat(category));
cl::opt<std::string> pinnedMem(
    "pinned-mem",
    cl::desc("Pinned host memory budget (default: a quarter of the host "
             "budget)"),
    cl::cat(category));
cl::opt<bool> suggest(
    "suggest",
    cl::desc("Print every schedule the planner compiled (with its peaks and "
             "predicted step) and how many it did not (over a memory bound); "
             "the plan written is the same"),
    cl::init(false), cl::cat(category));
cl::opt<bool> clipping(
    "clipping",
    cl::desc("The plan must allow mtrun --grad-clip: the planner does not "
             "update weights during the backward (before the global gradient "
             "norm is known); --optimizer-overlap after or next-forward"),
    cl::init(false), cl::cat(category));
cl::opt<unsigned> jobs(
    "jobs",
    cl::desc("Compile this many of the planner's schedules at once (default "
             "0: one per hardware thread); the plan chosen is the same for "
             "any number"),
    cl::init(0), cl::cat(category));
cl::opt<bool> explain(
    "explain",
    cl::desc("Print the plan's predicted step (with -o, or alone without "
             "writing a plan): time per stream, bytes per link, memory per "
             "tier against its budget, the bottleneck"),
    cl::init(false), cl::cat(category));
ChoiceOpt<mt::sched::MomentFormat> optimizerStates(
    "optimizer-states",
    cl::desc("AdamW moments: fp32 (default, exact), bf16 (LOSSY: half the "
             "bytes), 8bit (LOSSY: blockwise 8-bit with a scale per 256 "
             "elements, about a quarter) or 4bit (LOSSY: blockwise 4-bit, "
             "two a byte, the same scales: about an eighth); lossy formats "
             "only when asked for"),
    cl::init(mt::sched::MomentFormat::F32), mt::sched::momentFormatValues(),
    cl::cat(category));
ChoiceOpt<mt::sched::OptimizerOverlap> optimizerOverlap(
    "optimizer-overlap",
    cl::desc("When AdamW runs: after (the whole backward), backward (each "
             "weight as soon as its gradient is complete; exact without "
             "clipping) or next-forward (each weight in the next step, just "
             "before its copy to the device; exact with clipping). Unless "
             "given, the planner chooses (not backward with --clipping)"),
    cl::init(mt::sched::OptimizerOverlap::After),
    mt::sched::optimizerOverlapValues(), cl::cat(category));
ChoiceOpt<mt::sched::ComputeDtype> computeDtype(
    "compute-dtype",
    cl::desc("Storage of activations and device weights: fp32 or bf16 "
             "(fp32 math, fp32 master weights and moments either way)"),
    cl::init(mt::sched::ComputeDtype::F32), mt::sched::computeDtypeValues(),
    cl::cat(category));

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

using mt::planner::Overlap;
using mt::planner::Schedule;

/// The config.json and generation_config.json beside `beside` (the
/// weights, or the model when its initializers are the weights), for every
/// checkpoint folder (where from_pretrained looks for them); one larger
/// than a configuration can be is left out, said.
/// A flag that is `auto` or a number from `min` to `max`: its value, unset
/// for auto; false (said, naming the flag and what it takes) for anything
/// else. One parse for every "auto or N" flag.
template <typename T>
bool parseAutoOr(const cl::opt<std::string> &flag, T min, T max, StringRef what,
                 std::optional<T> &value) {
  StringRef text = flag.getValue();
  value.reset();
  if (text == "auto")
    return true;
  T parsed{};
  bool ok;
  if constexpr (std::is_floating_point_v<T>) {
    char *end = nullptr;
    std::string copy = text.str();
    parsed = T(std::strtod(copy.c_str(), &end));
    ok = !copy.empty() && *end == 0 && parsed >= min && parsed <= max;
  } else {
    // Digits alone: no sign, no space, nothing after.
    ok = !text.empty() && text.size() <= 18 &&
         llvm::all_of(text, [](char c) { return c >= '0' && c <= '9'; }) &&
         !text.getAsInteger(10, parsed) && parsed >= min && parsed <= max;
  }
  if (!ok) {
    // Bounds as a person writes them: 0 and 1, 999999.
    auto bound = [](T v) -> std::string {
      if constexpr (std::is_floating_point_v<T>)
        return llvm::formatv("{0}", llvm::format("%g", double(v))).str();
      else
        return std::to_string(v);
    };
    errs() << "mtc: error: --" << flag.ArgStr << " must be auto or " << what
           << " from " << bound(min) << " to " << bound(max) << ", got '"
           << text << "'\n";
    return false;
  }
  value = parsed;
  return true;
}

void addCheckpointFiles(mt::plan::Plan &plan, StringRef beside) {
  constexpr uint64_t kMaxConfigBytes = 1 << 20;
  SmallString<256> dir(beside);
  llvm::sys::path::remove_filename(dir);
  for (const char *name : {"config.json", "generation_config.json"}) {
    SmallString<256> path(dir);
    llvm::sys::path::append(path, name);
    uint64_t size = 0;
    if (!llvm::sys::fs::is_regular_file(path) ||
        llvm::sys::fs::file_size(path, size))
      continue;
    if (size > kMaxConfigBytes) {
      errs() << "mtc: warning: " << path << ": " << size
             << " bytes, more than a model configuration's 1 MiB; not "
                "copied into the checkpoints\n";
      continue;
    }
    auto buffer = llvm::MemoryBuffer::getFile(path);
    if (!buffer) {
      errs() << "mtc: warning: " << path << ": cannot read ("
             << buffer.getError().message()
             << "); not copied into the checkpoints\n";
      continue;
    }
    auto *file = plan.add_checkpoint_files();
    file->set_name(name);
    file->set_content((*buffer)->getBuffer().str());
  }
}

/// The flags, or the target's memories (pinned: a quarter of the host's;
/// disk: the free space of --disk).
bool readBudgets(const mt::plan::Target &t, mt::planner::Budgets &b) {
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

} // namespace

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  mlir::registerMLIRContextCLOptions();
  mlir::registerPassManagerCLOptions();
  mlir::registerDefaultTimingManagerCLOptions();
  mlir::registerAsmPrinterCLOptions();
  // --help lists mtc's own options, not the hundreds LLVM's libraries
  // register (MLIR's debugging flags still work; --help-hidden lists all).
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "mtc: compile an ONNX export of a decoder-only LLM for training\n\n"
      "Imports the model into the train dialect (never reading weight data),\n"
      "folds constants, fuses what exporters emit into fused ops, outlines\n"
      "the repeated decoder layers, and prints what it understood. With\n"
      "-o PLAN.mtp it derives the training step and plans it: the fastest\n"
      "schedule that fits the target's memory budgets, every schedule flag\n"
      "given a constraint (--explain says what it chose and why).\n");

  mlir::DialectRegistry registry;
  mt::sched::registerTrainKernels(registry);
  mlir::MLIRContext context(registry);
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
  // While a thread compiles a candidate, its diagnostics are the
  // candidate's refusal (the first error), not printed: one handler for
  // every thread, as the context's handlers serve them all.
  mlir::ScopedDiagnosticHandler refusals(&context, [](mlir::Diagnostic &d) {
    if (!candidateError)
      return mlir::failure();
    if (candidateError->empty() &&
        d.getSeverity() == mlir::DiagnosticSeverity::Error)
      *candidateError = d.str();
    return mlir::success();
  });

  mt::ImportOptions options;
  options.modelPath = inputPath;
  options.weightsPath = weightsPath;
  options.trainableRegex = trainableRe;
  options.frozenRegex = frozenRe;
  options.batch = batch;
  options.seq = seqLen;
  if (keepLayers.getNumOccurrences() &&
      (recompute == Recompute::None || keepLayers < 0 ||
       keepLayers > kMaxDim)) {
    errs() << "mtc: error: --keep-layers takes a count of layers from 0 "
              "(and recomputes the others): not with --recompute none, got "
           << int64_t(keepLayers) << "\n";
    return 1;
  }
  if (microBatchOrder == Order::Layer && recompute == Recompute::None) {
    errs() << "mtc: error: --micro-batch-order layer orders the step by its "
              "outlined layers, which --recompute none does not have; use "
              "--recompute layers\n";
    return 1;
  }
  std::optional<int64_t> lookaheadGiven, mlpChunkGiven;
  std::optional<double> fractionGiven;
  if (!parseAutoOr<int64_t>(lookahead, 1, 999999, "a number of weights",
                            lookaheadGiven) ||
      !parseAutoOr<double>(offloadFraction, 0.0, 1.0, "a number",
                           fractionGiven) ||
      !parseAutoOr<int64_t>(chunkMlpRows, 0, kMaxDim,
                            "a count of tokens (0: in one piece)",
                            mlpChunkGiven))
    return 1;
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
        {"--grad-accum", &gradAccum},
        {"--ranks", &ranks}}) {
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
  // The schedule the flags describe (their defaults for the rest): the
  // step --emit=step shows, and the base the planner searches around.
  Schedule chosen;
  chosen.batch = batch;
  chosen.gradAccum = gradAccum;
  chosen.stream = streamWeights;
  chosen.offload = offloadActivations;
  chosen.overlap = optimizerOverlap;
  chosen.keep = recompute == Recompute::None;
  chosen.keepLast = keepLayers;
  chosen.fp32Link = weightLink == mt::sched::WeightLink::F32;
  chosen.layerMajor = microBatchOrder == Order::Layer;
  chosen.offloadFraction = fractionGiven.value_or(1.0);
  chosen.lookahead = lookaheadGiven.value_or(8);
  chosen.momentsOnDisk = momentsHome == "disk";
  chosen.ranks = ranks;
  chosen.mlpChunk = mlpChunkGiven.value_or(0);
  mt::driver::Options driverOptions;
  driverOptions.explainFusion = explainFusion;
  driverOptions.fusePatterns = fuse == Fuse::All;
  driverOptions.chunkHeadRows = chunkHeadRows;
  driverOptions.computeDtype = computeDtype;
  driverOptions.optimizerStates = optimizerStates;
  driverOptions.residentBelow = parseSize(residentBelow);
  driverOptions.diskFormat = diskFormat;
  mt::driver::Driver compiler(context, timing, driverOptions);
  // The module of `s` (or the summary) to -o.
  auto printModule = [&](const mt::ImportOptions &o, const Schedule &s) {
    mlir::OwningOpRef<mlir::ModuleOp> module = compiler.compile(o, what, s);
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
  };
  // --emit=sched shows the planned schedule: it is searched like a plan.
  if (what != Emit::Plan && what != Emit::Sched)
    return printModule(options, chosen);

  mt::planner::Budgets budgets;
  mt::plan::Target targetDesc;
  if (mt::runtime::Status st = mt::runtime::loadTarget(target, targetDesc);
      !st) {
    errs() << "mtc: error: --target: " << st.message() << "\n";
    return 1;
  }
  if (!readBudgets(targetDesc, budgets))
    return 1;
  // What data-parallel ranks are not built for yet, said before searching.
  if (ranks > 1) {
    const char *unsupported =
        momentsHome == "disk" ? "--moments disk (each rank's share of the "
                                "moments stays in host memory)"
        : microBatchOrder == Order::Layer
            ? "--micro-batch-order layer (the ranks reduce every "
              "micro-batch's gradients in rank order)"
        : optimizerOverlap.getNumOccurrences() &&
                optimizerOverlap == mt::sched::OptimizerOverlap::NextForward
            ? "--optimizer-overlap next-forward (the ranks update within "
              "the step: after or backward)"
            : nullptr;
    if (unsupported) {
      errs() << "mtc: error: --ranks " << int64_t(ranks) << " does not go with "
             << unsupported << "\n";
      return 1;
    }
  }
  if (ranks > 1 && (targetDesc.network_bytes_per_s() <= 0 ||
                    targetDesc.network_latency_s() <= 0)) {
    errs() << "mtc: error: --ranks " << int64_t(ranks) << ": the target '"
           << targetDesc.name()
           << "' has no network_bytes_per_s and network_latency_s; measure "
              "them with mpirun -np 2 mtrun --calibrate FILE on the ranks' "
              "machines\n";
    return 1;
  }
  if (momentsHome != "host" && momentsHome != "disk" && momentsHome != "auto") {
    errs() << "mtc: error: --moments must be host, disk or auto, got '"
           << momentsHome << "'\n";
    return 1;
  }
  if (momentsHome == "disk" && diskDir.empty()) {
    errs() << "mtc: error: --moments disk needs a directory: --disk DIR\n";
    return 1;
  }
  // Every planning flag given is a constraint; the planner searches the
  // rest. Precision and state formats are the user's alone.
  mt::planner::Constraints c;
  auto given = [](const cl::Option &o) { return o.getNumOccurrences() > 0; };
  if (given(streamWeights))
    c.stream = chosen.stream;
  if (given(offloadActivations))
    c.offload = chosen.offload;
  if (fractionGiven)
    c.offloadFraction = chosen.offloadFraction;
  if (given(optimizerOverlap))
    c.overlap = chosen.overlap;
  // --recompute layers alone recomputes every layer; --keep-layers N all
  // but the last N.
  if (given(recompute) || given(keepLayers)) {
    c.keep = chosen.keep;
    c.keepLast = chosen.keepLast;
  }
  if (given(weightLink))
    c.fp32Link = chosen.fp32Link;
  if (given(microBatchOrder))
    c.layerMajor = chosen.layerMajor;
  if (momentsHome != "auto")
    c.momentsOnDisk = chosen.momentsOnDisk;
  c.lookaheads = lookaheadGiven ? std::vector<int64_t>{chosen.lookahead}
                                : std::vector<int64_t>{2, 4, 8, 16, 32};
  c.clipping = clipping;
  c.bf16 = computeDtype == mt::sched::ComputeDtype::BF16;
  c.diskGiven = !diskDir.empty();
  // The model itself must compile (with the user's batch): its errors are
  // reported as such, not as refused candidates.
  mlir::ModuleOp userStep = compiler.step(options, mt::driver::keptOf(chosen));
  if (!userStep)
    return 1;
  c.layers = mt::planner::layerCount(userStep);
  // The micro-batch can be split only when the export leaves the batch
  // dynamic, and only when the user gave the batch but not the count.
  if (batch > 1 && !given(gradAccum)) {
    auto fixed = mt::fixedBatchOf(context, inputPath);
    if (failed(fixed))
      return 1;
    c.splitBatch = !fixed->has_value();
    if (!c.splitBatch && suggest)
      errs() << "mtc: note: the model fixes the batch at " << **fixed
             << ", so it is not split into micro-batches\n";
  }
  if (!mlpChunkGiven)
    c.mlpChunk = mt::planner::mlpChunkFor(userStep);
  mt::planner::ModelSize size = mt::planner::modelSize(userStep);
  size.momentBytes = mt::planner::momentBytesPerElement(optimizerStates);
  SmallString<256> diskPath(diskDir);
  if (!diskDir.empty())
    llvm::sys::fs::make_absolute(diskPath);
  // Each candidate on a copy of its micro-batch size's training step; a
  // candidate the back end refuses (a split batch the model's shapes
  // refuse) is dropped with its first error, and the search goes on.
  auto compileWith = [&](const Schedule &s, bool verify, mt::plan::Plan &plan,
                         std::string &error) {
    mt::ImportOptions o = options;
    o.batch = s.batch;
    std::string *outer = candidateError;
    candidateError = &error;
    auto restore = llvm::make_scope_exit([&] { candidateError = outer; });
    mlir::OwningOpRef<mlir::ModuleOp> module =
        compiler.compile(o, Emit::Plan, s, verify);
    if (!module || failed(mt::emitPlan(*module, plan))) {
      if (error.empty())
        error = "the back end refused it";
      return false;
    }
    *plan.mutable_target() = targetDesc;
    mt::plan::Budgets &b = *plan.mutable_budgets();
    b.set_device_bytes(uint64_t(budgets.device));
    b.set_pinned_bytes(uint64_t(budgets.pinned));
    b.set_host_bytes(uint64_t(budgets.host));
    b.set_disk_bytes(uint64_t(budgets.disk));
    if (s.momentsOnDisk)
      plan.set_disk_dir(diskPath.str().str());
    return true;
  };
  auto compileOne = [&](const Schedule &s, mt::plan::Plan &plan,
                        std::string &error) {
    return compileWith(s, /*verify=*/false, plan, error);
  };
  // The context's uniquing is thread-safe only with its threading on
  // (--mlir-disable-threading turns it off).
  unsigned threads =
      jobs ? jobs.getValue()
           : unsigned(llvm::hardware_concurrency().compute_thread_count());
  if (!context.isMultithreadingEnabled())
    threads = 1;
  if (threads > 1)
    mt::sched::loadBackendDialects(context);
  mt::planner::Result result = mt::planner::search(
      chosen, c, budgets, size, targetDesc, compileOne, threads);
  if (suggest) {
    mt::planner::printCandidateHeader(outs());
    for (const auto &cand : result.candidates)
      mt::planner::printCandidate(cand, outs());
    for (const auto &d : result.failed)
      outs() << "  skipped " << d.schedule.flags() << ": " << d.why << "\n";
    outs() << "  (not compiled: " << result.overBound()
           << " over a memory bound, "
           << result.pruned.size() - result.overBound()
           << " offloaded variants of schedules that fit without offload)\n";
  }
  if (!result.best) {
    std::string closest = mt::planner::closestRefusal(result, budgets);
    errs() << "mtc: error: no schedule fits the budgets ("
           << result.candidates.size() << " compiled, " << result.overBound()
           << " over a memory bound); " << closest << "\n";
    return 1;
  }
  const mt::planner::Candidate &bestCandidate = result.candidates[*result.best];
  mt::plan::Plan best = bestCandidate.plan;
  if (suggest)
    outs() << "fastest that fits: " << bestCandidate.schedule.flags() << "\n";
  else if (!explain && result.candidates.size() + result.pruned.size() > 1)
    errs() << "mtc: note: planned " << bestCandidate.schedule.flags()
           << " (the fastest of the schedules that fit; --explain says why)\n";
  if (explain)
    mt::planner::explain(bestCandidate, budgets, &result, outs());
  if (what == Emit::Sched) {
    mt::ImportOptions o = options;
    o.batch = bestCandidate.schedule.batch;
    return printModule(o, bestCandidate.schedule);
  }
  if (outputPath == "-") {
    if (suggest || explain)
      return 0;
    errs() << "mtc: error: a plan needs an output file: -o PLAN.mtp\n";
    return 1;
  }
  // The plan written is the chosen schedule compiled again with every
  // check the search skipped: the IR verified after each pass and the
  // schedule proved race-free (mt-verify-schedule).
  {
    std::string error;
    if (!compileWith(bestCandidate.schedule, /*verify=*/true, best, error)) {
      errs() << "mtc: error: the chosen schedule ("
             << bestCandidate.schedule.flags()
             << ") failed verification, a bug in mtc: " << error << "\n";
      return 1;
    }
    best.set_predicted_step_seconds(
        bestCandidate.plan.predicted_step_seconds());
  }
  addCheckpointFiles(best, weightsPath.empty() ? StringRef(inputPath)
                                               : StringRef(weightsPath));
  // The model's bytes are found from the plan's folder, so that the two
  // can move together.
  if (mt::runtime::Status st = mt::runtime::savePlan(best, outputPath); !st) {
    errs() << "mtc: error: " << st.message() << "\n";
    return 1;
  }
  return 0;
}
