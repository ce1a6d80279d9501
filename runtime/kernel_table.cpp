// The kernel table (see kernel_table.h).
#include "runtime/kernel_table.h"

#include <unordered_map>

namespace mt::runtime {

const KernelInfo *kernelInfo(plan::Kernel kernel) {
  using K = plan::Kernel;
  using D = Describe;
  using S = Scratch;
  constexpr int kMany = KernelInfo::kMany;
  constexpr Runs dev = Runs::Device, host = Runs::Host;
  // Operands min, max; results min, max; where; the description; the
  // device scratch.
  static const std::unordered_map<int, KernelInfo> table = {
      {K::EMBEDDING, {2, 2, 1, 1, dev, D::Embedding, S::IndexFlag}},
      {K::EMBEDDING_GRAD, {2, 2, 1, 1, dev, D::Embedding, S::EmbeddingGrad}},
      {K::LINEAR, {2, 3, 1, 1, dev, D::Linear, S::None}}, // + a bias
      {K::LINEAR_GRAD, {3, 3, 2, 2, dev, D::Linear, S::None}},
      {K::RMS_NORM, {2, 2, 1, 1, dev, D::Norm, S::None}},
      {K::RMS_NORM_GRAD, {3, 3, 2, 2, dev, D::Norm, S::NormGrad}},
      {K::LAYER_NORM, {2, 3, 1, 1, dev, D::Norm, S::None}}, // + a bias
      {K::LAYER_NORM_GRAD, {3, 3, 2, 2, dev, D::Norm, S::NormGrad}},
      {K::ROTARY, {3, 3, 1, 1, dev, D::Rotary, S::None}},
      {K::ROTARY_GRAD, {3, 3, 1, 1, dev, D::Rotary, S::None}},
      {K::ATTENTION, {3, 4, 1, 1, dev, D::Attention, S::None}}, // + a mask
      {K::ATTENTION_GRAD,
       {4, 5, 3, 3, dev, D::Attention, S::AttentionGrad}}, // + a mask
      {K::ACTIVATION, {1, 1, 1, 1, dev, D::Elementwise, S::None}},
      {K::ACTIVATION_GRAD, {2, 2, 1, 1, dev, D::Elementwise, S::None}},
      {K::GATED_ACTIVATION, {2, 2, 1, 1, dev, D::Elementwise, S::None}},
      {K::GATED_ACTIVATION_GRAD, {3, 3, 2, 2, dev, D::Elementwise, S::None}},
      {K::CROSS_ENTROPY, {2, 2, 1, 1, dev, D::CrossEntropy, S::RowLosses}},
      {K::CROSS_ENTROPY_GRAD, {3, 3, 1, 1, dev, D::CrossEntropy, S::RowLosses}},
      // The loss (or dx, dw), then the scratch of one chunk of logits.
      {K::HEAD_CROSS_ENTROPY, {3, 3, 2, 2, dev, D::Head, S::Head}},
      {K::HEAD_CROSS_ENTROPY_GRAD, {4, 4, 3, 3, dev, D::Head, S::Head}},
      {K::ADD, {2, 2, 1, 1, dev, D::Binary, S::None}},
      {K::SUB, {2, 2, 1, 1, dev, D::Binary, S::None}},
      {K::MUL, {2, 2, 1, 1, dev, D::Binary, S::None}},
      {K::DIV, {2, 2, 1, 1, dev, D::Binary, S::None}},
      {K::POW, {2, 2, 1, 1, dev, D::Binary, S::None}},
      {K::MAX, {2, 2, 1, 1, dev, D::Binary, S::None}},
      {K::MIN, {2, 2, 1, 1, dev, D::Binary, S::None}},
      {K::EQUAL, {2, 2, 1, 1, dev, D::Compare, S::None}},
      {K::LESS, {2, 2, 1, 1, dev, D::Compare, S::None}},
      {K::LESS_OR_EQUAL, {2, 2, 1, 1, dev, D::Compare, S::None}},
      {K::GREATER, {2, 2, 1, 1, dev, D::Compare, S::None}},
      {K::GREATER_OR_EQUAL, {2, 2, 1, 1, dev, D::Compare, S::None}},
      {K::NEG, {1, 1, 1, 1, dev, D::Elementwise, S::None}},
      {K::EXP, {1, 1, 1, 1, dev, D::Unary, S::None}},
      {K::LOG, {1, 1, 1, 1, dev, D::Unary, S::None}},
      {K::TANH, {1, 1, 1, 1, dev, D::Unary, S::None}},
      {K::SQRT, {1, 1, 1, 1, dev, D::Unary, S::None}},
      {K::RECIPROCAL, {1, 1, 1, 1, dev, D::Unary, S::None}},
      {K::SIGMOID, {1, 1, 1, 1, dev, D::Unary, S::None}},
      {K::ERF, {1, 1, 1, 1, dev, D::Unary, S::None}},
      {K::COS, {1, 1, 1, 1, dev, D::Unary, S::None}},
      {K::SIN, {1, 1, 1, 1, dev, D::Unary, S::None}},
      {K::MATMUL, {2, 2, 1, 1, dev, D::Matmul, S::None}},
      {K::SOFTMAX, {1, 1, 1, 1, dev, D::Lines, S::None}},
      {K::LOG_SOFTMAX, {1, 1, 1, 1, dev, D::Lines, S::None}},
      {K::EXPAND, {1, 1, 1, 1, dev, D::Expand, S::None}},
      {K::IS_NAN, {1, 1, 1, 1, dev, D::IsNaN, S::None}},
      {K::WHERE, {3, 3, 1, 1, dev, D::Where, S::None}},
      {K::SLICE, {1, 1, 1, 1, dev, D::Slice, S::None}},
      {K::SLICE_GRAD, {1, 1, 1, 1, dev, D::Slice, S::None}},
      {K::PAD, {1, 1, 1, 1, dev, D::Pad, S::None}},
      {K::TRILU, {1, 1, 1, 1, dev, D::Trilu, S::None}},
      {K::CUMSUM, {1, 1, 1, 1, dev, D::Lines, S::None}},
      {K::TILE, {1, 1, 1, 1, dev, D::Tile, S::None}},
      {K::GATHER_ND, {2, 2, 1, 1, dev, D::GatherND, S::FlatIndices}},
      {K::GATHER_ND_GRAD, {2, 2, 1, 1, dev, D::GatherND, S::FlatIndices}},
      {K::GATHER, {2, 2, 1, 1, dev, D::Gather, S::IndexFlag}},
      {K::GATHER_GRAD, {2, 2, 1, 1, dev, D::Gather, S::IndexFlag}},
      {K::REDUCE_SUM, {1, 1, 1, 1, dev, D::Layout, S::None}},
      {K::REDUCE_MEAN, {1, 1, 1, 1, dev, D::Layout, S::None}},
      {K::REDUCE_MAX, {1, 1, 1, 1, dev, D::Layout, S::None}},
      {K::TRANSPOSE, {1, 1, 1, 1, dev, D::Layout, S::None}},
      {K::CONCAT, {1, kMany, 1, 1, dev, D::Layout, S::None}},
      {K::SPLIT, {1, 1, 1, kMany, dev, D::Layout, S::None}},
      {K::COPY, {1, 1, 1, 1, dev, D::Buffers, S::None}},
      {K::FILL, {0, 0, 1, 1, dev, D::Buffers, S::None}},
      {K::COPY_TO_DEVICE, {1, 1, 1, 1, dev, D::Buffers, S::None}},
      {K::COPY_TO_HOST, {1, 1, 1, 1, dev, D::Buffers, S::None}},
      {K::ACCUMULATE, {1, 1, 1, 1, host, D::Buffers, S::None}},
      // grad; master, exp_avg, exp_avg_sq (8-bit moments: their scales).
      {K::ADAMW, {1, 1, 3, 5, host, D::Buffers, S::None}},
      {K::READ_DISK, {1, 1, 1, 1, host, D::Buffers, S::None}},
      {K::WRITE_DISK, {1, 1, 1, 1, host, D::Buffers, S::None}},
      {K::REDUCE_TO_OWNER, {1, 1, 1, 1, host, D::Buffers, S::None}},
      {K::BROADCAST, {1, 1, 1, 1, host, D::Buffers, S::None}},
  };
  auto it = table.find(int(kernel));
  return it == table.end() ? nullptr : &it->second;
}

} // namespace mt::runtime
