//===- mtc.cpp - the mt compiler driver -----------------------------------===//
//
// mtc MODEL.onnx -o PLAN.mtp [--target T --gpu-mem G --host-mem H --disk D]
//     [--batch B --seq S --grad-accum K] [--compute-dtype fp32|bf16]
//     [--optimizer-states ...] [schedule flags] [--explain] [--suggest]
// mtc MODEL.onnx --emit=summary|import|mlir|step|sched
//
// The command line and the diagnostics' form: the flags are
// compiler/Flags.h, what they ask one call (driver::compile), the search
// for the fastest schedule that fits compiler/Planner.h.
//
//===----------------------------------------------------------------------===//
#include "compiler/Driver.h"
#include "compiler/Flags.h"
#include "dialects/Sched/Transforms/TrainKernels.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

namespace {

/// Where a diagnostic is, as "<file>: node '<name>': ", or "<file>: ".
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
  // --help lists mtc's own options, not the hundreds LLVM's libraries
  // register (MLIR's debugging flags still work; --help-hidden lists all).
  mt::driver::registerFlags();
  cl::ParseCommandLineOptions(
      argc, argv,
      "mtc: compile an ONNX export of a decoder-only LLM for training\n\n"
      "Imports the model into the train dialect (never reading weight data),\n"
      "folds constants, fuses what exporters emit into fused ops, outlines\n"
      "the repeated decoder layers, and prints what it understood. With\n"
      "-o PLAN.mtp it derives the training step and plans it: the fastest\n"
      "schedule that fits the target's memory budgets, every schedule flag\n"
      "given a constraint (--explain says what it chose and why).\n");
  mt::driver::Request request;
  if (!mt::driver::readFlags(request))
    return 1;

  mlir::DialectRegistry registry;
  mt::sched::registerTrainKernels(registry);
  mlir::MLIRContext context(registry);
  context.printOpOnDiagnostic(false);
  // Every diagnostic as "mtc: error: <file>: node '<name>': <message>".
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
  return failed(mt::driver::compile(context, request)) ? 1 : 0;
}
