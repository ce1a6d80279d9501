//===- ImportPolicy.h - which initializers are which parameters -----------===//
//
// An ONNX export's initializers are not always the model's parameters. The
// dynamo exporter's default optimization folds a linear weight's transpose
// into a new initializer with a generated name (`val_94` is
// `q_proj.weight` transposed); a tied embedding is one initializer named
// after the head; a wrapper module prefixes every name (`m.`). This object
// decides, from the initializers, the exporter's node metadata (module
// scopes and the FX node of each ONNX node) and the user's --weights, what
// the parameters are: their names and shapes in the model's own layout,
// which initializers are which parameter in which layout, the trainable set,
// and the names a checkpoint stores them under so that Hugging Face's
// `from_pretrained` loads it. It knows neither ONNX's protobuf nor MLIR, so
// that its rules are tested on their own (test/unit/import_policy_test.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef MT_COMPILER_IMPORTPOLICY_H
#define MT_COMPILER_IMPORTPOLICY_H

#include "kernels/shapes.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mt {

/// One use of an initializer by a node, with what the exporter's metadata
/// (ONNX IR 10 `metadata_props`) says about that node.
struct InitializerUse {
  std::string opType; ///< the consumer's ONNX op type
  int input = 0;      ///< which of its inputs
  /// The innermost module the node came from (the last module of
  /// `pkg.torch.onnx.name_scopes`), "" when the export has no metadata.
  std::string scope;
  /// The FX node's target (`torch.ops.aten.linear.default`) and its
  /// parameter arguments, without `%p_` (`m_model_norm_weight`).
  std::string fxTarget;
  std::vector<std::string> fxParams;
  /// The FX node reads the initializer as a value of its own name
  /// (`%add_3`, a fold the exporter computed): the node's parameter
  /// arguments are its other inputs (a layer norm's bias beside its folded
  /// 1 + w), none of them this initializer.
  bool fxNamesIt = false;
};

/// A floating initializer (a scalar too): a parameter, a folded form of one,
/// or a constant (a folded mask or rotary table, a buffer).
struct InitializerInfo {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<InitializerUse> uses;
  /// What the exporter's optimizer computed it from
  /// (`pkg.onnxscript.optimizer.folded_from` of its value_info: parameter
  /// names and names of the nodes it folded), empty when not folded.
  std::vector<std::string> foldedFrom;
};

/// What the exported program's signature says a lifted tensor is.
enum class StateKind {
  Parameter,
  Buffer,   ///< persistent: save_pretrained stores it
  Scratch,  ///< a buffer registered with persistent=False
  Constant, ///< a tensor torch.export lifted from the code
};

/// A tensor of the user's --weights.
struct WeightTensor {
  std::string name;
  std::vector<int64_t> shape;
};

/// One of the tensors save_pretrained stores a parameter in when it is not
/// stored whole (a mixture of experts' fused `[E, 2F, H]` weight is each
/// expert's `w1` and `w3`): one run of the parameter's elements, row-major.
struct SavedPart {
  std::string name;
  int64_t offset = 0; ///< its first element in the parameter
  std::vector<int64_t> shape;
};

/// How an initializer's elements lie relative to its parameter's.
enum class Layout {
  Same,       ///< the parameter itself
  Transposed, ///< a 2-D parameter's transpose (a folded `linear` weight)
};

/// Reads the float values at `indices` (flat, row-major) of an initializer
/// or of a --weights tensor; none when its bytes cannot be read (a graph
/// exported without its weights).
using Sampler = std::function<std::optional<std::vector<float>>(
    int index, const std::vector<int64_t> &indices)>;

struct PolicyInput {
  std::vector<InitializerInfo> initializers;
  /// The module path of the Hugging Face model inside the exported module
  /// (`m` when a wrapper holds it as `self.m`; "" when it is the root or
  /// unknown): what a checkpoint's names leave out.
  std::string hfRoot;
  /// Names that mark a buffer when the export has no metadata.
  std::function<bool(const std::string &)> isKnownBuffer;
  /// The module state the exported program lifted into inputs, by its
  /// name in the exported module (`pkg.torch.export.ExportedProgram.
  /// graph_signature` of torch's exporter: `p_w: PARAMETER target='w'`);
  /// empty when the export does not say. It decides what a parameter is
  /// where names cannot (a parameter of the root module has no dot).
  std::map<std::string, StateKind> signature;
  bool haveWeights = false;
  std::vector<WeightTensor> weights;
  /// The tensor save_pretrained writes for a module parameter, where the
  /// two names differ (transformers' own map, written beside the graph by
  /// the export: GPT-NeoX's `lm_head.weight` is `embed_out.weight`), both
  /// without `hfRoot`.
  std::map<std::string, std::string> savedNameOf;
  /// The tensors save_pretrained stores a module parameter in, where it
  /// stores it in several (the same map's "split" entries), by the
  /// parameter's name without `hfRoot`.
  std::map<std::string, std::vector<SavedPart>> savedPartsOf;
  Sampler sampleInitializer, sampleWeight;
  /// The pointwise functions without parameters that a fold may have
  /// applied to a parameter, by the name PyTorch's ops give them
  /// (`softplus`, `exp`): the compiler's pointwise ops.
  std::map<std::string, kernels::Unary> pointwiseByName;
};

struct Parameter {
  std::string name;           ///< in the graph's namespace
  std::vector<int64_t> shape; ///< in the model's layout (HF's)
  bool trainable = false;
  /// The --weights tensor it is read from, or -1: from `dataInitializer`'s
  /// bytes, in `dataLayout`.
  int weight = -1;
  int dataInitializer = -1;
  Layout dataLayout = Layout::Same;
  /// The names a checkpoint stores it under: those it had in --weights (a
  /// tied weight may have two), else its name without `hfRoot`. Empty when
  /// it is stored in `savedParts`.
  std::vector<std::string> savedNames;
  /// The tensors a checkpoint stores it in when save_pretrained splits it
  /// (PolicyInput::savedPartsOf), whatever form --weights had it in.
  std::vector<SavedPart> savedParts;
  /// The --weights tensor of each of `savedParts` when it is read from
  /// them (`weight` is then -1); empty otherwise.
  std::vector<int> partWeights;

  /// Every --weights tensor that is it (a tied weight's two names).
  std::vector<int> weights;

  /// Whether --weights gives its values (whole or in parts).
  bool fromWeights() const { return weight >= 0 || !partWeights.empty(); }
};

/// One step of a pointwise function that the exporter's optimizer folded
/// into an initializer: x + constant, x * constant, or fn(x).
struct FoldStep {
  enum class Kind { Add, Mul, Apply } kind = Kind::Add;
  float constant = 0;
  kernels::Unary fn = kernels::Unary::Exp; ///< for Apply
  bool operator==(const FoldStep &o) const {
    return kind == o.kind && constant == o.constant && fn == o.fn;
  }
};

/// What an initializer is.
struct InitializerRole {
  int parameter = -1; ///< -1: a constant of the graph
  Layout layout = Layout::Same;
  /// The initializer is these parameters concatenated along `concatAxis`
  /// of their layout (`layout` says whether it holds that transposed): the
  /// optimizer folded a fused projection the model concatenates at run
  /// time (`torch.cat([q.weight, k.weight, v.weight])`); found by values,
  /// `parameter` is then -1; empty otherwise.
  std::vector<int> concatOf;
  int64_t concatAxis = 0;
  /// The initializer is these steps applied in order to the parameter
  /// (the optimizer folded Gemma's 1 + w, Apertus's beta + softplus(a)):
  /// found by values and the fold's names; empty otherwise.
  std::vector<FoldStep> pointwise;
  /// The initializer is rows of the parameter from this one on, reshaped
  /// (the optimizer folded GPT-2's position embedding of positions
  /// 0..S-1, OPT's of positions 2..S+1): found by values; -1 otherwise.
  int64_t fromRow = -1;
  /// The initializer's rows (of the parameter's row size) are these rows
  /// of the parameter, reshaped (OPT's position table gathered at
  /// positions 2..S+1 for each sequence of the batch): found by values;
  /// empty otherwise.
  std::vector<int64_t> rows;
  /// The initializer is the parameter broadcast to the initializer's
  /// shape, the parameter's dims being these axes of it (the optimizer
  /// folded GPT-OSS's attention sinks, [H], expanded to [B, H, S, 1]):
  /// found by values; empty otherwise.
  std::vector<int64_t> broadcastAxes;
};

/// What does not fit (a --weights tensor that matches nothing, an
/// initializer folded from several parameters, ...): one sentence naming the
/// tensors, and the --weights tensor it is about (-1: none), whose file the
/// caller names.
struct PolicyError {
  int weight = -1;
  std::string message;
};

/// A --weights tensor that is no parameter of the graph but module state
/// the exported program's signature names: a buffer save_pretrained
/// stores, or a parameter the graph does not use. It is kept as it was.
struct KeptWeight {
  int weight = -1;
  StateKind kind = StateKind::Buffer;
};

/// A parameter that no --weights tensor names, bound to the tensors that
/// hold its values (a head saved under another name; the experts of a
/// fused parameter saved apart, when no checkpoint_names.json says so).
struct ValueBinding {
  int parameter = -1;
  std::vector<int> weights; ///< in the parameter's element order
};

struct PolicyResult {
  std::vector<Parameter> parameters;
  std::vector<InitializerRole> roles; ///< one per PolicyInput::initializers
  std::vector<KeptWeight> kept;
  std::vector<ValueBinding> byValue;
  /// One phrase per initializer the optimizer folded from a parameter that
  /// trains as that parameter: what it was found to be
  /// (`'add_4' = 'm.norm.weight' + 1`).
  std::vector<std::string> recovered;
  std::vector<PolicyError> errors;
};

/// Decides the parameters (see the file comment). Pure: the samplers are
/// its only reads.
PolicyResult decideParameters(const PolicyInput &input);

/// `a.B-c` -> `a_b_c`: how torch.export names a parameter's placeholder
/// (placeholder_naming_pass: each character but letters and digits an
/// underscore, then lower case; MPT's `attn.Wqkv.weight` is `%p_.._wqkv_..`).
std::string mangledName(const std::string &name);

} // namespace mt

#endif // MT_COMPILER_IMPORTPOLICY_H
