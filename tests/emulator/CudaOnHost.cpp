//===- CudaOnHost.cpp - a block's threads as fibers, and their barriers ---===//
#include "tests/emulator/CudaOnHost.h"

#include <ucontext.h>

#include <algorithm>
#include <memory>
#include <vector>

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace dtc::cudaonhost {
namespace {

constexpr size_t kStackBytes = 256 * 1024;

enum class State { Ready, AtWarpBarrier, AtBlockBarrier, Done };

struct Fiber {
  ucontext_t context;
  std::unique_ptr<char[]> stack;
  State state = State::Ready;
  const char *kind = nullptr; // at a warp barrier: which
  uint64_t counter = 0;
};

struct Warp {
  uint64_t slots[32] = {};
  alignas(64) unsigned char scratch[kWarpScratchBytes];
};

/// The launch in progress.
struct Launch {
  const std::function<void()> *kernel = nullptr;
  std::vector<Fiber> fibers;
  std::vector<std::unique_ptr<Warp>> warps;
  ucontext_t scheduler;
  Fiber *running = nullptr;
  std::string error; // set by fail()
};
Launch *current = nullptr;

void suspend(Fiber &fiber) { swapcontext(&fiber.context, &current->scheduler); }

void threadMain() {
  (*current->kernel)();
  current->running->state = State::Done;
  suspend(*current->running); // not resumed
}

std::string where() {
  return "block (" + std::to_string(blockIdx.x) + ", " + std::to_string(blockIdx.y) + ", " +
         std::to_string(blockIdx.z) + ")";
}

/// The barriers that can be passed, released; false when no thread can go
/// on (a deadlock on a GPU), with why.
bool release(Launch &l, bool &done, std::string &why) {
  size_t live = 0, atBlock = 0;
  for (const Fiber &f : l.fibers) {
    live += f.state != State::Done;
    atBlock += f.state == State::AtBlockBarrier;
  }
  done = live == 0;
  if (done)
    return true;
  bool released = false;
  if (atBlock == live) {
    for (Fiber &f : l.fibers)
      if (f.state == State::AtBlockBarrier)
        f.state = State::Ready;
    return true;
  }
  for (size_t w = 0; w * 32 < l.fibers.size(); ++w) {
    size_t begin = w * 32, end = std::min(l.fibers.size(), begin + 32), at = 0, exited = 0;
    const char *kind = nullptr;
    bool same = true;
    for (size_t t = begin; t < end; ++t) {
      const Fiber &f = l.fibers[t];
      exited += f.state == State::Done;
      if (f.state != State::AtWarpBarrier)
        continue;
      ++at;
      same = same && (!kind || std::strcmp(kind, f.kind) == 0);
      kind = f.kind;
    }
    if (at == 0 || at + exited < end - begin)
      continue;
    if (exited || !same) {
      why = "warp " + std::to_string(w) + " of " + where() + ": " +
            (exited ? std::string("lanes exited before the others' ") + kind
                    : std::string("lanes at different warp barriers"));
      return false;
    }
    for (size_t t = begin; t < end; ++t)
      l.fibers[t].state = State::Ready;
    released = true;
  }
  if (released)
    return true;
  why = "deadlock in " + where() + ": " + std::to_string(atBlock) + " of " +
        std::to_string(live) + " live threads at __syncthreads, the others at warp barriers "
        "their warps cannot all reach";
  return false;
}

/// Runs one block's threads to their end.
bool runBlock(Launch &l, std::string &error) {
  for (size_t t = 0; t < l.fibers.size(); ++t) {
    Fiber &f = l.fibers[t];
    f.state = State::Ready;
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.get();
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = nullptr;
    makecontext(&f.context, threadMain, 0);
  }
  // Between two barriers the threads run one after another, first to last
  // in one round, last to first in the next: a kernel that needs a barrier
  // it lacks reads another thread's writes too early in one of the two.
  for (size_t round = 0;; ++round) {
    for (size_t i = 0; i < l.fibers.size(); ++i) {
      size_t t = round % 2 ? l.fibers.size() - 1 - i : i;
      Fiber &f = l.fibers[t];
      if (f.state != State::Ready)
        continue;
      threadIdx = {unsigned(t) % blockDim.x, unsigned(t) / blockDim.x % blockDim.y,
                   unsigned(t) / (blockDim.x * blockDim.y)};
      l.running = &f;
      swapcontext(&l.scheduler, &f.context);
      l.running = nullptr;
      if (!l.error.empty()) {
        error = l.error + " (thread " + std::to_string(t) + " of " + where() + ")";
        return false;
      }
    }
    bool done = false;
    if (!release(l, done, error))
      return false;
    if (done)
      return true;
  }
}

} // namespace

void warpBarrier(const char *kind) {
  Fiber &f = *current->running;
  f.state = State::AtWarpBarrier;
  f.kind = kind;
  suspend(f);
}

void blockBarrier() {
  Fiber &f = *current->running;
  f.state = State::AtBlockBarrier;
  suspend(f);
}

void fail(const std::string &why) {
  Fiber &f = *current->running;
  current->error = why;
  f.state = State::Done;
  suspend(f);
  __builtin_unreachable(); // a failed launch resumes none of its threads
}

uint64_t *warpSlots() {
  size_t t = size_t(current->running - current->fibers.data());
  return current->warps[t / 32]->slots;
}

unsigned char *warpScratch() {
  size_t t = size_t(current->running - current->fibers.data());
  return current->warps[t / 32]->scratch;
}

uint64_t &laneCounter() { return current->running->counter; }

bool launch(dim3 grid, dim3 block, size_t sharedBytes, unsigned char *shared,
            size_t sharedCapacity, const std::function<void()> &kernel, std::string &error) {
  size_t threads = size_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
      grid.y > 65535 || grid.z > 65535) {
    error = "invalid launch: grid (" + std::to_string(grid.x) + ", " + std::to_string(grid.y) +
            ", " + std::to_string(grid.z) + "), " + std::to_string(threads) + " threads a block";
    return false;
  }
  if (sharedBytes > kMaxSharedBytes || sharedBytes > sharedCapacity) {
    error = "launch asks for " + std::to_string(sharedBytes) + " bytes of shared memory; a " +
            "block has at most " + std::to_string(std::min(kMaxSharedBytes, sharedCapacity));
    return false;
  }
  Launch l;
  l.kernel = &kernel;
  l.fibers.resize(threads);
  for (Fiber &f : l.fibers)
    f.stack.reset(new char[kStackBytes]);
  for (size_t w = 0; w * 32 < threads; ++w)
    l.warps.push_back(std::make_unique<Warp>());
  current = &l;
  gridDim = grid;
  blockDim = block;
  bool ok = true;
  for (unsigned z = 0; ok && z < grid.z; ++z)
    for (unsigned y = 0; ok && y < grid.y; ++y)
      for (unsigned x = 0; ok && x < grid.x; ++x) {
        blockIdx = {x, y, z};
        std::memset(shared, 0xff, sharedCapacity);
        ok = runBlock(l, error);
        for (size_t at = sharedBytes; ok && at < sharedCapacity; ++at)
          if (shared[at] != 0xff) {
            error = where() + " wrote shared memory at byte " + std::to_string(at) +
                    ", past the launch's " + std::to_string(sharedBytes);
            ok = false;
          }
      }
  current = nullptr;
  return ok;
}

} // namespace dtc::cudaonhost
