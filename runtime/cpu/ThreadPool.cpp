//===- ThreadPool.cpp -----------------------------------------------------===//
#include "runtime/cpu/ThreadPool.h"

#include <algorithm>
#include <atomic>
#include <thread>

#if defined(__x86_64__) || defined(__SSE__)
#include <xmmintrin.h>
#endif

// The pool is OpenMP's (libgomp's) team: oneDNN, which runs our matmuls and
// convolutions, is built on it, and two sets of threads on the same cores
// would spin against each other between kernels. We call libgomp's entry
// point directly: clang's `#pragma omp` targets LLVM's libomp instead, and
// two OpenMP runtimes must not share a process.
extern "C" {
void GOMP_parallel(void (*fn)(void *), void *data, unsigned numThreads, unsigned flags);
void omp_set_num_threads(int);
int omp_get_thread_num();
int omp_get_num_threads();
int omp_in_parallel();
void openblas_set_num_threads(int);
}

namespace dtc::runtime::cpu {

namespace {

/// Subnormal floats are flushed to zero, as results (FTZ) and as operands
/// (DAZ), on every thread that runs kernels: an operation on a subnormal
/// takes a microcode assist of a hundred cycles or more. A model trained to
/// a small loss fills its gradients and Adam's moments with them, and its
/// steps slowed down several times over once they did.
/// Values that small (below 1.2e-38) carry nothing a step needs.
void flushSubnormals() {
#if defined(__x86_64__) || defined(__SSE__)
  constexpr unsigned kFlushToZero = 0x8000, kDenormalsAreZero = 0x0040;
  unsigned csr = _mm_getcsr();
  if ((csr & (kFlushToZero | kDenormalsAreZero)) != (kFlushToZero | kDenormalsAreZero))
    _mm_setcsr(csr | kFlushToZero | kDenormalsAreZero);
#endif
}

/// One loop over [0, n), cut into as many contiguous ranges as threads run
/// it: thread t takes the t-th. Fixed ranges rather than chunks claimed as
/// threads come free: consecutive instructions over the same rows then give
/// each thread the rows it made itself, still in its core's cache (claimed
/// chunks moved them between cores and cost a tenth of the elementwise time
/// at 2 threads); the kernels' items are alike in cost.
struct Loop {
  const std::function<void(int64_t, int64_t)> *body;
  int64_t n;

  static void work(void *data) {
    flushSubnormals();
    Loop &loop = *static_cast<Loop *>(data);
    int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();
    int64_t begin = loop.n * t / threads, end = loop.n * (t + 1) / threads;
    if (begin < end)
      (*loop.body)(begin, end);
  }
};

/// Tasks claimed one at a time from a shared counter.
struct Tasks {
  const std::function<void(int64_t)> *task;
  int64_t n;
  std::atomic<int64_t> next{0};

  static void work(void *data) {
    flushSubnormals();
    Tasks &tasks = *static_cast<Tasks *>(data);
    for (int64_t i = tasks.next.fetch_add(1); i < tasks.n; i = tasks.next.fetch_add(1))
      (*tasks.task)(i);
  }
};

} // namespace

ThreadPool::ThreadPool(int threads)
    : threads_(threads > 0 ? threads
                           : int(std::max(1u, std::thread::hardware_concurrency()))) {
  openblas_set_num_threads(threads_);
  // oneDNN sizes its work split when a primitive is created, from the
  // calling thread's OpenMP count: set it before any kernel is prepared.
  omp_set_num_threads(threads_);
  flushSubnormals();
}

void ThreadPool::parallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)> &body) {
  if (n <= 0)
    return;
  flushSubnormals();
  grain = std::max<int64_t>(grain, 1);
  int64_t chunks = std::min<int64_t>(n / grain, int64_t(threads_) * 4);
  if (threads_ == 1 || chunks <= 1 || omp_in_parallel()) { // a task's loop: on its thread
    body(0, n);
    return;
  }
  Loop loop{&body, n};
  GOMP_parallel(&Loop::work, &loop, unsigned(std::min<int64_t>(threads_, chunks)), 0);
}

void ThreadPool::runTasks(int64_t n, const std::function<void(int64_t)> &task) {
  if (n <= 0)
    return;
  flushSubnormals();
  if (threads_ == 1 || n == 1 || omp_in_parallel()) {
    for (int64_t i = 0; i < n; ++i)
      task(i);
    return;
  }
  Tasks tasks{&task, n};
  GOMP_parallel(&Tasks::work, &tasks, unsigned(std::min<int64_t>(threads_, n)), 0);
}

} // namespace dtc::runtime::cpu
