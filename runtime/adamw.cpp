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

} // namespace

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

void adamwStepParallel(float *param, const float *grad, float *m, float *v,
                       int64_t count, int64_t step, const AdamWConfig &config,
                       float gradScale, int threads, uint16_t *m16,
                       uint16_t *v16) {
  auto run = [&](int64_t begin, int64_t len) {
    if (m16)
      adamwStepBf16Moments(param + begin, grad + begin, m16 + begin,
                           v16 + begin, len, step, config, gradScale);
    else
      adamwStep(param + begin, grad + begin, m + begin, v + begin, len, step,
                config, gradScale);
  };
  // Below this many elements per thread (about 64 KiB of state), starting a
  // thread costs more than it saves.
  constexpr int64_t kMinChunk = 1 << 14;
  int64_t n = std::max<int64_t>(
      1, std::min<int64_t>(threads, (count + kMinChunk - 1) / kMinChunk));
  if (n == 1)
    return run(0, count);
  int64_t chunk = (count + n - 1) / n;
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
