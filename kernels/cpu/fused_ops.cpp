// CPU kernels of the fused ops (see fused_ops.h). Outside the GEMMs the
// loops accumulate in double where a sum runs over a whole row.
#include "kernels/cpu/fused_ops.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vector_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace mt::kernels::cpu {

bool embeddingForward(const float *table, const int64_t *ids, int64_t count,
                      int64_t vocab, int64_t dim, float *out) {
  for (int64_t n = 0; n < count; ++n) {
    if (ids[n] < 0 || ids[n] >= vocab)
      return false;
    std::memcpy(out + n * dim, table + ids[n] * dim, dim * sizeof(float));
  }
  return true;
}

void embeddingBackward(const float *dOut, const int64_t *ids, int64_t count,
                       int64_t vocab, int64_t dim, float *dTable) {
  std::fill_n(dTable, vocab * dim, 0.0f);
  for (int64_t n = 0; n < count; ++n)
    for (int64_t d = 0; d < dim; ++d)
      dTable[ids[n] * dim + d] += dOut[n * dim + d];
}

namespace {

/// C = alpha op(A) op(B) + beta C on the pool: C's rows (or, when it has
/// fewer rows than threads, its columns) in one block per thread, each a
/// single-threaded BLAS call (the BLAS runs with one thread: see gemm.cpp).
/// Each element of C is computed by one call over the whole of k, so the
/// result does not depend on how the blocks fall.
void parallelGemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                  float alpha, const float *a, int64_t lda, const float *b,
                  int64_t ldb, float beta, float *c, int64_t ldc) {
  // Below about 1 MFLOP a block per thread costs more than it saves.
  int64_t blocks = 2.0 * m * n * k < 1e6 ? 1 : threads();
  bool byRows = m >= n || m >= 8 * blocks;
  int64_t extent = byRows ? m : n;
  // Blocks of a multiple of 16 rows or columns: whole micro-kernel tiles.
  int64_t step = std::max<int64_t>(16, (extent / blocks + 15) / 16 * 16);
  int64_t tasks = (extent + step - 1) / step;
  runOnPool(tasks, [&](int64_t t) {
    int64_t lo = t * step, len = std::min(step, extent - lo);
    if (byRows)
      sgemm(transA, transB, len, n, k, alpha, transA ? a + lo : a + lo * lda,
            lda, b, ldb, beta, c + lo * ldc, ldc);
    else
      sgemm(transA, transB, m, len, k, alpha, a, lda,
            transB ? b + lo * ldb : b + lo, ldb, beta, c + lo, ldc);
  });
}

/// dw (+)= the weight gradient of a linear, scaled by beta on what was
/// there: [out, in] = dy^T x when outIn, else [in, out] = x^T dy.
void linearWeightGrad(const float *x, const float *dy, int64_t rows, int64_t in,
                      int64_t out, bool outIn, float beta, float *dw) {
  if (outIn)
    parallelGemm(true, false, out, in, rows, 1.0f, dy, out, x, in, beta, dw,
                 in);
  else
    parallelGemm(true, false, in, out, rows, 1.0f, x, in, dy, out, beta, dw,
                 out);
}

void biasGrad(const float *dy, int64_t rows, int64_t out, float *dbias) {
  parallelFor(out, double(rows), [&](int64_t o) {
    double acc = 0;
    for (int64_t r = 0; r < rows; ++r)
      acc += dy[r * out + o];
    dbias[o] = float(acc);
  });
}

} // namespace

void linearForward(const float *x, const float *w, const float *bias,
                   int64_t rows, int64_t in, int64_t out, bool outIn,
                   float *y) {
  if (bias)
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(bias, out, y + r * out);
  parallelGemm(false, outIn, rows, out, in, 1.0f, x, in, w, outIn ? in : out,
               bias ? 1.0f : 0.0f, y, out);
}

void linearBackward(const float *x, const float *w, const float *dy,
                    int64_t rows, int64_t in, int64_t out, bool outIn,
                    float *dx, float *dw, float *dbias) {
  if (dx)
    parallelGemm(false, !outIn, rows, in, out, 1.0f, dy, out, w,
                 outIn ? in : out, 0.0f, dx, in);
  if (dw)
    linearWeightGrad(x, dy, rows, in, out, outIn, 0.0f, dw);
  if (dbias)
    biasGrad(dy, rows, out, dbias);
}

namespace {
/// The expert an id names (negative from the end), or -1 outside them.
int64_t expertOf(int64_t id, int64_t experts) {
  int64_t e = id < 0 ? id + experts : id;
  return e >= 0 && e < experts ? e : -1;
}
} // namespace

bool groupByExpert(const int64_t *ids, int64_t rows, int64_t experts,
                   std::vector<int64_t> &order, std::vector<int64_t> &offsets) {
  offsets.assign(size_t(experts) + 1, 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t e = expertOf(ids[r], experts);
    if (e < 0)
      return false;
    ++offsets[size_t(e) + 1];
  }
  for (int64_t e = 0; e < experts; ++e)
    offsets[size_t(e) + 1] += offsets[size_t(e)];
  std::vector<int64_t> next(offsets.begin(), offsets.end() - 1);
  order.resize(size_t(rows));
  for (int64_t r = 0; r < rows; ++r)
    order[size_t(next[size_t(expertOf(ids[r], experts))]++)] = r;
  return true;
}

namespace {
/// rows `order[begin, end)` of m [., width] into out [end - begin, width].
void gatherRows(const float *m, const int64_t *order, int64_t count,
                int64_t width, float *out) {
  parallelFor(count, double(width), [&](int64_t i) {
    std::copy_n(m + order[i] * width, width, out + i * width);
  });
}
void scatterRows(const float *in, const int64_t *order, int64_t count,
                 int64_t width, float *m) {
  parallelFor(count, double(width), [&](int64_t i) {
    std::copy_n(in + i * width, width, m + order[i] * width);
  });
}
} // namespace

bool expertLinearForward(const float *x, const int64_t *ids, const float *w,
                         int64_t rows, int64_t experts, int64_t in, int64_t out,
                         bool outIn, float *y) {
  std::vector<int64_t> order, offsets;
  if (!groupByExpert(ids, rows, experts, order, offsets))
    return false;
  std::vector<float> xs, ys;
  for (int64_t e = 0; e < experts; ++e) {
    int64_t begin = offsets[size_t(e)], n = offsets[size_t(e) + 1] - begin;
    if (n == 0)
      continue;
    xs.resize(size_t(n * in));
    ys.resize(size_t(n * out));
    gatherRows(x, order.data() + begin, n, in, xs.data());
    linearForward(xs.data(), w + e * in * out, nullptr, n, in, out, outIn,
                  ys.data());
    scatterRows(ys.data(), order.data() + begin, n, out, y);
  }
  return true;
}

bool expertLinearBackward(const float *x, const int64_t *ids, const float *w,
                          const float *dy, int64_t rows, int64_t experts,
                          int64_t in, int64_t out, bool outIn, float *dx,
                          float *dw) {
  std::vector<int64_t> order, offsets;
  if (!groupByExpert(ids, rows, experts, order, offsets))
    return false;
  std::vector<float> xs, dys, dxs;
  for (int64_t e = 0; e < experts; ++e) {
    int64_t begin = offsets[size_t(e)], n = offsets[size_t(e) + 1] - begin;
    float *dwe = dw + e * in * out;
    if (n == 0) {
      std::fill_n(dwe, in * out, 0.0f);
      continue;
    }
    xs.resize(size_t(n * in));
    dxs.resize(size_t(n * in));
    dys.resize(size_t(n * out));
    gatherRows(x, order.data() + begin, n, in, xs.data());
    gatherRows(dy, order.data() + begin, n, out, dys.data());
    linearBackward(xs.data(), w + e * in * out, dys.data(), n, in, out, outIn,
                   dxs.data(), dwe, nullptr);
    scatterRows(dxs.data(), order.data() + begin, n, in, dx);
  }
  return true;
}

namespace reference {
namespace {
/// W[i, o] whatever the layout.
inline float weightAt(const float *w, int64_t i, int64_t o, int64_t in,
                      int64_t out, bool outIn) {
  return outIn ? w[o * in + i] : w[i * out + o];
}
} // namespace

void linearForward(const float *x, const float *w, const float *bias,
                   int64_t rows, int64_t in, int64_t out, bool outIn,
                   float *y) {
  parallelFor(rows, double(in) * out, [&](int64_t r) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = bias ? bias[o] : 0.0;
      for (int64_t i = 0; i < in; ++i)
        acc += double(x[r * in + i]) * weightAt(w, i, o, in, out, outIn);
      y[r * out + o] = float(acc);
    }
  });
}

void linearBackward(const float *x, const float *w, const float *dy,
                    int64_t rows, int64_t in, int64_t out, bool outIn,
                    float *dx, float *dw, float *dbias) {
  if (dx)
    parallelFor(rows, double(in) * out, [&](int64_t r) {
      for (int64_t i = 0; i < in; ++i) {
        double acc = 0;
        for (int64_t o = 0; o < out; ++o)
          acc += double(dy[r * out + o]) * weightAt(w, i, o, in, out, outIn);
        dx[r * in + i] = float(acc);
      }
    });
  if (dw)
    parallelFor(in, double(rows) * out, [&](int64_t i) {
      for (int64_t o = 0; o < out; ++o) {
        double acc = 0;
        for (int64_t r = 0; r < rows; ++r)
          acc += double(dy[r * out + o]) * x[r * in + i];
        (outIn ? dw[o * in + i] : dw[i * out + o]) = float(acc);
      }
    });
  if (dbias)
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (int64_t r = 0; r < rows; ++r)
        acc += dy[r * out + o];
      dbias[o] = float(acc);
    }
}
bool expertLinearForward(const float *x, const int64_t *ids, const float *w,
                         int64_t rows, int64_t experts, int64_t in, int64_t out,
                         bool outIn, float *y) {
  for (int64_t r = 0; r < rows; ++r) {
    int64_t e = expertOf(ids[r], experts);
    if (e < 0)
      return false;
    const float *we = w + e * in * out;
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < in; ++i)
        acc += double(x[r * in + i]) * weightAt(we, i, o, in, out, outIn);
      y[r * out + o] = float(acc);
    }
  }
  return true;
}

bool expertLinearBackward(const float *x, const int64_t *ids, const float *w,
                          const float *dy, int64_t rows, int64_t experts,
                          int64_t in, int64_t out, bool outIn, float *dx,
                          float *dw) {
  std::vector<double> acc(size_t(experts * in * out), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t e = expertOf(ids[r], experts);
    if (e < 0)
      return false;
    const float *we = w + e * in * out;
    for (int64_t i = 0; i < in; ++i) {
      double d = 0;
      for (int64_t o = 0; o < out; ++o) {
        d += double(dy[r * out + o]) * weightAt(we, i, o, in, out, outIn);
        acc[size_t((e * in + i) * out + o)] +=
            double(dy[r * out + o]) * x[r * in + i];
      }
      dx[r * in + i] = float(d);
    }
  }
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < out; ++o) {
        float v = float(acc[size_t((e * in + i) * out + o)]);
        (outIn ? dw[(e * out + o) * in + i] : dw[(e * in + i) * out + o]) = v;
      }
  return true;
}
} // namespace reference

namespace {
double inverseRms(const float *x, int64_t dim, float eps) {
  double sum = 0;
  for (int64_t d = 0; d < dim; ++d)
    sum += double(x[d]) * x[d];
  return 1.0 / std::sqrt(sum / dim + eps);
}
} // namespace

void rmsNormForward(const float *x, const float *w, int64_t rows, int64_t dim,
                    float eps, bool plusOne, float *y) {
  parallelFor(rows, 4.0 * dim, [&](int64_t r) {
    const float *xr = x + r * dim;
    double inv = inverseRms(xr, dim, eps);
    for (int64_t d = 0; d < dim; ++d)
      y[r * dim + d] = float(xr[d] * inv * (plusOne ? 1.0 + w[d] : w[d]));
  });
}

namespace {
/// Columns per task of a norm's weight gradient: each task sums its columns
/// over all rows, in row order.
constexpr int64_t kNormColumns = 64;
} // namespace

void rmsNormBackward(const float *x, const float *w, const float *dy,
                     int64_t rows, int64_t dim, float eps, bool plusOne,
                     float *dx, float *dw) {
  std::vector<double> inv(rows);
  parallelFor(rows, 6.0 * dim, [&](int64_t r) {
    const float *xr = x + r * dim, *dyr = dy + r * dim;
    inv[r] = inverseRms(xr, dim, eps);
    // d/dx of x * inv: inv * g - x * inv^3 / dim * sum(g * x).
    double dot = 0;
    for (int64_t d = 0; d < dim; ++d)
      dot += double(dyr[d]) * (plusOne ? 1.0 + w[d] : w[d]) * xr[d];
    double i = inv[r];
    for (int64_t d = 0; d < dim; ++d) {
      double g = double(dyr[d]) * (plusOne ? 1.0 + w[d] : w[d]);
      dx[r * dim + d] = float(i * g - xr[d] * i * i * i * dot / dim);
    }
  });
  int64_t chunks = (dim + kNormColumns - 1) / kNormColumns;
  parallelFor(chunks, 2.0 * rows * kNormColumns, [&](int64_t c) {
    int64_t begin = c * kNormColumns, end = std::min(dim, begin + kNormColumns);
    std::fill(dw + begin, dw + end, 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = begin; d < end; ++d)
        dw[d] += float(double(dy[r * dim + d]) * x[r * dim + d] * inv[r]);
  });
}

namespace {
void meanAndInvStd(const float *x, int64_t dim, float eps, double &mean,
                   double &inv) {
  double sum = 0, sq = 0;
  for (int64_t d = 0; d < dim; ++d)
    sum += x[d];
  mean = sum / dim;
  for (int64_t d = 0; d < dim; ++d)
    sq += (x[d] - mean) * (x[d] - mean);
  inv = 1.0 / std::sqrt(sq / dim + eps);
}
} // namespace

void layerNormForward(const float *x, const float *w, const float *b,
                      int64_t rows, int64_t dim, float eps, float *y) {
  parallelFor(rows, 6.0 * dim, [&](int64_t r) {
    double mean, inv;
    meanAndInvStd(x + r * dim, dim, eps, mean, inv);
    for (int64_t d = 0; d < dim; ++d)
      y[r * dim + d] =
          float((x[r * dim + d] - mean) * inv * w[d] + (b ? b[d] : 0.0f));
  });
}

void layerNormBackward(const float *x, const float *w, const float *dy,
                       int64_t rows, int64_t dim, float eps, float *dx,
                       float *dw, float *db) {
  std::vector<double> mean(rows), inv(rows);
  parallelFor(rows, 10.0 * dim, [&](int64_t r) {
    const float *xr = x + r * dim, *dyr = dy + r * dim;
    meanAndInvStd(xr, dim, eps, mean[r], inv[r]);
    double sumG = 0, sumGX = 0;
    for (int64_t d = 0; d < dim; ++d) {
      double xhat = (xr[d] - mean[r]) * inv[r], g = double(dyr[d]) * w[d];
      sumG += g;
      sumGX += g * xhat;
    }
    for (int64_t d = 0; d < dim; ++d) {
      double xhat = (xr[d] - mean[r]) * inv[r], g = double(dyr[d]) * w[d];
      dx[r * dim + d] = float(inv[r] * (g - sumG / dim - xhat * sumGX / dim));
    }
  });
  int64_t chunks = (dim + kNormColumns - 1) / kNormColumns;
  parallelFor(chunks, 3.0 * rows * kNormColumns, [&](int64_t c) {
    int64_t begin = c * kNormColumns, end = std::min(dim, begin + kNormColumns);
    std::fill(dw + begin, dw + end, 0.0f);
    if (db)
      std::fill(db + begin, db + end, 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = begin; d < end; ++d) {
        float dyd = dy[r * dim + d];
        dw[d] += float(dyd * ((x[r * dim + d] - mean[r]) * inv[r]));
        if (db)
          db[d] += dyd;
      }
  });
}

namespace {
/// Applies the rotation (or its transpose) to every head of every token.
void rotate(const float *x, const float *cos, const float *sin,
            const RotaryShape &s, bool transpose, float *y) {
  int64_t hd = s.headDim, half = hd / 2, width = s.heads * hd;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t t = 0; t < s.seq; ++t) {
      int64_t row = (s.tablesPerBatch ? b * s.seq + t : t) * hd;
      const float *c = cos + row, *sn = sin + row;
      for (int64_t h = 0; h < s.heads; ++h) {
        const float *xh = x + (b * s.seq + t) * width + h * hd;
        float *yh = y + (b * s.seq + t) * width + h * hd;
        for (int64_t i = 0; i < half; ++i) {
          // The pair (a, p) rotates by the angle at each of its two indices.
          int64_t a = s.interleaved ? 2 * i : i;
          int64_t p = s.interleaved ? 2 * i + 1 : i + half;
          float xa = xh[a], xp = xh[p];
          if (!transpose) {
            yh[a] = xa * c[a] - xp * sn[a];
            yh[p] = xp * c[p] + xa * sn[p];
          } else {
            yh[a] = xa * c[a] + xp * sn[p];
            yh[p] = xp * c[p] - xa * sn[a];
          }
        }
      }
    }
}
} // namespace

void rotaryForward(const float *x, const float *cos, const float *sin,
                   const RotaryShape &s, float *y) {
  rotate(x, cos, sin, s, false, y);
}

void rotaryBackward(const float *dy, const float *cos, const float *sin,
                    const RotaryShape &s, float *dx) {
  rotate(dy, cos, sin, s, true, dx);
}

namespace {
bool masked(const AttentionShape &s, int64_t i, int64_t j) {
  return (s.causal && j > i) || (s.window > 0 && i - j >= s.window);
}

/// The additive mask's row for query i of head (b, h), broadcast over
/// batch and heads where the mask has 1 of them; null without a mask.
const float *maskRow(const float *mask, const AttentionShape &s, int64_t b,
                     int64_t h, int64_t i) {
  if (!mask)
    return nullptr;
  int64_t mb = s.maskBatch > 1 ? b : 0, mh = s.maskHeads > 1 ? h : 0;
  return mask + ((mb * s.maskHeads + mh) * s.seq + i) * s.seq;
}

/// Softmax probabilities of one query row over all keys; `slope` (may be
/// null) gets d cap(x) / dx of each score, 1 without softcapping.
void scoresRow(const float *q, const float *k, const float *mask,
               const AttentionShape &s, int64_t b, int64_t h, int64_t i,
               std::vector<double> &p, std::vector<double> *slope = nullptr) {
  int64_t d = s.headDim, g = h / (s.heads / s.kvHeads);
  const float *qi = q + (b * s.seq + i) * s.heads * d + h * d;
  const float *rowMask = maskRow(mask, s, b, h, i);
  double maxScore = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < s.seq; ++j) {
    if (masked(s, i, j)) {
      p[j] = -std::numeric_limits<double>::infinity();
      continue;
    }
    const float *kj = k + (b * s.seq + j) * s.kvHeads * d + g * d;
    double dot = 0;
    for (int64_t e = 0; e < d; ++e)
      dot += double(qi[e]) * kj[e];
    double x = dot * s.scale, dx = 1.0;
    if (s.softcap > 0.0f) {
      double t = std::tanh(x / s.softcap);
      x = s.softcap * t;
      dx = 1.0 - t * t;
    }
    if (slope)
      (*slope)[j] = dx;
    p[j] = x + (mask ? rowMask[j] : 0.0);
    maxScore = std::max(maxScore, p[j]);
  }
  double sum = 0;
  for (int64_t j = 0; j < s.seq; ++j) {
    p[j] = std::isinf(p[j]) && p[j] < 0 ? 0.0 : std::exp(p[j] - maxScore);
    sum += p[j];
  }
  for (int64_t j = 0; j < s.seq; ++j)
    p[j] /= sum;
}

/// Query rows per block of scores: a block's probabilities and their
/// gradient take 2 x 64 x min(seq, key block) floats per task, and a causal
/// block reads only the keys up to its last query.
constexpr int64_t kQueryBlock = 64;

/// Softcaps `n` rows of `w` scores `ld` apart in place, x -> c tanh(x / c),
/// where the shape asks for it; `slope` (may be null; the same layout) gets
/// the derivative 1 - tanh^2, which the backward multiplies into dS.
void softcapRows(const AttentionShape &s, float *x, int64_t n, int64_t w,
                 int64_t ld, float *slope) {
  if (s.softcap <= 0.0f)
    return;
  float c = s.softcap, inv = 1.0f / c;
  for (int64_t r = 0; r < n; ++r) {
    float *row = x + r * ld;
    for (int64_t j = 0; j < w; ++j) {
      float t = std::tanh(row[j] * inv);
      row[j] = c * t;
      if (slope)
        slope[r * ld + j] = 1.0f - t * t;
    }
  }
}

/// Keys a block of queries ending before `end` can attend to: under a
/// causal mask, none after the block's last query.
int64_t keysFor(const AttentionShape &s, int64_t end) {
  return s.causal ? std::min(s.seq, end) : s.seq;
}

/// p[r, j] for the `n` query rows from i0 of head (b, h) and keys j below
/// `keys`, rows `ld` apart: the softmax over j of cap(scale q_i k_j) + mask
/// (masked keys 0; a row whose every key is masked is NaN, as PyTorch's);
/// `slope` as softcapRows'.
void probabilities(const float *q, const float *k, const float *mask,
                   const AttentionShape &s, int64_t b, int64_t h, int64_t i0,
                   int64_t n, int64_t keys, float *p, int64_t ld,
                   float *slope = nullptr) {
  int64_t d = s.headDim, g = h / (s.heads / s.kvHeads);
  sgemm(false, true, n, keys, d, s.scale,
        q + (b * s.seq + i0) * s.heads * d + h * d, s.heads * d,
        k + b * s.seq * s.kvHeads * d + g * d, s.kvHeads * d, 0.0f, p, ld);
  softcapRows(s, p, n, keys, ld, slope);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < n; ++r) {
    int64_t i = i0 + r;
    float *row = p + r * ld;
    const float *rowMask = maskRow(mask, s, b, h, i);
    // The keys the causal mask and the window leave to query i: [lo, hi).
    int64_t hi = s.causal ? std::min(keys, i + 1) : keys;
    int64_t lo = s.window > 0 ? std::max<int64_t>(0, i - s.window + 1) : 0;
    lo = std::min(lo, hi);
    if (rowMask)
      forRange(lo, hi, [&](int64_t j) { row[j] += rowMask[j]; });
    float maxScore = maxOf(row + lo, hi - lo);
    std::fill(row, row + lo, 0.0f);
    std::fill(row + hi, row + keys, 0.0f);
    forRange(lo, hi, [&](int64_t j) {
      row[j] = row[j] == -inf ? 0.0f : expApprox(row[j] - maxScore);
    });
    double sum = sumOf(row + lo, hi - lo);
    float inv = float(1.0 / sum);
    forRange(lo, hi, [&](int64_t j) { row[j] *= inv; });
  }
}

/// Keys per block of scores when a row is longer: the scratch of a task is
/// then 2 x kQueryBlock x keyBlock floats (8 MiB by default) whatever the
/// sequence, and the softmax is taken online over the blocks (a running
/// maximum and sum, the output rescaled as the maximum grows), as the flash
/// kernels do. A row of at most one block is taken whole: one pass, where
/// the blocked backward computes the scores twice (about 1.3x the time of
/// a step at 16K tokens with blocks of 4K, on the development machine).
int64_t keyBlockOf(const AttentionShape &s) {
  return s.keyBlock > 0 ? s.keyBlock : 16384;
}

/// The first key any of the `n` queries from i0 may attend to (the window's
/// start for the first of them).
int64_t firstKeyFor(const AttentionShape &s, int64_t i0) {
  return s.window > 0 ? std::max<int64_t>(0, i0 - s.window + 1) : 0;
}

/// sc[r, j - j0] = cap(scale q_i k_j) + mask for the `n` query rows from i0
/// of head (b, h) and keys [j0, j1), -inf where the causal mask or the
/// window removes the key; rows `ld` apart; `slope` as softcapRows'.
void blockScores(const float *q, const float *k, const float *mask,
                 const AttentionShape &s, int64_t b, int64_t h, int64_t i0,
                 int64_t n, int64_t j0, int64_t j1, float *sc, int64_t ld,
                 float *slope = nullptr) {
  int64_t d = s.headDim, g = h / (s.heads / s.kvHeads), w = j1 - j0;
  sgemm(false, true, n, w, d, s.scale,
        q + (b * s.seq + i0) * s.heads * d + h * d, s.heads * d,
        k + (b * s.seq + j0) * s.kvHeads * d + g * d, s.kvHeads * d, 0.0f, sc,
        ld);
  softcapRows(s, sc, n, w, ld, slope);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < n; ++r) {
    int64_t i = i0 + r;
    float *row = sc + r * ld;
    if (const float *rowMask = maskRow(mask, s, b, h, i))
      forRange(0, w, [&](int64_t j) { row[j] += rowMask[j0 + j]; });
    // The keys left to query i, within the block: [lo, hi).
    int64_t hi = std::clamp<int64_t>((s.causal ? i + 1 : j1) - j0, 0, w);
    int64_t lo =
        std::clamp<int64_t>((s.window > 0 ? i - s.window + 1 : j0) - j0, 0, hi);
    std::fill(row, row + lo, -inf);
    std::fill(row + hi, row + w, -inf);
  }
}

/// Turns a block of scores into probabilities exp(score - m) / l in place
/// (masked keys 0; a row whose every key is masked NaN, as PyTorch's).
void blockProbabilities(float *sc, int64_t n, int64_t w, int64_t ld,
                        const std::vector<float> &m,
                        const std::vector<double> &l) {
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < n; ++r) {
    float *row = sc + r * ld;
    float mr = m[size_t(r)], inv = float(1.0 / l[size_t(r)]);
    forRange(0, w, [&](int64_t j) {
      row[j] = row[j] == -inf ? 0.0f * inv : expApprox(row[j] - mr) * inv;
    });
  }
}

/// The online softmax of the `n` query rows from i0 of head (b, h) over
/// keys [first key, keys), block by block: each row's maximum m and sum l
/// of exp(score - m), and acc = sum exp(score - m) v, rescaled as m grows
/// (acc / l is the attention's output row).
void onlineSoftmax(const float *q, const float *k, const float *v,
                   const float *mask, const AttentionShape &s, int64_t b,
                   int64_t h, int64_t i0, int64_t n, int64_t keys, float *sc,
                   std::vector<float> &m, std::vector<double> &l, float *acc) {
  const float inf = std::numeric_limits<float>::infinity();
  int64_t d = s.headDim, g = h / (s.heads / s.kvHeads), kb = keyBlockOf(s);
  m.assign(size_t(n), -inf);
  l.assign(size_t(n), 0.0);
  std::fill(acc, acc + n * d, 0.0f);
  for (int64_t j0 = firstKeyFor(s, i0); j0 < keys; j0 += kb) {
    int64_t w = std::min(kb, keys - j0);
    blockScores(q, k, mask, s, b, h, i0, n, j0, j0 + w, sc, kb);
    for (int64_t r = 0; r < n; ++r) {
      float *row = sc + r * kb;
      float mNew = std::max(m[size_t(r)], maxOf(row, w));
      if (mNew == -inf) {
        std::fill(row, row + w, 0.0f); // nothing left to this row yet
        continue;
      }
      float alpha =
          m[size_t(r)] == -inf ? 0.0f : expApprox(m[size_t(r)] - mNew);
      forRange(0, w, [&](int64_t j) {
        row[j] = row[j] == -inf ? 0.0f : expApprox(row[j] - mNew);
      });
      l[size_t(r)] = l[size_t(r)] * double(alpha) + sumOf(row, w);
      m[size_t(r)] = mNew;
      if (alpha != 1.0f)
        for (int64_t e = 0; e < d; ++e)
          acc[r * d + e] *= alpha;
    }
    sgemm(false, false, n, d, w, 1.0f, sc, kb,
          v + (b * s.seq + j0) * s.kvHeads * d + g * d, s.kvHeads * d, 1.0f,
          acc, d);
  }
}

} // namespace

void attentionForward(const float *q, const float *k, const float *v,
                      const float *mask, const AttentionShape &s, float *out) {
  int64_t d = s.headDim, kb = keyBlockOf(s);
  // One (batch, head) per task: it writes only its own output rows.
  runOnPool(s.batch * s.heads, [&](int64_t bh) {
    int64_t b = bh / s.heads, h = bh % s.heads, g = h / (s.heads / s.kvHeads);
    int64_t block = std::min(kQueryBlock, s.seq);
    std::vector<float> p(block * std::min(s.seq, kb)), acc, m;
    std::vector<double> l;
    for (int64_t i0 = 0; i0 < s.seq; i0 += kQueryBlock) {
      int64_t n = std::min(kQueryBlock, s.seq - i0), keys = keysFor(s, i0 + n);
      if (keys > kb) {
        acc.resize(size_t(block * d));
        onlineSoftmax(q, k, v, mask, s, b, h, i0, n, keys, p.data(), m, l,
                      acc.data());
        for (int64_t r = 0; r < n; ++r) {
          float inv = float(1.0 / l[size_t(r)]);
          float *o = out + (b * s.seq + i0 + r) * s.heads * d + h * d;
          for (int64_t e = 0; e < d; ++e)
            o[e] = acc[size_t(r * d + e)] * inv;
        }
        continue;
      }
      // One key block: from key 0, so that the rows are the whole softmax
      // (rows seq apart when the sequence is one block, as they always were).
      int64_t ld = std::min(s.seq, kb);
      probabilities(q, k, mask, s, b, h, i0, n, keys, p.data(), ld);
      sgemm(false, false, n, d, keys, 1.0f, p.data(), ld,
            v + b * s.seq * s.kvHeads * d + g * d, s.kvHeads * d, 0.0f,
            out + (b * s.seq + i0) * s.heads * d + h * d, s.heads * d);
    }
  });
}

void attentionBackward(const float *q, const float *k, const float *v,
                       const float *mask, const float *dOut,
                       const AttentionShape &s, float *dq, float *dk,
                       float *dv) {
  int64_t d = s.headDim, group = s.heads / s.kvHeads, kb = keyBlockOf(s);
  // One (batch, kv head) per task: the query heads that read a kv head are
  // the only writers of its dk and dv, in a fixed order.
  runOnPool(s.batch * s.kvHeads, [&](int64_t bg) {
    int64_t b = bg / s.kvHeads, g = bg % s.kvHeads;
    int64_t kvOffset = b * s.seq * s.kvHeads * d + g * d, kvLd = s.kvHeads * d;
    for (int64_t j = 0; j < s.seq; ++j) {
      std::fill_n(dk + kvOffset + j * kvLd, d, 0.0f);
      std::fill_n(dv + kvOffset + j * kvLd, d, 0.0f);
    }
    int64_t block = std::min(kQueryBlock, s.seq), width = std::min(s.seq, kb);
    std::vector<float> p(block * width), dp(block * width), m, acc;
    // The softcap's derivative at each score (none without softcapping).
    std::vector<float> slope(s.softcap > 0.0f ? block * width : 0);
    float *sl = slope.empty() ? nullptr : slope.data();
    std::vector<double> l, rowDot = std::vector<double>(size_t(block));
    // dS = P (dP - sum(P dP)) cap' scale in place of dP, for `n` rows of
    // `w` keys `ld` apart; then dq (+)= dS K, dk += dS^T Q, dv += P^T dO
    // over the keys from j0.
    auto gradients = [&](int64_t qOffset, int64_t qLd, int64_t n, int64_t j0,
                         int64_t w, int64_t ld, bool firstBlock) {
      for (int64_t r = 0; r < n; ++r) {
        const float *pr = p.data() + r * ld;
        float *dr = dp.data() + r * ld;
        double dot = rowDot[size_t(r)];
        for (int64_t j = 0; j < w; ++j)
          dr[j] = float(pr[j] * (dr[j] - dot) * s.scale);
        if (sl)
          for (int64_t j = 0; j < w; ++j)
            dr[j] *= sl[r * ld + j];
      }
      int64_t kvAt = kvOffset + j0 * kvLd;
      sgemm(false, false, n, d, w, 1.0f, dp.data(), ld, k + kvAt, kvLd,
            firstBlock ? 0.0f : 1.0f, dq + qOffset, qLd);
      sgemm(true, false, w, d, n, 1.0f, dp.data(), ld, q + qOffset, qLd, 1.0f,
            dk + kvAt, kvLd);
      sgemm(true, false, w, d, n, 1.0f, p.data(), ld, dOut + qOffset, qLd, 1.0f,
            dv + kvAt, kvLd);
    };
    for (int64_t h = g * group; h < (g + 1) * group; ++h)
      for (int64_t i0 = 0; i0 < s.seq; i0 += kQueryBlock) {
        int64_t n = std::min(kQueryBlock, s.seq - i0),
                keys = keysFor(s, i0 + n);
        int64_t qOffset = (b * s.seq + i0) * s.heads * d + h * d,
                qLd = s.heads * d;
        if (keys <= kb) {
          // One block of keys from 0: the probabilities whole, dP = dO V^T.
          probabilities(q, k, mask, s, b, h, i0, n, keys, p.data(), width, sl);
          sgemm(false, true, n, keys, d, 1.0f, dOut + qOffset, qLd,
                v + kvOffset, kvLd, 0.0f, dp.data(), width);
          for (int64_t r = 0; r < n; ++r) {
            const float *pr = p.data() + r * width;
            const float *dr = dp.data() + r * width;
            double dot = 0;
            for (int64_t j = 0; j < keys; ++j)
              dot += double(pr[j]) * dr[j];
            rowDot[size_t(r)] = dot;
          }
          gradients(qOffset, qLd, n, 0, keys, width, true);
          continue;
        }
        // Longer rows, block by block: the online softmax gives each row's
        // statistics and output O, and sum(P dP) = dO . O; then each
        // block's probabilities, dP and gradients.
        acc.resize(size_t(block * d));
        onlineSoftmax(q, k, v, mask, s, b, h, i0, n, keys, p.data(), m, l,
                      acc.data());
        for (int64_t r = 0; r < n; ++r) {
          const float *dOr = dOut + qOffset + r * qLd;
          double dot = 0;
          for (int64_t e = 0; e < d; ++e)
            dot += double(dOr[e]) * acc[size_t(r * d + e)];
          rowDot[size_t(r)] = dot / l[size_t(r)];
        }
        int64_t lo = firstKeyFor(s, i0);
        for (int64_t j0 = lo; j0 < keys; j0 += kb) {
          int64_t w = std::min(kb, keys - j0);
          blockScores(q, k, mask, s, b, h, i0, n, j0, j0 + w, p.data(), kb, sl);
          blockProbabilities(p.data(), n, w, kb, m, l);
          sgemm(false, true, n, w, d, 1.0f, dOut + qOffset, qLd,
                v + kvOffset + j0 * kvLd, kvLd, 0.0f, dp.data(), kb);
          gradients(qOffset, qLd, n, j0, w, kb, j0 == lo);
        }
      }
  });
}

namespace reference {

void attentionForward(const float *q, const float *k, const float *v,
                      const float *mask, const AttentionShape &s, float *out) {
  int64_t d = s.headDim;
  // One (batch, head) per task: it writes only its own output rows.
  parallelFor(s.batch * s.heads, double(s.seq) * s.seq * d, [&](int64_t bh) {
    int64_t b = bh / s.heads, h = bh % s.heads;
    std::vector<double> p(s.seq);
    {
      int64_t g = h / (s.heads / s.kvHeads);
      for (int64_t i = 0; i < s.seq; ++i) {
        scoresRow(q, k, mask, s, b, h, i, p);
        float *oi = out + (b * s.seq + i) * s.heads * d + h * d;
        for (int64_t e = 0; e < d; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < s.seq; ++j)
            acc += p[j] * v[(b * s.seq + j) * s.kvHeads * d + g * d + e];
          oi[e] = float(acc);
        }
      }
    }
  });
}

void attentionBackward(const float *q, const float *k, const float *v,
                       const float *mask, const float *dOut,
                       const AttentionShape &s, float *dq, float *dk,
                       float *dv) {
  int64_t d = s.headDim;
  std::fill(dq, dq + s.batch * s.seq * s.heads * d, 0.0f);
  std::fill(dk, dk + s.batch * s.seq * s.kvHeads * d, 0.0f);
  std::fill(dv, dv + s.batch * s.seq * s.kvHeads * d, 0.0f);
  // One (batch, kv head) per task: the query heads that read a kv head are
  // the only writers of its dk and dv, in a fixed order.
  int64_t group = s.heads / s.kvHeads;
  parallelFor(
      s.batch * s.kvHeads, double(group) * s.seq * s.seq * d, [&](int64_t bg) {
        int64_t b = bg / s.kvHeads, g = bg % s.kvHeads;
        std::vector<double> p(s.seq), dp(s.seq), slope(s.seq);
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          for (int64_t i = 0; i < s.seq; ++i) {
            scoresRow(q, k, mask, s, b, h, i, p, &slope);
            int64_t qRow = (b * s.seq + i) * s.heads * d + h * d;
            const float *doi = dOut + qRow;
            // dP = dO V^T, dS = P (dP - sum(P dP)) cap'.
            double rowDot = 0;
            for (int64_t j = 0; j < s.seq; ++j) {
              const float *vj = v + (b * s.seq + j) * s.kvHeads * d + g * d;
              double acc = 0;
              for (int64_t e = 0; e < d; ++e)
                acc += double(doi[e]) * vj[e];
              dp[j] = acc;
              rowDot += p[j] * acc;
            }
            for (int64_t j = 0; j < s.seq; ++j) {
              if (p[j] == 0.0)
                continue;
              int64_t kvRow = (b * s.seq + j) * s.kvHeads * d + g * d;
              double ds = p[j] * (dp[j] - rowDot) * s.scale * slope[j];
              for (int64_t e = 0; e < d; ++e) {
                dv[kvRow + e] += float(p[j] * doi[e]);
                dq[qRow + e] += float(ds * k[kvRow + e]);
                dk[kvRow + e] += float(ds * q[qRow + e]);
              }
            }
          }
        }
      });
}

} // namespace reference

namespace {
constexpr double kGeluTanhScale = 0.7978845608028654; // sqrt(2 / pi)
constexpr double kGeluTanhCubic = 0.044715;

// The activation is a template argument so that each kernel's loop has no
// switch inside and vectorizes.
template <Activation A> float act(float x) {
  if constexpr (A == Activation::Gelu)
    return 0.5f * x * (1.0f + std::erf(x * float(M_SQRT1_2)));
  if constexpr (A == Activation::GeluTanh)
    return 0.5f * x *
           (1.0f + tanhApprox(float(kGeluTanhScale) *
                              (x + float(kGeluTanhCubic) * x * x * x)));
  if constexpr (A == Activation::Silu)
    return x / (1.0f + expApprox(-x));
  return x > 0 ? x : 0.0f;
}

template <Activation A> float actDerivative(float x) {
  if constexpr (A == Activation::Gelu)
    return 0.5f * (1.0f + std::erf(x * float(M_SQRT1_2))) +
           x * expApprox(-0.5f * x * x) * float(0.5 * M_2_SQRTPI * M_SQRT1_2);
  if constexpr (A == Activation::GeluTanh) {
    float c = float(kGeluTanhScale), k = float(kGeluTanhCubic);
    float t = tanhApprox(c * (x + k * x * x * x));
    return 0.5f * (1.0f + t) +
           0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * k * x * x);
  }
  if constexpr (A == Activation::Silu) {
    float sg = 1.0f / (1.0f + expApprox(-x));
    return sg * (1.0f + x * (1.0f - sg));
  }
  return x > 0 ? 1.0f : 0.0f;
}

/// fn(std::integral_constant<Activation, a>{}).
template <typename Fn> void withActivation(Activation a, Fn fn) {
  switch (a) {
  case Activation::Gelu:
    return fn(std::integral_constant<Activation, Activation::Gelu>{});
  case Activation::GeluTanh:
    return fn(std::integral_constant<Activation, Activation::GeluTanh>{});
  case Activation::Silu:
    return fn(std::integral_constant<Activation, Activation::Silu>{});
  case Activation::Relu:
    return fn(std::integral_constant<Activation, Activation::Relu>{});
  }
}
} // namespace

namespace {
/// Elements per task of the elementwise kernels (about 20 ops each).
constexpr int64_t kElementChunk = 4096;

/// fn(i) for i in [0, n), in chunks on the pool.
template <typename Fn> void elementwise(int64_t n, Fn fn) {
  int64_t chunks = (n + kElementChunk - 1) / kElementChunk;
  parallelFor(chunks, 20.0 * kElementChunk, [&](int64_t c) {
    forRange(c * kElementChunk, std::min(n, (c + 1) * kElementChunk), fn);
  });
}
} // namespace

void activationForward(const float *x, int64_t n, Activation a, float *y) {
  withActivation(a, [&](auto A) {
    elementwise(n, [&](int64_t i) { y[i] = act<A.value>(x[i]); });
  });
}

void activationBackward(const float *x, const float *dy, int64_t n,
                        Activation a, float *dx) {
  withActivation(a, [&](auto A) {
    elementwise(
        n, [&](int64_t i) { dx[i] = dy[i] * actDerivative<A.value>(x[i]); });
  });
}

void gatedForward(const float *gate, const float *up, int64_t n, Activation a,
                  float *y) {
  withActivation(a, [&](auto A) {
    elementwise(n, [&](int64_t i) { y[i] = act<A.value>(gate[i]) * up[i]; });
  });
}

void gatedBackward(const float *gate, const float *up, const float *dy,
                   int64_t n, Activation a, float *dGate, float *dUp) {
  withActivation(a, [&](auto A) {
    elementwise(n, [&](int64_t i) {
      // Read before written: the gradients may overwrite gate and up.
      float g = gate[i], u = up[i], d = dy[i];
      dGate[i] = d * u * actDerivative<A.value>(g);
      dUp[i] = d * act<A.value>(g);
    });
  });
}

namespace {
/// The target of token t, or ignoreIndex.
int64_t targetOf(const int64_t *labels, const CrossEntropyShape &s, int64_t t) {
  if (!s.shift)
    return labels[t];
  return t % s.seq == s.seq - 1 ? s.ignoreIndex : labels[t + 1];
}

double logSumExp(const float *row, int64_t n) {
  double m = -std::numeric_limits<double>::infinity(), sum = 0;
  for (int64_t i = 0; i < n; ++i)
    m = std::max(m, double(row[i]));
  for (int64_t i = 0; i < n; ++i)
    sum += std::exp(row[i] - m);
  return m + std::log(sum);
}

/// The tokens the mean runs over: those whose target is not ignored.
int64_t countTargets(const int64_t *labels, const CrossEntropyShape &s) {
  int64_t count = 0;
  for (int64_t t = 0; t < s.batch * s.seq; ++t)
    count += targetOf(labels, s, t) != s.ignoreIndex;
  return count;
}

/// One token's dLogits = scale * (softmax - onehot); `drow` may be `row`.
void rowGradient(const float *row, int64_t target, double scale,
                 const CrossEntropyShape &s, float *drow) {
  if (target == s.ignoreIndex) {
    std::fill(drow, drow + s.vocab, 0.0f);
    return;
  }
  double lse = logSumExp(row, s.vocab);
  for (int64_t i = 0; i < s.vocab; ++i)
    drow[i] = float((std::exp(row[i] - lse) - (i == target)) * scale);
}
} // namespace

namespace {
/// Sum over `rows` rows from `first` of each counted row's loss, lse - x_t
/// (the rows in parallel, summed in row order); `count` gets those counted.
double lossSum(const float *logits, const int64_t *labels,
               const CrossEntropyShape &s, int64_t first, int64_t rows,
               int64_t &count) {
  std::vector<double> loss(rows, 0.0);
  std::vector<char> counted(rows, 0);
  parallelFor(rows, 20.0 * s.vocab, [&](int64_t r) {
    int64_t target = targetOf(labels, s, first + r);
    if (target == s.ignoreIndex)
      return;
    const float *row = logits + r * s.vocab;
    loss[r] = logSumExp(row, s.vocab) - row[target];
    counted[r] = 1;
  });
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    total += loss[r];
    count += counted[r];
  }
  return total;
}

/// rowGradient of `rows` rows from `first` (`dLogits` may be `logits`).
void rowGradients(const float *logits, const int64_t *labels,
                  const CrossEntropyShape &s, int64_t first, int64_t rows,
                  double scale, float *dLogits) {
  parallelFor(rows, 20.0 * s.vocab, [&](int64_t r) {
    rowGradient(logits + r * s.vocab, targetOf(labels, s, first + r), scale, s,
                dLogits + r * s.vocab);
  });
}
} // namespace

float crossEntropyForward(const float *logits, const int64_t *labels,
                          const CrossEntropyShape &s, int64_t *counted) {
  int64_t count = 0;
  double total = lossSum(logits, labels, s, 0, s.batch * s.seq, count);
  if (counted)
    *counted = count;
  // As PyTorch: the mean over no tokens is NaN.
  return count ? float(total / count) : std::nanf("");
}

void crossEntropyBackward(const float *logits, const int64_t *labels,
                          const CrossEntropyShape &s, float dLoss,
                          float *dLogits) {
  // With no target counted every row is ignored and the scale is unused.
  int64_t count = countTargets(labels, s);
  double scale = count ? double(dLoss) / count : 0.0;
  rowGradients(logits, labels, s, 0, s.batch * s.seq, scale, dLogits);
}

float headCrossEntropyForward(const float *x, const float *w,
                              const int64_t *labels, const HeadShape &s,
                              float *logits) {
  int64_t rows = s.ce.batch * s.ce.seq, v = s.ce.vocab, count = 0;
  double total = 0;
  for (int64_t r0 = 0; r0 < rows; r0 += s.chunkRows) {
    int64_t n = std::min(s.chunkRows, rows - r0);
    linearForward(x + r0 * s.dim, w, nullptr, n, s.dim, v, s.outIn, logits);
    total += lossSum(logits, labels, s.ce, r0, n, count);
  }
  return count ? float(total / count) : std::nanf("");
}

void headCrossEntropyBackward(const float *x, const float *w,
                              const int64_t *labels, float dLoss,
                              const HeadShape &s, float *dx, float *dw,
                              float *logits) {
  int64_t rows = s.ce.batch * s.ce.seq, v = s.ce.vocab;
  int64_t count = countTargets(labels, s.ce);
  double scale = count ? double(dLoss) / count : 0.0;
  for (int64_t r0 = 0; r0 < rows; r0 += s.chunkRows) {
    int64_t n = std::min(s.chunkRows, rows - r0);
    const float *xc = x + r0 * s.dim;
    linearForward(xc, w, nullptr, n, s.dim, v, s.outIn, logits);
    // The logits become their own gradient, in place.
    rowGradients(logits, labels, s.ce, r0, n, scale, logits);
    linearBackward(xc, w, logits, n, s.dim, v, s.outIn, dx + r0 * s.dim,
                   nullptr, nullptr);
    // dw sums over the chunks: the first overwrites it.
    linearWeightGrad(xc, logits, n, s.dim, v, s.outIn, r0 == 0 ? 0.0f : 1.0f,
                     dw);
  }
  if (rows == 0)
    std::fill_n(dw, s.dim * v, 0.0f);
}

void gatedMlpForward(const float *x, const float *gate, const float *up,
                     const float *down, const MlpShape &s, float *y,
                     float *scratch) {
  float *g = scratch, *u = scratch + s.chunkRows * s.hidden;
  for (int64_t r0 = 0; r0 < s.rows; r0 += s.chunkRows) {
    int64_t n = std::min(s.chunkRows, s.rows - r0);
    const float *xc = x + r0 * s.dim;
    linearForward(xc, gate, nullptr, n, s.dim, s.hidden, s.outIn, g);
    linearForward(xc, up, nullptr, n, s.dim, s.hidden, s.outIn, u);
    gatedForward(g, u, n * s.hidden, s.act, g);
    linearForward(g, down, nullptr, n, s.hidden, s.dim, s.outIn,
                  y + r0 * s.dim);
  }
}

void gatedMlpBackward(const float *x, const float *gate, const float *up,
                      const float *down, const float *dy, const MlpShape &s,
                      float *dx, float *dGate, float *dUp, float *dDown,
                      float *scratch) {
  int64_t chunk = s.chunkRows * s.hidden;
  float *g = scratch, *u = g + chunk, *a = u + chunk, *dxUp = a + chunk;
  for (int64_t r0 = 0; r0 < s.rows; r0 += s.chunkRows) {
    int64_t n = std::min(s.chunkRows, s.rows - r0);
    const float *xc = x + r0 * s.dim, *dyc = dy + r0 * s.dim;
    float *dxc = dx + r0 * s.dim;
    // The weights' gradients sum over the chunks: the first overwrites.
    float beta = r0 == 0 ? 0.0f : 1.0f;
    linearForward(xc, gate, nullptr, n, s.dim, s.hidden, s.outIn, g);
    linearForward(xc, up, nullptr, n, s.dim, s.hidden, s.outIn, u);
    gatedForward(g, u, n * s.hidden, s.act, a);
    linearWeightGrad(a, dyc, n, s.hidden, s.dim, s.outIn, beta, dDown);
    // The activation's gradient over it, then the gate's and up's over
    // them: the ops and their order of the unchunked graph, chunk by chunk.
    linearBackward(a, down, dyc, n, s.hidden, s.dim, s.outIn, a, nullptr,
                   nullptr);
    gatedBackward(g, u, a, n * s.hidden, s.act, g, u);
    linearBackward(xc, gate, g, n, s.dim, s.hidden, s.outIn, dxc, nullptr,
                   nullptr);
    linearBackward(xc, up, u, n, s.dim, s.hidden, s.outIn, dxUp, nullptr,
                   nullptr);
    // dx = the up part + the gate part, the unchunked graph's sum.
    for (int64_t i = 0; i < n * s.dim; ++i)
      dxc[i] = dxUp[i] + dxc[i];
    linearWeightGrad(xc, g, n, s.dim, s.hidden, s.outIn, beta, dGate);
    linearWeightGrad(xc, u, n, s.dim, s.hidden, s.outIn, beta, dUp);
  }
  if (s.rows == 0)
    for (float *dw : {dGate, dUp, dDown})
      std::fill_n(dw, s.dim * s.hidden, 0.0f);
}

} // namespace mt::kernels::cpu
