// DISK arenas: bytes come back exactly as written, raw or shuffled and
// compressed; unwritten buffers read as zeros; the file leaves nothing in
// the directory.
#include "runtime/exec/disk_arena.h"

#include <gtest/gtest.h>

#include <cstring>
#include <dirent.h>
#include <random>
#include <sys/stat.h>

using mt::runtime::DiskArena;

namespace {

int entries(const std::string &dir) {
  DIR *d = ::opendir(dir.c_str());
  int n = 0;
  while (dirent *e = ::readdir(d))
    n += std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0;
  ::closedir(d);
  return n;
}

/// Adam-moment-like values: small floats with random mantissas.
std::vector<float> moments(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1e-3f);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

TEST(DiskArena, WhatIsWrittenReadsBackExactly) {
  std::string dir = ::testing::TempDir() + "disk_arena_test";
  ::mkdir(dir.c_str(), 0755);
  for (mt::plan::DiskFormat format : {mt::plan::RAW, mt::plan::SHUFFLE_ZSTD}) {
    SCOPED_TRACE(mt::plan::DiskFormat_Name(format));
    mt::plan::Arena desc;
    desc.set_name("disk");
    desc.set_tier(mt::plan::DISK);
    desc.set_size_bytes(1 << 20);
    desc.set_disk_format(format);
    std::unique_ptr<DiskArena> arena;
    ASSERT_TRUE(DiskArena::create(dir, desc, 2, arena).isOk());
    EXPECT_EQ(entries(dir), 0) << "the file is unlinked at creation";

    std::vector<float> back(4096, 1.0f);
    ASSERT_TRUE(arena->read(8192, back.data(), back.size() * 4, 4).isOk());
    for (float x : back)
      ASSERT_EQ(x, 0.0f) << "an unwritten buffer reads as zeros";

    // Moments, constant data, and a second buffer that must stay separate.
    std::vector<float> a = moments(4096, 1), b(4096, 0.25f);
    ASSERT_TRUE(arena->write(0, a.data(), a.size() * 4, 4).isOk());
    ASSERT_TRUE(arena->write(65536, b.data(), b.size() * 4, 4).isOk());
    ASSERT_TRUE(arena->read(0, back.data(), back.size() * 4, 4).isOk());
    EXPECT_EQ(std::memcmp(back.data(), a.data(), a.size() * 4), 0);
    ASSERT_TRUE(arena->read(65536, back.data(), back.size() * 4, 4).isOk());
    EXPECT_EQ(std::memcmp(back.data(), b.data(), b.size() * 4), 0);
    // Overwritten with values that compress differently.
    std::vector<float> c = moments(4096, 2);
    ASSERT_TRUE(arena->write(65536, c.data(), c.size() * 4, 4).isOk());
    ASSERT_TRUE(arena->read(65536, back.data(), back.size() * 4, 4).isOk());
    EXPECT_EQ(std::memcmp(back.data(), c.data(), c.size() * 4), 0);
    if (format == mt::plan::SHUFFLE_ZSTD) {
      // Shuffling puts the exponent bytes of similar values together.
      EXPECT_LT(arena->storedBytes(), uint64_t(2 * 4096 * 4));
    }
  }
}

TEST(DiskArena, ShuffleIsAPermutation) {
  std::vector<uint16_t> v(1000);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = uint16_t(i * 7919u);
  std::vector<uint8_t> s(v.size() * 2);
  std::vector<uint16_t> back(v.size());
  mt::runtime::shuffleBytes(v.data(), v.size(), 2, s.data());
  EXPECT_EQ(s[0], uint8_t(v[0])); // low bytes first
  EXPECT_EQ(s[v.size()], uint8_t(v[0] >> 8));
  mt::runtime::unshuffleBytes(s.data(), v.size(), 2, back.data());
  EXPECT_EQ(back, v);
}

TEST(DiskArena, AMissingDirectoryIsNamed) {
  mt::plan::Arena desc;
  desc.set_name("disk");
  desc.set_tier(mt::plan::DISK);
  desc.set_size_bytes(4096);
  std::unique_ptr<DiskArena> arena;
  auto st = DiskArena::create("/nonexistent/dir", desc, 1, arena);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("cannot create a file in '/nonexistent/dir'"),
            std::string::npos)
      << st.message();
}

} // namespace
