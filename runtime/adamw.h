// The host optimizer: AdamW over fp32 master weights and fp32 moments.
#ifndef MT_RUNTIME_ADAMW_H
#define MT_RUNTIME_ADAMW_H

#include <cstdint>

namespace mt::runtime {

/// Hyperparameters of one update; lr is the scheduled rate of this step.
/// Doubles, as PyTorch keeps them: each coefficient is computed in double
/// and rounded to fp32 once, as torch does when it applies a Python scalar.
struct AdamWConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0.01;
};

/// One AdamW step (decoupled weight decay, bias correction) over `count`
/// parameters, in the order of operations of torch.optim.AdamW so that fp32
/// results agree with it: p *= 1 - lr * wd; m = b1 m + (1 - b1) g;
/// v = b2 v + (1 - b2) g^2; p -= lr / (1 - b1^t) * m / (sqrt(v) /
/// sqrt(1 - b2^t) + eps). `step` counts from 1; the gradient is multiplied
/// by `gradScale` first (averaging over micro-batches, clipping).
void adamwStep(float *param, const float *grad, float *m, float *v,
               int64_t count, int64_t step, const AdamWConfig &config,
               float gradScale = 1.0f);

/// The same update with the moments stored as bf16 (lossy, opt-in): they
/// are widened to fp32, updated in fp32 and rounded back to nearest even.
void adamwStepBf16Moments(float *param, const float *grad, uint16_t *m,
                          uint16_t *v, int64_t count, int64_t step,
                          const AdamWConfig &config, float gradScale = 1.0f);

/// Either update split over `threads` host threads (contiguous chunks; the
/// result does not depend on the thread count). With m16/v16 set, the
/// moments are bf16 and m/v are ignored.
void adamwStepParallel(float *param, const float *grad, float *m, float *v,
                       int64_t count, int64_t step, const AdamWConfig &config,
                       float gradScale, int threads, uint16_t *m16 = nullptr,
                       uint16_t *v16 = nullptr);

} // namespace mt::runtime

#endif // MT_RUNTIME_ADAMW_H
