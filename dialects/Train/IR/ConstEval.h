//===- ConstEval.h - evaluate train ops on constant operands --------------===//
//
// The folder behind every `fold` hook of the dialect: evaluates an op whose
// operands are constants (shape chains, masks, position ids, rotary tables)
// and performs the value-preserving simplifications (Identity, no-op Cast,
// inverse Transposes). The importer uses the same entry point to know
// shape-carrying values while it builds the graph.
//
//===----------------------------------------------------------------------===//
#ifndef MT_DIALECTS_TRAIN_IR_CONSTEVAL_H
#define MT_DIALECTS_TRAIN_IR_CONSTEVAL_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OpDefinition.h"

namespace mt::train {

/// Tensors larger than this (elements) are never folded: materialising them
/// as attributes would cost more than computing them at run time.
constexpr int64_t kMaxFoldElements = int64_t(1) << 22;

/// Folds `op` given the constant value of each operand (null when unknown).
/// Returns a constant attribute, an existing value, or null.
mlir::OpFoldResult foldTrainOp(mlir::Operation *op,
                               llvm::ArrayRef<mlir::Attribute> operands);

/// Reads an integer elements attribute as int64 values; nullopt otherwise.
std::optional<llvm::SmallVector<int64_t>> getIntValues(mlir::Attribute attr);

/// Reads a floating or integer elements attribute as doubles.
std::optional<llvm::SmallVector<double>> getFloatValues(mlir::Attribute attr);

} // namespace mt::train

#endif // MT_DIALECTS_TRAIN_IR_CONSTEVAL_H
