//===- Flags.cpp - mtc's flags, read into a Request ----------------------===//
#include "compiler/Flags.h"

#include "runtime/base/bytes.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

namespace mt::driver {
namespace {

using namespace llvm;

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

enum class Fuse { All, None };
enum class Order { MicroBatch, Layer };
enum class Recompute { Layers, None };
enum class Moments { Host, Disk, Auto };

/// The back end's defaults, which mtc's flags share.
const mt::sched::Schedule kDefault;

/// --resident-below's help, with the back end's default in words.
const std::string kResidentBelowHelp =
    "With --stream-weights: keep weights smaller than this on the device, "
    "copied once per step (norm scales, biases); default " +
    mt::runtime::bytesText(double(kDefault.residentBelow));

/// Every flag of mtc, made by registerFlags.
struct Flags {
  cl::OptionCategory category{"mtc options"};
  cl::opt<std::string> inputPath{cl::Positional, cl::desc("<model.onnx>"),
                                 cl::Required, cl::cat(category)};
  cl::opt<std::string> outputPath{"o",
                                  cl::desc("Output file (default: stdout); a "
                                           "name ending in .mtp gets the plan"),
                                  cl::value_desc("file"), cl::init("-"),
                                  cl::cat(category)};
  ChoiceOpt<Emit> emit{
      "emit", cl::desc("What to print"), cl::init(Emit::Summary),
      cl::values(clEnumValN(Emit::Summary, "summary",
                            "JSON: parameters, trainable/frozen names, layers, "
                            "templates, inputs, fused and primitive op counts, "
                            "and the forward's FLOPs in fused ops and in "
                            "primitive ones (fused_share)"),
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
      cl::cat(category)};
  cl::opt<std::string> weightsPath{
      "weights",
      cl::desc("safetensors file whose tensors are the trainable set (matched "
               "by name or by a unique suffix); the config.json and "
               "generation_config.json beside it go into every checkpoint"),
      cl::value_desc("file"), cl::cat(category)};
  cl::opt<std::string> trainableRe{
      "trainable",
      cl::desc("Mark initializers whose name matches as trainable"),
      cl::value_desc("regex"), cl::cat(category)};
  cl::opt<std::string> frozenRe{
      "frozen", cl::desc("Mark initializers whose name matches as frozen"),
      cl::value_desc("regex"), cl::cat(category)};
  cl::opt<bool> explainFusion{
      "explain-fusion",
      cl::desc("Name, as a remark at each op left unfused (each op that runs "
               "as its own primitive kernel), why each pattern that starts "
               "there did not make it part of a fused op (linear, norm, "
               "attention, ...)"),
      cl::cat(category)};
  ChoiceOpt<Fuse> fuse{
      "fuse",
      cl::desc("Which exporter patterns become fused ops (the losses agree "
               "either way, up to float rounding)"),
      cl::init(Fuse::All),
      cl::values(
          clEnumValN(Fuse::All, "all",
                     "every pattern that matches: linear, norm, "
                     "activation, rotary, attention, cross_entropy"),
          clEnumValN(Fuse::None, "none",
                     "no pattern of several ops: each op runs as its own "
                     "kernel with its own gradient (a Gather of weight "
                     "rows, a Gemm, LayerNormalization, Gelu and "
                     "SoftmaxCrossEntropyLoss are single ops); slower, "
                     "to check fusion or train what it does not know")),
      cl::cat(category)};
  cl::opt<int64_t> batch{"batch",
                         cl::desc("Batch size for a dynamic dim 0 of inputs"),
                         cl::init(0), cl::cat(category)};
  cl::opt<int64_t> seqLen{
      "seq", cl::desc("Sequence length for a dynamic dim 1 of inputs"),
      cl::init(0), cl::cat(category)};
  cl::opt<int64_t> gradAccum{"grad-accum",
                             cl::desc("Micro-batches per optimizer step"),
                             cl::init(kDefault.gradAccum), cl::cat(category)};
  cl::opt<int64_t> ranks{
      "ranks",
      cl::desc(
          "Data-parallel ranks that run the plan together (mpirun -np N "
          "mtrun PLAN): each reads its share of every step's micro-batches "
          "(N x --grad-accum of them, the order one process with that many "
          "reads), owns about 1/N of the host state (fp32 masters, "
          "gradient accumulators, AdamW moments), receives every rank's "
          "gradients of the weights it owns in rank order, updates them "
          "and broadcasts them: the losses and weights of one process "
          "with N x --grad-accum micro-batches, to the bit"),
      cl::init(kDefault.ranks), cl::cat(category)};
  ChoiceOpt<Order> microBatchOrder{
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
      cl::cat(category)};
  cl::opt<bool> streamWeights{
      "stream-weights",
      cl::desc("Copy each layer's weights to the device just before its "
               "forward and again before its backward, instead of keeping all "
               "weights on the device (unless given, the planner chooses)"),
      cl::init(false), cl::cat(category)};
  cl::opt<std::string> lookahead{
      "lookahead",
      cl::desc("With --stream-weights: issue each copy this many weights ahead "
               "of its first use, or auto: plan with 2, 4, 8, 16 and 32 and "
               "keep the fastest that fits (five compilations)"),
      cl::init(std::to_string(kDefault.lookahead)), cl::cat(category)};
  cl::opt<std::string> residentBelow{
      "resident-below", cl::desc(kResidentBelowHelp), cl::cat(category)};
  cl::opt<int64_t> chunkHeadRows{
      "chunk-head-rows",
      cl::desc("Compute the head and the loss this many tokens at a time so "
               "that the whole batch's logits never exist (0: in one piece)"),
      cl::init(kDefault.chunkHeadRows), cl::cat(category)};
  cl::opt<std::string> chunkMlpRows{
      "chunk-mlp-rows",
      cl::desc("Compute each gated MLP (gate, up, activation, down, and their "
               "gradients) this many tokens at a time, so that its [tokens, "
               "hidden] intermediates never exist whole: auto (the planner "
               "chunks a schedule that is over the device budget), 0 (never) "
               "or a count of tokens"),
      cl::init("auto"), cl::cat(category)};
  ChoiceOpt<Recompute> recompute{
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
      cl::cat(category)};
  cl::opt<int64_t> keepLayers{
      "keep-layers",
      cl::desc("With --recompute layers (or unless --recompute none): the last "
               "this many layers keep their activations for the backward, the "
               "others are recomputed from their input (unless given, the "
               "planner chooses 0, a quarter, half or three quarters)"),
      cl::init(0), cl::cat(category)};
  ChoiceOpt<mt::sched::WeightLink> weightLink{
      "weight-link",
      cl::desc("With --compute-dtype bf16, what a trainable weight's copy to "
               "the device carries: compute (a bf16 copy of every weight in "
               "pinned memory, refreshed after each update: 2 more host bytes "
               "per parameter) or fp32 (the master itself, cast to bf16 on the "
               "device: twice the bytes over the link, no copy on the host). "
               "Exact either way: the same bf16 values. Unless given, the "
               "planner chooses"),
      cl::init(kDefault.weightLink), mt::sched::weightLinkValues(),
      cl::cat(category)};
  cl::opt<bool> offloadActivations{
      "offload-activations",
      cl::desc("Keep the checkpoints the backward recomputes from (layer "
               "inputs) in pinned host memory between forward and backward "
               "(unless given, the planner chooses)"),
      cl::init(false), cl::cat(category)};
  cl::opt<std::string> offloadFraction{
      "offload-fraction",
      cl::desc("With --offload-activations: offload this fraction of the "
               "checkpoints (those away from the device longest; the rest stay "
               "on it), or auto (default): 1, then 0.75, 0.5 and 0.25 while "
               "they fit, the fastest kept (fewer offloads when equally fast)"),
      cl::init("auto"), cl::cat(category)};
  cl::opt<std::string> target{
      "target",
      cl::desc("The machine to plan for: h200, h100, a100, rtx4090, cpu, or a "
               "JSON target file"),
      cl::init("cpu"), cl::cat(category)};
  cl::opt<std::string> gpuMem{
      "gpu-mem",
      cl::desc("Device memory budget (e.g. 80GiB; default: the target's)"),
      cl::cat(category)};
  cl::opt<std::string> hostMem{
      "host-mem",
      cl::desc("Host memory budget for master weights, gradients and moments "
               "(default: the target's host memory)"),
      cl::cat(category)};
  cl::opt<std::string> diskDir{
      "disk",
      cl::desc("Directory for the disk tier: with it, the AdamW moments may "
               "live on disk (see --moments); mtrun uses it unless told "
               "otherwise"),
      cl::value_desc("dir"), cl::cat(category)};
  cl::opt<std::string> diskMem{
      "disk-mem", cl::desc("Disk budget (default: the free space of --disk)"),
      cl::cat(category)};
  ChoiceOpt<Moments> momentsHome{
      "moments",
      cl::desc("Where the AdamW moments live: host, disk (needs --disk), or "
               "auto (host when it fits the host budget, else disk when "
               "--disk is given)"),
      cl::init(Moments::Auto),
      cl::values(clEnumValN(Moments::Host, "host", "in host memory"),
                 clEnumValN(Moments::Disk, "disk", "in files under --disk"),
                 clEnumValN(Moments::Auto, "auto", "the planner chooses")),
      cl::cat(category)};
  ChoiceOpt<mt::sched::DiskFormat> diskFormat{
      "disk-format",
      cl::desc("How the disk tier stores moments: raw, or shuffle-zstd "
               "(lossless: bytes regrouped by position, then zstd; fewer "
               "bytes written for host CPU time)"),
      cl::init(kDefault.diskFormat), mt::sched::diskFormatValues(),
      cl::cat(category)};
  cl::opt<std::string> pinnedMem{
      "pinned-mem",
      cl::desc("Pinned host memory budget (default: a quarter of the host "
               "budget)"),
      cl::cat(category)};
  cl::opt<bool> suggest{
      "suggest",
      cl::desc("Print every schedule the planner compiled (with its peaks and "
               "predicted step) and how many it did not (over a memory bound); "
               "the plan written is the same"),
      cl::init(false), cl::cat(category)};
  cl::opt<bool> clipping{
      "clipping",
      cl::desc("The plan must allow mtrun --grad-clip: the planner does not "
               "update weights during the backward (before the global gradient "
               "norm is known); --optimizer-overlap after or next-forward"),
      cl::init(false), cl::cat(category)};
  cl::opt<unsigned> jobs{
      "jobs",
      cl::desc("Compile this many of the planner's schedules at once (default "
               "0: one per hardware thread); the plan chosen is the same for "
               "any number"),
      cl::init(0), cl::cat(category)};
  cl::opt<bool> explain{
      "explain",
      cl::desc("Print the plan's predicted step (with -o, or alone without "
               "writing a plan): time per stream, bytes per link, memory per "
               "tier against its budget, the bottleneck"),
      cl::init(false), cl::cat(category)};
  cl::opt<bool> forward{
      "forward",
      cl::desc("Plan the model's forward alone: its graph outputs as they "
               "are (no loss added), every weight frozen, no gradient, "
               "update or optimizer state. mtrun PLAN --inputs IN.safetensors "
               "--outputs OUT.safetensors runs it on the tensors given by "
               "input name and writes the outputs by name; --emit=step shows "
               "the forward step"),
      cl::init(false), cl::cat(category)};
  ChoiceOpt<mt::sched::MomentFormat> optimizerStates{
      "optimizer-states",
      cl::desc("AdamW moments: fp32 (default, exact), bf16 (LOSSY: half the "
               "bytes), 8bit (LOSSY: blockwise 8-bit with a scale per 256 "
               "elements, about a quarter) or 4bit (LOSSY: blockwise 4-bit, "
               "two a byte, the same scales: about an eighth); lossy formats "
               "only when asked for"),
      cl::init(kDefault.optimizerStates), mt::sched::momentFormatValues(),
      cl::cat(category)};
  ChoiceOpt<mt::sched::OptimizerOverlap> optimizerOverlap{
      "optimizer-overlap",
      cl::desc("When AdamW runs: after (the whole backward), backward (each "
               "weight as soon as its gradient is complete; exact without "
               "clipping) or next-forward (each weight in the next step, just "
               "before its copy to the device; exact with clipping). Unless "
               "given, the planner chooses (not backward with --clipping)"),
      cl::init(kDefault.optimizerOverlap), mt::sched::optimizerOverlapValues(),
      cl::cat(category)};
  ChoiceOpt<mt::sched::ComputeDtype> computeDtype{
      "compute-dtype",
      cl::desc("Storage of activations and device weights: fp32 or bf16 "
               "(fp32 math, fp32 master weights and moments either way)"),
      cl::init(kDefault.computeDtype), mt::sched::computeDtypeValues(),
      cl::cat(category)};
};

Flags *flags = nullptr;

/// The largest --batch, --seq, --grad-accum and --chunk-head-rows: small
/// enough that no element or byte count they multiply overflows.
constexpr int64_t kMaxDim = int64_t(1) << 24;

bool fail(const Twine &message) {
  errs() << "mtc: error: " << message << "\n";
  return false;
}

/// An "auto or N" flag's value into `value`; false (said) for a bad one.
template <typename T>
bool readAutoOr(const cl::opt<std::string> &flag, T min, T max, StringRef what,
                std::optional<T> &value) {
  std::string why;
  return parseAutoOr<T>(flag.ArgStr, flag.getValue(), min, max, what, value,
                        why) ||
         fail(why);
}

/// A size flag, when given, into `bytes`; false (said) for a bad one.
bool readSize(const cl::opt<std::string> &flag, StringRef example,
              std::optional<int64_t> &bytes) {
  if (flag.empty())
    return true;
  int64_t parsed = parseSize(flag.getValue());
  if (parsed < 0)
    return fail("--" + flag.ArgStr + " '" + flag.getValue() +
                "' is not a size (e.g. " + example + ")");
  bytes = parsed;
  return true;
}

} // namespace

void registerFlags() {
  static Flags all;
  flags = &all;
  cl::HideUnrelatedOptions(all.category);
}

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

template <typename T>
bool parseAutoOr(StringRef flag, StringRef text, T min, T max, StringRef what,
                 std::optional<T> &value, std::string &why) {
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
  if (ok) {
    value = parsed;
    return true;
  }
  // Bounds as a person writes them: 0 and 1, 999999.
  auto bound = [](T v) -> std::string {
    if constexpr (std::is_floating_point_v<T>)
      return llvm::formatv("{0}", llvm::format("%g", double(v))).str();
    else
      return std::to_string(v);
  };
  why = ("--" + flag + " must be auto or " + what + " from " + bound(min) +
         " to " + bound(max) + ", got '" + text + "'")
            .str();
  return false;
}
template bool parseAutoOr<int64_t>(StringRef, StringRef, int64_t, int64_t,
                                   StringRef, std::optional<int64_t> &,
                                   std::string &);
template bool parseAutoOr<double>(StringRef, StringRef, double, double,
                                  StringRef, std::optional<double> &,
                                  std::string &);

bool readFlags(Request &r) {
  const Flags &f = *flags;
  auto given = [](const cl::Option &o) { return o.getNumOccurrences() > 0; };
  ImportOptions &import = r.import;
  import.modelPath = f.inputPath;
  import.weightsPath = f.weightsPath;
  import.trainableRegex = f.trainableRe;
  import.frozenRegex = f.frozenRe;
  import.batch = f.batch;
  import.seq = f.seqLen;
  import.forward = f.forward;
  // What only a training step has: a forward plan refuses it, by name.
  if (f.forward)
    for (const cl::Option *o : std::initializer_list<const cl::Option *>{
             &f.trainableRe, &f.gradAccum, &f.ranks, &f.microBatchOrder,
             &f.recompute, &f.keepLayers, &f.weightLink, &f.offloadActivations,
             &f.offloadFraction, &f.momentsHome, &f.diskDir, &f.suggest,
             &f.clipping, &f.optimizerStates, &f.optimizerOverlap})
      if (given(*o))
        return fail("--" + o->ArgStr +
                    " is about training; a forward plan (--forward) has no "
                    "gradient, update or optimizer state");
  if (given(f.keepLayers) && (f.recompute == Recompute::None ||
                              f.keepLayers < 0 || f.keepLayers > kMaxDim))
    return fail("--keep-layers takes a count of layers from 0 (and "
                "recomputes the others): not with --recompute none, got " +
                Twine(int64_t(f.keepLayers)));
  if (f.microBatchOrder == Order::Layer && f.recompute == Recompute::None)
    return fail("--micro-batch-order layer orders the step by its outlined "
                "layers, which --recompute none does not have; use "
                "--recompute layers");
  std::optional<int64_t> lookahead, mlpChunk, residentBelow;
  std::optional<double> fraction;
  if (!readAutoOr<int64_t>(f.lookahead, 1, 999999, "a number of weights",
                           lookahead) ||
      !readAutoOr<double>(f.offloadFraction, 0.0, 1.0, "a number", fraction) ||
      !readAutoOr<int64_t>(f.chunkMlpRows, 0, kMaxDim,
                           "a count of tokens (0: in one piece)", mlpChunk) ||
      !readSize(f.residentBelow, "1MiB", residentBelow))
    return false;
  if (f.chunkHeadRows < 0 || f.chunkHeadRows > kMaxDim)
    return fail("--chunk-head-rows must be from 0 (one piece) to " +
                Twine(kMaxDim) + ", got " + Twine(int64_t(f.chunkHeadRows)));
  // Counts of tokens and micro-batches: given, they are at least 1, and
  // small enough that no shape or byte count they multiply overflows.
  for (const cl::opt<int64_t> *count :
       {&f.batch, &f.seqLen, &f.gradAccum, &f.ranks})
    if (given(*count) && (*count < 1 || *count > kMaxDim))
      return fail("--" + count->ArgStr + " must be from 1 to " +
                  Twine(kMaxDim) + ", got " + Twine(int64_t(*count)));
  if (!readSize(f.gpuMem, "80GiB", r.deviceBytes) ||
      !readSize(f.hostMem, "80GiB", r.hostBytes) ||
      !readSize(f.diskMem, "80GiB", r.diskBytes) ||
      !readSize(f.pinnedMem, "80GiB", r.pinnedBytes))
    return false;

  r.outputPath = f.outputPath;
  r.emit = f.emit;
  if (!given(f.emit) && StringRef(r.outputPath).ends_with(".mtp"))
    r.emit = Emit::Plan;
  // --suggest and --explain plan, with or without -o: what they print is
  // about the plan.
  if (f.suggest || (f.explain && !given(f.emit)))
    r.emit = Emit::Plan;
  r.suggest = f.suggest;
  r.explain = f.explain;
  r.jobs = f.jobs;
  r.target = f.target;
  r.diskDir = f.diskDir;
  r.gradAccumGiven = given(f.gradAccum);
  r.mlpChunkGiven = mlpChunk.has_value();

  planner::Schedule &s = r.chosen;
  s.batch = f.batch;
  s.gradAccum = f.gradAccum;
  s.streamWeights = f.streamWeights;
  s.offloadActivations = f.offloadActivations;
  s.optimizerOverlap = f.optimizerOverlap;
  s.keep = f.recompute == Recompute::None;
  s.keepLast = f.keepLayers;
  s.weightLink = f.weightLink;
  s.layerMajor = f.microBatchOrder == Order::Layer;
  s.offloadFraction = fraction.value_or(s.offloadFraction);
  s.lookahead = lookahead.value_or(s.lookahead);
  s.momentsOnDisk = f.momentsHome == Moments::Disk;
  s.ranks = f.ranks;
  s.chunkMlpRows = mlpChunk.value_or(s.chunkMlpRows);
  s.chunkHeadRows = f.chunkHeadRows;
  s.computeDtype = f.computeDtype;
  s.optimizerStates = f.optimizerStates;
  s.residentBelow = residentBelow.value_or(s.residentBelow);
  s.diskFormat = f.diskFormat;

  Options &o = r.options;
  o.explainFusion = f.explainFusion;
  o.fusePatterns = f.fuse == Fuse::All;
  if (r.emit != Emit::Plan && r.emit != Emit::Sched)
    return true;

  if (f.momentsHome == Moments::Disk && f.diskDir.empty())
    return fail("--moments disk needs a directory: --disk DIR");
  // Every planning flag given is a constraint; the planner searches the
  // rest. Precision and state formats are the user's alone.
  planner::Constraints &c = r.constraints;
  if (given(f.streamWeights))
    c.streamWeights = s.streamWeights;
  if (given(f.offloadActivations))
    c.offloadActivations = s.offloadActivations;
  if (fraction)
    c.offloadFraction = s.offloadFraction;
  if (given(f.optimizerOverlap))
    c.optimizerOverlap = s.optimizerOverlap;
  // --recompute layers alone recomputes every layer; --keep-layers N all
  // but the last N.
  if (given(f.recompute) || given(f.keepLayers)) {
    c.keep = s.keep;
    c.keepLast = s.keepLast;
  }
  if (given(f.weightLink))
    c.weightLink = s.weightLink;
  if (given(f.microBatchOrder))
    c.layerMajor = s.layerMajor;
  if (f.momentsHome != Moments::Auto)
    c.momentsOnDisk = s.momentsOnDisk;
  c.lookaheads = lookahead ? std::vector<int64_t>{s.lookahead}
                           : std::vector<int64_t>{2, 4, 8, 16, 32};
  c.clipping = f.clipping;
  c.diskGiven = !f.diskDir.empty();
  return true;
}

} // namespace mt::driver
