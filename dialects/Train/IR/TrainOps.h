//===- TrainOps.h - ops of the `train` dialect ----------------------------===//
#ifndef MT_DIALECTS_TRAIN_IR_TRAINOPS_H
#define MT_DIALECTS_TRAIN_IR_TRAINOPS_H

#include "dialects/Train/IR/TrainDialect.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mt::train {
/// Marks the fused ops (TrainOps.td's Train_Fused).
template <typename ConcreteType>
class FusedOp : public mlir::OpTrait::TraitBase<ConcreteType, FusedOp> {};

/// The FLOPs per element of an op's kernel (TrainOps.td's Train_Flops).
template <int N> struct FlopsPerElement {
  static_assert(N >= 0, "an op's FLOPs are not negative");
  template <typename ConcreteType>
  class Impl : public mlir::OpTrait::TraitBase<ConcreteType, Impl> {
  public:
    static constexpr double kFlopsPerElement = N;
  };
};
} // namespace mt::train

#include "dialects/Train/IR/TrainOpInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/Train/IR/TrainOps.h.inc"

namespace mt::train {

/// The first element and the step of each dim a Slice with constant bounds
/// reads (steps may be negative), or none when a bound is not constant.
struct SliceLayout {
  llvm::SmallVector<int64_t> starts, steps;
};
std::optional<SliceLayout> constantSlice(SliceOp op);

/// A Pad with constant pads and value: the elements it adds before and
/// after the input in each dim (negative where it crops) and the value of
/// those it adds; none when the pads or the value are computed.
struct PadLayout {
  llvm::SmallVector<int64_t> begins, ends;
  double value;
};
std::optional<PadLayout> constantPad(PadOp op);

/// The importer's mark on a Gather that exports torch's
/// nn.Embedding(padding_idx=p): p, which the embedding fusion takes.
inline constexpr llvm::StringLiteral kPaddingIdx = "train.padding_idx";

/// Bytes of one element of `type` as stored (i1 takes a byte).
int64_t elementBytes(mlir::Type type);

/// Bytes of a tensor of `type` as stored.
inline int64_t storageBytes(mlir::RankedTensorType type) {
  return type.getNumElements() * elementBytes(type.getElementType());
}

} // namespace mt::train

#endif // MT_DIALECTS_TRAIN_IR_TRAINOPS_H
