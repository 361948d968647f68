//===- ThreadPool.cpp -----------------------------------------------------===//
#include "runtime/cpu/ThreadPool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

extern "C" void openblas_set_num_threads(int);

namespace dtc::runtime::cpu {

// Workers sleep on a condition variable between loops; a loop is published
// as a generation number, and its chunks are claimed with an atomic counter
// so uneven chunks balance themselves.
struct ThreadPool::State {
  int threads = 1;
  std::vector<std::thread> workers;
  std::mutex mutex;
  std::condition_variable wake, done;
  uint64_t generation = 0;
  bool stopping = false;
  // The current loop.
  const std::function<void(int64_t, int64_t)> *body = nullptr;
  int64_t n = 0, chunk = 1;
  std::atomic<int64_t> next{0};
  int busy = 0;

  void work() {
    for (;;) {
      int64_t begin = next.fetch_add(chunk);
      if (begin >= n)
        return;
      (*body)(begin, std::min(n, begin + chunk));
    }
  }

  void workerLoop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return stopping || generation != seen; });
        if (stopping)
          return;
        seen = generation;
      }
      work();
      std::lock_guard<std::mutex> lock(mutex);
      if (--busy == 0)
        done.notify_one();
    }
  }
};

ThreadPool::ThreadPool(int threads) : state_(new State) {
  if (threads <= 0)
    threads = std::max(1u, std::thread::hardware_concurrency());
  state_->threads = threads;
  for (int i = 1; i < threads; ++i)
    state_->workers.emplace_back([s = state_] { s->workerLoop(); });
  openblas_set_num_threads(threads);
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
  }
  state_->wake.notify_all();
  for (auto &t : state_->workers)
    t.join();
  delete state_;
}

int ThreadPool::threads() const { return state_->threads; }

void ThreadPool::parallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)> &body) {
  if (n <= 0)
    return;
  grain = std::max<int64_t>(grain, 1);
  int64_t chunks = std::min<int64_t>(n / grain, int64_t(state_->threads) * 4);
  if (state_->threads == 1 || chunks <= 1) {
    body(0, n);
    return;
  }
  State &s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.body = &body;
    s.n = n;
    s.chunk = (n + chunks - 1) / chunks;
    s.next.store(0);
    s.busy = int(s.workers.size());
    ++s.generation;
  }
  s.wake.notify_all();
  s.work();
  std::unique_lock<std::mutex> lock(s.mutex);
  s.done.wait(lock, [&] { return s.busy == 0; });
}

} // namespace dtc::runtime::cpu
