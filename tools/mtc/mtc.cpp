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
#include "runtime/plan_io.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"

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
cl::opt<int64_t> batch("batch",
                       cl::desc("Batch size for a dynamic dim 0 of inputs"),
                       cl::init(0), cl::cat(category));
cl::opt<int64_t>
    seqLen("seq", cl::desc("Sequence length for a dynamic dim 1 of inputs"),
           cl::init(0), cl::cat(category));
cl::opt<int64_t> gradAccum("grad-accum",
                           cl::desc("Micro-batches per optimizer step"),
                           cl::init(1), cl::cat(category));
cl::opt<bool> streamWeights(
    "stream-weights",
    cl::desc("Copy each layer's weights to the device just before its "
             "forward and again before its backward, instead of keeping all "
             "weights on the device"),
    cl::init(false), cl::cat(category));
cl::opt<int64_t> lookahead(
    "lookahead",
    cl::desc("With --stream-weights: issue each copy this many weights "
             "ahead of its first use"),
    cl::init(8), cl::cat(category));
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
  if (gradAccum < 1) {
    errs() << "mtc: error: --grad-accum must be at least 1\n";
    return 1;
  }
  if (batch < 0 || seqLen < 0) {
    errs() << "mtc: error: --batch and --seq must be positive\n";
    return 1;
  }

  mlir::DefaultTimingManager tm;
  mlir::applyDefaultTimingManagerCLOptions(tm);
  mlir::TimingScope timing = tm.getRootScope();

  mlir::OwningOpRef<mlir::ModuleOp> module;
  {
    mlir::TimingScope importTiming = timing.nest("Import");
    module = mt::importOnnxModel(context, options);
  }
  if (!module)
    return 1;

  Emit what = emit;
  if (emit.getNumOccurrences() == 0 && StringRef(outputPath).ends_with(".mtp"))
    what = Emit::Plan;
  if (what != Emit::Import) {
    mlir::PassManager pm(&context);
    if (failed(mlir::applyPassManagerCLOptions(pm)))
      return 1;
    pm.enableTiming(timing);
    mt::train::buildFrontendPipeline(pm);
    if (what == Emit::Step || what == Emit::Sched || what == Emit::Plan)
      pm.addPass(mt::train::createDeriveTrainingStepPass());
    if (what == Emit::Sched || what == Emit::Plan) {
      mt::sched::LowerToSchedPassOptions lower;
      lower.gradAccum = gradAccum;
      lower.computeDtype = computeDtype;
      pm.addPass(mt::sched::createLowerToSchedPass(lower));
      if (streamWeights) {
        mt::sched::StreamWeightsPassOptions stream;
        stream.lookahead = lookahead;
        pm.addPass(mt::sched::createStreamWeightsPass(stream));
      }
      pm.addPass(mt::sched::createPlanMemoryPass());
    }
    if (failed(pm.run(*module)))
      return 1;
  }
  if (what == Emit::Plan) {
    mt::plan::Plan plan;
    if (failed(mt::emitPlan(*module, plan)))
      return 1;
    if (outputPath == "-") {
      errs() << "mtc: error: a plan needs an output file: -o PLAN.mtp\n";
      return 1;
    }
    mt::runtime::Status st = mt::runtime::validatePlan(plan, outputPath);
    if (st)
      st = mt::runtime::writePlan(plan, outputPath);
    if (!st) {
      errs() << "mtc: error: " << st.message() << "\n";
      return 1;
    }
    return 0;
  }

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
