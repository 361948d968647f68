//===- AttentionTiles.h - the attention kernels' tiles, host and device -*- C++ -*-===//
//
// What FlashAttention.cu and AttentionLaunch.cpp must agree on: the tile
// sizes, the shared-memory layout of each kernel (byte offsets of its
// buffers) and which tiles a causal tile visits. Included by nvcc (the
// functions are then host and device functions) and by the host compiler;
// nothing here needs a CUDA header.
//
// Every kernel is a block of warps, each warp owning 16 rows of the block's
// tile (queries for the forward and grad_q, keys for grad_k and grad_v)
// and looping over the other side's tiles. bf16 blocks have 4 warps (64
// rows) feeding tensor cores; f32 blocks have 2 (32 rows) so that their
// 4-byte tiles fit an A100's shared memory at head dim 128.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CUDA_KERNELS_ATTENTIONTILES_H
#define DTC_RUNTIME_CUDA_KERNELS_ATTENTIONTILES_H

#ifdef __CUDACC__
#define DTC_TILE_FN __host__ __device__ inline constexpr
#else
#define DTC_TILE_FN inline constexpr
#endif

namespace dtc::runtime::cuda::attention {

constexpr int kRowsPerWarp = 16;  // a tensor-core tile's rows
constexpr int kWarpsF32 = 2;
constexpr int kWarpsBf16 = 4;
constexpr int kKeyTile = 64;      // keys per step of the forward and grad_q loops
constexpr int kQueryTile = 32;    // queries per step of the grad_k, grad_v loop
constexpr int kMaxHeadDim = 128;
constexpr int kHeadDimStep = 16;  // head dims are padded (with zeros) to this
constexpr int kSkewBytes = 16;    // added to each shared row against bank conflicts

DTC_TILE_FN int warpsPerBlock(bool bf16) { return bf16 ? kWarpsBf16 : kWarpsF32; }
DTC_TILE_FN int blockRows(bool bf16) { return kRowsPerWarp * warpsPerBlock(bf16); }
DTC_TILE_FN int threadsPerBlock(bool bf16) { return 32 * warpsPerBlock(bf16); }
DTC_TILE_FN int ceilDiv(int a, int b) { return (a + b - 1) / b; }
DTC_TILE_FN int paddedHeadDim(int d) { return ceilDiv(d, kHeadDimStep) * kHeadDimStep; }

/// A shared row's stride in elements of `elementBytes` (operands) for `cols`
/// columns; f32 score and accumulator rows use elementBytes 4.
DTC_TILE_FN int rowStride(int cols, int elementBytes) { return cols + kSkewBytes / elementBytes; }

/// The byte offset after `at` plus `bytes`, aligned for tensor-core loads.
DTC_TILE_FN int next(int at, int bytes) { return (at + bytes + 127) / 128 * 128; }

/// Which tiles of the other side a block's rows meet: [begin, end).
struct TileRange {
  int begin = 0, end = 0;
};

/// The key tiles (of kKeyTile) the queries [q0, q0 + rows) see: all of
/// them, or under causal masking (key j visible to query i iff
/// j <= i + sk - sq) those up to the last visible key of the last row.
/// Visibility is monotone in j, so no visited tile is entirely masked.
DTC_TILE_FN TileRange keyTilesOf(int q0, int rows, int sq, int sk, bool causal) {
  int tiles = ceilDiv(sk, kKeyTile);
  if (!causal)
    return {0, tiles};
  int last = (q0 + rows < sq ? q0 + rows : sq) - 1 + sk - sq; // last row's last key
  if (last < 0)
    return {0, 0};
  int end = last / kKeyTile + 1;
  return {0, end < tiles ? end : tiles};
}

/// The query tiles (of kQueryTile) that see any of the keys [k0, k0 + rows).
DTC_TILE_FN TileRange queryTilesOf(int k0, int rows, int sq, int sk, bool causal) {
  int tiles = ceilDiv(sq, kQueryTile);
  if (k0 >= sk)
    return {0, 0};
  if (!causal)
    return {0, tiles};
  int first = k0 - (sk - sq); // the first query that sees key k0
  if (first >= sq)
    return {0, 0};
  return {first > 0 ? first / kQueryTile : 0, tiles};
}

/// Shared memory of the forward: Q of the block's rows, a key tile's K and
/// V, each warp's scores (then its probabilities, in the operand type, in
/// place) and its output accumulator (f32), a factor per row.
struct ForwardSmem {
  int q, k, v, s, o, rowScale, bytes;
};
DTC_TILE_FN ForwardSmem forwardSmem(bool bf16, int d, int dv) {
  int e = bf16 ? 2 : 4, rows = blockRows(bf16);
  int dp = paddedHeadDim(d), dvp = paddedHeadDim(dv);
  ForwardSmem m{};
  m.q = 0;
  m.k = next(m.q, rows * rowStride(dp, e) * e);
  m.v = next(m.k, kKeyTile * rowStride(dp, e) * e);
  m.s = next(m.v, kKeyTile * rowStride(dvp, e) * e);
  m.o = next(m.s, rows * rowStride(kKeyTile, 4) * 4);
  m.rowScale = next(m.o, rows * rowStride(dvp, 4) * 4);
  m.bytes = next(m.rowScale, rows * 4);
  return m;
}

/// Shared memory of grad_q (and Delta): the block's Q and grad_out rows, a
/// key tile's K and V, each warp's scores and dP (f32; then P and dS in the
/// operand type, in place), its grad_q accumulator, lse and Delta per row.
struct GradQSmem {
  int q, dout, k, v, s, dp, dq, lse, delta, bytes;
};
DTC_TILE_FN GradQSmem gradQSmem(bool bf16, int d, int dv) {
  int e = bf16 ? 2 : 4, rows = blockRows(bf16);
  int dp = paddedHeadDim(d), dvp = paddedHeadDim(dv);
  GradQSmem m{};
  m.q = 0;
  m.dout = next(m.q, rows * rowStride(dp, e) * e);
  m.k = next(m.dout, rows * rowStride(dvp, e) * e);
  m.v = next(m.k, kKeyTile * rowStride(dp, e) * e);
  m.s = next(m.v, kKeyTile * rowStride(dvp, e) * e);
  m.dp = next(m.s, rows * rowStride(kKeyTile, 4) * 4);
  m.dq = next(m.dp, rows * rowStride(kKeyTile, 4) * 4);
  m.lse = next(m.dq, rows * rowStride(dp, 4) * 4);
  m.delta = next(m.lse, rows * 4);
  m.bytes = next(m.delta, rows * 4);
  return m;
}

/// Shared memory of grad_k and grad_v: the block's K and V rows, a query
/// tile's Q and grad_out with its lse and Delta, each warp's transposed
/// scores and dP (then P^T and dS^T in place), its two accumulators.
struct GradKVSmem {
  int k, v, q, dout, s, dp, dk, dv, lse, delta, bytes;
};
DTC_TILE_FN GradKVSmem gradKVSmem(bool bf16, int d, int dv) {
  int e = bf16 ? 2 : 4, rows = blockRows(bf16);
  int dp = paddedHeadDim(d), dvp = paddedHeadDim(dv);
  GradKVSmem m{};
  m.k = 0;
  m.v = next(m.k, rows * rowStride(dp, e) * e);
  m.q = next(m.v, rows * rowStride(dvp, e) * e);
  m.dout = next(m.q, kQueryTile * rowStride(dp, e) * e);
  m.s = next(m.dout, kQueryTile * rowStride(dvp, e) * e);
  m.dp = next(m.s, rows * rowStride(kQueryTile, 4) * 4);
  m.dk = next(m.dp, rows * rowStride(kQueryTile, 4) * 4);
  m.dv = next(m.dk, rows * rowStride(dp, 4) * 4);
  m.lse = next(m.dv, rows * rowStride(dvp, 4) * 4);
  m.delta = next(m.lse, kQueryTile * 4);
  m.bytes = next(m.delta, kQueryTile * 4);
  return m;
}

} // namespace dtc::runtime::cuda::attention

#endif // DTC_RUNTIME_CUDA_KERNELS_ATTENTIONTILES_H
