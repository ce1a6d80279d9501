// CPU kernels of primitive ops (see primitive_ops.h).
#include "kernels/cpu/primitive_ops.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vector_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace mt::kernels::cpu {
namespace {

int64_t count(const Dims &d) {
  int64_t n = 1;
  for (int64_t x : d)
    n *= x;
  return n;
}

/// Calls fn(flat, idx) for every multi-index of dims, in row-major order.
template <typename Fn> void forEach(const Dims &dims, Fn fn) {
  int64_t n = count(dims), rank = int64_t(dims.size());
  Dims idx(rank, 0);
  for (int64_t k = 0; k < n; ++k) {
    fn(k, idx);
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++idx[d] < dims[d])
        break;
      idx[d] = 0;
    }
  }
}

/// Flat index into a tensor of `dims` broadcast to an index of outDims.
struct Broadcast {
  Broadcast(const Dims &dims, const Dims &outDims)
      : off(int64_t(outDims.size()) - int64_t(dims.size())),
        stride(outDims.size(), 0) {
    int64_t s = 1;
    for (int64_t d = int64_t(dims.size()) - 1; d >= 0; --d) {
      stride[d + off] = dims[d] == 1 ? 0 : s;
      s *= dims[d];
    }
  }
  int64_t operator()(const Dims &idx) const {
    int64_t f = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      f += idx[d] * stride[d];
    return f;
  }
  int64_t off;
  Dims stride;
};

} // namespace

namespace {
/// Whether x (of `dims`) is, broadcast to outDims, a block repeated along
/// the leading dims: its dims after leading 1s equal outDims' last ones.
/// `inner` gets the block's elements.
bool repeatsAlongLeadingDims(const Dims &dims, const Dims &outDims,
                             int64_t &inner) {
  size_t first = 0;
  while (first < dims.size() && dims[first] == 1)
    ++first;
  size_t kept = dims.size() - first;
  if (kept > outDims.size())
    return false;
  inner = 1;
  for (size_t d = 0; d < kept; ++d) {
    if (dims[first + d] != outDims[outDims.size() - kept + d])
      return false;
    inner *= dims[first + d];
  }
  return true;
}

} // namespace

void binaryForward(Binary op, const float *a, const Dims &aDims, const float *b,
                   const Dims &bDims, float *out, const Dims &outDims) {
  // The shapes of a training step (residual adds, scales, biases) as flat
  // loops over rows on the pool: each operand the whole output or a block
  // repeated along the leading dims. Anything else by multi-index.
  int64_t n = count(outDims), aInner, bInner;
  if (n > 0 && repeatsAlongLeadingDims(aDims, outDims, aInner) &&
      repeatsAlongLeadingDims(bDims, outDims, bInner) &&
      std::max(aInner, bInner) % std::min(aInner, bInner) == 0) {
    // Rows of the smaller block (or of 16 Ki elements when neither
    // repeats): within a row both operands are contiguous.
    int64_t row = std::min(aInner, bInner);
    if (row == n)
      row = std::min<int64_t>(n, 1 << 14);
    parallelFor((n + row - 1) / row, 2.0 * row, [&](int64_t r) {
      int64_t begin = r * row, len = std::min(row, n - begin);
      const float *ar = a + begin % aInner, *br = b + begin % bInner;
      float *o = out + begin;
      forRange(0, len,
               [&](int64_t i) { o[i] = applyBinary(op, ar[i], br[i]); });
    });
    return;
  }
  Broadcast ia(aDims, outDims), ib(bDims, outDims);
  forEach(outDims, [&](int64_t k, const Dims &idx) {
    out[k] = applyBinary(op, a[ia(idx)], b[ib(idx)]);
  });
}

/// body(begin, end) over n elements in blocks of 16 Ki on the pool.
template <typename Body> void unaryBlocks(int64_t n, Body body) {
  constexpr int64_t kBlock = 1 << 14;
  parallelFor((n + kBlock - 1) / kBlock, 20.0 * kBlock, [&](int64_t blk) {
    int64_t begin = blk * kBlock;
    body(begin, std::min(n, begin + kBlock));
  });
}

void unaryForward(const UnaryParams &f, const float *x, float *y, int64_t n) {
  unaryBlocks(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      y[i] = applyUnary(f, x[i]);
  });
}

void unaryBackward(const UnaryParams &f, const float *x, const float *dy,
                   float *dx, int64_t n) {
  unaryBlocks(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      dx[i] = applyUnaryGrad(f, x[i], dy[i]);
  });
}

void batchMatmul(const float *a, const Dims &aDims, const float *b,
                 const Dims &bDims, float *out, const Dims &outDims) {
  size_t rank = outDims.size();
  int64_t m = outDims[rank - 2], n = outDims[rank - 1],
          k = aDims[aDims.size() - 1];
  Dims batch(outDims.begin(), outDims.end() - 2),
      aBatch(aDims.begin(), aDims.end() - 2),
      bBatch(bDims.begin(), bDims.end() - 2);
  Broadcast ia(aBatch, batch), ib(bBatch, batch);
  // One matrix product per batch index on the pool, each a single BLAS
  // call writing only its own block of out.
  runOnPool(count(batch), [&](int64_t t) {
    Dims idx(batch.size());
    for (int64_t d = int64_t(batch.size()) - 1, r = t; d >= 0; --d) {
      idx[d] = r % batch[d];
      r /= batch[d];
    }
    sgemm(false, false, m, n, k, 1.0f, a + ia(idx) * m * k, k,
          b + ib(idx) * k * n, n, 0.0f, out + t * m * n, n);
  });
}

void expand(const float *x, const Dims &dims, float *out, const Dims &outDims) {
  Broadcast ix(dims, outDims);
  forEach(outDims, [&](int64_t k, const Dims &idx) { out[k] = x[ix(idx)]; });
}

void softmax(const float *x, const Dims &dims, int64_t axis, float *y,
             bool log) {
  int64_t outer, n, inner;
  linesAlong(dims, axis, outer, n, inner);
  // Each (outer, inner) line on its own: max, exponentials, their sum.
  parallelFor(outer * inner, 4.0 * n, [&](int64_t line) {
    int64_t o = line / inner, i = line % inner;
    const float *xl = x + o * n * inner + i;
    float *yl = y + o * n * inner + i;
    float maxValue = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j)
      maxValue = std::max(maxValue, xl[j * inner]);
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      float e = std::exp(xl[j * inner] - maxValue);
      if (!log)
        yl[j * inner] = e;
      sum += e;
    }
    if (log) {
      double shift = double(maxValue) + std::log(sum);
      for (int64_t j = 0; j < n; ++j)
        yl[j * inner] = float(double(xl[j * inner]) - shift);
      return;
    }
    float inv = float(1.0 / sum);
    for (int64_t j = 0; j < n; ++j)
      yl[j * inner] *= inv;
  });
}

namespace {
/// Sums (in double) or maxima (a NaN wins).
struct Accumulator {
  bool max;
  double start() const {
    return max ? -std::numeric_limits<double>::infinity() : 0.0;
  }
  double add(double acc, float v) const {
    if (!max)
      return acc + v;
    return v != v || v > acc ? double(v) : acc;
  }
};

/// The sum (or maximum) over `axes` times `scale`. Reduced axes that are
/// one run of consecutive dims (a norm's last dim, a bias's leading ones)
/// are lines [outer, n, inner] on the pool; any other set by multi-index.
void reduce(const float *x, const Dims &dims, const std::vector<int64_t> &axes,
            Accumulator a, double scale, float *out) {
  int64_t rank = int64_t(dims.size());
  std::vector<bool> reduced(rank, axes.empty());
  for (int64_t a : axes)
    reduced[a < 0 ? a + rank : a] = true;
  int64_t first = 0;
  while (first < rank && !reduced[first])
    ++first;
  int64_t last = first;
  while (last < rank && reduced[last])
    ++last;
  bool oneRun = std::none_of(reduced.begin() + last, reduced.end(),
                             [](bool r) { return r; });
  if (oneRun) {
    int64_t outer = 1, n = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d)
      (d < first ? outer : d < last ? n : inner) *= dims[d];
    parallelFor(outer * inner, 2.0 * n, [&](int64_t line) {
      int64_t o = line / inner, i = line % inner;
      const float *xl = x + o * n * inner + i;
      double acc = a.start();
      for (int64_t j = 0; j < n; ++j)
        acc = a.add(acc, xl[j * inner]);
      out[line] = float(acc * scale);
    });
    return;
  }
  Dims kept(dims);
  for (int64_t d = 0; d < rank; ++d)
    if (reduced[d])
      kept[d] = 1;
  std::vector<double> acc(count(kept), a.start());
  Broadcast io(kept, dims);
  forEach(dims, [&](int64_t k, const Dims &idx) {
    double &s = acc[io(idx)];
    s = a.add(s, x[k]);
  });
  for (size_t i = 0; i < acc.size(); ++i)
    out[i] = float(acc[i] * scale);
}
} // namespace

void reduceSum(const float *x, const Dims &dims,
               const std::vector<int64_t> &axes, float *out) {
  reduce(x, dims, axes, Accumulator{false}, 1.0, out);
}

void reduceMax(const float *x, const Dims &dims,
               const std::vector<int64_t> &axes, float *out) {
  reduce(x, dims, axes, Accumulator{true}, 1.0, out);
}

void compareForward(Compare op, const float *a, const Dims &aDims,
                    const float *b, const Dims &bDims, uint8_t *out,
                    const Dims &outDims) {
  Broadcast ia(aDims, outDims), ib(bDims, outDims);
  forEach(outDims, [&](int64_t k, const Dims &idx) {
    out[k] = applyCompare(op, a[ia(idx)], b[ib(idx)]) ? 1 : 0;
  });
}

void logicForward(Logic op, const uint8_t *a, const Dims &aDims,
                  const uint8_t *b, const Dims &bDims, uint8_t *out,
                  const Dims &outDims) {
  Broadcast ia(aDims, outDims), ib(op == Logic::Not ? aDims : bDims, outDims);
  const uint8_t *second = op == Logic::Not ? a : b;
  forEach(outDims, [&](int64_t k, const Dims &idx) {
    out[k] = applyLogic(op, a[ia(idx)] != 0, second[ib(idx)] != 0) ? 1 : 0;
  });
}

void reduceMean(const float *x, const Dims &dims,
                const std::vector<int64_t> &axes, float *out) {
  // Elements in each mean (none: 0 / 0, NaN, as PyTorch's).
  int64_t rank = int64_t(dims.size()), each = 1;
  for (int64_t d = 0; d < rank; ++d)
    if (axes.empty() || std::count(axes.begin(), axes.end(), d) ||
        std::count(axes.begin(), axes.end(), d - rank))
      each *= dims[d];
  reduce(x, dims, axes, Accumulator{false}, 1.0 / double(each), out);
}

void isNaN(const float *x, uint8_t *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = std::isnan(x[i]) ? 1 : 0;
}

void where(const uint8_t *cond, const Dims &condDims, const float *a,
           const Dims &aDims, const float *b, const Dims &bDims, float *out,
           const Dims &outDims) {
  Broadcast ic(condDims, outDims), ia(aDims, outDims), ib(bDims, outDims);
  forEach(outDims, [&](int64_t k, const Dims &idx) {
    out[k] = cond[ic(idx)] ? a[ia(idx)] : b[ib(idx)];
  });
}

namespace {
/// The offset in a tensor of `dims` of slice element `idx`, and the stride
/// of each slice dim in it.
struct SliceIndex {
  SliceIndex(const Dims &dims, const std::vector<int64_t> &starts,
             const std::vector<int64_t> &steps)
      : stride(dims.size()) {
    int64_t s = 1;
    for (int64_t d = int64_t(dims.size()) - 1; d >= 0; --d) {
      base += starts[d] * s;
      stride[d] = steps[d] * s;
      s *= dims[d];
    }
  }
  int64_t operator()(const Dims &idx) const {
    int64_t f = base;
    for (size_t d = 0; d < idx.size(); ++d)
      f += idx[d] * stride[d];
    return f;
  }
  int64_t base = 0;
  Dims stride;
};
} // namespace

namespace {
template <typename T>
void sliceOf(const T *x, const Dims &dims, const std::vector<int64_t> &starts,
             const std::vector<int64_t> &steps, T *out, const Dims &outDims) {
  SliceIndex at(dims, starts, steps);
  forEach(outDims, [&](int64_t k, const Dims &idx) { out[k] = x[at(idx)]; });
}
} // namespace

void slice(const float *x, const Dims &dims, const std::vector<int64_t> &starts,
           const std::vector<int64_t> &steps, float *out, const Dims &outDims) {
  sliceOf(x, dims, starts, steps, out, outDims);
}

void slice(const int64_t *x, const Dims &dims,
           const std::vector<int64_t> &starts,
           const std::vector<int64_t> &steps, int64_t *out,
           const Dims &outDims) {
  sliceOf(x, dims, starts, steps, out, outDims);
}

void sliceGrad(const float *dy, const Dims &dyDims,
               const std::vector<int64_t> &starts,
               const std::vector<int64_t> &steps, float *dx,
               const Dims &dxDims) {
  std::fill_n(dx, count(dxDims), 0.0f);
  SliceIndex at(dxDims, starts, steps);
  forEach(dyDims, [&](int64_t k, const Dims &idx) { dx[at(idx)] = dy[k]; });
}

void pad(const float *x, const Dims &dims, const std::vector<int64_t> &begins,
         float value, float *out, const Dims &outDims) {
  size_t rank = outDims.size();
  if (rank == 0) {
    out[0] = x[0];
    return;
  }
  int64_t width = outDims[rank - 1], xWidth = dims[rank - 1],
          shift = begins[rank - 1];
  if (width == 0)
    return;
  // Columns [lo, hi) of each result row read x's columns [lo - shift,
  // hi - shift); the rest of the row, and rows outside x, are `value`.
  int64_t lo = std::clamp<int64_t>(shift, 0, width),
          hi = std::clamp<int64_t>(shift + xWidth, lo, width);
  parallelFor(count(outDims) / width, double(width), [&](int64_t row) {
    float *o = out + row * width;
    int64_t rest = row, from = 0, stride = 1;
    bool inside = hi > lo;
    for (size_t d = rank - 1; d-- > 0;) {
      int64_t i = rest % outDims[d] - begins[d];
      rest /= outDims[d];
      inside = inside && i >= 0 && i < dims[d];
      from += i * stride;
      stride *= dims[d];
    }
    if (!inside) {
      std::fill_n(o, width, value);
      return;
    }
    std::fill_n(o, lo, value);
    std::copy_n(x + from * xWidth + (lo - shift), hi - lo, o + lo);
    std::fill_n(o + hi, width - hi, value);
  });
}

void topK(const float *x, const Dims &dims, int64_t axis, int64_t k,
          bool smallest, float *values, int64_t *indices) {
  int64_t outer, n, inner;
  linesAlong(dims, axis, outer, n, inner);
  parallelFor(outer * inner, double(n) * 4.0, [&](int64_t l) {
    int64_t o = l / inner, c = l % inner;
    const float *line = x + o * n * inner + c;
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      order[size_t(i)] = i;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int64_t a, int64_t b) {
                        return topKBefore(line[a * inner], a, line[b * inner],
                                          b, smallest);
                      });
    for (int64_t j = 0; j < k; ++j) {
      int64_t at = (o * k + j) * inner + c;
      values[at] = line[order[size_t(j)] * inner];
      indices[at] = order[size_t(j)];
    }
  });
}

namespace {
/// Whether every one of `count` indices is inside an axis of n.
bool insideAxis(const int64_t *indices, int64_t count, int64_t n) {
  for (int64_t i = 0; i < count; ++i)
    if (elementIndex(indices[i], n) < 0)
      return false;
  return true;
}
} // namespace

bool gatherElements(const float *x, const Dims &dims, int64_t axis,
                    const int64_t *indices, int64_t k, float *out) {
  int64_t outer, n, inner;
  linesAlong(dims, axis, outer, n, inner);
  if (!insideAxis(indices, outer * k * inner, n))
    return false;
  parallelFor(outer * k * inner, 1.0, [&](int64_t at) {
    int64_t o = at / (k * inner), c = at % inner;
    out[at] = x[(o * n + elementIndex(indices[at], n)) * inner + c];
  });
  return true;
}

bool gatherElementsGrad(const float *dy, const int64_t *indices,
                        const Dims &dims, int64_t axis, int64_t k, float *dx) {
  int64_t outer, n, inner;
  linesAlong(dims, axis, outer, n, inner);
  if (!insideAxis(indices, outer * k * inner, n))
    return false;
  std::fill_n(dx, outer * n * inner, 0.0f);
  // Each line on its own, its k places in order: the same sums every run.
  parallelFor(outer * inner, double(k), [&](int64_t l) {
    int64_t o = l / inner, c = l % inner;
    for (int64_t j = 0; j < k; ++j) {
      int64_t at = (o * k + j) * inner + c;
      dx[(o * n + elementIndex(indices[at], n)) * inner + c] += dy[at];
    }
  });
  return true;
}

bool scatterElements(const float *x, const Dims &dims, int64_t axis,
                     const int64_t *indices, const float *updates, int64_t k,
                     float *out) {
  int64_t outer, n, inner;
  linesAlong(dims, axis, outer, n, inner);
  if (!insideAxis(indices, outer * k * inner, n))
    return false;
  if (out != x)
    std::copy_n(x, outer * n * inner, out);
  parallelFor(outer * inner, double(k), [&](int64_t l) {
    int64_t o = l / inner, c = l % inner;
    for (int64_t j = 0; j < k; ++j) {
      int64_t at = (o * k + j) * inner + c;
      out[(o * n + elementIndex(indices[at], n)) * inner + c] = updates[at];
    }
  });
  return true;
}

void trilu(const float *x, const Dims &dims, bool upper, int64_t diagonal,
           float *out) {
  size_t rank = dims.size();
  int64_t rows = dims[rank - 2], cols = dims[rank - 1];
  if (rows == 0 || cols == 0)
    return;
  // Row i keeps columns [i + diagonal, cols) (upper) or [0, i + diagonal
  // + 1) (lower): one contiguous run, the rest zeros.
  parallelFor(count(dims) / cols, double(cols), [&](int64_t line) {
    int64_t i = line % rows;
    int64_t edge = std::clamp<int64_t>(i + diagonal + (upper ? 0 : 1), 0, cols);
    const float *xl = x + line * cols;
    float *ol = out + line * cols;
    int64_t lo = upper ? edge : 0, hi = upper ? cols : edge;
    std::fill_n(ol, lo, 0.0f);
    std::copy(xl + lo, xl + hi, ol + lo);
    std::fill(ol + hi, ol + cols, 0.0f);
  });
}

void cumSum(const float *x, const Dims &dims, int64_t axis, bool exclusive,
            bool reverse, float *out) {
  int64_t outer, n, inner;
  linesAlong(dims, axis, outer, n, inner);
  if (n == 0)
    return;
  // A block of `inner` lines at a time: each step along the axis adds a
  // contiguous row of them, which vectorizes.
  parallelFor(outer, double(n * inner), [&](int64_t o) {
    std::vector<float> sum(size_t(inner), 0.0f);
    for (int64_t s = 0; s < n; ++s) {
      int64_t at = (o * n + (reverse ? n - 1 - s : s)) * inner;
      for (int64_t c = 0; c < inner; ++c) {
        float v = x[at + c];
        if (!exclusive)
          sum[size_t(c)] += v;
        out[at + c] = sum[size_t(c)];
        if (exclusive)
          sum[size_t(c)] += v;
      }
    }
  });
}

void tile(const float *x, const Dims &dims, float *out, const Dims &outDims) {
  size_t rank = outDims.size();
  if (rank == 0) {
    out[0] = x[0];
    return;
  }
  int64_t width = outDims[rank - 1], xWidth = dims[rank - 1];
  if (count(outDims) == 0)
    return;
  // Each result row repeats one row of x along the last dim.
  parallelFor(count(outDims) / width, double(width), [&](int64_t row) {
    int64_t rest = row, from = 0, stride = 1;
    for (size_t d = rank - 1; d-- > 0;) {
      from += (rest % outDims[d]) % dims[d] * stride;
      rest /= outDims[d];
      stride *= dims[d];
    }
    const float *xr = x + from * xWidth;
    float *o = out + row * width;
    for (int64_t c = 0; c < width; c += xWidth)
      std::copy_n(xr, xWidth, o + c);
  });
}

namespace {
bool validIndices(const int64_t *indices, int64_t count, int64_t n) {
  for (int64_t i = 0; i < count; ++i)
    if (indices[i] < -n || indices[i] >= n)
      return false;
  return true;
}
} // namespace

bool gather(const float *x, const Dims &dims, int64_t axis,
            const int64_t *indices, int64_t count, float *out) {
  int64_t outer, n, inner;
  linesAlong(dims, axis, outer, n, inner);
  if (!validIndices(indices, count, n))
    return false;
  parallelFor(outer * count, double(inner), [&](int64_t r) {
    int64_t o = r / count, i = indices[r % count];
    std::copy_n(x + (o * n + (i < 0 ? i + n : i)) * inner, inner,
                out + r * inner);
  });
  return true;
}

bool gatherGrad(const float *dy, const Dims &dims, int64_t axis,
                const int64_t *indices, int64_t count, float *dx) {
  int64_t outer, n, inner;
  linesAlong(dims, axis, outer, n, inner);
  if (!validIndices(indices, count, n))
    return false;
  std::fill_n(dx, outer * n * inner, 0.0f);
  // Each outer block on its own, its indices in order: the same sums every
  // run.
  parallelFor(outer, double(count * inner), [&](int64_t o) {
    for (int64_t r = 0; r < count; ++r) {
      int64_t i = indices[r] < 0 ? indices[r] + n : indices[r];
      float *to = dx + (o * n + i) * inner;
      const float *from = dy + (o * count + r) * inner;
      for (int64_t c = 0; c < inner; ++c)
        to[c] += from[c];
    }
  });
  return true;
}

namespace {
/// dims as [dims[0] * ... * dims[k-1], dims[k:]...], and each k-tuple of
/// indices as one index into its first dim; false when an index is outside
/// its dim.
bool flattenTuples(const Dims &dims, const int64_t *indices, int64_t tuples,
                   int64_t k, Dims &flatDims, std::vector<int64_t> &flat) {
  int64_t lead = 1;
  for (int64_t d = 0; d < k; ++d)
    lead *= dims[size_t(d)];
  flatDims.assign(1, lead);
  flatDims.insert(flatDims.end(), dims.begin() + k, dims.end());
  flat.resize(size_t(tuples));
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t at = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t i = indices[t * k + j], n = dims[size_t(j)];
      if (i < -n || i >= n)
        return false;
      at = at * n + (i < 0 ? i + n : i);
    }
    flat[size_t(t)] = at;
  }
  return true;
}
} // namespace

bool gatherND(const float *x, const Dims &dims, const int64_t *indices,
              int64_t tuples, int64_t k, float *out) {
  Dims flatDims;
  std::vector<int64_t> flat;
  return flattenTuples(dims, indices, tuples, k, flatDims, flat) &&
         gather(x, flatDims, 0, flat.data(), tuples, out);
}

bool gatherNDGrad(const float *dy, const Dims &dims, const int64_t *indices,
                  int64_t tuples, int64_t k, float *dx) {
  Dims flatDims;
  std::vector<int64_t> flat;
  return flattenTuples(dims, indices, tuples, k, flatDims, flat) &&
         gatherGrad(dy, flatDims, 0, flat.data(), tuples, dx);
}

void transpose(const float *x, const Dims &dims,
               const std::vector<int64_t> &perm, float *out) {
  Dims outDims, inStride(dims.size(), 1);
  for (int64_t d = int64_t(dims.size()) - 2; d >= 0; --d)
    inStride[d] = inStride[d + 1] * dims[d + 1];
  for (int64_t p : perm)
    outDims.push_back(dims[p]);
  forEach(outDims, [&](int64_t k, const Dims &idx) {
    int64_t src = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      src += idx[d] * inStride[perm[d]];
    out[k] = x[src];
  });
}

void concat(const std::vector<const void *> &parts,
            const std::vector<Dims> &partDims, int64_t axis,
            size_t elementBytes, void *out) {
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= partDims[0][d];
  auto *to = static_cast<char *>(out);
  for (int64_t o = 0; o < outer; ++o)
    for (size_t p = 0; p < parts.size(); ++p) {
      // The part's slab after `o` outer rows, in bytes.
      size_t chunk = size_t(count(partDims[p]) / outer) * elementBytes;
      if (chunk != 0) // an empty part may have no storage
        std::memcpy(to, static_cast<const char *>(parts[p]) + size_t(o) * chunk,
                    chunk);
      to += chunk;
    }
}

void split(const void *x, const Dims &dims, int64_t axis, size_t elementBytes,
           const std::vector<void *> &parts,
           const std::vector<Dims> &partDims) {
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= dims[d];
  const auto *from = static_cast<const char *>(x);
  for (int64_t o = 0; o < outer; ++o)
    for (size_t p = 0; p < parts.size(); ++p) {
      size_t chunk = size_t(count(partDims[p]) / outer) * elementBytes;
      if (chunk != 0)
        std::memcpy(static_cast<char *>(parts[p]) + size_t(o) * chunk, from,
                    chunk);
      from += chunk;
    }
}

} // namespace mt::kernels::cpu
