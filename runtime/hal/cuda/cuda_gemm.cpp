// cuBLASLt GEMMs (see cuda_gemm.h). cuBLASLt is column-major: a row-major
// X [r, c] is the column-major X^T [c, r] with the same memory, so the
// row-major C = op(A) op(B) is computed as the column-major
// C^T = op(B)^T op(A)^T, B's memory passed as cuBLASLt's A and A's as its B.
#include "runtime/hal/cuda/cuda_gemm.h"

#include <initializer_list>
#include <string>

namespace mt::runtime {

Status cudaStatus(cudaError_t e, const char *file, int line) {
  if (e == cudaSuccess)
    return Status::ok();
  return Status::error(std::string(file) + ":" + std::to_string(line) +
                       ": CUDA: " + cudaGetErrorName(e) + ": " +
                       cudaGetErrorString(e));
}

Status cublasStatus(cublasStatus_t s, const char *file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS)
    return Status::ok();
  return Status::error(std::string(file) + ":" + std::to_string(line) +
                       ": cuBLASLt: " + cublasLtGetStatusName(s) + ": " +
                       cublasLtGetStatusString(s));
}

namespace {
cudaDataType_t cudaType(kernels::cuda::DType t) {
  return t == kernels::cuda::DType::F32 ? CUDA_R_32F : CUDA_R_16BF;
}
} // namespace

Gemms::Prepared::~Prepared() {
  if (a)
    cublasLtMatrixLayoutDestroy(a);
  if (b)
    cublasLtMatrixLayoutDestroy(b);
  if (c)
    cublasLtMatrixLayoutDestroy(c);
  if (desc)
    cublasLtMatmulDescDestroy(desc);
}

Gemms::~Gemms() {
  prepared_.clear();
  if (handle_)
    cublasLtDestroy(handle_);
}

Status Gemms::init() { return MT_CUBLAS(cublasLtCreate(&handle_)); }

Status Gemms::prepare(const GemmShape &s) {
  Prepared *unused;
  return find(s, unused);
}

Status Gemms::find(const GemmShape &s, Prepared *&out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = prepared_.find(s); it != prepared_.end()) {
    out = it->second.get();
    return Status::ok();
  }
  auto p = std::make_unique<Prepared>();
  // fp32 inputs: exact fp32 (no TF32), so that fp32 plans match the CPU
  // reference; bf16 inputs: fp32 accumulation.
  if (Status st = MT_CUBLAS(
          cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      !st)
    return st;
  // cuBLASLt's A is our B, its B our A (see the file comment).
  cublasOperation_t opA = s.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opB = s.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (Status st = MT_CUBLAS(cublasLtMatmulDescSetAttribute(
          p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof opA));
      !st)
    return st;
  if (Status st = MT_CUBLAS(cublasLtMatmulDescSetAttribute(
          p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof opB));
      !st)
    return st;
  cudaDataType_t ab = cudaType(s.ab), c = cudaType(s.c);
  if (s.bias) {
    // Bias per row of the column-major C^T: per column of our C.
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    if (Status st = MT_CUBLAS(cublasLtMatmulDescSetAttribute(
            p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
            sizeof epilogue));
        !st)
      return st;
    if (Status st = MT_CUBLAS(cublasLtMatmulDescSetAttribute(
            p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &c, sizeof c));
        !st)
      return st;
  }
  // Stored shapes, column-major: B [k, n] row-major is [n, k] ld n; B
  // [n, k] (transB) is [k, n] ld k. Likewise A.
  uint64_t aRows = s.transB ? s.k : s.n, aCols = s.transB ? s.n : s.k;
  uint64_t bRows = s.transA ? s.m : s.k, bCols = s.transA ? s.k : s.m;
  if (Status st = MT_CUBLAS(
          cublasLtMatrixLayoutCreate(&p->a, ab, aRows, aCols, int64_t(aRows)));
      !st)
    return st;
  if (Status st = MT_CUBLAS(
          cublasLtMatrixLayoutCreate(&p->b, ab, bRows, bCols, int64_t(bRows)));
      !st)
    return st;
  if (Status st = MT_CUBLAS(cublasLtMatrixLayoutCreate(
          &p->c, c, uint64_t(s.n), uint64_t(s.m), int64_t(s.n)));
      !st)
    return st;
  cublasLtMatmulPreference_t pref = nullptr;
  if (Status st = MT_CUBLAS(cublasLtMatmulPreferenceCreate(&pref)); !st)
    return st;
  size_t workspace = kWorkspaceBytes;
  cublasLtMatmulHeuristicResult_t result = {};
  int found = 0;
  Status st = MT_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
      sizeof workspace));
  // cuBLASLt assumes 256-byte aligned matrices unless told otherwise.
  uint32_t align = uint32_t(s.align);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (st)
      st = MT_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align,
                                                          sizeof align));
  if (st)
    st = MT_CUBLAS(cublasLtMatmulAlgoGetHeuristic(
        handle_, p->desc, p->a, p->b, p->c, p->c, pref, 1, &result, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  if (!st)
    return st;
  if (found == 0)
    return Status::error("cuBLASLt has no algorithm for a GEMM of " +
                         std::to_string(s.m) + " x " + std::to_string(s.n) +
                         " x " + std::to_string(s.k));
  p->algo = result.algo;
  out = p.get();
  prepared_.emplace(s, std::move(p));
  return Status::ok();
}

Status Gemms::run(const GemmShape &shape, const void *a, const void *b, void *c,
                  void *workspace, cudaStream_t stream, const void *bias) {
  GemmShape s = shape;
  uintptr_t bits =
      reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |
      reinterpret_cast<uintptr_t>(c) | reinterpret_cast<uintptr_t>(bias);
  s.align = 16;
  while (s.align > 1 && bits % uintptr_t(s.align) != 0)
    s.align /= 2;
  Prepared *p;
  if (Status st = find(s, p); !st)
    return st;
  float alpha = 1.0f, beta = s.accumulate ? 1.0f : 0.0f;
  auto matmul = [&] {
    return MT_CUBLAS(cublasLtMatmul(handle_, p->desc, &alpha, b, p->a, a, p->b,
                                    &beta, c, p->c, c, p->c, &p->algo,
                                    workspace, kWorkspaceBytes, stream));
  };
  if (!s.bias)
    return matmul();
  // The pointer is read when the call enqueues: hold it until then.
  std::lock_guard<std::mutex> lock(p->biasMu);
  if (Status st = MT_CUBLAS(cublasLtMatmulDescSetAttribute(
          p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
      !st)
    return st;
  return matmul();
}

kernels::cuda::GemmHook Gemms::hook(void *workspace, cudaStream_t stream,
                                    Status &status) {
  return [this, workspace, stream, &status](const kernels::cuda::GemmCall &g) {
    status = run({g.m, g.n, g.k, g.transA, g.transB, g.ab, g.c, g.accumulate},
                 g.a, g.b, g.out, workspace, stream);
    return bool(status);
  };
}

} // namespace mt::runtime
