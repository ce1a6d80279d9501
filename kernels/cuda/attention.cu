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

#include <mma.h>

#include <cstdlib>
#include <initializer_list>
#include <string>

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
  /// The score of the product q . k: scaled, then softcapped (c tanh(x / c))
  /// when the shape asks; `slope` gets the cap's derivative, which the
  /// backward multiplies into dS (1 without a cap).
  __device__ __forceinline__ float logit(float dot, float &slope) const {
    float x = dot * s.scale;
    slope = 1.0f;
    if (s.softcap > 0.0f) {
      float t = tanhf(x / s.softcap);
      slope = 1.0f - t * t;
      x = s.softcap * t;
    }
    return x;
  }
};

/// The score of query row i (in `qi`, shared) against key row j (in `kj`,
/// shared), -inf when masked; `slope` as Geometry::logit's.
__device__ __forceinline__ float score(const Geometry &geo, Load mask,
                                       const float *qi, const float *kj,
                                       int64_t b, int64_t h, int64_t i,
                                       int64_t j, float &slope) {
  slope = 1.0f;
  if (j >= geo.s.seq || i >= geo.s.seq || geo.masked(i, j))
    return -INFINITY;
  float dot = 0.0f;
  for (int e = 0; e < geo.s.headDim; ++e)
    dot += qi[e] * kj[e];
  float sc = geo.logit(dot, slope);
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
    float slope;
    float sc = score(geo, mask, qi, ks + lane * ld, b, h, i, j0 + lane, slope);
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

/// dQ by query rows: dS = P (dP - dO . O) cap' scale, dQ = dS K.
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
    float slope;
    float sc = score(geo, mask, qi, ks + lane * ld, b, h, i, j0 + lane, slope);
    float p = sc == -INFINITY ? 0.0f : expf(sc - rowLse);
    float dp = 0.0f;
    for (int e = 0; e < d; ++e)
      dp += doi[e] * vs[lane * ld + e];
    float ds = p * (dp - rowDot) * s.scale * slope;
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
      float slope;
      float sc = score(geo, mask, qs + lane * ld, kj, b, h, i, j, slope);
      float p =
          sc == -INFINITY || rowLse == -INFINITY ? 0.0f : expf(sc - rowLse);
      float dp = 0.0f;
      for (int e = 0; e < d; ++e)
        dp += dos[lane * ld + e] * vj[e];
      float ds = p * (dp - stat[kTile + lane]) * s.scale * slope;
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

/// Launches `kernel` with `smem` bytes of dynamic shared memory (allowed
/// above the default 48 KiB first).
template <typename Kernel, typename... Args>
cudaError_t launch(Kernel kernel, dim3 grid, int threads, size_t smem,
                   cudaStream_t stream, Args... args) {
  // Nothing to compute (a batch, heads or rows of 0): a grid of no blocks
  // is not a launch CUDA accepts.
  if (grid.x == 0 || grid.y == 0 || grid.z == 0)
    return cudaSuccess;
  if (cudaError_t e = cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)))
    return e;
  kernel<<<grid, threads, smem, stream>>>(args...);
  return cudaGetLastError();
}

// ---------------------------------------------------------------------------
// Tensor-core attention for bf16 storage (head dims 16, 32, 64 and 128): the
// same algorithm on tiles of 64 queries x 64 keys, the products on WMMA
// (bf16 in, fp32 accumulate), the softmax on the scores staged in shared
// memory. A warp owns 16 rows of every tile, so between a warp's products
// and its softmax only the warp synchronises; the block synchronises to
// stage the shared tiles. P and dS are rounded to bf16 for their products,
// as flash attention does.

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

constexpr int kTcWarps = 4;
constexpr int kTcTile = 64; // queries and keys per tile: 16 rows per warp

/// Leading dims (elements) of the shared tiles: padded against bank
/// conflicts, multiples of 8 (bf16) and 4 (fp32) as WMMA requires.
template <int D> struct TcDims {
  static constexpr int ldh = D + 8;                          // bf16 [64][D]
  static constexpr int ldf = D + 4;                          // fp32 [64][D]
  static constexpr int lds = kTcTile + 4;                    // fp32 [64][64]
  static constexpr int ldp = kTcTile + 8;                    // bf16 [64][64]
  static constexpr size_t tileH = size_t(kTcTile) * ldh * 2; // bytes
  static constexpr size_t tileF = size_t(kTcTile) * ldf * 4;
  static constexpr size_t tileS = size_t(kTcTile) * lds * 4;
  static constexpr size_t tileP = size_t(kTcTile) * ldp * 2;
  static constexpr size_t stats = 3 * kTcTile * 4;
  static constexpr size_t forward =
      3 * tileH + tileP + tileS + 2 * tileF + stats;
  static constexpr size_t backward =
      4 * tileH + 2 * tileP + 2 * tileS + tileF + stats;
};

/// The backward kernels' shared memory: four bf16 [64][D] tiles, two bf16
/// [64][64] ones, two fp32 [64][64] ones, an fp32 [64][D] one for the
/// results, and two rows of 64 statistics.
template <int D> struct BackwardTiles {
  bf16 *h[4], *p[2];
  float *s[2], *out, *stats[2];
  __device__ explicit BackwardTiles(unsigned char *base) {
    using L = TcDims<D>;
    for (int i = 0; i < 4; ++i)
      h[i] = reinterpret_cast<bf16 *>(base + i * L::tileH);
    for (int i = 0; i < 2; ++i)
      p[i] = reinterpret_cast<bf16 *>(base + 4 * L::tileH + i * L::tileP);
    float *f = reinterpret_cast<float *>(base + 4 * L::tileH + 2 * L::tileP);
    s[0] = f;
    s[1] = f + kTcTile * L::lds;
    out = s[1] + kTcTile * L::lds;
    stats[0] = out + kTcTile * L::ldf;
    stats[1] = stats[0] + kTcTile;
  }
};

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBRow =
    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBCol =
    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/// rows [first, first + 64) of head `head` of a [batch, seq, width] bf16
/// tensor into a shared tile (zeros past seq): 16 bytes (8 values) a load
/// where the tensor's rows allow (a 16-byte aligned base; every D and the
/// tile's ldh are multiples of 8), else a value a load.
template <int D>
__device__ __forceinline__ void stageTc(const bf16 *x, int64_t width, int64_t b,
                                        int64_t head, int64_t first,
                                        int64_t seq, bf16 *tile) {
  constexpr int kVec = 8, kVecs = D / kVec;
  static_assert(D % kVec == 0 && TcDims<D>::ldh % kVec == 0,
                "16-byte rows in the tensor and the tile");
  // The same for every thread of the block: no divergence.
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0 && width % kVec == 0) {
    for (int idx = threadIdx.x; idx < kTcTile * kVecs; idx += blockDim.x) {
      int r = idx / kVecs, e = idx % kVecs * kVec;
      int64_t row = first + r;
      uint4 v = make_uint4(0, 0, 0, 0); // bf16 zeros past seq
      if (row < seq)
        v = *reinterpret_cast<const uint4 *>(x + (b * seq + row) * width +
                                             head * D + e);
      *reinterpret_cast<uint4 *>(tile + r * TcDims<D>::ldh + e) = v;
    }
    return;
  }
  for (int idx = threadIdx.x; idx < kTcTile * D; idx += blockDim.x) {
    int r = idx / D, e = idx % D;
    int64_t row = first + r;
    tile[r * TcDims<D>::ldh + e] =
        row < seq ? x[(b * seq + row) * width + head * D + e]
                  : __float2bfloat16_rn(0.0f);
  }
}

/// out[16 x 64] (fp32, ld lds) = A[16 x D] B[64 x D]^T for this warp's 16
/// rows of `a` and all 64 rows of `b` (both bf16, ld ldh).
template <int D>
__device__ __forceinline__ void productNT(const bf16 *a, const bf16 *b,
                                          float *out) {
  constexpr int ldh = TcDims<D>::ldh, lds = TcDims<D>::lds;
  for (int n = 0; n < kTcTile / 16; ++n) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < D / 16; ++kk) {
      FragA fa;
      FragBCol fb;
      wmma::load_matrix_sync(fa, a + 16 * kk, ldh);
      wmma::load_matrix_sync(fb, b + 16 * n * ldh + 16 * kk, ldh);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + 16 * n, acc, lds, wmma::mem_row_major);
  }
}

/// acc[n] += P[16 x 64] (bf16, ld ldp) X[64 x D] (bf16, ld ldh).
template <int D>
__device__ __forceinline__ void productPN(const bf16 *p, const bf16 *x,
                                          FragC *acc) {
  constexpr int ldh = TcDims<D>::ldh, ldp = TcDims<D>::ldp;
  for (int n = 0; n < D / 16; ++n)
    for (int kk = 0; kk < kTcTile / 16; ++kk) {
      FragA fa;
      FragBRow fb;
      wmma::load_matrix_sync(fa, p + 16 * kk, ldp);
      wmma::load_matrix_sync(fb, x + 16 * kk * ldh + 16 * n, ldh);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
}

/// Writes this warp's 16 rows of `acc` (via `stage`, fp32 ld ldf) to rows
/// first + 16 * warp + r of head `head` of a [batch, seq, width] tensor.
template <int D>
__device__ __forceinline__ void
writeRows(FragC *acc, float *stage, int64_t first, int64_t b, int64_t head,
          int64_t width, int64_t seq, Store out) {
  constexpr int ldf = TcDims<D>::ldf;
  int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float *mine = stage + 16 * warp * ldf;
  for (int n = 0; n < D / 16; ++n)
    wmma::store_matrix_sync(mine + 16 * n, acc[n], ldf, wmma::mem_row_major);
  __syncwarp();
  for (int r = 0; r < 16; ++r) {
    int64_t row = first + 16 * warp + r;
    if (row >= seq)
      continue;
    for (int e = lane; e < D; e += kWarp)
      out.set((b * seq + row) * width + head * D + e, mine[r * ldf + e]);
  }
  __syncwarp();
}

template <int D>
__global__ void __launch_bounds__(kTcWarps *kWarp)
    tcForwardKernel(const bf16 *q, const bf16 *k, const bf16 *v, Load mask,
                    Geometry geo, Store out, bool stats, Load dOut, float *lse,
                    float *dsum) {
  using L = TcDims<D>;
  const AttentionShape &s = geo.s;
  extern __shared__ __align__(128) unsigned char tcSmem[];
  bf16 *qs = reinterpret_cast<bf16 *>(tcSmem);
  bf16 *ks = reinterpret_cast<bf16 *>(tcSmem + L::tileH);
  bf16 *vs = reinterpret_cast<bf16 *>(tcSmem + 2 * L::tileH);
  bf16 *ps = reinterpret_cast<bf16 *>(tcSmem + 3 * L::tileH);
  float *ss = reinterpret_cast<float *>(tcSmem + 3 * L::tileH + L::tileP);
  float *os =
      reinterpret_cast<float *>(tcSmem + 3 * L::tileH + L::tileP + L::tileS);
  float *pv = os + kTcTile * L::ldf;
  float *rowM = pv + kTcTile * L::ldf, *rowL = rowM + kTcTile,
        *rowC = rowL + kTcTile;
  int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  int64_t b = blockIdx.z, h = blockIdx.y, g = h / (s.heads / s.kvHeads);
  int64_t i0 = int64_t(blockIdx.x) * kTcTile;
  stageTc<D>(q, s.heads * D, b, h, i0, s.seq, qs);
  for (int idx = threadIdx.x; idx < kTcTile * D; idx += blockDim.x)
    os[(idx / D) * L::ldf + idx % D] = 0.0f;
  if (threadIdx.x < kTcTile) {
    rowM[threadIdx.x] = -INFINITY;
    rowL[threadIdx.x] = 0.0f;
  }
  int64_t last = min(s.seq - 1, i0 + kTcTile - 1);
  int64_t jEnd = s.causal ? last + 1 : s.seq;
  int64_t jBegin = s.window > 0 ? max(int64_t(0), i0 - s.window + 1) : 0;
  const bf16 *qw = qs + 16 * warp * L::ldh;
  for (int64_t j0 = jBegin; j0 < jEnd; j0 += kTcTile) {
    __syncthreads(); // the previous tiles are consumed
    stageTc<D>(k, s.kvHeads * D, b, g, j0, s.seq, ks);
    stageTc<D>(v, s.kvHeads * D, b, g, j0, s.seq, vs);
    __syncthreads();
    productNT<D>(qw, ks, ss + 16 * warp * L::lds);
    __syncwarp();
    for (int r = 0; r < 16; ++r) {
      int row = 16 * warp + r;
      int64_t i = i0 + row;
      float x[2];
      for (int t = 0; t < 2; ++t) {
        int c = lane + t * kWarp;
        int64_t j = j0 + c;
        x[t] = -INFINITY;
        if (i < s.seq && j < s.seq && !geo.masked(i, j)) {
          float slope;
          x[t] = geo.logit(ss[row * L::lds + c], slope);
          if (geo.hasMask)
            x[t] += mask[geo.maskAt(b, h, i, j)];
        }
      }
      float mOld = rowM[row];
      float mNew = fmaxf(mOld, warpMax(fmaxf(x[0], x[1])));
      float corr = mNew == -INFINITY ? 1.0f : expf(mOld - mNew);
      float p0 = x[0] == -INFINITY ? 0.0f : expf(x[0] - mNew);
      float p1 = x[1] == -INFINITY ? 0.0f : expf(x[1] - mNew);
      float sum = warpSum(p0 + p1);
      ps[row * L::ldp + lane] = __float2bfloat16_rn(p0);
      ps[row * L::ldp + lane + kWarp] = __float2bfloat16_rn(p1);
      if (lane == 0) {
        rowM[row] = mNew;
        rowL[row] = rowL[row] * corr + sum;
        rowC[row] = corr;
      }
    }
    __syncwarp();
    FragC acc[D / 16];
    for (int n = 0; n < D / 16; ++n)
      wmma::fill_fragment(acc[n], 0.0f);
    productPN<D>(ps + 16 * warp * L::ldp, vs, acc);
    for (int n = 0; n < D / 16; ++n)
      wmma::store_matrix_sync(pv + 16 * warp * L::ldf + 16 * n, acc[n], L::ldf,
                              wmma::mem_row_major);
    __syncwarp();
    for (int r = 0; r < 16; ++r) {
      int row = 16 * warp + r;
      float c = rowC[row];
      for (int e = lane; e < D; e += kWarp)
        os[row * L::ldf + e] = os[row * L::ldf + e] * c + pv[row * L::ldf + e];
    }
    __syncwarp();
  }
  for (int r = 0; r < 16; ++r) {
    int row = 16 * warp + r;
    int64_t i = i0 + row;
    if (i >= s.seq)
      continue;
    float l = rowL[row], inv = l > 0.0f ? 1.0f / l : 0.0f;
    if (!stats) {
      for (int e = lane; e < D; e += kWarp)
        out.set(geo.qAt(b, i, h) + e, os[row * L::ldf + e] * inv);
      continue;
    }
    float dot = 0.0f;
    for (int e = lane; e < D; e += kWarp)
      dot += os[row * L::ldf + e] * inv * dOut[geo.qAt(b, i, h) + e];
    dot = warpSum(dot);
    if (lane == 0) {
      lse[geo.statAt(b, h, i)] = l > 0.0f ? rowM[row] + logf(l) : -INFINITY;
      dsum[geo.statAt(b, h, i)] = dot;
    }
  }
}

template <int D>
__global__ void __launch_bounds__(kTcWarps *kWarp)
    tcDqKernel(const bf16 *q, const bf16 *k, const bf16 *v, Load mask,
               Geometry geo, const bf16 *dOut, const float *lse,
               const float *dsum, Store dq) {
  using L = TcDims<D>;
  const AttentionShape &s = geo.s;
  extern __shared__ __align__(128) unsigned char tcSmem[];
  BackwardTiles<D> tiles(tcSmem);
  bf16 *qs = tiles.h[0], *dos = tiles.h[1], *ks = tiles.h[2], *vs = tiles.h[3];
  bf16 *dsh = tiles.p[0];
  float *ss = tiles.s[0], *dps = tiles.s[1], *outf = tiles.out;
  float *rowLse = tiles.stats[0], *rowDot = tiles.stats[1];
  int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  int64_t b = blockIdx.z, h = blockIdx.y, g = h / (s.heads / s.kvHeads);
  int64_t i0 = int64_t(blockIdx.x) * kTcTile;
  stageTc<D>(q, s.heads * D, b, h, i0, s.seq, qs);
  stageTc<D>(dOut, s.heads * D, b, h, i0, s.seq, dos);
  if (threadIdx.x < kTcTile) {
    int64_t i = i0 + threadIdx.x;
    rowLse[threadIdx.x] = i < s.seq ? lse[geo.statAt(b, h, i)] : -INFINITY;
    rowDot[threadIdx.x] = i < s.seq ? dsum[geo.statAt(b, h, i)] : 0.0f;
  }
  FragC acc[D / 16];
  for (int n = 0; n < D / 16; ++n)
    wmma::fill_fragment(acc[n], 0.0f);
  int64_t last = min(s.seq - 1, i0 + kTcTile - 1);
  int64_t jEnd = s.causal ? last + 1 : s.seq;
  int64_t jBegin = s.window > 0 ? max(int64_t(0), i0 - s.window + 1) : 0;
  for (int64_t j0 = jBegin; j0 < jEnd; j0 += kTcTile) {
    __syncthreads();
    stageTc<D>(k, s.kvHeads * D, b, g, j0, s.seq, ks);
    stageTc<D>(v, s.kvHeads * D, b, g, j0, s.seq, vs);
    __syncthreads();
    productNT<D>(qs + 16 * warp * L::ldh, ks, ss + 16 * warp * L::lds);
    productNT<D>(dos + 16 * warp * L::ldh, vs, dps + 16 * warp * L::lds);
    __syncwarp();
    for (int r = 0; r < 16; ++r) {
      int row = 16 * warp + r;
      int64_t i = i0 + row;
      float rl = rowLse[row];
      for (int t = 0; t < 2; ++t) {
        int c = lane + t * kWarp;
        int64_t j = j0 + c;
        float ds = 0.0f;
        if (i < s.seq && j < s.seq && !geo.masked(i, j) && rl != -INFINITY) {
          float slope;
          float x = geo.logit(ss[row * L::lds + c], slope);
          if (geo.hasMask)
            x += mask[geo.maskAt(b, h, i, j)];
          float p = x == -INFINITY ? 0.0f : expf(x - rl);
          ds = p * (dps[row * L::lds + c] - rowDot[row]) * s.scale * slope;
        }
        dsh[row * L::ldp + c] = __float2bfloat16_rn(ds);
      }
    }
    __syncwarp();
    productPN<D>(dsh + 16 * warp * L::ldp, ks, acc);
  }
  writeRows<D>(acc, outf, i0, b, h, s.heads * D, s.seq, dq);
}

template <int D>
__global__ void __launch_bounds__(kTcWarps *kWarp)
    tcDkvKernel(const bf16 *q, const bf16 *k, const bf16 *v, Load mask,
                Geometry geo, const bf16 *dOut, const float *lse,
                const float *dsum, Store dk, Store dv) {
  using L = TcDims<D>;
  const AttentionShape &s = geo.s;
  extern __shared__ __align__(128) unsigned char tcSmem[];
  BackwardTiles<D> tiles(tcSmem);
  bf16 *ks = tiles.h[0], *vs = tiles.h[1], *qs = tiles.h[2], *dos = tiles.h[3];
  bf16 *pth = tiles.p[0], *dsth = tiles.p[1];
  float *sts = tiles.s[0], *dpts = tiles.s[1], *outf = tiles.out;
  float *colLse = tiles.stats[0], *colDot = tiles.stats[1];
  int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  int64_t b = blockIdx.z, g = blockIdx.y, group = s.heads / s.kvHeads;
  int64_t j0 = int64_t(blockIdx.x) * kTcTile;
  stageTc<D>(k, s.kvHeads * D, b, g, j0, s.seq, ks);
  stageTc<D>(v, s.kvHeads * D, b, g, j0, s.seq, vs);
  FragC accK[D / 16], accV[D / 16];
  for (int n = 0; n < D / 16; ++n) {
    wmma::fill_fragment(accK[n], 0.0f);
    wmma::fill_fragment(accV[n], 0.0f);
  }
  int64_t lastJ = min(s.seq - 1, j0 + kTcTile - 1);
  int64_t iBegin = s.causal ? j0 : 0;
  int64_t iEnd = s.window > 0 ? min(s.seq, lastJ + s.window) : s.seq;
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    for (int64_t i0 = iBegin; i0 < iEnd; i0 += kTcTile) {
      __syncthreads();
      stageTc<D>(q, s.heads * D, b, h, i0, s.seq, qs);
      stageTc<D>(dOut, s.heads * D, b, h, i0, s.seq, dos);
      if (threadIdx.x < kTcTile) {
        int64_t i = i0 + threadIdx.x;
        colLse[threadIdx.x] = i < s.seq ? lse[geo.statAt(b, h, i)] : -INFINITY;
        colDot[threadIdx.x] = i < s.seq ? dsum[geo.statAt(b, h, i)] : 0.0f;
      }
      __syncthreads();
      // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys.
      productNT<D>(ks + 16 * warp * L::ldh, qs, sts + 16 * warp * L::lds);
      productNT<D>(vs + 16 * warp * L::ldh, dos, dpts + 16 * warp * L::lds);
      __syncwarp();
      for (int r = 0; r < 16; ++r) {
        int row = 16 * warp + r;
        int64_t j = j0 + row;
        for (int t = 0; t < 2; ++t) {
          int c = lane + t * kWarp;
          int64_t i = i0 + c;
          float cl = colLse[c], p = 0.0f, ds = 0.0f;
          if (i < s.seq && j < s.seq && !geo.masked(i, j) && cl != -INFINITY) {
            float slope;
            float x = geo.logit(sts[row * L::lds + c], slope);
            if (geo.hasMask)
              x += mask[geo.maskAt(b, h, i, j)];
            p = x == -INFINITY ? 0.0f : expf(x - cl);
            ds = p * (dpts[row * L::lds + c] - colDot[c]) * s.scale * slope;
          }
          pth[row * L::ldp + c] = __float2bfloat16_rn(p);
          dsth[row * L::ldp + c] = __float2bfloat16_rn(ds);
        }
      }
      __syncwarp();
      productPN<D>(pth + 16 * warp * L::ldp, dos, accV);
      productPN<D>(dsth + 16 * warp * L::ldp, qs, accK);
    }
  }
  writeRows<D>(accK, outf, j0, b, g, s.kvHeads * D, s.seq, dk);
  writeRows<D>(accV, outf, j0, b, g, s.kvHeads * D, s.seq, dv);
}

/// Whether the tensor-core kernels take this call: every tensor bf16, a head
/// dim they are built for, and not turned off (MT_ATTENTION=simt, for
/// measuring one against the other).
bool tensorCores(const AttentionShape &s, std::initializer_list<DType> types) {
  for (DType t : types)
    if (t != DType::BF16)
      return false;
  static const bool off = [] {
    const char *v = std::getenv("MT_ATTENTION");
    return v && std::string(v) == "simt";
  }();
  return !off && (s.headDim == 16 || s.headDim == 32 || s.headDim == 64 ||
                  s.headDim == 128);
}

template <typename Fn> cudaError_t byTcHeadDim(int64_t d, Fn fn) {
  switch (d) {
  case 16:
    return fn(std::integral_constant<int, 16>());
  case 32:
    return fn(std::integral_constant<int, 32>());
  case 64:
    return fn(std::integral_constant<int, 64>());
  default:
    return fn(std::integral_constant<int, 128>());
  }
}

const bf16 *bf(Ref r) { return static_cast<const bf16 *>(r.data); }

} // namespace

cudaError_t attention(Ref q, Ref k, Ref v, Ref mask, const AttentionShape &s,
                      MutRef out, cudaStream_t stream) {
  if (!valid(s))
    return cudaErrorInvalidValue;
  Geometry geo{s, mask.data != nullptr};
  if (tensorCores(s, {q.type, k.type, v.type, out.type})) {
    dim3 tiles(unsigned((s.seq + kTcTile - 1) / kTcTile), unsigned(s.heads),
               unsigned(s.batch));
    return byTcHeadDim(s.headDim, [&](auto dim) {
      constexpr int D = decltype(dim)::value;
      return launch(
          tcForwardKernel<D>, tiles, kTcWarps * kWarp, TcDims<D>::forward,
          stream, bf(q), bf(k), bf(v), load(mask), geo, store(out), false,
          Load{}, static_cast<float *>(nullptr), static_cast<float *>(nullptr));
    });
  }
  dim3 grid(unsigned((s.seq + kRows - 1) / kRows), unsigned(s.heads),
            unsigned(s.batch));
  return byHeadDim(s.headDim, [&](auto per) {
    return launch(forwardKernel<decltype(per)::value>, grid, kRows * kWarp,
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
  if (tensorCores(
          s, {q.type, k.type, v.type, dOut.type, dq.type, dk.type, dv.type})) {
    unsigned tiles = unsigned((s.seq + kTcTile - 1) / kTcTile);
    return byTcHeadDim(s.headDim, [&](auto dim) -> cudaError_t {
      constexpr int D = decltype(dim)::value;
      dim3 byQuery(tiles, unsigned(s.heads), unsigned(s.batch));
      if (cudaError_t e =
              launch(tcForwardKernel<D>, byQuery, kTcWarps * kWarp,
                     TcDims<D>::forward, stream, bf(q), bf(k), bf(v),
                     load(mask), geo, Store{}, true, load(dOut), lse, dsum))
        return e;
      if (cudaError_t e =
              launch(tcDqKernel<D>, byQuery, kTcWarps * kWarp,
                     TcDims<D>::backward, stream, bf(q), bf(k), bf(v),
                     load(mask), geo, bf(dOut), static_cast<const float *>(lse),
                     static_cast<const float *>(dsum), store(dq)))
        return e;
      dim3 byKey(tiles, unsigned(s.kvHeads), unsigned(s.batch));
      return launch(tcDkvKernel<D>, byKey, kTcWarps * kWarp,
                    TcDims<D>::backward, stream, bf(q), bf(k), bf(v),
                    load(mask), geo, bf(dOut), static_cast<const float *>(lse),
                    static_cast<const float *>(dsum), store(dk), store(dv));
    });
  }
  unsigned rowBlocks = unsigned((s.seq + kRows - 1) / kRows);
  int d = int(s.headDim);
  return byHeadDim(s.headDim, [&](auto per) -> cudaError_t {
    constexpr int kPer = decltype(per)::value;
    dim3 byQuery(rowBlocks, unsigned(s.heads), unsigned(s.batch));
    if (cudaError_t e =
            launch(forwardKernel<kPer>, byQuery, kRows * kWarp, forwardSmem(d),
                   stream, load(q), load(k), load(v), load(mask), geo, Store{},
                   true, load(dOut), lse, dsum))
      return e;
    if (cudaError_t e =
            launch(dqKernel<kPer>, byQuery, kRows * kWarp, backwardSmem(d),
                   stream, load(q), load(k), load(v), load(mask), geo,
                   load(dOut), static_cast<const float *>(lse),
                   static_cast<const float *>(dsum), store(dq)))
      return e;
    dim3 byKey(rowBlocks, unsigned(s.kvHeads), unsigned(s.batch));
    return launch(dkvKernel<kPer>, byKey, kRows * kWarp, backwardSmem(d),
                  stream, load(q), load(k), load(v), load(mask), geo,
                  load(dOut), static_cast<const float *>(lse),
                  static_cast<const float *>(dsum), store(dk), store(dv));
  });
}

} // namespace mt::kernels::cuda
