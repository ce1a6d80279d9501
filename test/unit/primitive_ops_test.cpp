// The CPU kernels of the primitive ops a plan can contain, against values
// worked out by hand, and the bf16 rounding of bf16 storage.
#include "kernels/cpu/primitive_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

using namespace mt::kernels::cpu;

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

TEST(PrimitiveOps, TransposeConcatAndSplitInvert) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6}, t(6);
  transpose(x.data(), {2, 3}, {1, 0}, t.data());
  EXPECT_EQ(t, (std::vector<float>{1, 4, 2, 5, 3, 6}));
  std::vector<float> a = {1, 2, 3, 4}, b = {5, 6}, cat(6);
  concat({a.data(), b.data()}, {{2, 2}, {2, 1}}, 1, cat.data());
  EXPECT_EQ(cat, (std::vector<float>{1, 2, 5, 3, 4, 6}));
  std::vector<float> a2(4), b2(2);
  split(cat.data(), {2, 3}, 1, {a2.data(), b2.data()}, {{2, 2}, {2, 1}});
  EXPECT_EQ(a2, a);
  EXPECT_EQ(b2, b);
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

/// The float of a half's bits (every half is a float), for the check below.
static float fromF16(uint16_t h) {
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
  // Every half (but NaNs) converts back to itself.
  for (uint32_t h = 0; h < 0x10000; ++h)
    if ((h & 0x7c00u) != 0x7c00u || !(h & 0x3ffu))
      ASSERT_EQ(toF16(fromF16(uint16_t(h))), h) << std::hex << h;
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
