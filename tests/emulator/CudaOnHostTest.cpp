//===- CudaOnHostTest.cpp - the emulator's threads, barriers and checks ---===//
//
// Small kernels that show the emulator (CudaOnHost.h) runs CUDA's
// semantics: every thread of every block once, __syncthreads ordering
// shared memory, shuffles exchanging lanes, WMMA products; and that it
// reports what would hang or misbehave on a GPU instead of running it.
//
//===----------------------------------------------------------------------===//
#include <gtest/gtest.h>

#include <vector>

#include "tests/emulator/CudaOnHost.h"
#include <mma.h>

namespace {

alignas(128) unsigned char smem[dtc::cudaonhost::kMaxSharedBytes];

using dtc::cudaonhost::launch;

TEST(CudaOnHost, RunsEveryThreadOfEveryBlockOnce) {
  std::vector<int> seen(3 * 2 * 96, 0);
  std::string error;
  ASSERT_TRUE(launch({3, 2, 1}, {96, 1, 1}, 0, smem, sizeof smem,
                     [&] {
                       unsigned block = blockIdx.y * gridDim.x + blockIdx.x;
                       seen[block * blockDim.x + threadIdx.x] += 1;
                     },
                     error))
      << error;
  for (int n : seen)
    EXPECT_EQ(n, 1);
}

// Each thread writes its slot, then reads its neighbour's: right only if
// __syncthreads holds every thread until all have written.
TEST(CudaOnHost, SyncthreadsOrdersSharedMemory) {
  std::vector<int> got(128);
  std::string error;
  ASSERT_TRUE(launch({1, 1, 1}, {128, 1, 1}, 128 * sizeof(int), smem, sizeof smem,
                     [&] {
                       int *shared = reinterpret_cast<int *>(smem);
                       shared[threadIdx.x] = int(threadIdx.x) * 10;
                       __syncthreads();
                       got[threadIdx.x] = shared[(threadIdx.x + 1) % 128];
                     },
                     error))
      << error;
  for (int t = 0; t < 128; ++t)
    EXPECT_EQ(got[size_t(t)], (t + 1) % 128 * 10);
}

TEST(CudaOnHost, ShufflesExchangeLanes) {
  std::vector<float> sums(64), partners(64);
  std::string error;
  ASSERT_TRUE(launch({1, 1, 1}, {64, 1, 1}, 0, smem, sizeof smem,
                     [&] {
                       float x = float(threadIdx.x);
                       partners[threadIdx.x] = __shfl_xor_sync(0xffffffffu, x, 5);
                       for (int o = 16; o > 0; o >>= 1)
                         x += __shfl_xor_sync(0xffffffffu, x, o);
                       sums[threadIdx.x] = x;
                     },
                     error))
      << error;
  for (int t = 0; t < 64; ++t) {
    EXPECT_EQ(partners[size_t(t)], float(t ^ 5));
    int first = t / 32 * 32;
    EXPECT_EQ(sums[size_t(t)], float(32 * first + 31 * 32 / 2)) << "lane " << t;
  }
}

TEST(CudaOnHost, WmmaMultipliesTiles) {
  using namespace nvcuda;
  alignas(32) static __nv_bfloat16 a[16 * 16], b[16 * 16];
  alignas(32) static float c[16 * 16];
  for (int i = 0; i < 256; ++i) {
    a[i] = __float2bfloat16_rn(float(i % 7) - 3);
    b[i] = __float2bfloat16_rn(float(i % 5) * 0.5f);
  }
  std::string error;
  ASSERT_TRUE(launch({1, 1, 1}, {32, 1, 1}, 0, smem, sizeof smem,
                     [&] {
                       wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>
                           fa;
                       wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major>
                           fb;
                       wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
                       wmma::fill_fragment(acc, 1.f);
                       wmma::load_matrix_sync(fa, a, 16);
                       wmma::load_matrix_sync(fb, b, 16);
                       wmma::mma_sync(acc, fa, fb, acc);
                       wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
                     },
                     error))
      << error;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      float want = 1.f;
      for (int k = 0; k < 16; ++k) // b col-major: element (k, j) at j * 16 + k
        want += __bfloat162float(a[i * 16 + k]) * __bfloat162float(b[j * 16 + k]);
      EXPECT_EQ(c[i * 16 + j], want) << i << ", " << j;
    }
}

// What would hang a GPU is reported: a __syncthreads that half a warp
// reaches while the other half waits for it at __syncwarp; a warp's lanes
// at different barriers. (Threads that have exited count as arrived at a
// __syncthreads, as on sm_70 and newer.)
TEST(CudaOnHost, ReportsBarriersThatCannotAllBeReached) {
  std::string error;
  EXPECT_TRUE(launch({1, 1, 1}, {64, 1, 1}, 0, smem, sizeof smem,
                     [&] {
                       if (threadIdx.x < 32)
                         __syncthreads();
                     },
                     error))
      << error;
  EXPECT_FALSE(launch({1, 1, 1}, {64, 1, 1}, 0, smem, sizeof smem,
                      [&] {
                        if (threadIdx.x < 16)
                          __syncthreads();
                        else
                          __syncwarp();
                      },
                      error));
  EXPECT_NE(error.find("deadlock"), std::string::npos) << error;
  error.clear();
  EXPECT_FALSE(launch({1, 1, 1}, {32, 1, 1}, 0, smem, sizeof smem,
                      [&] {
                        if (threadIdx.x == 3)
                          (void)__shfl_xor_sync(0xffffffffu, 1, 1);
                        else
                          __syncwarp();
                      },
                      error));
  EXPECT_NE(error.find("different warp barriers"), std::string::npos) << error;
}

TEST(CudaOnHost, ReportsSharedMemoryWrittenPastTheLaunchs) {
  std::string error;
  EXPECT_FALSE(launch({1, 1, 1}, {32, 1, 1}, 64, smem, sizeof smem,
                      [&] { smem[64 + threadIdx.x] = 0; }, error));
  EXPECT_NE(error.find("past the launch's 64"), std::string::npos) << error;
  EXPECT_FALSE(launch({1, 1, 1}, {32, 1, 1}, dtc::cudaonhost::kMaxSharedBytes + 1, smem,
                      sizeof smem, [] {}, error));
  EXPECT_NE(error.find("shared memory"), std::string::npos) << error;
}

TEST(CudaOnHost, ReportsWmmaOperandsAGpuWouldMisread) {
  using namespace nvcuda;
  alignas(32) static float c[16 * 24];
  std::string error;
  EXPECT_FALSE(launch({1, 1, 1}, {32, 1, 1}, 0, smem, sizeof smem,
                      [&] {
                        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
                        wmma::load_matrix_sync(acc, c + 2, 24, wmma::mem_row_major);
                      },
                      error));
  EXPECT_NE(error.find("not 256-bit aligned"), std::string::npos) << error;
  EXPECT_FALSE(launch({1, 1, 1}, {32, 1, 1}, 0, smem, sizeof smem,
                      [&] {
                        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
                        wmma::load_matrix_sync(acc, c, 18, wmma::mem_row_major);
                      },
                      error));
  EXPECT_NE(error.find("ldm 18"), std::string::npos) << error;
}

} // namespace
