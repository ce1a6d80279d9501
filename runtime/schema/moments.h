// What the plan schema fixes about blockwise AdamW moments besides its
// messages (plan.proto, Parameter): the compiler sizes the scales with it,
// the plan verifiers of both sides check them, and the host optimizer
// codes each block with one scale. Header-only, no protobuf.
#ifndef MT_RUNTIME_SCHEMA_MOMENTS_H
#define MT_RUNTIME_SCHEMA_MOMENTS_H

#include <cstdint>

namespace mt::plan {

/// How a trainable parameter's AdamW moments are stored: fp32 (exact),
/// bf16, or blockwise 8 or 4 bits with a scale per block (plan.proto,
/// Parameter; runtime/optim/adamw.h has the codes). The compiler's option and
/// the runtime's reading of a plan are this one type.
enum class MomentFormat { F32, BF16, Q8, Q4 };

/// Elements per fp32 scale of 8-bit and 4-bit moments.
constexpr int64_t kMomentBlock = 256;

/// The scales of a moment of `n` elements: one per block, the last partial.
constexpr int64_t momentBlocks(int64_t n) {
  return (n + kMomentBlock - 1) / kMomentBlock;
}

} // namespace mt::plan

#endif // MT_RUNTIME_SCHEMA_MOMENTS_H
