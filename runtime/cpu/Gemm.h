//===- Gemm.h - one OpenBLAS sgemm call, shared by matmul and conv -*- C++ -*-===//
#ifndef DTC_RUNTIME_CPU_GEMM_H
#define DTC_RUNTIME_CPU_GEMM_H

#include "runtime/cpu/ThreadPool.h"

#include <cblas.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <initializer_list>

namespace dtc::runtime::cpu {

/// One row-major sgemm: C[M,N] = op(A) op(B) + beta C, C dense (ldc = N).
struct Gemm {
  bool transA = false, transB = false;
  int64_t M = 0, N = 0, K = 0;
  int64_t lda = 0, ldb = 0;

  void run(const float *a, const float *b, float *c, float beta = 0.0f) const {
    if (M == 0 || N == 0)
      return;
    if (K == 0) { // an empty sum; BLAS would reject the zero leading dims
      if (beta == 0.0f)
        std::memset(c, 0, sizeof(float) * M * N);
      return;
    }
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                transB ? CblasTrans : CblasNoTrans, int(M), int(N), int(K), 1.0f, a,
                int(lda), b, int(ldb), beta, c, int(N));
  }

  int64_t work() const { return M * N * K; }
};

/// OpenBLAS passes sizes as 32-bit ints.
inline bool fitsBlas(std::initializer_list<int64_t> sizes) {
  for (int64_t s : sizes)
    if (s > INT_MAX)
      return false;
  return true;
}

/// Sets OpenBLAS to one thread for a scope, so that the pool's threads can
/// each run their own small sgemm; restores the pool's count after. The
/// count is global, which is fine: one kernel runs at a time.
class SingleThreadedBlas {
public:
  explicit SingleThreadedBlas(ThreadPool &pool) : pool_(pool) { openblas_set_num_threads(1); }
  ~SingleThreadedBlas() { openblas_set_num_threads(pool_.threads()); }

private:
  ThreadPool &pool_;
};

} // namespace dtc::runtime::cpu

#endif // DTC_RUNTIME_CPU_GEMM_H
