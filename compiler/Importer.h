//===- Importer.h - the ONNX importer, for its op handlers
//-----------------===//
//
// Private to compiler/: the importer's state and helpers, shared by the
// driver (OnnxImporter.cpp) and the op handlers, which are grouped by op
// family (ImportElementwise.cpp, ImportNN.cpp, ImportShape.cpp). Each family
// lists its handlers in a table of OpRule: the ONNX op, the default-domain
// opsets it covers and the member function that imports it; the driver
// dispatches on the table, and the list of supported ops in its error
// message is made from the tables.
//
//===----------------------------------------------------------------------===//
#ifndef MT_COMPILER_IMPORTER_H
#define MT_COMPILER_IMPORTER_H

#include "compiler/ImportPolicy.h"
#include "compiler/OnnxImporter.h"
#include "dialects/Train/IR/ConstEval.h"
#include "dialects/Train/IR/ShapeInference.h"
#include "dialects/Train/IR/TrainOps.h"
#include "runtime/io/safetensors.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Regex.h"

#include <onnx/onnx_pb.h>

#include <optional>
#include <string>
#include <vector>

namespace mt::importer {

using namespace mlir;
using namespace mt::train;

constexpr int64_t kMinOpset = 14, kMaxOpset = 23;

/// The element type an ONNX TensorProto data type is stored in, or null.
Type storedTypeOf(MLIRContext &ctx, int dtype);

/// The element type values of an ONNX data type have in the train dialect,
/// or null: the stored type, but integers narrower than 64 bits (int8 to
/// int32, uint8 to uint32) are i64 and floats of any width (float16,
/// bfloat16, float64) are f32, the types the kernels and plans compute in
/// (bf16 compute is a schedule's choice, not the graph's). The values are
/// the same, but for an overflow that would wrap in a narrower integer and
/// a float64 rounded to float32; a Cast to float16 or bfloat16 rounds to
/// that type's precision (train.round_f16, train.round_bf16).
Type elementTypeOf(MLIRContext &ctx, int dtype);

class Importer {
public:
  Importer(MLIRContext &ctx, const ImportOptions &opts)
      : ctx(ctx), opts(opts), b(&ctx) {
    file = opts.modelPath;
    fileLoc = FileLineColLoc::get(&ctx, file, 0, 0);
  }

  OwningOpRef<ModuleOp> run();
  FailureOr<std::optional<int64_t>> fixedBatch();

  // The op handlers (one per ONNX op and opset range, in the tables of
  // ImportElementwise.cpp, ImportNN.cpp and ImportShape.cpp) and what they
  // use: the node being imported, its inputs and attributes, and the
  // builders of its op. Everything below is for them and the driver.
  const std::string &opType() const { return node->op_type(); }
  template <typename OpTy> LogicalResult importUnary() {
    if (failed(needInputs(1, 1)))
      return failure();
    return bind(make<OpTy>({in(0)}));
  }
  /// A pointwise function (Train_PointwiseOp): its ONNX attributes, where
  /// the node has them, are its parameters (absent, the op's defaults are
  /// ONNX's).
  template <typename OpTy> LogicalResult importPointwise() {
    if (failed(needInputs(1, 1)))
      return failure();
    SmallVector<NamedAttribute> attrs;
    for (auto [onnxName, name] : {std::pair(OpTy::kOnnxAlpha, "alpha"),
                                  std::pair(OpTy::kOnnxBeta, "beta")}) {
      if (!*onnxName || !attr(onnxName))
        continue;
      FailureOr<float> v = attrFloat(onnxName, 0.0f);
      if (failed(v))
        return failure();
      attrs.push_back(b.getNamedAttr(name, b.getF32FloatAttr(*v)));
    }
    return bind(make<OpTy>({in(0)}, attrs));
  }
  template <typename OpTy> LogicalResult importBinary() {
    if (failed(needInputs(2, 2)))
      return failure();
    return bind(make<OpTy>({in(0), in(1)}));
  }
  /// Max and Min take one or more inputs: a chain of binary ops.
  template <typename OpTy> LogicalResult importVariadic() {
    if (failed(needInputs(1, 64)))
      return failure();
    if (node->input_size() == 1)
      return bind(make<IdentityOp>({in(0)}));
    FailureOr<Operation *> acc = make<OpTy>({in(0), in(1)});
    for (int i = 2; i < node->input_size() && succeeded(acc); ++i)
      acc = make<OpTy>({(*acc)->getResult(0), in(i)});
    return bind(acc);
  }
  /// A reduction's axes (an attribute, or from the opset that made it so an
  /// input), keepdims and noop_with_empty_axes.
  struct ReduceArgs {
    SmallVector<int64_t> axes;
    bool keep, noop;
  };
  template <bool axesInput> FailureOr<ReduceArgs> reduceArgs() {
    if (failed(needInputs(1, 2)))
      return failure();
    auto axes = axesInput
                    ? axesFrom("axes", 1, false)
                    : FailureOr<SmallVector<int64_t>>(
                          attrInts("axes").value_or(SmallVector<int64_t>{}));
    auto keep = attrInt("keepdims", 1);
    auto noop = attrInt("noop_with_empty_axes", 0);
    if (failed(axes) || failed(keep) || failed(noop))
      return failure();
    return ReduceArgs{*axes, *keep != 0, *noop != 0};
  }
  /// The reductions that are a train op.
  template <typename OpTy, bool axesInput> LogicalResult importReduce() {
    FailureOr<ReduceArgs> r = reduceArgs<axesInput>();
    if (failed(r))
      return failure();
    if (r->axes.empty() && r->noop)
      return bind(make<IdentityOp>({in(0)}));
    SmallVector<NamedAttribute> attrs{
        named("axes", b.getDenseI64ArrayAttr(r->axes))};
    if (r->keep)
      attrs.push_back(named("keepdims", b.getUnitAttr()));
    return bind(make<OpTy>({in(0)}, attrs));
  }
  // One handler per op (or ops that share one), defined in its family's
  // file.
  LogicalResult importConstant();
  LogicalResult importCast();
  LogicalResult importDropout();
  LogicalResult importWhere();
  LogicalResult importGelu();
  LogicalResult importGemm();
  LogicalResult importSoftmax();
  LogicalResult importLayerNormalization();
  LogicalResult importRmsNormalization();
  LogicalResult importAttention();
  LogicalResult importTopK();
  LogicalResult importArgExtreme();
  LogicalResult importClip();
  LogicalResult importCumSum();
  LogicalResult importTrilu();
  LogicalResult importSoftmaxCrossEntropyLoss();
  LogicalResult importTranspose();
  LogicalResult importUnsqueeze();
  LogicalResult importFlatten();
  LogicalResult importConcat();
  LogicalResult importSplit();
  LogicalResult importSequenceAt();
  LogicalResult importGather();
  /// The padding_idx of the torch embedding the current node exports
  /// (aten.embedding's third argument in its FX node), if it has one.
  std::optional<int64_t> embeddingPaddingIdx() const;
  LogicalResult importGatherND();
  LogicalResult importGatherElements();
  LogicalResult importScatterElements();
  LogicalResult importShape();
  LogicalResult importReshape();
  LogicalResult importExpand();
  LogicalResult importTile();
  LogicalResult importSlice();
  LogicalResult importPad();
  LogicalResult importRange();
  LogicalResult importConstantOfShape();
  // Compositions (ImportComposite.cpp).
  template <bool axesInput> LogicalResult importReduceComposite();
  LogicalResult importMean();
  LogicalResult importMatMul();
  LogicalResult importPow();
  Value productOver(Value x, ArrayRef<int64_t> axes, bool keep);
  LogicalResult importScatterND();
  Value scatteredAt(Value data, Value updates, ArrayRef<int64_t> at,
                    StringRef reduction);
  LogicalResult importPRelu();
  LogicalResult importMod();
  LogicalResult importEinsum();
  LogicalResult importConv();
  LogicalResult importInstanceNormalization();
  LogicalResult importGroupNormalization();
  LogicalResult importBatchNormalization();
  LogicalResult importLpNormalization();
  LogicalResult importMeanVarianceNormalization();
  LogicalResult importIsInf();
  LogicalResult importEyeLike();
  LogicalResult importOneHot();
  LogicalResult importHardmax();
  LogicalResult importRotaryEmbedding();
  LogicalResult importNegativeLogLikelihoodLoss();
  Value nllLoss(Value logProb, Value target, Value weight,
                std::optional<int64_t> ignore, StringRef reduction);
  FailureOr<std::optional<int64_t>> ignoreIndex();
  FailureOr<std::string> lossReduction();
  /// A constant of `shape` and element type t, f(i) at flat index i.
  Value constantOf(ArrayRef<int64_t> shape, Type t,
                   llvm::function_ref<double(int64_t)> f);
  /// The f32 iota 0 .. n-1 along `axis` of a rank-`rank` tensor.
  Value iotaAlong(int64_t n, int64_t axis, int64_t rank);
  /// ReduceMean ("mean") or ReduceSum of v over axes, dims kept.
  Value reduceOf(StringRef kind, Value v, ArrayRef<int64_t> axes);
  /// (x - mean) / sqrt(var + eps) over axes.
  Value normalized(Value x, ArrayRef<int64_t> axes, double eps);
  /// v reshaped (a constant shape).
  Value reshaped(Value v, ArrayRef<int64_t> shape);
  /// v's dims permuted.
  Value transposed(Value v, ArrayRef<int64_t> perm);
  /// v's elements [from, to) by `step` along `axis`, as ONNX Slice reads
  /// them (negative bounds from the end, clamped; a negative step walks
  /// back); null when they are not one (reported).
  Value sliced(Value v, int64_t axis, int64_t from, int64_t to,
               int64_t step = 1);
  /// v [C] as [C, 1, ...] against x [N, C, ...].
  Value perChannel(Value v, Value x);
  /// y * scale + bias per channel (a null scale or bias: none).
  Value scaleShift(Value y, Value scale, Value bias);
  /// Binds the node's output to the op that made `v` (null: failed).
  LogicalResult bindValue(Value v) {
    return v ? bind(v.getDefiningOp()) : failure();
  }
  /// A scalar constant of v's element type.
  Value scalarLike(Value v, double x);
  /// A value-shaped op whose result shape `out` the handler computed.
  template <typename OpTy>
  LogicalResult bindTyped(ArrayRef<int64_t> out, ValueRange operands,
                          ArrayRef<NamedAttribute> attrs, Type elementType) {
    return bind(makeTyped<OpTy>(operands, attrs,
                                {RankedTensorType::get(out, elementType)}));
  }

  // Diagnostics.
  InFlightDiagnostic fileError() { return emitError(fileLoc) << file << ": "; }
  InFlightDiagnostic nodeError() {
    return emitError(loc) << file << ": node '" << node->name() << "' ("
                          << node->op_type() << "): ";
  }

  LogicalResult readModel();
  LogicalResult checkVersions();
  LogicalResult readTrainableSet();
  /// Which initializers are which parameters (ImportPolicy.h).
  LogicalResult decideParameters();
  std::optional<std::vector<float>>
  sampleInitializer(const onnx::TensorProto &t, const std::vector<int64_t> &at);
  /// Whether parameter `p` trains, --trainable and --frozen applied.
  bool trains(const Parameter &p) const;
  /// The --weights tensors that no trainable parameter is saved from, as
  /// the module's `train.kept` (see plan.proto's KeptTensor).
  void attachKept(ModuleOp module);
  /// The weight op of a floating initializer that is (a form of) a
  /// parameter or a frozen buffer.
  FailureOr<Value> weightValue(const onnx::TensorProto &init,
                               RankedTensorType type);
  FailureOr<Value> makeWeight(const onnx::TensorProto &dataInit,
                              RankedTensorType type, StringRef name,
                              bool trainable, const Parameter *param);
  /// The graph inputs that are not initializers: the model's data.
  SmallVector<const onnx::ValueInfoProto *> dataInputs() const;
  LogicalResult importInputs(SmallVectorImpl<Type> &types,
                             SmallVectorImpl<std::string> &names);
  LogicalResult importInitializers();
  LogicalResult importNode(const onnx::NodeProto &n);
  LogicalResult importOutputs(func::FuncOp func);
  LogicalResult readCheckpointNames(PolicyInput &in);
  LogicalResult addCausalLmLoss(func::FuncOp func,
                                SmallVectorImpl<Value> &results,
                                SmallVectorImpl<Type> &types,
                                SmallVectorImpl<Attribute> &attrs);

  FailureOr<DenseElementsAttr> readTensor(const onnx::TensorProto &t,
                                          StringRef what);
  /// Where an external tensor's bytes are: the file (relative to the
  /// model's directory), offset and length (`defaultLength` when absent).
  struct ExternalRef {
    std::string path;
    int64_t offset, length;
  };
  FailureOr<ExternalRef> externalData(const onnx::TensorProto &t,
                                      int64_t defaultLength, StringRef what);
  FailureOr<RankedTensorType> tensorTypeOf(const onnx::TensorProto &t,
                                           StringRef what);

  // Node helpers.
  Value in(int i) {
    if (i >= node->input_size() || node->input(i).empty())
      return nullptr;
    return values.lookup(node->input(i));
  }
  LogicalResult needInputs(int min, int max);
  /// Exporters name outputs that nothing reads (Dropout's mask); only a use
  /// of one is an error, reported where it is used.
  void unsupportedOutput(int i, StringRef what) {
    if (i < node->output_size() && !node->output(i).empty())
      unsupported[node->output(i)] =
          (what + " of node '" + node->name() + "'").str();
  }
  const onnx::AttributeProto *attr(StringRef name) {
    for (const auto &a : node->attribute())
      if (a.name() == name)
        return &a;
    return nullptr;
  }
  FailureOr<int64_t> attrInt(StringRef name, std::optional<int64_t> dflt);
  FailureOr<float> attrFloat(StringRef name, float dflt);
  FailureOr<std::string> attrString(StringRef name, StringRef dflt);
  std::optional<SmallVector<int64_t>> attrInts(StringRef name);
  FailureOr<SmallVector<int64_t>> constInts(Value v, StringRef what);
  FailureOr<SmallVector<int64_t>> axesFrom(StringRef name, int inputIndex,
                                           bool required);
  FailureOr<Value> intConst(ArrayRef<int64_t> values);
  /// A float32 scalar constant.
  Value floatConst(float value);
  /// The result of a new op, or null when it failed (reported).
  static Value resultOf(FailureOr<Operation *> op) {
    return succeeded(op) ? (*op)->getResult(0) : Value();
  }
  RankedTensorType typeOf(Value v) {
    return cast<RankedTensorType>(v.getType());
  }

  /// Creates an op whose result types the op infers.
  template <typename OpTy>
  FailureOr<Operation *> make(ValueRange operands,
                              ArrayRef<NamedAttribute> attrs = {});
  /// Creates an op with stated result types, then verifies it.
  template <typename OpTy>
  FailureOr<Operation *> makeTyped(ValueRange operands,
                                   ArrayRef<NamedAttribute> attrs,
                                   TypeRange types);
  FailureOr<Operation *> verifyNew(Operation *op);
  void noteKnown(Operation *op);
  Value roundedTo(Value v, int dtype);
  LogicalResult importCastLike();
  int declaredType(const std::string &name) const;
  LogicalResult bind(FailureOr<Operation *> op);
  NamedAttribute named(StringRef name, Attribute a) {
    return b.getNamedAttr(name, a);
  }

  MLIRContext &ctx;
  const ImportOptions &opts;
  OpBuilder b;
  std::string file;
  Location fileLoc = UnknownLoc::get(&ctx);
  Location loc = UnknownLoc::get(&ctx);
  std::string baseDir;
  /// Where the model file really is (it may be a link, as in a Hugging
  /// Face cache): external data may be there too.
  std::string realModelDir;
  onnx::ModelProto model;
  int64_t opset = 0;
  const onnx::NodeProto *node = nullptr;
  llvm::StringMap<Value> values;
  llvm::StringMap<std::string> unsupported;
  /// Where inline initializers' raw_data lies in the file, read on first use.
  std::optional<llvm::StringMap<std::pair<int64_t, int64_t>>> inlineOffsets;
  DenseMap<Value, Attribute> known;
  bool haveWeightsFile = false;
  /// The tensors of --weights: one file, or every file of a sharded index.
  std::vector<runtime::SafetensorsHeader> weights;
  /// Every tensor of `weights` and its file, in the policy's numbering.
  std::vector<std::pair<const runtime::SafetensorsEntry *, std::string>>
      weightEntries;
  /// The floating initializers the policy decides on, and their numbers.
  std::vector<const onnx::TensorProto *> policyInits;
  llvm::StringMap<int> policyIndex;
  PolicyResult policy;
  /// The weight op of each policy parameter, once made.
  std::vector<Value> parameterValues;
  /// The names of the train.param symbols made so far.
  llvm::StringSet<> paramNames;
  std::optional<llvm::Regex> trainableRe, frozenRe;
  // Graph-level names for the diagnostics of shapes.
  llvm::StringMap<std::string> symbolicDims;
};

/// An ONNX axis of a rank-`rank` tensor, negative ones from the end.
inline int64_t axisOf(int64_t axis, int64_t rank) {
  return axis < 0 ? axis + rank : axis;
}

/// One ONNX op over a range of default-domain opsets, and its handler.
struct OpRule {
  const char *op;
  int64_t firstOpset, lastOpset;
  LogicalResult (Importer::*import)();
};
ArrayRef<OpRule> elementwiseRules();
ArrayRef<OpRule> nnRules();
ArrayRef<OpRule> shapeRules();
/// The operators imported as compositions of train ops (ImportComposite.cpp).
ArrayRef<OpRule> compositeRules();
/// The pointwise functions' rows, made from their ODS descriptions
/// (Train_PointwiseOp's ONNX name), every opset the importer reads.
ArrayRef<OpRule> pointwiseRules();
/// The pointwise functions without parameters by their ops' mnemonics
/// (`softplus`), which are PyTorch's names for them: what a fold of the
/// exporter's optimizer may have applied to a parameter.
const std::map<std::string, kernels::Unary> &parameterlessPointwise();
/// The pointwise op of function `fn` at its defaults, applied to x.
Value applyPointwise(OpBuilder &b, Location l, kernels::Unary fn, Value x);
/// Every table above.
inline ArrayRef<ArrayRef<OpRule>> ruleTables() {
  static const ArrayRef<OpRule> tables[] = {elementwiseRules(), nnRules(),
                                            shapeRules(), pointwiseRules(),
                                            compositeRules()};
  return tables;
}

template <typename OpTy>
FailureOr<Operation *> Importer::make(ValueRange operands,
                                      ArrayRef<NamedAttribute> attrs) {
  OperationState st(loc, OpTy::getOperationName());
  st.addOperands(operands);
  st.addAttributes(attrs);
  SmallVector<Type> types;
  std::string why;
  LogicalResult inferred = failure();
  {
    // Re-emitted below with the file, node and op type in front.
    ScopedDiagnosticHandler capture(&ctx, [&](Diagnostic &d) {
      why = d.str();
      return success();
    });
    inferred = OpTy::inferReturnTypes(&ctx, loc, st.operands,
                                      st.attributes.getDictionary(&ctx),
                                      st.getRawProperties(), st.regions, types);
  }
  if (failed(inferred))
    return nodeError() << why, failure();
  st.addTypes(types);
  return verifyNew(b.create(st));
}

template <typename OpTy>
FailureOr<Operation *> Importer::makeTyped(ValueRange operands,
                                           ArrayRef<NamedAttribute> attrs,
                                           TypeRange types) {
  OperationState st(loc, OpTy::getOperationName());
  st.addOperands(operands);
  st.addAttributes(attrs);
  st.addTypes(types);
  return verifyNew(b.create(st));
}

} // namespace mt::importer

#endif // MT_COMPILER_IMPORTER_H
