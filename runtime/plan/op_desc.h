// Every compute op of a plan resolved into its kernel's arguments once, when
// the plan loads, and checked there: the rows, dims, layouts and shapes the
// kernels take, derived from the buffers and attributes in one place for
// both backends. A malformed op (a weight that does not match its input, a
// mask that does not broadcast, a head whose scratch is too small) is
// refused at load on either backend, with the op and buffer named, and the
// CPU tests exercise the same derivation the GPU runs.
#ifndef MT_RUNTIME_PLAN_OP_DESC_H
#define MT_RUNTIME_PLAN_OP_DESC_H

#include "kernels/shapes.h"
#include "runtime/base/status.h"
#include "runtime/plan/kernel_table.h"
#include "runtime/schema/plan.pb.h"

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace mt::runtime {

using Dims = std::vector<int64_t>;

/// One op's kernel arguments; the fields its kernel uses are set.
struct OpDesc {
  /// LINEAR, LINEAR_GRAD: y[rows, out] = x[rows, in] W (+ bias), W [out, in]
  /// when outIn, else [in, out].
  struct Linear {
    int64_t rows = 0, in = 0, out = 0;
    bool outIn = false, bias = false;
  };
  /// EXPERT_LINEAR, EXPERT_LINEAR_GRAD: y[rows, out] = x[rows, in] W[e],
  /// W [experts, out, in] when outIn, else [experts, in, out].
  struct ExpertLinear {
    int64_t rows = 0, experts = 0, in = 0, out = 0;
    bool outIn = false;
  };
  /// RMS_NORM, LAYER_NORM and their gradients, over the last dim.
  struct Norm {
    int64_t rows = 0, dim = 0;
    bool bias = false; ///< LAYER_NORM with a bias operand
  };
  /// EMBEDDING, EMBEDDING_GRAD: `count` ids into a [vocab, dim] table.
  struct Embedding {
    int64_t count = 0, vocab = 0, dim = 0;
    /// EMBEDDING_GRAD: the row left zero (padding_idx), or -1.
    int64_t paddingIdx = -1;
  };

  plan::Kernel kernel = plan::KERNEL_UNSPECIFIED;
  /// The description that made it (the kernel table's), which the backends
  /// dispatch the unary, binary and comparison families by.
  Describe describe = Describe::Buffers;
  Linear linear;
  ExpertLinear expert;
  Norm norm;
  Embedding embedding;
  /// Elements of the elementwise ops (activations, NEG, FILL, COPY).
  int64_t elements = 0;
  kernels::Activation activation = kernels::Activation::Relu;
  kernels::AttentionShape attention{};
  bool hasMask = false; ///< ATTENTION(_GRAD) with a mask operand
  int dOutOperand = 0;  ///< ATTENTION_GRAD: the operand of dOut
  kernels::RotaryShape rotary{};
  kernels::CrossEntropyShape crossEntropy{};
  /// HEAD_CROSS_ENTROPY(_GRAD); chunkRows clamped to the rows.
  kernels::HeadShape head{};
  /// GATED_MLP(_GRAD); chunkRows clamped to the rows.
  kernels::MlpShape mlp{};
  /// ADD, SUB, MUL, DIV, POW, MAX, MIN, MATMUL, the comparisons (a op b
  /// -> out), REDUCE_SUM, REDUCE_MEAN, REDUCE_MAX, TRANSPOSE, EXPAND (a ->
  /// out), SOFTMAX and LOG_SOFTMAX (a along axis), CONCAT (parts -> out), SPLIT
  /// (a -> parts), WHERE (cond ? a : b -> out); `axis` is non-negative.
  kernels::Binary binary = kernels::Binary::Add;
  /// UNARY (a -> out) and UNARY_GRAD (x, dy -> dx): the function.
  kernels::UnaryParams unary{};
  kernels::Compare compare = kernels::Compare::Equal;
  /// NOT (a -> out), AND, OR, XOR (a op b -> out), all bytes.
  kernels::Logic logic = kernels::Logic::Not;
  Dims a, b, out, cond;
  std::vector<int64_t> axes, perm;
  /// SLICE (a -> out) and SLICE_GRAD (out-shaped dy -> a): element i of dim
  /// d of the slice is element starts[d] + i * steps[d] of the whole.
  std::vector<int64_t> starts, steps;
  /// PAD: a -> out, out[j...] = a[j - starts...] inside a, else value.
  float value = 0.0f;
  std::vector<Dims> parts;
  /// The axis of SOFTMAX, LOG_SOFTMAX, CUMSUM, GATHER, CONCAT and SPLIT;
  /// GATHER_ND's (a, indices b -> out) tuple length.
  int64_t axis = 0;
  /// GATHER_ND: how many index tuples b holds.
  int64_t tuples = 0;
  /// TOPK (a -> out, indices) and TOPK_GRAD (out -> a): k, the size of out
  /// along the axis; GATHER_ELEMENTS(_GRAD) and SCATTER_ELEMENTS (indices b
  /// and the values out along a's lines): the indices' size along the axis.
  int64_t k = 0;
};

/// The descriptions of a plan's ops, by op.
class OpTable {
public:
  /// Describes and checks every op of `plan` (whose indices and arities
  /// validatePlan checked); the message names the phase, op and kernel.
  Status build(const plan::Plan &plan);
  /// The description of an op of the plan given to build, or null for
  /// another op (such as the COPY that refreshes a compute copy at load).
  const OpDesc *find(const plan::Op &op) const {
    auto it = index_.find(&op);
    return it == index_.end() ? nullptr : &descs_[it->second];
  }
  /// The same for a backend about to run `op`: an op outside the plan is
  /// an error.
  Status lookup(const plan::Op &op, const OpDesc *&desc) const {
    desc = find(op);
    return desc ? Status::ok()
                : Status::error(plan::Kernel_Name(op.kernel()) +
                                " op outside the plan");
  }

private:
  std::vector<OpDesc> descs_;
  std::unordered_map<const plan::Op *, size_t> index_;
};

// The kernels' function of a plan value; none for a value that is not of
// the family (test/unit/kernel_table_test.cpp walks every kernel of each
// family, so a member without a function fails there, not in a plan).

/// GELU, GELU_TANH, SILU or RELU.
std::optional<kernels::Activation> activationOf(plan::Activation act);
/// NOT, AND, OR, XOR (Describe::Logic).
std::optional<kernels::Logic> logicOf(plan::Kernel kernel);
/// The binary ops (Describe::Binary): ADD, SUB, MUL, DIV, POW, MAX, MIN.
std::optional<kernels::Binary> binaryOf(plan::Kernel kernel);
/// UNARY's function (plan.proto's UnaryFn, the kernels' Unary: one list,
/// by number), none for FN_UNSPECIFIED or a number the schema lacks.
std::optional<kernels::Unary> unaryOf(plan::UnaryFn fn);
/// The comparisons (Describe::Compare): EQUAL, LESS, LESS_OR_EQUAL, ...
std::optional<kernels::Compare> compareOf(plan::Kernel kernel);

/// Describes and checks one op (see OpTable::build).
Status describeOp(const plan::Plan &plan, const plan::Op &op, OpDesc &desc);

} // namespace mt::runtime

#endif // MT_RUNTIME_PLAN_OP_DESC_H
