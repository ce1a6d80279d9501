// Elementwise, layout and embedding kernels (see kernels.h).
#include "kernels/cuda/common.cuh"

#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include <cstdint>
#include <initializer_list>

namespace mt::kernels::cuda {
namespace {

constexpr int kMaxRank = 8;

/// Up to 8 dims and, per operand (up to 3), the stride of each output dim
/// (0 where the operand broadcasts), by value into the kernel.
struct Index {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t stride[3][kMaxRank] = {};
};

int64_t product(const Dims &d) {
  int64_t n = 1;
  for (int64_t x : d)
    n *= x;
  return n;
}

/// Strides of a tensor of `dims` broadcast (numpy rules) to outDims.
void broadcastStrides(const Dims &dims, const Dims &outDims, int64_t *stride) {
  int64_t off = int64_t(outDims.size()) - int64_t(dims.size()), s = 1;
  for (int64_t d = 0; d < int64_t(outDims.size()); ++d)
    stride[d] = 0;
  for (int64_t d = int64_t(dims.size()) - 1; d >= 0; --d) {
    stride[d + off] = dims[d] == 1 ? 0 : s;
    s *= dims[d];
  }
}

/// The index over outDims of a (stride[0]), b (stride[1]) and c
/// (stride[2]), each broadcast to it (an empty operand: stride 0).
Index broadcastIndex(const Dims &outDims, const Dims &a, const Dims &b = {},
                     const Dims &c = {}) {
  Index ix;
  ix.rank = int(outDims.size());
  for (int d = 0; d < ix.rank; ++d)
    ix.dims[d] = outDims[d];
  broadcastStrides(a, outDims, ix.stride[0]);
  broadcastStrides(b, outDims, ix.stride[1]);
  broadcastStrides(c, outDims, ix.stride[2]);
  return ix;
}

__device__ __forceinline__ void offsets(const Index &ix, int64_t flat,
                                        int64_t &a, int64_t &b) {
  a = b = 0;
  for (int d = ix.rank - 1; d >= 0; --d) {
    int64_t i = flat % ix.dims[d];
    flat /= ix.dims[d];
    a += i * ix.stride[0][d];
    b += i * ix.stride[1][d];
  }
}

__device__ __forceinline__ void offsets3(const Index &ix, int64_t flat,
                                         int64_t &a, int64_t &b, int64_t &c) {
  a = b = c = 0;
  for (int d = ix.rank - 1; d >= 0; --d) {
    int64_t i = flat % ix.dims[d];
    flat /= ix.dims[d];
    a += i * ix.stride[0][d];
    b += i * ix.stride[1][d];
    c += i * ix.stride[2][d];
  }
}

__global__ void fillKernel(Store y, int64_t n, float value) {
  MT_GRID_STRIDE(i, n) y.set(i, value);
}

__global__ void castKernel(Load x, Store y, int64_t n) {
  MT_GRID_STRIDE(i, n) y.set(i, x[i]);
}

__global__ void binaryKernel(Binary op, Load a, Load b, Store y, Index ix,
                             int64_t n) {
  MT_GRID_STRIDE(i, n) {
    int64_t ia, ib;
    offsets(ix, i, ia, ib);
    y.set(i, cpu::applyBinary(op, a[ia], b[ib]));
  }
}

__global__ void isNaNKernel(Load x, uint8_t *y, int64_t n) {
  MT_GRID_STRIDE(i, n) y[i] = isnan(x[i]) ? 1 : 0;
}

/// stride[0] of the condition, [1] of a, [2] of b.
__global__ void whereKernel(const uint8_t *cond, Load a, Load b, Store y,
                            Index ix, int64_t n) {
  MT_GRID_STRIDE(i, n) {
    int64_t ic, ia, ib;
    offsets3(ix, i, ic, ia, ib);
    y.set(i, cond[ic] ? a[ia] : b[ib]);
  }
}

__global__ void unaryKernel(UnaryParams f, Load x, Store y, int64_t n) {
  MT_GRID_STRIDE(i, n) y.set(i, cpu::applyUnary(f, x[i]));
}
__global__ void unaryGradKernel(UnaryParams f, Load x, Load dy, Store dx,
                                int64_t n) {
  MT_GRID_STRIDE(i, n) dx.set(i, cpu::applyUnaryGrad(f, x[i], dy[i]));
}

/// The fallback for a product of two activations that no fused op
/// absorbed: 16 x 16 tiles through shared memory, fp32 accumulation;
/// blockIdx.z is the batch index, whose matrix offsets `ix` gives
/// (stride[0] for a, stride[1] for b, in matrices).
constexpr int kTile = 16;
__global__ void batchMatmulKernel(Load a, Load b, Store y, Index ix, int64_t m,
                                  int64_t n, int64_t k) {
  __shared__ float as[kTile][kTile], bs[kTile][kTile + 1];
  int64_t batch = blockIdx.z, ia, ib;
  offsets(ix, batch, ia, ib);
  ia *= m * k;
  ib *= k * n;
  int64_t row = int64_t(blockIdx.y) * kTile + threadIdx.y,
          col = int64_t(blockIdx.x) * kTile + threadIdx.x;
  float acc = 0.0f;
  for (int64_t t = 0; t < k; t += kTile) {
    int64_t ac = t + threadIdx.x, br = t + threadIdx.y;
    as[threadIdx.y][threadIdx.x] =
        row < m && ac < k ? a[ia + row * k + ac] : 0.0f;
    bs[threadIdx.y][threadIdx.x] =
        br < k && col < n ? b[ib + br * n + col] : 0.0f;
    __syncthreads();
    for (int e = 0; e < kTile; ++e)
      acc += as[threadIdx.y][e] * bs[e][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n)
    y.set(batch * m * n + row * n + col, acc);
}

/// One thread per line of the softmax axis: [outer, n, inner].
__global__ void softmaxKernel(Load x, Store y, int64_t outer, int64_t n,
                              int64_t inner, bool log) {
  MT_GRID_STRIDE(line, outer * inner) {
    int64_t base = (line / inner) * n * inner + line % inner;
    float maxValue = -INFINITY;
    for (int64_t j = 0; j < n; ++j)
      maxValue = fmaxf(maxValue, x[base + j * inner]);
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j)
      sum += expf(x[base + j * inner] - maxValue);
    if (log) {
      float shift = maxValue + logf(sum);
      for (int64_t j = 0; j < n; ++j)
        y.set(base + j * inner, x[base + j * inner] - shift);
      continue;
    }
    float inv = 1.0f / sum;
    for (int64_t j = 0; j < n; ++j)
      y.set(base + j * inner, expf(x[base + j * inner] - maxValue) * inv);
  }
}

__global__ void negKernel(Load x, Store y, int64_t n) {
  MT_GRID_STRIDE(i, n) y.set(i, -x[i]);
}

/// A sum, or (max) a maximum where a NaN wins.
__device__ __forceinline__ float combine(bool max, float acc, float v) {
  return !max ? acc + v : v != v || v > acc ? v : acc;
}

/// One thread per output element; it walks the reduced sub-space
/// (ix.dims over the reduced dims, stride[0] their strides in x).
__global__ void reduceSumKernel(Load x, Store y, Index kept, Index reduced,
                                int64_t outN, int64_t inner, float scale,
                                bool max) {
  MT_GRID_STRIDE(o, outN) {
    int64_t base, unused;
    offsets(kept, o, base, unused);
    float acc = max ? -INFINITY : 0.0f;
    for (int64_t r = 0; r < inner; ++r) {
      int64_t off;
      offsets(reduced, r, off, unused);
      acc = combine(max, acc, x[base + off]);
    }
    y.set(o, acc * scale);
  }
}

/// Sums over leading dims (a bias gradient: x [rows, cols] -> y [cols]): a
/// block per 32 columns, its 8 warps over interleaved rows, then across the
/// warps in shared memory; coalesced, no index arithmetic per element.
constexpr int kColumnRows = 8;
__global__ void columnSumKernel(Load x, Store y, int64_t rows, int64_t cols,
                                float scale, bool max) {
  __shared__ float partial[kColumnRows][kWarp + 1];
  int64_t c = int64_t(blockIdx.x) * kWarp + threadIdx.x;
  float acc = max ? -INFINITY : 0.0f;
  if (c < cols)
    for (int64_t r = threadIdx.y; r < rows; r += kColumnRows)
      acc = combine(max, acc, x[r * cols + c]);
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    for (int w = 1; w < kColumnRows; ++w)
      acc = combine(max, acc, partial[w][threadIdx.x]);
    y.set(c, acc * scale);
  }
}

/// y[flat] = a op b as a byte (stride[0] of a, [1] of b).
__global__ void compareKernel(cpu::Compare op, Load a, Load b, uint8_t *y,
                              Index ix, int64_t n) {
  MT_GRID_STRIDE(i, n) {
    int64_t ia, ib;
    offsets(ix, i, ia, ib);
    y[i] = cpu::applyCompare(op, a[ia], b[ib]) ? 1 : 0;
  }
}

/// y[flat] = a op b of bytes (stride[0] of a, [1] of b).
__global__ void logicKernel(cpu::Logic op, const uint8_t *a, const uint8_t *b,
                            uint8_t *y, Index ix, int64_t n) {
  MT_GRID_STRIDE(i, n) {
    int64_t ia, ib;
    offsets(ix, i, ia, ib);
    y[i] = cpu::applyLogic(op, a[ia] != 0, b[ib] != 0) ? 1 : 0;
  }
}

/// y[flat] = x[gather offset]: transposes (stride[0] permuted strides).
__global__ void gatherKernel(Load x, Store y, Index ix, int64_t n) {
  MT_GRID_STRIDE(i, n) {
    int64_t src, unused;
    offsets(ix, i, src, unused);
    y.set(i, x[src]);
  }
}

/// One thread per element of the gather [outer, count, inner].
__global__ void gatherAxisKernel(Load x, Store y, const int64_t *indices,
                                 int64_t outer, int64_t n, int64_t count,
                                 int64_t inner, int *bad) {
  MT_GRID_STRIDE(e, outer * count * inner) {
    int64_t c = e % inner, r = (e / inner) % count, o = e / (inner * count);
    int64_t i = indices[r];
    if (i < -n || i >= n) {
      *bad = 1;
      y.set(e, 0.0f);
      continue;
    }
    y.set(e, x[(o * n + (i < 0 ? i + n : i)) * inner + c]);
  }
}

/// A strided slice: element `flat` of the slice is element base + the
/// offsets of ix (stride[0]: steps times the whole's strides) of the whole;
/// toWhole scatters the slice into the whole (each place once).
__global__ void sliceKernel(Load from, Store to, Index ix, int64_t base,
                            int64_t n, bool toWhole) {
  MT_GRID_STRIDE(i, n) {
    int64_t off, unused;
    offsets(ix, i, off, unused);
    if (toWhole)
      to.set(base + off, from[i]);
    else
      to.set(i, from[base + off]);
  }
}

/// sliceKernel's gather of ids: element `i` of the slice from the whole.
__global__ void sliceIdsKernel(const int64_t *x, int64_t *y, Index ix,
                               int64_t base, int64_t n) {
  MT_GRID_STRIDE(i, n) {
    int64_t off, unused;
    offsets(ix, i, off, unused);
    y[i] = x[base + off];
  }
}

/// The dims of a pad's operand and result and where the operand begins.
struct PadIndex {
  int rank = 0;
  int64_t in[kMaxRank] = {}, out[kMaxRank] = {}, begin[kMaxRank] = {};
};

/// y[j...] = x[j - begin...] inside x, else `value`: one thread an element.
__global__ void padKernel(Load x, Store y, PadIndex p, int64_t n, float value) {
  MT_GRID_STRIDE(e, n) {
    int64_t rest = e, from = 0, stride = 1;
    bool inside = true;
    for (int d = p.rank - 1; d >= 0; --d) {
      int64_t i = rest % p.out[d] - p.begin[d];
      rest /= p.out[d];
      inside = inside && i >= 0 && i < p.in[d];
      from += i * stride;
      stride *= p.in[d];
    }
    y.set(e, inside ? x[from] : value);
  }
}

/// Each k-tuple of indices as one index into the tuples' leading dims
/// flattened (`lead` of them), one thread a tuple; a tuple outside them
/// sets *bad and becomes `lead`, which the gather then refuses too.
__global__ void flattenTuplesKernel(const int64_t *indices, int64_t tuples,
                                    PadIndex p, int64_t lead, int64_t *flat,
                                    int *bad) {
  MT_GRID_STRIDE(t, tuples) {
    int64_t at = 0;
    for (int j = 0; j < p.rank; ++j) {
      int64_t i = indices[t * p.rank + j], n = p.in[j];
      if (i < -n || i >= n) {
        *bad = 1;
        at = lead;
        break;
      }
      at = at * n + (i < 0 ? i + n : i);
    }
    flat[t] = at;
  }
}

/// TopK of [outer, n, inner] lines: one thread a line, k passes, each the
/// first element after the previous one in the order (no workspace).
__global__ void topKKernel(Load x, Store values, int64_t *indices,
                           int64_t outer, int64_t n, int64_t inner, int64_t k,
                           bool smallest) {
  MT_GRID_STRIDE(line, outer * inner) {
    int64_t o = line / inner, c = line % inner;
    int64_t base = o * n * inner + c;
    float prevV = 0.0f;
    int64_t prev = -1;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      float bestV = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        float v = x[base + i * inner];
        if (prev >= 0 && !cpu::topKBefore(prevV, prev, v, i, smallest))
          continue;
        if (best < 0 || cpu::topKBefore(v, i, bestV, best, smallest)) {
          best = i;
          bestV = v;
        }
      }
      int64_t at = (o * k + j) * inner + c;
      values.set(at, bestV);
      indices[at] = best;
      prev = best;
      prevV = bestV;
    }
  }
}

/// GATHER_ELEMENTS: one thread an element of the result (the indices'
/// dims); an index outside the axis sets *bad.
__global__ void gatherElementsKernel(Load x, const int64_t *indices, Store y,
                                     int64_t outer, int64_t n, int64_t inner,
                                     int64_t k, int *bad) {
  MT_GRID_STRIDE(at, outer * k * inner) {
    int64_t o = at / (k * inner), c = at % inner;
    int64_t i = cpu::elementIndex(indices[at], n);
    if (i < 0) {
      *bad = 1;
      continue;
    }
    y.set(at, x[(o * n + i) * inner + c]);
  }
}

/// GATHER_ELEMENTS_GRAD (dx zeroed before, `add`) and SCATTER_ELEMENTS (out
/// a copy of the data before): one thread a line writes its k values at
/// their places in order, so that sums and later writes are the CPU's.
__global__ void elementsIntoKernel(Load values, const int64_t *indices,
                                   Load now, Store out, int64_t outer,
                                   int64_t n, int64_t inner, int64_t k,
                                   bool add, int *bad) {
  MT_GRID_STRIDE(line, outer * inner) {
    int64_t o = line / inner, c = line % inner;
    for (int64_t j = 0; j < k; ++j) {
      int64_t at = (o * k + j) * inner + c;
      int64_t i = cpu::elementIndex(indices[at], n);
      if (i < 0) {
        *bad = 1;
        continue;
      }
      int64_t to = (o * n + i) * inner + c;
      out.set(to, add ? now[to] + values[at] : values[at]);
    }
  }
}

/// A copy between buffers of one shape, converting the dtype.
__global__ void copyValuesKernel(Load x, Store y, int64_t n) {
  MT_GRID_STRIDE(e, n) { y.set(e, x[e]); }
}

/// Trilu of [*, rows, cols]: one thread an element.
__global__ void triluKernel(Load x, Store y, int64_t rows, int64_t cols,
                            bool upper, int64_t diagonal, int64_t n) {
  MT_GRID_STRIDE(e, n) {
    int64_t j = e % cols, i = (e / cols) % rows;
    bool keep = upper ? j - i >= diagonal : j - i <= diagonal;
    y.set(e, keep ? x[e] : 0.0f);
  }
}

/// CumSum of [outer, n, inner]: one thread a line, its sum in fp32 in
/// order along the axis (neighbouring threads read neighbouring columns).
__global__ void cumSumKernel(Load x, Store y, int64_t outer, int64_t n,
                             int64_t inner, bool exclusive, bool reverse) {
  MT_GRID_STRIDE(line, outer * inner) {
    int64_t o = line / inner, c = line % inner;
    float sum = 0.0f;
    for (int64_t s = 0; s < n; ++s) {
      int64_t at = (o * n + (reverse ? n - 1 - s : s)) * inner + c;
      float v = x[at];
      if (!exclusive)
        sum += v;
      y.set(at, sum);
      if (exclusive)
        sum += v;
    }
  }
}

/// Tile: y[j...] = x[j % in...], one thread an element.
__global__ void tileKernel(Load x, Store y, PadIndex p, int64_t n) {
  MT_GRID_STRIDE(e, n) {
    int64_t rest = e, from = 0, stride = 1;
    for (int d = p.rank - 1; d >= 0; --d) {
      from += (rest % p.out[d]) % p.in[d] * stride;
      rest /= p.out[d];
      stride *= p.in[d];
    }
    y.set(e, x[from]);
  }
}

/// Concat/split of one part: [outer, partAxis * inner] of the part against
/// [outer, wholeAxis * inner] of the whole, at `offset * inner`.
__global__ void slabKernel(Load from, Store to, int64_t outer, int64_t chunk,
                           int64_t wholeChunk, int64_t offset, bool toWhole) {
  MT_GRID_STRIDE(i, outer * chunk) {
    int64_t o = i / chunk, c = i % chunk;
    int64_t w = o * wholeChunk + offset + c;
    if (toWhole)
      to.set(w, from[i]);
    else
      to.set(i, from[w]);
  }
}

constexpr float kGeluTanhScale = 0.7978845608028654f; // sqrt(2 / pi)
constexpr float kGeluTanhCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

__device__ __forceinline__ float act(float x, Activation a) {
  switch (a) {
  case Activation::Gelu:
    return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
  case Activation::GeluTanh:
    return 0.5f * x *
           (1.0f + tanhf(kGeluTanhScale * (x + kGeluTanhCubic * x * x * x)));
  case Activation::Silu:
    return x / (1.0f + expf(-x));
  default:
    return x > 0.0f ? x : 0.0f;
  }
}

__device__ __forceinline__ float actDerivative(float x, Activation a) {
  switch (a) {
  case Activation::Gelu:
    return 0.5f * (1.0f + erff(x * kInvSqrt2)) +
           x * expf(-0.5f * x * x) * kInvSqrt2Pi;
  case Activation::GeluTanh: {
    float t = tanhf(kGeluTanhScale * (x + kGeluTanhCubic * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluTanhScale *
                                   (1.0f + 3.0f * kGeluTanhCubic * x * x);
  }
  case Activation::Silu: {
    float sg = 1.0f / (1.0f + expf(-x));
    return sg * (1.0f + x * (1.0f - sg));
  }
  default:
    return x > 0.0f ? 1.0f : 0.0f;
  }
}

// 16-byte vector paths: when every tensor of an elementwise op has one
// storage type and 16-byte aligned memory and the count is a multiple of the
// vector, each thread moves 16 bytes per tensor (8 bf16 or 4 fp32 values).
template <typename T> struct Vector {
  static constexpr int n = 16 / sizeof(T);
  float v[n];
  __device__ __forceinline__ void load(const T *p, int64_t i) {
    uint4 raw = reinterpret_cast<const uint4 *>(p)[i];
    const T *e = reinterpret_cast<const T *>(&raw);
    for (int k = 0; k < n; ++k)
      v[k] = toFloat(e[k]);
  }
  __device__ __forceinline__ void store(T *p, int64_t i) const {
    uint4 raw;
    T *e = reinterpret_cast<T *>(&raw);
    for (int k = 0; k < n; ++k)
      e[k] = fromFloat(v[k]);
    reinterpret_cast<uint4 *>(p)[i] = raw;
  }
  static __device__ __forceinline__ float toFloat(float x) { return x; }
  static __device__ __forceinline__ float toFloat(__nv_bfloat16 x) {
    return __bfloat162float(x);
  }
  static __device__ __forceinline__ T fromFloat(float x) {
    if constexpr (sizeof(T) == 4)
      return x;
    else
      return __float2bfloat16_rn(x);
  }
};

/// The elementwise functions, for the vector kernels.
struct ActF {
  Activation a;
  __device__ float operator()(float x) const { return act(x, a); }
};
struct NegF {
  __device__ float operator()(float x) const { return -x; }
};
struct ActGradF {
  Activation a;
  __device__ float operator()(float x, float dy) const {
    return dy * actDerivative(x, a);
  }
};
struct GatedF {
  Activation a;
  __device__ float operator()(float g, float u) const { return act(g, a) * u; }
};
struct BinaryF {
  Binary op;
  __device__ float operator()(float x, float z) const {
    return cpu::applyBinary(op, x, z);
  }
};
struct UnaryF {
  UnaryParams f;
  __device__ float operator()(float x) const { return cpu::applyUnary(f, x); }
};
struct UnaryGradF {
  UnaryParams f;
  __device__ float operator()(float x, float dy) const {
    return cpu::applyUnaryGrad(f, x, dy);
  }
};

template <typename T, typename F>
__global__ void map1Kernel(const T *x, T *y, int64_t vectors, F f) {
  MT_GRID_STRIDE(i, vectors) {
    Vector<T> a;
    a.load(x, i);
    for (int k = 0; k < Vector<T>::n; ++k)
      a.v[k] = f(a.v[k]);
    a.store(y, i);
  }
}

template <typename T, typename F>
__global__ void map2Kernel(const T *x, const T *z, T *y, int64_t vectors, F f) {
  MT_GRID_STRIDE(i, vectors) {
    Vector<T> a, b;
    a.load(x, i);
    b.load(z, i);
    for (int k = 0; k < Vector<T>::n; ++k)
      a.v[k] = f(a.v[k], b.v[k]);
    a.store(y, i);
  }
}

template <typename T>
__global__ void gatedGradVectorKernel(const T *g, const T *u, const T *dy,
                                      T *dg, T *du, int64_t vectors,
                                      Activation a) {
  MT_GRID_STRIDE(i, vectors) {
    Vector<T> vg, vu, vd;
    vg.load(g, i);
    vu.load(u, i);
    vd.load(dy, i);
    for (int k = 0; k < Vector<T>::n; ++k) {
      float gk = vg.v[k], d = vd.v[k];
      vg.v[k] = d * vu.v[k] * actDerivative(gk, a);
      vu.v[k] = d * act(gk, a);
    }
    vg.store(dg, i);
    vu.store(du, i);
  }
}

/// Whether the tensors can take the vector path: one type, 16-byte aligned,
/// n a multiple of the vector.
bool vectorPath(DType type, std::initializer_list<Ref> tensors, int64_t n) {
  int per = type == DType::F32 ? 4 : 8;
  if (n % per != 0)
    return false;
  for (const Ref &t : tensors)
    if (t.type != type || reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
      return false;
  return true;
}
Ref asRef(MutRef r) { return {r.data, r.type}; }

/// Launches kernel<float> or kernel<__nv_bfloat16> over n / vector threads.
#define MT_VECTOR_LAUNCH(type, n, kernel, ...)                                 \
  do {                                                                         \
    if ((type) == DType::F32) {                                                \
      using T = float;                                                         \
      int64_t vectors = (n) / 4;                                               \
      kernel<<<blocksFor(vectors), kThreads, 0, stream>>>(__VA_ARGS__);        \
    } else {                                                                   \
      using T = __nv_bfloat16;                                                 \
      int64_t vectors = (n) / 8;                                               \
      kernel<<<blocksFor(vectors), kThreads, 0, stream>>>(__VA_ARGS__);        \
    }                                                                          \
  } while (0)

__global__ void activationKernel(Load x, Store y, int64_t n, Activation a) {
  MT_GRID_STRIDE(i, n) y.set(i, act(x[i], a));
}
__global__ void activationGradKernel(Load x, Load dy, Store dx, int64_t n,
                                     Activation a) {
  MT_GRID_STRIDE(i, n) dx.set(i, dy[i] * actDerivative(x[i], a));
}
__global__ void gatedKernel(Load g, Load u, Store y, int64_t n, Activation a) {
  MT_GRID_STRIDE(i, n) y.set(i, act(g[i], a) * u[i]);
}
__global__ void gatedGradKernel(Load g, Load u, Load dy, Store dg, Store du,
                                int64_t n, Activation a) {
  MT_GRID_STRIDE(i, n) {
    float gi = g[i], d = dy[i];
    dg.set(i, d * u[i] * actDerivative(gi, a));
    du.set(i, d * act(gi, a));
  }
}

__global__ void embeddingKernel(Load table, const int64_t *ids, int64_t count,
                                int64_t vocab, int64_t dim, Store out,
                                int *badId) {
  MT_GRID_STRIDE(i, count * dim) {
    int64_t n = i / dim, id = ids[n];
    if (id < 0 || id >= vocab) {
      *badId = 1;
      out.set(i, 0.0f);
    } else {
      out.set(i, table[id * dim + i % dim]);
    }
  }
}

// The embedding, Gather and GatherND gradients group their ids by the place
// they name (a stable radix sort of the ids, so the ids of one place keep
// their order) and then sum each place's slices in one place, in that
// order: no atomics on the result, the same bits every run, and places no
// id names written as zeros. The expert linears group their rows the same
// way (groupIds, common.cuh).

/// Keys for grouping ids by the place they name in [0, places): the place
/// (with `wrap`, a negative id counts from the end), or `places` for one
/// outside, which sets *bad when given.
__device__ __forceinline__ int placeOf(int64_t id, int64_t places, bool wrap,
                                       int *bad) {
  if (wrap && id < 0)
    id += places;
  if (id >= 0 && id < places)
    return int(id);
  if (bad)
    *bad = 1;
  return int(places); // last: unused
}

__global__ void sortKeysKernel(const int64_t *ids, int64_t count,
                               int64_t places, bool wrap, int *bad, int *keys,
                               int *order) {
  MT_GRID_STRIDE(n, count) {
    keys[n] = placeOf(ids[n], places, wrap, bad);
    order[n] = int(n);
  }
}

__global__ void countIdsKernel(const int64_t *ids, int64_t count,
                               int64_t places, bool wrap, int *counts) {
  MT_GRID_STRIDE(n, count) {
    int place = placeOf(ids[n], places, wrap, nullptr);
    if (place < places)
      atomicAdd(&counts[place], 1);
  }
}

/// Exclusive prefix sum of counts[0, vocab) into starts[0, vocab], one block.
constexpr int kScanThreads = 1024;
__global__ void scanKernel(const int *counts, int64_t vocab, int *starts) {
  using Scan = cub::BlockScan<int, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  __shared__ int carry;
  if (threadIdx.x == 0)
    carry = 0;
  __syncthreads();
  for (int64_t base = 0; base < vocab; base += kScanThreads) {
    int64_t i = base + threadIdx.x;
    int v = i < vocab ? counts[i] : 0, prefix, total;
    Scan(temp).ExclusiveSum(v, prefix, total);
    if (i < vocab)
      starts[i] = carry + prefix;
    __syncthreads();
    if (threadIdx.x == 0)
      carry += total;
    __syncthreads();
  }
  if (threadIdx.x == 0)
    starts[vocab] = carry;
}

/// dx [outer, places, inner] = the sums of dy [outer, count, inner]'s
/// slices into the places their ids name, each place's in id order (the
/// grouping: starts and order). A block per row of dx (grid-stride),
/// threads across the row: work in dy's size, not places x count.
__global__ void groupedSumKernel(Load dy, int64_t outer, int64_t places,
                                 int64_t count, int64_t inner,
                                 const int *starts, const int *order,
                                 Store dx) {
  for (int64_t row = blockIdx.x; row < outer * places; row += gridDim.x) {
    int64_t o = row / places, place = row % places;
    int begin = starts[place], end = starts[place + 1];
    for (int64_t c = threadIdx.x; c < inner; c += blockDim.x) {
      float acc = 0.0f;
      for (int t = begin; t < end; ++t)
        acc += dy[(o * count + order[t]) * inner + c];
      dx.set(row * inner + c, acc);
    }
  }
}

__global__ void rotaryKernel(Load x, Load cosT, Load sinT, RotaryShape s,
                             bool transpose, Store y) {
  int64_t half = s.headDim / 2, pairs = s.batch * s.seq * s.heads * half;
  MT_GRID_STRIDE(i, pairs) {
    int64_t p = i % half, h = (i / half) % s.heads, token = i / half / s.heads;
    int64_t t = token % s.seq, b = token / s.seq;
    int64_t row = (s.tablesPerBatch ? b * s.seq + t : t) * s.headDim;
    int64_t a = s.interleaved ? 2 * p : p;
    int64_t q = s.interleaved ? 2 * p + 1 : p + half;
    int64_t base = token * s.heads * s.headDim + h * s.headDim;
    float xa = x[base + a], xq = x[base + q];
    float ca = cosT[row + a], cq = cosT[row + q];
    float sa = sinT[row + a], sq = sinT[row + q];
    if (!transpose) {
      y.set(base + a, xa * ca - xq * sa);
      y.set(base + q, xq * cq + xa * sq);
    } else {
      y.set(base + a, xa * ca + xq * sq);
      y.set(base + q, xq * cq - xa * sa);
    }
  }
}

} // namespace

cudaError_t fill(MutRef y, int64_t n, float value, cudaStream_t stream) {
  fillKernel<<<blocksFor(n), kThreads, 0, stream>>>(store(y), n, value);
  return cudaGetLastError();
}

namespace {
template <typename T>
__global__ void fillValueKernel(T *y, int64_t n, T value) {
  MT_GRID_STRIDE(i, n) y[i] = value;
}
} // namespace

cudaError_t fill(void *y, Scalar type, int64_t n, float value,
                 cudaStream_t stream) {
  if (n < 0 || (n > 0 && !y))
    return cudaErrorInvalidValue;
  switch (type) {
  case Scalar::F32:
    return fill(MutRef{y, DType::F32}, n, value, stream);
  case Scalar::BF16:
    return fill(MutRef{y, DType::BF16}, n, value, stream);
  case Scalar::I64:
    fillValueKernel<<<blocksFor(n), kThreads, 0, stream>>>(
        static_cast<int64_t *>(y), n, cpu::castToI64(double(value)));
    return cudaGetLastError();
  case Scalar::U8:
    fillValueKernel<<<blocksFor(n), kThreads, 0, stream>>>(
        static_cast<uint8_t *>(y), n, uint8_t(value != 0.0f));
    return cudaGetLastError();
  }
  return cudaErrorInvalidValue;
}

cudaError_t cast(Ref x, MutRef y, int64_t n, cudaStream_t stream) {
  castKernel<<<blocksFor(n), kThreads, 0, stream>>>(load(x), store(y), n);
  return cudaGetLastError();
}

namespace {
__global__ void convertKernel(const void *x, Scalar from, void *y, Scalar to,
                              int64_t n) {
  MT_GRID_STRIDE(i, n) {
    double v;
    switch (from) {
    case Scalar::F32:
      v = static_cast<const float *>(x)[i];
      break;
    case Scalar::BF16:
      v = __bfloat162float(static_cast<const __nv_bfloat16 *>(x)[i]);
      break;
    case Scalar::I64:
      v = double(static_cast<const int64_t *>(x)[i]);
      break;
    default:
      v = static_cast<const uint8_t *>(x)[i];
    }
    switch (to) {
    case Scalar::F32:
      static_cast<float *>(y)[i] = float(v);
      break;
    case Scalar::BF16:
      static_cast<__nv_bfloat16 *>(y)[i] = __float2bfloat16_rn(float(v));
      break;
    case Scalar::I64:
      static_cast<int64_t *>(y)[i] = cpu::castToI64(v);
      break;
    default:
      static_cast<uint8_t *>(y)[i] = v != 0 ? 1 : 0;
    }
  }
}
} // namespace

cudaError_t convert(const void *x, Scalar from, void *y, Scalar to, int64_t n,
                    cudaStream_t stream) {
  convertKernel<<<blocksFor(n), kThreads, 0, stream>>>(x, from, y, to, n);
  return cudaGetLastError();
}

cudaError_t binary(Binary op, Ref a, const Dims &aDims, Ref b,
                   const Dims &bDims, MutRef y, const Dims &yDims,
                   cudaStream_t stream) {
  if (yDims.size() > size_t(kMaxRank))
    return cudaErrorInvalidValue;
  Index ix = broadcastIndex(yDims, aDims, bDims);
  int64_t n = product(yDims);
  if (aDims == yDims && bDims == yDims &&
      vectorPath(y.type, {a, b, asRef(y)}, n)) {
    MT_VECTOR_LAUNCH(y.type, n, map2Kernel<T>, static_cast<const T *>(a.data),
                     static_cast<const T *>(b.data), static_cast<T *>(y.data),
                     vectors, BinaryF{op});
    return cudaGetLastError();
  }
  binaryKernel<<<blocksFor(n), kThreads, 0, stream>>>(op, load(a), load(b),
                                                      store(y), ix, n);
  return cudaGetLastError();
}

cudaError_t neg(Ref x, MutRef y, int64_t n, cudaStream_t stream) {
  if (vectorPath(x.type, {x, asRef(y)}, n)) {
    MT_VECTOR_LAUNCH(x.type, n, map1Kernel<T>, static_cast<const T *>(x.data),
                     static_cast<T *>(y.data), vectors, NegF{});
    return cudaGetLastError();
  }
  negKernel<<<blocksFor(n), kThreads, 0, stream>>>(load(x), store(y), n);
  return cudaGetLastError();
}

cudaError_t unary(const UnaryParams &f, Ref x, MutRef y, int64_t n,
                  cudaStream_t stream) {
  if (vectorPath(x.type, {x, asRef(y)}, n)) {
    MT_VECTOR_LAUNCH(x.type, n, map1Kernel<T>, static_cast<const T *>(x.data),
                     static_cast<T *>(y.data), vectors, UnaryF{f});
    return cudaGetLastError();
  }
  unaryKernel<<<blocksFor(n), kThreads, 0, stream>>>(f, load(x), store(y), n);
  return cudaGetLastError();
}

cudaError_t unaryGrad(const UnaryParams &f, Ref x, Ref dy, MutRef dx, int64_t n,
                      cudaStream_t stream) {
  if (vectorPath(x.type, {x, dy, asRef(dx)}, n)) {
    MT_VECTOR_LAUNCH(x.type, n, map2Kernel<T>, static_cast<const T *>(x.data),
                     static_cast<const T *>(dy.data), static_cast<T *>(dx.data),
                     vectors, UnaryGradF{f});
    return cudaGetLastError();
  }
  unaryGradKernel<<<blocksFor(n), kThreads, 0, stream>>>(f, load(x), load(dy),
                                                         store(dx), n);
  return cudaGetLastError();
}

cudaError_t batchMatmul(Ref a, const Dims &aDims, Ref b, const Dims &bDims,
                        MutRef y, const Dims &yDims, cudaStream_t stream) {
  size_t rank = yDims.size();
  if (rank < 2 || rank - 2 > size_t(kMaxRank) || aDims.size() < 2 ||
      bDims.size() < 2)
    return cudaErrorInvalidValue;
  int64_t m = yDims[rank - 2], n = yDims[rank - 1], k = aDims.back();
  Dims batch(yDims.begin(), yDims.end() - 2),
      aBatch(aDims.begin(), aDims.end() - 2),
      bBatch(bDims.begin(), bDims.end() - 2);
  Index ix = broadcastIndex(batch, aBatch, bBatch);
  int64_t batches = product(batch);
  if (batches > 65535 || (m + kTile - 1) / kTile > 65535)
    return cudaErrorInvalidValue;
  if (m == 0 || n == 0 || batches == 0) // an empty result: no blocks
    return cudaSuccess;
  dim3 grid(unsigned((n + kTile - 1) / kTile),
            unsigned((m + kTile - 1) / kTile), unsigned(batches));
  batchMatmulKernel<<<grid, dim3(kTile, kTile), 0, stream>>>(
      load(a), load(b), store(y), ix, m, n, k);
  return cudaGetLastError();
}

cudaError_t expand(Ref x, const Dims &dims, MutRef y, const Dims &yDims,
                   cudaStream_t stream) {
  if (yDims.size() > size_t(kMaxRank))
    return cudaErrorInvalidValue;
  // A gather whose source strides are 0 along the broadcast dims.
  Index ix = broadcastIndex(yDims, dims);
  int64_t n = product(yDims);
  gatherKernel<<<blocksFor(n), kThreads, 0, stream>>>(load(x), store(y), ix, n);
  return cudaGetLastError();
}

cudaError_t softmax(Ref x, const Dims &dims, int64_t axis, MutRef y, bool log,
                    cudaStream_t stream) {
  int64_t outer, n, inner;
  cpu::linesAlong(dims, axis, outer, n, inner);
  softmaxKernel<<<blocksFor(outer * inner), kThreads, 0, stream>>>(
      load(x), store(y), outer, n, inner, log);
  return cudaGetLastError();
}

namespace {
enum class Reduction { Sum, Mean, Max };

/// The sum (or maximum) over `axes` times `scale` (1 but for a mean, 1 over
/// the reduced elements).
cudaError_t reduce(Ref x, const Dims &dims, const std::vector<int64_t> &axes,
                   Reduction how, MutRef y, cudaStream_t stream) {
  int rank = int(dims.size());
  if (rank > kMaxRank)
    return cudaErrorInvalidValue;
  bool isReduced[kMaxRank] = {};
  for (int d = 0; d < rank; ++d)
    isReduced[d] = axes.empty();
  for (int64_t a : axes)
    isReduced[a < 0 ? a + rank : a] = true;
  int64_t stride[kMaxRank], s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    stride[d] = s;
    s *= dims[d];
  }
  Index kept, reduced;
  int64_t outN = 1, inner = 1;
  for (int d = 0; d < rank; ++d) {
    Index &ix = isReduced[d] ? reduced : kept;
    ix.dims[ix.rank] = dims[d];
    ix.stride[0][ix.rank++] = stride[d];
    (isReduced[d] ? inner : outN) *= dims[d];
  }
  // An empty mean is 0 / 0: NaN, as the CPU's.
  float scale = how == Reduction::Mean ? float(1.0 / double(inner)) : 1.0f;
  bool max = how == Reduction::Max;
  // Leading dims reduced, trailing kept: column sums.
  int leading = 0;
  while (leading < rank && isReduced[leading])
    ++leading;
  bool prefix = leading > 0 && leading < rank;
  for (int d = leading; d < rank; ++d)
    prefix = prefix && !isReduced[d];
  if (prefix) {
    if (outN == 0) // an empty result: no blocks
      return cudaSuccess;
    dim3 block(kWarp, kColumnRows);
    columnSumKernel<<<unsigned((outN + kWarp - 1) / kWarp), block, 0, stream>>>(
        load(x), store(y), inner, outN, scale, max);
    return cudaGetLastError();
  }
  if (kept.rank == 0)
    kept = Index{1, {1}, {{0}}};
  if (reduced.rank == 0)
    reduced = Index{1, {1}, {{0}}};
  reduceSumKernel<<<blocksFor(outN), kThreads, 0, stream>>>(
      load(x), store(y), kept, reduced, outN, inner, scale, max);
  return cudaGetLastError();
}
} // namespace

cudaError_t reduceSum(Ref x, const Dims &dims, const std::vector<int64_t> &axes,
                      MutRef y, cudaStream_t stream) {
  return reduce(x, dims, axes, Reduction::Sum, y, stream);
}

cudaError_t reduceMax(Ref x, const Dims &dims, const std::vector<int64_t> &axes,
                      MutRef y, cudaStream_t stream) {
  return reduce(x, dims, axes, Reduction::Max, y, stream);
}

cudaError_t compare(cpu::Compare op, Ref a, const Dims &aDims, Ref b,
                    const Dims &bDims, uint8_t *y, const Dims &yDims,
                    cudaStream_t stream) {
  if (yDims.size() > size_t(kMaxRank))
    return cudaErrorInvalidValue;
  Index ix = broadcastIndex(yDims, aDims, bDims);
  int64_t n = product(yDims);
  compareKernel<<<blocksFor(n), kThreads, 0, stream>>>(op, load(a), load(b), y,
                                                       ix, n);
  return cudaGetLastError();
}

cudaError_t logic(cpu::Logic op, const uint8_t *a, const Dims &aDims,
                  const uint8_t *b, const Dims &bDims, uint8_t *y,
                  const Dims &yDims, cudaStream_t stream) {
  if (yDims.size() > size_t(kMaxRank))
    return cudaErrorInvalidValue;
  Index ix = broadcastIndex(yDims, aDims, bDims);
  int64_t n = product(yDims);
  logicKernel<<<blocksFor(n), kThreads, 0, stream>>>(op, a, b, y, ix, n);
  return cudaGetLastError();
}

cudaError_t reduceMean(Ref x, const Dims &dims,
                       const std::vector<int64_t> &axes, MutRef y,
                       cudaStream_t stream) {
  return reduce(x, dims, axes, Reduction::Mean, y, stream);
}

cudaError_t gather(Ref x, const Dims &dims, int64_t axis,
                   const int64_t *indices, int64_t count, MutRef y, int *bad,
                   cudaStream_t stream) {
  int64_t outer, n, inner;
  cpu::linesAlong(dims, axis, outer, n, inner);
  int64_t total = outer * count * inner;
  gatherAxisKernel<<<blocksFor(total), kThreads, 0, stream>>>(
      load(x), store(y), indices, outer, n, count, inner, bad);
  return cudaGetLastError();
}

namespace {
/// The index of a slice of `part` dims in a whole of `whole` dims.
bool sliceIndex(const Dims &whole, const Dims &part,
                const std::vector<int64_t> &starts,
                const std::vector<int64_t> &steps, Index &ix, int64_t &base) {
  int rank = int(whole.size());
  if (rank > kMaxRank || part.size() != whole.size())
    return false;
  ix.rank = rank;
  base = 0;
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    ix.dims[d] = part[size_t(d)];
    ix.stride[0][d] = steps[size_t(d)] * s;
    base += starts[size_t(d)] * s;
    s *= whole[size_t(d)];
  }
  return true;
}
} // namespace

cudaError_t slice(Ref x, const Dims &dims, const std::vector<int64_t> &starts,
                  const std::vector<int64_t> &steps, MutRef y,
                  const Dims &yDims, cudaStream_t stream) {
  Index ix;
  int64_t base;
  if (!sliceIndex(dims, yDims, starts, steps, ix, base))
    return cudaErrorInvalidValue;
  int64_t n = product(yDims);
  sliceKernel<<<blocksFor(n), kThreads, 0, stream>>>(load(x), store(y), ix,
                                                     base, n, false);
  return cudaGetLastError();
}

cudaError_t sliceIds(const int64_t *x, const Dims &dims,
                     const std::vector<int64_t> &starts,
                     const std::vector<int64_t> &steps, int64_t *y,
                     const Dims &yDims, cudaStream_t stream) {
  Index ix;
  int64_t base;
  if (!x || !y || !sliceIndex(dims, yDims, starts, steps, ix, base))
    return cudaErrorInvalidValue;
  int64_t n = product(yDims);
  if (n == 0)
    return cudaSuccess;
  sliceIdsKernel<<<blocksFor(n), kThreads, 0, stream>>>(x, y, ix, base, n);
  return cudaGetLastError();
}

cudaError_t sliceGrad(Ref dy, const Dims &dyDims,
                      const std::vector<int64_t> &starts,
                      const std::vector<int64_t> &steps, MutRef dx,
                      const Dims &dxDims, cudaStream_t stream) {
  Index ix;
  int64_t base;
  if (!sliceIndex(dxDims, dyDims, starts, steps, ix, base))
    return cudaErrorInvalidValue;
  if (cudaError_t e = fill(dx, product(dxDims), 0.0f, stream))
    return e;
  int64_t n = product(dyDims);
  sliceKernel<<<blocksFor(n), kThreads, 0, stream>>>(load(dy), store(dx), ix,
                                                     base, n, true);
  return cudaGetLastError();
}

cudaError_t pad(Ref x, const Dims &dims, const std::vector<int64_t> &begins,
                float value, MutRef y, const Dims &yDims, cudaStream_t stream) {
  size_t rank = yDims.size();
  if (rank > size_t(kMaxRank) || dims.size() != rank || begins.size() != rank)
    return cudaErrorInvalidValue;
  PadIndex p;
  p.rank = int(rank);
  for (size_t d = 0; d < rank; ++d) {
    p.in[d] = dims[d];
    p.out[d] = yDims[d];
    p.begin[d] = begins[d];
  }
  int64_t n = product(yDims);
  if (n == 0)
    return cudaSuccess;
  padKernel<<<blocksFor(n), kThreads, 0, stream>>>(load(x), store(y), p, n,
                                                   value);
  return cudaGetLastError();
}

namespace {
/// Writes the flat index of each tuple into `flat` and gives the dims of
/// the data with its first k dims as one.
cudaError_t flattenTuples(const Dims &dims, const int64_t *indices,
                          int64_t tuples, int64_t k, int64_t *flat, int *bad,
                          Dims &flatDims, cudaStream_t stream) {
  if (k < 0 || k > int64_t(dims.size()) || k > kMaxRank)
    return cudaErrorInvalidValue;
  PadIndex p;
  p.rank = int(k);
  int64_t lead = 1;
  for (int64_t d = 0; d < k; ++d) {
    p.in[d] = dims[size_t(d)];
    lead *= dims[size_t(d)];
  }
  flatDims.assign(1, lead);
  flatDims.insert(flatDims.end(), dims.begin() + k, dims.end());
  if (tuples == 0)
    return cudaSuccess;
  flattenTuplesKernel<<<blocksFor(tuples), kThreads, 0, stream>>>(
      indices, tuples, p, lead, flat, bad);
  return cudaGetLastError();
}
} // namespace

cudaError_t gatherND(Ref x, const Dims &dims, const int64_t *indices,
                     int64_t tuples, int64_t k, MutRef y, int64_t *flat,
                     int *bad, cudaStream_t stream) {
  Dims flatDims;
  if (cudaError_t e =
          flattenTuples(dims, indices, tuples, k, flat, bad, flatDims, stream))
    return e;
  return gather(x, flatDims, 0, flat, tuples, y, bad, stream);
}

cudaError_t gatherNDGrad(Ref dy, const Dims &dims, const int64_t *indices,
                         int64_t tuples, int64_t k, MutRef dx, int64_t *flat,
                         int *bad, void *workspace, cudaStream_t stream) {
  Dims flatDims;
  if (cudaError_t e =
          flattenTuples(dims, indices, tuples, k, flat, bad, flatDims, stream))
    return e;
  return gatherGrad(dy, flatDims, 0, flat, tuples, dx, bad, workspace, stream);
}

cudaError_t topK(Ref x, const Dims &dims, int64_t axis, int64_t k,
                 bool smallest, MutRef values, int64_t *indices,
                 cudaStream_t stream) {
  int64_t outer, n, inner;
  if (axis < 0 || size_t(axis) >= dims.size())
    return cudaErrorInvalidValue;
  cpu::linesAlong(dims, axis, outer, n, inner);
  if (k < 0 || k > n)
    return cudaErrorInvalidValue;
  if (outer * inner * k == 0)
    return cudaSuccess;
  topKKernel<<<blocksFor(outer * inner), kThreads, 0, stream>>>(
      load(x), store(values), indices, outer, n, inner, k, smallest);
  return cudaGetLastError();
}

cudaError_t gatherElements(Ref x, const Dims &dims, int64_t axis,
                           const int64_t *indices, int64_t k, MutRef y,
                           int *bad, cudaStream_t stream) {
  int64_t outer, n, inner;
  if (axis < 0 || size_t(axis) >= dims.size() || k < 0)
    return cudaErrorInvalidValue;
  cpu::linesAlong(dims, axis, outer, n, inner);
  int64_t total = outer * k * inner;
  if (total == 0)
    return cudaSuccess;
  gatherElementsKernel<<<blocksFor(total), kThreads, 0, stream>>>(
      load(x), indices, store(y), outer, n, inner, k, bad);
  return cudaGetLastError();
}

cudaError_t gatherElementsGrad(Ref dy, const int64_t *indices, const Dims &dims,
                               int64_t axis, int64_t k, MutRef dx, int *bad,
                               cudaStream_t stream) {
  int64_t outer, n, inner;
  if (axis < 0 || size_t(axis) >= dims.size() || k < 0)
    return cudaErrorInvalidValue;
  cpu::linesAlong(dims, axis, outer, n, inner);
  if (cudaError_t e = fill(dx, outer * n * inner, 0.0f, stream))
    return e;
  if (outer * inner * k == 0)
    return cudaSuccess;
  elementsIntoKernel<<<blocksFor(outer * inner), kThreads, 0, stream>>>(
      load(dy), indices, Load{dx.data, dx.type}, store(dx), outer, n, inner, k,
      /*add=*/true, bad);
  return cudaGetLastError();
}

cudaError_t scatterElements(Ref x, const Dims &dims, int64_t axis,
                            const int64_t *indices, Ref updates, int64_t k,
                            MutRef y, int *bad, cudaStream_t stream) {
  int64_t outer, n, inner;
  if (axis < 0 || size_t(axis) >= dims.size() || k < 0)
    return cudaErrorInvalidValue;
  cpu::linesAlong(dims, axis, outer, n, inner);
  int64_t total = outer * n * inner;
  if (total == 0)
    return cudaSuccess;
  if (x.data != y.data) {
    copyValuesKernel<<<blocksFor(total), kThreads, 0, stream>>>(
        load(x), store(y), total);
    if (cudaError_t e = cudaGetLastError())
      return e;
  }
  if (outer * inner * k == 0)
    return cudaSuccess;
  elementsIntoKernel<<<blocksFor(outer * inner), kThreads, 0, stream>>>(
      load(updates), indices, Load{y.data, y.type}, store(y), outer, n, inner,
      k, /*add=*/false, bad);
  return cudaGetLastError();
}

cudaError_t trilu(Ref x, const Dims &dims, bool upper, int64_t diagonal,
                  MutRef y, cudaStream_t stream) {
  if (dims.size() < 2)
    return cudaErrorInvalidValue;
  int64_t n = product(dims);
  if (n == 0)
    return cudaSuccess;
  triluKernel<<<blocksFor(n), kThreads, 0, stream>>>(
      load(x), store(y), dims[dims.size() - 2], dims.back(), upper, diagonal,
      n);
  return cudaGetLastError();
}

cudaError_t cumSum(Ref x, const Dims &dims, int64_t axis, bool exclusive,
                   bool reverse, MutRef y, cudaStream_t stream) {
  if (axis < 0 || size_t(axis) >= dims.size())
    return cudaErrorInvalidValue;
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < dims.size(); ++d)
    if (int64_t(d) < axis)
      outer *= dims[d];
    else if (int64_t(d) > axis)
      inner *= dims[d];
  if (outer * inner == 0 || dims[size_t(axis)] == 0)
    return cudaSuccess;
  cumSumKernel<<<blocksFor(outer * inner), kThreads, 0, stream>>>(
      load(x), store(y), outer, dims[size_t(axis)], inner, exclusive, reverse);
  return cudaGetLastError();
}

cudaError_t tile(Ref x, const Dims &dims, MutRef y, const Dims &yDims,
                 cudaStream_t stream) {
  size_t rank = yDims.size();
  if (rank > size_t(kMaxRank) || dims.size() != rank)
    return cudaErrorInvalidValue;
  PadIndex p;
  p.rank = int(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (dims[d] <= 0 && yDims[d] != 0)
      return cudaErrorInvalidValue;
    p.in[d] = dims[d];
    p.out[d] = yDims[d];
  }
  int64_t n = product(yDims);
  if (n == 0)
    return cudaSuccess;
  tileKernel<<<blocksFor(n), kThreads, 0, stream>>>(load(x), store(y), p, n);
  return cudaGetLastError();
}

cudaError_t isNaN(Ref x, uint8_t *y, int64_t n, cudaStream_t stream) {
  isNaNKernel<<<blocksFor(n), kThreads, 0, stream>>>(load(x), y, n);
  return cudaGetLastError();
}

cudaError_t where(const uint8_t *cond, const Dims &condDims, Ref a,
                  const Dims &aDims, Ref b, const Dims &bDims, MutRef y,
                  const Dims &yDims, cudaStream_t stream) {
  if (yDims.size() > size_t(kMaxRank))
    return cudaErrorInvalidValue;
  Index ix = broadcastIndex(yDims, condDims, aDims, bDims);
  int64_t n = product(yDims);
  whereKernel<<<blocksFor(n), kThreads, 0, stream>>>(cond, load(a), load(b),
                                                     store(y), ix, n);
  return cudaGetLastError();
}

cudaError_t transpose(Ref x, const Dims &dims, const std::vector<int64_t> &perm,
                      MutRef y, cudaStream_t stream) {
  int rank = int(dims.size());
  if (rank > kMaxRank || perm.size() != dims.size())
    return cudaErrorInvalidValue;
  int64_t stride[kMaxRank], s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    stride[d] = s;
    s *= dims[d];
  }
  Index ix;
  ix.rank = rank;
  for (int d = 0; d < rank; ++d) {
    ix.dims[d] = dims[perm[d]];
    ix.stride[0][d] = stride[perm[d]];
  }
  int64_t n = product(dims);
  gatherKernel<<<blocksFor(n), kThreads, 0, stream>>>(load(x), store(y), ix, n);
  return cudaGetLastError();
}

namespace {
/// outer (the dims before axis) and inner (after it) of `dims`.
void around(const Dims &dims, int64_t axis, int64_t &outer, int64_t &inner) {
  outer = inner = 1;
  for (int64_t d = 0; d < int64_t(dims.size()); ++d)
    (d < axis ? outer : inner) *= d == axis ? 1 : dims[d];
}
} // namespace

cudaError_t concatPart(Ref part, const Dims &partDims, int64_t axis,
                       int64_t offset, int64_t yAxisSize, MutRef y,
                       cudaStream_t stream) {
  int64_t outer, inner;
  around(partDims, axis, outer, inner);
  int64_t chunk = partDims[axis] * inner;
  slabKernel<<<blocksFor(outer * chunk), kThreads, 0, stream>>>(
      load(part), store(y), outer, chunk, yAxisSize * inner, offset * inner,
      true);
  return cudaGetLastError();
}

cudaError_t splitPart(Ref x, const Dims &xDims, int64_t axis, int64_t offset,
                      MutRef part, const Dims &partDims, cudaStream_t stream) {
  int64_t outer, inner;
  around(partDims, axis, outer, inner);
  int64_t chunk = partDims[axis] * inner;
  slabKernel<<<blocksFor(outer * chunk), kThreads, 0, stream>>>(
      load(x), store(part), outer, chunk, xDims[axis] * inner, offset * inner,
      false);
  return cudaGetLastError();
}

cudaError_t activation(Ref x, MutRef y, int64_t n, Activation a,
                       cudaStream_t stream) {
  if (n < 0)
    return cudaErrorInvalidValue;
  if (vectorPath(x.type, {x, asRef(y)}, n)) {
    MT_VECTOR_LAUNCH(x.type, n, map1Kernel<T>, static_cast<const T *>(x.data),
                     static_cast<T *>(y.data), vectors, ActF{a});
    return cudaGetLastError();
  }
  activationKernel<<<blocksFor(n), kThreads, 0, stream>>>(load(x), store(y), n,
                                                          a);
  return cudaGetLastError();
}

cudaError_t activationGrad(Ref x, Ref dy, MutRef dx, int64_t n, Activation a,
                           cudaStream_t stream) {
  if (n < 0)
    return cudaErrorInvalidValue;
  if (vectorPath(x.type, {x, dy, asRef(dx)}, n)) {
    MT_VECTOR_LAUNCH(x.type, n, map2Kernel<T>, static_cast<const T *>(x.data),
                     static_cast<const T *>(dy.data), static_cast<T *>(dx.data),
                     vectors, ActGradF{a});
    return cudaGetLastError();
  }
  activationGradKernel<<<blocksFor(n), kThreads, 0, stream>>>(load(x), load(dy),
                                                              store(dx), n, a);
  return cudaGetLastError();
}

cudaError_t gated(Ref gate, Ref up, MutRef y, int64_t n, Activation a,
                  cudaStream_t stream) {
  if (n < 0)
    return cudaErrorInvalidValue;
  if (vectorPath(gate.type, {gate, up, asRef(y)}, n)) {
    MT_VECTOR_LAUNCH(gate.type, n, map2Kernel<T>,
                     static_cast<const T *>(gate.data),
                     static_cast<const T *>(up.data), static_cast<T *>(y.data),
                     vectors, GatedF{a});
    return cudaGetLastError();
  }
  gatedKernel<<<blocksFor(n), kThreads, 0, stream>>>(load(gate), load(up),
                                                     store(y), n, a);
  return cudaGetLastError();
}

cudaError_t gatedGrad(Ref gate, Ref up, Ref dy, MutRef dGate, MutRef dUp,
                      int64_t n, Activation a, cudaStream_t stream) {
  if (n < 0)
    return cudaErrorInvalidValue;
  if (vectorPath(gate.type, {gate, up, dy, asRef(dGate), asRef(dUp)}, n)) {
    MT_VECTOR_LAUNCH(
        gate.type, n, gatedGradVectorKernel<T>,
        static_cast<const T *>(gate.data), static_cast<const T *>(up.data),
        static_cast<const T *>(dy.data), static_cast<T *>(dGate.data),
        static_cast<T *>(dUp.data), vectors, a);
    return cudaGetLastError();
  }
  gatedGradKernel<<<blocksFor(n), kThreads, 0, stream>>>(
      load(gate), load(up), load(dy), store(dGate), store(dUp), n, a);
  return cudaGetLastError();
}

cudaError_t embedding(Ref table, const int64_t *ids, int64_t count,
                      int64_t vocab, int64_t dim, MutRef out, int *badId,
                      cudaStream_t stream) {
  if (count < 0 || vocab <= 0 || dim <= 0 || (count > 0 && !ids))
    return cudaErrorInvalidValue;
  embeddingKernel<<<blocksFor(count * dim), kThreads, 0, stream>>>(
      load(table), ids, count, vocab, dim, store(out), badId);
  return cudaGetLastError();
}

namespace {
/// The grouping of ids by place (embedding and gather gradients): counts
/// and starts [places + 1] ints; keys, sorted keys, order and sorted order
/// [count] ints; the sort's own.
struct Grouping {
  int *counts, *starts, *keys, *sortedKeys, *order, *sorted;
  void *sortTemp;
  size_t sortBytes, total;
  Grouping(void *base, int64_t places, int64_t count, size_t sortBytes)
      : sortBytes(sortBytes) {
    char *w = static_cast<char *>(base);
    size_t v = alignUp(size_t(places + 1) * sizeof(int));
    size_t c = alignUp(size_t(count) * sizeof(int));
    counts = reinterpret_cast<int *>(w);
    starts = reinterpret_cast<int *>(w + v);
    keys = reinterpret_cast<int *>(w + 2 * v);
    sortedKeys = reinterpret_cast<int *>(w + 2 * v + c);
    order = reinterpret_cast<int *>(w + 2 * v + 2 * c);
    sorted = reinterpret_cast<int *>(w + 2 * v + 3 * c);
    sortTemp = w + 2 * v + 4 * c;
    total = 2 * v + 4 * c + alignUp(sortBytes);
  }
};

/// The sort, the counts and the row starts index in int.
bool groupingFits(int64_t places, int64_t count) {
  return places > 0 && count >= 0 && places < INT32_MAX && count <= INT32_MAX;
}

/// Bits of the sort keys: places up to `places` (outside ones are places).
int keyBits(int64_t places) {
  int bits = 1;
  while (bits < 31 && (int64_t(1) << bits) <= places)
    ++bits;
  return bits;
}

cudaError_t sortBytes(int64_t places, int64_t count, size_t &bytes) {
  bytes = 0;
  return cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const int *>(nullptr),
      static_cast<int *>(nullptr), static_cast<const int *>(nullptr),
      static_cast<int *>(nullptr), int(count), 0, keyBits(places));
}

/// dx [outer, places, inner] = dy [outer, count, inner]'s slices summed
/// into the places their ids name, in id order: the ids grouped by place,
/// then a block per row of dx.
cudaError_t groupedSum(Load dy, const int64_t *ids, int64_t outer,
                       int64_t places, int64_t count, int64_t inner, bool wrap,
                       Store dx, int *bad, void *workspace,
                       cudaStream_t stream) {
  if (outer < 0 || inner < 0)
    return cudaErrorInvalidValue;
  const int *starts = nullptr, *order = nullptr;
  if (cudaError_t e = groupIds(ids, count, places, wrap, bad, workspace, starts,
                               order, stream))
    return e;
  int64_t rows = outer * places;
  if (rows == 0 || inner == 0)
    return cudaSuccess;
  unsigned blocks = unsigned(rows < 65535 * 4 ? rows : 65535 * 4);
  groupedSumKernel<<<blocks, kThreads, 0, stream>>>(dy, outer, places, count,
                                                    inner, starts, order, dx);
  return cudaGetLastError();
}
} // namespace

cudaError_t groupingBytes(int64_t places, int64_t count, size_t &bytes) {
  if (!groupingFits(places, count))
    return cudaErrorInvalidValue;
  size_t sort = 0;
  if (cudaError_t e = sortBytes(places, count, sort))
    return e;
  bytes = Grouping(nullptr, places, count, sort).total;
  return cudaSuccess;
}

cudaError_t groupIds(const int64_t *ids, int64_t count, int64_t places,
                     bool wrap, int *bad, void *workspace, const int *&starts,
                     const int *&order, cudaStream_t stream) {
  if (!groupingFits(places, count) || (count > 0 && !ids) || !workspace)
    return cudaErrorInvalidValue;
  size_t sort = 0;
  if (cudaError_t e = sortBytes(places, count, sort))
    return e;
  Grouping w(workspace, places, count, sort);
  starts = w.starts;
  order = w.sorted;
  if (cudaError_t e = cudaMemsetAsync(w.counts, 0,
                                      size_t(places + 1) * sizeof(int), stream))
    return e;
  sortKeysKernel<<<blocksFor(count), kThreads, 0, stream>>>(
      ids, count, places, wrap, bad, w.keys, w.order);
  countIdsKernel<<<blocksFor(count), kThreads, 0, stream>>>(ids, count, places,
                                                            wrap, w.counts);
  scanKernel<<<1, kScanThreads, 0, stream>>>(w.counts, places, w.starts);
  if (cudaError_t e = cub::DeviceRadixSort::SortPairs(
          w.sortTemp, w.sortBytes, w.keys, w.sortedKeys, w.order, w.sorted,
          int(count), 0, keyBits(places), stream))
    return e;
  return cudaGetLastError();
}

cudaError_t embeddingGradWorkspaceBytes(int64_t vocab, int64_t count,
                                        size_t &bytes) {
  return groupingBytes(vocab, count, bytes);
}

cudaError_t embeddingGrad(Ref dOut, const int64_t *ids, int64_t count,
                          int64_t vocab, int64_t dim, MutRef dTable,
                          void *workspace, cudaStream_t stream) {
  if (dim <= 0)
    return cudaErrorInvalidValue;
  return groupedSum(load(dOut), ids, 1, vocab, count, dim, /*wrap=*/false,
                    store(dTable), nullptr, workspace, stream);
}

cudaError_t gatherGradWorkspaceBytes(int64_t places, int64_t count,
                                     size_t &bytes) {
  return groupingBytes(places, count, bytes);
}

cudaError_t gatherGrad(Ref dy, const Dims &dims, int64_t axis,
                       const int64_t *indices, int64_t count, MutRef dx,
                       int *bad, void *workspace, cudaStream_t stream) {
  if (axis < 0 || size_t(axis) >= dims.size())
    return cudaErrorInvalidValue;
  int64_t outer, n, inner;
  cpu::linesAlong(dims, axis, outer, n, inner);
  if (n == 0) // nothing to gather from, nothing to write
    return count == 0 ? cudaSuccess : cudaErrorInvalidValue;
  return groupedSum(load(dy), indices, outer, n, count, inner, /*wrap=*/true,
                    store(dx), bad, workspace, stream);
}

cudaError_t rotary(Ref x, Ref cos, Ref sin, const RotaryShape &s,
                   bool transpose, MutRef y, cudaStream_t stream) {
  if (s.batch < 0 || s.seq < 0 || s.heads < 0 || s.headDim <= 0 ||
      s.headDim % 2)
    return cudaErrorInvalidValue;
  int64_t pairs = s.batch * s.seq * s.heads * (s.headDim / 2);
  rotaryKernel<<<blocksFor(pairs), kThreads, 0, stream>>>(
      load(x), load(cos), load(sin), s, transpose, store(y));
  return cudaGetLastError();
}

} // namespace mt::kernels::cuda
