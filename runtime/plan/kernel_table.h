// One entry per plan kernel: how many operands and results its ops take,
// where it runs, and which description checks its buffers when a plan
// loads, and which attributes they take. Plan validation (plan_io), the
// backends' split of host and device ops and the op descriptions (op_desc) read
// it; a kernel without an entry is refused at plan load by name, and
// test/unit/kernel_table_test.cpp walks every value of plan.proto's Kernel. A
// new kernel's row states all of it.
#ifndef MT_RUNTIME_PLAN_KERNEL_TABLE_H
#define MT_RUNTIME_PLAN_KERNEL_TABLE_H

#include "runtime/schema/plan.pb.h"

#include <limits>
#include <string>

namespace mt::runtime {

/// Where a kernel's ops run.
enum class Runs {
  Device, ///< on the backend's device (the CPU backend's host memory)
  Host,   ///< on the host on either backend (the optimizer, disk, network)
};

/// The description (op_desc.cpp) that resolves and checks an op's buffers.
enum class Describe {
  Embedding,
  Linear,
  ExpertLinear,
  Norm,
  Rotary,
  Attention,
  Elementwise, ///< same-size operands and results (activations, NEG)
  Unary,       ///< Elementwise, with the kernels' function
  CrossEntropy,
  Head,
  Mlp,
  Binary,
  Compare,
  Logic, ///< NOT, AND, OR, XOR of bytes
  Matmul,
  Lines, ///< SOFTMAX, LOG_SOFTMAX, CUMSUM: same-size, along attrs.axis
  Expand,
  IsNaN,
  Where,
  Slice,
  Pad,
  Trilu,
  Tile,
  GatherND,
  TopK,
  Gather,
  Elements, ///< GATHER_ELEMENTS*, SCATTER_ELEMENTS: lines along attrs.axis
  Layout,   ///< REDUCE_*, TRANSPOSE, CONCAT, SPLIT
  Buffers,  ///< copies, fills and host ops check their buffers as they run
};

/// The device workspace an op of the kernel needs beside its buffers, which
/// the CUDA backend sizes per op from its description (none on the CPU
/// backend, whose kernels allocate what they need).
enum class Scratch {
  None,
  IndexFlag,   ///< a flag for an id or index out of range
  FlatIndices, ///< the flag, then each index tuple as one flat index
  /// The flag, the flat index of each tuple (GATHER_ND_GRAD), then the
  /// indices grouped by the place they name (gatherGradWorkspaceBytes).
  GatherGrad,
  EmbeddingGrad, ///< the tokens grouped by id
  NormGrad,      ///< partial sums of the weight's gradient
  AttentionGrad, ///< each row's log-sum-exp and dO . O
  RowLosses,     ///< a loss (forward) or the count of rows (backward)
  Experts,       ///< the rows grouped by expert, and their gathered values
  Head,          ///< row losses and, for bf16, one chunk's logit gradients
};

/// What a kernel is, for every op of it.
struct KernelInfo {
  static constexpr int kMany = std::numeric_limits<int>::max();
  int minOperands, maxOperands, minResults, maxResults;
  Runs runs;
  Describe describe;
  Scratch scratch;
  /// The message of Attrs' oneof its ops carry; KIND_NOT_SET: none.
  plan::Attrs::KindCase attrs;
};

/// The name of an Attrs message in plan.proto ("norm"), or "none".
std::string attrsName(plan::Attrs::KindCase kind);

/// The entry of `kernel`, or null for a value this runtime does not run.
const KernelInfo *kernelInfo(plan::Kernel kernel);

} // namespace mt::runtime

#endif // MT_RUNTIME_PLAN_KERNEL_TABLE_H
