// Unit tests of how the host state starts and where it lives: the weights'
// initialisation from scratch, and the NUMA topology and placement.
#include "runtime/base/numa.h"
#include "runtime/train/init.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
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

TEST(Numa, ParsesCpuLists) {
  EXPECT_EQ(parseCpuList("0-3,8,10-11"),
            (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parseCpuList("5"), std::vector<int>{5});
  EXPECT_TRUE(parseCpuList("").empty());
  EXPECT_TRUE(parseCpuList("3-1").empty());
  EXPECT_TRUE(parseCpuList("x").empty());
}

TEST(Numa, PartsGoToConsecutiveNodes) {
  // 4 threads over 2 nodes: the first half of every array on node 0.
  EXPECT_EQ(nodeOfPart(0, 4, 2), 0);
  EXPECT_EQ(nodeOfPart(1, 4, 2), 0);
  EXPECT_EQ(nodeOfPart(2, 4, 2), 1);
  EXPECT_EQ(nodeOfPart(3, 4, 2), 1);
  EXPECT_EQ(nodeOfPart(5, 6, 1), 0);
}

TEST(Numa, TopologyAndPlacementWorkHere) {
  const auto &nodes = numaNodes();
  ASSERT_GE(nodes.size(), 1u);
  // Every CPU this machine lists belongs to one node only.
  std::vector<int> all;
  for (const NumaNode &n : nodes)
    all.insert(all.end(), n.cpus.begin(), n.cpus.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());
  // Spreading untouched memory succeeds (a no-op on one node), and the
  // memory is then usable as usual.
  size_t bytes = size_t(4) << 20;
  std::unique_ptr<char[]> untouched(new char[bytes]);
  EXPECT_TRUE(spreadOverNodes(untouched.get(), bytes));
  std::memset(untouched.get(), 1, bytes);
  EXPECT_EQ(untouched[bytes - 1], 1);
  bindThreadToNode(0);
}
