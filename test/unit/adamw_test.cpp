// Unit tests of the host AdamW: bit-exact against PyTorch's
// torch.optim.AdamW in fp32 on every instruction path and thread count, the
// lossy moment formats beside the fp32 update, their codes and conversions,
// and the host gradient accumulation.
#include "kernels/cpu/primitive_ops.h"
#include "runtime/optim/adamw.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

using namespace mt::runtime;

namespace {

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

TEST(AdamW, AccumulateVectorsAndThreadsGiveTheScalarSum) {
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
