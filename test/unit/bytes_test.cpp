// Byte counts in words (runtime/base/bytes.h), as every message shows them.
#include "runtime/base/bytes.h"

#include <gtest/gtest.h>

using namespace mt::runtime;

namespace {

TEST(Bytes, ScaledToTheLargestUnitThatLeavesOne) {
  EXPECT_EQ(bytesText(512), "512 B");
  EXPECT_EQ(bytesText(1536), "1.50 KiB");
  EXPECT_EQ(bytesText(204703168), "195.22 MiB");
  EXPECT_EQ(bytesText(1.5 * 1024 * 1024 * 1024 * 1024), "1.50 TiB");
}

TEST(Bytes, BetweenTheGivenUnits) {
  // The planner's: KiB to GiB, however many GiB.
  EXPECT_EQ(bytesText(512, ByteUnit::KiB, ByteUnit::GiB), "0.50 KiB");
  EXPECT_EQ(bytesText(1536.0 * (1 << 30), ByteUnit::KiB, ByteUnit::GiB),
            "1536.00 GiB");
  // Host memory limits: GiB always.
  EXPECT_EQ(gibText(64.0 * (1 << 20)), "0.06 GiB");
  EXPECT_EQ(gibText(0), "0.00 GiB");
}

} // namespace
