// The kernel table (see kernel_table.h).
#include "runtime/plan/kernel_table.h"

#include <unordered_map>

namespace mt::runtime {

const KernelInfo *kernelInfo(plan::Kernel kernel) {
  using K = plan::Kernel;
  using D = Describe;
  using S = Scratch;
  using A = plan::Attrs::KindCase;
  constexpr int kMany = KernelInfo::kMany;
  constexpr Runs dev = Runs::Device, host = Runs::Host;
  // Operands min, max; results min, max; where; the description; the
  // device scratch; the attributes.
  static const std::unordered_map<int, KernelInfo> table = {
      {K::EMBEDDING,
       {2, 2, 1, 1, dev, D::Embedding, S::IndexFlag, A::kEmbedding}},
      {K::EMBEDDING_GRAD,
       {2, 2, 1, 1, dev, D::Embedding, S::EmbeddingGrad, A::kEmbedding}},
      {K::LINEAR,
       {2, 3, 1, 1, dev, D::Linear, S::None, A::kLinear}}, // + a bias
      {K::LINEAR_GRAD, {3, 3, 2, 2, dev, D::Linear, S::None, A::kLinear}},
      {K::EXPERT_LINEAR,
       {3, 3, 1, 1, dev, D::ExpertLinear, S::Experts, A::kLinear}},
      {K::EXPERT_LINEAR_GRAD,
       {4, 4, 2, 2, dev, D::ExpertLinear, S::Experts, A::kLinear}},
      {K::RMS_NORM, {2, 2, 1, 1, dev, D::Norm, S::None, A::kNorm}},
      {K::RMS_NORM_GRAD, {3, 3, 2, 2, dev, D::Norm, S::NormGrad, A::kNorm}},
      {K::LAYER_NORM,
       {2, 3, 1, 1, dev, D::Norm, S::None, A::kNorm}}, // + a bias
      {K::LAYER_NORM_GRAD, {3, 3, 2, 2, dev, D::Norm, S::NormGrad, A::kNorm}},
      {K::ROTARY, {3, 3, 1, 1, dev, D::Rotary, S::None, A::kRotary}},
      {K::ROTARY_GRAD, {3, 3, 1, 1, dev, D::Rotary, S::None, A::kRotary}},
      {K::ATTENTION,
       {3, 4, 1, 1, dev, D::Attention, S::None, A::kAttention}}, // + a mask
      {K::ATTENTION_GRAD,
       {4, 5, 3, 3, dev, D::Attention, S::AttentionGrad,
        A::kAttention}}, // + a mask
      {K::ACTIVATION,
       {1, 1, 1, 1, dev, D::Elementwise, S::None, A::kActivation}},
      {K::ACTIVATION_GRAD,
       {2, 2, 1, 1, dev, D::Elementwise, S::None, A::kActivation}},
      {K::GATED_ACTIVATION,
       {2, 2, 1, 1, dev, D::Elementwise, S::None, A::kActivation}},
      {K::GATED_ACTIVATION_GRAD,
       {3, 3, 2, 2, dev, D::Elementwise, S::None, A::kActivation}},
      {K::CROSS_ENTROPY,
       {2, 2, 1, 1, dev, D::CrossEntropy, S::RowLosses, A::kCrossEntropy}},
      {K::CROSS_ENTROPY_GRAD,
       {3, 3, 1, 1, dev, D::CrossEntropy, S::RowLosses, A::kCrossEntropy}},
      // The loss (or dx, dw), then the scratch of one chunk of logits.
      {K::HEAD_CROSS_ENTROPY, {3, 3, 2, 2, dev, D::Head, S::Head, A::kHead}},
      {K::HEAD_CROSS_ENTROPY_GRAD,
       {4, 4, 3, 3, dev, D::Head, S::Head, A::kHead}},
      // y (or dx, dgate, dup, ddown), then the scratch of one chunk's
      // intermediates.
      {K::GATED_MLP, {4, 4, 2, 2, dev, D::Mlp, S::None, A::kMlp}},
      {K::GATED_MLP_GRAD, {5, 5, 5, 5, dev, D::Mlp, S::None, A::kMlp}},
      {K::ADD, {2, 2, 1, 1, dev, D::Binary, S::None, A::KIND_NOT_SET}},
      {K::SUB, {2, 2, 1, 1, dev, D::Binary, S::None, A::KIND_NOT_SET}},
      {K::MUL, {2, 2, 1, 1, dev, D::Binary, S::None, A::KIND_NOT_SET}},
      {K::DIV, {2, 2, 1, 1, dev, D::Binary, S::None, A::KIND_NOT_SET}},
      {K::POW, {2, 2, 1, 1, dev, D::Binary, S::None, A::KIND_NOT_SET}},
      {K::MAX, {2, 2, 1, 1, dev, D::Binary, S::None, A::KIND_NOT_SET}},
      {K::MIN, {2, 2, 1, 1, dev, D::Binary, S::None, A::KIND_NOT_SET}},
      {K::EQUAL, {2, 2, 1, 1, dev, D::Compare, S::None, A::KIND_NOT_SET}},
      {K::LESS, {2, 2, 1, 1, dev, D::Compare, S::None, A::KIND_NOT_SET}},
      {K::LESS_OR_EQUAL,
       {2, 2, 1, 1, dev, D::Compare, S::None, A::KIND_NOT_SET}},
      {K::GREATER, {2, 2, 1, 1, dev, D::Compare, S::None, A::KIND_NOT_SET}},
      {K::GREATER_OR_EQUAL,
       {2, 2, 1, 1, dev, D::Compare, S::None, A::KIND_NOT_SET}},
      {K::NEG, {1, 1, 1, 1, dev, D::Elementwise, S::None, A::KIND_NOT_SET}},
      {K::UNARY, {1, 1, 1, 1, dev, D::Unary, S::None, A::kUnary}},
      {K::UNARY_GRAD, {2, 2, 1, 1, dev, D::Unary, S::None, A::kUnary}},
      {K::MATMUL, {2, 2, 1, 1, dev, D::Matmul, S::None, A::KIND_NOT_SET}},
      {K::SOFTMAX, {1, 1, 1, 1, dev, D::Lines, S::None, A::kAxis}},
      {K::LOG_SOFTMAX, {1, 1, 1, 1, dev, D::Lines, S::None, A::kAxis}},
      {K::EXPAND, {1, 1, 1, 1, dev, D::Expand, S::None, A::KIND_NOT_SET}},
      {K::IS_NAN, {1, 1, 1, 1, dev, D::IsNaN, S::None, A::KIND_NOT_SET}},
      {K::WHERE, {3, 3, 1, 1, dev, D::Where, S::None, A::KIND_NOT_SET}},
      {K::SLICE, {1, 1, 1, 1, dev, D::Slice, S::None, A::kSlice}},
      {K::SLICE_GRAD, {1, 1, 1, 1, dev, D::Slice, S::None, A::kSlice}},
      {K::PAD, {1, 1, 1, 1, dev, D::Pad, S::None, A::kPad}},
      {K::TRILU, {1, 1, 1, 1, dev, D::Trilu, S::None, A::kTrilu}},
      {K::CUMSUM, {1, 1, 1, 1, dev, D::Lines, S::None, A::kCumSum}},
      {K::TILE, {1, 1, 1, 1, dev, D::Tile, S::None, A::KIND_NOT_SET}},
      {K::TOPK, {1, 1, 2, 2, dev, D::TopK, S::None, A::kTopK}},
      {K::TOPK_GRAD, {2, 2, 1, 1, dev, D::TopK, S::IndexFlag, A::kTopK}},
      {K::NOT, {1, 1, 1, 1, dev, D::Logic, S::None, A::KIND_NOT_SET}},
      {K::AND, {2, 2, 1, 1, dev, D::Logic, S::None, A::KIND_NOT_SET}},
      {K::OR, {2, 2, 1, 1, dev, D::Logic, S::None, A::KIND_NOT_SET}},
      {K::XOR, {2, 2, 1, 1, dev, D::Logic, S::None, A::KIND_NOT_SET}},
      {K::GATHER_ND,
       {2, 2, 1, 1, dev, D::GatherND, S::FlatIndices, A::KIND_NOT_SET}},
      {K::GATHER_ND_GRAD,
       {2, 2, 1, 1, dev, D::GatherND, S::GatherGrad, A::KIND_NOT_SET}},
      {K::GATHER_ELEMENTS,
       {2, 2, 1, 1, dev, D::Elements, S::IndexFlag, A::kAxis}},
      {K::GATHER_ELEMENTS_GRAD,
       {2, 2, 1, 1, dev, D::Elements, S::IndexFlag, A::kAxis}},
      {K::SCATTER_ELEMENTS,
       {3, 3, 1, 1, dev, D::Elements, S::IndexFlag, A::kAxis}},
      {K::GATHER, {2, 2, 1, 1, dev, D::Gather, S::IndexFlag, A::kAxis}},
      {K::GATHER_GRAD, {2, 2, 1, 1, dev, D::Gather, S::GatherGrad, A::kAxis}},
      {K::REDUCE_SUM, {1, 1, 1, 1, dev, D::Layout, S::None, A::kReduce}},
      {K::REDUCE_MEAN, {1, 1, 1, 1, dev, D::Layout, S::None, A::kReduce}},
      {K::REDUCE_MAX, {1, 1, 1, 1, dev, D::Layout, S::None, A::kReduce}},
      {K::TRANSPOSE, {1, 1, 1, 1, dev, D::Layout, S::None, A::kTranspose}},
      {K::CONCAT, {1, kMany, 1, 1, dev, D::Layout, S::None, A::kAxis}},
      {K::SPLIT, {1, 1, 1, kMany, dev, D::Layout, S::None, A::kAxis}},
      {K::COPY, {1, 1, 1, 1, dev, D::Buffers, S::None, A::KIND_NOT_SET}},
      {K::FILL, {0, 0, 1, 1, dev, D::Buffers, S::None, A::kFill}},
      {K::COPY_TO_DEVICE,
       {1, 1, 1, 1, dev, D::Buffers, S::None, A::KIND_NOT_SET}},
      {K::COPY_TO_HOST,
       {1, 1, 1, 1, dev, D::Buffers, S::None, A::KIND_NOT_SET}},
      {K::ACCUMULATE, {1, 1, 1, 1, host, D::Buffers, S::None, A::KIND_NOT_SET}},
      // grad; master, exp_avg, exp_avg_sq (8-bit moments: their scales).
      {K::ADAMW, {1, 1, 3, 5, host, D::Buffers, S::None, A::KIND_NOT_SET}},
      {K::READ_DISK, {1, 1, 1, 1, host, D::Buffers, S::None, A::KIND_NOT_SET}},
      {K::WRITE_DISK, {1, 1, 1, 1, host, D::Buffers, S::None, A::KIND_NOT_SET}},
      {K::REDUCE_TO_OWNER, {1, 1, 1, 1, host, D::Buffers, S::None, A::kOwner}},
      {K::BROADCAST, {1, 1, 1, 1, host, D::Buffers, S::None, A::kOwner}},
  };
  auto it = table.find(int(kernel));
  return it == table.end() ? nullptr : &it->second;
}

std::string attrsName(plan::Attrs::KindCase kind) {
  if (kind == plan::Attrs::KIND_NOT_SET)
    return "none";
  const google::protobuf::FieldDescriptor *field =
      plan::Attrs::descriptor()->FindFieldByNumber(int(kind));
  return field ? field->name() : "field " + std::to_string(int(kind));
}

} // namespace mt::runtime
