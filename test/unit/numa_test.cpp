// Where the host state lives (runtime/base/numa.h): the NUMA topology, which
// node each part of an array goes to, and placing memory and threads.
#include "runtime/base/numa.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

using namespace mt::runtime;

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
