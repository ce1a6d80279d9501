// Unit tests of the safetensors header reader: valid files, and every kind of
// malformed header refused with a message instead of a crash.
#include "runtime/io/safetensors.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace {

std::string writeFile(const std::string &name, const std::string &header,
                      size_t dataBytes, bool lieAboutSize = false) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream f(path, std::ios::binary);
  uint64_t n = header.size() + (lieAboutSize ? 1000 : 0);
  for (int i = 0; i < 8; ++i)
    f.put(static_cast<char>((n >> (8 * i)) & 0xff));
  f << header << std::string(dataBytes, '\0');
  return path;
}

TEST(Safetensors, ReadsNamesShapesAndAbsoluteOffsets) {
  std::string header =
      R"({"b":{"dtype":"F32","shape":[2,3],"data_offsets":[8,32]},)"
      R"("a":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},)"
      R"("empty":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},)"
      R"("__metadata__":{"format":"pt"}})";
  std::string path = writeFile("ok.safetensors", header, 32);
  mt::runtime::SafetensorsHeader h;
  auto st = mt::runtime::readSafetensorsHeader(path, h);
  ASSERT_TRUE(st.isOk()) << st.message();
  ASSERT_EQ(h.entries.size(), 3u);
  EXPECT_EQ(h.entries[0].name, "a");
  EXPECT_EQ(h.entries[0].offset, 8 + header.size());
  EXPECT_EQ(h.entries[0].length, 8u);
  EXPECT_EQ(h.entries[1].name, "empty");
  EXPECT_EQ(h.entries[1].length, 0u);
  EXPECT_EQ(h.entries[2].name, "b");
  EXPECT_EQ(h.entries[2].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h.entries[2].offset, 8 + header.size() + 8);
}

struct BadCase {
  const char *name, *header;
  size_t data;
  bool lie;
  const char *expect;
};

class Safetensors : public ::testing::TestWithParam<BadCase> {};

TEST_P(Safetensors, ABadFileIsRefusedWithAReason) {
  const BadCase &c = GetParam();
  std::string path =
      writeFile(std::string(c.name) + ".safetensors", c.header, c.data, c.lie);
  mt::runtime::SafetensorsHeader h;
  auto st = mt::runtime::readSafetensorsHeader(path, h);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find(c.expect), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
}

INSTANTIATE_TEST_SUITE_P(
    Headers, Safetensors,
    ::testing::Values(
        BadCase{"notjson", "{oops", 0, false, "not a JSON object"},
        BadCase{"truncated", "{}", 0, true, "exceeds the file"},
        BadCase{"nofields", R"({"a":{"dtype":"F32"}})", 0, false,
                "needs dtype, shape and data_offsets"},
        BadCase{"dtype",
                R"({"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})", 1,
                false, "unknown dtype"},
        BadCase{"outside",
                R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8,
                false, "fall outside"},
        BadCase{"length",
                R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
                false, "needs 12"},
        BadCase{"overlap",
                R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                12, false, "tensors 'a' [0, 8) and 'b' [4, 12) overlap"},
        BadCase{"same_range",
                R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                8, false, "tensors 'a' [0, 8) and 'b' [0, 8) overlap"},
        BadCase{"gap",
                R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                12, false,
                "bytes [4, 8) of the data region between 'a' [0, 4) and 'b' "
                "[8, 12) belong to no tensor"},
        BadCase{"trailing",
                R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8,
                false,
                "bytes [4, 8) of the data region after 'a' [0, 4) "
                "belong to no tensor"},
        BadCase{"wrapping_shape",
                R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],)"
                R"("data_offsets":[0,0]}})",
                0, false, "shape of 2^63 or more bytes"}),
    [](const auto &info) { return std::string(info.param.name); });

TEST(Safetensors, MissingFileIsAnError) {
  mt::runtime::SafetensorsHeader h;
  auto st = mt::runtime::readSafetensorsHeader("/nonexistent/x.safetensors", h);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("cannot open"), std::string::npos);
}

} // namespace
