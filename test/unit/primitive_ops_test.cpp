// The CPU kernels of the primitive ops a plan can contain, against values
// worked out by hand, and the bf16 rounding of bf16 storage.
#include "kernels/cpu/primitive_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

using namespace mt::kernels::cpu;
using mt::kernels::kUnaryFns;
using mt::kernels::Slope;
using mt::kernels::unaryName;

TEST(PrimitiveOps, BinaryBroadcastsBothWays) {
  std::vector<float> a = {1, 2, 3}, b = {10, 20}, out(6);
  // a [1,3] with b [2,1] -> [2,3].
  binaryForward(Binary::Add, a.data(), {1, 3}, b.data(), {2, 1}, out.data(),
                {2, 3});
  EXPECT_EQ(out, (std::vector<float>{11, 12, 13, 21, 22, 23}));
  binaryForward(Binary::Sub, a.data(), {3}, b.data(), {2, 1}, out.data(),
                {2, 3});
  EXPECT_EQ(out, (std::vector<float>{-9, -8, -7, -19, -18, -17}));
  binaryForward(Binary::Mul, a.data(), {1, 3}, b.data(), {2, 1}, out.data(),
                {2, 3});
  EXPECT_EQ(out, (std::vector<float>{10, 20, 30, 20, 40, 60}));
}

TEST(PrimitiveOps, LogicOfBytesBroadcasts) {
  // a [2, 3] with b [3]; any nonzero byte is true, results are 0 or 1.
  std::vector<uint8_t> a = {1, 0, 7, 0, 0, 1}, b = {2, 1, 0}, out(6);
  logicForward(Logic::And, a.data(), {2, 3}, b.data(), {3}, out.data(), {2, 3});
  EXPECT_EQ(out, (std::vector<uint8_t>{1, 0, 0, 0, 0, 0}));
  logicForward(Logic::Or, a.data(), {2, 3}, b.data(), {3}, out.data(), {2, 3});
  EXPECT_EQ(out, (std::vector<uint8_t>{1, 1, 1, 1, 1, 1}));
  logicForward(Logic::Xor, a.data(), {2, 3}, b.data(), {3}, out.data(), {2, 3});
  EXPECT_EQ(out, (std::vector<uint8_t>{0, 1, 1, 1, 1, 1}));
  logicForward(Logic::Not, a.data(), {2, 3}, nullptr, {}, out.data(), {2, 3});
  EXPECT_EQ(out, (std::vector<uint8_t>{0, 1, 0, 1, 1, 0}));
}

TEST(PrimitiveOps, DivAndTheUnaryFunctions) {
  std::vector<float> a = {1, 2, 3}, b = {2, 4}, out(6);
  binaryForward(Binary::Div, a.data(), {1, 3}, b.data(), {2, 1}, out.data(),
                {2, 3});
  EXPECT_EQ(out, (std::vector<float>{0.5f, 1, 1.5f, 0.25f, 0.5f, 0.75f}));
  std::vector<float> x = {-1.5f, -0.25f, 0.5f, 2.0f}, y(4);
  struct Case {
    Unary f;
    double (*want)(double);
  };
  Case cases[] = {
      {Unary::Exp, [](double v) { return std::exp(v); }},
      {Unary::Tanh, [](double v) { return std::tanh(v); }},
      {Unary::Sigmoid, [](double v) { return 1.0 / (1.0 + std::exp(-v)); }},
      {Unary::Reciprocal, [](double v) { return 1.0 / v; }},
      {Unary::Abs, [](double v) { return std::fabs(v); }}};
  for (const Case &c : cases) {
    unaryForward({c.f}, x.data(), y.data(), 4);
    for (int i = 0; i < 4; ++i)
      EXPECT_NEAR(y[i], c.want(x[i]),
                  2e-7 * std::max(1.0, std::abs(c.want(x[i]))))
          << int(c.f) << " at " << x[i];
  }
  std::vector<float> p = {0.25f, 1, 4, 9};
  unaryForward({Unary::Sqrt}, p.data(), y.data(), 4);
  EXPECT_EQ(y, (std::vector<float>{0.5f, 1, 2, 3}));
  unaryForward({Unary::Log}, p.data(), y.data(), 4);
  EXPECT_FLOAT_EQ(y[1], 0.0f);
  EXPECT_NEAR(y[2], std::log(4.0), 1e-7);
}

// The functions with parameters and the rest of the pointwise set, against
// their definitions (ONNX's) written out in double, parameters away from
// their defaults.
TEST(PrimitiveOps, PointwiseFunctionsMatchTheirDefinitions) {
  struct Case {
    UnaryParams f;
    double (*want)(double, double, double);
  };
  const double kSeluAlpha = 1.6732632423543772, kSeluGamma = 1.0507009873554805;
  Case cases[] = {
      {{Unary::Relu}, [](double v, double, double) { return v < 0 ? 0 : v; }},
      {{Unary::LeakyRelu, 0.1f},
       [](double v, double a, double) { return v < 0 ? a * v : v; }},
      {{Unary::Elu, 0.7f},
       [](double v, double a, double) {
         return v < 0 ? a * (std::exp(v) - 1) : v;
       }},
      {{Unary::Selu, float(kSeluAlpha), float(kSeluGamma)},
       [](double v, double a, double b) {
         return v <= 0 ? b * a * (std::exp(v) - 1) : b * v;
       }},
      {{Unary::Celu, 1.3f},
       [](double v, double a, double) {
         return std::max(0.0, v) + std::min(0.0, a * (std::exp(v / a) - 1));
       }},
      {{Unary::Softplus},
       [](double v, double, double) { return std::log1p(std::exp(v)); }},
      {{Unary::Softsign},
       [](double v, double, double) { return v / (1 + std::fabs(v)); }},
      {{Unary::HardSigmoid, 0.3f, 0.4f},
       [](double v, double a, double b) {
         return std::max(0.0, std::min(1.0, a * v + b));
       }},
      {{Unary::HardSwish},
       [](double v, double, double) {
         return v * std::max(0.0, std::min(1.0, v / 6 + 0.5));
       }},
      {{Unary::Mish},
       [](double v, double, double) {
         return v * std::tanh(std::log1p(std::exp(v)));
       }},
      {{Unary::ThresholdedRelu, 0.3f},
       [](double v, double a, double) { return v > a ? v : 0; }},
      {{Unary::Shrink, 0.5f, 0.2f},
       [](double v, double a, double b) {
         return v < -a ? v + b : v > a ? v - b : 0;
       }},
      {{Unary::Tan}, [](double v, double, double) { return std::tan(v); }},
      {{Unary::Atan}, [](double v, double, double) { return std::atan(v); }},
      {{Unary::Sinh}, [](double v, double, double) { return std::sinh(v); }},
      {{Unary::Cosh}, [](double v, double, double) { return std::cosh(v); }},
      {{Unary::Asinh}, [](double v, double, double) { return std::asinh(v); }},
      {{Unary::Floor}, [](double v, double, double) { return std::floor(v); }},
      {{Unary::Ceil}, [](double v, double, double) { return std::ceil(v); }},
      // Halves to even: 2.5 is 2, -1.5 is -2.
      {{Unary::Round},
       [](double v, double, double) { return std::nearbyint(v); }},
      {{Unary::Sign},
       [](double v, double, double) { return double((v > 0) - (v < 0)); }}};
  std::vector<float> x = {-2.5f, -1.5f, -0.25f, 0.0f, 0.4f, 0.5f, 1.0f, 2.5f},
                     y(x.size());
  for (const Case &c : cases) {
    unaryForward(c.f, x.data(), y.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      double want = c.want(x[i], c.f.alpha, c.f.beta);
      EXPECT_NEAR(y[i], want, 4e-7 * std::max(1.0, std::abs(want)))
          << unaryName(c.f.fn) << " at " << x[i];
    }
  }
  // The inverse functions inside their domains.
  std::vector<float> u = {-0.8f, -0.3f, 0.1f, 0.7f}, v(4), w = {1.1f, 2, 3, 9};
  for (auto [f, want] :
       {std::pair<Unary, double (*)(double)>{Unary::Asin, std::asin},
        {Unary::Acos, std::acos},
        {Unary::Atanh, std::atanh}}) {
    unaryForward({f}, u.data(), v.data(), 4);
    for (int i = 0; i < 4; ++i)
      EXPECT_NEAR(v[i], want(u[i]), 4e-7) << unaryName(f);
  }
  unaryForward({Unary::Acosh}, w.data(), v.data(), 4);
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(v[i], std::acosh(double(w[i])), 4e-7);
  // A NaN stays NaN through every function.
  float nan = std::numeric_limits<float>::quiet_NaN();
  for (Unary f : kUnaryFns)
    EXPECT_TRUE(std::isnan(applyUnary({f, 0.5f, 0.2f}, nan))) << unaryName(f);
}

/// The largest error of `grad` against central differences of the
/// function over its domain, relative to the slope (at least 0.05); points
/// where the function steps or has a kink within 2h (its one-sided slopes
/// disagree, or its central differences at h and h / 2 do) are skipped, as
/// a derivative is not defined there.
template <typename Grad>
double worstSlopeError(const UnaryParams &p, Grad grad) {
  UnaryDomain d = unaryDomain(p.fn);
  const double h = 1e-3;
  auto f = [&](double v) { return double(applyUnary(p, float(v))); };
  auto smooth = [](double s, double t) {
    return std::abs(s - t) <= 0.05 * std::max(1.0, std::abs(s));
  };
  double worst = 0;
  for (int i = 1; i < 64; ++i) {
    double x = d.lo + (d.hi - d.lo) * i / 64.0;
    double left = (f(x) - f(x - h)) / h, right = (f(x + h) - f(x)) / h;
    double fd = (f(x + h) - f(x - h)) / (2 * h);
    double half = (f(x + h / 2) - f(x - h / 2)) / h;
    if (!smooth(left, right) || !smooth(fd, half))
      continue;
    double got = grad(float(x));
    worst = std::max(worst, std::abs(got - fd) / std::max(0.05, std::abs(fd)));
  }
  return worst;
}

// Each function's derivative (UNARY_GRAD's) against finite differences of
// the function itself over its domain, parameters off their defaults; and
// the check is strong enough to catch a derivative 1% off (a mutation).
TEST(PrimitiveOps, PointwiseDerivativesMatchFiniteDifferences) {
  for (Unary f : kUnaryFns) {
    UnaryParams p{f, 0.3f, 0.6f};
    if (unarySlope(f) == Slope::Passed) { // a cast's: dy as it came
      for (float x : {-3.0f, 0.1f, 70000.0f})
        EXPECT_EQ(applyUnaryGrad(p, x, -0.75f), -0.75f) << unaryName(f);
      continue;
    }
    if (f == Unary::HardSigmoid)
      p = {f, 0.2f, 0.5f};
    double err =
        worstSlopeError(p, [&](float x) { return applyUnaryGrad(p, x, 1.0f); });
    EXPECT_LT(err, 2e-3) << unaryName(f);
    // dy scales the result.
    EXPECT_FLOAT_EQ(applyUnaryGrad(p, 0.7f * unaryDomain(f).hi, 2.0f),
                    2.0f * applyUnaryGrad(p, 0.7f * unaryDomain(f).hi, 1.0f))
        << unaryName(f);
    if (unarySlope(f) == Slope::Flat)
      continue; // a derivative of 0 has no 1% to be off by
    double mutated = worstSlopeError(
        p, [&](float x) { return 1.01 * applyUnaryGrad(p, x, 1.0f); });
    EXPECT_GT(mutated, 5e-3) << unaryName(f) << ": the check misses 1%";
  }
  // The gradient kernel applies the same derivative.
  std::vector<float> x = {-1.0f, 0.5f, 2.0f}, dy = {1.0f, -2.0f, 0.5f}, dx(3);
  unaryBackward({Unary::Mish}, x.data(), dy.data(), dx.data(), 3);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(dx[i], applyUnaryGrad({Unary::Mish}, x[i], dy[i]));
}

// A batch of products, a broadcast over b's missing batch dim and a's 1,
// against the sum written out.
TEST(PrimitiveOps, BatchMatmulBroadcastsTheBatchDims) {
  Dims ad = {2, 1, 3, 4}, bd = {5, 4, 2}, od = {2, 5, 3, 2};
  std::vector<float> a(24), b(40), out(60);
  for (int i = 0; i < 24; ++i)
    a[i] = float(i % 7) - 3;
  for (int i = 0; i < 40; ++i)
    b[i] = float(i % 5) * 0.5f - 1;
  batchMatmul(a.data(), ad, b.data(), bd, out.data(), od);
  for (int64_t p = 0; p < 2; ++p)
    for (int64_t q = 0; q < 5; ++q)
      for (int64_t m = 0; m < 3; ++m)
        for (int64_t n = 0; n < 2; ++n) {
          double want = 0;
          for (int64_t k = 0; k < 4; ++k)
            want += a[(p * 3 + m) * 4 + k] * b[(q * 4 + k) * 2 + n];
          EXPECT_NEAR(out[((p * 5 + q) * 3 + m) * 2 + n], want, 1e-5);
        }
}

TEST(PrimitiveOps, SoftmaxAlongAnyAxisAndExpand) {
  // [2, 3, 2] along axis 1: each (i, k) column of 3 sums to 1.
  std::vector<float> x = {0, 1, 2, 3, 4, 5, -1, 0, 1, -2, 30, 31}, y(12);
  softmax(x.data(), {2, 3, 2}, 1, y.data());
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 2; ++k) {
      double sum = 0, denom = 0;
      for (int j = 0; j < 3; ++j)
        denom += std::exp(double(x[(i * 3 + j) * 2 + k]));
      for (int j = 0; j < 3; ++j) {
        float v = y[(i * 3 + j) * 2 + k];
        EXPECT_NEAR(v, std::exp(double(x[(i * 3 + j) * 2 + k])) / denom, 1e-7);
        sum += v;
      }
      EXPECT_NEAR(sum, 1.0, 1e-6);
    }
  // A line of -inf is NaN, as PyTorch's.
  float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> masked = {ninf, ninf}, p(2);
  softmax(masked.data(), {1, 2}, 1, p.data());
  EXPECT_TRUE(std::isnan(p[0]) && std::isnan(p[1]));
  std::vector<float> e = {1, 2}, big(6);
  expand(e.data(), {2, 1}, big.data(), {1, 2, 3});
  EXPECT_EQ(big, (std::vector<float>{1, 1, 1, 2, 2, 2}));
}

// The row loops (an operand whole or repeated along the leading dims) give
// what the multi-index loop gives: x[i, j, k] op y[broadcast i, j, k].
TEST(PrimitiveOps, BinaryRowLoopsMatchIndexing) {
  Dims out = {5, 3, 4}; // 60 elements, and 5 x 16 Ki + 3 for whole rows
  std::vector<float> x(60), y(60);
  for (int i = 0; i < 60; ++i) {
    x[i] = float(i);
    y[i] = float(100 + 7 * i);
  }
  struct Case {
    Dims yDims;
    int64_t (*index)(int64_t i, int64_t j, int64_t k);
  };
  Case cases[] = {
      {{5, 3, 4},
       [](int64_t i, int64_t j, int64_t k) { return (i * 3 + j) * 4 + k; }},
      {{4}, [](int64_t, int64_t, int64_t k) { return k; }},
      {{1, 3, 4}, [](int64_t, int64_t j, int64_t k) { return j * 4 + k; }},
      {{5, 1, 4}, [](int64_t i, int64_t, int64_t k) { return i * 4 + k; }}};
  for (const Case &c : cases) {
    std::vector<float> z(60);
    binaryForward(Binary::Sub, x.data(), out, y.data(), c.yDims, z.data(), out);
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t k = 0; k < 4; ++k)
          ASSERT_EQ(z[(i * 3 + j) * 4 + k],
                    x[(i * 3 + j) * 4 + k] - y[c.index(i, j, k)])
              << "y dims " << c.yDims.size() << " at " << i << j << k;
    // And with the operands the other way round.
    binaryForward(Binary::Mul, y.data(), c.yDims, x.data(), out, z.data(), out);
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t k = 0; k < 4; ++k)
          ASSERT_EQ(z[(i * 3 + j) * 4 + k],
                    y[c.index(i, j, k)] * x[(i * 3 + j) * 4 + k]);
  }
  // Whole operands longer than one row of 16 Ki elements.
  int64_t n = 5 * 16384 + 3;
  std::vector<float> a(n), b(n), sum(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = float(i % 1000);
    b[i] = float(i % 7);
  }
  binaryForward(Binary::Add, a.data(), {n}, b.data(), {n}, sum.data(), {n});
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(sum[i], a[i] + b[i]) << i;
}

TEST(PrimitiveOps, ReduceSumOverAxes) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6}, out(3);
  reduceSum(x.data(), {2, 3}, {0}, out.data());
  EXPECT_EQ(out, (std::vector<float>{5, 7, 9}));
  std::vector<float> rows(2);
  reduceSum(x.data(), {2, 3}, {-1}, rows.data());
  EXPECT_EQ(rows, (std::vector<float>{6, 15}));
  std::vector<float> all(1);
  reduceSum(x.data(), {2, 3}, {}, all.data());
  EXPECT_EQ(all[0], 21);
}

// Each way of reducing (one run of axes as lines, any other set by index)
// against the sum written out.
TEST(PrimitiveOps, ReduceMeanAndSumOfEveryAxisSet) {
  Dims dims = {2, 3, 2};
  std::vector<float> x(12);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = float(i * i % 7) - 2.5f;
  for (std::vector<int64_t> axes : {std::vector<int64_t>{0},
                                    {1},
                                    {2},
                                    {0, 1},
                                    {1, 2},
                                    {0, 2},
                                    {-1, 0},
                                    {}}) {
    Dims kept = dims;
    int64_t each = 1;
    for (int64_t d = 0; d < 3; ++d)
      if (axes.empty() || std::count(axes.begin(), axes.end(), d) ||
          std::count(axes.begin(), axes.end(), d - 3)) {
        each *= kept[d];
        kept[d] = 1;
      }
    std::vector<float> want(size_t(12 / each), 0.0f);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t k = 0; k < 2; ++k)
          want[size_t(
              ((kept[0] > 1 ? i : 0) * kept[1] + (kept[1] > 1 ? j : 0)) *
                  kept[2] +
              (kept[2] > 1 ? k : 0))] += x[size_t((i * 3 + j) * 2 + k)];
    std::vector<float> sum(want.size()), mean(want.size());
    reduceSum(x.data(), dims, axes, sum.data());
    reduceMean(x.data(), dims, axes, mean.data());
    for (size_t o = 0; o < want.size(); ++o) {
      EXPECT_FLOAT_EQ(sum[o], want[o]) << axes.size() << " axes, " << o;
      EXPECT_FLOAT_EQ(mean[o], want[o] / float(each)) << o;
    }
  }
}

TEST(PrimitiveOps, IsNaNAndWhereBroadcast) {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f, nan, -inf, 1.0f, -nan, inf};
  std::vector<uint8_t> isnan(6);
  isNaN(x.data(), isnan.data(), 6);
  EXPECT_EQ(isnan, (std::vector<uint8_t>{0, 1, 0, 0, 1, 0}));
  // cond [2, 1] picks a [2, 3] row-wise or b [3] (the safe softmax's form
  // is cond of the output's shape and a scalar branch).
  std::vector<uint8_t> cond = {1, 0};
  std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {-1, -2, -3}, out(6);
  where(cond.data(), {2, 1}, a.data(), {2, 3}, b.data(), {3}, out.data(),
        {2, 3});
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, -1, -2, -3}));
  std::vector<float> zero = {0.0f}, safe(6);
  where(isnan.data(), {6}, zero.data(), {}, x.data(), {6}, safe.data(), {6});
  EXPECT_EQ(safe[1], 0.0f);
  EXPECT_EQ(safe[4], 0.0f);
  EXPECT_EQ(safe[2], -inf);
  EXPECT_EQ(safe[3], 1.0f);
}

TEST(PrimitiveOps, TransposeConcatAndSplitInvert) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6}, t(6);
  transpose(x.data(), {2, 3}, {1, 0}, t.data());
  EXPECT_EQ(t, (std::vector<float>{1, 4, 2, 5, 3, 6}));
  std::vector<float> a = {1, 2, 3, 4}, b = {5, 6}, cat(6);
  concat({a.data(), b.data()}, {{2, 2}, {2, 1}}, 1, sizeof(float), cat.data());
  EXPECT_EQ(cat, (std::vector<float>{1, 2, 5, 3, 4, 6}));
  std::vector<float> a2(4), b2(2);
  split(cat.data(), {2, 3}, 1, sizeof(float), {a2.data(), b2.data()},
        {{2, 2}, {2, 1}});
  EXPECT_EQ(a2, a);
  EXPECT_EQ(b2, b);
  // Ids move as they are, all 64 bits of each (an empty part among them).
  std::vector<int64_t> i = {1ll << 40, 2, -3, 4}, j = {5, -(1ll << 50)}, ids(6),
                       i2(4), j2(2);
  concat({i.data(), nullptr, j.data()}, {{2, 2}, {2, 0}, {2, 1}}, 1,
         sizeof(int64_t), ids.data());
  EXPECT_EQ(ids, (std::vector<int64_t>{1ll << 40, 2, 5, -3, 4, -(1ll << 50)}));
  split(ids.data(), {2, 3}, 1, sizeof(int64_t), {i2.data(), j2.data()},
        {{2, 2}, {2, 1}});
  EXPECT_EQ(i2, i);
  EXPECT_EQ(j2, j);
}

TEST(PrimitiveOps, Bf16RoundsToNearestEven) {
  EXPECT_EQ(fromBf16(toBf16(1.0f)), 1.0f);
  // 1 + 2^-8 is halfway between two bf16 values: ties to even (1.0).
  EXPECT_EQ(fromBf16(toBf16(1.0f + 1.0f / 256)), 1.0f);
  // 1 + 3 * 2^-8 rounds up to 1 + 2^-6.
  EXPECT_EQ(fromBf16(toBf16(1.0f + 3.0f / 256)), 1.0f + 1.0f / 64);
  EXPECT_TRUE(std::isnan(fromBf16(toBf16(std::nanf("")))));
  EXPECT_EQ(fromBf16(toBf16(-INFINITY)), -INFINITY);
}

/// RoundF16 and RoundBf16 (what a Cast to those types does to the values)
/// are the conversions there and back, bit for bit, over fp32 values of
/// every exponent (subnormals of both, past the largest half, NaN).
TEST(PrimitiveOps, CastRoundingsAreTheConversions) {
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           65504.0f,
                           65519.0f,
                           65520.0f,
                           -70000.0f,
                           INFINITY,
                           -INFINITY,
                           std::ldexp(1.0f, -25),
                           std::ldexp(3.0f, -25),
                           std::ldexp(1.0f, -140),
                           3.0e38f};
  uint32_t state = 12345;
  for (int i = 0; i < 20000; ++i) { // random bits: every exponent
    state = state * 1664525u + 1013904223u;
    float x;
    std::memcpy(&x, &state, 4);
    xs.push_back(x);
  }
  for (float x : xs) {
    float f16 = applyUnary({Unary::RoundF16}, x),
          bf16 = applyUnary({Unary::RoundBf16}, x);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(f16) && std::isnan(bf16));
      continue;
    }
    float wantF16 = fromF16(toF16(x)), wantBf16 = fromBf16(toBf16(x));
    ASSERT_EQ(std::memcmp(&f16, &wantF16, 4), 0) << x;
    ASSERT_EQ(std::memcmp(&bf16, &wantBf16, 4), 0) << x;
  }
}

/// The float of a half's bits by its definition, to check fromF16 against.
static float halfByDefinition(uint16_t h) {
  uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1fu,
           mant = h & 0x3ffu;
  float v = exp == 0      ? std::ldexp(float(mant), -24)
            : exp == 0x1f ? (mant ? NAN : INFINITY)
                          : std::ldexp(float(mant | 0x400u), int(exp) - 25);
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits |= sign;
  std::memcpy(&v, &bits, 4);
  return v;
}

TEST(PrimitiveOps, F16RoundsToNearestEven) {
  // Every half (but NaNs) is read as its value and converts back to itself;
  // NaNs stay NaN.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = fromF16(uint16_t(h));
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      continue;
    }
    float want = halfByDefinition(uint16_t(h));
    ASSERT_EQ(std::memcmp(&f, &want, 4), 0) << std::hex << h; // -0 too
    ASSERT_EQ(toF16(f), h) << std::hex << h;
  }
  EXPECT_EQ(toF16(1.0f + 1.0f / 2048), 0x3c00);    // a tie: to even
  EXPECT_EQ(toF16(1.0f + 3.0f / 2048), 0x3c02);    // a tie: to even, up
  EXPECT_EQ(toF16(65520.0f), 0x7c00);              // past the largest
  EXPECT_EQ(toF16(std::ldexp(1.0f, -25)), 0x0000); // half the smallest
  EXPECT_EQ(toF16(std::ldexp(3.0f, -25)), 0x0002); // 1.5 of it: to even
  EXPECT_EQ(toF16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)),
            0x0400); // the largest subnormal rounds up to the smallest normal
  EXPECT_EQ(toF16(-2.0f), 0xc000);
  EXPECT_EQ(toF16(std::nanf("")) & 0x7e00, 0x7e00);
}

TEST(PrimitiveOps, ASliceOfIdsCopiesThemExactly) {
  // labels[:, 1:] of [2, 4] ids, one beyond a float's integers (2^53 + 1)
  // and one negative (an ignored label).
  std::vector<int64_t> ids = {5, (int64_t(1) << 53) + 1, -100, 7, 1, 2, 3, 4};
  std::vector<int64_t> out(6);
  slice(ids.data(), {2, 4}, {0, 1}, {1, 1}, out.data(), {2, 3});
  EXPECT_EQ(out,
            (std::vector<int64_t>{(int64_t(1) << 53) + 1, -100, 7, 2, 3, 4}));
}
