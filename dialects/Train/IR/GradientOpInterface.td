//===- GradientOpInterface.td - an op's gradient rule ------*- tablegen -*-===//
#ifndef MT_TRAIN_GRADIENT_OP_INTERFACE
#define MT_TRAIN_GRADIENT_OP_INTERFACE

include "mlir/IR/OpBase.td"

def Train_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::mt::train";
  let description = [{
    An op that knows its gradient rule: given the gradients of its results
    (`builder.dy(op, i)`, zeros for a result nothing reads), it emits the
    gradient of each differentiable operand and adds it to that operand's
    (`builder.accumulate`). The training step's derivation
    (mt-derive-training-step) calls it in reverse program order; an op on a
    path from a trainable weight to the loss without it is an error that
    names the op and its ONNX node. The rules are attached to the ops in
    dialects/Train/IR/Gradients.cpp, so a new op brings its rule there.
  }];
  let methods = [
    InterfaceMethod<
      "Adds the gradients of the op's operands, given those of its results.",
      "::mlir::LogicalResult", "buildGradient",
      (ins "::mt::train::GradientBuilder &":$builder)>
  ];
}

#endif // MT_TRAIN_GRADIENT_OP_INTERFACE
