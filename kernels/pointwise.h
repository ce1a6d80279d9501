// The pointwise functions of the UNARY kernel and their derivatives
// (UNARY_GRAD): one definition each, which the CPU kernels, the CUDA
// kernels (on the device) and the compiler's constant folder all run, so
// that a folded table is what a kernel would compute. Header-only, fp32.
#ifndef MT_KERNELS_POINTWISE_H
#define MT_KERNELS_POINTWISE_H

#include "kernels/shapes.h"

#include <cmath>
#include <cstdint>
#include <cstring>

// The CUDA kernels call the same functions on the device.
#ifdef __CUDACC__
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif

namespace mt::kernels {

/// log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|).
MT_HOST_DEVICE inline float softplus(float x) {
  return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
}
MT_HOST_DEVICE inline float sigmoidOf(float x) {
  return 1.0f / (1.0f + expf(-x));
}

/// x rounded to bfloat16 (the upper half of its fp32 bits, to nearest,
/// halves to even), kept in fp32; a NaN stays a NaN.
MT_HOST_DEVICE inline float roundToBf16(float x) {
  if (x != x)
    return x;
  uint32_t bits;
  memcpy(&bits, &x, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  bits &= 0xffff0000u;
  memcpy(&x, &bits, 4);
  return x;
}

/// x rounded to IEEE half (10 fraction bits, exponents -14 to 15, to
/// nearest, halves to even; 65520 and above are infinite), kept in fp32.
MT_HOST_DEVICE inline float roundToF16(float x) {
  float a = fabsf(x);
  if (!(a < INFINITY)) // an infinity or a NaN
    return x;
  if (a >= 65520.0f)
    return copysignf(INFINITY, x);
  int e;
  frexpf(a, &e); // a = m 2^e, m in [0.5, 1)
  // The spacing of halves near a: 2^(e - 11) for a normal half, 2^-24 below
  // the smallest normal (2^-14).
  int quantum = e - 1 < -14 ? -24 : e - 11;
  return copysignf(ldexpf(rintf(ldexpf(a, -quantum)), quantum), x);
}

/// The function p.fn of x (plan.proto's UnaryFn says what each is, and
/// which ONNX attribute alpha and beta are): the C library's functions, on
/// the device CUDA's IEEE forms (expf, logf and tanhf within 2 ulp; no fast
/// math). A NaN stays NaN. The switch has no default: a function added to
/// the schema without its case here is a warning, which -Werror=switch
/// makes an error.
MT_HOST_DEVICE inline float applyUnary(const UnaryParams &p, float x) {
  const float a = p.alpha, b = p.beta;
  switch (p.fn) {
  case Unary::Exp:
    return expf(x);
  case Unary::Log:
    return logf(x);
  case Unary::Tanh:
    return tanhf(x);
  case Unary::Sqrt:
    return sqrtf(x);
  case Unary::Reciprocal:
    return 1.0f / x;
  case Unary::Sigmoid:
    return sigmoidOf(x);
  case Unary::Erf:
    return erff(x);
  case Unary::Cos:
    return cosf(x);
  case Unary::Sin:
    return sinf(x);
  case Unary::Abs:
    return fabsf(x);
  case Unary::Relu:
    return x < 0.0f ? 0.0f : x;
  case Unary::LeakyRelu:
    return x < 0.0f ? a * x : x;
  case Unary::Elu:
    return x < 0.0f ? a * expm1f(x) : x;
  case Unary::Selu:
    return x <= 0.0f ? b * a * expm1f(x) : b * x;
  case Unary::Celu: // max(0, x) + min(0, a (e^(x / a) - 1)), NaN kept
    return x > 0.0f ? x : a * expm1f(x / a);
  case Unary::Softplus:
    return softplus(x);
  case Unary::Softsign:
    return x / (1.0f + fabsf(x));
  case Unary::HardSigmoid:
    return x != x ? x : fmaxf(0.0f, fminf(1.0f, a * x + b));
  case Unary::HardSwish:
    return x * fmaxf(0.0f, fminf(1.0f, x / 6.0f + 0.5f));
  case Unary::Mish:
    return x * tanhf(softplus(x));
  case Unary::ThresholdedRelu:
    return x > a ? x : (x != x ? x : 0.0f);
  case Unary::Shrink:
    return x < -a ? x + b : x > a ? x - b : (x != x ? x : 0.0f);
  case Unary::Tan:
    return tanf(x);
  case Unary::Asin:
    return asinf(x);
  case Unary::Acos:
    return acosf(x);
  case Unary::Atan:
    return atanf(x);
  case Unary::Sinh:
    return sinhf(x);
  case Unary::Cosh:
    return coshf(x);
  case Unary::Asinh:
    return asinhf(x);
  case Unary::Acosh:
    return acoshf(x);
  case Unary::Atanh:
    return atanhf(x);
  case Unary::Floor:
    return floorf(x);
  case Unary::Ceil:
    return ceilf(x);
  case Unary::Round:
    return rintf(x); // the default rounding: halves to even, as ONNX's
  case Unary::Sign:
    return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x;
  case Unary::RoundBf16:
    return roundToBf16(x);
  case Unary::RoundF16:
    return roundToF16(x);
  }
  return x;
}

/// dx = dy f'(x) for the function p.fn, as PyTorch's backward has it: 0
/// where the function is flat or steps (Floor, Sign, Relu below 0), the
/// right-hand slope at a kink's point (Relu and ThresholdedRelu take 0
/// there, the slope below, as PyTorch's threshold_backward does).
MT_HOST_DEVICE inline float applyUnaryGrad(const UnaryParams &p, float x,
                                           float dy) {
  const float a = p.alpha, b = p.beta;
  switch (p.fn) {
  case Unary::Exp:
    return dy * expf(x);
  case Unary::Log:
    return dy / x;
  case Unary::Tanh: {
    float t = tanhf(x);
    return dy * (1.0f - t * t);
  }
  case Unary::Sqrt:
    return dy * 0.5f / sqrtf(x);
  case Unary::Reciprocal:
    return -dy / (x * x);
  case Unary::Sigmoid: {
    float s = sigmoidOf(x);
    return dy * s * (1.0f - s);
  }
  case Unary::Erf:
    return dy * 1.1283791670955126f * expf(-x * x); // 2 / sqrt(pi)
  case Unary::Cos:
    return -dy * sinf(x);
  case Unary::Sin:
    return dy * cosf(x);
  case Unary::Abs:
    return x > 0.0f ? dy : x < 0.0f ? -dy : 0.0f;
  case Unary::Relu:
    return x > 0.0f ? dy : 0.0f;
  case Unary::LeakyRelu:
    return x > 0.0f ? dy : a * dy;
  case Unary::Elu:
    return x > 0.0f ? dy : dy * a * expf(x);
  case Unary::Selu:
    return x > 0.0f ? dy * b : dy * b * a * expf(x);
  case Unary::Celu:
    return x > 0.0f ? dy : dy * expf(x / a);
  case Unary::Softplus:
    return dy * sigmoidOf(x);
  case Unary::Softsign: {
    float d = 1.0f + fabsf(x);
    return dy / (d * d);
  }
  case Unary::HardSigmoid: {
    float v = a * x + b;
    return v > 0.0f && v < 1.0f ? dy * a : 0.0f;
  }
  case Unary::HardSwish:
    return x < -3.0f ? 0.0f : x <= 3.0f ? dy * (x / 3.0f + 0.5f) : dy;
  case Unary::Mish: {
    float t = tanhf(softplus(x));
    return dy * (t + x * sigmoidOf(x) * (1.0f - t * t));
  }
  case Unary::ThresholdedRelu:
    return x > a ? dy : 0.0f;
  case Unary::Shrink:
    return x < -a || x > a ? dy : 0.0f;
  case Unary::Tan: {
    float c = cosf(x);
    return dy / (c * c);
  }
  case Unary::Asin:
    return dy / sqrtf(1.0f - x * x);
  case Unary::Acos:
    return -dy / sqrtf(1.0f - x * x);
  case Unary::Atan:
    return dy / (1.0f + x * x);
  case Unary::Sinh:
    return dy * coshf(x);
  case Unary::Cosh:
    return dy * sinhf(x);
  case Unary::Asinh:
    return dy / sqrtf(x * x + 1.0f);
  case Unary::Acosh:
    return dy / sqrtf(x * x - 1.0f);
  case Unary::Atanh:
    return dy / (1.0f - x * x);
  case Unary::Floor:
  case Unary::Ceil:
  case Unary::Round:
  case Unary::Sign:
    return 0.0f;
  case Unary::RoundBf16: // a cast's: the gradient goes back as it came
  case Unary::RoundF16:
    return dy;
  }
  return 0.0f;
}

/// What a function's derivative is, for the tests that check it: its slope
/// (finite differences tell it), zero wherever it is defined (steps: Floor,
/// Sign, ...; nothing to tell), or the gradient passed as it came (a cast's
/// rounding, which steps too finely for differences).
enum class Slope { Smooth, Flat, Passed };
inline Slope unarySlope(Unary f) {
  switch (f) {
  case Unary::Floor:
  case Unary::Ceil:
  case Unary::Round:
  case Unary::Sign:
    return Slope::Flat;
  case Unary::RoundBf16:
  case Unary::RoundF16:
    return Slope::Passed;
  default:
    return Slope::Smooth;
  }
}

/// Where the function is defined and smooth enough for a finite-difference
/// check of its derivative (the tests sample inside [lo, hi]; steps and
/// kinks inside are theirs to avoid).
struct UnaryDomain {
  float lo, hi;
};
inline UnaryDomain unaryDomain(Unary f) {
  switch (f) {
  case Unary::Log:
  case Unary::Sqrt:
  case Unary::Reciprocal:
    return {0.2f, 4.0f};
  case Unary::Asin:
  case Unary::Acos:
  case Unary::Atanh:
    return {-0.9f, 0.9f};
  case Unary::Acosh:
    return {1.2f, 4.0f};
  case Unary::Tan:
    return {-1.2f, 1.2f};
  default:
    return {-4.0f, 4.0f};
  }
}

} // namespace mt::kernels

#endif // MT_KERNELS_POINTWISE_H
