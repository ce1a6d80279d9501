//===- ShapeInference.h - static shape rules of ONNX ops ------------------===//
//
// Pure functions on shapes (elements per dim), shared by the ops' type
// inference and verifiers, the importer and the constant evaluator. Each
// returns false and sets `err` to a message that names the problem.
//
//===----------------------------------------------------------------------===//
#ifndef MT_DIALECTS_TRAIN_IR_SHAPEINFERENCE_H
#define MT_DIALECTS_TRAIN_IR_SHAPEINFERENCE_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include <cstdint>
#include <optional>
#include <string>

namespace mt::train {

using Shape = llvm::SmallVector<int64_t, 6>;

/// Returns `axis` in [0, rank) (negative counts from the end), or nullopt.
std::optional<int64_t> normalizeAxis(int64_t axis, int64_t rank);

/// Numpy-style multidirectional broadcast.
bool broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b,
                     Shape &out, std::string &err);

/// numpy.matmul, including 1-D operands.
bool matmulShape(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b,
                 Shape &out, std::string &err);

/// ONNX Reshape: 0 copies the input dim unless `allowZero`, -1 is inferred.
bool reshapeShape(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> shape,
                  bool allowZero, Shape &out, std::string &err);

/// Normalised Slice parameters for every dim of the input.
struct SliceParams {
  Shape start, step, size;
};
bool sliceShape(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> starts,
                llvm::ArrayRef<int64_t> ends, llvm::ArrayRef<int64_t> axes,
                llvm::ArrayRef<int64_t> steps, SliceParams &params,
                std::string &err);

/// Pad with `pads` = [begin_0.., end_0..] over every dim (negative crops).
bool padShape(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> pads,
              Shape &out, std::string &err);

bool tileShape(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> repeats,
               Shape &out, std::string &err);

/// Number of elements of ONNX Range(start, limit, delta).
bool rangeLength(double start, double limit, double delta, int64_t &length,
                 std::string &err);

/// Axes normalised, sorted, and checked for duplicates.
bool normalizeAxes(llvm::ArrayRef<int64_t> axes, int64_t rank, Shape &out,
                   std::string &err);

int64_t numElements(llvm::ArrayRef<int64_t> shape);

std::string shapeStr(llvm::ArrayRef<int64_t> shape);

} // namespace mt::train

#endif // MT_DIALECTS_TRAIN_IR_SHAPEINFERENCE_H
