// Unit tests of the static shape rules that the ops, the importer and the
// constant evaluator share: the edge cases of ONNX semantics that IR tests
// do not reach (negative and clamped slice indices, reshape's 0 and -1,
// broadcasting of matmul batch dims).
#include "dialects/Train/IR/ShapeInference.h"

#include <gtest/gtest.h>

#include <climits>

using namespace mt::train;

TEST(ShapeInference, BroadcastFollowsNumpy) {
  Shape out;
  std::string err;
  ASSERT_TRUE(broadcastShapes({2, 1, 4}, {3, 1}, out, err));
  EXPECT_EQ(out, (Shape{2, 3, 4}));
  ASSERT_TRUE(broadcastShapes({}, {5}, out, err));
  EXPECT_EQ(out, (Shape{5}));
  EXPECT_FALSE(broadcastShapes({2, 3}, {4}, out, err));
  EXPECT_EQ(err, "shapes [2,3] and [4] do not broadcast");
}

TEST(ShapeInference, MatmulBroadcastsBatchAndHandlesVectors) {
  Shape out;
  std::string err;
  ASSERT_TRUE(matmulShape({2, 1, 3, 4}, {5, 4, 6}, out, err));
  EXPECT_EQ(out, (Shape{2, 5, 3, 6}));
  ASSERT_TRUE(matmulShape({4}, {4, 6}, out, err));
  EXPECT_EQ(out, (Shape{6}));
  ASSERT_TRUE(matmulShape({3, 4}, {4}, out, err));
  EXPECT_EQ(out, (Shape{3}));
  EXPECT_FALSE(matmulShape({3, 4}, {5, 6}, out, err));
}

TEST(ShapeInference, ReshapeCopiesZeroAndInfersMinusOne) {
  Shape out;
  std::string err;
  ASSERT_TRUE(reshapeShape({2, 16, 64}, {0, 0, -1, 16}, false, out, err));
  EXPECT_EQ(out, (Shape{2, 16, 4, 16}));
  // With allowzero, 0 is a real zero-sized dim.
  ASSERT_TRUE(reshapeShape({0, 4}, {0, 8}, true, out, err));
  EXPECT_EQ(out, (Shape{0, 8}));
  EXPECT_FALSE(reshapeShape({2, 8}, {-1, -1}, false, out, err));
  EXPECT_NE(err.find("more than one -1"), std::string::npos);
  EXPECT_FALSE(reshapeShape({2, 8}, {3, -1}, false, out, err));
}

TEST(ShapeInference, SliceClampsAndCountsFromTheEnd) {
  SliceParams p;
  std::string err;
  // x[..., 8:] with an INT64_MAX end, as exporters write it.
  ASSERT_TRUE(sliceShape({2, 16}, {8}, {INT64_MAX}, {-1}, {1}, p, err));
  EXPECT_EQ(p.size, (Shape{2, 8}));
  EXPECT_EQ(p.start[1], 8);
  // Negative start, step 2.
  ASSERT_TRUE(sliceShape({10}, {-5}, {10}, {0}, {2}, p, err));
  EXPECT_EQ(p.size, (Shape{3}));
  EXPECT_EQ(p.start[0], 5);
  // Reverse: x[::-1].
  ASSERT_TRUE(sliceShape({4}, {-1}, {INT64_MIN}, {0}, {-1}, p, err));
  EXPECT_EQ(p.size, (Shape{4}));
  EXPECT_EQ(p.start[0], 3);
  // Empty and invalid.
  ASSERT_TRUE(sliceShape({4}, {3}, {1}, {0}, {1}, p, err));
  EXPECT_EQ(p.size, (Shape{0}));
  EXPECT_FALSE(sliceShape({4}, {0}, {1}, {0}, {0}, p, err));
  EXPECT_FALSE(sliceShape({4}, {0}, {1}, {1}, {1}, p, err));
}

TEST(ShapeInference, PadTileRangeAndAxes) {
  Shape out;
  std::string err;
  ASSERT_TRUE(padShape({2, 16}, {0, 0, 0, 1}, out, err));
  EXPECT_EQ(out, (Shape{2, 17}));
  EXPECT_FALSE(padShape({2, 16}, {0, 1}, out, err));
  ASSERT_TRUE(tileShape({2, 3}, {2, 1}, out, err));
  EXPECT_EQ(out, (Shape{4, 3}));
  int64_t n;
  ASSERT_TRUE(rangeLength(0, 10, 3, n, err));
  EXPECT_EQ(n, 4);
  ASSERT_TRUE(rangeLength(5, 0, -1, n, err));
  EXPECT_EQ(n, 5);
  EXPECT_FALSE(rangeLength(0, 1, 0, n, err));
  ASSERT_TRUE(normalizeAxes({-1, 0}, 3, out, err));
  EXPECT_EQ(out, (Shape{0, 2}));
  EXPECT_FALSE(normalizeAxes({1, -2}, 3, out, err));
  EXPECT_FALSE(normalizeAxes({3}, 3, out, err));
}
