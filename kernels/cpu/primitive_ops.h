// CPU kernels of the primitive ops that remain in a training step, and the
// bf16 conversions of bf16 storage (fp32 math): fp32 buffers, explicit
// shapes (elements per dim), row-major.
#ifndef MT_KERNELS_CPU_PRIMITIVE_OPS_H
#define MT_KERNELS_CPU_PRIMITIVE_OPS_H

#include "kernels/pointwise.h"
#include "kernels/shapes.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace mt::kernels::cpu {

using Dims = std::vector<int64_t>;

/// bf16 is the upper half of an fp32; rounding to nearest even.
inline uint16_t toBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu))
    return uint16_t((bits >> 16) | 0x40); // keep NaNs NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}
inline float fromBf16(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// IEEE half, rounding to nearest even (overflow to infinity, NaNs stay
/// NaN): the dtype of F16 weights saved back as they came.
inline uint16_t toF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu,
           mant = x & 0x7fffffu;
  if (exp == 0xffu)
    return uint16_t(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
  int32_t e = int32_t(exp) - 127 + 15;
  if (e >= 0x1f)
    return uint16_t(sign | 0x7c00u);
  // Keep `shift` low bits off the significand, rounding to nearest even;
  // a carry out of the significand correctly bumps the exponent.
  auto round = [](uint32_t bits, uint32_t shift) {
    uint32_t kept = bits >> shift, rest = bits & ((1u << shift) - 1),
             half = 1u << (shift - 1);
    return kept + (rest > half || (rest == half && (kept & 1u)) ? 1u : 0u);
  };
  if (e <= 0) {
    // A subnormal half: the significand with its leading 1, in 2^-24 units.
    if (e < -10)
      return uint16_t(sign);
    return uint16_t(sign | round(mant | 0x800000u, uint32_t(14 - e)));
  }
  return uint16_t(sign | round((uint32_t(e) << 23) | mant, 13));
}

/// IEEE half to float, exactly (every half is a float): F16 weights read.
inline float fromF16(uint16_t h) {
  uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1fu,
           mant = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13); // inf, NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign; // zero
  } else {
    // Subnormal: normalise the significand.
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while (!(mant & 0x400u));
    bits = sign | (uint32_t(112 - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The function codes, from kernels/shapes.h.
using kernels::Binary;
using kernels::Compare;
using kernels::Logic;
using kernels::Unary;
using kernels::UnaryParams;

// The pointwise functions (kernels/pointwise.h), for the CPU kernels.
using kernels::applyUnary;
using kernels::applyUnaryGrad;
using kernels::UnaryDomain;
using kernels::unaryDomain;

MT_HOST_DEVICE inline float applyBinary(Binary op, float x, float y) {
  switch (op) {
  case Binary::Add:
    return x + y;
  case Binary::Sub:
    return x - y;
  case Binary::Mul:
    return x * y;
  case Binary::Div:
    return x / y;
  case Binary::Pow:
    return powf(x, y);
  case Binary::Max: // a NaN wins, as torch.maximum's
    return x != x || x > y ? x : y;
  case Binary::Min:
    return x != x || x < y ? x : y;
  }
  return 0.0f;
}

MT_HOST_DEVICE inline bool applyCompare(Compare op, float x, float y) {
  switch (op) {
  case Compare::Equal:
    return x == y;
  case Compare::Less:
    return x < y;
  case Compare::LessOrEqual:
    return x <= y;
  case Compare::Greater:
    return x > y;
  case Compare::GreaterOrEqual:
    return x >= y;
  }
  return false;
}

/// A value cast to an integer as ONNX Cast casts it (the copies that
/// convert, on both backends): toward zero, NaN to 0, saturating.
MT_HOST_DEVICE inline int64_t castToI64(double v) {
  constexpr double kLimit = 9.2233720368547758e18; // 2^63
  if (v != v)
    return 0;
  if (v >= kLimit)
    return INT64_MAX;
  return v <= -kLimit ? INT64_MIN : int64_t(v);
}

MT_HOST_DEVICE inline bool applyLogic(Logic op, bool x, bool y) {
  switch (op) {
  case Logic::Not:
    return !x;
  case Logic::And:
    return x && y;
  case Logic::Or:
    return x || y;
  case Logic::Xor:
    return x != y;
  }
  return false;
}

/// Whether element a (value va) of a line orders before element b in a
/// TopK: the larger (smallest: the smaller) value, a NaN above every number,
/// then the lower index. A strict weak order, so both backends choose the
/// same elements in the same order every run.
MT_HOST_DEVICE inline bool topKBefore(float va, int64_t a, float vb, int64_t b,
                                      bool smallest) {
  bool na = va != va, nb = vb != vb;
  if (na != nb)
    return smallest ? nb : na;
  if (!na && va != vb)
    return smallest ? va < vb : va > vb;
  return a < b;
}

/// y[i] = f(x[i]) for n elements (x and y may be the same buffer).
void unaryForward(const UnaryParams &f, const float *x, float *y, int64_t n);
/// dx[i] = dy[i] f'(x[i]) for n elements (dx may be dy).
void unaryBackward(const UnaryParams &f, const float *x, const float *dy,
                   float *dx, int64_t n);

/// out[..., M, N] = a[..., M, K] b[..., K, N] for every index of the batch
/// dims, a's and b's (right-aligned, size 1 repeated) broadcast to out's;
/// all of rank >= 2.
void batchMatmul(const float *a, const Dims &aDims, const float *b,
                 const Dims &bDims, float *out, const Dims &outDims);

/// out[outDims] = x broadcast (numpy rules) to outDims.
void expand(const float *x, const Dims &dims, float *out, const Dims &outDims);

/// y = softmax(x) along `axis` (0 <= axis < rank): exp(x - max) / sum, the
/// sum in double; with `log`, its log, x - max - log(sum). A line whose
/// every element is -inf is NaN, as PyTorch's.
void softmax(const float *x, const Dims &dims, int64_t axis, float *y,
             bool log = false);

/// out[outDims] = a op b, both broadcast (numpy rules) to outDims.
void binaryForward(Binary op, const float *a, const Dims &aDims, const float *b,
                   const Dims &bDims, float *out, const Dims &outDims);

/// Sums x over `axes` (all when empty); out has x's rank when keepdims.
void reduceSum(const float *x, const Dims &dims,
               const std::vector<int64_t> &axes, float *out);

/// out[outDims] = a op b (1 or 0), both broadcast (numpy rules) to outDims.
void compareForward(Compare op, const float *a, const Dims &aDims,
                    const float *b, const Dims &bDims, uint8_t *out,
                    const Dims &outDims);

/// out[outDims] = a op b (1 or 0) of bytes, both broadcast to outDims (Not:
/// of a alone; b is not read).
void logicForward(Logic op, const uint8_t *a, const Dims &aDims,
                  const uint8_t *b, const Dims &bDims, uint8_t *out,
                  const Dims &outDims);

/// The maximum of x over `axes` (all when empty; -inf over nothing, a NaN
/// wins).
void reduceMax(const float *x, const Dims &dims,
               const std::vector<int64_t> &axes, float *out);

/// The mean of x over `axes` (all when empty).
void reduceMean(const float *x, const Dims &dims,
                const std::vector<int64_t> &axes, float *out);

/// y[i] = 1 where x[i] is NaN, else 0.
void isNaN(const float *x, uint8_t *y, int64_t n);

/// out = cond ? a : b, the three broadcast (numpy rules) to outDims; cond
/// holds a byte per element, nonzero for true.
void where(const uint8_t *cond, const Dims &condDims, const float *a,
           const Dims &aDims, const float *b, const Dims &bDims, float *out,
           const Dims &outDims);

/// out[i...] = x[starts + i * steps...] (per dim; steps may be negative).
void slice(const float *x, const Dims &dims, const std::vector<int64_t> &starts,
           const std::vector<int64_t> &steps, float *out, const Dims &outDims);
/// The same of ids (labels read from position 1 on).
void slice(const int64_t *x, const Dims &dims,
           const std::vector<int64_t> &starts,
           const std::vector<int64_t> &steps, int64_t *out,
           const Dims &outDims);
/// dx = zeros of dxDims with dx[starts + i * steps...] = dy[i...].
void sliceGrad(const float *dy, const Dims &dyDims,
               const std::vector<int64_t> &starts,
               const std::vector<int64_t> &steps, float *dx,
               const Dims &dxDims);

/// out = the slices of x (dims) that the `tuples` k-tuples of `indices`
/// name (negative from the end), as ONNX GatherND with batch_dims 0: out is
/// [tuples, dims[k:]...]. False (out unspecified) when an index is outside
/// its dim.
bool gatherND(const float *x, const Dims &dims, const int64_t *indices,
              int64_t tuples, int64_t k, float *out);
/// dx = zeros of dims, then each slice of dy added where its tuple names,
/// in tuple order (false when an index is outside its dim).
bool gatherNDGrad(const float *dy, const Dims &dims, const int64_t *indices,
                  int64_t tuples, int64_t k, float *dx);

/// The k largest (smallest) elements of each line of x (dims) along
/// `axis`, in order, ties by the lower index first, and their indices
/// along the axis (ONNX TopK, sorted): values and indices are dims with
/// dims[axis] = k (k <= dims[axis]). NaN orders above every number.
void topK(const float *x, const Dims &dims, int64_t axis, int64_t k,
          bool smallest, float *values, int64_t *indices);
/// TopK's gradient is gatherElementsGrad with TopK's indices.

/// An index along an axis of n (negative from the end) as 0..n-1, or -1
/// outside it: GatherElements' and ScatterElements' indices.
MT_HOST_DEVICE inline int64_t elementIndex(int64_t i, int64_t n) {
  if (i < 0)
    i += n;
  return i >= 0 && i < n ? i : -1;
}
/// ONNX GatherElements: out (the indices' dims: x's dims with k along
/// `axis`) holds the elements of x's lines along the axis that the indices
/// name; false when one is outside the axis.
bool gatherElements(const float *x, const Dims &dims, int64_t axis,
                    const int64_t *indices, int64_t k, float *out);
/// dx = zeros of dims with dy (the indices' dims) summed at the places the
/// indices name, in index order; false when one is outside the axis.
bool gatherElementsGrad(const float *dy, const int64_t *indices,
                        const Dims &dims, int64_t axis, int64_t k, float *dx);
/// ONNX ScatterElements, reduction none: out = x (dims), then the updates
/// (the indices' dims) written at the places the indices name, in index
/// order (a later update of one place stays); false when an index is
/// outside the axis (out is then partly written).
bool scatterElements(const float *x, const Dims &dims, int64_t axis,
                     const int64_t *indices, const float *updates, int64_t k,
                     float *out);

/// out[j...] = x[j - begins...] where that is inside x (dims), else
/// `value`: a constant pad, negative begins and a smaller outDims cropping.
/// The gradient of a pad is the pad of dy by -begins and 0.
void pad(const float *x, const Dims &dims, const std::vector<int64_t> &begins,
         float value, float *out, const Dims &outDims);

/// out = x (dims, rank >= 2) with the elements off the kept triangle of
/// each matrix of its last two dims zeroed: (row i, column j) is kept when
/// j - i >= diagonal (upper) or j - i <= diagonal (lower), as ONNX Trilu.
/// The gradient of a Trilu is the same Trilu of dy.
void trilu(const float *x, const Dims &dims, bool upper, int64_t diagonal,
           float *out);

/// out = the running sums of x (dims) along `axis`: element i sums
/// elements 0..i (exclusive: 0..i-1; reverse: from the end), as ONNX
/// CumSum, in fp32 in order. The gradient of a CumSum is the CumSum of dy
/// the other way.
void cumSum(const float *x, const Dims &dims, int64_t axis, bool exclusive,
            bool reverse, float *out);

/// out (outDims, each a multiple of dims) = x repeated along every dim:
/// out[j...] = x[j % dims...], as ONNX Tile.
void tile(const float *x, const Dims &dims, float *out, const Dims &outDims);

/// The lines of a tensor of `dims` along `axis`: [outer, n, inner].
inline void linesAlong(const Dims &dims, int64_t axis, int64_t &outer,
                       int64_t &n, int64_t &inner) {
  outer = inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= dims[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < dims.size(); ++d)
    inner *= dims[d];
  n = dims[size_t(axis)];
}

/// out = slices of x (dims) along `axis` at `indices` (negative from the
/// end): out's dims are dims[:axis] + the indices' + dims[axis + 1:]. False
/// (out unspecified) when an index is outside the axis.
bool gather(const float *x, const Dims &dims, int64_t axis,
            const int64_t *indices, int64_t count, float *out);
/// dx = zeros of dims, then each slice of dy added at the place its index
/// names, in index order (false when an index is outside the axis).
bool gatherGrad(const float *dy, const Dims &dims, int64_t axis,
                const int64_t *indices, int64_t count, float *dx);

/// out = x with its dims permuted: out dim d is x dim perm[d].
void transpose(const float *x, const Dims &dims,
               const std::vector<int64_t> &perm, float *out);

/// Concatenates parts along `axis` (or, with split, the inverse). The
/// elements are moved, not read: `elementBytes` each, of any type.
void concat(const std::vector<const void *> &parts,
            const std::vector<Dims> &partDims, int64_t axis,
            size_t elementBytes, void *out);
void split(const void *x, const Dims &dims, int64_t axis, size_t elementBytes,
           const std::vector<void *> &parts, const std::vector<Dims> &partDims);

} // namespace mt::kernels::cpu

#endif // MT_KERNELS_CPU_PRIMITIVE_OPS_H
