//===- ThreadPool.h - a fixed pool of worker threads -------------*- C++ -*-===//
#ifndef DTC_RUNTIME_CPU_THREADPOOL_H
#define DTC_RUNTIME_CPU_THREADPOOL_H

#include <cstdint>
#include <functional>

namespace dtc::runtime::cpu {

/// A fixed set of threads (the calling thread is one of them) that split
/// loops. Also sets OpenBLAS's thread count, so `--threads N` bounds both.
class ThreadPool {
public:
  /// `threads` <= 0: one per core.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  int threads() const;

  /// Calls `body(begin, end)` on disjoint ranges covering [0, n), in
  /// parallel, in chunks of at least `grain` iterations; returns when all
  /// are done. Not reentrant: `body` must not call parallelFor.
  void parallelFor(int64_t n, int64_t grain,
                   const std::function<void(int64_t, int64_t)> &body);

private:
  struct State;
  State *state_;
};

} // namespace dtc::runtime::cpu

#endif // DTC_RUNTIME_CPU_THREADPOOL_H
