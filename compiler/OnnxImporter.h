//===- OnnxImporter.h - ONNX models to the train dialect ------------------===//
#ifndef MT_COMPILER_ONNXIMPORTER_H
#define MT_COMPILER_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <optional>
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
  /// The graph's outputs as they are (mtc --forward): no output is taken
  /// for the loss and none is added.
  bool forward = false;
};

/// Imports an ONNX model (IR 7-11, opset 14-23) into a module with one
/// function `@model`. Never reads the data of a floating initializer that is
/// trainable. On failure, emits one diagnostic naming the file, the node and
/// the field, and returns null.
mlir::OwningOpRef<mlir::ModuleOp> importOnnxModel(mlir::MLIRContext &context,
                                                  const ImportOptions &options);

/// The batch (dim 0 of the graph inputs) when the export fixes it, none
/// when it is dynamic; failure (diagnosed) when the model cannot be read.
/// Reads the model's protobuf only.
mlir::FailureOr<std::optional<int64_t>>
fixedBatchOf(mlir::MLIRContext &context, const std::string &modelPath);

} // namespace mt

#endif // MT_COMPILER_ONNXIMPORTER_H
