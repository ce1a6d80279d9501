//===- TrainDialect.td - the `train` dialect ---------------*- tablegen -*-===//
//
// The dialect that holds a model as imported from ONNX (primitive ops with
// ONNX semantics), the fused ops the compiler recognises, and weights by name.
//
//===----------------------------------------------------------------------===//
#ifndef MT_TRAIN_DIALECT
#define MT_TRAIN_DIALECT

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Train_Dialect : Dialect {
  let name = "train";
  let cppNamespace = "::mt::train";
  let summary = "Decoder-only models: ONNX primitives, fused ops and weights";
  let description = [{
    Ops keep ONNX semantics (broadcasting, negative axes, opset 14-20
    behaviour) but every shape is static and every attribute that ONNX
    allows as a constant input (axes, split sizes) is an attribute here.
    Weights are `train.param` symbols of the module that name a parameter
    and where its data lives, read in functions by `train.param.load`; the
    compiler never reads the data of a trainable weight.
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let hasConstantMaterializer = 1;
  // Importers build ops generically from attribute dictionaries.
  let usePropertiesForAttributes = 0;
}

class Train_Op<string mnemonic, list<Trait> traits = []>
    : Op<Train_Dialect, mnemonic, traits>;

def Train_SequenceType : TypeDef<Train_Dialect, "Sequence"> {
  let mnemonic = "seq";
  let summary = "An ONNX tensor sequence with a static list of element types";
  let parameters = (ins ArrayRefParameter<"::mlir::Type">:$elementTypes);
  let assemblyFormat = "`<` $elementTypes `>`";
}

def Train_WeightSource : I32EnumAttr<"WeightSource", "where a weight's data lives", [
    I32EnumAttrCase<"Inline", 0, "inline">,
    I32EnumAttrCase<"External", 1, "external">,
    I32EnumAttrCase<"Safetensors", 2, "safetensors">,
    I32EnumAttrCase<"None", 3, "none">]> {
  let cppNamespace = "::mt::train";
  let genSpecializedAttr = 0;
}
def Train_WeightSourceAttr : EnumAttr<Train_Dialect, Train_WeightSource, "source">;

def Train_WeightLayout : I32EnumAttr<"WeightLayout", "layout of a linear weight", [
    I32EnumAttrCase<"OutIn", 0, "out_in">,
    I32EnumAttrCase<"InOut", 1, "in_out">]> {
  let cppNamespace = "::mt::train";
  let genSpecializedAttr = 0;
}
def Train_WeightLayoutAttr : EnumAttr<Train_Dialect, Train_WeightLayout, "layout">;

def Train_Reduction : I32EnumAttr<"Reduction", "how a loss reduces its elements", [
    I32EnumAttrCase<"Mean", 0, "mean">,
    I32EnumAttrCase<"Sum", 1, "sum">,
    I32EnumAttrCase<"None", 2, "none">]> {
  let cppNamespace = "::mt::train";
  let genSpecializedAttr = 0;
}
def Train_ReductionAttr : EnumAttr<Train_Dialect, Train_Reduction, "reduction">;

def Train_Activation : I32EnumAttr<"Activation", "pointwise MLP activation", [
    I32EnumAttrCase<"Gelu", 0, "gelu">,
    I32EnumAttrCase<"GeluTanh", 1, "gelu_tanh">,
    I32EnumAttrCase<"Silu", 2, "silu">,
    I32EnumAttrCase<"Relu", 3, "relu">]> {
  let cppNamespace = "::mt::train";
  let genSpecializedAttr = 0;
}
def Train_ActivationAttr : EnumAttr<Train_Dialect, Train_Activation, "act">;

// The functions of the pointwise ops (Train_PointwiseOp): plan.proto's
// UnaryFn, generated from it (dialects/Train/IR/CMakeLists.txt).
include "TrainUnaryFns.td"
def Train_UnaryFnAttr : EnumAttr<Train_Dialect, Train_UnaryFn, "unary_fn">;

def Train_InputRole : I32EnumAttr<"InputRole", "what a graph input carries", [
    I32EnumAttrCase<"Tokens", 0, "tokens">,
    I32EnumAttrCase<"Labels", 1, "labels">,
    I32EnumAttrCase<"Targets", 2, "targets">,
    I32EnumAttrCase<"Other", 3, "other">,
    I32EnumAttrCase<"LossScale", 4, "loss_scale">,
    I32EnumAttrCase<"Data", 5, "data">]> {
  let cppNamespace = "::mt::train";
  let genSpecializedAttr = 0;
}
def Train_InputRoleAttr : EnumAttr<Train_Dialect, Train_InputRole, "role">;

#endif // MT_TRAIN_DIALECT
