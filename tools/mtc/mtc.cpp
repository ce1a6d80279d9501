//===- mtc.cpp - the mt compiler driver -----------------------------------===//
//
// mtc MODEL.onnx [--emit=summary|import|mlir] [--weights FILE.safetensors]
//     [--trainable REGEX] [--frozen REGEX] [--batch B --seq S] [-o FILE]
//
//===----------------------------------------------------------------------===//
#include "compiler/OnnxImporter.h"
#include "compiler/Summary.h"
#include "dialects/Train/Transforms/Passes.h"

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

enum class Emit { Summary, Import, Mlir, Step };

cl::OptionCategory category("mtc options");
cl::opt<std::string> inputPath(cl::Positional, cl::desc("<model.onnx>"),
                               cl::Required, cl::cat(category));
cl::opt<std::string> outputPath("o", cl::desc("Output file (default: stdout)"),
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
                          "gradient of every trainable weight")),
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

  if (emit != Emit::Import) {
    mlir::PassManager pm(&context);
    if (failed(mlir::applyPassManagerCLOptions(pm)))
      return 1;
    pm.enableTiming(timing);
    mt::train::buildFrontendPipeline(pm);
    if (emit == Emit::Step)
      pm.addPass(mt::train::createDeriveTrainingStepPass());
    if (failed(pm.run(*module)))
      return 1;
  }

  std::string error;
  auto output = mlir::openOutputFile(outputPath, &error);
  if (!output) {
    errs() << "mtc: error: " << error << "\n";
    return 1;
  }
  if (emit == Emit::Summary)
    mt::printSummary(*module, output->os());
  else
    module->print(output->os());
  output->keep();
  return 0;
}
