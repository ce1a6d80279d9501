// The kernel shapes of a plan's ops, from their buffers and attributes, for
// both backends (the CUDA kernels take the CPU reference's shape types).
#ifndef MT_RUNTIME_OP_SHAPES_H
#define MT_RUNTIME_OP_SHAPES_H

#include "kernels/cpu/fused_ops.h"
#include "kernels/cpu/primitive_ops.h"
#include "runtime/schema/plan.pb.h"
#include "runtime/status.h"

namespace mt::runtime {

/// The kernels' activation of a plan's.
kernels::cpu::Activation activationOf(plan::Activation act);

/// ADD, SUB or MUL as the kernels' binary op.
kernels::cpu::Binary binaryOf(plan::Kernel kernel);

/// ATTENTION and ATTENTION_GRAD: the shape, and whether the op has a mask
/// (checked to broadcast to [batch, heads, seq, seq]).
Status attentionShape(const plan::Plan &plan, const plan::Op &op,
                      kernels::cpu::AttentionShape &shape, bool &hasMask);

/// ROTARY and ROTARY_GRAD.
kernels::cpu::RotaryShape rotaryShape(const plan::Plan &plan,
                                      const plan::Op &op);

/// CROSS_ENTROPY and CROSS_ENTROPY_GRAD (logits, labels, ...).
kernels::cpu::CrossEntropyShape crossEntropyShape(const plan::Plan &plan,
                                                  const plan::Op &op);

/// HEAD_CROSS_ENTROPY and its gradient (x, w, labels, ...); `rows` gets the
/// token count. chunkRows is at least 1.
kernels::cpu::HeadShape headShape(const plan::Plan &plan, const plan::Op &op,
                                  int64_t &rows);

} // namespace mt::runtime

#endif // MT_RUNTIME_OP_SHAPES_H
