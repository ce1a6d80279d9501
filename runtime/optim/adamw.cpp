// AdamW on the host (see adamw.h). The loop is written so that the compiler
// vectorises it; each element's arithmetic is the same whatever the chunk.
#include "runtime/optim/adamw.h"
#include "runtime/base/numa.h"

#include "kernels/cpu/primitive_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <thread>
#include <vector>

namespace mt::runtime {

namespace {

/// fp32 moments as they are (and 8-bit ones decoded a block at a time);
/// bf16 moments widened and rounded.
struct F32Moments {
  float *m, *v;
  float getM(int64_t i) const { return m[i]; }
  float getV(int64_t i) const { return v[i]; }
  void set(int64_t i, float mi, float vi) {
    m[i] = mi;
    v[i] = vi;
  }
};
struct Bf16Moments {
  uint16_t *m, *v;
  float getM(int64_t i) const { return kernels::cpu::fromBf16(m[i]); }
  float getV(int64_t i) const { return kernels::cpu::fromBf16(v[i]); }
  void set(int64_t i, float mi, float vi) {
    m[i] = kernels::cpu::toBf16(mi);
    v[i] = kernels::cpu::toBf16(vi);
  }
};

/// The per-step constants of the update, each computed in double and
/// rounded to fp32 once, as torch does when it applies a Python scalar.
struct Coefs {
  float decay, beta1, beta2, oneMinusBeta1, oneMinusBeta2, stepSize, bias2Sqrt,
      eps, gradScale;
};

Coefs coefsOf(int64_t step, const AdamWConfig &c, float gradScale) {
  return {float(1.0 - c.lr * c.weightDecay),
          float(c.beta1),
          float(c.beta2),
          float(1.0 - c.beta1),
          float(1.0 - c.beta2),
          float(c.lr / (1.0 - std::pow(c.beta1, double(step)))),
          float(std::sqrt(1.0 - std::pow(c.beta2, double(step)))),
          float(c.eps),
          gradScale};
}

/// The scalar reference: torch.optim.AdamW's order of operations. The
/// vector paths below do exactly these operations per element (no fused
/// multiply-add: this file is compiled with -ffp-contract=off), so every
/// path gives the same bits.
template <typename Moments>
void updateScalar(float *param, const float *grad, Moments moments,
                  int64_t count, const Coefs &k) {
  for (int64_t i = 0; i < count; ++i) {
    float g = grad[i] * k.gradScale;
    float p = param[i] * k.decay;
    float mi = moments.getM(i) * k.beta1 + k.oneMinusBeta1 * g;
    float vi = moments.getV(i) * k.beta2 + k.oneMinusBeta2 * g * g;
    float denom = std::sqrt(vi) / k.bias2Sqrt + k.eps;
    param[i] = p - k.stepSize * (mi / denom);
    moments.set(i, mi, vi);
  }
}

#if defined(__x86_64__)
// One vector loop, instantiated for AVX-512 (16 lanes) and AVX2 (8): the
// scalar reference's operations in its order, `prefix` naming the
// intrinsics of vector type `V`. Returns how many elements it did.
#define MT_ADAMW_VECTOR_UPDATE(name, isa, V, prefix, lanes)                    \
  __attribute__((target(isa))) int64_t name(float *param, const float *grad,   \
                                            float *m, float *v, int64_t count, \
                                            const Coefs &k) {                  \
    const V scale = prefix##_set1_ps(k.gradScale),                             \
            decay = prefix##_set1_ps(k.decay), b1 = prefix##_set1_ps(k.beta1), \
            b2 = prefix##_set1_ps(k.beta2),                                    \
            omb1 = prefix##_set1_ps(k.oneMinusBeta1),                          \
            omb2 = prefix##_set1_ps(k.oneMinusBeta2),                          \
            step = prefix##_set1_ps(k.stepSize),                               \
            bias2 = prefix##_set1_ps(k.bias2Sqrt),                             \
            eps = prefix##_set1_ps(k.eps);                                     \
    int64_t i = 0;                                                             \
    for (; i + (lanes) <= count; i += (lanes)) {                               \
      V g = prefix##_mul_ps(prefix##_loadu_ps(grad + i), scale);               \
      V p = prefix##_mul_ps(prefix##_loadu_ps(param + i), decay);              \
      V mi = prefix##_add_ps(prefix##_mul_ps(prefix##_loadu_ps(m + i), b1),    \
                             prefix##_mul_ps(omb1, g));                        \
      V vi = prefix##_add_ps(prefix##_mul_ps(prefix##_loadu_ps(v + i), b2),    \
                             prefix##_mul_ps(prefix##_mul_ps(omb2, g), g));    \
      V denom =                                                                \
          prefix##_add_ps(prefix##_div_ps(prefix##_sqrt_ps(vi), bias2), eps);  \
      prefix##_storeu_ps(                                                      \
          param + i,                                                           \
          prefix##_sub_ps(p,                                                   \
                          prefix##_mul_ps(step, prefix##_div_ps(mi, denom)))); \
      prefix##_storeu_ps(m + i, mi);                                           \
      prefix##_storeu_ps(v + i, vi);                                           \
    }                                                                          \
    return i;                                                                  \
  }

MT_ADAMW_VECTOR_UPDATE(updateAvx512, "avx512f", __m512, _mm512, 16)
MT_ADAMW_VECTOR_UPDATE(updateAvx2, "avx2", __m256, _mm256, 8)
#undef MT_ADAMW_VECTOR_UPDATE
#endif

#if defined(__x86_64__)
__attribute__((target("avx512f"))) int64_t
accumulateAvx512(float *dst, const float *src, const uint16_t *src16,
                 int64_t count) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m512 x;
    if (src16) {
      // bf16 -> fp32: the 16 bits become the high half of each lane.
      __m512i wide = _mm512_cvtepu16_epi32(
          _mm256_loadu_si256(reinterpret_cast<const __m256i *>(src16 + i)));
      x = _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
    } else {
      x = _mm512_loadu_ps(src + i);
    }
    _mm512_storeu_ps(dst + i, _mm512_add_ps(_mm512_loadu_ps(dst + i), x));
  }
  return i;
}
#endif

/// The widest path this CPU has, unless MT_ADAMW_ISA says otherwise.
AdamWIsa detectIsa() {
  const char *forced = std::getenv("MT_ADAMW_ISA");
  std::string want = forced ? forced : "";
#if defined(__x86_64__)
  bool avx512 = __builtin_cpu_supports("avx512f"),
       avx2 = __builtin_cpu_supports("avx2");
#else
  bool avx512 = false, avx2 = false;
#endif
  if (want == "scalar")
    return AdamWIsa::Scalar;
  if (want == "avx2")
    return avx2 ? AdamWIsa::Avx2 : AdamWIsa::Scalar;
  return avx512 ? AdamWIsa::Avx512 : avx2 ? AdamWIsa::Avx2 : AdamWIsa::Scalar;
}

template <typename Moments>
void update(float *param, const float *grad, Moments moments, int64_t count,
            int64_t step, const AdamWConfig &c, float gradScale) {
  updateScalar(param, grad, moments, count, coefsOf(step, c, gradScale));
}

/// The scales of a block of moments: the largest |m| and the largest v.
void blockScales(const float *m, const float *v, int64_t n, float &sm,
                 float &sv) {
  sm = 0;
  sv = 0;
  for (int64_t i = 0; i < n; ++i) {
    sm = std::max(sm, std::fabs(m[i]));
    sv = std::max(sv, v[i]);
  }
}

/// Both blockwise formats code sqrt(|m| / sm) and (v / sv)^(1/4), in [0, 1].
float mCode(float m, float sm) {
  return sm > 0 ? std::sqrt(std::fabs(m) / sm) : 0.0f;
}
float vCode(float v, float sv) {
  return sv > 0 ? std::sqrt(std::sqrt(v / sv)) : 0.0f;
}
/// And decode a code a in [-1, 1] of m and b in [0, 1] of v.
float mOf(float a, float sm) { return sm * (a < 0 ? -a * a : a * a); }
float vOf(float b, float sv) { return sv * (b * b) * (b * b); }

/// 8 bits: m as int8 of 127 a, v as uint8 of 255 b.
struct Codec8 {
  int8_t *qm;
  uint8_t *qv;
  void decode(int64_t begin, float sm, float sv, int64_t n, float *m,
              float *v) const {
    for (int64_t i = 0; i < n; ++i) {
      m[i] = mOf(float(qm[begin + i]) / 127.0f, sm);
      v[i] = vOf(float(qv[begin + i]) / 255.0f, sv);
    }
  }
  void encode(int64_t begin, const float *m, const float *v, float sm, float sv,
              int64_t n) const {
    for (int64_t i = 0; i < n; ++i) {
      float q = std::nearbyint(127.0f * mCode(m[i], sm));
      qm[begin + i] = int8_t(m[i] < 0 ? -q : q);
      qv[begin + i] = uint8_t(std::nearbyint(255.0f * vCode(v[i], sv)));
    }
  }
};

/// 4 bits, two a byte (element 2i in the low nibble): m as sign (bit 3) and
/// magnitude round(7 a); v as round(16 b) - 1 in [0, 15], decoded as
/// (c + 1) / 16 so that it is never zero (adamw.h).
struct Codec4 {
  uint8_t *qm, *qv;
  static int nibble(const uint8_t *q, int64_t i) {
    return (q[i / 2] >> (4 * (i % 2))) & 15;
  }
  static void setNibble(uint8_t *q, int64_t i, int c) {
    int shift = 4 * int(i % 2);
    q[i / 2] = uint8_t((q[i / 2] & (0xF0 >> shift)) | (c << shift));
  }
  void decode(int64_t begin, float sm, float sv, int64_t n, float *m,
              float *v) const {
    for (int64_t i = 0; i < n; ++i) {
      int cm = nibble(qm, begin + i), cv = nibble(qv, begin + i);
      float a = float(cm & 7) / 7.0f;
      m[i] = mOf(cm & 8 ? -a : a, sm);
      v[i] = vOf(float(cv + 1) / 16.0f, sv);
    }
  }
  void encode(int64_t begin, const float *m, const float *v, float sm, float sv,
              int64_t n) const {
    for (int64_t i = 0; i < n; ++i) {
      int cm = int(std::nearbyint(7.0f * mCode(m[i], sm)));
      if (m[i] < 0 && cm > 0)
        cm |= 8;
      int cv =
          std::clamp(int(std::nearbyint(16.0f * vCode(v[i], sv))) - 1, 0, 15);
      setNibble(qm, begin + i, cm);
      setNibble(qv, begin + i, cv);
    }
  }
};

/// A blockwise step: each block of kMomentBlock decoded to fp32, updated,
/// its scales taken again and the block encoded.
template <typename Codec>
void blockwiseStep(float *param, const float *grad, const Codec &codec,
                   float *mScale, float *vScale, int64_t count, int64_t step,
                   const AdamWConfig &c, float gradScale) {
  float mb[kMomentBlock], vb[kMomentBlock];
  for (int64_t begin = 0, b = 0; begin < count; begin += kMomentBlock, ++b) {
    int64_t n = std::min(kMomentBlock, count - begin);
    codec.decode(begin, mScale[b], vScale[b], n, mb, vb);
    update(param + begin, grad + begin, F32Moments{mb, vb}, n, step, c,
           gradScale);
    blockScales(mb, vb, n, mScale[b], vScale[b]);
    codec.encode(begin, mb, vb, mScale[b], vScale[b], n);
  }
}

} // namespace

void adamwStep4bitMoments(float *param, const float *grad, uint8_t *m,
                          float *mScale, uint8_t *v, float *vScale,
                          int64_t count, int64_t step, const AdamWConfig &c,
                          float gradScale) {
  static_assert(kMomentBlock % 2 == 0, "a block starts on a byte");
  blockwiseStep(param, grad, Codec4{m, v}, mScale, vScale, count, step, c,
                gradScale);
}

void adamwStep8bitMoments(float *param, const float *grad, int8_t *m,
                          float *mScale, uint8_t *v, float *vScale,
                          int64_t count, int64_t step, const AdamWConfig &c,
                          float gradScale) {
  blockwiseStep(param, grad, Codec8{m, v}, mScale, vScale, count, step, c,
                gradScale);
}

namespace {
/// Calls fn(codec) with the blockwise codec of `s`; returns false when `s`
/// is not blockwise.
template <typename Fn> bool withCodec(const Moments &s, Fn fn) {
  if (s.m8)
    fn(Codec8{s.m8, s.v8});
  else if (s.m4)
    fn(Codec4{s.m4, s.v4});
  else
    return false;
  return true;
}
} // namespace

void decodeMoments(const Moments &from, int64_t count, float *m, float *v) {
  if (from.m) {
    std::copy(from.m, from.m + count, m);
    std::copy(from.v, from.v + count, v);
    return;
  }
  if (from.m16) {
    for (int64_t i = 0; i < count; ++i) {
      m[i] = kernels::cpu::fromBf16(from.m16[i]);
      v[i] = kernels::cpu::fromBf16(from.v16[i]);
    }
    return;
  }
  withCodec(from, [&](const auto &codec) {
    for (int64_t begin = 0, b = 0; begin < count; begin += kMomentBlock, ++b)
      codec.decode(begin, from.mScale[b], from.vScale[b],
                   std::min(kMomentBlock, count - begin), m + begin, v + begin);
  });
}

void encodeMoments(const float *m, const float *v, int64_t count,
                   const Moments &to) {
  if (to.m) {
    std::copy(m, m + count, to.m);
    std::copy(v, v + count, to.v);
    return;
  }
  if (to.m16) {
    for (int64_t i = 0; i < count; ++i) {
      to.m16[i] = kernels::cpu::toBf16(m[i]);
      to.v16[i] = kernels::cpu::toBf16(v[i]);
    }
    return;
  }
  withCodec(to, [&](const auto &codec) {
    for (int64_t begin = 0, b = 0; begin < count; begin += kMomentBlock, ++b) {
      int64_t n = std::min(kMomentBlock, count - begin);
      blockScales(m + begin, v + begin, n, to.mScale[b], to.vScale[b]);
      codec.encode(begin, m + begin, v + begin, to.mScale[b], to.vScale[b], n);
    }
  });
}

AdamWIsa adamwIsa() {
  static const AdamWIsa isa = detectIsa();
  return isa;
}

const char *adamwIsaName(AdamWIsa isa) {
  switch (isa) {
  case AdamWIsa::Avx512:
    return "avx512";
  case AdamWIsa::Avx2:
    return "avx2";
  default:
    return "scalar";
  }
}

void adamwStep(float *param, const float *grad, float *m, float *v,
               int64_t count, int64_t step, const AdamWConfig &c,
               float gradScale, AdamWIsa isa) {
  Coefs k = coefsOf(step, c, gradScale);
  int64_t done = 0;
#if defined(__x86_64__)
  if (isa == AdamWIsa::Avx512)
    done = updateAvx512(param, grad, m, v, count, k);
  else if (isa == AdamWIsa::Avx2)
    done = updateAvx2(param, grad, m, v, count, k);
#endif
  updateScalar(param + done, grad + done, F32Moments{m + done, v + done},
               count - done, k);
}

void adamwStepBf16Moments(float *param, const float *grad, uint16_t *m,
                          uint16_t *v, int64_t count, int64_t step,
                          const AdamWConfig &c, float gradScale) {
  update(param, grad, Bf16Moments{m, v}, count, step, c, gradScale);
}

namespace {
/// A thread count that splits evenly over the NUMA nodes (a multiple of
/// them), so that thread t's part of every array is on the node it runs on
/// (see numa.h); unchanged on one node.
int64_t threadsOnNodes(int64_t threads, int nodes) {
  if (nodes < 2 || threads < nodes)
    return threads;
  return threads / nodes * nodes;
}
} // namespace

void adamwStepParallel(float *param, const float *grad, const Moments &s,
                       int64_t count, int64_t step, const AdamWConfig &config,
                       float gradScale, int threads) {
  auto run = [&](int64_t begin, int64_t len) {
    if (s.m4)
      adamwStep4bitMoments(param + begin, grad + begin, s.m4 + begin / 2,
                           s.mScale + begin / kMomentBlock, s.v4 + begin / 2,
                           s.vScale + begin / kMomentBlock, len, step, config,
                           gradScale);
    else if (s.m8)
      adamwStep8bitMoments(param + begin, grad + begin, s.m8 + begin,
                           s.mScale + begin / kMomentBlock, s.v8 + begin,
                           s.vScale + begin / kMomentBlock, len, step, config,
                           gradScale);
    else if (s.m16)
      adamwStepBf16Moments(param + begin, grad + begin, s.m16 + begin,
                           s.v16 + begin, len, step, config, gradScale);
    else
      adamwStep(param + begin, grad + begin, s.m + begin, s.v + begin, len,
                step, config, gradScale, adamwIsa());
  };
  // Below this many elements per thread (about 64 KiB of state), starting a
  // thread costs more than it saves.
  constexpr int64_t kMinChunk = 1 << 14;
  int64_t n = std::max<int64_t>(
      1, std::min<int64_t>(threads, (count + kMinChunk - 1) / kMinChunk));
  if (n == 1)
    return run(0, count);
  // Chunks start on a block of 8-bit or 4-bit moments.
  int nodes = int(numaNodes().size());
  n = threadsOnNodes(n, nodes);
  int64_t chunk =
      (count + n * kMomentBlock - 1) / (n * kMomentBlock) * kMomentBlock;
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < n; ++t) {
    int64_t begin = t * chunk, len = std::min(chunk, count - begin);
    if (len <= 0)
      break;
    pool.emplace_back([=, &run] {
      bindThreadToNode(nodeOfPart(t, n, nodes));
      run(begin, len);
    });
  }
  for (std::thread &t : pool)
    t.join();
}

void accumulateParallel(float *dst, const float *src, const uint16_t *src16,
                        int64_t count, int threads) {
  auto run = [&](int64_t begin, int64_t len) {
    int64_t done = 0;
#if defined(__x86_64__)
    if (adamwIsa() == AdamWIsa::Avx512)
      done = accumulateAvx512(dst + begin, src ? src + begin : nullptr,
                              src16 ? src16 + begin : nullptr, len);
#endif
    for (int64_t i = begin + done; i < begin + len; ++i)
      dst[i] += src16 ? kernels::cpu::fromBf16(src16[i]) : src[i];
  };
  // Below about 256 KiB per thread, starting threads costs more.
  constexpr int64_t kMinChunk = 1 << 16;
  int64_t n = std::max<int64_t>(
      1, std::min<int64_t>(threads, (count + kMinChunk - 1) / kMinChunk));
  int nodes = int(numaNodes().size());
  if (n > 1)
    n = threadsOnNodes(n, nodes);
  int64_t chunk = (count + n - 1) / n;
  std::vector<std::thread> pool;
  // With several nodes every part runs on a thread bound to its node; with
  // one, the caller takes the first.
  for (int64_t t = nodes > 1 ? 0 : 1; t < n; ++t) {
    int64_t begin = t * chunk, len = std::min(chunk, count - begin);
    if (len > 0)
      pool.emplace_back([=, &run] {
        bindThreadToNode(nodeOfPart(t, n, nodes));
        run(begin, len);
      });
  }
  if (nodes < 2)
    run(0, std::min(chunk, count));
  for (std::thread &t : pool)
    t.join();
}

} // namespace mt::runtime
