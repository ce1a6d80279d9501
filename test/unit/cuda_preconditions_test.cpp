// The CUDA launchers' precondition checks: an argument a launcher cannot run
// returns cudaErrorInvalidValue before any CUDA call, so this runs (and must
// pass) without a device. The pointers are never dereferenced.
#include "kernels/cuda/kernels.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace {

namespace kc = mt::kernels::cuda;

constexpr cudaError_t kInvalid = cudaErrorInvalidValue;

// Host memory standing in for device pointers the launchers never reach.
float sink[4];
int64_t ids[4];
kc::Ref in() { return {sink, kc::DType::F32}; }
kc::MutRef out() { return {sink, kc::DType::F32}; }

TEST(CudaPreconditions, CrossEntropyRowsOutsideTheBatch) {
  kc::CrossEntropyShape s{2, 3, 10};
  // Rows [4, 4 + 3) of 6.
  EXPECT_EQ(kc::crossEntropyRows(in(), ids, s, 4, 3, sink, nullptr), kInvalid);
  EXPECT_EQ(kc::crossEntropyRows(in(), ids, s, -1, 2, sink, nullptr), kInvalid);
  EXPECT_EQ(
      kc::crossEntropyGradRows(in(), ids, s, 0, 7, in(), ids, out(), nullptr),
      kInvalid);
  kc::CrossEntropyShape noVocab{2, 3, 0};
  EXPECT_EQ(kc::crossEntropyLoss(sink, ids, noVocab, out(), nullptr), kInvalid);
  EXPECT_EQ(kc::crossEntropyCount(nullptr, s, ids, nullptr), kInvalid);
}

TEST(CudaPreconditions, NormsNeedADim) {
  EXPECT_EQ(kc::rmsNorm(in(), in(), 4, 0, 1e-6f, false, out(), nullptr),
            kInvalid);
  EXPECT_EQ(kc::layerNorm(in(), in(), in(), -1, 8, 1e-6f, out(), nullptr),
            kInvalid);
  EXPECT_EQ(kc::rmsNormGrad(in(), in(), in(), 4, 8, 1e-6f, false, out(), out(),
                            nullptr, nullptr),
            kInvalid);
}

TEST(CudaPreconditions, RotaryPairsTheHeadDim) {
  kc::RotaryShape odd{1, 4, 2, 7};
  EXPECT_EQ(kc::rotary(in(), in(), in(), odd, false, out(), nullptr), kInvalid);
}

TEST(CudaPreconditions, EmbeddingGradIndexesInInt) {
  size_t bytes = 0;
  EXPECT_EQ(kc::embeddingGradWorkspaceBytes(100, int64_t(1) << 32, bytes),
            kInvalid);
  EXPECT_EQ(kc::embeddingGrad(in(), ids, 4, int64_t(1) << 31, 8, out(), sink,
                              nullptr),
            kInvalid);
  EXPECT_EQ(kc::embedding(in(), ids, 4, 0, 8, out(), nullptr, nullptr),
            kInvalid);
}

TEST(CudaPreconditions, ElementwiseCounts) {
  EXPECT_EQ(kc::activation(in(), out(), -1, kc::Activation::Silu, nullptr),
            kInvalid);
  EXPECT_EQ(kc::gatedGrad(in(), in(), in(), out(), out(), -4,
                          kc::Activation::Gelu, nullptr),
            kInvalid);
}

TEST(CudaPreconditions, AttentionShape) {
  kc::AttentionShape grouped{1, 8, 6, 4, 64, 0.125f};
  EXPECT_EQ(kc::attention(in(), in(), in(), {}, grouped, out(), nullptr),
            kInvalid);
  kc::AttentionShape wide{1, 8, 4, 4, kc::kMaxHeadDim + 2, 0.125f};
  EXPECT_EQ(kc::attention(in(), in(), in(), {}, wide, out(), nullptr),
            kInvalid);
}

TEST(CudaPreconditions, HeadNeedsOneInputTypeAndRows) {
  kc::GemmHook never = [](const kc::GemmCall &) {
    ADD_FAILURE() << "a GEMM ran";
    return false;
  };
  mt::kernels::HeadShape s{8, true, {1, 4, 10}, 2};
  EXPECT_EQ(kc::headCrossEntropy(in(), {sink, kc::DType::BF16}, ids, s, sink,
                                 sink, out(), never, nullptr),
            kInvalid);
  mt::kernels::HeadShape noChunk{8, true, {1, 4, 10}, 0};
  EXPECT_EQ(kc::headCrossEntropyGrad(in(), in(), ids, in(), noChunk, sink, sink,
                                     out(), out(), never, nullptr),
            kInvalid);
}

// An empty tensor is nothing to launch, not an error: a grid of no blocks
// is no launch CUDA accepts, so these return before any CUDA call.
TEST(CudaPreconditions, EmptyTensorsLaunchNothing) {
  EXPECT_EQ(kc::batchMatmul(in(), {2, 0, 4}, in(), {2, 4, 3}, out(), {2, 0, 3},
                            nullptr),
            cudaSuccess);
  EXPECT_EQ(kc::reduceSum(in(), {3, 0}, {0}, out(), nullptr), cudaSuccess);
  kc::AttentionShape noBatch{0, 16, 4, 2, 32, 0.1f};
  EXPECT_EQ(kc::attention(in(), in(), in(), {}, noBatch, out(), nullptr),
            cudaSuccess);
  kc::AttentionShape noRows{2, 0, 4, 2, 32, 0.1f};
  EXPECT_EQ(kc::attention(in(), in(), in(), {}, noRows, out(), nullptr),
            cudaSuccess);
}

// A gather's gradient groups its indices: workspaces past int indices and
// a missing workspace are refused before anything runs.
TEST(CudaPreconditions, GatherGradNeedsItsWorkspace) {
  size_t bytes = 0;
  EXPECT_EQ(kc::gatherGradWorkspaceBytes(int64_t(1) << 31, 4, bytes), kInvalid);
  EXPECT_EQ(
      kc::gatherGrad(in(), {2, 3}, 1, ids, 4, out(), nullptr, nullptr, nullptr),
      kInvalid);
  EXPECT_EQ(
      kc::gatherGrad(in(), {2, 3}, 2, ids, 4, out(), nullptr, sink, nullptr),
      kInvalid);
}

// The gated MLP and the expert linears multiply inputs of one type, and
// need their workspace: refused before a GEMM or a kernel runs.
TEST(CudaPreconditions, MlpAndExpertsNeedOneInputType) {
  kc::GemmHook never = [](const kc::GemmCall &) {
    ADD_FAILURE() << "a GEMM ran";
    return false;
  };
  kc::Ref bf16{sink, kc::DType::BF16};
  kc::MlpShape m{4, 8, 16, true, kc::Activation::Silu, 2};
  EXPECT_EQ(
      kc::gatedMlp(in(), bf16, in(), in(), m, out(), sink, never, nullptr),
      kInvalid);
  EXPECT_EQ(
      kc::gatedMlp(in(), in(), in(), in(), m, out(), nullptr, never, nullptr),
      kInvalid);
  kc::MlpShape noChunk{4, 8, 16, true, kc::Activation::Silu, 0};
  EXPECT_EQ(kc::gatedMlpGrad(in(), in(), in(), in(), in(), noChunk, out(),
                             out(), out(), out(), sink, never, nullptr),
            kInvalid);
  kc::ExpertShape e{4, 2, 8, 8, true};
  bool bad = false;
  EXPECT_EQ(
      kc::expertLinear(in(), ids, bf16, e, out(), sink, bad, never, nullptr),
      kInvalid);
  EXPECT_EQ(kc::expertLinearGrad(in(), ids, in(), bf16, e, out(), out(), sink,
                                 bad, never, nullptr),
            kInvalid);
  kc::ExpertShape noExperts{4, 0, 8, 8, true};
  size_t bytes = 0;
  EXPECT_EQ(kc::expertLinearWorkspaceBytes(noExperts, false, bytes), kInvalid);
}

} // namespace
