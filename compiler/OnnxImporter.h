//===- OnnxImporter.h - ONNX models to the train dialect ------------------===//
#ifndef MT_COMPILER_ONNXIMPORTER_H
#define MT_COMPILER_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <string>

namespace mt {

struct ImportOptions {
  std::string modelPath;
  /// A safetensors file whose tensors are exactly the trainable set.
  std::string weightsPath;
  /// Override the trainable decision for names matching these (ECMAScript).
  std::string trainableRegex, frozenRegex;
  /// Values for symbolic batch (dim 0) and sequence (dim 1) input dims.
  int64_t batch = 0, seq = 0;
};

/// Imports an ONNX model (IR 7-10, opset 14-20) into a module with one
/// function `@model`. Never reads the data of a floating initializer that is
/// trainable. On failure, emits one diagnostic naming the file, the node and
/// the field, and returns null.
mlir::OwningOpRef<mlir::ModuleOp> importOnnxModel(mlir::MLIRContext &context,
                                                  const ImportOptions &options);

} // namespace mt

#endif // MT_COMPILER_ONNXIMPORTER_H
