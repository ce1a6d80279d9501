// sgemm (see gemm.h): on OpenBLAS, called from many threads at once; or,
// in a build without it (MT_CPU_BLAS=OFF), in plain loops.
#include "kernels/cpu/gemm.h"

#ifdef MT_HAVE_BLAS
#include <cblas.h>

#include <mutex>

// OpenBLAS's, in no header: joins its server threads (it starts them again
// only for a call that would use more than one thread).
extern "C" void blas_thread_shutdown_(void);
#endif

namespace mt::kernels::cpu {

#ifdef MT_HAVE_BLAS

void useSingleThreadedBlas() {
  static std::once_flag once;
  std::call_once(once, [] {
    openblas_set_num_threads(1);
    blas_thread_shutdown_();
  });
}

void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           float alpha, const float *a, int64_t lda, const float *b,
           int64_t ldb, float beta, float *c, int64_t ldc) {
  useSingleThreadedBlas();
  if (m == 0 || n == 0)
    return;
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, blasint(m), blasint(n),
              blasint(k), alpha, a, blasint(lda), b, blasint(ldb), beta, c,
              blasint(ldc));
}

#else

void useSingleThreadedBlas() {}

void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           float alpha, const float *a, int64_t lda, const float *b,
           int64_t ldb, float beta, float *c, int64_t ldc) {
  // A row of C at a time, adding alpha A[i, p] times row p of op(B): the
  // inner loop runs along C's row (and B's, unless transposed).
  for (int64_t i = 0; i < m; ++i) {
    float *ci = c + i * ldc;
    for (int64_t j = 0; j < n; ++j)
      ci[j] = beta == 0.0f ? 0.0f : beta * ci[j];
    for (int64_t p = 0; p < k; ++p) {
      float aip = alpha * (transA ? a[p * lda + i] : a[i * lda + p]);
      if (transB)
        for (int64_t j = 0; j < n; ++j)
          ci[j] += aip * b[j * ldb + p];
      else
        for (int64_t j = 0; j < n; ++j)
          ci[j] += aip * b[p * ldb + j];
    }
  }
}

#endif

} // namespace mt::kernels::cpu
