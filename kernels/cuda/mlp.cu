// The gated MLP, down(act(gate x) * up x), a chunk of rows at a time so that
// only one chunk's intermediates [chunkRows, hidden] exist at once: the CUDA
// twin of kernels/cpu's gatedMlp*. Per chunk it runs the GEMMs and the
// activations of the unchunked ops, with the same shapes, types and order,
// so that one chunk gives the unchunked graph's values. The GEMMs are the
// caller's (cuBLASLt lives in the runtime), the activations elementwise.cu's.
#include "kernels/cuda/common.cuh"

#include <algorithm>

namespace mt::kernels::cuda {
namespace {

size_t elementBytes(DType t) { return t == DType::F32 ? 4 : 2; }

/// Row r0 of a [rows, width] matrix.
const char *rowOf(const void *m, DType t, int64_t width, int64_t r0) {
  return static_cast<const char *>(m) + size_t(r0 * width) * elementBytes(t);
}
char *rowOf(void *m, DType t, int64_t width, int64_t r0) {
  return static_cast<char *>(m) + size_t(r0 * width) * elementBytes(t);
}

bool shapeOk(const MlpShape &m, Ref x, Ref gate, Ref up, Ref down,
             const void *scratch) {
  return m.rows >= 0 && m.dim > 0 && m.hidden > 0 && m.chunkRows > 0 &&
         gate.type == x.type && up.type == x.type && down.type == x.type &&
         scratch && x.data && gate.data && up.data && down.data;
}

/// The scratch's parts, each a chunk [chunkRows, hidden] of x's type: gate
/// and up, then (backward) the activation and the up part of dx.
struct Chunks {
  char *gate, *up, *act, *dxUp;
  Chunks(void *scratch, const MlpShape &m, DType t) {
    size_t chunk = size_t(m.chunkRows * m.hidden) * elementBytes(t);
    gate = static_cast<char *>(scratch);
    up = gate + chunk;
    act = up + chunk;
    dxUp = act + chunk;
  }
};

} // namespace

size_t gatedMlpScratchBytes(const MlpShape &m, DType x, bool grad) {
  return size_t(grad ? 4 : 2) * size_t(m.chunkRows * m.hidden) *
         elementBytes(x);
}

cudaError_t gatedMlp(Ref x, Ref gate, Ref up, Ref down, const MlpShape &m,
                     MutRef y, void *scratch, const GemmHook &gemm,
                     cudaStream_t stream) {
  if (!shapeOk(m, x, gate, up, down, scratch) || !y.data)
    return cudaErrorInvalidValue;
  DType ab = x.type;
  Chunks c(scratch, m, ab);
  for (int64_t r0 = 0; r0 < m.rows; r0 += m.chunkRows) {
    int64_t n = std::min(m.chunkRows, m.rows - r0);
    const char *xc = rowOf(x.data, ab, m.dim, r0);
    // gate, up [n, hidden] = x W^T (W [hidden, dim]) or x W.
    if (!gemm({n, m.hidden, m.dim, false, m.outIn, ab, ab, false, xc, gate.data,
               c.gate}) ||
        !gemm({n, m.hidden, m.dim, false, m.outIn, ab, ab, false, xc, up.data,
               c.up}))
      return cudaErrorLaunchFailure;
    if (cudaError_t e = gated({c.gate, ab}, {c.up, ab}, {c.gate, ab},
                              n * m.hidden, m.act, stream))
      return e;
    // y[n, dim] = a W^T (W [dim, hidden]) or a W.
    if (!gemm({n, m.dim, m.hidden, false, m.outIn, ab, y.type, false, c.gate,
               down.data, rowOf(y.data, y.type, m.dim, r0)}))
      return cudaErrorLaunchFailure;
  }
  return cudaSuccess;
}

cudaError_t gatedMlpGrad(Ref x, Ref gate, Ref up, Ref down, Ref dy,
                         const MlpShape &m, MutRef dx, MutRef dGate, MutRef dUp,
                         MutRef dDown, void *scratch, const GemmHook &gemm,
                         cudaStream_t stream) {
  if (!shapeOk(m, x, gate, up, down, scratch) || dy.type != x.type ||
      !dy.data || !dx.data || !dGate.data || !dUp.data || !dDown.data)
    return cudaErrorInvalidValue;
  DType ab = x.type;
  bool outIn = m.outIn;
  Chunks c(scratch, m, ab);
  for (int64_t r0 = 0; r0 < m.rows; r0 += m.chunkRows) {
    int64_t n = std::min(m.chunkRows, m.rows - r0);
    const char *xc = rowOf(x.data, ab, m.dim, r0);
    const char *dyc = rowOf(dy.data, ab, m.dim, r0);
    if (!gemm({n, m.hidden, m.dim, false, outIn, ab, ab, false, xc, gate.data,
               c.gate}) ||
        !gemm({n, m.hidden, m.dim, false, outIn, ab, ab, false, xc, up.data,
               c.up}))
      return cudaErrorLaunchFailure;
    if (cudaError_t e = gated({c.gate, ab}, {c.up, ab}, {c.act, ab},
                              n * m.hidden, m.act, stream))
      return e;
    // The weights' gradients sum over the chunks (in fp32 when chunked:
    // the plan's types): the first overwrites.
    bool more = r0 > 0;
    // dDown[dim, hidden] (+)= dy^T a, or [hidden, dim] (+)= a^T dy.
    // da[n, hidden] = dy W (W [dim, hidden]) or dy W^T, over a.
    if (!gemm(weightGradGemm(m.hidden, m.dim, n, outIn, ab, dDown.type, more,
                             c.act, dyc, dDown.data)) ||
        !gemm({n, m.hidden, m.dim, false, !outIn, ab, ab, false, dyc, down.data,
               c.act}))
      return cudaErrorLaunchFailure;
    // dgate, dup over gate and up (the kernel reads each element first).
    if (cudaError_t e =
            gatedGrad({c.gate, ab}, {c.up, ab}, {c.act, ab}, {c.gate, ab},
                      {c.up, ab}, n * m.hidden, m.act, stream))
      return e;
    // dx[n, dim] = dgate W (W [hidden, dim]) or dgate W^T, plus up's.
    char *dxc = rowOf(dx.data, dx.type, m.dim, r0);
    if (!gemm({n, m.dim, m.hidden, false, !outIn, ab, dx.type, false, c.gate,
               gate.data, dxc}) ||
        !gemm({n, m.dim, m.hidden, false, !outIn, ab, ab, false, c.up, up.data,
               c.dxUp}))
      return cudaErrorLaunchFailure;
    // dx = the up part + the gate part: the unchunked graph's add.
    Dims rows{n, m.dim};
    if (cudaError_t e = binary(Binary::Add, {c.dxUp, ab}, rows, {dxc, dx.type},
                               rows, {dxc, dx.type}, rows, stream))
      return e;
    // dgate[hidden, dim] (+)= dg^T x, or [dim, hidden] (+)= x^T dg.
    for (auto [d, dw] :
         {std::pair<char *, MutRef>{c.gate, dGate}, {c.up, dUp}}) {
      if (!gemm(weightGradGemm(m.dim, m.hidden, n, outIn, ab, dw.type, more, xc,
                               d, dw.data)))
        return cudaErrorLaunchFailure;
    }
  }
  return cudaSuccess;
}

} // namespace mt::kernels::cuda
