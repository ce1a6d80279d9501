// The backward of every fused op's CPU reference kernel against central
// finite differences of its forward: for L = sum(dy * f(inputs)) with a
// random dy, the analytic gradient of L with respect to each input must
// match (relative error of the whole gradient).
#include "kernels/cpu/fused_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace mt::kernels::cpu;

namespace {

using Vec = std::vector<float>;

Vec randomVec(size_t n, std::mt19937 &rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  Vec v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

double dot(const Vec &a, const Vec &b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i)
    s += double(a[i]) * b[i];
  return s;
}

/// Central differences of loss() with respect to x, in place.
Vec numericGrad(Vec &x, const std::function<double()> &loss,
                float step = 1e-2f) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    float saved = x[i];
    x[i] = saved + step;
    double up = loss();
    x[i] = saved - step;
    double down = loss();
    x[i] = saved;
    g[i] = float((up - down) / (2.0 * step));
  }
  return g;
}

void expectClose(const Vec &analytic, const Vec &numeric, double tol = 2e-3) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < numeric.size(); ++i) {
    diff += (analytic[i] - numeric[i]) * double(analytic[i] - numeric[i]);
    ref += double(numeric[i]) * numeric[i];
  }
  ASSERT_GT(ref, 0.0);
  EXPECT_LT(std::sqrt(diff / ref), tol);
}

TEST(FusedOps, EmbeddingGathersAndScatterAdds) {
  Vec table = {0, 1, 2, 3, 4, 5}; // vocab 3, dim 2
  std::vector<int64_t> ids = {2, 0, 2};
  Vec out(6);
  ASSERT_TRUE(embeddingForward(table.data(), ids.data(), 3, 3, 2, out.data()));
  EXPECT_EQ(out, (Vec{4, 5, 0, 1, 4, 5}));
  // What was in dTable is overwritten, unused rows with 0.
  Vec dTable(6, 1.0f), dOut = {1, 2, 3, 4, 5, 6};
  embeddingBackward(dOut.data(), ids.data(), 3, 3, 2, dTable.data());
  EXPECT_EQ(dTable, (Vec{3, 4, 0, 0, 6, 8}));
  std::vector<int64_t> bad = {3};
  EXPECT_FALSE(embeddingForward(table.data(), bad.data(), 1, 3, 2, out.data()));
}

TEST(FusedOps, LinearGradMatchesFiniteDifferences) {
  for (bool outIn : {false, true}) {
    SCOPED_TRACE(outIn ? "weight [out, in]" : "weight [in, out]");
    std::mt19937 rng(1);
    int64_t rows = 3, in = 4, out = 5;
    Vec x = randomVec(rows * in, rng), w = randomVec(in * out, rng),
        b = randomVec(out, rng), dy = randomVec(rows * out, rng), y(rows * out);
    auto loss = [&] {
      linearForward(x.data(), w.data(), b.data(), rows, in, out, outIn,
                    y.data());
      return dot(dy, y);
    };
    Vec dx(x.size()), dw(w.size(), 0.0f), db(out, 0.0f);
    linearBackward(x.data(), w.data(), dy.data(), rows, in, out, outIn,
                   dx.data(), dw.data(), db.data());
    expectClose(dx, numericGrad(x, loss));
    expectClose(dw, numericGrad(w, loss));
    expectClose(db, numericGrad(b, loss));
  }
}

TEST(FusedOps, RmsNormGradMatchesFiniteDifferences) {
  for (bool plusOne : {false, true}) {
    SCOPED_TRACE(plusOne ? "scale 1 + w" : "scale w");
    std::mt19937 rng(2);
    int64_t rows = 3, dim = 8;
    Vec x = randomVec(rows * dim, rng), w = randomVec(dim, rng),
        dy = randomVec(rows * dim, rng), y(x.size());
    auto loss = [&] {
      rmsNormForward(x.data(), w.data(), rows, dim, 1e-6f, plusOne, y.data());
      return dot(dy, y);
    };
    Vec dx(x.size()), dw(dim, 0.0f);
    rmsNormBackward(x.data(), w.data(), dy.data(), rows, dim, 1e-6f, plusOne,
                    dx.data(), dw.data());
    expectClose(dx, numericGrad(x, loss));
    expectClose(dw, numericGrad(w, loss));
  }
}

TEST(FusedOps, LayerNormMatchesFiniteDifferences) {
  std::mt19937 rng(3);
  int64_t rows = 3, dim = 8;
  Vec x = randomVec(rows * dim, rng), w = randomVec(dim, rng),
      b = randomVec(dim, rng), dy = randomVec(rows * dim, rng), y(x.size());
  auto loss = [&] {
    layerNormForward(x.data(), w.data(), b.data(), rows, dim, 1e-5f, y.data());
    return dot(dy, y);
  };
  Vec dx(x.size()), dw(dim, 0.0f), db(dim, 0.0f);
  layerNormBackward(x.data(), w.data(), dy.data(), rows, dim, 1e-5f, dx.data(),
                    dw.data(), db.data());
  expectClose(dx, numericGrad(x, loss));
  expectClose(dw, numericGrad(w, loss));
  expectClose(db, numericGrad(b, loss));
}

TEST(FusedOps, RotaryGradMatchesFiniteDifferences) {
  for (bool interleaved : {false, true}) {
    SCOPED_TRACE(interleaved ? "interleaved pairs" : "half-split pairs");
    std::mt19937 rng(4);
    RotaryShape s{2, 3, 2, 4, /*tablesPerBatch=*/true, interleaved};
    Vec x = randomVec(s.batch * s.seq * s.heads * s.headDim, rng),
        cos = randomVec(s.batch * s.seq * s.headDim, rng),
        sin = randomVec(s.batch * s.seq * s.headDim, rng),
        dy = randomVec(x.size(), rng), y(x.size());
    auto loss = [&] {
      rotaryForward(x.data(), cos.data(), sin.data(), s, y.data());
      return dot(dy, y);
    };
    Vec dx(x.size());
    rotaryBackward(dy.data(), cos.data(), sin.data(), s, dx.data());
    expectClose(dx, numericGrad(x, loss));
  }
}

TEST(FusedOps, RotaryHalfSplitMatchesRotateHalf) {
  // q * cos + rotate_half(q) * sin, rotate_half(q) = cat(-q2, q1).
  RotaryShape s{1, 1, 1, 4};
  Vec x = {1, 2, 3, 4}, cos = {0.5f, 0.25f, 0.5f, 0.25f}, sin = {2, 3, 2, 3},
      y(4);
  rotaryForward(x.data(), cos.data(), sin.data(), s, y.data());
  EXPECT_EQ(y, (Vec{1 * 0.5f - 3 * 2, 2 * 0.25f - 4 * 3, 3 * 0.5f + 1 * 2,
                    4 * 0.25f + 2 * 3}));
}

struct AttentionCase {
  int64_t heads, kvHeads;
  bool causal, mask;
  int64_t window;
  bool maskPerBatchAndHead = false;
  float softcap = 0.0f;
};

TEST(FusedOps, AttentionGradMatchesFiniteDifferences) {
  for (const AttentionCase &c :
       {AttentionCase{2, 2, true, false, 0},
        AttentionCase{4, 2, true, false, 0},
        AttentionCase{2, 1, false, true, 0},
        AttentionCase{2, 2, true, false, 2},
        AttentionCase{4, 2, false, true, 0, true},
        AttentionCase{2, 2, true, true, 0, false, 0.4f},
        AttentionCase{4, 2, false, false, 0, false, 0.4f}}) {
    SCOPED_TRACE("heads " + std::to_string(c.heads) + "/" +
                 std::to_string(c.kvHeads) + (c.causal ? " causal" : "") +
                 (c.mask ? " mask" : "") + " window " +
                 std::to_string(c.window) +
                 (c.maskPerBatchAndHead ? " per batch and head" : "") +
                 " softcap " + std::to_string(c.softcap));
    std::mt19937 rng(5);
    AttentionShape s{2, 4, c.heads, c.kvHeads, 3, 0.5f, c.causal, c.window};
    s.softcap = c.softcap;
    Vec q = randomVec(s.batch * s.seq * s.heads * s.headDim, rng),
        k = randomVec(s.batch * s.seq * s.kvHeads * s.headDim, rng),
        v = randomVec(k.size(), rng), dOut = randomVec(q.size(), rng),
        out(q.size()), mask = randomVec(s.seq * s.seq * s.batch * s.heads, rng);
    if (c.maskPerBatchAndHead) {
      s.maskBatch = s.batch;
      s.maskHeads = s.heads;
    }
    const float *m = c.mask ? mask.data() : nullptr;
    auto loss = [&] {
      attentionForward(q.data(), k.data(), v.data(), m, s, out.data());
      return dot(dOut, out);
    };
    Vec dq(q.size()), dk(k.size()), dv(v.size());
    attentionBackward(q.data(), k.data(), v.data(), m, dOut.data(), s,
                      dq.data(), dk.data(), dv.data());
    expectClose(dq, numericGrad(q, loss));
    expectClose(dk, numericGrad(k, loss));
    expectClose(dv, numericGrad(v, loss));
  }
}

TEST(FusedOps, CausalAttentionFirstTokenReadsOnlyItself) {
  AttentionShape s{1, 2, 1, 1, 1, 1.0f, true};
  Vec q = {1, 1}, k = {3, -2}, v = {7, 11}, out(2);
  attentionForward(q.data(), k.data(), v.data(), nullptr, s, out.data());
  EXPECT_FLOAT_EQ(out[0], 7.0f);
}

TEST(FusedOps, ActivationGradPlainAndGatedMatchFiniteDifferences) {
  for (Activation act : {Activation::Gelu, Activation::GeluTanh,
                         Activation::Silu, Activation::Relu}) {
    SCOPED_TRACE("activation " + std::to_string(int(act)));
    std::mt19937 rng(6);
    int64_t n = 16;
    Vec x = randomVec(n, rng), up = randomVec(n, rng), dy = randomVec(n, rng),
        y(n);
    if (act == Activation::Relu)
      for (float &v : x) // keep finite differences away from the kink
        v += v > 0 ? 0.1f : -0.1f;
    auto plain = [&] {
      activationForward(x.data(), n, act, y.data());
      return dot(dy, y);
    };
    Vec dx(n);
    activationBackward(x.data(), dy.data(), n, act, dx.data());
    expectClose(dx, numericGrad(x, plain));
    auto gated = [&] {
      gatedForward(x.data(), up.data(), n, act, y.data());
      return dot(dy, y);
    };
    Vec dg(n), du(n);
    gatedBackward(x.data(), up.data(), dy.data(), n, act, dg.data(), du.data());
    expectClose(dg, numericGrad(x, gated));
    expectClose(du, numericGrad(up, gated));
  }
}

TEST(FusedOps, CrossEntropyGradMatchesFiniteDifferences) {
  for (bool shift : {false, true}) {
    SCOPED_TRACE(shift ? "shifted labels" : "labels as given");
    std::mt19937 rng(7);
    CrossEntropyShape s{2, 4, 6, -100, shift};
    Vec logits = randomVec(s.batch * s.seq * s.vocab, rng);
    std::vector<int64_t> labels = {1, 5, -100, 2, 0, 3, 4, -100};
    auto loss = [&] {
      return double(
          crossEntropyForward(logits.data(), labels.data(), s, nullptr));
    };
    Vec d(logits.size());
    crossEntropyBackward(logits.data(), labels.data(), s, 1.0f, d.data());
    expectClose(d, numericGrad(logits, loss));
    int64_t counted;
    crossEntropyForward(logits.data(), labels.data(), s, &counted);
    // Shifted: position t reads label t + 1 and the last of each row is out.
    EXPECT_EQ(counted, shift ? 4 : 6);
  }
}

TEST(FusedOps, ChunkedHeadGradMatchesLinearPlusCrossEntropy) {
  for (int64_t chunk : {1, 3, 8, 100}) {
    SCOPED_TRACE("chunks of " + std::to_string(chunk) + " rows");
    std::mt19937 rng(8);
    int64_t rows = 8, dim = 5, vocab = 7;
    HeadShape s{dim, true, {2, 4, vocab, -100, true}, chunk};
    Vec x = randomVec(rows * dim, rng), w = randomVec(vocab * dim, rng);
    std::vector<int64_t> labels = {1, 5, -100, 2, 0, 3, 4, 6};
    // Unchunked reference: linear, then cross-entropy.
    Vec logits(rows * vocab);
    linearForward(x.data(), w.data(), nullptr, rows, dim, vocab, true,
                  logits.data());
    float ref =
        crossEntropyForward(logits.data(), labels.data(), s.ce, nullptr);
    Vec scratch(std::min<int64_t>(chunk, rows) * vocab);
    auto loss = [&] {
      return double(headCrossEntropyForward(x.data(), w.data(), labels.data(),
                                            s, scratch.data()));
    };
    EXPECT_NEAR(loss(), ref, 1e-6);
    Vec dx(x.size()), dw(w.size(), 0.0f);
    headCrossEntropyBackward(x.data(), w.data(), labels.data(), 1.0f, s,
                             dx.data(), dw.data(), scratch.data());
    expectClose(dx, numericGrad(x, loss));
    expectClose(dw, numericGrad(w, loss));
  }
}

/// The unchunked ops of a gated MLP (linear, linear, gated activation,
/// linear and their gradients, dx summed up + gate), as the graph runs
/// them: y, then dx, dgate, dup, ddown.
struct MlpResult {
  Vec y, dx, dGate, dUp, dDown;
};
MlpResult unchunkedMlp(const Vec &x, const Vec &wg, const Vec &wu,
                       const Vec &wd, const Vec &dy, const MlpShape &s) {
  int64_t n = s.rows, d = s.dim, h = s.hidden;
  Vec g(n * h), u(n * h), a(n * h), da(n * h), dg(n * h), du(n * h), dxg(n * d),
      dxu(n * d);
  MlpResult r{Vec(n * d), Vec(n * d), Vec(wg.size()), Vec(wu.size()),
              Vec(wd.size())};
  linearForward(x.data(), wg.data(), nullptr, n, d, h, s.outIn, g.data());
  linearForward(x.data(), wu.data(), nullptr, n, d, h, s.outIn, u.data());
  gatedForward(g.data(), u.data(), n * h, s.act, a.data());
  linearForward(a.data(), wd.data(), nullptr, n, h, d, s.outIn, r.y.data());
  linearBackward(a.data(), wd.data(), dy.data(), n, h, d, s.outIn, da.data(),
                 r.dDown.data(), nullptr);
  gatedBackward(g.data(), u.data(), da.data(), n * h, s.act, dg.data(),
                du.data());
  linearBackward(x.data(), wu.data(), du.data(), n, d, h, s.outIn, dxu.data(),
                 r.dUp.data(), nullptr);
  linearBackward(x.data(), wg.data(), dg.data(), n, d, h, s.outIn, dxg.data(),
                 r.dGate.data(), nullptr);
  for (size_t i = 0; i < r.dx.size(); ++i)
    r.dx[i] = dxu[i] + dxg[i];
  return r;
}

MlpResult chunkedMlp(const Vec &x, const Vec &wg, const Vec &wu, const Vec &wd,
                     const Vec &dy, const MlpShape &s) {
  MlpResult r{Vec(x.size()), Vec(x.size()), Vec(wg.size()), Vec(wu.size()),
              Vec(wd.size())};
  // Exactly the sizes the plan's scratch is checked to hold.
  Vec forward(s.chunkRows * 2 * s.hidden),
      backward(s.chunkRows * (3 * s.hidden + s.dim));
  gatedMlpForward(x.data(), wg.data(), wu.data(), wd.data(), s, r.y.data(),
                  forward.data());
  gatedMlpBackward(x.data(), wg.data(), wu.data(), wd.data(), dy.data(), s,
                   r.dx.data(), r.dGate.data(), r.dUp.data(), r.dDown.data(),
                   backward.data());
  return r;
}

struct MlpCase {
  bool outIn;
  Activation act;
  int64_t chunk;
};
TEST(FusedOps, GatedMlpChunksMatchTheUnchunkedOps) {
  for (MlpCase c :
       {MlpCase{true, Activation::Silu, 10},
        MlpCase{true, Activation::Silu, 100},
        MlpCase{false, Activation::GeluTanh, 10},
        MlpCase{true, Activation::Silu, 3}, MlpCase{false, Activation::Gelu, 4},
        MlpCase{true, Activation::Relu, 1}}) {
    SCOPED_TRACE(std::string(c.outIn ? "[out, in]" : "[in, out]") +
                 " activation " + std::to_string(int(c.act)) + " chunks of " +
                 std::to_string(c.chunk));
    std::mt19937 rng(11);
    MlpShape s{10, 6, 16, c.outIn, c.act, c.chunk};
    Vec x = randomVec(s.rows * s.dim, rng),
        wg = randomVec(s.dim * s.hidden, rng),
        wu = randomVec(s.dim * s.hidden, rng),
        wd = randomVec(s.dim * s.hidden, rng), dy = randomVec(x.size(), rng);
    MlpResult ref = unchunkedMlp(x, wg, wu, wd, dy, s);
    MlpResult got = chunkedMlp(x, wg, wu, wd, dy, s);
    std::pair<const Vec *, const Vec *> pairs[] = {{&got.y, &ref.y},
                                                   {&got.dx, &ref.dx},
                                                   {&got.dGate, &ref.dGate},
                                                   {&got.dUp, &ref.dUp},
                                                   {&got.dDown, &ref.dDown}};
    for (auto [a, b] : pairs) {
      if (c.chunk >= s.rows) {
        // One chunk: the graph's ops in its order, to the bit.
        EXPECT_EQ(*a, *b);
        continue;
      }
      // The weights' gradients sum the chunks' (and GEMMs of fewer rows may
      // block differently): within 1e-6 of the largest value.
      double scale = 0;
      for (float v : *b)
        scale = std::max(scale, double(std::fabs(v)));
      for (size_t i = 0; i < a->size(); ++i)
        EXPECT_NEAR((*a)[i], (*b)[i], 1e-6 * scale) << "element " << i;
    }
  }
}

TEST(FusedOps, GatedBackwardInPlaceMatchesSeparateOutputs) {
  std::mt19937 rng(12);
  Vec g = randomVec(37, rng), u = randomVec(37, rng), dy = randomVec(37, rng);
  Vec dg(37), du(37);
  gatedBackward(g.data(), u.data(), dy.data(), 37, Activation::Silu, dg.data(),
                du.data());
  gatedBackward(g.data(), u.data(), dy.data(), 37, Activation::Silu, g.data(),
                u.data());
  EXPECT_EQ(g, dg);
  EXPECT_EQ(u, du);
}

TEST(FusedOps, CrossEntropyOfUniformLogitsIsLogVocab) {
  CrossEntropyShape s{1, 2, 8};
  Vec logits(16, 0.25f);
  std::vector<int64_t> labels = {3, 7};
  EXPECT_NEAR(crossEntropyForward(logits.data(), labels.data(), s, nullptr),
              std::log(8.0), 1e-6);
}

} // namespace
