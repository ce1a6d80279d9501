//===- Gradient.h - gradient rules of train ops ---------------------------===//
//
// The op interface through which each op states its gradient rule, and the
// builder the derivation hands the rules: the gradients of an op's results,
// a place to add its operands', and the helpers rules share (summing a
// broadcast operand's gradient, reshaping back).
//
//===----------------------------------------------------------------------===//
#ifndef MT_DIALECTS_TRAIN_IR_GRADIENT_H
#define MT_DIALECTS_TRAIN_IR_GRADIENT_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpDefinition.h"

namespace mt::train {

/// What a gradient rule works with; the derivation implements it.
class GradientBuilder {
public:
  explicit GradientBuilder(mlir::OpBuilder &b) : b(b) {}
  virtual ~GradientBuilder() = default;

  mlir::OpBuilder &builder() { return b; }
  /// The gradient of result `i` of `op`, or zeros when nothing used it.
  virtual mlir::Value dy(mlir::Operation *op, unsigned i = 0) = 0;
  /// Adds `grad` to the gradient of `operand` (nothing when `operand` does
  /// not depend on what is differentiated).
  virtual void accumulate(mlir::Value operand, mlir::Value grad) = 0;
  /// Whether `v` depends on what is differentiated.
  virtual bool isActive(mlir::Value v) const = 0;

  /// Creates a gradient op (counted for the pass's statistic).
  template <typename OpTy, typename... Args>
  OpTy emit(mlir::Location loc, Args &&...args) {
    ++emitted;
    return b.create<OpTy>(loc, std::forward<Args>(args)...);
  }
  /// Sums `g` over the dims that `target` broadcast to reach g's shape.
  mlir::Value unbroadcast(mlir::Location loc, mlir::Value g, mlir::Type target);
  /// `v` reshaped to `target`'s shape (v itself when it has it).
  mlir::Value reshapeTo(mlir::Location loc, mlir::Value v, mlir::Type target);

  int64_t emitted = 0; ///< gradient ops emitted by `emit`

protected:
  mlir::OpBuilder &b;
};

/// Attaches the gradient rules (Gradients.cpp) to the ops that have one.
void attachGradientRules(mlir::MLIRContext &context);

} // namespace mt::train

#include "dialects/Train/IR/GradientOpInterface.h.inc"

#endif // MT_DIALECTS_TRAIN_IR_GRADIENT_H
