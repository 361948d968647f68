//===- FlashAttention.cu - fused attention and its gradients -------------===//
//
// Flash-attention-2 style kernels (Dao 2023) for the plan's attention and
// attention_backward instructions, compiled to PTX at build time
// (runtime/CMakeLists.txt) and loaded by AttentionKernel.cpp. Tiles and
// shared-memory layouts come from AttentionTiles.h, which the host's
// launch arithmetic (AttentionLaunch.cpp) shares.
//
// A block owns rows of one (batch, head): a warp 16 of them. The scores of
// a warp's rows against a tile of the other side go to shared memory (f32),
// are turned into probabilities (or dS) in place, in the operand type, and
// multiplied into the warp's f32 accumulator in shared memory. The two
// products are the only dtype-specific code: bf16 on tensor cores (WMMA
// m16n16k16, f32 accumulation), f32 by FMA (no TF32: f32 results match
// the CPU within 1e-4). expf and logf are the accurate library functions
// (no --use_fast_math).
//
// Backward, without atomics: dtc_attention_grad_q_* (a block per query
// tile, looping over key tiles) writes grad_q and each row's
// Delta = rowsum(grad_out * out) into scratch; dtc_attention_grad_kv_*
// (a block per key tile, looping over query tiles) then reads Delta and
// writes grad_k and grad_v. Both recompute P from lse.
//
// Grouped-query attention (`group` query heads per key-value head): query
// head bh reads k's and v's head bh / group; a grad_kv block owns a key
// tile of one key-value head and loops over its group's query heads,
// summing their contributions before it writes.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/kernels/AttentionTiles.h"

#include <cuda_bf16.h>
#include <mma.h>

#include <cstdint>

using namespace nvcuda;
using namespace dtc::runtime::cuda::attention;
using bf16 = __nv_bfloat16;

namespace {

__device__ inline float toFloat(float x) { return x; }
__device__ inline float toFloat(bf16 x) { return __bfloat162float(x); }
template <typename T> __device__ inline T fromFloat(float x);
template <> __device__ inline float fromFloat<float>(float x) { return x; }
template <> __device__ inline bf16 fromFloat<bf16>(float x) { return __float2bfloat16_rn(x); }

/// Where a (batch, head)'s [rows, cols] operand lies in q, k, v, the
/// output or a gradient: heads first, [..., H, S, D] (`heads` 0), or
/// [..., S, H, D] (`heads` H: AttentionDims.bshd), its rows H x cols apart;
/// a piece of a packed [..., S, 3, H, D] buffer (`pieces` 3, the pointer
/// at the piece's first element: AttentionDims.packed) 3 H x cols apart;
/// of an interleaved [..., S, H, 3, D] one the same, its heads `headStride`
/// 3 x cols apart (AttentionDims.interleaved).
struct Layout {
  int heads, pieces, headStride;
  /// Element (row, 0) of head bh's operand of `rows` rows.
  __device__ size_t at(size_t bh, int rows, int row, int cols) const {
    return heads ? ((bh / size_t(heads) * size_t(rows) + size_t(row)) * size_t(heads * pieces) +
                    bh % size_t(heads) * size_t(headStride)) * size_t(cols)
                 : (bh * size_t(rows) + size_t(row)) * size_t(cols);
  }
  /// The step between an operand's rows.
  __device__ int ld(int cols) const { return heads ? heads * pieces * cols : cols; }
};

/// `rows` x `cols` of a row-major source, its rows `srcLd` apart, into
/// shared rows of stride `ld`, zero-filled to `tileRows` x `padCols`;
/// 16-byte loads where the rows allow.
template <typename T>
__device__ void loadTile(T *dst, int ld, const T *src, int srcLd, int rows, int cols,
                         int tileRows, int padCols) {
  constexpr int kVector = 16 / int(sizeof(T));
  if (cols % kVector == 0 && srcLd % kVector == 0 &&
      (reinterpret_cast<uintptr_t>(src) & 15) == 0) {
    int chunks = padCols / kVector;
    for (int at = threadIdx.x; at < tileRows * chunks; at += blockDim.x) {
      int r = at / chunks, c = at % chunks * kVector;
      uint4 x = make_uint4(0, 0, 0, 0);
      if (r < rows && c < cols)
        x = *reinterpret_cast<const uint4 *>(src + size_t(r) * srcLd + c);
      *reinterpret_cast<uint4 *>(dst + r * ld + c) = x;
    }
    return;
  }
  for (int at = threadIdx.x; at < tileRows * padCols; at += blockDim.x) {
    int r = at / padCols, c = at % padCols;
    dst[r * ld + c] = r < rows && c < cols ? src[size_t(r) * srcLd + c] : fromFloat<T>(0.f);
  }
}

__device__ void zeroShared(float *p, int n) {
  for (int at = threadIdx.x; at < n; at += blockDim.x)
    p[at] = 0.f;
}

// The warp's two products. C (f32, shared) is the warp's 16 rows.

/// C[16 x N] = A[16 x kd] B[N x kd]^T by FMA: lane (g, c) = (lane / 8,
/// lane % 8) computes rows 4g..4g+3, columns c + 8j.
template <int N>
__device__ void productABt(float *C, int ldc, const float *A, int lda, const float *B, int ldb,
                           int kd) {
  int lane = threadIdx.x & 31, g = lane >> 3, c = lane & 7;
  float acc[4][N / 8] = {};
  for (int k = 0; k < kd; ++k) {
    float a[4], b[N / 8];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      a[i] = A[(4 * g + i) * lda + k];
#pragma unroll
    for (int j = 0; j < N / 8; ++j)
      b[j] = B[(c + 8 * j) * ldb + k];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < N / 8; ++j)
        acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < N / 8; ++j)
      C[(4 * g + i) * ldc + c + 8 * j] = acc[i][j];
}

/// C[16 x cols] += A[16 x K] B[K x cols] by FMA (cols a multiple of 16, at
/// most kMaxHeadDim), the lanes placed as in productABt.
template <int K>
__device__ void productABAcc(float *C, int ldc, const float *A, int lda, const float *B, int ldb,
                             int cols) {
  constexpr int kCols = kMaxHeadDim / 8;
  int lane = threadIdx.x & 31, g = lane >> 3, c = lane & 7;
  float acc[4][kCols];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < kCols; ++j)
      acc[i][j] = 8 * j < cols ? C[(4 * g + i) * ldc + c + 8 * j] : 0.f;
#pragma unroll 4
  for (int k = 0; k < K; ++k) {
    float a[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      a[i] = A[(4 * g + i) * lda + k];
#pragma unroll
    for (int j = 0; j < kCols; ++j)
      if (8 * j < cols) {
        float b = B[k * ldb + c + 8 * j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
          acc[i][j] = fmaf(a[i], b, acc[i][j]);
      }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < kCols; ++j)
      if (8 * j < cols)
        C[(4 * g + i) * ldc + c + 8 * j] = acc[i][j];
}

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/// C[16 x N] = A[16 x kd] B[N x kd]^T on tensor cores (B^T read as a
/// column-major operand).
template <int N>
__device__ void productABt(float *C, int ldc, const bf16 *A, int lda, const bf16 *B, int ldb,
                           int kd) {
  FragAcc acc[N / 16];
#pragma unroll
  for (int n = 0; n < N / 16; ++n)
    wmma::fill_fragment(acc[n], 0.f);
  for (int k = 0; k < kd; k += 16) {
    FragA a;
    wmma::load_matrix_sync(a, A + k, unsigned(lda));
#pragma unroll
    for (int n = 0; n < N / 16; ++n) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;
      wmma::load_matrix_sync(b, B + n * 16 * ldb + k, unsigned(ldb));
      wmma::mma_sync(acc[n], a, b, acc[n]);
    }
  }
#pragma unroll
  for (int n = 0; n < N / 16; ++n)
    wmma::store_matrix_sync(C + n * 16, acc[n], unsigned(ldc), wmma::mem_row_major);
}

/// C[16 x cols] += A[16 x K] B[K x cols] on tensor cores.
template <int K>
__device__ void productABAcc(float *C, int ldc, const bf16 *A, int lda, const bf16 *B, int ldb,
                             int cols) {
  FragA a[K / 16];
#pragma unroll
  for (int k = 0; k < K / 16; ++k)
    wmma::load_matrix_sync(a[k], A + 16 * k, unsigned(lda));
  for (int c0 = 0; c0 < cols; c0 += 16) {
    FragAcc acc;
    wmma::load_matrix_sync(acc, C + c0, unsigned(ldc), wmma::mem_row_major);
#pragma unroll
    for (int k = 0; k < K / 16; ++k) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
      wmma::load_matrix_sync(b, B + 16 * k * ldb + c0, unsigned(ldb));
      wmma::mma_sync(acc, a[k], b, acc);
    }
    wmma::store_matrix_sync(C + c0, acc, unsigned(ldc), wmma::mem_row_major);
  }
}

/// The bias added to the scaled scores (AttentionDims in AttentionLaunch.h):
/// head bh's value for query i and key j; 0 without one. A -inf hides the
/// key as the causal mask does.
struct Bias {
  const float *p;
  int per, row;          // heads per outer index; the step between its rows
  long long outer, inner; // the steps between outer indices and heads
  __device__ float at(size_t bh, int i, int j) const {
    if (!p)
      return 0.f;
    long long h = (long long)bh;
    return p[(h / per) * outer + (h % per) * inner + (long long)i * row + j];
  }
};

/// Where a block's kernel finds its (batch, head) and its warp's rows.
struct Place {
  size_t bh = blockIdx.y;
  int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  int row = lane >> 1, half = lane & 1; // in the softmax steps: a row per lane pair
};

template <typename T>
__device__ void forward(const T *q, const T *k, const T *v, T *out, float *lse, int sq, int sk,
                        int hd, int hdv, float scale, bool causal, int group, Layout L, Layout P,
                        Layout KV, Bias bias) {
  constexpr bool kBf16 = sizeof(T) == 2;
  constexpr int e = int(sizeof(T)), rows = blockRows(kBf16), kHalf = kKeyTile / 2;
  extern __shared__ __align__(128) unsigned char smem[];
  const ForwardSmem m = forwardSmem(kBf16, hd, hdv);
  const int dp = paddedHeadDim(hd), dvp = paddedHeadDim(hdv);
  const int ldk = rowStride(dp, e), ldv = rowStride(dvp, e), lds = rowStride(kKeyTile, 4),
            ldp = lds * 4 / e, ldo = rowStride(dvp, 4);
  T *sQ = reinterpret_cast<T *>(smem + m.q), *sK = reinterpret_cast<T *>(smem + m.k),
    *sV = reinterpret_cast<T *>(smem + m.v);
  float *sS = reinterpret_cast<float *>(smem + m.s), *sO = reinterpret_cast<float *>(smem + m.o),
        *rowScale = reinterpret_cast<float *>(smem + m.rowScale);
  Place at;
  const int q0 = int(blockIdx.x) * rows, off = sk - sq;
  loadTile(sQ, ldk, q + P.at(at.bh, sq, q0, hd), P.ld(hd), min(rows, sq - q0), hd, rows, dp);
  zeroShared(sO, rows * ldo);
  __syncthreads(); // (also when no key tile is visited)
  float *wS = sS + at.warp * 16 * lds, *wO = sO + at.warp * 16 * ldo;
  T *wP = reinterpret_cast<T *>(wS); // the probabilities replace the scores
  const T *wQ = sQ + at.warp * 16 * ldk;
  const int i = q0 + at.warp * 16 + at.row;
  float rowMax = -INFINITY, rowSum = 0.f;
  TileRange tiles = keyTilesOf(q0, rows, sq, sk, causal);
  for (int t = tiles.begin; t < tiles.end; ++t) {
    const int k0 = t * kKeyTile, keys = min(kKeyTile, sk - k0);
    __syncthreads(); // the last tile's K and V are read
    loadTile(sK, ldk, k + KV.at(at.bh / group, sk, k0, hd), KV.ld(hd), keys, hd, kKeyTile, dp);
    loadTile(sV, ldv, v + KV.at(at.bh / group, sk, k0, hdv), KV.ld(hdv), keys, hdv, kKeyTile,
             dvp);
    __syncthreads();
    productABt<kKeyTile>(wS, lds, wQ, ldk, sK, ldk, dp);
    __syncwarp();
    // Online softmax: each lane pair holds its row's running max and sum.
    float x[kHalf], tileMax = -INFINITY;
#pragma unroll
    for (int c = 0; c < kHalf; ++c) {
      int col = at.half * kHalf + c, j = k0 + col;
      bool seen = i < sq && j < sk && (!causal || j <= i + off);
      x[c] = seen ? wS[at.row * lds + col] * scale + bias.at(at.bh, i, j) : -INFINITY;
      tileMax = fmaxf(tileMax, x[c]);
    }
    tileMax = fmaxf(tileMax, __shfl_xor_sync(0xffffffffu, tileMax, 1));
    float newMax = fmaxf(rowMax, tileMax);
    float alpha = newMax == -INFINITY ? 1.f : expf(rowMax - newMax), sum = 0.f;
#pragma unroll
    for (int c = 0; c < kHalf; ++c) {
      x[c] = x[c] == -INFINITY ? 0.f : expf(x[c] - newMax);
      sum += x[c];
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    rowSum = rowSum * alpha + sum;
    rowMax = newMax;
    __syncwarp(); // every score is read before P overwrites them
#pragma unroll
    for (int c = 0; c < kHalf; ++c)
      wP[at.row * ldp + at.half * kHalf + c] = fromFloat<T>(x[c]);
    if (at.half == 0)
      rowScale[at.warp * 16 + at.row] = alpha;
    __syncwarp();
    for (int n = at.lane; n < 16 * dvp; n += 32)
      wO[n / dvp * ldo + n % dvp] *= rowScale[at.warp * 16 + n / dvp];
    __syncwarp();
    productABAcc<kKeyTile>(wO, ldo, wP, ldp, sV, ldv, dvp);
  }
  __syncwarp();
  if (at.half == 0) {
    rowScale[at.warp * 16 + at.row] = rowSum > 0.f ? 1.f / rowSum : 0.f;
    if (i < sq)
      lse[at.bh * sq + i] = rowSum > 0.f ? rowMax + logf(rowSum) : -INFINITY;
  }
  __syncwarp();
  for (int r = 0; r < 16; ++r) {
    int row = q0 + at.warp * 16 + r;
    if (row >= sq)
      break;
    float s = rowScale[at.warp * 16 + r];
    for (int c = at.lane; c < hdv; c += 32)
      out[L.at(at.bh, sq, row, hdv) + c] = fromFloat<T>(wO[r * ldo + c] * s);
  }
}

template <typename T>
__device__ void gradQ(const T *q, const T *k, const T *v, const T *out, const T *dout,
                      const float *lse, float *delta, T *dq, int sq, int sk, int hd, int hdv,
                      float scale, bool causal, int group, Layout L, Layout P, Layout KV,
                      Bias bias) {
  constexpr bool kBf16 = sizeof(T) == 2;
  constexpr int e = int(sizeof(T)), rows = blockRows(kBf16), kHalf = kKeyTile / 2;
  extern __shared__ __align__(128) unsigned char smem[];
  const GradQSmem m = gradQSmem(kBf16, hd, hdv);
  const int dp = paddedHeadDim(hd), dvp = paddedHeadDim(hdv);
  const int ldk = rowStride(dp, e), ldv = rowStride(dvp, e), lds = rowStride(kKeyTile, 4),
            ldp = lds * 4 / e, ldq = rowStride(dp, 4);
  T *sQ = reinterpret_cast<T *>(smem + m.q), *sDout = reinterpret_cast<T *>(smem + m.dout),
    *sK = reinterpret_cast<T *>(smem + m.k), *sV = reinterpret_cast<T *>(smem + m.v);
  float *sS = reinterpret_cast<float *>(smem + m.s), *sDp = reinterpret_cast<float *>(smem + m.dp),
        *sDq = reinterpret_cast<float *>(smem + m.dq),
        *sLse = reinterpret_cast<float *>(smem + m.lse),
        *sDelta = reinterpret_cast<float *>(smem + m.delta);
  Place at;
  const int q0 = int(blockIdx.x) * rows, off = sk - sq;
  loadTile(sQ, ldk, q + P.at(at.bh, sq, q0, hd), P.ld(hd), min(rows, sq - q0), hd, rows, dp);
  loadTile(sDout, ldv, dout + L.at(at.bh, sq, q0, hdv), L.ld(hdv), min(rows, sq - q0), hdv, rows, dvp);
  zeroShared(sDq, rows * ldq);
  __syncthreads();
  // Delta = rowsum(grad_out * out) of the warp's rows, kept for grad_kv.
  for (int r = 0; r < 16; ++r) {
    int wr = at.warp * 16 + r, row = q0 + wr;
    float sum = 0.f;
    if (row < sq)
      for (int c = at.lane; c < hdv; c += 32)
        sum += toFloat(sDout[wr * ldv + c]) * toFloat(out[L.at(at.bh, sq, row, hdv) + c]);
    for (int o = 16; o > 0; o >>= 1)
      sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (at.lane == 0) {
      sDelta[wr] = sum;
      sLse[wr] = row < sq ? lse[at.bh * sq + row] : -INFINITY;
      if (row < sq)
        delta[at.bh * sq + row] = sum;
    }
  }
  __syncwarp();
  float *wS = sS + at.warp * 16 * lds, *wDp = sDp + at.warp * 16 * lds,
        *wDq = sDq + at.warp * 16 * ldq;
  T *wDs = reinterpret_cast<T *>(wS);
  const T *wQ = sQ + at.warp * 16 * ldk, *wDout = sDout + at.warp * 16 * ldv;
  const int i = q0 + at.warp * 16 + at.row;
  const float rowLse = sLse[at.warp * 16 + at.row], rowDelta = sDelta[at.warp * 16 + at.row];
  TileRange tiles = keyTilesOf(q0, rows, sq, sk, causal);
  for (int t = tiles.begin; t < tiles.end; ++t) {
    const int k0 = t * kKeyTile, keys = min(kKeyTile, sk - k0);
    __syncthreads();
    loadTile(sK, ldk, k + KV.at(at.bh / group, sk, k0, hd), KV.ld(hd), keys, hd, kKeyTile, dp);
    loadTile(sV, ldv, v + KV.at(at.bh / group, sk, k0, hdv), KV.ld(hdv), keys, hdv, kKeyTile,
             dvp);
    __syncthreads();
    productABt<kKeyTile>(wS, lds, wQ, ldk, sK, ldk, dp);
    productABt<kKeyTile>(wDp, lds, wDout, ldv, sV, ldv, dvp);
    __syncwarp();
    float ds[kHalf];
#pragma unroll
    for (int c = 0; c < kHalf; ++c) {
      int col = at.half * kHalf + c, j = k0 + col;
      bool seen = i < sq && j < sk && (!causal || j <= i + off) && rowLse != -INFINITY;
      float p =
          seen ? expf(wS[at.row * lds + col] * scale + bias.at(at.bh, i, j) - rowLse) : 0.f;
      ds[c] = p * (wDp[at.row * lds + col] - rowDelta);
    }
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kHalf; ++c)
      wDs[at.row * ldp + at.half * kHalf + c] = fromFloat<T>(ds[c]);
    __syncwarp();
    productABAcc<kKeyTile>(wDq, ldq, wDs, ldp, sK, ldk, dp);
  }
  __syncwarp();
  for (int r = 0; r < 16; ++r) {
    int row = q0 + at.warp * 16 + r;
    if (row >= sq)
      break;
    for (int c = at.lane; c < hd; c += 32)
      dq[P.at(at.bh, sq, row, hd) + c] = fromFloat<T>(wDq[r * ldq + c] * scale);
  }
}

template <typename T>
__device__ void gradKV(const T *q, const T *k, const T *v, const T *dout, const float *lse,
                       const float *delta, T *dk, T *dv, int sq, int sk, int hd, int hdv,
                       float scale, bool causal, int group, Layout L, Layout P, Layout KV,
                       Bias bias) {
  constexpr bool kBf16 = sizeof(T) == 2;
  constexpr int e = int(sizeof(T)), rows = blockRows(kBf16), kHalf = kQueryTile / 2;
  extern __shared__ __align__(128) unsigned char smem[];
  const GradKVSmem m = gradKVSmem(kBf16, hd, hdv);
  const int dp = paddedHeadDim(hd), dvp = paddedHeadDim(hdv);
  const int ldk = rowStride(dp, e), ldv = rowStride(dvp, e), lds = rowStride(kQueryTile, 4),
            ldp = lds * 4 / e, lddk = rowStride(dp, 4), lddv = rowStride(dvp, 4);
  T *sK = reinterpret_cast<T *>(smem + m.k), *sV = reinterpret_cast<T *>(smem + m.v),
    *sQ = reinterpret_cast<T *>(smem + m.q), *sDout = reinterpret_cast<T *>(smem + m.dout);
  float *sS = reinterpret_cast<float *>(smem + m.s), *sDp = reinterpret_cast<float *>(smem + m.dp),
        *sDk = reinterpret_cast<float *>(smem + m.dk),
        *sDv = reinterpret_cast<float *>(smem + m.dv),
        *sLse = reinterpret_cast<float *>(smem + m.lse),
        *sDelta = reinterpret_cast<float *>(smem + m.delta);
  Place at; // at.bh: the key-value head
  const int k0 = int(blockIdx.x) * rows, off = sk - sq;
  loadTile(sK, ldk, k + KV.at(at.bh, sk, k0, hd), KV.ld(hd), min(rows, sk - k0), hd, rows, dp);
  loadTile(sV, ldv, v + KV.at(at.bh, sk, k0, hdv), KV.ld(hdv), min(rows, sk - k0), hdv, rows,
           dvp);
  zeroShared(sDk, rows * lddk);
  zeroShared(sDv, rows * lddv);
  __syncthreads();
  // The warp's rows are keys: it computes S^T and dP^T, so that P^T and
  // dS^T are the left operands of grad_v += P^T grad_out, grad_k += dS^T Q.
  float *wS = sS + at.warp * 16 * lds, *wDp = sDp + at.warp * 16 * lds,
        *wDk = sDk + at.warp * 16 * lddk, *wDv = sDv + at.warp * 16 * lddv;
  T *wP = reinterpret_cast<T *>(wS), *wDs = reinterpret_cast<T *>(wDp);
  const T *wK = sK + at.warp * 16 * ldk, *wV = sV + at.warp * 16 * ldv;
  const int j = k0 + at.warp * 16 + at.row;
  TileRange tiles = queryTilesOf(k0, rows, sq, sk, causal);
  // The query tiles of each query head of the group.
  for (int step = 0; step < group * (tiles.end - tiles.begin); ++step) {
    const size_t bh = at.bh * size_t(group) + size_t(step / (tiles.end - tiles.begin));
    const int t = tiles.begin + step % (tiles.end - tiles.begin);
    const int q0 = t * kQueryTile, queries = min(kQueryTile, sq - q0);
    __syncthreads();
    loadTile(sQ, ldk, q + P.at(bh, sq, q0, hd), P.ld(hd), queries, hd, kQueryTile, dp);
    loadTile(sDout, ldv, dout + L.at(bh, sq, q0, hdv), L.ld(hdv), queries, hdv, kQueryTile, dvp);
    for (int c = threadIdx.x; c < kQueryTile; c += blockDim.x) {
      sLse[c] = c < queries ? lse[bh * sq + q0 + c] : -INFINITY;
      sDelta[c] = c < queries ? delta[bh * sq + q0 + c] : 0.f;
    }
    __syncthreads();
    productABt<kQueryTile>(wS, lds, wK, ldk, sQ, ldk, dp);
    productABt<kQueryTile>(wDp, lds, wV, ldv, sDout, ldv, dvp);
    __syncwarp();
    float p[kHalf], ds[kHalf];
#pragma unroll
    for (int c = 0; c < kHalf; ++c) {
      int col = at.half * kHalf + c, i = q0 + col;
      float rowLse = sLse[col];
      bool seen = i < sq && j < sk && (!causal || j <= i + off) && rowLse != -INFINITY;
      p[c] = seen ? expf(wS[at.row * lds + col] * scale + bias.at(bh, i, j) - rowLse) : 0.f;
      ds[c] = p[c] * (wDp[at.row * lds + col] - sDelta[col]);
    }
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kHalf; ++c) {
      wP[at.row * ldp + at.half * kHalf + c] = fromFloat<T>(p[c]);
      wDs[at.row * ldp + at.half * kHalf + c] = fromFloat<T>(ds[c]);
    }
    __syncwarp();
    productABAcc<kQueryTile>(wDv, lddv, wP, ldp, sDout, ldv, dvp);
    productABAcc<kQueryTile>(wDk, lddk, wDs, ldp, sQ, ldk, dp);
  }
  __syncwarp();
  for (int r = 0; r < 16; ++r) {
    int row = k0 + at.warp * 16 + r;
    if (row >= sk)
      break;
    for (int c = at.lane; c < hd; c += 32)
      dk[KV.at(at.bh, sk, row, hd) + c] = fromFloat<T>(wDk[r * lddk + c] * scale);
    for (int c = at.lane; c < hdv; c += 32)
      dv[KV.at(at.bh, sk, row, hdv) + c] = fromFloat<T>(wDv[r * lddv + c]);
  }
}

} // namespace

// The entry points AttentionLaunch.cpp names, one per kernel and dtype.
// `heads`: 0 for heads-first operands, else q's H of [..., S, H, D] ones;
// `pieces`: 3 where q, k, v and their gradients are pieces of a packed
// [..., S, 3, H, D] or [..., S, H, 3, D] buffer (their pointers at each
// piece's start), else 1; `headStride`: 3 for the latter (interleaved),
// else 1;
// `group`: query heads per head of k and v (1 but for grouped-query
// attention, whose k and v have H / group heads). The bias's arguments
// close each list (biasData null without one).
#define DTC_ATTENTION_BIAS_PARAMS                                                               \
  const float *biasData, int biasPer, int biasRow, long long biasOuter, long long biasInner
#define DTC_ATTENTION_BIAS Bias{biasData, biasPer, biasRow, biasOuter, biasInner}
#define DTC_ATTENTION_LAYOUTS                                                                   \
  Layout{heads, 1, 1}, Layout{heads, pieces, headStride}, Layout{heads / group, pieces, headStride}
#define DTC_ATTENTION_ENTRIES(T, suffix, threads)                                               \
  extern "C" __global__ void __launch_bounds__(threads) dtc_attention_forward_##suffix(         \
      const T *q, const T *k, const T *v, T *out, float *lse, int sq, int sk, int hd, int hdv,  \
      float scale, int causal, int heads, int pieces, int headStride, int group,                \
      DTC_ATTENTION_BIAS_PARAMS) {                                                              \
    forward(q, k, v, out, lse, sq, sk, hd, hdv, scale, causal != 0, group,                      \
            DTC_ATTENTION_LAYOUTS, DTC_ATTENTION_BIAS);                                         \
  }                                                                                             \
  extern "C" __global__ void __launch_bounds__(threads) dtc_attention_grad_q_##suffix(          \
      const T *q, const T *k, const T *v, const T *out, const T *dout, const float *lse,        \
      float *delta, T *dq, int sq, int sk, int hd, int hdv, float scale, int causal, int heads, \
      int pieces, int headStride, int group, DTC_ATTENTION_BIAS_PARAMS) {                       \
    gradQ(q, k, v, out, dout, lse, delta, dq, sq, sk, hd, hdv, scale, causal != 0, group,       \
          DTC_ATTENTION_LAYOUTS, DTC_ATTENTION_BIAS);                                           \
  }                                                                                             \
  extern "C" __global__ void __launch_bounds__(threads) dtc_attention_grad_kv_##suffix(         \
      const T *q, const T *k, const T *v, const T *dout, const float *lse, const float *delta,  \
      T *dk, T *dv, int sq, int sk, int hd, int hdv, float scale, int causal, int heads,        \
      int pieces, int headStride, int group, DTC_ATTENTION_BIAS_PARAMS) {                       \
    gradKV(q, k, v, dout, lse, delta, dk, dv, sq, sk, hd, hdv, scale, causal != 0, group,       \
           DTC_ATTENTION_LAYOUTS, DTC_ATTENTION_BIAS);                                          \
  }

DTC_ATTENTION_ENTRIES(float, f32, 32 * kWarpsF32)
DTC_ATTENTION_ENTRIES(bf16, bf16, 32 * kWarpsBf16)
