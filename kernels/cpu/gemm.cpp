// sgemm on OpenBLAS (see gemm.h), called from many threads at once.
#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <mutex>

// OpenBLAS's, in no header: joins its server threads (it starts them again
// only for a call that would use more than one thread).
extern "C" void blas_thread_shutdown_(void);

namespace mt::kernels::cpu {

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

} // namespace mt::kernels::cpu
