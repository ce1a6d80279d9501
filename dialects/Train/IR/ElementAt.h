//===- ElementAt.h - one element of a tensor, from the ops that make it ---===//
//
// Masks and position tables are functions of their indices, built from
// shapes, ranges, comparisons and fills. One element of such a tensor can
// be computed by walking back through those ops, without materializing the
// tensor however large it is: FuseOps proves an attention mask causal (or
// windowed) from samples of it this way, where folding it whole would cost
// S x S elements.
//
//===----------------------------------------------------------------------===//
#ifndef MT_DIALECTS_TRAIN_IR_ELEMENTAT_H
#define MT_DIALECTS_TRAIN_IR_ELEMENTAT_H

#include "mlir/IR/Value.h"
#include "llvm/ADT/ArrayRef.h"

#include <optional>

namespace mt::train {

/// The element of `v` at `index` (a coordinate per dim of its static
/// shape), computed through constants (and frozen weights that carry their
/// value), constant_of_shape, range, trilu, the elementwise arithmetic,
/// comparison and logic ops, where and cast (with broadcasting), and the
/// ops that only move elements (reshape, unsqueeze, squeeze, flatten,
/// expand, transpose, slice). Nullopt where anything else is reached (an
/// input of the step, a trainable weight, a reduction) or the walk is
/// deeper than any mask needs.
std::optional<double> elementAt(mlir::Value v, llvm::ArrayRef<int64_t> index);

} // namespace mt::train

#endif // MT_DIALECTS_TRAIN_IR_ELEMENTAT_H
