// RMSNorm and LayerNorm, forward and backward (see kernels.h). A block per
// row (grid-stride over rows); the backward's weight gradient is summed per
// block into its own row of the workspace, then over blocks, so that no
// two threads ever add to the same place.
#include "kernels/cuda/common.cuh"

namespace mt::kernels::cuda {
namespace {

constexpr int kNormThreads = 256;
constexpr int64_t kGradBlocks = 256; // partial sums of dw

int64_t gradBlocks(int64_t rows) {
  return rows < kGradBlocks ? (rows < 1 ? 1 : rows) : kGradBlocks;
}

__device__ __forceinline__ float scaleOf(Load w, int64_t c, bool plusOne) {
  return plusOne ? 1.0f + w[c] : w[c];
}

__global__ void rmsNormKernel(Load x, Load w, int64_t rows, int64_t dim,
                              float eps, bool plusOne, Store y) {
  __shared__ float scratch[kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t base = r * dim;
    float sq = 0.0f;
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
      float v = x[base + c];
      sq += v * v;
    }
    float inv = rsqrtf(blockSum(sq, scratch) / float(dim) + eps);
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
      y.set(base + c, x[base + c] * inv * scaleOf(w, c, plusOne));
  }
}

__global__ void rmsNormGradKernel(Load x, Load w, Load dy, int64_t rows,
                                  int64_t dim, float eps, bool plusOne,
                                  Store dx, float *partial) {
  __shared__ float scratch[kWarp];
  float *mine = partial + int64_t(blockIdx.x) * dim;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
    mine[c] = 0.0f;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t base = r * dim;
    float sq = 0.0f, dot = 0.0f;
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
      float v = x[base + c];
      sq += v * v;
      dot += dy[base + c] * scaleOf(w, c, plusOne) * v;
    }
    float inv = rsqrtf(blockSum(sq, scratch) / float(dim) + eps);
    dot = blockSum(dot, scratch);
    float k = inv * inv * inv * dot / float(dim);
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
      float v = x[base + c], d = dy[base + c];
      dx.set(base + c, inv * d * scaleOf(w, c, plusOne) - v * k);
      mine[c] += d * v * inv;
    }
  }
}

/// The mean and 1 / sqrt(var + eps) of row `base` (every thread gets them).
__device__ __forceinline__ void meanAndInvStd(Load x, int64_t base, int64_t dim,
                                              float eps, float *scratch,
                                              float &mean, float &inv) {
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
    sum += x[base + c];
  mean = blockSum(sum, scratch) / float(dim);
  float sq = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    float v = x[base + c] - mean;
    sq += v * v;
  }
  inv = rsqrtf(blockSum(sq, scratch) / float(dim) + eps);
}

__global__ void layerNormKernel(Load x, Load w, Load b, bool hasBias,
                                int64_t rows, int64_t dim, float eps, Store y) {
  __shared__ float scratch[kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t base = r * dim;
    float mean, inv;
    meanAndInvStd(x, base, dim, eps, scratch, mean, inv);
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
      y.set(base + c,
            (x[base + c] - mean) * inv * w[c] + (hasBias ? b[c] : 0.0f));
  }
}

__global__ void layerNormGradKernel(Load x, Load w, Load dy, int64_t rows,
                                    int64_t dim, float eps, Store dx,
                                    float *partial) {
  __shared__ float scratch[kWarp];
  float *mine = partial + int64_t(blockIdx.x) * dim;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
    mine[c] = 0.0f;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t base = r * dim;
    float mean, inv;
    meanAndInvStd(x, base, dim, eps, scratch, mean, inv);
    float sumG = 0.0f, sumGX = 0.0f;
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
      float xhat = (x[base + c] - mean) * inv, d = dy[base + c];
      float g = d * w[c];
      sumG += g;
      sumGX += g * xhat;
      mine[c] += d * xhat;
    }
    sumG = blockSum(sumG, scratch) / float(dim);
    sumGX = blockSum(sumGX, scratch) / float(dim);
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
      float xhat = (x[base + c] - mean) * inv;
      dx.set(base + c, inv * (dy[base + c] * w[c] - sumG - xhat * sumGX));
    }
  }
}

/// dw[c] = the sum over blocks of partial[block][c].
__global__ void sumPartialsKernel(const float *partial, int64_t blocks,
                                  int64_t dim, Store dw) {
  MT_GRID_STRIDE(c, dim) {
    float acc = 0.0f;
    for (int64_t b = 0; b < blocks; ++b)
      acc += partial[b * dim + c];
    dw.set(c, acc);
  }
}

unsigned rowBlocks(int64_t rows) {
  return unsigned(rows < 65535 * 4 ? (rows < 1 ? 1 : rows) : 65535 * 4);
}

} // namespace

cudaError_t rmsNorm(Ref x, Ref w, int64_t rows, int64_t dim, float eps,
                    bool plusOne, MutRef y, cudaStream_t stream) {
  if (rows < 0 || dim <= 0)
    return cudaErrorInvalidValue;
  rmsNormKernel<<<rowBlocks(rows), kNormThreads, 0, stream>>>(
      load(x), load(w), rows, dim, eps, plusOne, store(y));
  return cudaGetLastError();
}

cudaError_t layerNorm(Ref x, Ref w, Ref b, int64_t rows, int64_t dim, float eps,
                      MutRef y, cudaStream_t stream) {
  if (rows < 0 || dim <= 0)
    return cudaErrorInvalidValue;
  layerNormKernel<<<rowBlocks(rows), kNormThreads, 0, stream>>>(
      load(x), load(w), load(b), b.data != nullptr, rows, dim, eps, store(y));
  return cudaGetLastError();
}

size_t normGradWorkspaceBytes(int64_t rows, int64_t dim) {
  return size_t(gradBlocks(rows)) * size_t(dim) * sizeof(float);
}

cudaError_t rmsNormGrad(Ref x, Ref w, Ref dy, int64_t rows, int64_t dim,
                        float eps, bool plusOne, MutRef dx, MutRef dw,
                        void *workspace, cudaStream_t stream) {
  if (rows < 0 || dim <= 0 || !workspace)
    return cudaErrorInvalidValue;
  float *partial = static_cast<float *>(workspace);
  int64_t blocks = gradBlocks(rows);
  rmsNormGradKernel<<<unsigned(blocks), kNormThreads, 0, stream>>>(
      load(x), load(w), load(dy), rows, dim, eps, plusOne, store(dx), partial);
  sumPartialsKernel<<<blocksFor(dim), kThreads, 0, stream>>>(partial, blocks,
                                                             dim, store(dw));
  return cudaGetLastError();
}

cudaError_t layerNormGrad(Ref x, Ref w, Ref dy, int64_t rows, int64_t dim,
                          float eps, MutRef dx, MutRef dw, void *workspace,
                          cudaStream_t stream) {
  if (rows < 0 || dim <= 0 || !workspace)
    return cudaErrorInvalidValue;
  float *partial = static_cast<float *>(workspace);
  int64_t blocks = gradBlocks(rows);
  layerNormGradKernel<<<unsigned(blocks), kNormThreads, 0, stream>>>(
      load(x), load(w), load(dy), rows, dim, eps, store(dx), partial);
  sumPartialsKernel<<<blocksFor(dim), kThreads, 0, stream>>>(partial, blocks,
                                                             dim, store(dw));
  return cudaGetLastError();
}

} // namespace mt::kernels::cuda
