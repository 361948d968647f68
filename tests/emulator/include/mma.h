//===- mma.h - the emulator's WMMA (CudaOnHost.h) ----------------*- C++ -*-===//
//
// What a kernel compiled for the host (tests/emulator) finds for CUDA's
// <mma.h>: nvcuda::wmma's 16x16x16 fragments, f32 and bf16 operands with
// f32 accumulators. Every lane holds its fragment's whole tile (on a GPU
// the warp's lanes hold parts of it), so an element-wise loop over `x`
// still sees each element once per tile. Loads and stores are warp
// barriers, as the warp-wide operations they are, and check the pointer
// and stride rules a GPU faults or misreads on; a product is computed by
// the warp's first lane to reach it, in f32 with exact bf16 inputs, and
// read by the others.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_TESTS_EMULATOR_MMA_H
#define DTC_TESTS_EMULATOR_MMA_H

#include "tests/emulator/CudaOnHost.h"
#include <cuda_bf16.h>

#include <type_traits>

namespace nvcuda::wmma {

struct matrix_a;
struct matrix_b;
struct accumulator;
struct row_major;
struct col_major;
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator has 16x16x16 fragments only");
  static constexpr int num_elements = 256;
  T x[256]; // the tile, row-major: a M x K, b K x N, an accumulator M x N
};

namespace detail {

inline float value(float x) { return x; }
inline float value(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> T as(float x);
template <> inline float as<float>(float x) { return x; }
template <> inline __nv_bfloat16 as<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/// The rules a GPU's load_matrix_sync and store_matrix_sync hold to.
template <typename T> void checkOperand(const T *p, unsigned ldm, const char *what) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0)
    dtc::cudaonhost::fail(std::string(what) + ": the pointer is not 256-bit aligned");
  if (ldm * sizeof(T) % 16 != 0)
    dtc::cudaonhost::fail(std::string(what) + ": ldm " + std::to_string(ldm) +
                          " is not a multiple of 16 bytes");
}

/// Element (r, c) of a tile stored at p, row-major (rows ldm apart) or not.
template <typename T> T at(const T *p, unsigned ldm, bool rowMajor, int r, int c) {
  return rowMajor ? p[size_t(r) * ldm + size_t(c)] : p[size_t(c) * ldm + size_t(r)];
}

template <typename Layout> constexpr bool rowMajor() { return std::is_same_v<Layout, row_major>; }

} // namespace detail

template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout> &f, const T *p, unsigned ldm) {
  static_assert(!std::is_same_v<Use, accumulator>, "an accumulator's load takes a layout");
  dtc::cudaonhost::warpBarrier("wmma::load_matrix_sync");
  detail::checkOperand(p, ldm, "wmma::load_matrix_sync");
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r * 16 + c] = detail::at(p, ldm, detail::rowMajor<Layout>(), r, c);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                             unsigned ldm, layout_t layout) {
  dtc::cudaonhost::warpBarrier("wmma::load_matrix_sync");
  detail::checkOperand(p, ldm, "wmma::load_matrix_sync");
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r * 16 + c] = detail::at(p, ldm, layout == mem_row_major, r, c);
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ldm, layout_t layout) {
  dtc::cudaonhost::warpBarrier("wmma::store_matrix_sync");
  detail::checkOperand(p, ldm, "wmma::store_matrix_sync");
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) {
      size_t at =
          layout == mem_row_major ? size_t(r) * ldm + size_t(c) : size_t(c) * ldm + size_t(r);
      p[at] = f.x[r * 16 + c];
    }
}

template <typename Use, typename T, typename Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, T value) {
  for (T &x : f.x)
    x = value;
}

/// d = a b + c. Every lane of the warp must hold the same a, b and c (the
/// same tiles loaded): the first lane to make its n-th product computes
/// it into the warp's scratch (a ring of them, so that lanes a few
/// products apart find theirs), the others check that their operands are
/// the same and copy it.
template <typename T, typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
              const fragment<matrix_a, 16, 16, 16, T, LayoutA> &a,
              const fragment<matrix_b, 16, 16, 16, T, LayoutB> &b,
              const fragment<accumulator, 16, 16, 16, float> &c, bool = false) {
  struct Product {
    uint64_t nth;
    T a[256], b[256];
    float c[256], d[256];
  };
  constexpr size_t kRing = dtc::cudaonhost::kWarpScratchBytes / sizeof(Product);
  static_assert(kRing >= 4, "the warp's scratch holds a few products");
  uint64_t nth = ++dtc::cudaonhost::laneCounter();
  Product &slot = reinterpret_cast<Product *>(dtc::cudaonhost::warpScratch())[nth % kRing];
  if (slot.nth == nth) {
    if (std::memcmp(slot.a, a.x, sizeof slot.a) || std::memcmp(slot.b, b.x, sizeof slot.b) ||
        std::memcmp(slot.c, c.x, sizeof slot.c))
      dtc::cudaonhost::fail("wmma::mma_sync: the warp's lanes hold different fragments");
    std::memcpy(d.x, slot.d, sizeof slot.d);
    return;
  }
  if (slot.nth > nth)
    dtc::cudaonhost::fail("wmma::mma_sync: a lane fell a ring of products behind its warp");
  std::memcpy(slot.a, a.x, sizeof slot.a);
  std::memcpy(slot.b, b.x, sizeof slot.b);
  std::memcpy(slot.c, c.x, sizeof slot.c);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      float s = c.x[i * 16 + j];
      for (int k = 0; k < 16; ++k)
        s = std::fma(detail::value(a.x[i * 16 + k]), detail::value(b.x[k * 16 + j]), s);
      slot.d[i * 16 + j] = s;
    }
  slot.nth = nth;
  std::memcpy(d.x, slot.d, sizeof slot.d);
}

} // namespace nvcuda::wmma

#endif // DTC_TESTS_EMULATOR_MMA_H
