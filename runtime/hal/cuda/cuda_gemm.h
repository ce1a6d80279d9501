// Row-major GEMMs on cuBLASLt: C[m, n] = op(A) op(B) (+ beta C), bf16 or
// fp32 inputs, fp32 accumulation, bf16 or fp32 output. A descriptor set and
// an algorithm are chosen once per shape (prepare, at plan load) and reused.
#ifndef MT_RUNTIME_HAL_CUDA_CUDA_GEMM_H
#define MT_RUNTIME_HAL_CUDA_CUDA_GEMM_H

#include "kernels/cuda/kernels.h"
#include "runtime/base/status.h"

#include <cublasLt.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

namespace mt::runtime {

/// Checks a CUDA or cuBLASLt call: an error Status with the call's
/// file:line and the library's message.
Status cudaStatus(cudaError_t e, const char *file, int line);
Status cublasStatus(cublasStatus_t s, const char *file, int line);
#define MT_CUDA(call) ::mt::runtime::cudaStatus((call), __FILE__, __LINE__)
#define MT_CUBLAS(call) ::mt::runtime::cublasStatus((call), __FILE__, __LINE__)

struct GemmShape {
  int64_t m, n, k;
  /// A is [k, m] stored (op(A) = A^T) when transA, else [m, k]; B likewise
  /// [n, k] when transB, else [k, n].
  bool transA, transB;
  kernels::cuda::DType ab, c;
  bool accumulate; ///< beta = 1 (C += ...), else beta = 0.
  /// Adds a bias of n values (of C's type) to every row, in the epilogue.
  bool bias = false;
  /// The alignment (bytes) every pointer of a call has: algorithms that
  /// need more are not chosen. run() sets it from the pointers.
  int align = 16;
  auto key() const {
    return std::make_tuple(m, n, k, transA, transB, ab, c, accumulate, bias,
                           align);
  }
  bool operator<(const GemmShape &o) const { return key() < o.key(); }
};

class Gemms {
public:
  /// Workspace bytes each call may use (the caller's, per stream).
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;

  Gemms() = default;
  Gemms(const Gemms &) = delete;
  Gemms &operator=(const Gemms &) = delete;
  ~Gemms();

  Status init();
  /// Creates the descriptors of `shape` and picks its algorithm.
  Status prepare(const GemmShape &shape);
  /// `bias`: shape.bias's vector (device memory), else null.
  Status run(const GemmShape &shape, const void *a, const void *b, void *c,
             void *workspace, cudaStream_t stream, const void *bias = nullptr);
  /// The GEMMs of a fused CUDA kernel (kernels/cuda's GemmHook), run with
  /// `workspace` on `stream`; a failed one leaves its error in `status`.
  kernels::cuda::GemmHook hook(void *workspace, cudaStream_t stream,
                               Status &status);

private:
  struct Prepared {
    cublasLtMatmulDesc_t desc = nullptr;
    std::mutex biasMu; ///< the bias pointer is an attribute of desc
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo;
    ~Prepared();
  };
  Status find(const GemmShape &shape, Prepared *&out);

  cublasLtHandle_t handle_ = nullptr;
  std::mutex mu_;
  std::map<GemmShape, std::unique_ptr<Prepared>> prepared_;
};

} // namespace mt::runtime

#endif // MT_RUNTIME_HAL_CUDA_CUDA_GEMM_H
