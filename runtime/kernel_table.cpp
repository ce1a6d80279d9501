// The kernel table (see kernel_table.h).
#include "runtime/kernel_table.h"

#include <unordered_map>

namespace mt::runtime {

const KernelInfo *kernelInfo(plan::Kernel kernel) {
  using K = plan::Kernel;
  using D = Describe;
  constexpr int kMany = KernelInfo::kMany;
  constexpr Runs dev = Runs::Device, host = Runs::Host;
  // Operands min, max; results min, max; where; the description.
  static const std::unordered_map<int, KernelInfo> table = {
      {K::EMBEDDING, {2, 2, 1, 1, dev, D::Embedding}},
      {K::EMBEDDING_GRAD, {2, 2, 1, 1, dev, D::Embedding}},
      {K::LINEAR, {2, 3, 1, 1, dev, D::Linear}}, // + a bias
      {K::LINEAR_GRAD, {3, 3, 2, 2, dev, D::Linear}},
      {K::RMS_NORM, {2, 2, 1, 1, dev, D::Norm}},
      {K::RMS_NORM_GRAD, {3, 3, 2, 2, dev, D::Norm}},
      {K::LAYER_NORM, {2, 3, 1, 1, dev, D::Norm}}, // + a bias
      {K::LAYER_NORM_GRAD, {3, 3, 2, 2, dev, D::Norm}},
      {K::ROTARY, {3, 3, 1, 1, dev, D::Rotary}},
      {K::ROTARY_GRAD, {3, 3, 1, 1, dev, D::Rotary}},
      {K::ATTENTION, {3, 4, 1, 1, dev, D::Attention}},      // + a mask
      {K::ATTENTION_GRAD, {4, 5, 3, 3, dev, D::Attention}}, // + a mask
      {K::ACTIVATION, {1, 1, 1, 1, dev, D::Elementwise}},
      {K::ACTIVATION_GRAD, {2, 2, 1, 1, dev, D::Elementwise}},
      {K::GATED_ACTIVATION, {2, 2, 1, 1, dev, D::Elementwise}},
      {K::GATED_ACTIVATION_GRAD, {3, 3, 2, 2, dev, D::Elementwise}},
      {K::CROSS_ENTROPY, {2, 2, 1, 1, dev, D::CrossEntropy}},
      {K::CROSS_ENTROPY_GRAD, {3, 3, 1, 1, dev, D::CrossEntropy}},
      // The loss (or dx, dw), then the scratch of one chunk of logits.
      {K::HEAD_CROSS_ENTROPY, {3, 3, 2, 2, dev, D::Head}},
      {K::HEAD_CROSS_ENTROPY_GRAD, {4, 4, 3, 3, dev, D::Head}},
      {K::ADD, {2, 2, 1, 1, dev, D::Binary}},
      {K::SUB, {2, 2, 1, 1, dev, D::Binary}},
      {K::MUL, {2, 2, 1, 1, dev, D::Binary}},
      {K::DIV, {2, 2, 1, 1, dev, D::Binary}},
      {K::POW, {2, 2, 1, 1, dev, D::Binary}},
      {K::MAX, {2, 2, 1, 1, dev, D::Binary}},
      {K::MIN, {2, 2, 1, 1, dev, D::Binary}},
      {K::EQUAL, {2, 2, 1, 1, dev, D::Compare}},
      {K::LESS, {2, 2, 1, 1, dev, D::Compare}},
      {K::LESS_OR_EQUAL, {2, 2, 1, 1, dev, D::Compare}},
      {K::GREATER, {2, 2, 1, 1, dev, D::Compare}},
      {K::GREATER_OR_EQUAL, {2, 2, 1, 1, dev, D::Compare}},
      {K::NEG, {1, 1, 1, 1, dev, D::Elementwise}},
      {K::EXP, {1, 1, 1, 1, dev, D::Unary}},
      {K::LOG, {1, 1, 1, 1, dev, D::Unary}},
      {K::TANH, {1, 1, 1, 1, dev, D::Unary}},
      {K::SQRT, {1, 1, 1, 1, dev, D::Unary}},
      {K::RECIPROCAL, {1, 1, 1, 1, dev, D::Unary}},
      {K::SIGMOID, {1, 1, 1, 1, dev, D::Unary}},
      {K::ERF, {1, 1, 1, 1, dev, D::Unary}},
      {K::COS, {1, 1, 1, 1, dev, D::Unary}},
      {K::SIN, {1, 1, 1, 1, dev, D::Unary}},
      {K::MATMUL, {2, 2, 1, 1, dev, D::Matmul}},
      {K::SOFTMAX, {1, 1, 1, 1, dev, D::Softmax}},
      {K::LOG_SOFTMAX, {1, 1, 1, 1, dev, D::Softmax}},
      {K::EXPAND, {1, 1, 1, 1, dev, D::Expand}},
      {K::IS_NAN, {1, 1, 1, 1, dev, D::IsNaN}},
      {K::WHERE, {3, 3, 1, 1, dev, D::Where}},
      {K::SLICE, {1, 1, 1, 1, dev, D::Slice}},
      {K::SLICE_GRAD, {1, 1, 1, 1, dev, D::Slice}},
      {K::GATHER, {2, 2, 1, 1, dev, D::Gather}},
      {K::GATHER_GRAD, {2, 2, 1, 1, dev, D::Gather}},
      {K::REDUCE_SUM, {1, 1, 1, 1, dev, D::Layout}},
      {K::REDUCE_MEAN, {1, 1, 1, 1, dev, D::Layout}},
      {K::REDUCE_MAX, {1, 1, 1, 1, dev, D::Layout}},
      {K::TRANSPOSE, {1, 1, 1, 1, dev, D::Layout}},
      {K::CONCAT, {1, kMany, 1, 1, dev, D::Layout}},
      {K::SPLIT, {1, 1, 1, kMany, dev, D::Layout}},
      {K::COPY, {1, 1, 1, 1, dev, D::Buffers}},
      {K::FILL, {0, 0, 1, 1, dev, D::Buffers}},
      {K::COPY_TO_DEVICE, {1, 1, 1, 1, dev, D::Buffers}},
      {K::COPY_TO_HOST, {1, 1, 1, 1, dev, D::Buffers}},
      {K::ACCUMULATE, {1, 1, 1, 1, host, D::Buffers}},
      // grad; master, exp_avg, exp_avg_sq (8-bit moments: their scales).
      {K::ADAMW, {1, 1, 3, 5, host, D::Buffers}},
      {K::READ_DISK, {1, 1, 1, 1, host, D::Buffers}},
      {K::WRITE_DISK, {1, 1, 1, 1, host, D::Buffers}},
      {K::REDUCE_TO_OWNER, {1, 1, 1, 1, host, D::Buffers}},
      {K::BROADCAST, {1, 1, 1, 1, host, D::Buffers}},
  };
  auto it = table.find(int(kernel));
  return it == table.end() ? nullptr : &it->second;
}

} // namespace mt::runtime
