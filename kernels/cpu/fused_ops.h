// CPU kernels of the fused ops, forward and backward, in fp32: GEMMs on
// the BLAS (gemm.h), everything else on the thread pool (parallel.h). The
// straightforward loops they are checked against (in double where a sum
// runs over a whole row) are kept in namespace `reference`.
//
// Every tensor is a dense row-major fp32 (or int64 for ids and labels)
// buffer owned by the caller. Backward kernels overwrite every gradient
// they write, of activations and of weights alike (the CUDA kernels'
// contract too): a plan sums gradients with ACCUMULATE ops. Semantics match
// the ops of the train dialect (dialects/Train/IR/TrainOps.td). Each GEMM
// dimension must be below 2^31 (checked when a plan loads).
#ifndef MT_KERNELS_CPU_FUSED_OPS_H
#define MT_KERNELS_CPU_FUSED_OPS_H

#include "kernels/shapes.h"

#include <cstdint>
#include <vector>

namespace mt::kernels::cpu {

// The shapes, from kernels/shapes.h.
using kernels::Activation;
using kernels::AttentionShape;
using kernels::CrossEntropyShape;
using kernels::HeadShape;
using kernels::MlpShape;
using kernels::RotaryShape;

/// out[n, :] = table[ids[n], :]; false when an id is outside [0, vocab).
bool embeddingForward(const float *table, const int64_t *ids, int64_t count,
                      int64_t vocab, int64_t dim, float *out);
/// dTable = 0, then dTable[ids[n], :] += dOut[n, :] in token order.
void embeddingBackward(const float *dOut, const int64_t *ids, int64_t count,
                       int64_t vocab, int64_t dim, float *dTable);

/// y[rows, out] = x[rows, in] W (+ bias). outIn: W is [out, in] (y = x W^T),
/// else W is [in, out]. bias may be null.
void linearForward(const float *x, const float *w, const float *bias,
                   int64_t rows, int64_t in, int64_t out, bool outIn, float *y);
/// dx = dy W^T-ish, dw = dy^T x-ish, dbias = sum(dy) over rows; each may
/// be null.
void linearBackward(const float *x, const float *w, const float *dy,
                    int64_t rows, int64_t in, int64_t out, bool outIn,
                    float *dx, float *dw, float *dbias);

/// The rows of each expert, in row order (a stable counting sort): rows
/// order[offsets[e] .. offsets[e + 1]) chose expert e (a negative id counts
/// from the end). False for an id outside [-experts, experts).
bool groupByExpert(const int64_t *ids, int64_t rows, int64_t experts,
                   std::vector<int64_t> &order, std::vector<int64_t> &offsets);

/// A mixture of experts' expert projection: y[r] = x[r] W[ids[r]], W
/// [experts, out, in] when outIn (x W^T) or [experts, in, out]; a negative
/// id counts from the end. The rows are grouped by expert in order (a
/// stable counting sort), each group gathered and multiplied in one GEMM
/// (linearForward) and scattered back: memory of the rows, never of a
/// gathered weight, and the same bits for the same inputs. False for an id
/// outside [-experts, experts) (y is then unspecified).
bool expertLinearForward(const float *x, const int64_t *ids, const float *w,
                         int64_t rows, int64_t experts, int64_t in, int64_t out,
                         bool outIn, float *y);
/// dx (rows, through each row's expert) and dw (each expert's from its
/// rows, zero for an expert no row chose), both overwritten.
bool expertLinearBackward(const float *x, const int64_t *ids, const float *w,
                          const float *dy, int64_t rows, int64_t experts,
                          int64_t in, int64_t out, bool outIn, float *dx,
                          float *dw);

/// y = x / sqrt(mean(x^2) + eps) * g over the last dim; g = 1 + w when
/// plusOne, else w.
void rmsNormForward(const float *x, const float *w, int64_t rows, int64_t dim,
                    float eps, bool plusOne, float *y);
void rmsNormBackward(const float *x, const float *w, const float *dy,
                     int64_t rows, int64_t dim, float eps, bool plusOne,
                     float *dx, float *dw);

/// y = (x - mean) / sqrt(var + eps) * w + b over the last dim (b may be null).
void layerNormForward(const float *x, const float *w, const float *b,
                      int64_t rows, int64_t dim, float eps, float *y);
void layerNormBackward(const float *x, const float *w, const float *dy,
                       int64_t rows, int64_t dim, float eps, float *dx,
                       float *dw, float *db);

/// Rotary embedding of x (RotaryShape, kernels/shapes.h).
void rotaryForward(const float *x, const float *cos, const float *sin,
                   const RotaryShape &s, float *y);
/// dx = R^T dy, R being the rotation of rotaryForward.
void rotaryBackward(const float *dy, const float *cos, const float *sin,
                    const RotaryShape &s, float *dx);

/// Attention over packed heads (AttentionShape).
void attentionForward(const float *q, const float *k, const float *v,
                      const float *mask, const AttentionShape &s, float *out);
/// dq, dk and dv are overwritten.
void attentionBackward(const float *q, const float *k, const float *v,
                       const float *mask, const float *dOut,
                       const AttentionShape &s, float *dq, float *dk,
                       float *dv);

/// The MLP activations (Activation).
void activationForward(const float *x, int64_t n, Activation act, float *y);
void activationBackward(const float *x, const float *dy, int64_t n,
                        Activation act, float *dx);
/// y = act(gate) * up (y may be gate or up).
void gatedForward(const float *gate, const float *up, int64_t n, Activation act,
                  float *y);
/// dGate and dUp may be gate and up (in place).
void gatedBackward(const float *gate, const float *up, const float *dy,
                   int64_t n, Activation act, float *dGate, float *dUp);

/// Mean cross-entropy of logits against labels (CrossEntropyShape).
/// Returns the loss; `counted` gets the number of tokens that count.
float crossEntropyForward(const float *logits, const int64_t *labels,
                          const CrossEntropyShape &s, int64_t *counted);
/// dLogits = dLoss * (softmax - onehot) / counted (overwrites).
void crossEntropyBackward(const float *logits, const int64_t *labels,
                          const CrossEntropyShape &s, float dLoss,
                          float *dLogits);

/// The head's linear and its cross-entropy in row chunks (HeadShape).
/// `scratch` holds one chunk of logits: min(chunkRows, rows) x vocab floats.
float headCrossEntropyForward(const float *x, const float *w,
                              const int64_t *labels, const HeadShape &s,
                              float *scratch);
/// dx and dw overwritten; each chunk's logits are recomputed.
void headCrossEntropyBackward(const float *x, const float *w,
                              const int64_t *labels, float dLoss,
                              const HeadShape &s, float *dx, float *dw,
                              float *scratch);

/// A gated MLP in row chunks (MlpShape).
/// `scratch`: 2 * chunkRows * hidden floats (the chunk's gate and up).
void gatedMlpForward(const float *x, const float *gate, const float *up,
                     const float *down, const MlpShape &s, float *y,
                     float *scratch);
/// dx and the three weights' gradients overwritten; each chunk's
/// intermediates recomputed. `scratch`: chunkRows * (3 * hidden + dim)
/// floats. With one chunk, the same bits as the unchunked ops' gradients.
void gatedMlpBackward(const float *x, const float *gate, const float *up,
                      const float *down, const float *dy, const MlpShape &s,
                      float *dx, float *dGate, float *dUp, float *dDown,
                      float *scratch);

/// The loops the BLAS-backed kernels above are checked against, with the
/// same contracts.
namespace reference {
void linearForward(const float *x, const float *w, const float *bias,
                   int64_t rows, int64_t in, int64_t out, bool outIn, float *y);
void linearBackward(const float *x, const float *w, const float *dy,
                    int64_t rows, int64_t in, int64_t out, bool outIn,
                    float *dx, float *dw, float *dbias);
bool expertLinearForward(const float *x, const int64_t *ids, const float *w,
                         int64_t rows, int64_t experts, int64_t in, int64_t out,
                         bool outIn, float *y);
bool expertLinearBackward(const float *x, const int64_t *ids, const float *w,
                          const float *dy, int64_t rows, int64_t experts,
                          int64_t in, int64_t out, bool outIn, float *dx,
                          float *dw);
void attentionForward(const float *q, const float *k, const float *v,
                      const float *mask, const AttentionShape &s, float *out);
void attentionBackward(const float *q, const float *k, const float *v,
                       const float *mask, const float *dOut,
                       const AttentionShape &s, float *dq, float *dk,
                       float *dv);
} // namespace reference

} // namespace mt::kernels::cpu

#endif // MT_KERNELS_CPU_FUSED_OPS_H
