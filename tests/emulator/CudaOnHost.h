//===- CudaOnHost.h - CUDA kernels run on the CPU, a fiber per thread -*- C++ -*-===//
//
// What a hand-written CUDA kernel (runtime/cuda/kernels/*.cu) needs to
// compile as host C++ and run on the CPU, so that its numerics, its
// indexing and its synchronisation are tested on every machine, not only
// where a GPU is lent. A test includes this header, then the kernel's .cu
// (its <cuda_bf16.h> and <mma.h> resolve to the shims beside this header,
// include/), and launches an entry point with `launch`.
//
// A block's threads are fibers (ucontext) run one at a time on the calling
// thread, each until it reaches a barrier: __syncthreads (every live thread
// of the block), or a warp's __syncwarp, __shfl_xor_sync or WMMA load or
// store (every lane of the warp, at the same kind of barrier). So the
// lanes of a warp move in lockstep from one warp barrier to the next, as
// code written for independent thread scheduling may assume, and no more:
// a kernel that reads another lane's shared-memory writes without a
// barrier between them reads them out of order here, as it may on a GPU
// (the threads run first to last between one pair of barriers, last to
// first between the next).
//
// What a launch checks, failing with a message rather than hanging or
// corrupting: barriers that cannot all be reached (a __syncthreads under
// divergent control flow, lanes of a warp at different kinds of barrier),
// dynamic shared memory over the device's 227 KiB or written past the
// launch's size, WMMA pointers not 32-byte aligned or strides not a
// multiple of 16 bytes. Shared memory starts as 0xff bytes (NaN in f32 and
// bf16), so a read of what no thread wrote shows in the results.
//
// Threads that have exited count as arrived at a __syncthreads (as on
// sm_70 and newer). A thread that spins on memory another thread writes
// is never preempted here: such kernels hang the emulator (dtc has none).
// Blocks run one after another, in grid order; one launch at a time.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_TESTS_EMULATOR_CUDAONHOST_H
#define DTC_TESTS_EMULATOR_CUDAONHOST_H

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

// CUDA's qualifiers, which mean nothing on the host.
#define __device__
#define __host__
#define __global__
#define __shared__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n)

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

/// The running fiber's thread and block, as a kernel reads them.
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

inline int min(int a, int b) { return a < b ? a : b; }

namespace dtc::cudaonhost {

/// The dynamic shared memory a kernel's `extern __shared__` array names:
/// the test defines the array (in the .cu's namespace, before including
/// it) and passes it to `launch`.
constexpr size_t kMaxSharedBytes = 227 * 1024; // an H100's, opted into

/// Runs `kernel` as `grid` x `block` threads with `sharedBytes` of dynamic
/// shared memory at `shared` (of `sharedCapacity` bytes); false with why
/// when the launch is refused or a check above fails.
bool launch(dim3 grid, dim3 block, size_t sharedBytes, unsigned char *shared,
            size_t sharedCapacity, const std::function<void()> &kernel, std::string &error);

/// Waits for every lane of the caller's warp to reach a barrier of this
/// `kind` (compared by name).
void warpBarrier(const char *kind);
/// Waits for every live thread of the block.
void blockBarrier();
/// Fails the running launch with `why` (from a check inside a kernel);
/// the fiber does not return.
[[noreturn]] void fail(const std::string &why);

/// The caller's lane.
inline unsigned lane() { return threadIdx.x & 31u; }
/// A slot per lane of the caller's warp, for exchanging values.
uint64_t *warpSlots();
/// Scratch of kWarpScratchBytes shared by the caller's warp over the
/// launch, zeros at its start (the WMMA shim's products, computed by one
/// lane and read by the others).
constexpr size_t kWarpScratchBytes = 64 * 1024;
unsigned char *warpScratch();
/// A counter of the caller's lane over the launch (its blocks in turn),
/// zero at its start.
uint64_t &laneCounter();

} // namespace dtc::cudaonhost

inline void __syncthreads() { dtc::cudaonhost::blockBarrier(); }
inline void __syncwarp(unsigned = 0xffffffffu) { dtc::cudaonhost::warpBarrier("__syncwarp"); }

/// The value of lane (lane ^ laneMask), exchanged through the warp's slots.
template <typename T> T __shfl_xor_sync(unsigned mask, T value, int laneMask, int width = 32) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "a shuffled value is at most 8 bytes");
  if (mask != 0xffffffffu || width != 32)
    dtc::cudaonhost::fail("__shfl_xor_sync: only full warps (mask 0xffffffff, width 32)");
  uint64_t *slots = dtc::cudaonhost::warpSlots();
  static const char kind[] = "__shfl_xor_sync";
  dtc::cudaonhost::warpBarrier(kind); // the slots' last values are read
  std::memcpy(&slots[dtc::cudaonhost::lane()], &value, sizeof(T));
  dtc::cudaonhost::warpBarrier(kind);
  T other;
  std::memcpy(&other, &slots[dtc::cudaonhost::lane() ^ unsigned(laneMask & 31)], sizeof(T));
  return other;
}

#endif // DTC_TESTS_EMULATOR_CUDAONHOST_H
