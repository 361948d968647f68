//===- ThreadPool.h - a fixed pool of worker threads -------------*- C++ -*-===//
#ifndef DTC_RUNTIME_CPU_THREADPOOL_H
#define DTC_RUNTIME_CPU_THREADPOOL_H

#include <cstdint>
#include <functional>

namespace dtc::runtime::cpu {

/// A fixed number of threads (the calling thread is one of them) that split
/// loops: OpenMP's team, shared with oneDNN. Also sets OpenBLAS's thread
/// count, so `--threads N` bounds every library.
class ThreadPool {
public:
  /// `threads` <= 0: one per core.
  explicit ThreadPool(int threads);
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  int threads() const { return threads_; }

  /// Calls `body(begin, end)` on disjoint ranges covering [0, n), in
  /// parallel, in chunks of at least `grain` iterations; returns when all
  /// are done. Not reentrant: `body` must not call parallelFor.
  void parallelFor(int64_t n, int64_t grain,
                   const std::function<void(int64_t, int64_t)> &body);

  /// Calls `task(i)` for each i in [0, n), each on one thread, the
  /// threads taking the next one as they come free (so put the longest
  /// first); returns when all are done. Inside a task, parallelFor runs its
  /// loop on the task's thread alone.
  void runTasks(int64_t n, const std::function<void(int64_t)> &task);

private:
  int threads_;
};

} // namespace dtc::runtime::cpu

#endif // DTC_RUNTIME_CPU_THREADPOOL_H
