// The shapes and function codes the kernels take, which a plan's ops are
// resolved into when it loads (runtime/plan/op_desc.h): header-only, so that
// the plan's verifier needs no kernel. The CPU kernels (fused_ops.h,
// primitive_ops.h) and the CUDA ones (cuda/kernels.h) take them as they are.
#ifndef MT_KERNELS_SHAPES_H
#define MT_KERNELS_SHAPES_H

#include "kernels/unary_fns.h"

#include <cstdint>

namespace mt::kernels {

/// Rotary embedding of x [batch, seq, heads * headDim] with tables cos and
/// sin of [seq, headDim], or [batch, seq, headDim] when tablesPerBatch.
struct RotaryShape {
  int64_t batch, seq, heads, headDim;
  bool tablesPerBatch = false, interleaved = false;
};

/// Attention over packed heads: q [batch, seq, heads * headDim], k and v
/// [batch, seq, kvHeads * headDim]; query head h reads kv head
/// h / (heads / kvHeads). mask (may be null) is additive: [maskBatch,
/// maskHeads, seq, seq] where maskBatch is 1 or batch and maskHeads 1 or
/// heads (1 broadcasts).
struct AttentionShape {
  int64_t batch, seq, heads, kvHeads, headDim;
  float scale;
  bool causal = false;
  int64_t window = 0; ///< > 0: also mask i - j >= window.
  int64_t maskBatch = 1, maskHeads = 1;
  /// Keys per block of scores (0: 16384): rows longer than a block take
  /// the softmax online over blocks, so that a task's scratch is at most
  /// 2 x 64 x keyBlock floats whatever the sequence.
  int64_t keyBlock = 0;
  /// c > 0: each score s (scale q . k) becomes c tanh(s / c) before the
  /// mask is added (softcapping); 0: none.
  float softcap = 0.0f;
};

enum class Activation { Gelu, GeluTanh, Silu, Relu };

/// Mean cross-entropy of logits [tokens, vocab] against labels [tokens]
/// over the tokens whose target is not ignoreIndex. With shift (labels
/// [batch, seq] as Hugging Face models take them) the target of position t
/// is label t + 1 and the last position of each sequence is ignored.
struct CrossEntropyShape {
  int64_t batch, seq, vocab;
  int64_t ignoreIndex = -100;
  bool shift = false;
};

/// The head's linear and the cross-entropy of its logits, `chunkRows` rows
/// at a time: x [ce.batch * ce.seq, dim], weight [vocab, dim] (outIn) or
/// [dim, vocab]; labels as for crossEntropyForward (ce.vocab is the
/// vocabulary).
struct HeadShape {
  int64_t dim;
  bool outIn;
  CrossEntropyShape ce;
  int64_t chunkRows;
};

/// A gated MLP, y = down(act(x gate) * (x up)), `chunkRows` rows at a
/// time: x [rows, dim]; gate and up [hidden, dim] (outIn) or [dim, hidden];
/// down [dim, hidden] (outIn) or [hidden, dim].
struct MlpShape {
  int64_t rows, dim, hidden;
  bool outIn;
  Activation act;
  int64_t chunkRows; ///< 1 to rows
};

enum class Binary { Add, Sub, Mul, Div, Pow, Max, Min };

/// Comparisons of floats into bytes (1 where true).
enum class Compare { Equal, Less, LessOrEqual, Greater, GreaterOrEqual };

/// Logic of bytes (0 false, anything else true) into bytes; Not reads its
/// first operand only.
enum class Logic { Not, And, Or, Xor };

/// A function of the UNARY kernel (its enum Unary is generated from
/// plan.proto's UnaryFn) with its parameters, whose meaning is the
/// function's (plan.proto says which ONNX attribute each one is).
struct UnaryParams {
  Unary fn = Unary::Exp;
  float alpha = 0.0f, beta = 0.0f;
};

} // namespace mt::kernels

#endif // MT_KERNELS_SHAPES_H
