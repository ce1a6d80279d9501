// AdamW on the host (see adamw.h). The loop is written so that the compiler
// vectorises it; each element's arithmetic is the same whatever the chunk.
#include "runtime/adamw.h"

#include "kernels/cpu/primitive_ops.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

namespace mt::runtime {

namespace {

/// fp32 moments as they are; bf16 moments widened and rounded.
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

template <typename Moments>
void update(float *param, const float *grad, Moments moments, int64_t count,
            int64_t step, const AdamWConfig &c, float gradScale) {
  const float decay = float(1.0 - c.lr * c.weightDecay);
  const float beta1 = float(c.beta1), beta2 = float(c.beta2);
  const float oneMinusBeta1 = float(1.0 - c.beta1);
  const float oneMinusBeta2 = float(1.0 - c.beta2);
  const float stepSize = float(c.lr / (1.0 - std::pow(c.beta1, double(step))));
  const float bias2Sqrt =
      float(std::sqrt(1.0 - std::pow(c.beta2, double(step))));
  const float eps = float(c.eps);
  for (int64_t i = 0; i < count; ++i) {
    float g = grad[i] * gradScale;
    float p = param[i] * decay;
    float mi = moments.getM(i) * beta1 + oneMinusBeta1 * g;
    float vi = moments.getV(i) * beta2 + oneMinusBeta2 * g * g;
    float denom = std::sqrt(vi) / bias2Sqrt + eps;
    param[i] = p - stepSize * (mi / denom);
    moments.set(i, mi, vi);
  }
}

/// Decoded 8-bit moments of one block, updated in fp32, encoded back.
struct BlockMoments {
  float *m, *v;
  float getM(int64_t i) const { return m[i]; }
  float getV(int64_t i) const { return v[i]; }
  void set(int64_t i, float mi, float vi) {
    m[i] = mi;
    v[i] = vi;
  }
};

void decodeBlock(const int8_t *qm, float sm, const uint8_t *qv, float sv,
                 int64_t n, float *m, float *v) {
  for (int64_t i = 0; i < n; ++i) {
    float a = float(qm[i]) / 127.0f, b = float(qv[i]) / 255.0f;
    m[i] = sm * (a < 0 ? -a * a : a * a);
    b *= b;
    v[i] = sv * b * b;
  }
}

void encodeBlock(const float *m, const float *v, int64_t n, int8_t *qm,
                 float &sm, uint8_t *qv, float &sv) {
  sm = 0;
  sv = 0;
  for (int64_t i = 0; i < n; ++i) {
    sm = std::max(sm, std::fabs(m[i]));
    sv = std::max(sv, v[i]);
  }
  for (int64_t i = 0; i < n; ++i) {
    float a = sm > 0 ? std::sqrt(std::fabs(m[i]) / sm) : 0.0f;
    float q = std::nearbyint(127.0f * a);
    qm[i] = int8_t(m[i] < 0 ? -q : q);
    float b = sv > 0 ? std::sqrt(std::sqrt(v[i] / sv)) : 0.0f;
    qv[i] = uint8_t(std::nearbyint(255.0f * b));
  }
}

} // namespace

void adamwStep8bitMoments(float *param, const float *grad, int8_t *m,
                          float *mScale, uint8_t *v, float *vScale,
                          int64_t count, int64_t step, const AdamWConfig &c,
                          float gradScale) {
  float mb[kMomentBlock], vb[kMomentBlock];
  for (int64_t begin = 0, b = 0; begin < count; begin += kMomentBlock, ++b) {
    int64_t n = std::min(kMomentBlock, count - begin);
    decodeBlock(m + begin, mScale[b], v + begin, vScale[b], n, mb, vb);
    update(param + begin, grad + begin, BlockMoments{mb, vb}, n, step, c,
           gradScale);
    encodeBlock(mb, vb, n, m + begin, mScale[b], v + begin, vScale[b]);
  }
}

void adamwStep(float *param, const float *grad, float *m, float *v,
               int64_t count, int64_t step, const AdamWConfig &c,
               float gradScale) {
  update(param, grad, F32Moments{m, v}, count, step, c, gradScale);
}

void adamwStepBf16Moments(float *param, const float *grad, uint16_t *m,
                          uint16_t *v, int64_t count, int64_t step,
                          const AdamWConfig &c, float gradScale) {
  update(param, grad, Bf16Moments{m, v}, count, step, c, gradScale);
}

void adamwStepParallel(float *param, const float *grad, const Moments &s,
                       int64_t count, int64_t step, const AdamWConfig &config,
                       float gradScale, int threads) {
  auto run = [&](int64_t begin, int64_t len) {
    if (s.m8)
      adamwStep8bitMoments(param + begin, grad + begin, s.m8 + begin,
                           s.mScale + begin / kMomentBlock, s.v8 + begin,
                           s.vScale + begin / kMomentBlock, len, step, config,
                           gradScale);
    else if (s.m16)
      adamwStepBf16Moments(param + begin, grad + begin, s.m16 + begin,
                           s.v16 + begin, len, step, config, gradScale);
    else
      adamwStep(param + begin, grad + begin, s.m + begin, s.v + begin, len,
                step, config, gradScale);
  };
  // Below this many elements per thread (about 64 KiB of state), starting a
  // thread costs more than it saves.
  constexpr int64_t kMinChunk = 1 << 14;
  int64_t n = std::max<int64_t>(
      1, std::min<int64_t>(threads, (count + kMinChunk - 1) / kMinChunk));
  if (n == 1)
    return run(0, count);
  // Chunks start on a block of 8-bit moments.
  int64_t chunk =
      (count + n * kMomentBlock - 1) / (n * kMomentBlock) * kMomentBlock;
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < n; ++t) {
    int64_t begin = t * chunk, len = std::min(chunk, count - begin);
    if (len <= 0)
      break;
    pool.emplace_back([=, &run] { run(begin, len); });
  }
  for (std::thread &t : pool)
    t.join();
}

} // namespace mt::runtime
