// The weights' initialisation from scratch (runtime/train/init.h): the same
// values whatever the threads, its own values for each name and seed.
#include "runtime/train/init.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace mt::runtime;

TEST(Init, NormalIsDeterministicAndOfTheRightSpread) {
  int64_t n = 1 << 20;
  std::vector<float> a(n), b(n), c(n), d(n);
  mt::runtime::initNormal(a.data(), n, 3, "w", 0.02f, 1);
  mt::runtime::initNormal(b.data(), n, 3, "w", 0.02f, 4);
  mt::runtime::initNormal(c.data(), n, 3, "u", 0.02f, 1);
  mt::runtime::initNormal(d.data(), n, 4, "w", 0.02f, 1);
  EXPECT_EQ(a, b) << "the thread count changes nothing";
  EXPECT_NE(a, c) << "each name has its own values";
  EXPECT_NE(a, d) << "each seed has its own values";
  double sum = 0, sq = 0;
  for (float x : a) {
    sum += x;
    sq += double(x) * x;
  }
  double mean = sum / double(n), sd = std::sqrt(sq / double(n) - mean * mean);
  EXPECT_NEAR(mean, 0.0, 1e-4);       // 5 standard errors of the mean
  EXPECT_NEAR(sd, 0.02, 0.02 * 0.01); // within 1%
  // An odd count fills its last element too.
  std::vector<float> odd(3, 99.0f);
  mt::runtime::initNormal(odd.data(), 3, 3, "w", 0.02f, 1);
  EXPECT_EQ(odd[0], a[0]);
  EXPECT_EQ(odd[2], a[2]);
}
