// The CPU kernels on the BLAS and the thread pool against their reference
// loops (namespace reference), and the pool itself: results that do not
// depend on how many threads run them or on what else runs beside them.
#include "kernels/cpu/fused_ops.h"
#include "kernels/cpu/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace mt::kernels::cpu;

namespace {

using Vec = std::vector<float>;

Vec randomVec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Vec v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

/// |a - b| / |b| over the whole tensor (|a - b| where b is 0: with no rows,
/// a weight's gradient is 0).
double relError(const Vec &a, const Vec &b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref += double(b[i]) * b[i];
  }
  return std::sqrt(ref > 0 ? diff / ref : diff);
}

/// Restores the pool's thread count after a test that changes it.
struct Threads {
  explicit Threads(int n) : saved(threads()) { setThreads(n); }
  ~Threads() { setThreads(saved); }
  int saved;
};

struct LinearCase {
  int64_t rows, in, out;
  bool outIn, bias;
};

// Garbage in every output first: the kernels overwrite what they write.
// Shapes below and above the size where a GEMM is split over threads, and
// with fewer rows than threads (split by columns).
TEST(CpuTwins, LinearMatchesTheReferenceLoops) {
  for (const LinearCase &c : std::vector<LinearCase>{
           LinearCase{3, 4, 5, true, true}, LinearCase{3, 4, 5, false, false},
           LinearCase{300, 96, 130, true, false},
           LinearCase{300, 96, 130, false, true},
           LinearCase{2, 128, 1000, true, true},
           LinearCase{0, 8, 8, true, true}}) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + " in " +
                 std::to_string(c.in) + " out " + std::to_string(c.out) +
                 (c.outIn ? " [out, in]" : " [in, out]") +
                 (c.bias ? " bias" : ""));
    Vec x = randomVec(c.rows * c.in, 1), w = randomVec(c.in * c.out, 2),
        b = randomVec(c.out, 3), dy = randomVec(c.rows * c.out, 4);
    const float *bias = c.bias ? b.data() : nullptr;
    Vec y(c.rows * c.out, 7.0f), dx(c.rows * c.in, 7.0f), dw(w.size(), 7.0f),
        db(c.out, 7.0f);
    Vec ry(y.size()), rdx(dx.size()), rdw(dw.size()), rdb(db.size());
    linearForward(x.data(), w.data(), bias, c.rows, c.in, c.out, c.outIn,
                  y.data());
    linearBackward(x.data(), w.data(), dy.data(), c.rows, c.in, c.out, c.outIn,
                   dx.data(), dw.data(), db.data());
    reference::linearForward(x.data(), w.data(), bias, c.rows, c.in, c.out,
                             c.outIn, ry.data());
    reference::linearBackward(x.data(), w.data(), dy.data(), c.rows, c.in,
                              c.out, c.outIn, rdx.data(), rdw.data(),
                              rdb.data());
    // fp32 sums against double ones, over at most 300 terms.
    EXPECT_LT(relError(y, ry), 1e-6);
    EXPECT_LT(relError(dx, rdx), 1e-6);
    EXPECT_LT(relError(dw, rdw), 1e-6);
    EXPECT_LT(relError(db, rdb), 1e-6);
  }
}

struct ExpertCase {
  int64_t rows, experts, in, out;
  bool outIn;
};

// Grouped GEMMs against one loop per row; an expert no row chose gets a zero
// gradient, and the result does not depend on the pool's threads.
TEST(CpuTwins, ExpertLinearMatchesTheReferenceLoops) {
  for (const ExpertCase &c : std::vector<ExpertCase>{
           ExpertCase{6, 3, 4, 5, true}, ExpertCase{6, 3, 4, 5, false},
           ExpertCase{400, 8, 64, 96, true}, ExpertCase{400, 8, 64, 96, false},
           ExpertCase{0, 4, 8, 8, true}}) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + " experts " +
                 std::to_string(c.experts) + " in " + std::to_string(c.in) +
                 " out " + std::to_string(c.out) +
                 (c.outIn ? " [out, in]" : " [in, out]"));
    Vec x = randomVec(c.rows * c.in, 1),
        w = randomVec(c.experts * c.in * c.out, 2),
        dy = randomVec(c.rows * c.out, 4);
    std::vector<int64_t> ids(size_t(c.rows));
    std::mt19937 rng(5);
    // Expert 0 is never chosen; ids of the last expert are negative.
    for (int64_t &id : ids) {
      id = 1 + int64_t(rng() % uint32_t(std::max<int64_t>(1, c.experts - 1)));
      if (id == c.experts - 1)
        id = -1;
    }
    Vec y(c.rows * c.out, 7.0f), dx(c.rows * c.in, 7.0f), dw(w.size(), 7.0f);
    Vec ry(y.size()), rdx(dx.size()), rdw(dw.size());
    ASSERT_TRUE(expertLinearForward(x.data(), ids.data(), w.data(), c.rows,
                                    c.experts, c.in, c.out, c.outIn, y.data()));
    ASSERT_TRUE(expertLinearBackward(x.data(), ids.data(), w.data(), dy.data(),
                                     c.rows, c.experts, c.in, c.out, c.outIn,
                                     dx.data(), dw.data()));
    ASSERT_TRUE(reference::expertLinearForward(x.data(), ids.data(), w.data(),
                                               c.rows, c.experts, c.in, c.out,
                                               c.outIn, ry.data()));
    ASSERT_TRUE(reference::expertLinearBackward(
        x.data(), ids.data(), w.data(), dy.data(), c.rows, c.experts, c.in,
        c.out, c.outIn, rdx.data(), rdw.data()));
    EXPECT_LT(relError(y, ry), 1e-6);
    EXPECT_LT(relError(dx, rdx), 1e-6);
    EXPECT_LT(relError(dw, rdw), 1e-6);
    if (c.experts > 1)
      EXPECT_EQ(Vec(dw.begin(), dw.begin() + c.in * c.out),
                Vec(size_t(c.in * c.out), 0.0f));
    // The same bits on one thread and on three.
    Vec y1(y.size()), dw1(dw.size()), dx1(dx.size());
    {
      Threads t(1);
      expertLinearForward(x.data(), ids.data(), w.data(), c.rows, c.experts,
                          c.in, c.out, c.outIn, y1.data());
      expertLinearBackward(x.data(), ids.data(), w.data(), dy.data(), c.rows,
                           c.experts, c.in, c.out, c.outIn, dx1.data(),
                           dw1.data());
    }
    EXPECT_EQ(y1, y);
    EXPECT_EQ(dx1, dx);
    EXPECT_EQ(dw1, dw);
    // An id outside the experts is refused.
    if (c.rows > 0) {
      ids[0] = c.experts;
      EXPECT_FALSE(expertLinearForward(x.data(), ids.data(), w.data(), c.rows,
                                       c.experts, c.in, c.out, c.outIn,
                                       y.data()));
    }
  }
}

struct AttentionCase {
  int64_t batch, seq, heads, kvHeads, headDim;
  bool causal, mask;
  int64_t window;
  int64_t keyBlock = 0; ///< > 0: rows longer take the online softmax
  float softcap = 0.0f;
};

// seq 150: three blocks of queries (64 + 64 + 22), the causal ones reading
// fewer keys in their first. With key blocks of 32 or 40, rows longer than
// a block take the online softmax over 2 to 5 blocks (a partial last one),
// from the window's start when there is one, and the padded key of the
// mask falls in the first block of its rows. Softcapped scores (a cap of
// 0.5 bends most of them) take both paths too.
TEST(CpuTwins, AttentionMatchesTheReferenceLoops) {
  for (const AttentionCase &c : std::vector<AttentionCase>{
           AttentionCase{2, 16, 4, 2, 8, true, false, 0},
           AttentionCase{2, 16, 4, 4, 8, false, true, 0},
           AttentionCase{1, 150, 2, 1, 16, true, false, 0},
           AttentionCase{2, 150, 2, 2, 8, false, true, 0},
           AttentionCase{1, 40, 2, 1, 8, true, false, 7},
           AttentionCase{1, 150, 2, 1, 16, true, false, 0, 32},
           AttentionCase{2, 150, 4, 2, 8, false, true, 0, 40},
           AttentionCase{2, 150, 2, 2, 8, true, true, 0, 32},
           AttentionCase{1, 150, 2, 1, 8, true, false, 50, 32},
           AttentionCase{2, 16, 4, 2, 8, true, true, 0, 0, 0.5f},
           AttentionCase{2, 150, 4, 2, 8, true, true, 0, 40, 0.5f}}) {
    SCOPED_TRACE(
        "batch " + std::to_string(c.batch) + " seq " + std::to_string(c.seq) +
        " heads " + std::to_string(c.heads) + "/" + std::to_string(c.kvHeads) +
        " dim " + std::to_string(c.headDim) + (c.causal ? " causal" : "") +
        (c.mask ? " mask" : "") + " window " + std::to_string(c.window) +
        " key block " + std::to_string(c.keyBlock) + " softcap " +
        std::to_string(c.softcap));
    AttentionShape s{c.batch,   c.seq,     c.heads,
                     c.kvHeads, c.headDim, 1.0f / std::sqrt(float(c.headDim)),
                     c.causal,  c.window};
    s.keyBlock = c.keyBlock;
    s.softcap = c.softcap;
    int64_t qn = c.batch * c.seq * c.heads * c.headDim,
            kn = c.batch * c.seq * c.kvHeads * c.headDim;
    Vec q = randomVec(qn, 1), k = randomVec(kn, 2), v = randomVec(kn, 3),
        dOut = randomVec(qn, 4), mask;
    if (c.mask) {
      // Per batch: an additive bias, and padding that hides the first key of
      // batch 1 from every query but itself.
      s.maskBatch = c.batch;
      mask = randomVec(c.batch * c.seq * c.seq, 5);
      for (int64_t i = 1; i < c.seq; ++i)
        mask[(1 % c.batch) * c.seq * c.seq + i * c.seq] = -INFINITY;
    }
    const float *m = c.mask ? mask.data() : nullptr;
    Vec out(qn, 7.0f), dq(qn, 7.0f), dk(kn, 7.0f), dv(kn, 7.0f);
    Vec rout(qn), rdq(qn), rdk(kn), rdv(kn);
    attentionForward(q.data(), k.data(), v.data(), m, s, out.data());
    attentionBackward(q.data(), k.data(), v.data(), m, dOut.data(), s,
                      dq.data(), dk.data(), dv.data());
    reference::attentionForward(q.data(), k.data(), v.data(), m, s,
                                rout.data());
    reference::attentionBackward(q.data(), k.data(), v.data(), m, dOut.data(),
                                 s, rdq.data(), rdk.data(), rdv.data());
    EXPECT_LT(relError(out, rout), 1e-5);
    EXPECT_LT(relError(dq, rdq), 1e-5);
    EXPECT_LT(relError(dk, rdk), 1e-5);
    EXPECT_LT(relError(dv, rdv), 1e-5);
  }
}

TEST(CpuTwins, PoolParallelForRunsEachIndexOnceWhateverTheThreads) {
  for (int n : {1, 2, 3, 8}) {
    Threads t(n);
    std::vector<int> hits(1000, 0);
    parallelFor(1000, 1e6, [&](int64_t i) { ++hits[i]; });
    EXPECT_EQ(hits, std::vector<int>(1000, 1)) << n << " threads";
  }
}

// Loops of a few tasks back to back, as the kernels of a step issue them:
// a worker that wakes after its loop ended must take nothing of the next.
TEST(CpuTwins, PoolShortLoopsBackToBackRunEachTaskOnce) {
  Threads t(4);
  std::atomic<int> wrong{0};
  for (int loop = 0; loop < 20000; ++loop) {
    std::atomic<int> hits[3] = {0, 0, 0};
    runOnPool(3, [&](int64_t i) { ++hits[i]; });
    for (auto &h : hits)
      wrong += h != 1;
  }
  EXPECT_EQ(wrong, 0);
}

TEST(CpuTwins, PoolALoopInsideALoopRunsSerially) {
  Threads t(4);
  std::vector<int> hits(64 * 64, 0);
  parallelFor(64, 1e6, [&](int64_t i) {
    parallelFor(64, 1e6, [&](int64_t j) { ++hits[i * 64 + j]; });
  });
  EXPECT_EQ(hits, std::vector<int>(64 * 64, 1));
}

// The kernels' bits depend neither on the thread count nor on other threads
// starting loops at the same time (as the streams of a plan do): attention
// backward calls the BLAS from several pool threads at once.
TEST(CpuTwins, PoolKernelsGiveTheSameBitsWhateverRunsBeside) {
  AttentionShape s{2, 40, 4, 2, 16, 0.25f, true};
  int64_t qn = 2 * 40 * 64, kn = 2 * 40 * 32;
  Vec q = randomVec(qn, 1), k = randomVec(kn, 2), v = randomVec(kn, 3),
      dOut = randomVec(qn, 4), x = randomVec(200 * 64, 5),
      w = randomVec(64 * 96, 6);
  auto run = [&](Vec &dq, Vec &y) {
    Vec dk(kn), dv(kn);
    attentionBackward(q.data(), k.data(), v.data(), nullptr, dOut.data(), s,
                      dq.data(), dk.data(), dv.data());
    linearForward(x.data(), w.data(), nullptr, 200, 64, 96, true, y.data());
  };
  Threads t(3);
  Vec dq0(qn), y0(200 * 96);
  run(dq0, y0);
  std::vector<std::thread> callers;
  std::vector<int> same(4, 0);
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&, c] {
      for (int r = 0; r < 25; ++r) {
        Vec dq(qn), y(200 * 96);
        run(dq, y);
        same[c] += dq == dq0 && y == y0;
      }
    });
  for (std::thread &c : callers)
    c.join();
  EXPECT_EQ(same, std::vector<int>(4, 25));
}

} // namespace
