// Cross-entropy over rows of logits (see kernels.h): a block per row for
// the log-sum-exp (max, then the sum of exponentials), the mean over
// counted rows in one block in double, so that the loss does not depend on
// the launch shape.
#include "kernels/cuda/common.cuh"

namespace mt::kernels::cuda {
namespace {

constexpr int kRowThreads = 512;

__device__ __forceinline__ int64_t targetOf(const int64_t *labels,
                                            const CrossEntropyShape &s,
                                            int64_t t) {
  if (!s.shift)
    return labels[t];
  return t % s.seq == s.seq - 1 ? s.ignoreIndex : labels[t + 1];
}

/// The log-sum-exp of row (every thread gets it).
__device__ __forceinline__ float rowLogSumExp(Load x, int64_t base,
                                              int64_t vocab, float *scratch) {
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x)
    m = fmaxf(m, x[base + c]);
  m = blockMax(m, scratch);
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x)
    sum += expf(x[base + c] - m);
  return m + logf(blockSum(sum, scratch));
}

__global__ void rowsKernel(Load logits, const int64_t *labels,
                           CrossEntropyShape s, int64_t row0, int64_t rows,
                           float *rowLoss) {
  __shared__ float scratch[kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t target = targetOf(labels, s, row0 + r);
    if (target == s.ignoreIndex || target < 0 || target >= s.vocab) {
      if (threadIdx.x == 0)
        rowLoss[row0 + r] = 0.0f;
      continue;
    }
    float lse = rowLogSumExp(logits, r * s.vocab, s.vocab, scratch);
    if (threadIdx.x == 0)
      rowLoss[row0 + r] = lse - logits[r * s.vocab + target];
  }
}

__global__ void countKernel(const int64_t *labels, CrossEntropyShape s,
                            int64_t *count) {
  __shared__ int64_t counts[kRowThreads];
  int64_t n = 0;
  for (int64_t t = threadIdx.x; t < s.batch * s.seq; t += blockDim.x)
    n += targetOf(labels, s, t) != s.ignoreIndex;
  counts[threadIdx.x] = n;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half)
      counts[threadIdx.x] += counts[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    *count = counts[0];
}

__global__ void lossKernel(const float *rowLoss, const int64_t *labels,
                           CrossEntropyShape s, Store loss) {
  __shared__ double sums[kRowThreads];
  __shared__ int64_t counts[kRowThreads];
  double total = 0.0;
  int64_t n = 0;
  for (int64_t t = threadIdx.x; t < s.batch * s.seq; t += blockDim.x)
    if (targetOf(labels, s, t) != s.ignoreIndex) {
      total += rowLoss[t];
      ++n;
    }
  sums[threadIdx.x] = total;
  counts[threadIdx.x] = n;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      sums[threadIdx.x] += sums[threadIdx.x + half];
      counts[threadIdx.x] += counts[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0)
    loss.set(0, counts[0] ? float(sums[0] / double(counts[0])) : NAN);
}

__global__ void gradRowsKernel(Load logits, const int64_t *labels,
                               CrossEntropyShape s, int64_t row0, int64_t rows,
                               Load dLoss, const int64_t *count,
                               Store dLogits) {
  __shared__ float scratch[kWarp];
  float scale = *count ? dLoss[0] / float(*count) : 0.0f;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t target = targetOf(labels, s, row0 + r), base = r * s.vocab;
    if (target == s.ignoreIndex) {
      for (int64_t c = threadIdx.x; c < s.vocab; c += blockDim.x)
        dLogits.set(base + c, 0.0f);
      continue;
    }
    float lse = rowLogSumExp(logits, base, s.vocab, scratch);
    // Each element is read and then written by the same thread: in place
    // is safe.
    for (int64_t c = threadIdx.x; c < s.vocab; c += blockDim.x)
      dLogits.set(base + c,
                  (expf(logits[base + c] - lse) - (c == target)) * scale);
  }
}

/// The shape, and rows [row0, row0 + rows) of its batch * seq.
bool valid(const CrossEntropyShape &s, int64_t row0 = 0, int64_t rows = 0) {
  return s.batch > 0 && s.seq > 0 && s.vocab > 0 && row0 >= 0 && rows >= 0 &&
         row0 + rows <= s.batch * s.seq;
}

unsigned rowBlocks(int64_t rows) {
  return unsigned(rows < 65535 * 4 ? (rows < 1 ? 1 : rows) : 65535 * 4);
}

} // namespace

cudaError_t crossEntropyRows(Ref logits, const int64_t *labels,
                             const CrossEntropyShape &s, int64_t row0,
                             int64_t rows, float *rowLoss,
                             cudaStream_t stream) {
  if (!valid(s, row0, rows) || !labels || !rowLoss)
    return cudaErrorInvalidValue;
  rowsKernel<<<rowBlocks(rows), kRowThreads, 0, stream>>>(
      load(logits), labels, s, row0, rows, rowLoss);
  return cudaGetLastError();
}

cudaError_t crossEntropyLoss(const float *rowLoss, const int64_t *labels,
                             const CrossEntropyShape &s, MutRef loss,
                             cudaStream_t stream) {
  if (!valid(s) || !rowLoss || !labels)
    return cudaErrorInvalidValue;
  lossKernel<<<1, kRowThreads, 0, stream>>>(rowLoss, labels, s, store(loss));
  return cudaGetLastError();
}

cudaError_t crossEntropyCount(const int64_t *labels, const CrossEntropyShape &s,
                              int64_t *count, cudaStream_t stream) {
  if (!valid(s) || !labels || !count)
    return cudaErrorInvalidValue;
  countKernel<<<1, kRowThreads, 0, stream>>>(labels, s, count);
  return cudaGetLastError();
}

cudaError_t crossEntropyGradRows(Ref logits, const int64_t *labels,
                                 const CrossEntropyShape &s, int64_t row0,
                                 int64_t rows, Ref dLoss, const int64_t *count,
                                 MutRef dLogits, cudaStream_t stream) {
  if (!valid(s, row0, rows) || !labels || !count)
    return cudaErrorInvalidValue;
  gradRowsKernel<<<rowBlocks(rows), kRowThreads, 0, stream>>>(
      load(logits), labels, s, row0, rows, load(dLoss), count, store(dLogits));
  return cudaGetLastError();
}

} // namespace mt::kernels::cuda
