//===- Summary.h - what the compiler understood of a model ----------------===//
#ifndef MT_COMPILER_SUMMARY_H
#define MT_COMPILER_SUMMARY_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

namespace mt {

/// Prints one JSON object: parameters (trainable elements), trainable and
/// frozen names, layer calls, templates, inputs with roles and shapes, and
/// the count of each fused and primitive op (ops inside a layer template
/// count once, not once per layer).
void printSummary(mlir::ModuleOp module, llvm::raw_ostream &os);

} // namespace mt

#endif // MT_COMPILER_SUMMARY_H
