// CPU reference kernels of the fused ops. Straightforward loops with
// accumulation in double where a sum runs over a whole row, so that they
// serve as the reference the optimised kernels are checked against.
#include "kernels/cpu/fused_ops.h"
#include "kernels/cpu/parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
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
                       int64_t dim, float *dTable) {
  for (int64_t n = 0; n < count; ++n)
    for (int64_t d = 0; d < dim; ++d)
      dTable[ids[n] * dim + d] += dOut[n * dim + d];
}

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
        (outIn ? dw[o * in + i] : dw[i * out + o]) += float(acc);
      }
    });
  if (dbias)
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (int64_t r = 0; r < rows; ++r)
        acc += dy[r * out + o];
      dbias[o] += float(acc);
    }
}

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
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * dim;
    double inv = inverseRms(xr, dim, eps);
    for (int64_t d = 0; d < dim; ++d)
      y[r * dim + d] = float(xr[d] * inv * (plusOne ? 1.0 + w[d] : w[d]));
  }
}

void rmsNormBackward(const float *x, const float *w, const float *dy,
                     int64_t rows, int64_t dim, float eps, bool plusOne,
                     float *dx, float *dw) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * dim, *dyr = dy + r * dim;
    double inv = inverseRms(xr, dim, eps);
    // d/dx of x * inv: inv * g - x * inv^3 / dim * sum(g * x).
    double dot = 0;
    for (int64_t d = 0; d < dim; ++d)
      dot += double(dyr[d]) * (plusOne ? 1.0 + w[d] : w[d]) * xr[d];
    for (int64_t d = 0; d < dim; ++d) {
      double g = double(dyr[d]) * (plusOne ? 1.0 + w[d] : w[d]);
      dx[r * dim + d] = float(inv * g - xr[d] * inv * inv * inv * dot / dim);
      dw[d] += float(double(dyr[d]) * xr[d] * inv);
    }
  }
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
  for (int64_t r = 0; r < rows; ++r) {
    double mean, inv;
    meanAndInvStd(x + r * dim, dim, eps, mean, inv);
    for (int64_t d = 0; d < dim; ++d)
      y[r * dim + d] =
          float((x[r * dim + d] - mean) * inv * w[d] + (b ? b[d] : 0.0f));
  }
}

void layerNormBackward(const float *x, const float *w, const float *dy,
                       int64_t rows, int64_t dim, float eps, float *dx,
                       float *dw, float *db) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * dim, *dyr = dy + r * dim;
    double mean, inv;
    meanAndInvStd(xr, dim, eps, mean, inv);
    double sumG = 0, sumGX = 0;
    for (int64_t d = 0; d < dim; ++d) {
      double xhat = (xr[d] - mean) * inv, g = double(dyr[d]) * w[d];
      sumG += g;
      sumGX += g * xhat;
      dw[d] += float(dyr[d] * xhat);
      if (db)
        db[d] += dyr[d];
    }
    for (int64_t d = 0; d < dim; ++d) {
      double xhat = (xr[d] - mean) * inv, g = double(dyr[d]) * w[d];
      dx[r * dim + d] = float(inv * (g - sumG / dim - xhat * sumGX / dim));
    }
  }
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

/// Softmax probabilities of one query row over all keys.
void scoresRow(const float *q, const float *k, const float *mask,
               const AttentionShape &s, int64_t b, int64_t h, int64_t i,
               std::vector<double> &p) {
  int64_t d = s.headDim, g = h / (s.heads / s.kvHeads);
  const float *qi = q + (b * s.seq + i) * s.heads * d + h * d;
  const float *rowMask =
      mask ? mask + (((s.maskBatch > 1 ? b : 0) * s.maskHeads +
                      (s.maskHeads > 1 ? h : 0)) *
                         s.seq +
                     i) *
                        s.seq
           : nullptr;
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
    p[j] = dot * s.scale + (mask ? rowMask[j] : 0.0);
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
} // namespace

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
        std::vector<double> p(s.seq), dp(s.seq);
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          for (int64_t i = 0; i < s.seq; ++i) {
            scoresRow(q, k, mask, s, b, h, i, p);
            int64_t qRow = (b * s.seq + i) * s.heads * d + h * d;
            const float *doi = dOut + qRow;
            // dP = dO V^T, dS = P (dP - sum(P dP)).
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
              double ds = p[j] * (dp[j] - rowDot) * s.scale;
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

namespace {
constexpr double kGeluTanhScale = 0.7978845608028654; // sqrt(2 / pi)
constexpr double kGeluTanhCubic = 0.044715;

double act(double x, Activation a) {
  switch (a) {
  case Activation::Gelu:
    return 0.5 * x * (1.0 + std::erf(x * M_SQRT1_2));
  case Activation::GeluTanh:
    return 0.5 * x *
           (1.0 + std::tanh(kGeluTanhScale * (x + kGeluTanhCubic * x * x * x)));
  case Activation::Silu:
    return x / (1.0 + std::exp(-x));
  case Activation::Relu:
    return x > 0 ? x : 0.0;
  }
  return 0;
}

double actDerivative(double x, Activation a) {
  switch (a) {
  case Activation::Gelu:
    return 0.5 * (1.0 + std::erf(x * M_SQRT1_2)) +
           x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
  case Activation::GeluTanh: {
    double t = std::tanh(kGeluTanhScale * (x + kGeluTanhCubic * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluTanhScale *
                                 (1.0 + 3.0 * kGeluTanhCubic * x * x);
  }
  case Activation::Silu: {
    double sg = 1.0 / (1.0 + std::exp(-x));
    return sg * (1.0 + x * (1.0 - sg));
  }
  case Activation::Relu:
    return x > 0 ? 1.0 : 0.0;
  }
  return 0;
}
} // namespace

void activationForward(const float *x, int64_t n, Activation a, float *y) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = float(act(x[i], a));
}

void activationBackward(const float *x, const float *dy, int64_t n,
                        Activation a, float *dx) {
  for (int64_t i = 0; i < n; ++i)
    dx[i] = float(dy[i] * actDerivative(x[i], a));
}

void gatedForward(const float *gate, const float *up, int64_t n, Activation a,
                  float *y) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = float(act(gate[i], a) * up[i]);
}

void gatedBackward(const float *gate, const float *up, const float *dy,
                   int64_t n, Activation a, float *dGate, float *dUp) {
  for (int64_t i = 0; i < n; ++i) {
    dGate[i] = float(double(dy[i]) * up[i] * actDerivative(gate[i], a));
    dUp[i] = float(double(dy[i]) * act(gate[i], a));
  }
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

float crossEntropyForward(const float *logits, const int64_t *labels,
                          const CrossEntropyShape &s, int64_t *counted) {
  double total = 0;
  int64_t count = 0;
  for (int64_t t = 0; t < s.batch * s.seq; ++t) {
    int64_t target = targetOf(labels, s, t);
    if (target == s.ignoreIndex)
      continue;
    const float *row = logits + t * s.vocab;
    total += logSumExp(row, s.vocab) - row[target];
    ++count;
  }
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
  for (int64_t t = 0; t < s.batch * s.seq; ++t)
    rowGradient(logits + t * s.vocab, targetOf(labels, s, t), scale, s,
                dLogits + t * s.vocab);
}

float headCrossEntropyForward(const float *x, const float *w,
                              const int64_t *labels, const HeadShape &s,
                              float *logits) {
  int64_t rows = s.ce.batch * s.ce.seq, v = s.ce.vocab, count = 0;
  double total = 0;
  for (int64_t r0 = 0; r0 < rows; r0 += s.chunkRows) {
    int64_t n = std::min(s.chunkRows, rows - r0);
    linearForward(x + r0 * s.dim, w, nullptr, n, s.dim, v, s.outIn, logits);
    for (int64_t r = 0; r < n; ++r) {
      int64_t target = targetOf(labels, s.ce, r0 + r);
      if (target == s.ce.ignoreIndex)
        continue;
      const float *row = logits + r * v;
      total += logSumExp(row, v) - row[target];
      ++count;
    }
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
    for (int64_t r = 0; r < n; ++r)
      rowGradient(logits + r * v, targetOf(labels, s.ce, r0 + r), scale, s.ce,
                  logits + r * v);
    linearBackward(xc, w, logits, n, s.dim, v, s.outIn, dx + r0 * s.dim, dw,
                   nullptr);
  }
}

} // namespace mt::kernels::cpu
