// Device-side helpers of the CUDA kernels: typed loads and stores of fp32 or
// bf16 storage (the type is uniform across a launch, so the branch costs
// nothing after the first iteration), warp and block reductions, and launch
// shapes.
#ifndef MT_KERNELS_CUDA_COMMON_CUH
#define MT_KERNELS_CUDA_COMMON_CUH

#include "kernels/cuda/kernels.h"

#include <cuda_bf16.h>

namespace mt::kernels::cuda {

struct Load {
  const void *p;
  DType t;
  __device__ __forceinline__ float operator[](int64_t i) const {
    return t == DType::F32
               ? static_cast<const float *>(p)[i]
               : __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
  }
};
inline Load load(Ref r) { return {r.data, r.type}; }

struct Store {
  void *p;
  DType t;
  __device__ __forceinline__ void set(int64_t i, float v) const {
    if (t == DType::F32)
      static_cast<float *>(p)[i] = v;
    else
      static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v);
  }
};
inline Store store(MutRef r) { return {r.data, r.type}; }

constexpr int kWarp = 32;

__device__ __forceinline__ float warpSum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warpMax(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// The sum over a block of up to 1024 threads, returned to every thread.
/// `scratch` holds 32 floats of shared memory.
__device__ __forceinline__ float blockSum(float v, float *scratch) {
  int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  int warps = (blockDim.x + kWarp - 1) / kWarp;
  v = warpSum(v);
  __syncthreads(); // scratch may still be read by a previous call
  if (lane == 0)
    scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return warpSum(v);
}
__device__ __forceinline__ float blockMax(float v, float *scratch) {
  int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  int warps = (blockDim.x + kWarp - 1) / kWarp;
  v = warpMax(v);
  __syncthreads();
  if (lane == 0)
    scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  return warpMax(v);
}

/// The parts of a workspace start on 256 bytes (cudaMalloc's alignment).
constexpr size_t kWorkspaceAlign = 256;
inline size_t alignUp(size_t n) {
  return (n + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

/// Blocks of 256 threads for n elements, grid-stride beyond 65535 * 8
/// blocks' worth.
constexpr int kThreads = 256;
inline unsigned blocksFor(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

#define MT_GRID_STRIDE(i, n)                                                   \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);    \
       i += int64_t(gridDim.x) * blockDim.x)

/// The grouping of ids by the place they name in [0, places) (the
/// embedding, gather and expert gradients, the expert linears): stably, so
/// that each place's ids stay in their order. Its device workspace
/// (groupingBytes) holds, among the sort's own, the places' starts
/// [places + 1] and the ids' order [count] (ints) that groupIds points
/// `starts` and `order` at. With `wrap` a negative id counts from the end;
/// an id outside sets *bad (when not null) and is in no place.
cudaError_t groupingBytes(int64_t places, int64_t count, size_t &bytes);
cudaError_t groupIds(const int64_t *ids, int64_t count, int64_t places,
                     bool wrap, int *bad, void *workspace, const int *&starts,
                     const int *&order, cudaStream_t stream);

} // namespace mt::kernels::cuda

#endif // MT_KERNELS_CUDA_COMMON_CUH
