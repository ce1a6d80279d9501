// The head: the vocabulary projection and its cross-entropy, a chunk of rows
// at a time, so that only one chunk of logits [chunkRows, vocab] (fp32)
// exists at once; the CUDA twin of kernels/cpu's headCrossEntropy*. The
// GEMMs are the caller's (cuBLASLt lives in the runtime); the softmax rows
// are cross_entropy.cu's.
#include "kernels/cuda/common.cuh"

#include <algorithm>

namespace mt::kernels::cuda {
namespace {

size_t elementBytes(DType t) { return t == DType::F32 ? 4 : 2; }

/// The workspace, in this order: each row's loss (fp32), the count of
/// counted rows (int64), and for bf16 gradients one chunk of the logits'
/// gradient in bf16 (the bf16 GEMMs' input).
struct HeadLayout {
  size_t rowLoss = 0, count, dLogits16, bytes;
  HeadLayout(const HeadShape &s, DType x, bool grad) {
    size_t rows = size_t(s.ce.batch * s.ce.seq);
    count = alignUp(rows * sizeof(float));
    dLogits16 = count + kWorkspaceAlign;
    bytes = dLogits16;
    if (grad && x == DType::BF16)
      bytes += alignUp(size_t(s.chunkRows * s.ce.vocab) * 2);
  }
};

bool shapeOk(const HeadShape &s) {
  return s.dim > 0 && s.ce.batch > 0 && s.ce.seq > 0 && s.ce.vocab > 0 &&
         s.chunkRows > 0;
}

/// Rows [r0, r0 + n) of x.
const char *rowsOf(Ref x, const HeadShape &s, int64_t r0) {
  return static_cast<const char *>(x.data) +
         size_t(r0 * s.dim) * elementBytes(x.type);
}

/// logits[n, vocab] = x W^T (W [vocab, dim]) or x W, in fp32, for rows
/// [r0, r0 + n) of x.
bool chunkLogits(Ref x, Ref w, const HeadShape &s, int64_t r0, int64_t n,
                 float *logits, const GemmHook &gemm) {
  return gemm({n, s.ce.vocab, s.dim, false, s.outIn, x.type, DType::F32, false,
               rowsOf(x, s, r0), w.data, logits});
}

} // namespace

size_t headWorkspaceBytes(const HeadShape &s, DType x, bool grad) {
  return HeadLayout(s, x, grad).bytes;
}

cudaError_t headCrossEntropy(Ref x, Ref w, const int64_t *labels,
                             const HeadShape &s, float *logits, void *workspace,
                             MutRef loss, const GemmHook &gemm,
                             cudaStream_t stream) {
  if (!shapeOk(s) || w.type != x.type)
    return cudaErrorInvalidValue;
  HeadLayout at(s, x.type, false);
  char *ws = static_cast<char *>(workspace);
  float *rowLoss = reinterpret_cast<float *>(ws + at.rowLoss);
  int64_t rows = s.ce.batch * s.ce.seq;
  for (int64_t r0 = 0; r0 < rows; r0 += s.chunkRows) {
    int64_t n = std::min(s.chunkRows, rows - r0);
    if (!chunkLogits(x, w, s, r0, n, logits, gemm))
      return cudaErrorLaunchFailure;
    if (cudaError_t e = crossEntropyRows({logits, DType::F32}, labels, s.ce, r0,
                                         n, rowLoss, stream))
      return e;
  }
  return crossEntropyLoss(rowLoss, labels, s.ce, loss, stream);
}

cudaError_t headCrossEntropyGrad(Ref x, Ref w, const int64_t *labels, Ref dLoss,
                                 const HeadShape &s, float *logits,
                                 void *workspace, MutRef dx, MutRef dw,
                                 const GemmHook &gemm, cudaStream_t stream) {
  if (!shapeOk(s) || w.type != x.type)
    return cudaErrorInvalidValue;
  HeadLayout at(s, x.type, true);
  char *ws = static_cast<char *>(workspace);
  int64_t *count = reinterpret_cast<int64_t *>(ws + at.count);
  if (cudaError_t e = crossEntropyCount(labels, s.ce, count, stream))
    return e;
  // The logits' gradient: in place in fp32, or to bf16 for bf16 GEMMs.
  MutRef dl = x.type == DType::F32 ? MutRef{logits, DType::F32}
                                   : MutRef{ws + at.dLogits16, DType::BF16};
  int64_t rows = s.ce.batch * s.ce.seq, v = s.ce.vocab;
  for (int64_t r0 = 0; r0 < rows; r0 += s.chunkRows) {
    int64_t n = std::min(s.chunkRows, rows - r0);
    if (!chunkLogits(x, w, s, r0, n, logits, gemm))
      return cudaErrorLaunchFailure;
    if (cudaError_t e = crossEntropyGradRows({logits, DType::F32}, labels, s.ce,
                                             r0, n, dLoss, count, dl, stream))
      return e;
    // dx[n, dim] = dl W (W [vocab, dim]) or dl W^T (W [dim, vocab]).
    char *dxc = static_cast<char *>(dx.data) +
                size_t(r0 * s.dim) * elementBytes(dx.type);
    if (!gemm({n, s.dim, v, false, !s.outIn, x.type, dx.type, false, dl.data,
               w.data, dxc}))
      return cudaErrorLaunchFailure;
    // dw[vocab, dim] (+)= dl^T x, or dw[dim, vocab] (+)= x^T dl: the first
    // chunk overwrites it.
    const char *xc = rowsOf(x, s, r0);
    bool sum = r0 > 0;
    if (!gemm(weightGradGemm(s.dim, v, n, s.outIn, x.type, dw.type, sum, xc,
                             dl.data, dw.data)))
      return cudaErrorLaunchFailure;
  }
  return cudaSuccess;
}

} // namespace mt::kernels::cuda
