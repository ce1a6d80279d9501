// CUDA kernels of the fused and primitive ops, forward and backward, with
// the semantics of the CPU reference (kernels/cpu): same shapes, same
// layouts, backward kernels overwrite every result. Storage is fp32 or
// bf16, chosen per tensor at run time; the math is fp32 (attention, norms
// and cross-entropy reduce in fp32, the CPU reference in double).
//
// Every launcher enqueues on `stream` and returns the launch status; the
// workspaces they take are device memory the caller sized with the
// matching *WorkspaceBytes function. A launcher checks its preconditions
// first (a shape it cannot run, a size past its index type, a missing
// pointer): one that fails returns cudaErrorInvalidValue and enqueues
// nothing.
#ifndef MT_KERNELS_CUDA_KERNELS_H
#define MT_KERNELS_CUDA_KERNELS_H

#include "kernels/cpu/fused_ops.h"
#include "kernels/cpu/primitive_ops.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace mt::kernels::cuda {

enum class DType : uint8_t { F32, BF16 };

/// A device tensor: its memory and its storage type.
struct Ref {
  const void *data = nullptr;
  DType type = DType::F32;
};
struct MutRef {
  void *data = nullptr;
  DType type = DType::F32;
};

using Dims = std::vector<int64_t>;

cudaError_t fill(MutRef y, int64_t n, float value, cudaStream_t stream);
/// y = x converted to y's type.
cudaError_t cast(Ref x, MutRef y, int64_t n, cudaStream_t stream);
/// The element types a plan's casts convert between (U8: booleans).
enum class Scalar : uint8_t { F32, BF16, I64, U8 };
/// y = value converted to y's element type as convert converts (a FILL of
/// any buffer: ids take the value toward zero, booleans its being nonzero).
cudaError_t fill(void *y, Scalar type, int64_t n, float value,
                 cudaStream_t stream);
/// y = x converted as ONNX Cast converts (as the CPU's hostCopy): floats to
/// I64 toward zero (NaN to 0, saturating), anything to U8 by being nonzero.
cudaError_t convert(const void *x, Scalar from, void *y, Scalar to, int64_t n,
                    cudaStream_t stream);

/// The CPU reference's enums and shapes (kernels/cpu).
using cpu::Activation;
using cpu::AttentionShape;
using cpu::Binary;
using cpu::CrossEntropyShape;
using cpu::MlpShape;
using cpu::RotaryShape;
using cpu::Unary;
using cpu::UnaryParams;

/// y[yDims] = a op b, both broadcast (numpy rules) to yDims (rank <= 8).
cudaError_t binary(Binary op, Ref a, const Dims &aDims, Ref b,
                   const Dims &bDims, MutRef y, const Dims &yDims,
                   cudaStream_t stream);
cudaError_t neg(Ref x, MutRef y, int64_t n, cudaStream_t stream);
/// y = f(x), elementwise over n elements.
cudaError_t unary(const UnaryParams &f, Ref x, MutRef y, int64_t n,
                  cudaStream_t stream);
/// dx = dy f'(x), elementwise over n elements (cpu::applyUnaryGrad).
cudaError_t unaryGrad(const UnaryParams &f, Ref x, Ref dy, MutRef dx, int64_t n,
                      cudaStream_t stream);
/// y[..., M, N] = a[..., M, K] b[..., K, N], batch dims broadcast (the CPU
/// kernel's contract; at most 65535 batches and 65535 x 16 rows).
cudaError_t batchMatmul(Ref a, const Dims &aDims, Ref b, const Dims &bDims,
                        MutRef y, const Dims &yDims, cudaStream_t stream);
/// y[yDims] = x broadcast (numpy rules) to yDims (rank <= 8).
cudaError_t expand(Ref x, const Dims &dims, MutRef y, const Dims &yDims,
                   cudaStream_t stream);
/// y = softmax(x) along `axis` (non-negative), or with `log` its log.
cudaError_t softmax(Ref x, const Dims &dims, int64_t axis, MutRef y, bool log,
                    cudaStream_t stream);
/// Sums x over `axes` (all when empty) into y (x's element order, the
/// reduced dims of size 1).
cudaError_t reduceSum(Ref x, const Dims &dims, const std::vector<int64_t> &axes,
                      MutRef y, cudaStream_t stream);
/// The mean over `axes` (all when empty), as reduceSum lays it out.
cudaError_t reduceMean(Ref x, const Dims &dims,
                       const std::vector<int64_t> &axes, MutRef y,
                       cudaStream_t stream);
/// The maximum over `axes` (a NaN wins), as reduceSum lays it out.
cudaError_t reduceMax(Ref x, const Dims &dims, const std::vector<int64_t> &axes,
                      MutRef y, cudaStream_t stream);
/// y[yDims] = a op b (a byte, 1 where true), both broadcast to yDims.
cudaError_t compare(cpu::Compare op, Ref a, const Dims &aDims, Ref b,
                    const Dims &bDims, uint8_t *y, const Dims &yDims,
                    cudaStream_t stream);
/// y[yDims] = a op b of bytes (1 where true), both broadcast to yDims (Not:
/// of a alone).
cudaError_t logic(cpu::Logic op, const uint8_t *a, const Dims &aDims,
                  const uint8_t *b, const Dims &bDims, uint8_t *y,
                  const Dims &yDims, cudaStream_t stream);
/// y = slices of x along `axis` at `indices` (count of them; negative from
/// the end). An index outside the axis writes zeros and sets *bad (device
/// memory) to 1.
cudaError_t gather(Ref x, const Dims &dims, int64_t axis,
                   const int64_t *indices, int64_t count, MutRef y, int *bad,
                   cudaStream_t stream);
/// dx = zeros, then each slice of dy added where its index names, in index
/// order: the indices grouped by the place they name (a stable sort), then
/// a block per row of dx sums its group's slices; work in the size of dy,
/// and the same sums every run. Workspace: gatherGradWorkspaceBytes(the
/// gathered axis's size, count).
cudaError_t gatherGradWorkspaceBytes(int64_t places, int64_t count,
                                     size_t &bytes);
cudaError_t gatherGrad(Ref dy, const Dims &dims, int64_t axis,
                       const int64_t *indices, int64_t count, MutRef dx,
                       int *bad, void *workspace, cudaStream_t stream);
/// values, indices = the k first of each line along `axis` (as the CPU
/// topK; indices a device array of the values' size).
cudaError_t topK(Ref x, const Dims &dims, int64_t axis, int64_t k,
                 bool smallest, MutRef values, int64_t *indices,
                 cudaStream_t stream);
/// TopK's gradient is gatherElementsGrad with TopK's indices.
/// y = the elements of x's lines along `axis` the indices name (as the CPU
/// gatherElements); *bad is set for an index outside the axis.
cudaError_t gatherElements(Ref x, const Dims &dims, int64_t axis,
                           const int64_t *indices, int64_t k, MutRef y,
                           int *bad, cudaStream_t stream);
/// dx = zeros of dims with dy summed where the indices name, in index
/// order (as the CPU gatherElementsGrad); *bad as gatherElements.
cudaError_t gatherElementsGrad(Ref dy, const int64_t *indices, const Dims &dims,
                               int64_t axis, int64_t k, MutRef dx, int *bad,
                               cudaStream_t stream);
/// y = x with the updates written where the indices name, in index order
/// (as the CPU scatterElements); *bad as gatherElements.
cudaError_t scatterElements(Ref x, const Dims &dims, int64_t axis,
                            const int64_t *indices, Ref updates, int64_t k,
                            MutRef y, int *bad, cudaStream_t stream);
/// y = the slices of x that the k-tuples of indices name (as the CPU
/// gatherND); `flat` (device, a slot per tuple) takes each tuple's flat
/// index, *bad is set for a tuple outside x (k <= 8).
cudaError_t gatherND(Ref x, const Dims &dims, const int64_t *indices,
                     int64_t tuples, int64_t k, MutRef y, int64_t *flat,
                     int *bad, cudaStream_t stream);
/// dx = zeros, then each slice of dy added where its tuple names, in tuple
/// order (as gatherGrad, on the flat indices; its workspace for the product
/// of the first k dims as places).
cudaError_t gatherNDGrad(Ref dy, const Dims &dims, const int64_t *indices,
                         int64_t tuples, int64_t k, MutRef dx, int64_t *flat,
                         int *bad, void *workspace, cudaStream_t stream);
/// y[j...] = x[j - begins...] where that is inside x, else value (rank
/// <= 8; negative begins crop).
cudaError_t pad(Ref x, const Dims &dims, const std::vector<int64_t> &begins,
                float value, MutRef y, const Dims &yDims, cudaStream_t stream);
/// y = x off the kept triangle of each matrix of the last two dims zeroed
/// (as the CPU trilu).
cudaError_t trilu(Ref x, const Dims &dims, bool upper, int64_t diagonal,
                  MutRef y, cudaStream_t stream);
/// y = the running sums of x along `axis` (as the CPU cumSum).
cudaError_t cumSum(Ref x, const Dims &dims, int64_t axis, bool exclusive,
                   bool reverse, MutRef y, cudaStream_t stream);
/// y[j...] = x[j % dims...] (rank <= 8; each of yDims a multiple of dims).
cudaError_t tile(Ref x, const Dims &dims, MutRef y, const Dims &yDims,
                 cudaStream_t stream);
/// y[i...] = x[starts + i * steps...] (rank <= 8; steps may be negative).
cudaError_t slice(Ref x, const Dims &dims, const std::vector<int64_t> &starts,
                  const std::vector<int64_t> &steps, MutRef y,
                  const Dims &yDims, cudaStream_t stream);
/// The same of ids (labels read from position 1 on), copied as they are.
cudaError_t sliceIds(const int64_t *x, const Dims &dims,
                     const std::vector<int64_t> &starts,
                     const std::vector<int64_t> &steps, int64_t *y,
                     const Dims &yDims, cudaStream_t stream);
/// dx = zeros with dx[starts + i * steps...] = dy[i...].
cudaError_t sliceGrad(Ref dy, const Dims &dyDims,
                      const std::vector<int64_t> &starts,
                      const std::vector<int64_t> &steps, MutRef dx,
                      const Dims &dxDims, cudaStream_t stream);
/// y[i] = 1 where x[i] is NaN, else 0 (a byte each).
cudaError_t isNaN(Ref x, uint8_t *y, int64_t n, cudaStream_t stream);
/// y = cond ? a : b, the three broadcast (numpy rules) to yDims (rank <= 8);
/// cond a byte per element, nonzero for true.
cudaError_t where(const uint8_t *cond, const Dims &condDims, Ref a,
                  const Dims &aDims, Ref b, const Dims &bDims, MutRef y,
                  const Dims &yDims, cudaStream_t stream);
/// y = x with dims permuted: y dim d is x dim perm[d].
cudaError_t transpose(Ref x, const Dims &dims, const std::vector<int64_t> &perm,
                      MutRef y, cudaStream_t stream);
/// One part of a concat along `axis`: y's slice [offset, offset + part's
/// size along axis) = part; splitPart is the reverse.
cudaError_t concatPart(Ref part, const Dims &partDims, int64_t axis,
                       int64_t offset, int64_t yAxisSize, MutRef y,
                       cudaStream_t stream);
cudaError_t splitPart(Ref x, const Dims &xDims, int64_t axis, int64_t offset,
                      MutRef part, const Dims &partDims, cudaStream_t stream);

cudaError_t activation(Ref x, MutRef y, int64_t n, Activation act,
                       cudaStream_t stream);
cudaError_t activationGrad(Ref x, Ref dy, MutRef dx, int64_t n, Activation act,
                           cudaStream_t stream);
/// y = act(gate) * up, and its gradients.
cudaError_t gated(Ref gate, Ref up, MutRef y, int64_t n, Activation act,
                  cudaStream_t stream);
cudaError_t gatedGrad(Ref gate, Ref up, Ref dy, MutRef dGate, MutRef dUp,
                      int64_t n, Activation act, cudaStream_t stream);

/// out[n, :] = table[ids[n], :]. An id outside [0, vocab) writes zeros and
/// sets *badId (device memory) to 1.
cudaError_t embedding(Ref table, const int64_t *ids, int64_t count,
                      int64_t vocab, int64_t dim, MutRef out, int *badId,
                      cudaStream_t stream);
/// dTable = the sum of dOut's rows into the rows their ids name (every row
/// written; each row's tokens summed in token order, so the result is the
/// same every run). Workspace: embeddingGradWorkspaceBytes.
cudaError_t embeddingGradWorkspaceBytes(int64_t vocab, int64_t count,
                                        size_t &bytes);
cudaError_t embeddingGrad(Ref dOut, const int64_t *ids, int64_t count,
                          int64_t vocab, int64_t dim, MutRef dTable,
                          void *workspace, cudaStream_t stream);

/// Norms over the last dim of x [rows, dim]; the backward's dw is
/// overwritten with its sum over rows. Workspace:
/// normGradWorkspaceBytes(rows, dim).
cudaError_t rmsNorm(Ref x, Ref w, int64_t rows, int64_t dim, float eps,
                    bool plusOne, MutRef y, cudaStream_t stream);
cudaError_t layerNorm(Ref x, Ref w, Ref b, int64_t rows, int64_t dim, float eps,
                      MutRef y, cudaStream_t stream);
size_t normGradWorkspaceBytes(int64_t rows, int64_t dim);
cudaError_t rmsNormGrad(Ref x, Ref w, Ref dy, int64_t rows, int64_t dim,
                        float eps, bool plusOne, MutRef dx, MutRef dw,
                        void *workspace, cudaStream_t stream);
cudaError_t layerNormGrad(Ref x, Ref w, Ref dy, int64_t rows, int64_t dim,
                          float eps, MutRef dx, MutRef dw, void *workspace,
                          cudaStream_t stream);

/// y = R x, or with transpose R^T x (the backward).
cudaError_t rotary(Ref x, Ref cos, Ref sin, const RotaryShape &s,
                   bool transpose, MutRef y, cudaStream_t stream);

/// headDim <= kMaxHeadDim.
constexpr int64_t kMaxHeadDim = 256;
/// Flash-style: the scores of one tile of keys at a time with an online
/// softmax; nothing of size seq x seq is stored. mask.data may be null.
cudaError_t attention(Ref q, Ref k, Ref v, Ref mask, const AttentionShape &s,
                      MutRef out, cudaStream_t stream);
/// The backward recomputes each row's log-sum-exp and dO . O first (the
/// forward keeps nothing), then dQ by query rows and dK, dV by key rows
/// (no atomics). Workspace: attentionGradWorkspaceBytes(s).
size_t attentionGradWorkspaceBytes(const AttentionShape &s);
cudaError_t attentionGrad(Ref q, Ref k, Ref v, Ref mask, Ref dOut,
                          const AttentionShape &s, MutRef dq, MutRef dk,
                          MutRef dv, void *workspace, cudaStream_t stream);

/// Per-row losses of logits rows [row0, row0 + rows) of the whole batch
/// (labels are the whole batch's) into rowLoss[row0 ...] (0 for ignored
/// rows). crossEntropyLoss then writes the mean over counted rows (NaN when
/// none) into loss[0].
cudaError_t crossEntropyRows(Ref logits, const int64_t *labels,
                             const CrossEntropyShape &s, int64_t row0,
                             int64_t rows, float *rowLoss, cudaStream_t stream);
cudaError_t crossEntropyLoss(const float *rowLoss, const int64_t *labels,
                             const CrossEntropyShape &s, MutRef loss,
                             cudaStream_t stream);
/// Counts the rows whose target counts into *count (device int64).
cudaError_t crossEntropyCount(const int64_t *labels, const CrossEntropyShape &s,
                              int64_t *count, cudaStream_t stream);
/// dLogits rows [row0, row0 + rows) = dLoss[0] * (softmax - onehot) /
/// *count; dLogits may alias logits when both are F32.
cudaError_t crossEntropyGradRows(Ref logits, const int64_t *labels,
                                 const CrossEntropyShape &s, int64_t row0,
                                 int64_t rows, Ref dLoss, const int64_t *count,
                                 MutRef dLogits, cudaStream_t stream);

/// One GEMM of a fused op, C[m, n] = op(A) op(B) (+ C when accumulate),
/// row-major: A is [k, m] stored when transA, else [m, k]; B is [n, k]
/// when transB, else [k, n]. A and B are of type ab, C of type c.
struct GemmCall {
  int64_t m, n, k;
  bool transA, transB;
  DType ab, c;
  bool accumulate;
  const void *a, *b;
  void *out;
};
/// The GEMM of a weight's gradient over n rows, x [n, in] and dy [n, out]
/// of type ab: dw [out, in] (+)= dy^T x when outIn, else dw [in, out] (+)=
/// x^T dy (accumulate: +=).
inline GemmCall weightGradGemm(int64_t in, int64_t out, int64_t n, bool outIn,
                               DType ab, DType dwType, bool accumulate,
                               const void *x, const void *dy, void *dw) {
  if (outIn)
    return {out, in, n, true, false, ab, dwType, accumulate, dy, x, dw};
  return {in, out, n, true, false, ab, dwType, accumulate, x, dy, dw};
}
/// Runs a GemmCall on the launcher's stream (the GEMMs are the runtime's,
/// on cuBLASLt); false when it failed, after keeping why. A launcher that
/// sees false stops and returns cudaErrorLaunchFailure.
using GemmHook = std::function<bool(const GemmCall &)>;

/// The head (HeadShape): per chunk of rows, logits = x W^T (outIn, W
/// [vocab, dim]) or x W into `logits` (fp32, chunkRows x vocab), then the
/// chunk's losses; loss[0] = their mean. w is of x's type. Workspace:
/// headWorkspaceBytes(s, x.type, grad).
size_t headWorkspaceBytes(const HeadShape &s, DType x, bool grad);
cudaError_t headCrossEntropy(Ref x, Ref w, const int64_t *labels,
                             const HeadShape &s, float *logits, void *workspace,
                             MutRef loss, const GemmHook &gemm,
                             cudaStream_t stream);
/// The backward recomputes each chunk's logits: dx (rows x dim) and dw (W's
/// shape, summed over the chunks) are overwritten.
cudaError_t headCrossEntropyGrad(Ref x, Ref w, const int64_t *labels, Ref dLoss,
                                 const HeadShape &s, float *logits,
                                 void *workspace, MutRef dx, MutRef dw,
                                 const GemmHook &gemm, cudaStream_t stream);

/// A mixture of experts' expert projection (experts.cu): rows x [rows, in]
/// each through the expert ids[r] names (negative from the end) of the
/// experts' weights w [experts, out, in] (outIn) or [experts, in, out].
struct ExpertShape {
  int64_t rows, experts, in, out;
  bool outIn;
};
/// The workspace of the forward (grad false) or the backward: the rows'
/// grouping by expert and the gathered rows.
cudaError_t expertLinearWorkspaceBytes(const ExpertShape &e, bool grad,
                                       size_t &bytes);
/// y [rows, out] in y's type; w of x's type. The rows are grouped on the
/// device and the experts' row counts read back once (a wait for the
/// stream); an id outside the experts sets `badIds` and computes nothing.
cudaError_t expertLinear(Ref x, const int64_t *ids, Ref w, const ExpertShape &e,
                         MutRef y, void *workspace, bool &badIds,
                         const GemmHook &gemm, cudaStream_t stream);
/// dx (through each row's expert) and dw (each expert's from its rows, zero
/// for an expert no row chose), both overwritten; dy of x's type.
cudaError_t expertLinearGrad(Ref x, const int64_t *ids, Ref w, Ref dy,
                             const ExpertShape &e, MutRef dx, MutRef dw,
                             void *workspace, bool &badIds,
                             const GemmHook &gemm, cudaStream_t stream);

/// The gated MLP (MlpShape) per chunk of rows: gate and up [n, hidden] =
/// x W, y rows = (act(gate) * up) W_down (mlp.cu). The weights are of x's
/// type; `scratch` (gatedMlpScratchBytes, of x's type: the plan's scratch
/// buffer) holds one chunk's intermediates.
size_t gatedMlpScratchBytes(const MlpShape &m, DType x, bool grad);
cudaError_t gatedMlp(Ref x, Ref gate, Ref up, Ref down, const MlpShape &m,
                     MutRef y, void *scratch, const GemmHook &gemm,
                     cudaStream_t stream);
/// The backward recomputes each chunk's intermediates: dx overwritten, the
/// weights' gradients summed over the chunks (the first chunk overwrites).
cudaError_t gatedMlpGrad(Ref x, Ref gate, Ref up, Ref down, Ref dy,
                         const MlpShape &m, MutRef dx, MutRef dGate, MutRef dUp,
                         MutRef dDown, void *scratch, const GemmHook &gemm,
                         cudaStream_t stream);

} // namespace mt::kernels::cuda

#endif // MT_KERNELS_CUDA_KERNELS_H
