// Every CUDA kernel (and the cuBLASLt GEMMs) against the CPU reference on
// fresh random inputs, in fp32 and bf16 storage. Outputs are poisoned (all
// bits set: NaN in both types) before each launch, so an element a kernel
// fails to write shows up as NaN. The error measure is the relative L2
// error of the whole output; for bf16 the reference runs on the same
// bf16-rounded inputs.
//
// Without a usable device the program prints why and exits 77, which ctest
// reports as skipped (SKIP_RETURN_CODE).
#include "kernels/cpu/fused_ops.h"
#include "kernels/cpu/primitive_ops.h"
#include "kernels/cuda/kernels.h"
#include "runtime/hal/cuda/cuda_backend.h"
#include "runtime/hal/cuda/cuda_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

namespace kc = mt::kernels::cuda;
namespace cpu = mt::kernels::cpu;
using Vec = std::vector<float>;

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

/// A device tensor of fp32 values stored as `type`.
class Tensor {
public:
  Tensor(const Vec &values, kc::DType type) : n_(values.size()), type_(type) {
    cudaMalloc(&data_, bytes() ? bytes() : 1);
    upload(values);
  }
  /// Poisoned: every bit set.
  Tensor(size_t n, kc::DType type) : n_(n), type_(type) {
    cudaMalloc(&data_, bytes() ? bytes() : 1);
    cudaMemset(data_, 0xff, bytes());
  }
  ~Tensor() { cudaFree(data_); }
  Tensor(const Tensor &) = delete;

  size_t bytes() const { return n_ * (type_ == kc::DType::F32 ? 4 : 2); }
  kc::Ref ref() const { return {data_, type_}; }
  kc::MutRef mut() { return {data_, type_}; }
  void *data() { return data_; }

  void upload(const Vec &values) {
    if (type_ == kc::DType::F32) {
      cudaMemcpy(data_, values.data(), bytes(), cudaMemcpyHostToDevice);
      return;
    }
    std::vector<uint16_t> h(n_);
    for (size_t i = 0; i < n_; ++i)
      h[i] = cpu::toBf16(values[i]);
    cudaMemcpy(data_, h.data(), bytes(), cudaMemcpyHostToDevice);
  }
  Vec download() const {
    Vec out(n_);
    // An error of any kernel before (asynchronous) surfaces here: loudly.
    if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)
      ADD_FAILURE() << "the device failed before a download: "
                    << cudaGetErrorName(e) << ": " << cudaGetErrorString(e);
    if (type_ == kc::DType::F32) {
      cudaMemcpy(out.data(), data_, bytes(), cudaMemcpyDeviceToHost);
      return out;
    }
    std::vector<uint16_t> h(n_);
    cudaMemcpy(h.data(), data_, bytes(), cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n_; ++i)
      out[i] = cpu::fromBf16(h[i]);
    return out;
  }

private:
  size_t n_;
  kc::DType type_;
  void *data_ = nullptr;
};

struct Ids {
  explicit Ids(const std::vector<int64_t> &v) : n(v.size()) {
    cudaMalloc(reinterpret_cast<void **>(&data), n * 8);
    cudaMemcpy(data, v.data(), n * 8, cudaMemcpyHostToDevice);
  }
  ~Ids() { cudaFree(data); }
  size_t n;
  int64_t *data = nullptr;
};

std::mt19937 &rng() {
  static std::mt19937 gen(20261130);
  return gen;
}

Vec randomVec(size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  Vec v(n);
  for (float &x : v)
    x = d(rng());
  return v;
}

/// The values as the type stores them.
Vec rounded(Vec v, kc::DType type) {
  if (type == kc::DType::BF16)
    for (float &x : v)
      x = cpu::fromBf16(cpu::toBf16(x));
  return v;
}

/// Relative L2 error; infinite when an element is NaN (unwritten). Each
/// comparison also prints one line, "[compare] TEST #N rel-L2 E max-abs A
/// max-rel R (of COUNT)", its largest absolute and relative errors
/// (relative to the largest reference magnitude where that is tiny), which
/// bench/gpu-run.sh collects: a passing test still says how close it was.
double relError(const Vec &got, const Vec &want) {
  double num = 0, den = 0, maxAbs = 0, maxRel = 0, scale = 0;
  bool unwritten = got.size() != want.size();
  for (size_t i = 0; i < want.size() && !unwritten; ++i)
    scale = std::max(scale, std::isnan(want[i]) ? 0.0 : std::fabs(want[i]));
  for (size_t i = 0; i < want.size() && !unwritten; ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) {
      unwritten = true;
      break;
    }
    if (std::isnan(want[i]))
      continue;
    double diff = std::fabs(double(got[i]) - want[i]);
    num += diff * diff;
    den += double(want[i]) * want[i];
    maxAbs = std::max(maxAbs, diff);
    maxRel = std::max(
        maxRel, diff / std::max(std::fabs(double(want[i])), 1e-3 * scale));
  }
  double rel = unwritten ? INFINITY : std::sqrt(num / std::max(den, 1e-30));
  static int calls = 0;
  const auto *test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::printf("[compare] %s.%s #%d rel-L2 %.3g max-abs %.3g max-rel %.3g (of "
              "%zu)\n",
              test ? test->test_suite_name() : "?", test ? test->name() : "?",
              ++calls, rel, unwritten ? INFINITY : maxAbs,
              unwritten ? INFINITY : maxRel, want.size());
  return rel;
}

/// The runtime's cuBLASLt GEMMs as the fused kernels call them (the
/// legacy stream; init() before use).
struct Cublas {
  mt::runtime::Gemms gemms;
  Tensor work{mt::runtime::Gemms::kWorkspaceBytes / 4, kc::DType::F32};
  mt::runtime::Status status = mt::runtime::Status::ok();
  kc::GemmHook hook = gemms.hook(work.data(), nullptr, status);
};

/// Device bytes that free themselves (kernel workspaces).
struct DeviceBytes {
  explicit DeviceBytes(size_t n) { cudaMalloc(&p, n ? n : 1); }
  ~DeviceBytes() { cudaFree(p); }
  DeviceBytes(const DeviceBytes &) = delete;
  void *p = nullptr;
};

double tolerance(kc::DType type, double f32 = 1e-5) {
  return type == kc::DType::F32 ? f32 : 1.5e-2;
}

class Kernels : public ::testing::TestWithParam<kc::DType> {};

TEST_P(Kernels, RmsAndLayerNorm) {
  kc::DType t = GetParam();
  int64_t rows = 67, dim = 1000;
  for (bool layer : {false, true}) {
    Vec x = rounded(randomVec(rows * dim), t), w = rounded(randomVec(dim), t);
    Vec b = rounded(randomVec(dim), t), dy = rounded(randomVec(rows * dim), t);
    Tensor X(x, t), W(w, t), B(b, t), DY(dy, t), Y(rows * dim, t);
    Tensor DX(rows * dim, t), DW(dim, t);
    Tensor work(kc::normGradWorkspaceBytes(rows, dim) / 4 + 1, kc::DType::F32);
    Vec y(rows * dim), dx(rows * dim), dw(dim, 0.0f);
    if (layer) {
      CUDA_OK(kc::layerNorm(X.ref(), W.ref(), B.ref(), rows, dim, 1e-5f,
                            Y.mut(), nullptr));
      CUDA_OK(kc::layerNormGrad(X.ref(), W.ref(), DY.ref(), rows, dim, 1e-5f,
                                DX.mut(), DW.mut(), work.data(), nullptr));
      cpu::layerNormForward(x.data(), w.data(), b.data(), rows, dim, 1e-5f,
                            y.data());
      cpu::layerNormBackward(x.data(), w.data(), dy.data(), rows, dim, 1e-5f,
                             dx.data(), dw.data(), nullptr);
    } else {
      CUDA_OK(kc::rmsNorm(X.ref(), W.ref(), rows, dim, 1e-6f, true, Y.mut(),
                          nullptr));
      CUDA_OK(kc::rmsNormGrad(X.ref(), W.ref(), DY.ref(), rows, dim, 1e-6f,
                              true, DX.mut(), DW.mut(), work.data(), nullptr));
      cpu::rmsNormForward(x.data(), w.data(), rows, dim, 1e-6f, true, y.data());
      cpu::rmsNormBackward(x.data(), w.data(), dy.data(), rows, dim, 1e-6f,
                           true, dx.data(), dw.data());
    }
    EXPECT_LT(relError(Y.download(), y), tolerance(t)) << "layer " << layer;
    EXPECT_LT(relError(DX.download(), dx), tolerance(t)) << "layer " << layer;
    EXPECT_LT(relError(DW.download(), dw), tolerance(t)) << "layer " << layer;
  }
}

TEST_P(Kernels, Rotary) {
  kc::DType t = GetParam();
  for (bool interleaved : {false, true}) {
    kc::RotaryShape s{3, 17, 4, 32, false, interleaved};
    int64_t n = s.batch * s.seq * s.heads * s.headDim;
    Vec x = rounded(randomVec(n), t);
    Vec c = rounded(randomVec(s.seq * s.headDim), t);
    Vec sn = rounded(randomVec(s.seq * s.headDim), t);
    Tensor X(x, t), C(c, t), S(sn, t), Y(n, t), DX(n, t);
    CUDA_OK(kc::rotary(X.ref(), C.ref(), S.ref(), s, false, Y.mut(), nullptr));
    CUDA_OK(kc::rotary(X.ref(), C.ref(), S.ref(), s, true, DX.mut(), nullptr));
    cpu::RotaryShape cs{s.batch, s.seq, s.heads, s.headDim, false, interleaved};
    Vec y(n), dx(n);
    cpu::rotaryForward(x.data(), c.data(), sn.data(), cs, y.data());
    cpu::rotaryBackward(x.data(), c.data(), sn.data(), cs, dx.data());
    EXPECT_LT(relError(Y.download(), y), tolerance(t));
    EXPECT_LT(relError(DX.download(), dx), tolerance(t));
  }
}

struct AttentionCase {
  int64_t batch, seq, heads, kvHeads, headDim;
  bool causal, mask;
  int64_t window;
  float softcap = 0.0f;
};

// Head dims 16, 64 and 128 take the tensor-core kernels in bf16 (and the
// softcapped case with them); 40 and 256 the SIMT ones.
TEST_P(Kernels, Attention) {
  kc::DType t = GetParam();
  for (AttentionCase c :
       {AttentionCase{2, 70, 4, 2, 16, true, false, 0},
        AttentionCase{1, 129, 6, 2, 64, true, false, 0},
        AttentionCase{2, 64, 2, 1, 128, false, true, 0},
        AttentionCase{1, 96, 4, 4, 40, true, false, 24},
        AttentionCase{1, 40, 2, 1, 256, true, false, 0},
        AttentionCase{2, 70, 4, 2, 16, true, true, 0, 0.5f},
        AttentionCase{1, 40, 2, 2, 40, true, false, 0, 0.5f}}) {
    kc::AttentionShape s{c.batch,   c.seq,
                         c.heads,   c.kvHeads,
                         c.headDim, 1.0f / std::sqrt(float(c.headDim)),
                         c.causal,  c.window};
    s.softcap = c.softcap;
    int64_t nq = c.batch * c.seq * c.heads * c.headDim;
    int64_t nk = c.batch * c.seq * c.kvHeads * c.headDim;
    Vec q = rounded(randomVec(nq), t), k = rounded(randomVec(nk), t);
    Vec v = rounded(randomVec(nk), t), dout = rounded(randomVec(nq), t);
    Vec mask(c.seq * c.seq);
    for (int64_t i = 0; i < c.seq; ++i)
      for (int64_t j = 0; j < c.seq; ++j)
        mask[i * c.seq + j] = (i + j) % 7 == 3 && j != i ? -1e9f : 0.0f;
    Tensor Q(q, t), K(k, t), V(v, t), DO(dout, t), M(mask, kc::DType::F32);
    Tensor O(nq, t), DQ(nq, t), DK(nk, t), DV(nk, t);
    Tensor work(kc::attentionGradWorkspaceBytes(s) / 4, kc::DType::F32);
    kc::Ref maskRef = c.mask ? M.ref() : kc::Ref{};
    CUDA_OK(
        kc::attention(Q.ref(), K.ref(), V.ref(), maskRef, s, O.mut(), nullptr));
    CUDA_OK(kc::attentionGrad(Q.ref(), K.ref(), V.ref(), maskRef, DO.ref(), s,
                              DQ.mut(), DK.mut(), DV.mut(), work.data(),
                              nullptr));
    cpu::AttentionShape cs{c.batch,   c.seq,   c.heads,  c.kvHeads,
                           c.headDim, s.scale, c.causal, c.window};
    cs.softcap = c.softcap;
    Vec o(nq), dq(nq), dk(nk), dv(nk);
    const float *m = c.mask ? mask.data() : nullptr;
    cpu::attentionForward(q.data(), k.data(), v.data(), m, cs, o.data());
    cpu::attentionBackward(q.data(), k.data(), v.data(), m, dout.data(), cs,
                           dq.data(), dk.data(), dv.data());
    std::string name = "head dim " + std::to_string(c.headDim) + " softcap " +
                       std::to_string(c.softcap);
    EXPECT_LT(relError(O.download(), o), tolerance(t)) << name;
    EXPECT_LT(relError(DQ.download(), dq), tolerance(t, 2e-5)) << name;
    EXPECT_LT(relError(DK.download(), dk), tolerance(t, 2e-5)) << name;
    EXPECT_LT(relError(DV.download(), dv), tolerance(t, 2e-5)) << name;
  }
}

TEST_P(Kernels, Activations) {
  kc::DType t = GetParam();
  // 10007: the scalar kernels; 4096: the 16-byte vector ones.
  for (int64_t n : {10007, 4096})
    for (cpu::Activation act :
         {cpu::Activation::Gelu, cpu::Activation::GeluTanh,
          cpu::Activation::Silu, cpu::Activation::Relu}) {
      Vec x = rounded(randomVec(n, 2.0f), t), u = rounded(randomVec(n), t);
      Vec dy = rounded(randomVec(n), t);
      Tensor X(x, t), U(u, t), DY(dy, t), Y(n, t), DX(n, t), G(n, t), DG(n, t),
          DU(n, t);
      CUDA_OK(kc::activation(X.ref(), Y.mut(), n, act, nullptr));
      CUDA_OK(kc::activationGrad(X.ref(), DY.ref(), DX.mut(), n, act, nullptr));
      CUDA_OK(kc::gated(X.ref(), U.ref(), G.mut(), n, act, nullptr));
      CUDA_OK(kc::gatedGrad(X.ref(), U.ref(), DY.ref(), DG.mut(), DU.mut(), n,
                            act, nullptr));
      Vec y(n), dx(n), g(n), dg(n), du(n);
      cpu::activationForward(x.data(), n, act, y.data());
      cpu::activationBackward(x.data(), dy.data(), n, act, dx.data());
      cpu::gatedForward(x.data(), u.data(), n, act, g.data());
      cpu::gatedBackward(x.data(), u.data(), dy.data(), n, act, dg.data(),
                         du.data());
      int which = int(act);
      EXPECT_LT(relError(Y.download(), y), tolerance(t)) << which;
      EXPECT_LT(relError(DX.download(), dx), tolerance(t)) << which;
      EXPECT_LT(relError(G.download(), g), tolerance(t)) << which;
      EXPECT_LT(relError(DG.download(), dg), tolerance(t)) << which;
      EXPECT_LT(relError(DU.download(), du), tolerance(t)) << which;
    }
}

TEST_P(Kernels, Embedding) {
  kc::DType t = GetParam();
  int64_t vocab = 300, dim = 48, count = 1000;
  std::vector<int64_t> ids(count);
  for (int64_t &id : ids)
    id = int64_t(rng()() % 40) * 7 % vocab; // repeats, and unused rows
  Vec table = rounded(randomVec(vocab * dim), t);
  Vec dout = rounded(randomVec(count * dim), t);
  Tensor T(table, t), DO(dout, t), Y(count * dim, t), DT(vocab * dim, t);
  size_t workBytes = 0;
  ASSERT_EQ(kc::embeddingGradWorkspaceBytes(vocab, count, workBytes),
            cudaSuccess);
  Tensor bad(1, kc::DType::F32), work(workBytes / 4 + 1, kc::DType::F32);
  Ids I(ids);
  CUDA_OK(cudaMemset(bad.data(), 0, 4));
  CUDA_OK(kc::embedding(T.ref(), I.data, count, vocab, dim, Y.mut(),
                        static_cast<int *>(bad.data()), nullptr));
  CUDA_OK(kc::embeddingGrad(DO.ref(), I.data, count, vocab, dim, DT.mut(),
                            work.data(), nullptr));
  Vec y(count * dim), dt(vocab * dim, 0.0f);
  ASSERT_TRUE(cpu::embeddingForward(table.data(), ids.data(), count, vocab, dim,
                                    y.data()));
  cpu::embeddingBackward(dout.data(), ids.data(), count, vocab, dim, dt.data());
  EXPECT_LT(relError(Y.download(), y), tolerance(t));
  Vec first = DT.download();
  EXPECT_LT(relError(first, dt), tolerance(t));
  // The same bits again (no atomics in the sums).
  CUDA_OK(kc::embeddingGrad(DO.ref(), I.data, count, vocab, dim, DT.mut(),
                            work.data(), nullptr));
  EXPECT_EQ(DT.download(), first);
  int flag = -1;
  cudaMemcpy(&flag, bad.data(), 4, cudaMemcpyDeviceToHost);
  EXPECT_EQ(flag, 0);
  // An id outside the vocabulary is reported.
  Ids outside(std::vector<int64_t>{1, vocab});
  CUDA_OK(kc::embedding(T.ref(), outside.data, 2, vocab, dim, Y.mut(),
                        static_cast<int *>(bad.data()), nullptr));
  cudaMemcpy(&flag, bad.data(), 4, cudaMemcpyDeviceToHost);
  EXPECT_EQ(flag, 1);
}

TEST_P(Kernels, CrossEntropy) {
  kc::DType t = GetParam();
  for (bool shift : {false, true}) {
    kc::CrossEntropyShape s{3, 21, 1001, -100, shift};
    int64_t rows = s.batch * s.seq;
    std::vector<int64_t> labels(rows);
    for (int64_t i = 0; i < rows; ++i)
      labels[i] = i % 5 == 2 ? -100 : int64_t(rng()() % s.vocab);
    Vec logits = rounded(randomVec(rows * s.vocab, 3.0f), t);
    Tensor L(logits, t), D(rows * s.vocab, t), loss(1, kc::DType::F32);
    Tensor rowLoss(rows, kc::DType::F32), dloss(Vec{0.7f}, kc::DType::F32);
    Ids labelIds(labels);
    int64_t *n;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void **>(&n), 8), cudaSuccess);
    // In two chunks of rows, as the head does.
    CUDA_OK(kc::crossEntropyRows(L.ref(), labelIds.data, s, 0, 30,
                                 static_cast<float *>(rowLoss.data()),
                                 nullptr));
    kc::Ref rest{static_cast<char *>(L.data()) +
                     30 * s.vocab * (t == kc::DType::F32 ? 4 : 2),
                 t};
    CUDA_OK(kc::crossEntropyRows(rest, labelIds.data, s, 30, rows - 30,
                                 static_cast<float *>(rowLoss.data()),
                                 nullptr));
    CUDA_OK(kc::crossEntropyLoss(static_cast<float *>(rowLoss.data()),
                                 labelIds.data, s, loss.mut(), nullptr));
    CUDA_OK(kc::crossEntropyCount(labelIds.data, s, n, nullptr));
    CUDA_OK(kc::crossEntropyGradRows(L.ref(), labelIds.data, s, 0, rows,
                                     dloss.ref(), n, D.mut(), nullptr));
    cpu::CrossEntropyShape cs{s.batch, s.seq, s.vocab, -100, shift};
    float want =
        cpu::crossEntropyForward(logits.data(), labels.data(), cs, nullptr);
    Vec d(rows * s.vocab);
    cpu::crossEntropyBackward(logits.data(), labels.data(), cs, 0.7f, d.data());
    EXPECT_LT(relError(loss.download(), Vec{want}), 1e-5);
    EXPECT_LT(relError(D.download(), d), tolerance(t));
    cudaFree(n);
  }
}

TEST_P(Kernels, Primitives) {
  kc::DType t = GetParam();
  // Broadcast binary ops.
  kc::Dims ad{4, 1, 6}, bd{5, 1}, yd{4, 5, 6};
  Vec a = rounded(randomVec(24), t), b = rounded(randomVec(5), t);
  Tensor A(a, t), B(b, t), Y(120, t);
  for (cpu::Binary op :
       {cpu::Binary::Add, cpu::Binary::Sub, cpu::Binary::Mul, cpu::Binary::Div,
        cpu::Binary::Max, cpu::Binary::Min}) {
    CUDA_OK(kc::binary(op, A.ref(), ad, B.ref(), bd, Y.mut(), yd, nullptr));
    Vec y(120);
    cpu::binaryForward(op, a.data(), ad, b.data(), bd, y.data(), yd);
    EXPECT_LT(relError(Y.download(), y), tolerance(t));
  }
  // Same shapes: the 16-byte vector path.
  {
    Vec x = rounded(randomVec(64), t), z = rounded(randomVec(64), t);
    Tensor X(x, t), Z(z, t), S(64, t), N(64, t);
    CUDA_OK(kc::binary(cpu::Binary::Sub, X.ref(), {64}, Z.ref(), {64}, S.mut(),
                       {64}, nullptr));
    CUDA_OK(kc::neg(X.ref(), N.mut(), 64, nullptr));
    Vec want(64), negX(64);
    cpu::binaryForward(cpu::Binary::Sub, x.data(), {64}, z.data(), {64},
                       want.data(), {64});
    for (int i = 0; i < 64; ++i)
      negX[i] = -x[i];
    EXPECT_LT(relError(S.download(), want), tolerance(t));
    EXPECT_EQ(N.download(), negX);
  }
  // Every pointwise function of the schema and its derivative (inputs
  // spread over its domain, parameters off their defaults), the batched
  // product, softmax along a middle axis and expand, against the CPU.
  {
    Vec x = rounded(randomVec(60), t), dy = rounded(randomVec(60), t);
    for (mt::kernels::Unary f : mt::kernels::kUnaryFns) {
      cpu::UnaryDomain d = cpu::unaryDomain(f);
      Vec u(60);
      for (int i = 0; i < 60; ++i)
        u[i] = d.lo + (d.hi - d.lo) * (float(i) + 0.5f) / 60.0f;
      u = rounded(u, t);
      cpu::UnaryParams p{f, 0.3f, 0.6f};
      Tensor X(u, t), Y(60, t), DY(dy, t), DX(60, t);
      CUDA_OK(kc::unary(p, X.ref(), Y.mut(), 60, nullptr));
      CUDA_OK(kc::unaryGrad(p, X.ref(), DY.ref(), DX.mut(), 60, nullptr));
      Vec want(60), wantGrad(60);
      cpu::unaryForward(p, u.data(), want.data(), 60);
      cpu::unaryBackward(p, u.data(), dy.data(), wantGrad.data(), 60);
      EXPECT_LT(relError(Y.download(), rounded(want, t)), tolerance(t))
          << mt::kernels::unaryName(f);
      EXPECT_LT(relError(DX.download(), rounded(wantGrad, t)), tolerance(t))
          << mt::kernels::unaryName(f) << "'s derivative";
    }
    Vec b = rounded(randomVec(40), t);
    Tensor X(x, t), B(b, t), M(2 * 5 * 3 * 2, t);
    CUDA_OK(kc::batchMatmul(X.ref(), {2, 1, 3, 10}, B.ref(), {5, 10, 2},
                            M.mut(), {2, 5, 3, 2}, nullptr));
    Vec m(60);
    cpu::batchMatmul(x.data(), {2, 1, 3, 10}, b.data(), {5, 10, 2}, m.data(),
                     {2, 5, 3, 2});
    EXPECT_LT(relError(M.download(), m), tolerance(t));
    Tensor S(60, t);
    CUDA_OK(kc::softmax(X.ref(), {3, 4, 5}, 1, S.mut(), false, nullptr));
    Vec s(60);
    cpu::softmax(x.data(), {3, 4, 5}, 1, s.data());
    EXPECT_LT(relError(S.download(), s), tolerance(t));
    Tensor L(60, t);
    CUDA_OK(kc::softmax(X.ref(), {3, 4, 5}, 2, L.mut(), true, nullptr));
    Vec l(60);
    cpu::softmax(x.data(), {3, 4, 5}, 2, l.data(), /*log=*/true);
    EXPECT_LT(relError(L.download(), l), tolerance(t));
    Tensor E(120, t);
    CUDA_OK(kc::expand(X.ref(), {3, 1, 4, 5}, E.mut(), {3, 2, 4, 5}, nullptr));
    Vec e(120);
    cpu::expand(x.data(), {3, 1, 4, 5}, e.data(), {3, 2, 4, 5});
    EXPECT_EQ(E.download(), rounded(e, t));
  }
  // Reductions, transposes, concat and split of a [3, 4, 5] tensor.
  kc::Dims xd{3, 4, 5};
  Vec x = rounded(randomVec(60), t);
  Tensor X(x, t);
  for (std::vector<int64_t> axes :
       {std::vector<int64_t>{}, {0}, {0, 1}, {1}, {2}, {0, 2}, {-1}}) {
    cpu::Dims kept = xd;
    for (int64_t ax : axes)
      kept[ax < 0 ? ax + 3 : ax] = 1;
    size_t n = axes.empty() ? 1 : size_t(kept[0] * kept[1] * kept[2]);
    Tensor R(n, t), Mean(n, t), Max(n, t);
    CUDA_OK(kc::reduceSum(X.ref(), xd, axes, R.mut(), nullptr));
    CUDA_OK(kc::reduceMean(X.ref(), xd, axes, Mean.mut(), nullptr));
    CUDA_OK(kc::reduceMax(X.ref(), xd, axes, Max.mut(), nullptr));
    Vec r(n), mean(n), max(n);
    cpu::reduceSum(x.data(), xd, axes, r.data());
    cpu::reduceMean(x.data(), xd, axes, mean.data());
    cpu::reduceMax(x.data(), xd, axes, max.data());
    EXPECT_LT(relError(R.download(), r), tolerance(t));
    EXPECT_LT(relError(Mean.download(), mean), tolerance(t));
    EXPECT_EQ(Max.download(), max);
  }
  // IsNaN's bytes, and Where of a condition [3, 1, 5] between x and a
  // scalar (the safe softmax's form).
  {
    Vec withNaN = x;
    withNaN[7] = withNaN[30] = std::numeric_limits<float>::quiet_NaN();
    Tensor W(withNaN, t), Zero(Vec{0.0f}, t), Out(60, t);
    uint8_t *mask = nullptr, *cond = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void **>(&mask), 60), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void **>(&cond), 15), cudaSuccess);
    CUDA_OK(kc::isNaN(W.ref(), mask, 60, nullptr));
    std::vector<uint8_t> gotMask(60), wantMask(60);
    cudaDeviceSynchronize();
    cudaMemcpy(gotMask.data(), mask, 60, cudaMemcpyDeviceToHost);
    cpu::isNaN(withNaN.data(), wantMask.data(), 60);
    EXPECT_EQ(gotMask, wantMask);
    std::vector<uint8_t> c(15);
    for (int i = 0; i < 15; ++i)
      c[size_t(i)] = uint8_t(i % 3 == 0);
    cudaMemcpy(cond, c.data(), 15, cudaMemcpyHostToDevice);
    CUDA_OK(kc::where(cond, {3, 1, 5}, X.ref(), xd, Zero.ref(), {}, Out.mut(),
                      xd, nullptr));
    Vec zero{0.0f}, want(60);
    cpu::where(c.data(), {3, 1, 5}, x.data(), xd, zero.data(), {}, want.data(),
               xd);
    EXPECT_EQ(Out.download(), want);
    // Each comparison of x with a broadcast [5] (ties included: x itself).
    for (cpu::Compare op :
         {cpu::Compare::Equal, cpu::Compare::Less, cpu::Compare::LessOrEqual,
          cpu::Compare::Greater, cpu::Compare::GreaterOrEqual}) {
      CUDA_OK(
          kc::compare(op, X.ref(), xd, X.ref(), {1, 1, 5}, mask, xd, nullptr));
      cudaDeviceSynchronize();
      cudaMemcpy(gotMask.data(), mask, 60, cudaMemcpyDeviceToHost);
      Vec xs = X.download(), head(xs.begin(), xs.begin() + 5);
      cpu::compareForward(op, xs.data(), xd, head.data(), {1, 1, 5},
                          wantMask.data(), xd);
      EXPECT_EQ(gotMask, wantMask) << int(op);
    }
    // Logic of the masks: c [3, 1, 5] with the last comparison's [3, 4, 5].
    for (cpu::Logic op :
         {cpu::Logic::Not, cpu::Logic::And, cpu::Logic::Or, cpu::Logic::Xor}) {
      std::vector<uint8_t> logic(60), wantLogic(60);
      uint8_t *out = nullptr;
      cudaMalloc(reinterpret_cast<void **>(&out), 60);
      CUDA_OK(kc::logic(op, cond, {3, 1, 5}, mask, xd, out, xd, nullptr));
      cudaDeviceSynchronize();
      cudaMemcpy(logic.data(), out, 60, cudaMemcpyDeviceToHost);
      cpu::logicForward(op, c.data(), {3, 1, 5}, wantMask.data(), xd,
                        wantLogic.data(), xd);
      EXPECT_EQ(logic, wantLogic) << int(op);
      cudaFree(out);
    }
    cudaFree(mask);
    cudaFree(cond);
  }
  for (std::vector<int64_t> perm : {std::vector<int64_t>{2, 0, 1}, {1, 0, 2}}) {
    Tensor P(60, t);
    CUDA_OK(kc::transpose(X.ref(), xd, perm, P.mut(), nullptr));
    Vec p(60);
    cpu::transpose(x.data(), xd, perm, p.data());
    EXPECT_LT(relError(P.download(), p), tolerance(t));
  }
  kc::Dims p0{3, 1, 5}, p1{3, 3, 5};
  Tensor S0(15, t), S1(45, t), C(60, t);
  CUDA_OK(kc::splitPart(X.ref(), xd, 1, 0, S0.mut(), p0, nullptr));
  CUDA_OK(kc::splitPart(X.ref(), xd, 1, 1, S1.mut(), p1, nullptr));
  CUDA_OK(kc::concatPart(S0.ref(), p0, 1, 0, 4, C.mut(), nullptr));
  CUDA_OK(kc::concatPart(S1.ref(), p1, 1, 1, 4, C.mut(), nullptr));
  Vec s0(15), s1(45);
  cpu::split(x.data(), xd, 1, sizeof(float), {s0.data(), s1.data()}, {p0, p1});
  EXPECT_LT(relError(S0.download(), s0), tolerance(t));
  EXPECT_LT(relError(S1.download(), s1), tolerance(t));
  EXPECT_EQ(C.download(), X.download());
  // A gather along the middle axis (an index twice, one negative) and its
  // gradient; then an index outside the axis, flagged.
  {
    std::vector<int64_t> idx{3, -4, 1, 3};
    Ids I(idx);
    int *bad = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void **>(&bad), sizeof(int)),
              cudaSuccess);
    cudaMemset(bad, 0, sizeof(int));
    Tensor Gt(60, t), Dx(60, t);
    CUDA_OK(kc::gather(X.ref(), xd, 1, I.data, 4, Gt.mut(), bad, nullptr));
    size_t bytes = 0;
    CUDA_OK(kc::gatherGradWorkspaceBytes(xd[1], 4, bytes));
    DeviceBytes work(bytes);
    CUDA_OK(kc::gatherGrad(Gt.ref(), xd, 1, I.data, 4, Dx.mut(), bad, work.p,
                           nullptr));
    Vec g(60), dx(60);
    ASSERT_TRUE(cpu::gather(x.data(), xd, 1, idx.data(), 4, g.data()));
    ASSERT_TRUE(cpu::gatherGrad(g.data(), xd, 1, idx.data(), 4, dx.data()));
    EXPECT_EQ(Gt.download(), rounded(g, t));
    EXPECT_LT(relError(Dx.download(), dx), tolerance(t));
    int flag = 1;
    cudaDeviceSynchronize();
    cudaMemcpy(&flag, bad, sizeof flag, cudaMemcpyDeviceToHost);
    EXPECT_EQ(flag, 0);
    Ids Out(std::vector<int64_t>{4});
    CUDA_OK(kc::gather(X.ref(), xd, 1, Out.data, 1, Gt.mut(), bad, nullptr));
    cudaDeviceSynchronize();
    cudaMemcpy(&flag, bad, sizeof flag, cudaMemcpyDeviceToHost);
    EXPECT_EQ(flag, 1);
    cudaFree(bad);
  }
  // A reversed, strided slice of x and its gradient (zeros elsewhere).
  {
    kc::Dims sd{3, 2, 2};
    std::vector<int64_t> starts{0, 3, 4}, steps{1, -2, -3};
    Tensor S(12, t), G(60, t);
    CUDA_OK(kc::slice(X.ref(), xd, starts, steps, S.mut(), sd, nullptr));
    CUDA_OK(kc::sliceGrad(S.ref(), sd, starts, steps, G.mut(), xd, nullptr));
    Vec s(12), g(60);
    cpu::slice(x.data(), xd, starts, steps, s.data(), sd);
    cpu::sliceGrad(s.data(), sd, starts, steps, g.data(), xd);
    EXPECT_EQ(S.download(), rounded(s, t));
    EXPECT_EQ(G.download(), rounded(g, t));
    // The same slice of ids (labels[:, 1:] is one), each copied exactly.
    std::vector<int64_t> ids(60);
    for (size_t i = 0; i < ids.size(); ++i)
      ids[i] = int64_t(i) * 1000003 - 100; // beyond a float's integers
    Ids I(ids), Si(std::vector<int64_t>(12, 0));
    CUDA_OK(kc::sliceIds(I.data, xd, starts, steps, Si.data, sd, nullptr));
    std::vector<int64_t> want(12), got(12);
    cpu::slice(ids.data(), xd, starts, steps, want.data(), sd);
    cudaDeviceSynchronize();
    cudaMemcpy(got.data(), Si.data, 12 * 8, cudaMemcpyDeviceToHost);
    EXPECT_EQ(got, want);
  }
  // A pad by 0.5 that crops dim 1 and pads dims 0 and 2, and its gradient
  // (the pad back by the negated begins).
  {
    kc::Dims pd{4, 2, 7};
    std::vector<int64_t> begins{1, -1, 2}, back{-1, 1, -2};
    Tensor P(56, t), G(60, t);
    CUDA_OK(kc::pad(X.ref(), xd, begins, 0.5f, P.mut(), pd, nullptr));
    CUDA_OK(kc::pad(P.ref(), pd, back, 0.0f, G.mut(), xd, nullptr));
    Vec p(56), g(60);
    cpu::pad(x.data(), xd, begins, 0.5f, p.data(), pd);
    cpu::pad(p.data(), pd, back, 0.0f, g.data(), xd);
    EXPECT_EQ(P.download(), rounded(p, t));
    EXPECT_EQ(G.download(), rounded(g, t));
  }
  // Index pairs into x's first two dims (one repeated, one negative) and
  // their gradient; a pair outside x raises the flag.
  {
    Ids I(std::vector<int64_t>{0, 3, 2, -1, 0, 3});
    int *bad = nullptr;
    int64_t *flat = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void **>(&bad), sizeof(int)),
              cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void **>(&flat), 3 * sizeof(int64_t)),
              cudaSuccess);
    cudaMemset(bad, 0, sizeof(int));
    Tensor G(15, t), Dx(60, t);
    CUDA_OK(
        kc::gatherND(X.ref(), xd, I.data, 3, 2, G.mut(), flat, bad, nullptr));
    size_t bytes = 0;
    CUDA_OK(kc::gatherGradWorkspaceBytes(xd[0] * xd[1], 3, bytes));
    DeviceBytes work(bytes);
    CUDA_OK(kc::gatherNDGrad(G.ref(), xd, I.data, 3, 2, Dx.mut(), flat, bad,
                             work.p, nullptr));
    std::vector<int64_t> idx{0, 3, 2, -1, 0, 3};
    Vec g(15), dx(60);
    ASSERT_TRUE(cpu::gatherND(x.data(), xd, idx.data(), 3, 2, g.data()));
    ASSERT_TRUE(cpu::gatherNDGrad(g.data(), xd, idx.data(), 3, 2, dx.data()));
    EXPECT_EQ(G.download(), rounded(g, t));
    EXPECT_LT(relError(Dx.download(), dx), tolerance(t));
    int flag = 1;
    cudaDeviceSynchronize();
    cudaMemcpy(&flag, bad, sizeof flag, cudaMemcpyDeviceToHost);
    EXPECT_EQ(flag, 0);
    Ids Out(std::vector<int64_t>{3, 0});
    CUDA_OK(
        kc::gatherND(X.ref(), xd, Out.data, 1, 2, G.mut(), flat, bad, nullptr));
    cudaDeviceSynchronize();
    cudaMemcpy(&flag, bad, sizeof flag, cudaMemcpyDeviceToHost);
    EXPECT_EQ(flag, 1);
    cudaFree(flat);
    cudaFree(bad);
  }
  // The 2 largest and the 3 smallest along the middle dim, and the
  // gradient to the places they came from.
  for (bool smallest : {false, true}) {
    int64_t k = smallest ? 3 : 2;
    size_t n = size_t(xd[0] * k * xd[2]);
    int64_t *idx = nullptr;
    int *bad = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void **>(&idx), n * sizeof(int64_t)),
              cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void **>(&bad), sizeof(int)),
              cudaSuccess);
    cudaMemset(bad, 0, sizeof(int));
    Tensor V(n, t), Dx(60, t);
    CUDA_OK(kc::topK(X.ref(), xd, 1, k, smallest, V.mut(), idx, nullptr));
    CUDA_OK(
        kc::gatherElementsGrad(V.ref(), idx, xd, 1, k, Dx.mut(), bad, nullptr));
    Vec v(n), dx(60);
    std::vector<int64_t> want(n), got(n);
    cpu::topK(x.data(), xd, 1, k, smallest, v.data(), want.data());
    ASSERT_TRUE(
        cpu::gatherElementsGrad(v.data(), want.data(), xd, 1, k, dx.data()));
    cudaDeviceSynchronize();
    cudaMemcpy(got.data(), idx, n * sizeof(int64_t), cudaMemcpyDeviceToHost);
    EXPECT_EQ(V.download(), rounded(v, t));
    EXPECT_EQ(got, want);
    EXPECT_EQ(Dx.download(), rounded(dx, t));
    int flag = 1;
    cudaMemcpy(&flag, bad, sizeof flag, cudaMemcpyDeviceToHost);
    EXPECT_EQ(flag, 0);
    cudaFree(idx);
    cudaFree(bad);
  }
  // Both triangles, running sums every way along the middle dim, a tile.
  {
    Tensor Lo(60, t), Up(60, t);
    CUDA_OK(kc::trilu(X.ref(), xd, false, 1, Lo.mut(), nullptr));
    CUDA_OK(kc::trilu(X.ref(), xd, true, -2, Up.mut(), nullptr));
    Vec lo(60), up(60);
    cpu::trilu(x.data(), xd, false, 1, lo.data());
    cpu::trilu(x.data(), xd, true, -2, up.data());
    EXPECT_EQ(Lo.download(), rounded(lo, t));
    EXPECT_EQ(Up.download(), rounded(up, t));
    for (bool exclusive : {false, true})
      for (bool reverse : {false, true}) {
        Tensor C(60, t);
        CUDA_OK(
            kc::cumSum(X.ref(), xd, 1, exclusive, reverse, C.mut(), nullptr));
        Vec c(60);
        cpu::cumSum(x.data(), xd, 1, exclusive, reverse, c.data());
        EXPECT_LT(relError(C.download(), c), tolerance(t));
      }
    kc::Dims td{6, 4, 10};
    Tensor T(240, t);
    CUDA_OK(kc::tile(X.ref(), xd, T.mut(), td, nullptr));
    Vec tiled(240);
    cpu::tile(x.data(), xd, tiled.data(), td);
    EXPECT_EQ(T.download(), rounded(tiled, t));
  }
  // Casts, negation and fills.
  Tensor F(60, kc::DType::F32), N(60, t), Z(60, t);
  CUDA_OK(kc::cast(X.ref(), F.mut(), 60, nullptr));
  CUDA_OK(kc::neg(X.ref(), N.mut(), 60, nullptr));
  CUDA_OK(kc::fill(Z.mut(), 60, 0.5f, nullptr));
  EXPECT_EQ(F.download(), x);
  Vec negX(60);
  for (int i = 0; i < 60; ++i)
    negX[i] = -x[i];
  EXPECT_EQ(N.download(), negX);
  EXPECT_EQ(Z.download(), Vec(60, 0.5f));
  // Casts of ids and booleans, as the CPU's hostCopy makes them.
  std::vector<int64_t> ids = {-3, 0, 7, 1, 2};
  int64_t *dIds = nullptr, *back = nullptr;
  float *dFloats = nullptr;
  uint8_t *dBools = nullptr;
  cudaMalloc(reinterpret_cast<void **>(&dIds), 40);
  cudaMalloc(reinterpret_cast<void **>(&back), 40);
  cudaMalloc(reinterpret_cast<void **>(&dFloats), 20);
  cudaMalloc(reinterpret_cast<void **>(&dBools), 5);
  cudaMemcpy(dIds, ids.data(), 40, cudaMemcpyHostToDevice);
  CUDA_OK(
      kc::convert(dIds, kc::Scalar::I64, dFloats, kc::Scalar::F32, 5, nullptr));
  CUDA_OK(
      kc::convert(dFloats, kc::Scalar::F32, back, kc::Scalar::I64, 5, nullptr));
  CUDA_OK(
      kc::convert(dIds, kc::Scalar::I64, dBools, kc::Scalar::U8, 5, nullptr));
  cudaDeviceSynchronize();
  std::vector<int64_t> gotIds(5);
  std::vector<uint8_t> gotBools(5);
  cudaMemcpy(gotIds.data(), back, 40, cudaMemcpyDeviceToHost);
  cudaMemcpy(gotBools.data(), dBools, 5, cudaMemcpyDeviceToHost);
  EXPECT_EQ(gotIds, ids);
  EXPECT_EQ(gotBools, (std::vector<uint8_t>{1, 0, 1, 1, 1}));
  for (void *p : {(void *)dIds, (void *)back, (void *)dFloats, (void *)dBools})
    cudaFree(p);
}

/// The linear layer's three GEMMs in both weight layouts, and an
/// accumulating one, against the CPU linear kernels.
TEST_P(Kernels, Gemms) {
  kc::DType t = GetParam();
  mt::runtime::Gemms gemms;
  ASSERT_TRUE(gemms.init());
  Tensor work(mt::runtime::Gemms::kWorkspaceBytes / 4, kc::DType::F32);
  int64_t rows = 77, in = 96, out = 130;
  for (bool outIn : {true, false}) {
    Vec x = rounded(randomVec(rows * in), t),
        w = rounded(randomVec(in * out), t);
    Vec dy = rounded(randomVec(rows * out), t);
    Tensor X(x, t), W(w, t), DY(dy, t), Y(rows * out, t), DX(rows * in, t),
        DW(in * out, t);
    mt::runtime::GemmShape fwd{rows, out, in, false, outIn, t, t, false};
    mt::runtime::GemmShape dxs{rows, in, out, false, !outIn, t, t, false};
    mt::runtime::GemmShape dws =
        outIn ? mt::runtime::GemmShape{out, in, rows, true, false, t, t, false}
              : mt::runtime::GemmShape{in, out, rows, true, false, t, t, false};
    ASSERT_TRUE(
        gemms.run(fwd, X.data(), W.data(), Y.data(), work.data(), nullptr));
    ASSERT_TRUE(
        gemms.run(dxs, DY.data(), W.data(), DX.data(), work.data(), nullptr));
    ASSERT_TRUE(gemms.run(dws, outIn ? DY.data() : X.data(),
                          outIn ? X.data() : DY.data(), DW.data(), work.data(),
                          nullptr));
    Vec y(rows * out), dx(rows * in), dw(in * out, 0.0f);
    cpu::linearForward(x.data(), w.data(), nullptr, rows, in, out, outIn,
                       y.data());
    cpu::linearBackward(x.data(), w.data(), dy.data(), rows, in, out, outIn,
                        dx.data(), dw.data(), nullptr);
    EXPECT_LT(relError(Y.download(), y), tolerance(t)) << "outIn " << outIn;
    EXPECT_LT(relError(DX.download(), dx), tolerance(t)) << "outIn " << outIn;
    EXPECT_LT(relError(DW.download(), dw), tolerance(t)) << "outIn " << outIn;
    // Accumulating: the same dw again, into fp32.
    Tensor DW32(dw, kc::DType::F32);
    mt::runtime::GemmShape acc = dws;
    acc.c = kc::DType::F32;
    acc.accumulate = true;
    ASSERT_TRUE(gemms.run(acc, outIn ? DY.data() : X.data(),
                          outIn ? X.data() : DY.data(), DW32.data(),
                          work.data(), nullptr));
    Vec twice = dw;
    for (float &v : twice)
      v *= 2;
    EXPECT_LT(relError(DW32.download(), twice), tolerance(t));
    // With a bias in the epilogue.
    Vec bias = rounded(randomVec(out), t);
    Tensor BIAS(bias, t), YB(rows * out, t);
    mt::runtime::GemmShape withBias = fwd;
    withBias.bias = true;
    ASSERT_TRUE(gemms.run(withBias, X.data(), W.data(), YB.data(), work.data(),
                          nullptr, BIAS.data()));
    cpu::linearForward(x.data(), w.data(), bias.data(), rows, in, out, outIn,
                       y.data());
    EXPECT_LT(relError(YB.download(), y), tolerance(t)) << "bias";
  }
}

/// The head in chunks (one that divides the rows and one that does not),
/// both weight layouts, its GEMMs on cuBLASLt through the hook, against
/// the CPU head.
TEST_P(Kernels, Head) {
  kc::DType t = GetParam();
  Cublas cublas;
  ASSERT_TRUE(cublas.gemms.init());
  const kc::GemmHook &gemm = cublas.hook;
  const mt::runtime::Status &gemmStatus = cublas.status;
  for (bool outIn : {true, false})
    for (int64_t chunk : {16, 21}) {
      mt::kernels::HeadShape s{48, outIn, {2, 32, 301, -100, true}, chunk};
      int64_t rows = s.ce.batch * s.ce.seq;
      std::vector<int64_t> labels(rows);
      for (int64_t i = 0; i < rows; ++i)
        labels[i] = i % 7 == 3 ? -100 : int64_t(rng()() % s.ce.vocab);
      Vec x = rounded(randomVec(rows * s.dim), t),
          w = rounded(randomVec(s.dim * s.ce.vocab, 0.2f), t);
      // dw in fp32, as plans keep the head's weight gradient: it sums the
      // chunks' GEMMs.
      Tensor X(x, t), W(w, t), loss(1, kc::DType::F32), DX(rows * s.dim, t),
          DW(s.dim * s.ce.vocab, kc::DType::F32),
          dloss(Vec{0.7f}, kc::DType::F32);
      Tensor logits(chunk * s.ce.vocab, kc::DType::F32);
      Tensor ws(kc::headWorkspaceBytes(s, t, true) / 4 + 1, kc::DType::F32);
      Ids ids(labels);
      CUDA_OK(kc::headCrossEntropy(X.ref(), W.ref(), ids.data, s,
                                   static_cast<float *>(logits.data()),
                                   ws.data(), loss.mut(), gemm, nullptr))
          << gemmStatus.message();
      CUDA_OK(kc::headCrossEntropyGrad(X.ref(), W.ref(), ids.data, dloss.ref(),
                                       s, static_cast<float *>(logits.data()),
                                       ws.data(), DX.mut(), DW.mut(), gemm,
                                       nullptr))
          << gemmStatus.message();
      Vec scratch(chunk * s.ce.vocab), dx(rows * s.dim), dw(s.dim * s.ce.vocab);
      float want = cpu::headCrossEntropyForward(
          x.data(), w.data(), labels.data(), s, scratch.data());
      cpu::headCrossEntropyBackward(x.data(), w.data(), labels.data(), 0.7f, s,
                                    dx.data(), dw.data(), scratch.data());
      EXPECT_LT(relError(loss.download(), Vec{want}), 1e-5)
          << "outIn " << outIn << " chunk " << chunk;
      EXPECT_LT(relError(DX.download(), dx), tolerance(t, 1e-4))
          << "outIn " << outIn << " chunk " << chunk;
      EXPECT_LT(relError(DW.download(), dw), tolerance(t, 1e-4))
          << "outIn " << outIn << " chunk " << chunk;
    }
}

/// The gated MLP in chunks (kernels/cuda/mlp.cu, the runtime's cuBLASLt
/// GEMMs through its hook) against the CPU twin: chunks that divide the
/// rows and one that leaves a remainder, both weight layouts.
TEST_P(Kernels, GatedMlp) {
  kc::DType t = GetParam();
  Cublas cublas;
  ASSERT_TRUE(cublas.gemms.init());
  const kc::GemmHook &gemm = cublas.hook;
  const mt::runtime::Status &gemmStatus = cublas.status;
  for (bool outIn : {true, false})
    for (int64_t chunk : {96, 40}) {
      kc::MlpShape m{96, 48, 80, outIn, kc::Activation::Silu, chunk};
      Vec x = rounded(randomVec(m.rows * m.dim), t),
          wg = rounded(randomVec(m.dim * m.hidden, 0.2f), t),
          wu = rounded(randomVec(m.dim * m.hidden, 0.2f), t),
          wd = rounded(randomVec(m.dim * m.hidden, 0.2f), t),
          dy = rounded(randomVec(m.rows * m.dim), t);
      // The weights' gradients in fp32 when chunked, as plans keep them.
      kc::DType dwType = chunk < m.rows ? kc::DType::F32 : t;
      Tensor X(x, t), G(wg, t), U(wu, t), D(wd, t), DY(dy, t),
          Y(m.rows * m.dim, t), DX(m.rows * m.dim, t),
          DG(m.dim * m.hidden, dwType), DU(m.dim * m.hidden, dwType),
          DD(m.dim * m.hidden, dwType),
          scratch(kc::gatedMlpScratchBytes(m, t, true) / 2 + 1, t);
      CUDA_OK(kc::gatedMlp(X.ref(), G.ref(), U.ref(), D.ref(), m, Y.mut(),
                           scratch.data(), gemm, nullptr))
          << gemmStatus.message();
      CUDA_OK(kc::gatedMlpGrad(X.ref(), G.ref(), U.ref(), D.ref(), DY.ref(), m,
                               DX.mut(), DG.mut(), DU.mut(), DD.mut(),
                               scratch.data(), gemm, nullptr))
          << gemmStatus.message();
      Vec y(m.rows * m.dim), dx(m.rows * m.dim), dg(m.dim * m.hidden),
          du(m.dim * m.hidden), dd(m.dim * m.hidden),
          cpuScratch(m.chunkRows * (3 * m.hidden + m.dim));
      cpu::gatedMlpForward(x.data(), wg.data(), wu.data(), wd.data(), m,
                           y.data(), cpuScratch.data());
      cpu::gatedMlpBackward(x.data(), wg.data(), wu.data(), wd.data(),
                            dy.data(), m, dx.data(), dg.data(), du.data(),
                            dd.data(), cpuScratch.data());
      for (auto [got, want] : {std::pair<Tensor *, Vec *>{&Y, &y},
                               {&DX, &dx},
                               {&DG, &dg},
                               {&DU, &du},
                               {&DD, &dd}})
        EXPECT_LT(relError(got->download(), *want), tolerance(t, 1e-4))
            << "outIn " << outIn << " chunk " << chunk;
    }
}

/// The expert linears (kernels/cuda/experts.cu: rows grouped by expert on
/// the device, a GEMM per expert through the runtime's hook) against the
/// CPU twin: 4 experts of which one no row chose, negative ids, both weight
/// layouts; an id outside the experts is said and computes nothing.
TEST_P(Kernels, ExpertLinear) {
  kc::DType t = GetParam();
  Cublas cublas;
  ASSERT_TRUE(cublas.gemms.init());
  const kc::GemmHook &gemm = cublas.hook;
  const mt::runtime::Status &gemmStatus = cublas.status;
  for (bool outIn : {true, false}) {
    kc::ExpertShape e{37, 4, 24, 40, outIn};
    std::vector<int64_t> ids(size_t(e.rows));
    for (int64_t &i : ids)
      i = int64_t(rng()() % 3) - (rng()() % 2 ? 4 : 0); // never expert 3
    Vec x = rounded(randomVec(e.rows * e.in), t),
        w = rounded(randomVec(e.experts * e.in * e.out, 0.2f), t),
        dy = rounded(randomVec(e.rows * e.out), t);
    Tensor X(x, t), W(w, t), DY(dy, t), Y(e.rows * e.out, t),
        DX(e.rows * e.in, t), DW(e.experts * e.in * e.out, kc::DType::F32);
    Ids I(ids);
    size_t bytes = 0, gradBytes = 0;
    CUDA_OK(kc::expertLinearWorkspaceBytes(e, false, bytes));
    CUDA_OK(kc::expertLinearWorkspaceBytes(e, true, gradBytes));
    DeviceBytes ws(std::max(bytes, gradBytes));
    bool bad = true;
    CUDA_OK(kc::expertLinear(X.ref(), I.data, W.ref(), e, Y.mut(), ws.p, bad,
                             gemm, nullptr))
        << gemmStatus.message();
    EXPECT_FALSE(bad);
    CUDA_OK(kc::expertLinearGrad(X.ref(), I.data, W.ref(), DY.ref(), e,
                                 DX.mut(), DW.mut(), ws.p, bad, gemm, nullptr))
        << gemmStatus.message();
    EXPECT_FALSE(bad);
    Vec y(e.rows * e.out), dx(e.rows * e.in), dw(e.experts * e.in * e.out);
    ASSERT_TRUE(cpu::expertLinearForward(x.data(), ids.data(), w.data(), e.rows,
                                         e.experts, e.in, e.out, e.outIn,
                                         y.data()));
    ASSERT_TRUE(cpu::expertLinearBackward(
        x.data(), ids.data(), w.data(), dy.data(), e.rows, e.experts, e.in,
        e.out, e.outIn, dx.data(), dw.data()));
    EXPECT_LT(relError(Y.download(), y), tolerance(t, 1e-5)) << outIn;
    EXPECT_LT(relError(DX.download(), dx), tolerance(t, 1e-5)) << outIn;
    EXPECT_LT(relError(DW.download(), dw), tolerance(t, 1e-5)) << outIn;
    ids[5] = 4;
    Ids Outside(ids);
    CUDA_OK(kc::expertLinear(X.ref(), Outside.data, W.ref(), e, Y.mut(), ws.p,
                             bad, gemm, nullptr));
    EXPECT_TRUE(bad);
  }
}

/// The gradient of a gather with many indices to few places (repeats,
/// negative ones) along a middle axis: the grouped sums against the CPU's
/// sums in index order.
TEST_P(Kernels, GatherGradManyIndices) {
  kc::DType t = GetParam();
  kc::Dims xd{3, 300, 5};
  int64_t count = 5000;
  std::vector<int64_t> idx(count);
  for (int64_t &i : idx)
    i = int64_t(rng()() % 600) - 300;
  kc::Dims gd{3, count, 5};
  Vec g = rounded(randomVec(3 * count * 5), t), want(3 * 300 * 5);
  ASSERT_TRUE(cpu::gatherGrad(g.data(), xd, 1, idx.data(), count, want.data()));
  Tensor G(g, t), DX(3 * 300 * 5, t);
  Ids I(idx);
  size_t bytes = 0;
  CUDA_OK(kc::gatherGradWorkspaceBytes(300, count, bytes));
  DeviceBytes work(bytes), bad(sizeof(int));
  cudaMemset(bad.p, 0, sizeof(int));
  CUDA_OK(kc::gatherGrad(G.ref(), xd, 1, I.data, count, DX.mut(),
                         static_cast<int *>(bad.p), work.p, nullptr));
  EXPECT_LT(relError(DX.download(), want), tolerance(t, 1e-5));
  int flag = 1;
  cudaMemcpy(&flag, bad.p, sizeof flag, cudaMemcpyDeviceToHost);
  EXPECT_EQ(flag, 0);
}

/// FILL of ids and booleans converts the value as a cast does (the same
/// for either storage parameter).
TEST_P(Kernels, FillIdsAndBooleans) {
  DeviceBytes ids(5 * sizeof(int64_t)), flags(5);
  CUDA_OK(kc::fill(ids.p, kc::Scalar::I64, 5, -2.75f, nullptr));
  CUDA_OK(kc::fill(flags.p, kc::Scalar::U8, 5, 0.5f, nullptr));
  std::vector<int64_t> i(5);
  std::vector<uint8_t> f(5);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaMemcpy(i.data(), ids.p, 5 * sizeof(int64_t), cudaMemcpyDeviceToHost);
  cudaMemcpy(f.data(), flags.p, 5, cudaMemcpyDeviceToHost);
  EXPECT_EQ(i, std::vector<int64_t>(5, -2));
  EXPECT_EQ(f, std::vector<uint8_t>(5, 1));
}

/// Index arithmetic past 2^31 elements: a fill, a cast and an add over
/// 2^31 + 7 elements (4 GiB a tensor in bf16, 8 in fp32), checked at both
/// ends and across 2^31.
TEST_P(Kernels, PastTwoToThe31Elements) {
  kc::DType t = GetParam();
  int64_t n = (int64_t(1) << 31) + 7;
  size_t width = t == kc::DType::F32 ? 4 : 2;
  DeviceBytes a(size_t(n) * width), b(size_t(n) * width);
  ASSERT_TRUE(a.p && b.p) << "no room for two tensors of 2^31 elements";
  kc::MutRef A{a.p, t}, B{b.p, t};
  CUDA_OK(kc::fill(A, n, 1.5f, nullptr));
  CUDA_OK(kc::cast({a.p, t}, B, n, nullptr));
  kc::Dims dims{n};
  CUDA_OK(kc::binary(kc::Binary::Add, {a.p, t}, dims, {b.p, t}, dims, B, dims,
                     nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int64_t at : {int64_t(0), (int64_t(1) << 31) - 4, n - 8}) {
    std::vector<char> h(8 * width);
    cudaMemcpy(h.data(), static_cast<char *>(b.p) + size_t(at) * width,
               h.size(), cudaMemcpyDeviceToHost);
    Vec got(8), want(8, 3.0f);
    for (size_t i = 0; i < 8; ++i) {
      if (t == kc::DType::F32) {
        std::memcpy(&got[i], h.data() + 4 * i, 4);
      } else {
        uint16_t bits;
        std::memcpy(&bits, h.data() + 2 * i, 2);
        got[i] = cpu::fromBf16(bits);
      }
    }
    EXPECT_EQ(relError(got, want), 0.0) << "at element " << at;
  }
}

INSTANTIATE_TEST_SUITE_P(Storage, Kernels,
                         ::testing::Values(kc::DType::F32, kc::DType::BF16),
                         [](const auto &info) {
                           return info.param == kc::DType::F32 ? "F32" : "BF16";
                         });

} // namespace

int main(int argc, char **argv) {
  std::string why;
  if (!mt::runtime::cudaDeviceUsable(&why)) {
    std::printf("skipped: %s\n", why.c_str());
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
