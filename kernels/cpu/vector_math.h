// Float math for the CPU kernels' elementwise loops, written without
// branches or library calls so that the compiler vectorizes the loops that
// use it.
#ifndef MT_KERNELS_CPU_VECTOR_MATH_H
#define MT_KERNELS_CPU_VECTOR_MATH_H

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace mt::kernels::cpu {

// With GCC on x86-64, a function marked MT_VECTOR_CLONES is compiled for
// AVX-512, AVX2 and the baseline (SSE2), and the loader picks the widest
// the machine has: the build stays portable and its loops run 4x wider
// where they can.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define MT_VECTOR_CLONES                                                       \
  __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MT_VECTOR_CLONES
#endif

/// fn(i) for i in [begin, end), in a loop compiled MT_VECTOR_CLONES (fn
/// inlined into each clone).
template <typename Fn>
MT_VECTOR_CLONES void forRange(int64_t begin, int64_t end, const Fn &fn) {
  for (int64_t i = begin; i < end; ++i)
    fn(i);
}

/// The largest of x[0, n) (-inf when n is 0), in 16 independent lanes so
/// that the loop vectorizes (a NaN among them may or may not win).
MT_VECTOR_CLONES inline float maxOf(const float *x, int64_t n) {
  constexpr int kLanes = 16;
  float lanes[kLanes];
  for (float &l : lanes)
    l = -__builtin_inff();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l)
      lanes[l] = lanes[l] < x[j + l] ? x[j + l] : lanes[l];
  float m = -__builtin_inff();
  for (; j < n; ++j)
    m = m < x[j] ? x[j] : m;
  for (float l : lanes)
    m = m < l ? l : m;
  return m;
}

/// The sum of x[0, n) in 16 float lanes, added up in double: for at most a
/// few thousand terms of one sign (softmax rows), within a few ulp of the
/// sum in double.
MT_VECTOR_CLONES inline double sumOf(const float *x, int64_t n) {
  constexpr int kLanes = 16;
  float lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l)
      lanes[l] += x[j + l];
  double sum = 0;
  for (; j < n; ++j)
    sum += x[j];
  for (float l : lanes)
    sum += l;
  return sum;
}

/// e^x within 2 ulp (Cody-Waite reduction and Cephes' degree-5
/// polynomial). Arguments are clamped to [-87.3, 88.7]: below, the result
/// is about 1.2e-38 instead of a denormal or 0; above, about 3.4e38 instead
/// of infinity. NaN stays NaN.
inline float expApprox(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  // ln 2 in two parts: the first exact in 9 bits, so n * kLn2Hi is exact.
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  // Adding 1.5 x 2^23 rounds to an integer, kept in the low bits.
  constexpr float kRound = 12582912.0f;
  constexpr int32_t kRoundBits = 0x4b400000;
  x = std::min(std::max(x, -87.3365f), 88.7228f); // NaN stays NaN
  float t = x * kLog2e + kRound;
  float n = t - kRound;
  int32_t ni;
  std::memcpy(&ni, &t, 4);
  ni -= kRoundBits;
  float r = x - n * kLn2Hi - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  // y * 2^n as two halves, so that n = 128 (from x near 88.7) stays finite.
  int32_t half = ni >> 1;
  uint32_t b1 = uint32_t(half + 127) << 23, b2 = uint32_t(ni - half + 127)
                                                 << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, 4);
  std::memcpy(&s2, &b2, 4);
  return y * s1 * s2;
}

/// tanh(x) = 1 - 2 / (e^2x + 1), within a few ulp away from 0 and 4e-8
/// absolute near it.
inline float tanhApprox(float x) {
  return 1.0f - 2.0f / (expApprox(2.0f * x) + 1.0f);
}

} // namespace mt::kernels::cpu

#endif // MT_KERNELS_CPU_VECTOR_MATH_H
