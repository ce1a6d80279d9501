// AdamW on the host (see adamw.h). The loop is written so that the compiler
// vectorises it; each element's arithmetic is the same whatever the chunk.
#include "runtime/adamw.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

namespace mt::runtime {

void adamwStep(float *param, const float *grad, float *m, float *v,
               int64_t count, int64_t step, const AdamWConfig &c,
               float gradScale) {
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
    float mi = m[i] * beta1 + oneMinusBeta1 * g;
    float vi = v[i] * beta2 + oneMinusBeta2 * g * g;
    float denom = std::sqrt(vi) / bias2Sqrt + eps;
    param[i] = p - stepSize * (mi / denom);
    m[i] = mi;
    v[i] = vi;
  }
}

void adamwStepParallel(float *param, const float *grad, float *m, float *v,
                       int64_t count, int64_t step, const AdamWConfig &config,
                       float gradScale, int threads) {
  // Below this many elements per thread (about 64 KiB of state), starting a
  // thread costs more than it saves.
  constexpr int64_t kMinChunk = 1 << 14;
  int64_t n = std::max<int64_t>(
      1, std::min<int64_t>(threads, (count + kMinChunk - 1) / kMinChunk));
  if (n == 1)
    return adamwStep(param, grad, m, v, count, step, config, gradScale);
  int64_t chunk = (count + n - 1) / n;
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < n; ++t) {
    int64_t begin = t * chunk, len = std::min(chunk, count - begin);
    if (len <= 0)
      break;
    pool.emplace_back([=, &config] {
      adamwStep(param + begin, grad + begin, m + begin, v + begin, len, step,
                config, gradScale);
    });
  }
  for (std::thread &t : pool)
    t.join();
}

} // namespace mt::runtime
