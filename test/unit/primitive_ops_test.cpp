// The CPU kernels of the primitive ops a plan can contain, against values
// worked out by hand, and the bf16 rounding of bf16 storage.
#include "kernels/cpu/primitive_ops.h"

#include <gtest/gtest.h>

#include <cmath>

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
