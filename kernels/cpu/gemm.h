// Single-precision GEMM for the CPU kernels, on the BLAS the build links
// (OpenBLAS, statically: see kernels/CMakeLists.txt; plain loops in a build
// with MT_CPU_BLAS=OFF), row-major:
// C[m, n] = alpha * op(A)[m, k] op(B)[k, n] + beta * C, on the calling
// thread: the BLAS runs single-threaded, and the kernels split their work
// over the pool of parallel.h (one BLAS call per block), so that the two
// never compete for the cores.
#ifndef MT_KERNELS_CPU_GEMM_H
#define MT_KERNELS_CPU_GEMM_H

#include <cstdint>

namespace mt::kernels::cpu {

/// Makes the BLAS single-threaded and stops the threads it started when the
/// program loaded (which would otherwise take signals that the program
/// blocks and waits for). Called by the first sgemm and by setThreads
/// (parallel.h); later calls do nothing.
void useSingleThreadedBlas();

/// op(A) is A [m, k] (lda >= k) or, with transA, A^T of A [k, m]
/// (lda >= m); likewise op(B) [k, n] from B [k, n] or B [n, k].
void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           float alpha, const float *a, int64_t lda, const float *b,
           int64_t ldb, float beta, float *c, int64_t ldc);

} // namespace mt::kernels::cpu

#endif // MT_KERNELS_CPU_GEMM_H
