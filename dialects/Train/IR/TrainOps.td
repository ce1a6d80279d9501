//===- TrainOps.td - ops of the `train` dialect ------------*- tablegen -*-===//
//
// Primitive ops mirror ONNX (opsets 14-20) with static shapes; fused ops are
// what the fuse pass recognises and what kernels implement.
//
//===----------------------------------------------------------------------===//
#ifndef MT_TRAIN_OPS
#define MT_TRAIN_OPS

include "dialects/Train/IR/TrainDialect.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/IR/BuiltinAttributes.td"
include "mlir/IR/SymbolInterfaces.td"

def Train_Tensor : RankedTensorOf<[AnyType]>;
def Train_FloatTensor : RankedTensorOf<[AnyFloat]>;
def Train_IntTensor : RankedTensorOf<[AnySignlessInteger]>;

// An op that stands for a pattern of several (a layer's linear, norm,
// attention, ...): the summary counts it as fused, and --explain-fusion
// says nothing of it.
def Train_Fused : NativeOpTrait<"FusedOp"> { let cppNamespace = "::mt::train"; }

// The arithmetic of the op's plan kernel: FLOPs per element of its largest
// operand or result (a multiply-add counts 2; 0: the kernel only moves
// data), what the cost model and the summary's fused share count. Every op
// with a kernel declares it here, or, when its FLOPs are no multiple of one
// tensor's size (a GEMM, attention, an activation chosen by attribute),
// has a formula (`flopsOf` in dialects/Sched/Transforms/TrainKernels.cpp);
// an op with neither does not build.
class Train_Flops<int n>
    : ParamNativeOpTrait<"FlopsPerElement", !cast<string>(n)> {
  let cppNamespace = "::mt::train";
}

// Most ops print as `train.op %a, %b {attrs} : (types) -> types`.
class Train_PureOp<string mnemonic, list<Trait> traits = []>
    : Train_Op<mnemonic, !listconcat([Pure], traits)> {
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

// An op whose result types follow from operand types and attributes alone.
class Train_InferOp<string mnemonic, list<Trait> traits = []>
    : Train_PureOp<mnemonic, !listconcat([InferTypeOpAdaptor], traits)>;

// An op whose result shape depends on the value of a shape-like operand
// (Reshape's shape, Slice's starts, ...). The result type is stated in the
// IR; the verifier checks it whenever that operand is a constant.
class Train_ValueShapedOp<string mnemonic, list<Trait> traits = []>
    : Train_PureOp<mnemonic, traits> {
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Weights and constants
//===----------------------------------------------------------------------===//

def Train_ParamOp : Train_Op<"param", [Symbol]> {
  let summary = "A named model parameter or buffer: a symbol of the module";
  let description = [{
    Declares a tensor of the model by its original name (the symbol) and
    says where its bytes live, as file, offset and length in bytes: `inline`
    (the raw_data of the initializer inside the model file), `external`
    (ONNX external data), or a `safetensors` file. Functions read it with
    `train.param.load`; being a symbol, a parameter stays when every load of
    it is gone (a pass may erase dead loads, never a parameter). `trainable`
    marks parameters that get gradients; the others are frozen buffers. A
    frozen buffer that is small and inline may carry its `value`, so that
    tables derived from it (rotary frequencies) fold; trainable weights never
    do: the compiler does not read their data. `saved_as` lists the names a
    checkpoint stores the weight under (the user's Hugging Face names; a
    tied weight may have two) and `saved_file` the shard (of sharded
    weights) it is saved in, and `data_transposed` says that its bytes
    hold the 2-D weight transposed (an exporter folded W^T into a constant).
    `parts` replaces `saved_as` for a weight a checkpoint stores in several
    tensors (each expert of a fused `[E, ...]` parameter): each entry is
    `{name, at, shape}`, a run of the weight's elements (row-major) from
    element `at`; when the user's weights hold it in those tensors, each
    entry also says where (`file`, `offset`, `length`, and `saved_file` for
    a shard), and the weight itself has no file.

    ```mlir
    train.param @"model.layers.0.mlp.up_proj.weight" {trainable,
        source = #train<source external>, file = "model.onnx.data",
        offset = 0 : i64, length = 32768 : i64} : tensor<128x64xf32>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                   TypeAttrOf<Train_Tensor>:$type, UnitAttr:$trainable,
                   Train_WeightSourceAttr:$source,
                   OptionalAttr<StrAttr>:$file, OptionalAttr<I64Attr>:$offset,
                   OptionalAttr<I64Attr>:$length,
                   OptionalAttr<ElementsAttr>:$value,
                   OptionalAttr<StrArrayAttr>:$saved_as,
                   OptionalAttr<StrAttr>:$saved_file,
                   UnitAttr:$data_transposed,
                   OptionalAttr<DictArrayAttr>:$parts);
  let assemblyFormat = "$sym_name attr-dict `:` $type";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The tensor type of its loads.
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
  }];
}

def Train_ParamLoadOp : Train_Op<"param.load",
    [Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "The value of a parameter";
  let description = [{
    ```mlir
    %w = train.param.load @"model.layers.0.mlp.up_proj.weight" : tensor<128x64xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$param);
  let results = (outs Train_Tensor:$result);
  let assemblyFormat = "$param attr-dict `:` type($result)";
  let extraClassDeclaration = [{
    /// The parameter's name (its symbol).
    ::llvm::StringRef getName() { return getParam(); }
    /// The parameter it loads (a lookup in the enclosing module).
    ParamOp getParamOp();
  }];
}

def Train_ConstantOp : Train_Op<"constant", [Pure, ConstantLike, InferTypeOpAdaptor]> {
  let summary = "A constant tensor (ONNX Constant, integer initializers, folded values)";
  let description = [{
    ```mlir
    %c = train.constant dense<[2, 16, 64]> : tensor<3xi64>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Train_Tensor:$result);
  let assemblyFormat = "$value attr-dict";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class Train_UnaryOp<string mnemonic, string s, int flops, Type T = Train_Tensor>
    : Train_InferOp<mnemonic, [Train_Flops<flops>]> {
  let summary = s;
  let description = "Elementwise, ONNX semantics. `%y = train." # mnemonic #
                    " %x : (tensor<4xf32>) -> tensor<4xf32>`";
  let arguments = (ins T:$input);
  let results = (outs T:$result);
  let hasFolder = 1;
  // The operand's type, and the value ConstEval computes from a constant
  // operand: a new unary op needs no C++ in TrainOps.cpp.
  let extraClassDefinition = [{
    ::mlir::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *, std::optional<::mlir::Location>, Adaptor a,
        ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return sameAs(types, a.getInput());
    }
    ::mlir::OpFoldResult $cppClass::fold(FoldAdaptor a) {
      return foldTrainOp(getOperation(), a.getOperands());
    }
  }];
}

def Train_NegOp : Train_UnaryOp<"neg", "-x", 1>;
def Train_NotOp : Train_UnaryOp<"not", "Logical not", 1, TensorOf<[I1]>>;
def Train_IdentityOp : Train_UnaryOp<"identity", "Identity (removed by folding)", 0>;

//===----------------------------------------------------------------------===//
// Pointwise functions: one description each
//===----------------------------------------------------------------------===//

def Train_PointwiseOpInterface : OpInterface<"PointwiseOpInterface"> {
  let cppNamespace = "::mt::train";
  let description = [{
    An elementwise function of one float operand that the UNARY kernel
    computes (Train_PointwiseOp): the function and its parameters, which
    the plan's kernel, the constant folder and the gradient read.
  }];
  // Default implementations, so that each op has them as its own methods.
  let methods = [
    InterfaceMethod<"The function (plan.proto's UnaryFn).",
      "::mt::train::UnaryFn", "getFn", (ins), "",
      [{ return ConcreteOp::kFn; }]>,
    InterfaceMethod<"Its first parameter (UnaryFn says what it is).",
      "float", "getAlphaValue", (ins), "",
      [{ return (*static_cast<ConcreteOp *>(this)).getAlpha().convertToFloat(); }]>,
    InterfaceMethod<"Its second parameter.",
      "float", "getBetaValue", (ins), "",
      [{ return (*static_cast<ConcreteOp *>(this)).getBeta().convertToFloat(); }]>
  ];
}

// A pointwise function is this one description. `fn` is its function in
// plan.proto's UnaryFn (the CPU and CUDA kernels share its code and its
// derivative: applyUnary and applyUnaryGrad in kernels/cpu/primitive_ops.h);
// `onnx` the ONNX operator imported into it, at every opset the importer
// reads, with the attributes `alphaName` and `betaName` (when named) as the
// function's parameters, defaulting as ONNX's do; `flops` the arithmetic of
// one element, for the cost model (required: the op does not build
// without it). What the other places need follows from these fields:
// the importer's row, the UNARY kernel and its attributes, the FLOP count,
// the constant folder's evaluation and the gradient (UNARY_GRAD's, unless
// Gradients.cpp has a rule of its own for the op).
class Train_PointwiseOp<string mnemonic, string fn, string s, string onnx,
                        int flops, string alphaName = "",
                        string alphaDefault = "0.0", string betaName = "",
                        string betaDefault = "0.0">
    : Train_InferOp<mnemonic, [Train_PointwiseOpInterface, Train_Flops<flops>]> {
  let summary = s;
  let description = !if(!empty(onnx), "Elementwise", "ONNX " # onnx # ", elementwise") # ". `%y = train." #
                    mnemonic # " %x : (tensor<4xf32>) -> tensor<4xf32>`" #
                    !if(!empty(alphaName), "",
                        "; its " # alphaName # " is `alpha`") #
                    !if(!empty(betaName), "",
                        ", its " # betaName # " `beta`");
  let arguments = (ins Train_FloatTensor:$input,
                       DefaultValuedAttr<F32Attr, alphaDefault>:$alpha,
                       DefaultValuedAttr<F32Attr, betaDefault>:$beta);
  let results = (outs Train_FloatTensor:$result);
  let hasFolder = 1;
  // The function at its defaults (the gradient rules' and the patterns').
  let builders = [OpBuilder<(ins "::mlir::Value":$input), [{
    build($_builder, $_state, input, ::mlir::FloatAttr(), ::mlir::FloatAttr());
  }]>];
  let extraClassDeclaration = [{
    static constexpr ::mt::train::UnaryFn kFn = ::mt::train::UnaryFn::}] #
      fn # [{;
    static constexpr const char *kOnnxName = "}] # onnx # [{";
    static constexpr const char *kOnnxAlpha = "}] # alphaName # [{";
    static constexpr const char *kOnnxBeta = "}] # betaName # [{";
  }];
  let extraClassDefinition = [{
    ::mlir::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *, std::optional<::mlir::Location>, Adaptor a,
        ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return sameAs(types, a.getInput());
    }
    ::mlir::OpFoldResult $cppClass::fold(FoldAdaptor a) {
      return foldTrainOp(getOperation(), a.getOperands());
    }
  }];
}

def Train_ExpOp : Train_PointwiseOp<"exp", "Exp", "e^x", "Exp", 8>;
def Train_LogOp : Train_PointwiseOp<"log", "Log", "Natural logarithm", "Log", 8>;
def Train_TanhOp : Train_PointwiseOp<"tanh", "Tanh", "Hyperbolic tangent", "Tanh", 10>;
def Train_SqrtOp : Train_PointwiseOp<"sqrt", "Sqrt", "Square root", "Sqrt", 4>;
def Train_ReciprocalOp : Train_PointwiseOp<"reciprocal", "Reciprocal", "1 / x",
                                           "Reciprocal", 4>;
def Train_SigmoidOp : Train_PointwiseOp<"sigmoid", "Sigmoid", "1 / (1 + e^-x)",
                                        "Sigmoid", 10>;
def Train_ErfOp : Train_PointwiseOp<"erf", "Erf", "Error function", "Erf", 12>;
def Train_CosOp : Train_PointwiseOp<"cos", "Cos", "Cosine", "Cos", 10>;
def Train_SinOp : Train_PointwiseOp<"sin", "Sin", "Sine", "Sin", 10>;
def Train_AbsOp : Train_PointwiseOp<"abs", "Abs", "|x|", "Abs", 1>;
def Train_ReluOp : Train_PointwiseOp<"relu", "Relu", "max(x, 0)", "Relu", 1>;
def Train_LeakyReluOp : Train_PointwiseOp<"leaky_relu", "LeakyRelu",
    "x < 0 ? alpha x : x", "LeakyRelu", 2, "alpha", "0.01">;
def Train_EluOp : Train_PointwiseOp<"elu", "Elu", "x < 0 ? alpha (e^x - 1) : x",
                                    "Elu", 10, "alpha", "1.0">;
def Train_SeluOp : Train_PointwiseOp<"selu", "Selu",
    "beta (x <= 0 ? alpha (e^x - 1) : x)", "Selu", 11, "alpha",
    "1.67326319217681884765625", "gamma", "1.05070102214813232421875">;
def Train_CeluOp : Train_PointwiseOp<"celu", "Celu",
    "max(0, x) + min(0, alpha (e^(x / alpha) - 1))", "Celu", 12, "alpha", "1.0">;
def Train_SoftplusOp : Train_PointwiseOp<"softplus", "Softplus", "log(1 + e^x)",
                                         "Softplus", 18>;
def Train_SoftsignOp : Train_PointwiseOp<"softsign", "Softsign", "x / (1 + |x|)",
                                         "Softsign", 3>;
def Train_HardSigmoidOp : Train_PointwiseOp<"hard_sigmoid", "HardSigmoid",
    "max(0, min(1, alpha x + beta))", "HardSigmoid", 4, "alpha", "0.2", "beta",
    "0.5">;
def Train_HardSwishOp : Train_PointwiseOp<"hard_swish", "HardSwish",
    "x max(0, min(1, x / 6 + 1 / 2))", "HardSwish", 5>;
def Train_MishOp : Train_PointwiseOp<"mish", "Mish", "x tanh(softplus(x))",
                                     "Mish", 30>;
def Train_ThresholdedReluOp : Train_PointwiseOp<"thresholded_relu",
    "ThresholdedRelu", "x > alpha ? x : 0", "ThresholdedRelu", 1, "alpha", "1.0">;
def Train_ShrinkOp : Train_PointwiseOp<"shrink", "Shrink",
    "x < -alpha ? x + beta : x > alpha ? x - beta : 0", "Shrink", 3, "lambd",
    "0.5", "bias", "0.0">;
def Train_TanOp : Train_PointwiseOp<"tan", "Tan", "Tangent", "Tan", 20>;
def Train_AsinOp : Train_PointwiseOp<"asin", "Asin", "Arcsine", "Asin", 20>;
def Train_AcosOp : Train_PointwiseOp<"acos", "Acos", "Arccosine", "Acos", 20>;
def Train_AtanOp : Train_PointwiseOp<"atan", "Atan", "Arctangent", "Atan", 20>;
def Train_SinhOp : Train_PointwiseOp<"sinh", "Sinh", "Hyperbolic sine", "Sinh", 20>;
def Train_CoshOp : Train_PointwiseOp<"cosh", "Cosh", "Hyperbolic cosine", "Cosh",
                                     20>;
def Train_AsinhOp : Train_PointwiseOp<"asinh", "Asinh", "Inverse hyperbolic sine",
                                      "Asinh", 20>;
def Train_AcoshOp : Train_PointwiseOp<"acosh", "Acosh",
    "Inverse hyperbolic cosine", "Acosh", 20>;
def Train_AtanhOp : Train_PointwiseOp<"atanh", "Atanh",
    "Inverse hyperbolic tangent", "Atanh", 20>;
def Train_FloorOp : Train_PointwiseOp<"floor", "Floor", "Round down", "Floor", 1>;
def Train_CeilOp : Train_PointwiseOp<"ceil", "Ceil", "Round up", "Ceil", 1>;
def Train_RoundOp : Train_PointwiseOp<"round", "Round",
    "Round to the nearest integer, halves to even", "Round", 1>;
def Train_SignOp : Train_PointwiseOp<"sign", "Sign", "-1, 0 or 1", "Sign", 2>;
// No ONNX operator of their own: what a Cast to bfloat16 or float16 does to
// the values (the importer keeps every float in float32).
def Train_RoundBf16Op : Train_PointwiseOp<"round_bf16", "RoundBf16",
    "Round to bfloat16's precision, kept in float32", "", 2>;
def Train_RoundF16Op : Train_PointwiseOp<"round_f16", "RoundF16",
    "Round to float16's precision and range, kept in float32", "", 6>;

def Train_IsNaNOp : Train_InferOp<"is_nan", [Train_Flops<1>]> {
  let summary = "True where x is NaN (no gradient)";
  let description = "Elementwise, ONNX semantics. `%y = train.is_nan %x : "
                    "(tensor<4xf32>) -> tensor<4xi1>`";
  let arguments = (ins Train_FloatTensor:$input);
  let results = (outs TensorOf<[I1]>:$result);
  let hasFolder = 1;
}

def Train_GeluOp : Train_InferOp<"gelu"> {
  let summary = "ONNX Gelu (opset 20): exact, or the tanh approximation";
  let description = "`%y = train.gelu %x {tanh} : (tensor<4xf32>) -> tensor<4xf32>`";
  let arguments = (ins Train_FloatTensor:$input, UnitAttr:$tanh);
  let results = (outs Train_FloatTensor:$result);
}

class Train_BinaryOp<string mnemonic, string s, bit compare = 0, int flops = 1>
    : Train_InferOp<mnemonic, [Train_Flops<flops>]> {
  let summary = s;
  let description = "Elementwise with multidirectional broadcasting. "
      "`%z = train." # mnemonic # " %a, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4x" #
      !if(compare, "i1", "f32") # ">`";
  let arguments = (ins Train_Tensor:$lhs, Train_Tensor:$rhs);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}

def Train_AddOp : Train_BinaryOp<"add", "a + b">;
def Train_SubOp : Train_BinaryOp<"sub", "a - b">;
def Train_MulOp : Train_BinaryOp<"mul", "a * b">;
def Train_DivOp : Train_BinaryOp<"div", "a / b (integer division truncates)">;
// e^(b log a): a logarithm and an exponential (Train_LogOp's, Train_ExpOp's).
def Train_PowOp : Train_BinaryOp<"pow", "a ^ b (result has the type of a)", 0, 17>;
def Train_MaxOp : Train_BinaryOp<"max", "Elementwise maximum">;
def Train_MinOp : Train_BinaryOp<"min", "Elementwise minimum">;
def Train_AndOp : Train_BinaryOp<"and", "Logical and">;
def Train_OrOp : Train_BinaryOp<"or", "Logical or">;
def Train_XorOp : Train_BinaryOp<"xor", "Logical exclusive or">;
def Train_EqualOp : Train_BinaryOp<"equal", "a == b", 1>;
def Train_LessOp : Train_BinaryOp<"less", "a < b", 1>;
def Train_LessOrEqualOp : Train_BinaryOp<"less_or_equal", "a <= b", 1>;
def Train_GreaterOp : Train_BinaryOp<"greater", "a > b", 1>;
def Train_GreaterOrEqualOp : Train_BinaryOp<"greater_or_equal", "a >= b", 1>;

def Train_WhereOp : Train_InferOp<"where", [Train_Flops<1>]> {
  let summary = "cond ? x : y, with broadcasting";
  let description = "`%r = train.where %c, %x, %y : (tensor<4xi1>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>`";
  let arguments = (ins TensorOf<[I1]>:$condition, Train_Tensor:$x, Train_Tensor:$y);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}

def Train_CastOp : Train_InferOp<"cast", [Train_Flops<0>]> {
  let summary = "Convert the element type";
  let description = "`%y = train.cast %x {to = i64} : (tensor<4xf32>) -> tensor<4xi64>`";
  let arguments = (ins Train_Tensor:$input, TypeAttr:$to);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}

def Train_CastLikeOp : Train_InferOp<"cast_like", [Train_Flops<0>]> {
  let summary = "Convert to the element type of a second tensor";
  let description = "`%y = train.cast_like %x, %t : (tensor<4xf32>, tensor<i64>) -> tensor<4xi64>`";
  let arguments = (ins Train_Tensor:$input, Train_Tensor:$target);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}

def Train_DropoutOp : Train_InferOp<"dropout"> {
  let summary = "Dropout; a no-op when ratio is 0 or training is off";
  let description = "`%y = train.dropout %x {ratio = 0.1 : f32, training} : (tensor<4xf32>) -> tensor<4xf32>`";
  let arguments = (ins Train_FloatTensor:$input, F32Attr:$ratio, UnitAttr:$training);
  let results = (outs Train_FloatTensor:$result);
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Linear algebra and normalisation
//===----------------------------------------------------------------------===//

def Train_MatMulOp : Train_InferOp<"matmul"> {
  let summary = "numpy.matmul: batched, with broadcasting of batch dims";
  let description = "`%c = train.matmul %a, %b : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>`";
  let arguments = (ins Train_Tensor:$lhs, Train_Tensor:$rhs);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}

def Train_GemmOp : Train_InferOp<"gemm"> {
  let summary = "alpha * op(A) op(B) + beta * C on 2-D tensors";
  let description = "`%y = train.gemm %a, %b, %c {transB} : (tensor<2x4xf32>, tensor<8x4xf32>, tensor<8xf32>) -> tensor<2x8xf32>`";
  let arguments = (ins Train_FloatTensor:$a, Train_FloatTensor:$b,
                   Optional<Train_FloatTensor>:$c, UnitAttr:$transA,
                   UnitAttr:$transB, DefaultValuedAttr<F32Attr, "1.0">:$alpha,
                   DefaultValuedAttr<F32Attr, "1.0">:$beta);
  let results = (outs Train_FloatTensor:$result);
}

// A max, a difference, an exponential (8), a sum and a division per element.
class Train_AxisOp<string mnemonic, string s>
    : Train_InferOp<mnemonic, [Train_Flops<12>]> {
  let summary = s;
  let description = "`%y = train." # mnemonic # " %x {axis = -1 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>`";
  let arguments = (ins Train_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Train_FloatTensor:$result);
}
def Train_SoftmaxOp : Train_AxisOp<"softmax", "Softmax along one axis">;
def Train_LogSoftmaxOp : Train_AxisOp<"log_softmax", "Log of softmax along one axis">;

def Train_LayerNormalizationOp : Train_InferOp<"layer_normalization"> {
  let summary = "ONNX LayerNormalization over the axes from `axis` to the last (output Y only)";
  let description = "`%y = train.layer_normalization %x, %s, %b {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (...) -> tensor<2x4xf32>`";
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$scale,
                   Optional<Train_FloatTensor>:$bias, I64Attr:$axis, F32Attr:$epsilon);
  let results = (outs Train_FloatTensor:$result);
}

class Train_ReduceOp<string mnemonic, string s>
    : Train_InferOp<mnemonic, [Train_Flops<1>]> {
  let summary = s;
  let description = "Axes are an attribute here (ONNX moved them to an input in opsets 13/18). "
      "`%m = train." # mnemonic # " %x {axes = array<i64: -1>, keepdims} : (tensor<2x4xf32>) -> tensor<2x1xf32>`";
  let arguments = (ins Train_Tensor:$input, DenseI64ArrayAttr:$axes, UnitAttr:$keepdims);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}
def Train_ReduceMeanOp : Train_ReduceOp<"reduce_mean", "Mean over axes (all when empty)">;
def Train_ReduceSumOp : Train_ReduceOp<"reduce_sum", "Sum over axes (all when empty)">;
def Train_ReduceMaxOp : Train_ReduceOp<"reduce_max", "Maximum over axes (all when empty)">;

def Train_CumSumOp : Train_InferOp<"cumsum", [Train_Flops<1>]> {
  let summary = "Cumulative sum along an axis";
  let description = "`%y = train.cumsum %x {axis = 1 : i64} : (tensor<2x4xi64>) -> tensor<2x4xi64>`";
  let arguments = (ins Train_Tensor:$input, I64Attr:$axis, UnitAttr:$exclusive, UnitAttr:$reverse);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}

def Train_TriluOp : Train_InferOp<"trilu", [Train_Flops<0>]> {
  let summary = "Keep the upper or lower triangle of the last two dims";
  let description = "`%y = train.trilu %x {upper, k = 1 : i64} : (tensor<4x4xf32>) -> tensor<4x4xf32>`";
  let arguments = (ins Train_Tensor:$input, UnitAttr:$upper, I64Attr:$k);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}

def Train_TopKOp : Train_InferOp<"topk"> {
  let summary = "The k largest (or smallest) elements along an axis and their indices";
  let description = [{
    As ONNX TopK with sorted = 1: values in order (ties by the lower index
    first) and their indices along the axis. The indices carry no gradient.
    ```mlir
    %v, %i = train.topk %x {k = 2 : i64, axis = -1 : i64} : (tensor<8x4xf32>) -> (tensor<8x2xf32>, tensor<8x2xi64>)
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, I64Attr:$k, I64Attr:$axis,
                   UnitAttr:$smallest);
  let results = (outs Train_FloatTensor:$values, TensorOf<[I64]>:$indices);
}

def Train_SoftmaxCrossEntropyLossOp : Train_InferOp<"softmax_cross_entropy_loss"> {
  let summary = "ONNX SoftmaxCrossEntropyLoss over [N, C] or [N, C, d...] scores (no weights)";
  let description = "`%l = train.softmax_cross_entropy_loss %s, %t {ignore_index = -100 : i64, reduction = #train<reduction mean>} : (tensor<32x256xf32>, tensor<32xi64>) -> tensor<f32>`";
  let arguments = (ins Train_FloatTensor:$scores, Train_IntTensor:$labels,
                   OptionalAttr<I64Attr>:$ignore_index, Train_ReductionAttr:$reduction);
  let results = (outs Train_FloatTensor:$result);
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

def Train_TransposeOp : Train_InferOp<"transpose", [Train_Flops<0>]> {
  let summary = "Permute dimensions";
  let description = "`%y = train.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>`";
  let arguments = (ins Train_Tensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}

def Train_ReshapeOp : Train_ValueShapedOp<"reshape", [Train_Flops<0>]> {
  let summary = "ONNX Reshape: 0 copies a dim (unless allowzero), -1 is inferred";
  let description = "`%y = train.reshape %x, %s : (tensor<2x8xf32>, tensor<3xi64>) -> tensor<2x2x4xf32>`";
  let arguments = (ins Train_Tensor:$input, TensorOf<[I64]>:$shape, UnitAttr:$allowzero);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}

class Train_AxesShapeOp<string mnemonic, string s>
    : Train_InferOp<mnemonic, [Train_Flops<0>]> {
  let summary = s;
  let description = "`%y = train." # mnemonic # " %x {axes = array<i64: 0>} : (...) -> ...`";
  let arguments = (ins Train_Tensor:$input, DenseI64ArrayAttr:$axes);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}
def Train_UnsqueezeOp : Train_AxesShapeOp<"unsqueeze", "Insert size-1 dims at the given output axes">;
def Train_SqueezeOp : Train_AxesShapeOp<"squeeze", "Remove the given size-1 dims (all size-1 dims when empty)">;

def Train_FlattenOp : Train_InferOp<"flatten", [Train_Flops<0>]> {
  let summary = "Flatten to 2-D at `axis`";
  let description = "`%y = train.flatten %x {axis = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x12xf32>`";
  let arguments = (ins Train_Tensor:$input, I64Attr:$axis);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}

def Train_ConcatOp : Train_InferOp<"concat", [Train_Flops<0>]> {
  let summary = "Concatenate along an axis";
  let description = "`%y = train.concat %a, %b {axis = 0 : i64} : (tensor<2xi64>, tensor<1xi64>) -> tensor<3xi64>`";
  let arguments = (ins Variadic<Train_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def Train_SplitOp : Train_InferOp<"split", [Train_Flops<0>]> {
  let summary = "Split along an axis into parts of the given sizes";
  let description = "`%a, %b = train.split %x {axis = 1 : i64, sizes = array<i64: 2, 2>} : (tensor<2x4xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>)`";
  let arguments = (ins Train_Tensor:$input, I64Attr:$axis, DenseI64ArrayAttr:$sizes);
  let results = (outs Variadic<Train_Tensor>:$results);
}

def Train_SplitToSequenceOp : Train_InferOp<"split_to_sequence"> {
  let summary = "Split into a sequence of tensors (sizes static here)";
  let description = "`%s = train.split_to_sequence %x {axis = 0 : i64, sizes = array<i64: 1, 1>} : (tensor<2x4xf32>) -> !train.seq<tensor<1x4xf32>, tensor<1x4xf32>>`";
  let arguments = (ins Train_Tensor:$input, I64Attr:$axis, DenseI64ArrayAttr:$sizes,
                   UnitAttr:$squeeze);
  let results = (outs Train_SequenceType:$result);
}

def Train_SequenceAtOp : Train_InferOp<"sequence_at"> {
  let summary = "The tensor at a (constant) position of a sequence";
  let description = "`%t = train.sequence_at %s {position = 1 : i64} : (!train.seq<...>) -> tensor<1x4xf32>`";
  let arguments = (ins Train_SequenceType:$sequence, I64Attr:$position);
  let results = (outs Train_Tensor:$result);
}

def Train_SliceOp : Train_ValueShapedOp<"slice", [Train_Flops<0>]> {
  let summary = "ONNX Slice with starts, ends, axes and steps as operands";
  let description = "`%y = train.slice %x, %st, %en, %ax, %sp : (tensor<16xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<8xf32>`";
  let arguments = (ins Train_Tensor:$input, Train_IntTensor:$starts, Train_IntTensor:$ends,
                   Train_IntTensor:$axes, Train_IntTensor:$steps);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def Train_GatherOp : Train_InferOp<"gather", [Train_Flops<0>]> {
  let summary = "Gather slices along an axis by index";
  let description = "`%y = train.gather %t, %i {axis = 0 : i64} : (tensor<256x64xf32>, tensor<2x16xi64>) -> tensor<2x16x64xf32>`";
  let arguments = (ins Train_Tensor:$data, Train_IntTensor:$indices, I64Attr:$axis);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}

def Train_GatherElementsOp : Train_InferOp<"gather_elements", [Train_Flops<0>]> {
  let summary = "ONNX GatherElements: the elements of each line along an axis that its indices name";
  let description = [{
    `y[.., j, ..] = data[.., indices[.., j, ..], ..]` along `axis` (an index
    negative from the end); the indices have data's dims but along the axis,
    where they may have any number. The indices carry no gradient.
    ```mlir
    %y = train.gather_elements %d, %i {axis = -1 : i64} : (tensor<8x4xf32>, tensor<8x1xi64>) -> tensor<8x1xf32>
    ```
  }];
  let arguments = (ins Train_Tensor:$data, Train_IntTensor:$indices, I64Attr:$axis);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}

def Train_ScatterElementsOp : Train_InferOp<"scatter_elements", [Train_Flops<1>]> {
  let summary = "ONNX ScatterElements (reduction none): data with updates written at the places the indices name along an axis";
  let description = [{
    `y = data`, then `y[.., indices[.., j, ..], ..] = updates[.., j, ..]`
    along `axis`, in index order (of two updates of one place the later
    stays; ONNX leaves that case undefined). Indices and updates have the
    same dims, data's but along the axis. The indices carry no gradient.
    ```mlir
    %y = train.scatter_elements %d, %i, %u {axis = -1 : i64} : (tensor<8x4xf32>, tensor<8x1xi64>, tensor<8x1xf32>) -> tensor<8x4xf32>
    ```
  }];
  let arguments = (ins Train_Tensor:$data, Train_IntTensor:$indices,
                   Train_Tensor:$updates, I64Attr:$axis);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}

def Train_GatherNDOp : Train_InferOp<"gather_nd", [Train_Flops<0>]> {
  let summary = "ONNX GatherND";
  let description = "`%y = train.gather_nd %d, %i {batch_dims = 0 : i64} : (...) -> ...`";
  let arguments = (ins Train_Tensor:$data, Train_IntTensor:$indices, I64Attr:$batch_dims);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}

def Train_ExpandOp : Train_ValueShapedOp<"expand", [Train_Flops<0>]> {
  let summary = "Broadcast to a shape (ONNX Expand)";
  let description = "`%y = train.expand %x, %s : (tensor<1x4xf32>, tensor<2xi64>) -> tensor<3x4xf32>`";
  let arguments = (ins Train_Tensor:$input, TensorOf<[I64]>:$shape);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}

def Train_TileOp : Train_ValueShapedOp<"tile", [Train_Flops<0>]> {
  let summary = "Repeat along each dim";
  let description = "`%y = train.tile %x, %r : (tensor<2xf32>, tensor<1xi64>) -> tensor<6xf32>`";
  let arguments = (ins Train_Tensor:$input, TensorOf<[I64]>:$repeats);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}

def Train_PadOp : Train_ValueShapedOp<"pad", [Train_Flops<0>]> {
  let summary = "Constant padding; pads cover every dim (begins then ends)";
  let description = "`%y = train.pad %x, %p, %v : (tensor<2x16xi64>, tensor<4xi64>, tensor<i64>) -> tensor<2x17xi64>`";
  let arguments = (ins Train_Tensor:$input, TensorOf<[I64]>:$pads, Train_Tensor:$value);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}

def Train_RangeOp : Train_ValueShapedOp<"range"> {
  let summary = "start, start + delta, ... below limit (scalars)";
  let description = "`%r = train.range %a, %b, %c : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<16xi64>`";
  let arguments = (ins Train_Tensor:$start, Train_Tensor:$limit, Train_Tensor:$delta);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}

def Train_ConstantOfShapeOp : Train_ValueShapedOp<"constant_of_shape"> {
  let summary = "A tensor of the given shape filled with one value";
  let description = "`%y = train.constant_of_shape %s {value = dense<0.0> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<2x3xf32>`";
  let arguments = (ins TensorOf<[I64]>:$shape, ElementsAttr:$value);
  let results = (outs Train_Tensor:$result);
  let hasFolder = 1;
}

def Train_ShapeOp : Train_InferOp<"shape"> {
  let summary = "The shape of a tensor (dims start..end) as i64";
  let description = "`%s = train.shape %x {start = 0 : i64, end = 2 : i64} : (tensor<2x16x64xf32>) -> tensor<2xi64>`";
  let arguments = (ins Train_Tensor:$input, I64Attr:$start, I64Attr:$end);
  let results = (outs TensorOf<[I64]>:$result);
  let hasFolder = 1;
}

def Train_SizeOp : Train_InferOp<"size"> {
  let summary = "The number of elements, as an i64 scalar";
  let description = "`%n = train.size %x : (tensor<2x16xf32>) -> tensor<i64>`";
  let arguments = (ins Train_Tensor:$input);
  let results = (outs TensorOf<[I64]>:$result);
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Fused ops
//===----------------------------------------------------------------------===//

def Train_EmbeddingOp : Train_InferOp<"embedding", [Train_Fused, Train_Flops<0>]> {
  let summary = "Rows of an embedding table by token id";
  let description = [{
    `table[ids]`: ids [d...] of integers, table [V, D], result [d..., D].
    With `padding_idx` (torch's nn.Embedding(padding_idx=p)) row p gets no
    gradient.
    ```mlir
    %h = train.embedding %table, %ids : (tensor<256x64xf32>, tensor<2x16xi64>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$table, Train_IntTensor:$ids,
                       OptionalAttr<I64Attr>:$padding_idx);
  let results = (outs Train_FloatTensor:$result);
}

def Train_LinearOp : Train_InferOp<"linear", [Train_Fused]> {
  let summary = "x W (+ bias) over the last dim of x";
  let description = [{
    `layout = out_in`: weight [N, K] (PyTorch's nn.Linear, y = x W^T);
    `in_out`: weight [K, N] (y = x W). x [..., K], bias [N], result [..., N].
    ```mlir
    %y = train.linear %x, %w {layout = #train<layout out_in>} : (tensor<2x16x64xf32>, tensor<128x64xf32>) -> tensor<2x16x128xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$weight,
                   Optional<Train_FloatTensor>:$bias, Train_WeightLayoutAttr:$layout);
  let results = (outs Train_FloatTensor:$result);
}

def Train_ExpertLinearOp : Train_InferOp<"expert_linear", [Train_Fused]> {
  let summary = "Each row through the linear of the expert its id names";
  let description = [{
    A mixture of experts' expert projection without gathering weights: row
    n of x [N, K] times the weight of expert ids[n] (negative from the
    end) of weight [E, O, K] (`layout = out_in`, y = x W^T) or [E, K, O]
    (`in_out`); result [N, O]. The kernels group the rows by expert and run
    one GEMM per expert.
    ```mlir
    %y = train.expert_linear %x, %ids, %w {layout = #train<layout out_in>} : (tensor<64x32xf32>, tensor<64xi64>, tensor<4x96x32xf32>) -> tensor<64x96xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, TensorOf<[I64]>:$ids,
                   Train_FloatTensor:$weight, Train_WeightLayoutAttr:$layout);
  let results = (outs Train_FloatTensor:$result);
}

def Train_RmsNormOp : Train_InferOp<"rms_norm", [Train_Fused, Train_Flops<4>]> {
  let summary = "x / sqrt(mean(x^2) + eps) * w, over the last dim";
  let description = [{
    With `plus_one` the scale is (1 + w) (Gemma's form).
    ```mlir
    %y = train.rms_norm %x, %w {eps = 1.0e-06 : f32} : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$weight,
                   F32Attr:$eps, UnitAttr:$plus_one);
  let results = (outs Train_FloatTensor:$result);
}

def Train_LayerNormOp : Train_InferOp<"layer_norm", [Train_Fused, Train_Flops<7>]> {
  let summary = "(x - mean) / sqrt(var + eps) * w + b, over the last dim";
  let description = [{
    ```mlir
    %y = train.layer_norm %x, %w, %b {eps = 1.0e-05 : f32} : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$weight,
                   Optional<Train_FloatTensor>:$bias, F32Attr:$eps);
  let results = (outs Train_FloatTensor:$result);
}

def Train_RotaryOp : Train_InferOp<"rotary", [Train_Fused, Train_Flops<3>]> {
  let summary = "Rotary position embedding applied to packed heads";
  let description = [{
    x [B, S, H * head_dim]; cos and sin [S, head_dim] or [B, S, head_dim]
    (frozen tables). Half-split (default): rotate_half pairs element i with
    i + head_dim/2; `interleaved`: pairs 2i with 2i+1.
    ```mlir
    %q = train.rotary %x, %cos, %sin {head_dim = 16 : i64} : (tensor<2x16x64xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$cos,
                   Train_FloatTensor:$sin, I64Attr:$head_dim, UnitAttr:$interleaved);
  let results = (outs Train_FloatTensor:$result);
}

def Train_AttentionOp : Train_InferOp<"attention", [Train_Fused]> {
  let summary = "Scaled dot-product attention over packed heads, grouped-query";
  let description = [{
    q [B, S, num_heads * D], k and v [B, S, num_kv_heads * D]; result
    [B, S, num_heads * D]. Query head h reads key/value head
    h / (num_heads / num_kv_heads). The scores are scale q . k, then, when
    `softcap` c > 0, c tanh(score / c) (Gemma 2's and ONNX Attention's
    softcapping); an optional additive `mask` broadcastable to
    [B, num_heads, S, S] is added after (a frozen operand); `causal` masks
    j > i; `window` > 0 also masks i - j >= window.
    ```mlir
    %o = train.attention %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.25 : f32, causal} : (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$q, Train_FloatTensor:$k, Train_FloatTensor:$v,
                   Optional<Train_FloatTensor>:$mask, I64Attr:$num_heads,
                   I64Attr:$num_kv_heads, F32Attr:$scale, UnitAttr:$causal,
                   DefaultValuedAttr<I64Attr, "0">:$window,
                   DefaultValuedAttr<F32Attr, "0.0f">:$softcap);
  let results = (outs Train_FloatTensor:$result);
}

def Train_ActivationOp : Train_InferOp<"activation", [Train_Fused]> {
  let summary = "Plain MLP activation: gelu (exact), gelu_tanh, silu, relu";
  let description = "`%y = train.activation %x {act = #train<act gelu>} : (tensor<2x16x256xf32>) -> tensor<2x16x256xf32>`";
  let arguments = (ins Train_FloatTensor:$input, Train_ActivationAttr:$act);
  let results = (outs Train_FloatTensor:$result);
}

def Train_GatedActivationOp : Train_InferOp<"gated_activation", [Train_Fused]> {
  let summary = "Gated MLP activation: act(gate) * up (SwiGLU when act = silu)";
  let description = "`%y = train.gated_activation %g, %u {act = #train<act silu>} : (tensor<2x16x128xf32>, tensor<2x16x128xf32>) -> tensor<2x16x128xf32>`";
  let arguments = (ins Train_FloatTensor:$gate, Train_FloatTensor:$up, Train_ActivationAttr:$act);
  let results = (outs Train_FloatTensor:$result);
}

def Train_CrossEntropyOp : Train_InferOp<"cross_entropy", [Train_Fused, Train_Flops<11>]> {
  let summary = "Mean token cross-entropy of logits against labels (fp32 scalar)";
  let description = [{
    logits [B, S, V] or [N, V]; labels with the leading shape. Tokens whose
    label is `ignore_index` do not count. With `shift` the target of
    position t is label t + 1 and the last position is ignored (how Hugging
    Face models take labels = input_ids).
    ```mlir
    %l = train.cross_entropy %logits, %labels {ignore_index = -100 : i64, shift} : (tensor<2x16x256xf32>, tensor<2x16xi64>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$logits, Train_IntTensor:$labels,
                   I64Attr:$ignore_index, UnitAttr:$shift);
  let results = (outs TensorOf<[F32]>:$result);
}

//===----------------------------------------------------------------------===//
// Gradient ops: the backward of each fused op, emitted by the derivation of
// the training step. Each states the same attributes as its forward op.
//===----------------------------------------------------------------------===//

// Gradient ops state their result types; the verifier checks them.
class Train_GradOp<string mnemonic, list<Trait> traits, string s>
    : Train_PureOp<mnemonic, traits> {
  let summary = s;
  let hasVerifier = 1;
}

def Train_UnaryGradOp : Train_InferOp<"unary_grad"> {
  let summary = "dy f'(x) for a pointwise function f (the UNARY_GRAD kernel)";
  let description = [{
    The gradient of a Train_PointwiseOp without a rule of its own in
    Gradients.cpp: its function and parameters, its operand x and the
    gradient of its result. `%dx = train.unary_grad %x, %dy {fn =
    #train<unary_fn relu>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>`
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$grad,
                       Train_UnaryFnAttr:$fn,
                       DefaultValuedAttr<F32Attr, "0.0">:$alpha,
                       DefaultValuedAttr<F32Attr, "0.0">:$beta);
  let results = (outs Train_FloatTensor:$result);
  let hasVerifier = 1;
}

def Train_EmbeddingGradOp : Train_GradOp<"embedding_grad", [Train_Flops<1>],
    "Gradient of an embedding table: rows of dOut scatter-added by id"> {
  let description = "`%dt = train.embedding_grad %dy, %ids {padding_idx = 0 : i64} : (tensor<2x16x64xf32>, tensor<2x16xi64>) -> tensor<256x64xf32>`: row `padding_idx`, when given, is zero";
  let arguments = (ins Train_FloatTensor:$grad, Train_IntTensor:$ids,
                       OptionalAttr<I64Attr>:$padding_idx);
  let results = (outs Train_FloatTensor:$table_grad);
}

def Train_LinearGradOp : Train_GradOp<"linear_grad", [],
    "Gradients of linear with respect to its input and weight"> {
  let description = "`%dx, %dw = train.linear_grad %x, %w, %dy {layout = #train<layout out_in>} : (...) -> (tensor<2x16x64xf32>, tensor<128x64xf32>)`. The bias gradient is a reduce_sum of dy.";
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$weight,
                   Train_FloatTensor:$grad, Train_WeightLayoutAttr:$layout);
  let results = (outs Train_FloatTensor:$input_grad, Train_FloatTensor:$weight_grad);
}

def Train_ExpertLinearGradOp : Train_GradOp<"expert_linear_grad", [],
    "Gradients of expert_linear with respect to its input and weight"> {
  let description = "`%dx, %dw = train.expert_linear_grad %x, %ids, %w, %dy {layout = #train<layout out_in>} : (...) -> (tensor<64x32xf32>, tensor<4x96x32xf32>)`: each expert's weight gradient from the rows routed to it (zero for an expert no row chose).";
  let arguments = (ins Train_FloatTensor:$input, TensorOf<[I64]>:$ids,
                   Train_FloatTensor:$weight, Train_FloatTensor:$grad,
                   Train_WeightLayoutAttr:$layout);
  let results = (outs Train_FloatTensor:$input_grad, Train_FloatTensor:$weight_grad);
}

def Train_RmsNormGradOp : Train_GradOp<"rms_norm_grad", [Train_Flops<8>],
    "Gradients of rms_norm with respect to its input and weight"> {
  let description = "`%dx, %dw = train.rms_norm_grad %x, %w, %dy {eps = 1.0e-06 : f32} : (...) -> (...)`";
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$weight,
                   Train_FloatTensor:$grad, F32Attr:$eps, UnitAttr:$plus_one);
  let results = (outs Train_FloatTensor:$input_grad, Train_FloatTensor:$weight_grad);
}

def Train_LayerNormGradOp : Train_GradOp<"layer_norm_grad", [Train_Flops<10>],
    "Gradients of layer_norm with respect to its input and weight"> {
  let description = "`%dx, %dw = train.layer_norm_grad %x, %w, %dy {eps = 1.0e-05 : f32} : (...) -> (...)`. The bias gradient is a reduce_sum of dy.";
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$weight,
                   Train_FloatTensor:$grad, F32Attr:$eps);
  let results = (outs Train_FloatTensor:$input_grad, Train_FloatTensor:$weight_grad);
}

def Train_GatherGradOp : Train_GradOp<"gather_grad", [Train_Flops<1>],
    "Gradient of a Gather of activations: dy summed into the places its indices name"> {
  let description = "Zeros of the data's shape, then `dx[.., indices[i], ..] += dy[.., i, ..]` "
      "along `axis`, in index order. `%dx = train.gather_grad %dy, %i {axis = 1 : i64} : "
      "(tensor<2x3x4xf32>, tensor<3xi64>) -> tensor<2x5x4xf32>`";
  let arguments = (ins Train_FloatTensor:$grad, Train_IntTensor:$indices, I64Attr:$axis);
  let results = (outs Train_FloatTensor:$input_grad);
}

def Train_GatherNDGradOp : Train_GradOp<"gather_nd_grad", [Train_Flops<1>],
    "Gradient of a GatherND of activations: dy summed into the slices its index tuples name"> {
  let description = "Zeros of the data's shape, then `dx[indices[t]] += dy[t]` for each index "
      "tuple t (batch_dims 0), in tuple order. `%dx = train.gather_nd_grad %dy, %i : "
      "(tensor<2x4xf32>, tensor<2x2xi64>) -> tensor<2x3x4xf32>`";
  let arguments = (ins Train_FloatTensor:$grad, Train_IntTensor:$indices);
  let results = (outs Train_FloatTensor:$input_grad);
}

def Train_GatherElementsGradOp : Train_GradOp<"gather_elements_grad", [Train_Flops<1>],
    "Gradient of a GatherElements: dy summed into the places its indices name"> {
  let description = "Zeros of the data's shape, then `dx[.., indices[.., j, ..], ..] += "
      "dy[.., j, ..]` along `axis` (negative indices from the end), in index order. "
      "`%dx = train.gather_elements_grad %dy, %i {axis = -1 : i64} : "
      "(tensor<8x1xf32>, tensor<8x1xi64>) -> tensor<8x4xf32>`";
  let arguments = (ins Train_FloatTensor:$grad, Train_IntTensor:$indices, I64Attr:$axis);
  let results = (outs Train_FloatTensor:$input_grad);
}

def Train_TopKGradOp : Train_GradOp<"topk_grad", [Train_Flops<0>],
    "Gradient of a TopK: dy at the places its indices name, zeros elsewhere"> {
  let description = "`dx[.., indices[j], ..] = dy[.., j, ..]` along `axis` (the indices of a "
      "line are distinct). `%dx = train.topk_grad %dy, %i {axis = 1 : i64} : "
      "(tensor<8x2xf32>, tensor<8x2xi64>) -> tensor<8x4xf32>`";
  let arguments = (ins Train_FloatTensor:$grad, TensorOf<[I64]>:$indices, I64Attr:$axis);
  let results = (outs Train_FloatTensor:$input_grad);
}

def Train_SliceGradOp : Train_GradOp<"slice_grad", [Train_Flops<0>],
    "Gradient of a Slice: zeros of the input's shape with dy at the places the slice read"> {
  let description = "Dim d of dy's element i is dx's element `starts[d] + i * steps[d]` "
      "(steps may be negative). `%dx = train.slice_grad %dy {starts = array<i64: 0, 3>, "
      "steps = array<i64: 1, -2>} : (tensor<2x2xf32>) -> tensor<2x4xf32>`";
  let arguments = (ins Train_FloatTensor:$grad, DenseI64ArrayAttr:$starts,
                   DenseI64ArrayAttr:$steps);
  let results = (outs Train_FloatTensor:$input_grad);
}

def Train_RotaryGradOp : Train_GradOp<"rotary_grad", [Train_Flops<3>],
    "Gradient of rotary: the transposed rotation of dy"> {
  let description = "`%dx = train.rotary_grad %dy, %cos, %sin {head_dim = 16 : i64} : (...) -> tensor<2x16x64xf32>`";
  let arguments = (ins Train_FloatTensor:$grad, Train_FloatTensor:$cos,
                   Train_FloatTensor:$sin, I64Attr:$head_dim, UnitAttr:$interleaved);
  let results = (outs Train_FloatTensor:$input_grad);
}

def Train_AttentionGradOp : Train_GradOp<"attention_grad", [],
    "Gradients of attention with respect to q, k and v"> {
  let description = "`%dq, %dk, %dv = train.attention_grad %q, %k, %v, %dy {...} : (...) -> (...)`; the mask, when present, comes before dy and gets no gradient.";
  let arguments = (ins Train_FloatTensor:$q, Train_FloatTensor:$k, Train_FloatTensor:$v,
                   Optional<Train_FloatTensor>:$mask, Train_FloatTensor:$grad,
                   I64Attr:$num_heads, I64Attr:$num_kv_heads, F32Attr:$scale,
                   UnitAttr:$causal, DefaultValuedAttr<I64Attr, "0">:$window,
                   DefaultValuedAttr<F32Attr, "0.0f">:$softcap);
  let results = (outs Train_FloatTensor:$q_grad, Train_FloatTensor:$k_grad,
                      Train_FloatTensor:$v_grad);
}

def Train_ActivationGradOp : Train_GradOp<"activation_grad", [],
    "Gradient of a plain activation"> {
  let description = "`%dx = train.activation_grad %x, %dy {act = #train<act gelu>} : (...) -> tensor<...>`";
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$grad,
                   Train_ActivationAttr:$act);
  let results = (outs Train_FloatTensor:$input_grad);
}

def Train_GatedActivationGradOp : Train_GradOp<"gated_activation_grad", [],
    "Gradients of a gated activation with respect to gate and up"> {
  let description = "`%dg, %du = train.gated_activation_grad %g, %u, %dy {act = #train<act silu>} : (...) -> (...)`";
  let arguments = (ins Train_FloatTensor:$gate, Train_FloatTensor:$up,
                   Train_FloatTensor:$grad, Train_ActivationAttr:$act);
  let results = (outs Train_FloatTensor:$gate_grad, Train_FloatTensor:$up_grad);
}

def Train_CrossEntropyGradOp : Train_GradOp<"cross_entropy_grad", [Train_Flops<13>],
    "Gradient of the mean cross-entropy with respect to the logits"> {
  let description = "`%dl = train.cross_entropy_grad %logits, %labels, %dloss {ignore_index = -100 : i64, shift} : (...) -> tensor<2x16x256xf32>`";
  let arguments = (ins Train_FloatTensor:$logits, Train_IntTensor:$labels,
                   TensorOf<[F32]>:$grad, I64Attr:$ignore_index, UnitAttr:$shift);
  let results = (outs Train_FloatTensor:$logits_grad);
}

def Train_HeadCrossEntropyOp : Train_InferOp<"head_cross_entropy", [Train_Fused]> {
  let summary = "The head's linear and the mean cross-entropy, chunk by chunk";
  let description = [{
    `cross_entropy(linear(x, weight), labels)` computed `chunk_rows` rows
    at a time, so that the logits of the whole batch never exist. x [B, S,
    D] (or [N, D]), weight [V, D] (out_in) or [D, V] (in_out).

    ```mlir
    %l = train.head_cross_entropy %h, %w, %labels {layout = #train<layout out_in>,
           ignore_index = -100 : i64, shift, chunk_rows = 1024 : i64}
         : (tensor<2x16x64xf32>, tensor<256x64xf32>, tensor<2x16xi64>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$weight,
                   Train_IntTensor:$labels, Train_WeightLayoutAttr:$layout,
                   I64Attr:$ignore_index, UnitAttr:$shift, I64Attr:$chunk_rows);
  let results = (outs TensorOf<[F32]>:$result);
}

def Train_HeadCrossEntropyGradOp : Train_GradOp<"head_cross_entropy_grad", [],
    "Gradients of head_cross_entropy with respect to its input and weight"> {
  let description = [{
    `%dx, %dw = train.head_cross_entropy_grad %h, %w, %labels, %dloss {...}`:
    the logits of each chunk are recomputed, chunk by chunk as in the forward.
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$weight,
                   Train_IntTensor:$labels, TensorOf<[F32]>:$grad,
                   Train_WeightLayoutAttr:$layout, I64Attr:$ignore_index,
                   UnitAttr:$shift, I64Attr:$chunk_rows);
  let results = (outs Train_FloatTensor:$input_grad,
                      Train_FloatTensor:$weight_grad);
}

def Train_GatedMlpOp : Train_InferOp<"gated_mlp", [Train_Fused]> {
  let summary = "A gated MLP, down(act(x Wg) * (x Wu)), chunk by chunk";
  let description = [{
    `linear(gated_activation(linear(x, gate), linear(x, up)), down)`
    computed `chunk_rows` rows at a time, so that the [rows, hidden]
    intermediates of the whole sequence never exist. x [..., D]; gate and
    up [I, D] (out_in) or [D, I] (in_out); down [D, I] or [I, D].

    ```mlir
    %y = train.gated_mlp %x, %wg, %wu, %wd {layout = #train<layout out_in>,
           act = #train<act silu>, chunk_rows = 4096 : i64}
         : (tensor<2x16x64xf32>, tensor<128x64xf32>, tensor<128x64xf32>,
            tensor<64x128xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$gate,
                   Train_FloatTensor:$up, Train_FloatTensor:$down,
                   Train_WeightLayoutAttr:$layout, Train_ActivationAttr:$act,
                   I64Attr:$chunk_rows);
  let results = (outs Train_FloatTensor:$result);
}

def Train_GatedMlpGradOp : Train_GradOp<"gated_mlp_grad", [],
    "Gradients of gated_mlp with respect to its input and three weights"> {
  let description = [{
    `%dx, %dwg, %dwu, %dwd = train.gated_mlp_grad %x, %wg, %wu, %wd, %dy {...}`:
    each chunk's intermediates are recomputed, then its gradients taken;
    the weights' gradients sum over the chunks.
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$gate,
                   Train_FloatTensor:$up, Train_FloatTensor:$down,
                   Train_FloatTensor:$grad, Train_WeightLayoutAttr:$layout,
                   Train_ActivationAttr:$act, I64Attr:$chunk_rows);
  let results = (outs Train_FloatTensor:$input_grad,
                      Train_FloatTensor:$gate_grad,
                      Train_FloatTensor:$up_grad,
                      Train_FloatTensor:$down_grad);
}

#endif // MT_TRAIN_OPS
