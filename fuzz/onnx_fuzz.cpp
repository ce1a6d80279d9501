// The ONNX importer: any file as a model (dynamic dims resolved to 2 x 4);
// a model that imports also goes through the front-end pipeline (fold,
// fuse, outline), as mtc runs it. Diagnostics are swallowed; what must not
// happen is a crash.
#include "compiler/OnnxImporter.h"
#include "dialects/Train/IR/TrainOps.h"
#include "dialects/Train/Transforms/Passes.h"
#include "fuzz/fuzz_file.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mt::fuzz::MemFile file(data, size);
  mlir::MLIRContext context;
  context.printOpOnDiagnostic(false);
  mlir::ScopedDiagnosticHandler quiet(
      &context, [](mlir::Diagnostic &) { return mlir::success(); });
  mt::ImportOptions options;
  options.modelPath = file.path();
  options.batch = 2;
  options.seq = 4;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mt::importOnnxModel(context, options);
  if (!module)
    return 0;
  mlir::PassManager pm(&context);
  mt::train::buildFrontendPipeline(pm);
  (void)pm.run(*module);
  return 0;
}
