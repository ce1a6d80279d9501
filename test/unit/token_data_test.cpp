// Unit tests of the token data reader: windows and their wrap-around, both
// target kinds, packed and padded examples, and every refusal.
#include "runtime/io/token_data.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

using namespace mt::runtime;

namespace {

std::string writeTokens(const std::string &name,
                        const std::vector<uint32_t> &ids, int width,
                        size_t extraBytes = 0) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream f(path, std::ios::binary);
  for (uint32_t id : ids)
    for (int b = 0; b < width; ++b)
      f.put(char((id >> (8 * b)) & 0xff));
  f << std::string(extraBytes, '\0');
  return path;
}

TEST(TokenData, WindowsRestartWhenTheRestIsTooShort) {
  std::string path = writeTokens("seq.u16", {0, 1, 2, 3, 4, 5, 6, 7, 8}, 2);
  TokenData data;
  ASSERT_TRUE(
      TokenData::open(path, TokenType::U16, 9, 2, 2, TargetKind::Targets, data)
          .isOk());
  TokenBatch b;
  data.next(b);
  EXPECT_EQ(b.inputs, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(b.targets, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(data.position(), 4);
  data.next(b);
  EXPECT_EQ(b.inputs, (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(b.targets, (std::vector<int64_t>{5, 6, 7, 8}));
  // 1 token left: the next window starts again at the beginning.
  EXPECT_EQ(data.position(), 0);
}

TEST(TokenData, LabelsAreTheInputsAndNeedNoExtraToken) {
  std::string path = writeTokens("labels.u16", {3, 1, 4, 1}, 2);
  TokenData data;
  ASSERT_TRUE(
      TokenData::open(path, TokenType::U16, 8, 2, 2, TargetKind::Labels, data)
          .isOk());
  TokenBatch b;
  data.next(b);
  EXPECT_EQ(b.inputs, (std::vector<int64_t>{3, 1, 4, 1}));
  EXPECT_EQ(b.targets, b.inputs);
  EXPECT_EQ(data.position(), 0);
}

/// A .jsonl file of `lines` in the test's temporary folder.
std::string writeExamples(const std::string &name, const std::string &lines) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << lines;
  return path;
}

TEST(TokenData, PackedExamplesTrainNothingAcrossTheirBoundary) {
  // Two examples of 3 tokens in rows of 4: the second starts mid-row, and
  // its first label (what the first example's last token would predict)
  // is not trained on; a masked prompt stays masked.
  std::string path = writeExamples(
      "pack.jsonl", "{\"input_ids\": [5, 6, 7], \"labels\": [-100, 6, 7]}\n"
                    "{\"input_ids\": [8, 9, 4]}\n"
                    "\n{\"input_ids\": [1, 2, 3, 3, 3]}\n");
  TokenData data;
  int64_t untrained = 0;
  std::string first;
  for (TargetKind kind : {TargetKind::Labels, TargetKind::Targets}) {
    ASSERT_TRUE(TokenData::openExamples(path, 10, 1, 4, kind, Fill::Pack, -100,
                                        data, untrained, first)
                    .isOk());
    TokenBatch b;
    data.next(b);
    EXPECT_EQ(b.inputs, (std::vector<int64_t>{5, 6, 7, 8}));
    if (kind == TargetKind::Labels)
      EXPECT_EQ(b.targets, (std::vector<int64_t>{-100, 6, 7, -100}));
    else // each position's next label within its example
      EXPECT_EQ(b.targets, (std::vector<int64_t>{6, 7, -100, 9}));
    EXPECT_EQ(data.position(), 4);
  }
  EXPECT_EQ(untrained, 0);
}

TEST(TokenData, PaddedExamplesFillOneRowEachAndAreTruncated) {
  std::string path = writeExamples(
      "pad.jsonl",
      "{\"input_ids\": [5, 6], \"attention_mask\": [1, 1]}\n"
      "{\"input_ids\": [1, 2, 3, 4, 5, 6], \"labels\": [-100, 2, 3, 4, 5, 6]}\n"
      "{\"input_ids\": [7, 8, 0], \"labels\": [-100, -100, -100], "
      "\"attention_mask\": [1, 1, 0]}\n");
  TokenData data;
  int64_t untrained = 0;
  std::string first;
  ASSERT_TRUE(TokenData::openExamples(path, 10, 2, 4, TargetKind::Targets,
                                      Fill::Pad, -1, data, untrained, first)
                  .isOk());
  EXPECT_EQ(untrained, 1);
  EXPECT_NE(first.find("pad.jsonl:3"), std::string::npos) << first;
  TokenBatch b;
  data.next(b);
  // Row 0: [5 6] and padding; row 1: the first 4 tokens of the second,
  // whose last kept token has no next one to predict. The masked labels
  // are the loss's ignore index (-1 here).
  EXPECT_EQ(b.inputs, (std::vector<int64_t>{5, 6, 0, 0, 1, 2, 3, 4}));
  EXPECT_EQ(b.targets, (std::vector<int64_t>{6, -1, -1, -1, 2, 3, 4, -1}));
  data.next(b); // the third (its padding dropped), then the first again
  EXPECT_EQ(b.inputs, (std::vector<int64_t>{7, 8, 0, 0, 5, 6, 0, 0}));
  EXPECT_EQ(data.position(), 1);
}

TEST(TokenData, ReadsLittleEndianU32) {
  std::string path = writeTokens("big.u32", {70000, 1, 65536, 3}, 4);
  TokenData data;
  ASSERT_TRUE(TokenData::open(path, TokenType::U32, 100000, 1, 3,
                              TargetKind::Targets, data)
                  .isOk());
  TokenBatch b;
  data.next(b);
  EXPECT_EQ(b.inputs, (std::vector<int64_t>{70000, 1, 65536}));
  EXPECT_EQ(b.targets, (std::vector<int64_t>{1, 65536, 3}));
}

TEST(TokenData, RefusesBadFilesWithTheReason) {
  TokenData data;
  auto expectError = [&](const std::string &path, TokenType type,
                         const char *what) {
    Status s = TokenData::open(path, type, 8, 1, 3, TargetKind::Targets, data);
    ASSERT_FALSE(s.isOk());
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  expectError(::testing::TempDir() + "none.u16", TokenType::U16, "cannot open");
  expectError(writeTokens("empty.u16", {}, 2), TokenType::U16, "is empty");
  expectError(writeTokens("odd.u16", {1, 2, 3, 4}, 2, 1), TokenType::U16,
              "not a whole number of u16 tokens");
  expectError(
      writeTokens("short.u16", {1, 2, 3}, 2), TokenType::U16,
      "3 tokens are too few for one micro-batch of 1 x 3 plus its next token");
  expectError(writeTokens("vocab.u16", {1, 2, 9, 4}, 2), TokenType::U16,
              "token 2 is 9, not below the vocabulary size 8");
}

} // namespace
