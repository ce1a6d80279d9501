// The host optimizer: AdamW over fp32 master weights and fp32 moments.
#ifndef MT_RUNTIME_OPTIM_ADAMW_H
#define MT_RUNTIME_OPTIM_ADAMW_H

#include "runtime/schema/moments.h"

#include <cstdint>

namespace mt::runtime {

/// Hyperparameters of one update; lr is the scheduled rate of this step.
/// Doubles, as PyTorch keeps them: each coefficient is computed in double
/// and rounded to fp32 once, as torch does when it applies a Python scalar.
struct AdamWConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0.01;
};

/// The instructions the fp32 update uses; every path gives the same bits.
enum class AdamWIsa { Scalar, Avx2, Avx512 };

/// The widest path this CPU has (MT_ADAMW_ISA=scalar|avx2 narrows it).
AdamWIsa adamwIsa();
const char *adamwIsaName(AdamWIsa isa);

/// One AdamW step (decoupled weight decay, bias correction) over `count`
/// parameters, in the order of operations of torch.optim.AdamW so that fp32
/// results agree with it: p *= 1 - lr * wd; m = b1 m + (1 - b1) g;
/// v = b2 v + (1 - b2) g^2; p -= lr / (1 - b1^t) * m / (sqrt(v) /
/// sqrt(1 - b2^t) + eps). `step` counts from 1; the gradient is multiplied
/// by `gradScale` first (averaging over micro-batches, clipping).
void adamwStep(float *param, const float *grad, float *m, float *v,
               int64_t count, int64_t step, const AdamWConfig &config,
               float gradScale = 1.0f, AdamWIsa isa = AdamWIsa::Scalar);

/// The same update with the moments stored as bf16 (lossy, opt-in): they
/// are widened to fp32, updated in fp32 and rounded back to nearest even.
void adamwStepBf16Moments(float *param, const float *grad, uint16_t *m,
                          uint16_t *v, int64_t count, int64_t step,
                          const AdamWConfig &config, float gradScale = 1.0f);

/// Elements per scale of 8-bit and 4-bit moments (the plan's contract).
using plan::kMomentBlock;

/// The same update with 8-bit blockwise moments (lossy, opt-in). Each block
/// of kMomentBlock elements has an fp32 scale per moment (its largest
/// magnitude); m is stored as int8 q = round(127 sign(m) sqrt(|m| / scale))
/// and v as uint8 q = round(255 (v / scale)^(1/4)), so that small values
/// keep relative precision (v spans many orders of magnitude in a block).
/// Each block is decoded to fp32, updated, and encoded again; the parameter
/// is updated with the fp32 values. `count` elements, `(count + kMomentBlock
/// - 1) / kMomentBlock` scales; chunks must start on a block.
void adamwStep8bitMoments(float *param, const float *grad, int8_t *m,
                          float *mScale, uint8_t *v, float *vScale,
                          int64_t count, int64_t step,
                          const AdamWConfig &config, float gradScale = 1.0f);

/// The same update with 4-bit blockwise moments (lossy, opt-in), two
/// elements per byte (element 2i in the low nibble of byte i), with the
/// 8-bit format's fp32 scale per block of kMomentBlock elements. m is stored
/// as sign and magnitude: bit 3 the sign, bits 0-2 round(7 sqrt(|m| /
/// scale)); v as c = round(16 (v / scale)^(1/4)) - 1 clamped to [0, 15] and
/// decoded as scale ((c + 1) / 16)^4, which is never zero in a block whose
/// scale is not: a v rounded up only shortens that element's step, while a
/// zero would divide m by eps alone. Each block is decoded to fp32,
/// updated, and encoded again. `count` elements, `(count + 1) / 2` bytes per
/// moment, `(count + kMomentBlock - 1) / kMomentBlock` scales; chunks must
/// start on a block.
void adamwStep4bitMoments(float *param, const float *grad, uint8_t *m,
                          float *mScale, uint8_t *v, float *vScale,
                          int64_t count, int64_t step,
                          const AdamWConfig &config, float gradScale = 1.0f);

/// Where the moments of a tensor are: fp32 (m, v), bf16 (m16, v16), 8-bit
/// blockwise (m8, v8 and their scales) or 4-bit blockwise (m4, v4 and their
/// scales).
struct Moments {
  float *m = nullptr, *v = nullptr;
  uint16_t *m16 = nullptr, *v16 = nullptr;
  int8_t *m8 = nullptr;
  uint8_t *v8 = nullptr;
  uint8_t *m4 = nullptr, *v4 = nullptr;
  float *mScale = nullptr, *vScale = nullptr;
};

/// The moments of `count` elements as fp32: exact from fp32 and bf16, and
/// from the blockwise formats the values their codes stand for (as an
/// update decodes them). m and v hold `count` floats each.
void decodeMoments(const Moments &from, int64_t count, float *m, float *v);

/// fp32 moments stored in `to`'s format, as an update stores them: bf16
/// rounded to nearest even, the blockwise formats with each block's scales
/// taken from its values (lossy unless `to` is fp32).
void encodeMoments(const float *m, const float *v, int64_t count,
                   const Moments &to);

/// Any of the updates split over `threads` host threads (contiguous chunks
/// that start on a block; the result does not depend on the thread count).
void adamwStepParallel(float *param, const float *grad, const Moments &moments,
                       int64_t count, int64_t step, const AdamWConfig &config,
                       float gradScale, int threads);

/// The host side of gradient accumulation: dst[i] += src[i], src fp32 or
/// (with src16) bf16 widened exactly, over `threads` host threads with the
/// widest vectors this CPU has. One add per element: any split, any path,
/// the same bits.
void accumulateParallel(float *dst, const float *src, const uint16_t *src16,
                        int64_t count, int threads);

} // namespace mt::runtime

#endif // MT_RUNTIME_OPTIM_ADAMW_H
