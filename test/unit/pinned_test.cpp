// Pinned memory at scale (runtime/exec/pinned.h): where an arena's registration
// is cut into chunks, and the locked-memory limit check.
#include "runtime/exec/pinned.h"

#include <gtest/gtest.h>

using namespace mt::runtime;
using mt::plan::Plan;

namespace {

constexpr uint64_t kPage = kPinPage;

/// An arena 0 holding F32 buffers of `bytes` each at `offsets`.
Plan arenaWith(std::vector<std::pair<uint64_t, uint64_t>> buffers) {
  Plan p;
  p.add_arenas()->set_tier(mt::plan::HOST_PINNED);
  for (auto [offset, bytes] : buffers) {
    auto *b = p.add_buffers();
    b->set_arena(0);
    b->set_offset(offset);
    b->set_dtype(mt::plan::F32);
    b->add_shape(int64_t(bytes / 4));
  }
  return p;
}

using Chunks = std::vector<std::pair<uint64_t, uint64_t>>;

TEST(Pinned, ChunksASmallArenaIsOneCall) {
  Plan p = arenaWith({{0, 4 * kPage}});
  EXPECT_EQ(pinChunks(p, 0, 4 * kPage, 8 * kPage), (Chunks{{0, 4 * kPage}}));
}

TEST(Pinned, ChunksCutsFallBetweenBuffersOnPages) {
  // Buffers of 3 pages back to back: a chunk of 8 pages would cut the third
  // buffer; the cut moves back to its start (page 6).
  Plan p = arenaWith({{0, 3 * kPage},
                      {3 * kPage, 3 * kPage},
                      {6 * kPage, 3 * kPage},
                      {9 * kPage, 3 * kPage}});
  EXPECT_EQ(pinChunks(p, 0, 12 * kPage, 8 * kPage),
            (Chunks{{0, 6 * kPage}, {6 * kPage, 12 * kPage}}));
  // A buffer that starts inside a page: the cut goes to that page's start,
  // which the buffer before it does not reach.
  Plan q = arenaWith({{0, 3 * kPage}, {3 * kPage + 100, 4 * kPage}});
  EXPECT_EQ(pinChunks(q, 0, 8 * kPage, 5 * kPage),
            (Chunks{{0, 3 * kPage}, {3 * kPage, 8 * kPage}}));
  // Buffers with no page boundary between them are one span: no cut avoids
  // them, and the chunk is cut where it reaches.
  Plan r = arenaWith({{0, 5 * kPage + 100}, {5 * kPage + 100, 4 * kPage}});
  EXPECT_EQ(pinChunks(r, 0, 10 * kPage, 8 * kPage),
            (Chunks{{0, 8 * kPage}, {8 * kPage, 10 * kPage}}));
}

TEST(Pinned, ChunksABufferLargerThanAChunkSpansACut) {
  Plan p = arenaWith({{0, 20 * kPage}});
  EXPECT_EQ(pinChunks(p, 0, 20 * kPage, 8 * kPage),
            (Chunks{{0, 8 * kPage},
                    {8 * kPage, 16 * kPage},
                    {16 * kPage, 20 * kPage}}));
}

TEST(Pinned, ChunksOverlappingBuffersAreOneSpan) {
  // Two buffers the memory planner placed over each other (disjoint
  // lifetimes) and a third after them.
  Plan p = arenaWith(
      {{0, 6 * kPage}, {2 * kPage, 6 * kPage}, {8 * kPage, 4 * kPage}});
  EXPECT_EQ(pinChunks(p, 0, 12 * kPage, 10 * kPage),
            (Chunks{{0, 8 * kPage}, {8 * kPage, 12 * kPage}}));
}

TEST(Pinned, MemlockALimitBelowThePlanIsRefusedWithWhatToRaise) {
  Status st = checkMemlock(uint64_t(3) << 30, uint64_t(64) << 20, false);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("the plan pins 3.00 GiB of host memory"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("limit of 0.06 GiB (ulimit -l): raise it"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("mtc --pinned-mem"), std::string::npos);
}

TEST(Pinned, MemlockNoLimitACapabilityOrEnoughPass) {
  EXPECT_TRUE(checkMemlock(uint64_t(1) << 40, ~uint64_t(0), false).isOk());
  EXPECT_TRUE(checkMemlock(uint64_t(1) << 40, 1 << 20, true).isOk());
  EXPECT_TRUE(checkMemlock(1 << 20, 1 << 20, false).isOk());
  EXPECT_TRUE(checkMemlock(0, 0, false).isOk());
}

} // namespace
