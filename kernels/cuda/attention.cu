// Attention, forward and backward, flash style (see kernels.h): a warp owns
// one query row (or, for dK and dV, one key row); the block's warps share
// tiles of 32 keys (queries) staged in shared memory. A lane scores one
// key of the tile, the warp folds the tile into an online softmax, and each
// lane accumulates its share of the head dim in registers. Nothing of size
// seq x seq is ever stored: the backward recomputes the scores from the
// row's log-sum-exp.
//
// The math is fp32 on CUDA cores. The tensor-core version (bf16 mma with
// the same tiling) is the next step once this one has been measured against
// the reference on the GPU machine.
#include "kernels/cuda/common.cuh"

namespace mt::kernels::cuda {
namespace {

constexpr int kRows = 8;  // warps, and so query (key) rows, per block
constexpr int kTile = 32; // keys (queries) per shared tile: one per lane

struct Geometry {
  AttentionShape s;
  bool hasMask;
  __device__ __forceinline__ bool masked(int64_t i, int64_t j) const {
    return (s.causal && j > i) || (s.window > 0 && i - j >= s.window);
  }
  __device__ __forceinline__ int64_t maskAt(int64_t b, int64_t h, int64_t i,
                                            int64_t j) const {
    return (((s.maskBatch > 1 ? b : 0) * s.maskHeads +
             (s.maskHeads > 1 ? h : 0)) *
                s.seq +
            i) *
               s.seq +
           j;
  }
  __device__ __forceinline__ int64_t qAt(int64_t b, int64_t i,
                                         int64_t h) const {
    return (b * s.seq + i) * s.heads * s.headDim + h * s.headDim;
  }
  __device__ __forceinline__ int64_t kvAt(int64_t b, int64_t j,
                                          int64_t g) const {
    return (b * s.seq + j) * s.kvHeads * s.headDim + g * s.headDim;
  }
  __device__ __forceinline__ int64_t statAt(int64_t b, int64_t h,
                                            int64_t i) const {
    return (b * s.heads + h) * s.seq + i;
  }
};

/// The score of query row i (in `qi`, shared) against key row j (in `kj`,
/// shared), -inf when masked.
__device__ __forceinline__ float score(const Geometry &geo, Load mask,
                                       const float *qi, const float *kj,
                                       int64_t b, int64_t h, int64_t i,
                                       int64_t j) {
  if (j >= geo.s.seq || i >= geo.s.seq || geo.masked(i, j))
    return -INFINITY;
  float dot = 0.0f;
  for (int e = 0; e < geo.s.headDim; ++e)
    dot += qi[e] * kj[e];
  float sc = dot * geo.s.scale;
  if (geo.hasMask)
    sc += mask[geo.maskAt(b, h, i, j)];
  return sc;
}

/// Stages rows [first, first + kTile) of a [batch, seq, heads * headDim]
/// tensor's head `head` into tile (row stride ld; rows past seq are 0).
__device__ __forceinline__ void stage(Load x, int64_t rowWidth, int64_t b,
                                      int64_t head, int64_t first,
                                      const AttentionShape &s, float *tile,
                                      int ld) {
  int d = int(s.headDim);
  for (int idx = threadIdx.x; idx < kTile * d; idx += blockDim.x) {
    int r = idx / d, e = idx % d;
    int64_t row = first + r;
    tile[r * ld + e] =
        row < s.seq ? x[(b * s.seq + row) * rowWidth + head * d + e] : 0.0f;
  }
}

/// Forward (stats == false: writes out) or the backward's first pass
/// (stats == true: writes the row's log-sum-exp and dO . O).
template <int kPer>
__global__ void __launch_bounds__(kRows *kWarp)
    forwardKernel(Load q, Load k, Load v, Load mask, Geometry geo, Store out,
                  bool stats, Load dOut, float *lse, float *dsum) {
  const AttentionShape &s = geo.s;
  int d = int(s.headDim), ld = d + 1;
  int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  int64_t b = blockIdx.z, h = blockIdx.y, g = h / (s.heads / s.kvHeads);
  int64_t i0 = int64_t(blockIdx.x) * kRows, i = i0 + warp;
  bool active = i < s.seq;
  extern __shared__ float smem[];
  float *ks = smem, *vs = ks + kTile * ld, *qi = vs + kTile * ld + warp * d;
  for (int e = lane; e < d; e += kWarp)
    qi[e] = active ? q[geo.qAt(b, i, h) + e] : 0.0f;
  float o[kPer];
  for (int t = 0; t < kPer; ++t)
    o[t] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  int64_t last = min(s.seq - 1, i0 + kRows - 1);
  int64_t jEnd = s.causal ? last + 1 : s.seq;
  int64_t jBegin = s.window > 0 ? max(int64_t(0), i0 - s.window + 1) : 0;
  for (int64_t j0 = jBegin; j0 < jEnd; j0 += kTile) {
    __syncthreads(); // the previous tile is consumed
    stage(k, s.kvHeads * d, b, g, j0, s, ks, ld);
    stage(v, s.kvHeads * d, b, g, j0, s, vs, ld);
    __syncthreads();
    if (!active)
      continue;
    float sc = score(geo, mask, qi, ks + lane * ld, b, h, i, j0 + lane);
    float mNew = fmaxf(m, warpMax(sc));
    if (mNew == -INFINITY)
      continue; // the whole tile is masked for this row
    float corr = expf(m - mNew);
    float p = sc == -INFINITY ? 0.0f : expf(sc - mNew);
    l = l * corr + warpSum(p);
    for (int t = 0; t < kPer; ++t)
      o[t] *= corr;
    for (int r = 0; r < kTile; ++r) {
      float pr = __shfl_sync(0xffffffffu, p, r);
      for (int t = 0; t < kPer; ++t) {
        int e = lane + t * kWarp;
        if (e < d)
          o[t] += pr * vs[r * ld + e];
      }
    }
    m = mNew;
  }
  if (!active)
    return;
  float inv = l > 0.0f ? 1.0f / l : 0.0f;
  if (!stats) {
    for (int t = 0; t < kPer; ++t) {
      int e = lane + t * kWarp;
      if (e < d)
        out.set(geo.qAt(b, i, h) + e, o[t] * inv);
    }
    return;
  }
  float dot = 0.0f;
  for (int t = 0; t < kPer; ++t) {
    int e = lane + t * kWarp;
    if (e < d)
      dot += o[t] * inv * dOut[geo.qAt(b, i, h) + e];
  }
  dot = warpSum(dot);
  if (lane == 0) {
    lse[geo.statAt(b, h, i)] = l > 0.0f ? m + logf(l) : -INFINITY;
    dsum[geo.statAt(b, h, i)] = dot;
  }
}

/// dQ by query rows: dS = P (dP - dO . O) scale, dQ = dS K.
template <int kPer>
__global__ void __launch_bounds__(kRows *kWarp)
    dqKernel(Load q, Load k, Load v, Load mask, Geometry geo, Load dOut,
             const float *lse, const float *dsum, Store dq) {
  const AttentionShape &s = geo.s;
  int d = int(s.headDim), ld = d + 1;
  int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  int64_t b = blockIdx.z, h = blockIdx.y, g = h / (s.heads / s.kvHeads);
  int64_t i0 = int64_t(blockIdx.x) * kRows, i = i0 + warp;
  bool active = i < s.seq;
  extern __shared__ float smem[];
  float *ks = smem, *vs = ks + kTile * ld;
  float *qi = vs + kTile * ld + warp * 2 * d, *doi = qi + d;
  for (int e = lane; e < d; e += kWarp) {
    qi[e] = active ? q[geo.qAt(b, i, h) + e] : 0.0f;
    doi[e] = active ? dOut[geo.qAt(b, i, h) + e] : 0.0f;
  }
  float rowLse = active ? lse[geo.statAt(b, h, i)] : -INFINITY;
  float rowDot = active ? dsum[geo.statAt(b, h, i)] : 0.0f;
  float acc[kPer];
  for (int t = 0; t < kPer; ++t)
    acc[t] = 0.0f;
  int64_t last = min(s.seq - 1, i0 + kRows - 1);
  int64_t jEnd = s.causal ? last + 1 : s.seq;
  int64_t jBegin = s.window > 0 ? max(int64_t(0), i0 - s.window + 1) : 0;
  for (int64_t j0 = jBegin; j0 < jEnd; j0 += kTile) {
    __syncthreads();
    stage(k, s.kvHeads * d, b, g, j0, s, ks, ld);
    stage(v, s.kvHeads * d, b, g, j0, s, vs, ld);
    __syncthreads();
    if (!active || rowLse == -INFINITY)
      continue;
    float sc = score(geo, mask, qi, ks + lane * ld, b, h, i, j0 + lane);
    float p = sc == -INFINITY ? 0.0f : expf(sc - rowLse);
    float dp = 0.0f;
    for (int e = 0; e < d; ++e)
      dp += doi[e] * vs[lane * ld + e];
    float ds = p * (dp - rowDot) * s.scale;
    for (int r = 0; r < kTile; ++r) {
      float dr = __shfl_sync(0xffffffffu, ds, r);
      for (int t = 0; t < kPer; ++t) {
        int e = lane + t * kWarp;
        if (e < d)
          acc[t] += dr * ks[r * ld + e];
      }
    }
  }
  if (!active)
    return;
  for (int t = 0; t < kPer; ++t) {
    int e = lane + t * kWarp;
    if (e < d)
      dq.set(geo.qAt(b, i, h) + e, acc[t]);
  }
}

/// dK and dV by key rows of kv head g, over the query heads that read it:
/// dV = P^T dO, dK = dS^T Q.
template <int kPer>
__global__ void __launch_bounds__(kRows *kWarp)
    dkvKernel(Load q, Load k, Load v, Load mask, Geometry geo, Load dOut,
              const float *lse, const float *dsum, Store dk, Store dv) {
  const AttentionShape &s = geo.s;
  int d = int(s.headDim), ld = d + 1;
  int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  int64_t b = blockIdx.z, g = blockIdx.y, group = s.heads / s.kvHeads;
  int64_t j0 = int64_t(blockIdx.x) * kRows, j = j0 + warp;
  bool active = j < s.seq;
  extern __shared__ float smem[];
  float *qs = smem, *dos = qs + kTile * ld;
  float *stat = dos + kTile * ld; // lse [kTile], dsum [kTile]
  float *kj = stat + 2 * kTile + warp * 2 * d, *vj = kj + d;
  for (int e = lane; e < d; e += kWarp) {
    kj[e] = active ? k[geo.kvAt(b, j, g) + e] : 0.0f;
    vj[e] = active ? v[geo.kvAt(b, j, g) + e] : 0.0f;
  }
  float accK[kPer], accV[kPer];
  for (int t = 0; t < kPer; ++t)
    accK[t] = accV[t] = 0.0f;
  int64_t lastJ = min(s.seq - 1, j0 + kRows - 1);
  int64_t iBegin = s.causal ? j0 : 0;
  int64_t iEnd = s.window > 0 ? min(s.seq, lastJ + s.window) : s.seq;
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    for (int64_t i0 = iBegin; i0 < iEnd; i0 += kTile) {
      __syncthreads();
      stage(q, s.heads * d, b, h, i0, s, qs, ld);
      stage(dOut, s.heads * d, b, h, i0, s, dos, ld);
      if (threadIdx.x < kTile) {
        int64_t i = i0 + threadIdx.x;
        stat[threadIdx.x] = i < s.seq ? lse[geo.statAt(b, h, i)] : -INFINITY;
        stat[kTile + threadIdx.x] = i < s.seq ? dsum[geo.statAt(b, h, i)] : 0;
      }
      __syncthreads();
      if (!active)
        continue;
      int64_t i = i0 + lane;
      float rowLse = stat[lane];
      float sc = score(geo, mask, qs + lane * ld, kj, b, h, i, j);
      float p =
          sc == -INFINITY || rowLse == -INFINITY ? 0.0f : expf(sc - rowLse);
      float dp = 0.0f;
      for (int e = 0; e < d; ++e)
        dp += dos[lane * ld + e] * vj[e];
      float ds = p * (dp - stat[kTile + lane]) * s.scale;
      for (int r = 0; r < kTile; ++r) {
        float pr = __shfl_sync(0xffffffffu, p, r);
        float dr = __shfl_sync(0xffffffffu, ds, r);
        for (int t = 0; t < kPer; ++t) {
          int e = lane + t * kWarp;
          if (e < d) {
            accV[t] += pr * dos[r * ld + e];
            accK[t] += dr * qs[r * ld + e];
          }
        }
      }
    }
  }
  if (!active)
    return;
  for (int t = 0; t < kPer; ++t) {
    int e = lane + t * kWarp;
    if (e < d) {
      dk.set(geo.kvAt(b, j, g) + e, accK[t]);
      dv.set(geo.kvAt(b, j, g) + e, accV[t]);
    }
  }
}

/// Shared bytes of each kernel.
size_t forwardSmem(int d) {
  return sizeof(float) * (2 * kTile * (d + 1) + kRows * d);
}
size_t backwardSmem(int d) {
  return sizeof(float) * (2 * kTile * (d + 1) + 2 * kTile + kRows * 2 * d);
}

bool valid(const AttentionShape &s) {
  return s.headDim > 0 && s.headDim <= kMaxHeadDim && s.kvHeads > 0 &&
         s.heads % s.kvHeads == 0 && s.batch <= 65535 && s.heads <= 65535;
}

/// Calls fn.template operator()<kPer>() for the head dim's registers per
/// lane.
template <typename Fn> cudaError_t byHeadDim(int64_t d, Fn fn) {
  if (d <= 32)
    return fn(std::integral_constant<int, 1>());
  if (d <= 64)
    return fn(std::integral_constant<int, 2>());
  if (d <= 128)
    return fn(std::integral_constant<int, 4>());
  return fn(std::integral_constant<int, 8>());
}

template <typename Kernel, typename... Args>
cudaError_t launch(Kernel kernel, dim3 grid, size_t smem, cudaStream_t stream,
                   Args... args) {
  if (cudaError_t e = cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)))
    return e;
  kernel<<<grid, kRows * kWarp, smem, stream>>>(args...);
  return cudaGetLastError();
}

} // namespace

cudaError_t attention(Ref q, Ref k, Ref v, Ref mask, const AttentionShape &s,
                      MutRef out, cudaStream_t stream) {
  if (!valid(s))
    return cudaErrorInvalidValue;
  Geometry geo{s, mask.data != nullptr};
  dim3 grid(unsigned((s.seq + kRows - 1) / kRows), unsigned(s.heads),
            unsigned(s.batch));
  return byHeadDim(s.headDim, [&](auto per) {
    return launch(forwardKernel<decltype(per)::value>, grid,
                  forwardSmem(int(s.headDim)), stream, load(q), load(k),
                  load(v), load(mask), geo, store(out), false, Load{},
                  static_cast<float *>(nullptr), static_cast<float *>(nullptr));
  });
}

size_t attentionGradWorkspaceBytes(const AttentionShape &s) {
  return 2 * size_t(s.batch * s.heads * s.seq) * sizeof(float);
}

cudaError_t attentionGrad(Ref q, Ref k, Ref v, Ref mask, Ref dOut,
                          const AttentionShape &s, MutRef dq, MutRef dk,
                          MutRef dv, void *workspace, cudaStream_t stream) {
  if (!valid(s))
    return cudaErrorInvalidValue;
  Geometry geo{s, mask.data != nullptr};
  float *lse = static_cast<float *>(workspace);
  float *dsum = lse + s.batch * s.heads * s.seq;
  unsigned rowBlocks = unsigned((s.seq + kRows - 1) / kRows);
  int d = int(s.headDim);
  return byHeadDim(s.headDim, [&](auto per) -> cudaError_t {
    constexpr int kPer = decltype(per)::value;
    dim3 byQuery(rowBlocks, unsigned(s.heads), unsigned(s.batch));
    if (cudaError_t e = launch(forwardKernel<kPer>, byQuery, forwardSmem(d),
                               stream, load(q), load(k), load(v), load(mask),
                               geo, Store{}, true, load(dOut), lse, dsum))
      return e;
    if (cudaError_t e = launch(dqKernel<kPer>, byQuery, backwardSmem(d), stream,
                               load(q), load(k), load(v), load(mask), geo,
                               load(dOut), static_cast<const float *>(lse),
                               static_cast<const float *>(dsum), store(dq)))
      return e;
    dim3 byKey(rowBlocks, unsigned(s.kvHeads), unsigned(s.batch));
    return launch(dkvKernel<kPer>, byKey, backwardSmem(d), stream, load(q),
                  load(k), load(v), load(mask), geo, load(dOut),
                  static_cast<const float *>(lse),
                  static_cast<const float *>(dsum), store(dk), store(dv));
  });
}

} // namespace mt::kernels::cuda
