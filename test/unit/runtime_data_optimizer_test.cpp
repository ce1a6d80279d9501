// Unit tests of the token data reader (windows, wrap-around, both target
// kinds, every refusal) and of the host AdamW (bit-exact against PyTorch's
// torch.optim.AdamW in fp32, independent of the thread count).
#include "kernels/cpu/primitive_ops.h"
#include "runtime/adamw.h"
#include "runtime/init.h"
#include "runtime/numa.h"
#include "runtime/token_data.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
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

TEST(AdamW, MatchesTorchBitForBit) {
  // torch 1.13, torch.optim.AdamW(lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
  // weight_decay=0.1), fp32, three steps with these gradients.
  std::vector<float> p = {0.5f, -1.0f, 2.0f, 0.0f}, m(4, 0.0f), v(4, 0.0f);
  float grads[3][4] = {{0.1f, -0.2f, 0.3f, 0.0f},
                       {0.05f, 0.4f, -0.3f, 1e-3f},
                       {-0.2f, 0.1f, 0.0f, 2.0f}};
  AdamWConfig c{1e-3, 0.9, 0.95, 1e-8, 0.1};
  for (int t = 0; t < 3; ++t)
    adamwStep(p.data(), grads[t], m.data(), v.data(), 4, t + 1, c);
  EXPECT_EQ(p[0], 0x1.fe11b8p-2f);
  EXPECT_EQ(p[1], -0x1.ffbbf2p-1f);
  EXPECT_EQ(p[2], 0x1.ff9d4ep+0f);
  EXPECT_EQ(p[3], -0x1.641752p-10f);
}

TEST(AdamW, Bf16MomentsRoundTheFp32Update) {
  // One step from zero moments: the bf16 update computes in fp32, so the
  // parameters match the fp32 update and the stored moments are the fp32
  // moments rounded to bf16.
  std::vector<float> p = {0.5f, -1.0f, 2.0f}, g = {0.1f, -0.2f, 0.3f};
  std::vector<float> p32 = p, m(3, 0.0f), v(3, 0.0f);
  std::vector<uint16_t> m16(3, 0), v16(3, 0);
  AdamWConfig c{1e-3, 0.9, 0.95, 1e-8, 0.1};
  adamwStep(p32.data(), g.data(), m.data(), v.data(), 3, 1, c);
  adamwStepBf16Moments(p.data(), g.data(), m16.data(), v16.data(), 3, 1, c);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(p[i], p32[i]);
    EXPECT_EQ(m16[i], mt::kernels::cpu::toBf16(m[i]));
    EXPECT_EQ(v16[i], mt::kernels::cpu::toBf16(v[i]));
  }
}

/// 20 steps of a blockwise format's update beside the fp32 one, over
/// gradients whose scale differs by 100x from block to block (and is alike
/// within one, as in a weight matrix), the first block's zero: the first
/// step from zero moments computes in fp32 and matches exactly; the
/// parameters then stay within `tolerance` of the fp32 path's total
/// movement; the zero block's scales stay 0 and its parameters put.
/// `step(p, g, ms, vs, n, t, c)` runs the format's update on moments of its
/// own, scales `ms` and `vs`.
void followsTheFp32Update(
    const std::function<void(float *, const float *, float *, float *, int64_t,
                             int, const AdamWConfig &)> &step,
    int64_t n, double tolerance) {
  int64_t blocks = (n + kMomentBlock - 1) / kMomentBlock;
  std::mt19937 rng(5);
  std::normal_distribution<float> d;
  std::vector<float> p0(n);
  for (float &x : p0)
    x = d(rng);
  std::vector<float> p32 = p0, pq = p0, m(n, 0.0f), v(n, 0.0f);
  std::vector<float> ms(blocks, 0.0f), vs(blocks, 0.0f);
  AdamWConfig c{1e-3, 0.9, 0.95, 1e-8, 0.0};
  const float scale[] = {0.0f, 1.0f, 1e-2f, 0.1f};
  for (int t = 1; t <= 20; ++t) {
    std::vector<float> g(n);
    for (int64_t i = 0; i < n; ++i)
      g[i] = (d(rng) + 0.5f) * scale[i / kMomentBlock];
    adamwStep(p32.data(), g.data(), m.data(), v.data(), n, t, c);
    step(pq.data(), g.data(), ms.data(), vs.data(), n, t, c);
    if (t == 1)
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(pq[i], p32[i]) << i;
  }
  double moved = 0, diff = 0;
  for (int64_t i = 0; i < n; ++i) {
    moved += std::fabs(p32[i] - p0[i]);
    diff += std::fabs(pq[i] - p32[i]);
  }
  EXPECT_LT(diff, tolerance * moved) << diff << " vs " << moved;
  EXPECT_EQ(ms[0], 0.0f);
  EXPECT_EQ(vs[0], 0.0f);
  for (int64_t i = 0; i < kMomentBlock; ++i)
    ASSERT_EQ(pq[i], p0[i]);
}

TEST(AdamW, EightBitMomentsFollowTheFp32Update) {
  // Within 5% (a block mixing magnitudes 1e4 apart does worse: its small
  // values round to the smallest codes).
  int64_t n = 3 * kMomentBlock + 17; // a partial last block
  std::vector<int8_t> m8(n, 0);
  std::vector<uint8_t> v8(n, 0);
  followsTheFp32Update(
      [&](float *p, const float *g, float *ms, float *vs, int64_t count, int t,
          const AdamWConfig &c) {
        adamwStep8bitMoments(p, g, m8.data(), ms, v8.data(), vs, count, t, c);
      },
      n, 0.05);
}

TEST(AdamW, FourBitMomentsFollowTheFp32Update) {
  // Within 15% (7 magnitudes and 16 levels of v against 127 and 255); the
  // odd last element shares its byte with its neighbour without disturbing
  // it.
  int64_t n = 3 * kMomentBlock + 17; // a partial last block, an odd count
  std::vector<uint8_t> m4((n + 1) / 2, 0), v4((n + 1) / 2, 0);
  followsTheFp32Update(
      [&](float *p, const float *g, float *ms, float *vs, int64_t count, int t,
          const AdamWConfig &c) {
        adamwStep4bitMoments(p, g, m4.data(), ms, v4.data(), vs, count, t, c);
      },
      n, 0.15);
}

TEST(AdamW, FourBitCodes) {
  // One element at the block's largest magnitude decodes exactly (code 7,
  // sign bit for a negative m; v at code 15); a v far below the block's
  // largest decodes to the smallest level, (1/16)^4 of it, not zero, so
  // that its element's step stays bounded by m / sqrt(v).
  int64_t n = 3;
  std::vector<uint8_t> m4(2, 0), v4(2, 0);
  float ms = 0, vs = 0;
  std::vector<float> p = {0, 0, 0};
  // From zero moments with beta1 = beta2 = 0: m = g and v = g^2 after one
  // step, which the encoding then stores.
  std::vector<float> g = {-2.0f, 1e-6f, 0.0f};
  AdamWConfig c{1e-3, 0.0, 0.0, 1e-8, 0.0};
  adamwStep4bitMoments(p.data(), g.data(), m4.data(), &ms, v4.data(), &vs, n, 1,
                       c);
  EXPECT_EQ(ms, 2.0f);
  EXPECT_EQ(vs, 4.0f);
  EXPECT_EQ(m4[0] & 15, 8 | 7) << "-2: the sign and the largest magnitude";
  EXPECT_EQ(v4[0] & 15, 15);
  EXPECT_EQ(m4[0] >> 4, 0) << "1e-6 of 2 rounds to zero";
  EXPECT_EQ(v4[0] >> 4, 0) << "the smallest level, 4 / 16^4";
  EXPECT_EQ(m4[1], 0) << "the third element, and nothing beyond it";
  EXPECT_EQ(v4[1], 0);
}

TEST(AdamW, MomentConversionsAreTheUpdatesCodecs) {
  // A checkpoint's moments converted between formats (checkpoint.cpp):
  // decoding is what an update decodes, encoding what it stores. Encoding
  // decoded codes gives the same codes and scales back, so a conversion
  // that widens and narrows again loses nothing more.
  int64_t n = 2 * kMomentBlock + 5; // a partial last block, an odd count
  std::vector<float> m(n), v(n);
  for (int64_t i = 0; i < n; ++i) {
    m[i] = std::sin(0.37f * float(i)) * std::pow(10.0f, float(i % 7) - 6);
    v[i] = m[i] * m[i] + 1e-12f * float(i);
  }
  int64_t blocks = (n + kMomentBlock - 1) / kMomentBlock;
  std::vector<float> ms(blocks), vs(blocks), ms2(blocks), vs2(blocks);
  std::vector<int8_t> m8(n), m8b(n);
  std::vector<uint8_t> v8(n), v8b(n), m4((n + 1) / 2), v4((n + 1) / 2),
      m4b((n + 1) / 2), v4b((n + 1) / 2);
  std::vector<uint16_t> m16(n), v16(n);
  auto q8 = [&](int8_t *qm, uint8_t *qv, float *sm, float *sv) {
    Moments s;
    s.m8 = qm;
    s.v8 = qv;
    s.mScale = sm;
    s.vScale = sv;
    return s;
  };
  auto q4 = [&](uint8_t *qm, uint8_t *qv, float *sm, float *sv) {
    Moments s;
    s.m4 = qm;
    s.v4 = qv;
    s.mScale = sm;
    s.vScale = sv;
    return s;
  };
  std::vector<float> dm(n), dv(n);
  for (bool four : {false, true}) {
    Moments a = four ? q4(m4.data(), v4.data(), ms.data(), vs.data())
                     : q8(m8.data(), v8.data(), ms.data(), vs.data());
    Moments b = four ? q4(m4b.data(), v4b.data(), ms2.data(), vs2.data())
                     : q8(m8b.data(), v8b.data(), ms2.data(), vs2.data());
    encodeMoments(m.data(), v.data(), n, a);
    decodeMoments(a, n, dm.data(), dv.data());
    encodeMoments(dm.data(), dv.data(), n, b);
    EXPECT_EQ(ms, ms2);
    EXPECT_EQ(vs, vs2);
    if (four) {
      EXPECT_EQ(m4, m4b);
      EXPECT_EQ(v4, v4b);
    } else {
      EXPECT_EQ(m8, m8b);
      EXPECT_EQ(v8, v8b);
    }
    for (int64_t i = 0; i < n; ++i)
      EXPECT_LE(std::fabs(dm[i] - m[i]),
                ms[i / kMomentBlock] * (four ? 0.3f : 0.03f))
          << i;
  }
  Moments half;
  half.m16 = m16.data();
  half.v16 = v16.data();
  encodeMoments(m.data(), v.data(), n, half);
  decodeMoments(half, n, dm.data(), dv.data());
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(m16[i], mt::kernels::cpu::toBf16(m[i]));
    EXPECT_EQ(dv[i],
              mt::kernels::cpu::fromBf16(mt::kernels::cpu::toBf16(v[i])));
  }
}

TEST(AdamW, VectorPathsGiveTheScalarBits) {
  // Odd length: the vector loops and their scalar tails both run.
  int64_t n = 1000 + 13;
  std::mt19937 rng(11);
  std::normal_distribution<float> d;
  std::vector<float> p0(n), g(n), m0(n), v0(n);
  for (int64_t i = 0; i < n; ++i) {
    p0[i] = d(rng);
    g[i] = d(rng) * (i % 7 ? 1.0f : 1e-6f);
    m0[i] = d(rng) * 1e-2f;
    v0[i] = std::fabs(d(rng)) * 1e-4f;
  }
  AdamWConfig c{1e-3, 0.9, 0.95, 1e-8, 0.1};
  std::vector<float> ps = p0, ms = m0, vs = v0;
  adamwStep(ps.data(), g.data(), ms.data(), vs.data(), n, 3, c, 0.5f,
            AdamWIsa::Scalar);
  for (AdamWIsa isa : {AdamWIsa::Avx2, AdamWIsa::Avx512}) {
    if ((isa == AdamWIsa::Avx512 && !__builtin_cpu_supports("avx512f")) ||
        (isa == AdamWIsa::Avx2 && !__builtin_cpu_supports("avx2"))) {
      std::printf("(%s: not on this CPU)\n", adamwIsaName(isa));
      continue;
    }
    std::vector<float> p = p0, m = m0, v = v0;
    adamwStep(p.data(), g.data(), m.data(), v.data(), n, 3, c, 0.5f, isa);
    EXPECT_EQ(std::memcmp(p.data(), ps.data(), n * 4), 0) << adamwIsaName(isa);
    EXPECT_EQ(std::memcmp(m.data(), ms.data(), n * 4), 0) << adamwIsaName(isa);
    EXPECT_EQ(std::memcmp(v.data(), vs.data(), n * 4), 0) << adamwIsaName(isa);
  }
}

TEST(Accumulate, VectorsAndThreadsGiveTheScalarSum) {
  int64_t n = (1 << 18) + 7; // several threads' chunks and a scalar tail
  std::mt19937 rng(13);
  std::normal_distribution<float> d;
  std::vector<float> base(n), src(n);
  std::vector<uint16_t> src16(n);
  for (int64_t i = 0; i < n; ++i) {
    base[i] = d(rng);
    src[i] = d(rng);
    src16[i] = mt::kernels::cpu::toBf16(src[i]);
  }
  std::vector<float> want = base, want16 = base;
  for (int64_t i = 0; i < n; ++i) {
    want[i] += src[i];
    want16[i] += mt::kernels::cpu::fromBf16(src16[i]);
  }
  for (int threads : {1, 3}) {
    std::vector<float> got = base, got16 = base;
    accumulateParallel(got.data(), src.data(), nullptr, n, threads);
    accumulateParallel(got16.data(), nullptr, src16.data(), n, threads);
    EXPECT_EQ(got, want) << threads;
    EXPECT_EQ(got16, want16) << threads;
  }
}

TEST(AdamW, ThreadCountDoesNotChangeTheResult) {
  int64_t n = 100003;
  std::mt19937 rng(3);
  std::normal_distribution<float> d;
  std::vector<float> p(n), g(n);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = d(rng);
    g[i] = d(rng);
  }
  std::vector<float> p1 = p, m1(n, 0.0f), v1(n, 0.0f);
  std::vector<float> p4 = p, m4(n, 0.0f), v4(n, 0.0f);
  AdamWConfig c;
  for (int step = 1; step <= 2; ++step) {
    Moments s1, s4;
    s1.m = m1.data();
    s1.v = v1.data();
    s4.m = m4.data();
    s4.v = v4.data();
    adamwStepParallel(p1.data(), g.data(), s1, n, step, c, 0.5f, 1);
    adamwStepParallel(p4.data(), g.data(), s4, n, step, c, 0.5f, 4);
  }
  EXPECT_EQ(std::memcmp(p1.data(), p4.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(v1.data(), v4.data(), n * sizeof(float)), 0);
  // 8-bit and 4-bit moments: threads take whole blocks (so that no 4-bit
  // byte is shared by two threads).
  int64_t blocks = (n + kMomentBlock - 1) / kMomentBlock;
  for (bool four : {false, true}) {
    int64_t bytes = four ? (n + 1) / 2 : n;
    std::vector<float> q1 = p, q4 = p;
    std::vector<uint8_t> m1q(bytes, 0), v1q(bytes, 0), m4q(bytes, 0),
        v4q(bytes, 0);
    std::vector<float> ms1(blocks, 0), vs1(blocks, 0), ms4(blocks, 0),
        vs4(blocks, 0);
    auto moments = [&](std::vector<uint8_t> &m, std::vector<uint8_t> &v,
                       std::vector<float> &ms, std::vector<float> &vs) {
      Moments e;
      if (four) {
        e.m4 = m.data();
        e.v4 = v.data();
      } else {
        e.m8 = reinterpret_cast<int8_t *>(m.data());
        e.v8 = v.data();
      }
      e.mScale = ms.data();
      e.vScale = vs.data();
      return e;
    };
    Moments e1 = moments(m1q, v1q, ms1, vs1), e4 = moments(m4q, v4q, ms4, vs4);
    for (int step = 1; step <= 2; ++step) {
      adamwStepParallel(q1.data(), g.data(), e1, n, step, c, 0.5f, 1);
      adamwStepParallel(q4.data(), g.data(), e4, n, step, c, 0.5f, 4);
    }
    EXPECT_EQ(std::memcmp(q1.data(), q4.data(), n * sizeof(float)), 0) << four;
    EXPECT_EQ(ms1, ms4) << four;
    EXPECT_EQ(vs1, vs4) << four;
    EXPECT_EQ(m1q, m4q) << four;
    EXPECT_EQ(v1q, v4q) << four;
  }
  EXPECT_NE(p1[0], p[0]);
}

} // namespace

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
