// The expert linears of a mixture of experts, y[r] = x[r] W[ids[r]]: the
// rows grouped by the expert they chose (on the device, stably, in the CPU
// twin's order), gathered, one GEMM per expert with rows on its weight in
// place, and scattered back; the CUDA twin of kernels/cpu's expertLinear*.
// The GEMMs are the caller's (cuBLASLt lives in the runtime), and their row
// counts are the host's to give: the launcher reads the experts' starts
// back once (experts + 1 ints and the id check, one wait for the stream).
#include "kernels/cuda/common.cuh"

#include <tuple>
#include <vector>

namespace mt::kernels::cuda {
namespace {

size_t elementBytes(DType t) { return t == DType::F32 ? 4 : 2; }

/// gather: out[i, :] = m[order[i], :]; else m[order[i], :] = in[i, :].
__global__ void moveRowsKernel(Load from, Store to, const int *order,
                               int64_t count, int64_t width, bool gather) {
  MT_GRID_STRIDE(e, count * width) {
    int64_t i = e / width, c = e % width;
    int64_t row = int64_t(order[i]) * width + c;
    to.set(gather ? e : row, from[gather ? row : e]);
  }
}

cudaError_t moveRows(Ref from, const int *order, int64_t count, int64_t width,
                     MutRef to, bool gather, cudaStream_t stream) {
  if (count * width == 0)
    return cudaSuccess;
  moveRowsKernel<<<blocksFor(count * width), kThreads, 0, stream>>>(
      load(from), store(to), order, count, width, gather);
  return cudaGetLastError();
}

/// The workspace, in this order: the grouping of the rows by expert, the
/// id check's flag, then the gathered rows: x and y (forward), or x, dy and
/// dx (backward), at most 4 bytes a value.
struct ExpertLayout {
  size_t flag, rows, bytes;
  ExpertLayout(size_t grouping, const ExpertShape &e, bool grad) {
    flag = alignUp(grouping);
    rows = flag + kWorkspaceAlign;
    size_t values =
        size_t(e.rows) * size_t(grad ? 2 * e.in + e.out : e.in + e.out);
    bytes = rows + 3 * kWorkspaceAlign + alignUp(values * sizeof(float));
  }
};

bool shapeOk(const ExpertShape &e) {
  return e.rows >= 0 && e.experts > 0 && e.in > 0 && e.out > 0;
}

/// The rows grouped by expert: the experts' starts (on the host), the
/// rows' order (in the workspace), where the gathered rows go, and whether
/// an id was outside the experts.
struct Groups {
  std::vector<int> starts;
  const int *order = nullptr;
  char *rows = nullptr;
  bool badIds = false;
};

/// Groups the rows by expert on the device and reads the experts' starts
/// back with the id check: the one wait for the stream.
cudaError_t group(const int64_t *ids, const ExpertShape &e, bool grad,
                  void *workspace, Groups &g, cudaStream_t stream) {
  size_t grouping = 0;
  if (!shapeOk(e) || !workspace ||
      groupingBytes(e.experts, e.rows, grouping) != cudaSuccess)
    return cudaErrorInvalidValue;
  char *work = static_cast<char *>(workspace);
  ExpertLayout layout(grouping, e, grad);
  g.rows = work + layout.rows;
  int *bad = reinterpret_cast<int *>(work + layout.flag);
  if (cudaError_t err = cudaMemsetAsync(bad, 0, sizeof(int), stream))
    return err;
  const int *deviceStarts = nullptr;
  if (cudaError_t err = groupIds(ids, e.rows, e.experts, /*wrap=*/true, bad,
                                 work, deviceStarts, g.order, stream))
    return err;
  g.starts.assign(size_t(e.experts + 1), 0);
  int flag = 0;
  for (auto [to, from, bytes] :
       {std::tuple<void *, const void *, size_t>{g.starts.data(), deviceStarts,
                                                 g.starts.size() * sizeof(int)},
        {&flag, bad, sizeof flag}})
    if (cudaError_t err =
            cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToHost, stream))
      return err;
  if (cudaError_t err = cudaStreamSynchronize(stream))
    return err;
  g.badIds = flag != 0;
  return cudaSuccess;
}

} // namespace

cudaError_t expertLinearWorkspaceBytes(const ExpertShape &e, bool grad,
                                       size_t &bytes) {
  if (!shapeOk(e))
    return cudaErrorInvalidValue;
  size_t grouping = 0;
  if (cudaError_t err = groupingBytes(e.experts, e.rows, grouping))
    return err;
  bytes = ExpertLayout(grouping, e, grad).bytes;
  return cudaSuccess;
}

cudaError_t expertLinear(Ref x, const int64_t *ids, Ref w, const ExpertShape &e,
                         MutRef y, void *workspace, bool &badIds,
                         const GemmHook &gemm, cudaStream_t stream) {
  badIds = false;
  if (w.type != x.type)
    return cudaErrorInvalidValue;
  Groups g;
  if (cudaError_t err = group(ids, e, /*grad=*/false, workspace, g, stream))
    return err;
  if ((badIds = g.badIds))
    return cudaSuccess; // the caller names the ids
  DType ab = x.type;
  char *xs = g.rows;
  char *ys = xs + alignUp(size_t(e.rows * e.in) * elementBytes(ab));
  if (cudaError_t err = moveRows(x, g.order, e.rows, e.in, {xs, ab},
                                 /*gather=*/true, stream))
    return err;
  size_t wBytes = size_t(e.in * e.out) * elementBytes(w.type);
  for (int64_t k = 0; k < e.experts; ++k) {
    int64_t begin = g.starts[size_t(k)], n = g.starts[size_t(k) + 1] - begin;
    if (n == 0)
      continue;
    // y[n, out] = x W^T (W [out, in]) or x W (W [in, out]), in y's type.
    if (!gemm({n, e.out, e.in, false, e.outIn, ab, y.type, false,
               xs + size_t(begin * e.in) * elementBytes(ab),
               static_cast<const char *>(w.data) + size_t(k) * wBytes,
               ys + size_t(begin * e.out) * elementBytes(y.type)}))
      return cudaErrorLaunchFailure;
  }
  return moveRows({ys, y.type}, g.order, e.rows, e.out, y, /*gather=*/false,
                  stream);
}

cudaError_t expertLinearGrad(Ref x, const int64_t *ids, Ref w, Ref dy,
                             const ExpertShape &e, MutRef dx, MutRef dw,
                             void *workspace, bool &badIds,
                             const GemmHook &gemm, cudaStream_t stream) {
  badIds = false;
  if (w.type != x.type || dy.type != x.type)
    return cudaErrorInvalidValue;
  Groups g;
  if (cudaError_t err = group(ids, e, /*grad=*/true, workspace, g, stream))
    return err;
  if ((badIds = g.badIds))
    return cudaSuccess;
  DType ab = x.type;
  size_t width = elementBytes(ab);
  char *xs = g.rows;
  char *dys = xs + alignUp(size_t(e.rows * e.in) * width);
  char *dxs = dys + alignUp(size_t(e.rows * e.out) * width);
  if (cudaError_t err =
          moveRows(x, g.order, e.rows, e.in, {xs, ab}, true, stream))
    return err;
  if (cudaError_t err =
          moveRows(dy, g.order, e.rows, e.out, {dys, ab}, true, stream))
    return err;
  size_t wBytes = size_t(e.in * e.out) * elementBytes(w.type);
  size_t dwBytes = size_t(e.in * e.out) * elementBytes(dw.type);
  for (int64_t k = 0; k < e.experts; ++k) {
    int64_t begin = g.starts[size_t(k)], n = g.starts[size_t(k) + 1] - begin;
    char *dwk = static_cast<char *>(dw.data) + size_t(k) * dwBytes;
    if (n == 0) { // an expert no row chose has no gradient
      if (cudaError_t err = cudaMemsetAsync(dwk, 0, dwBytes, stream))
        return err;
      continue;
    }
    const char *xk = xs + size_t(begin * e.in) * width;
    const char *dyk = dys + size_t(begin * e.out) * width;
    // dx[n, in] = dy W (W [out, in]) or dy W^T.
    if (!gemm({n, e.in, e.out, false, !e.outIn, ab, ab, false, dyk,
               static_cast<const char *>(w.data) + size_t(k) * wBytes,
               dxs + size_t(begin * e.in) * width}))
      return cudaErrorLaunchFailure;
    // dw[out, in] = dy^T x; dw[in, out] = x^T dy.
    if (!gemm(weightGradGemm(e.in, e.out, n, e.outIn, ab, dw.type, false, xk,
                             dyk, dwk)))
      return cudaErrorLaunchFailure;
  }
  return moveRows({dxs, ab}, g.order, e.rows, e.in, dx, /*gather=*/false,
                  stream);
}

} // namespace mt::kernels::cuda
