//===- AttentionLaunchTest.cpp - the attention kernels' launches ----------===//
//
// AttentionLaunch.h checked without a GPU (in dtc-cuda-host-tests): the
// grids cover every query and key row once, causal masking skips exactly
// the tiles where no (query, key) pair is visible (against a brute-force
// count), shared memory fits the GPUs the PTX targets, and what the
// kernels do not cover is refused with a reason.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/AttentionLaunch.h"
#include "runtime/cuda/kernels/AttentionTiles.h"
#include "runtime/cuda/kernels/FlashAttentionPtx.h"

#include <gtest/gtest.h>

using namespace dtc;
using namespace dtc::runtime::cuda;

namespace {

namespace tiles = runtime::cuda::attention;

plan::TensorType tensor(plan::DType dtype, std::vector<int64_t> shape) {
  plan::TensorType t;
  t.set_dtype(dtype);
  for (int64_t n : shape)
    t.add_shape(n);
  return t;
}

AttentionDims dimsOf(int64_t sq, int64_t sk, bool causal, bool bf16, int64_t d = 64,
                     int64_t dv = 64) {
  AttentionDims dims;
  dims.bh = 3;
  dims.sq = sq;
  dims.sk = sk;
  dims.d = d;
  dims.dv = dv;
  dims.causal = causal;
  dims.bf16 = bf16;
  return dims;
}

bool visible(int64_t i, int64_t j, const AttentionDims &dims) {
  return !dims.causal || j <= i + dims.sk - dims.sq;
}

const std::vector<int64_t> kLengths = {1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127,
                                       128, 129, 200, 256, 257, 1000, 1024};

TEST(AttentionLaunch, GridsCoverEveryRowOnce) {
  for (bool bf16 : {false, true})
    for (int64_t sq : kLengths)
      for (int64_t sk : {int64_t(1), int64_t(65), int64_t(1024)}) {
        AttentionDims dims = dimsOf(sq, sk, false, bf16);
        SCOPED_TRACE("sq " + std::to_string(sq) + " sk " + std::to_string(sk));
        for (const AttentionLaunch &launch :
             {forwardLaunch(dims), gradQLaunch(dims), gradKVLaunch(dims)}) {
          int64_t rows = launch.entry.find("grad_kv") == std::string::npos ? sq : sk;
          std::vector<int> covered(static_cast<size_t>(rows));
          for (unsigned x = 0; x < launch.gridX; ++x)
            for (int r = 0; r < launch.rowsPerBlock; ++r)
              if (int64_t row = int64_t(x) * launch.rowsPerBlock + r; row < rows)
                ++covered[size_t(row)];
          for (int64_t row = 0; row < rows; ++row)
            ASSERT_EQ(covered[size_t(row)], 1) << launch.entry << " row " << row;
          // No block without a row of its own.
          EXPECT_LT(int64_t(launch.gridX - 1) * launch.rowsPerBlock, rows) << launch.entry;
          EXPECT_EQ(launch.gridY, 3u);
          EXPECT_EQ(launch.threads % 32, 0u);
          EXPECT_EQ(launch.threads / 32 * tiles::kRowsPerWarp, unsigned(launch.rowsPerBlock));
          EXPECT_NE(launch.entry.find(bf16 ? "_bf16" : "_f32"), std::string::npos);
        }
      }
}

/// Per block of rows, the tiles of the other side holding at least one
/// visible pair, counted pair by pair.
int tilesWithVisiblePairs(const AttentionDims &dims, int64_t first, int64_t rows, bool queries,
                          int tile) {
  int64_t others = queries ? dims.sk : dims.sq;
  int count = 0;
  for (int64_t t0 = 0; t0 < others; t0 += tile) {
    bool any = false;
    for (int64_t a = first; a < std::min(first + rows, queries ? dims.sq : dims.sk) && !any; ++a)
      for (int64_t b = t0; b < std::min(t0 + tile, others) && !any; ++b)
        any = queries ? visible(a, b, dims) : visible(b, a, dims);
    count += any;
  }
  return count;
}

TEST(AttentionLaunch, CausalTilesVisitedAreThoseWithAVisiblePair) {
  int checked = 0, skipped = 0;
  for (bool bf16 : {false, true})
    for (bool causal : {false, true})
      for (int64_t sq : kLengths)
        for (int64_t sk : kLengths) {
          if (sq * sk > 300000)
            continue;
          AttentionDims dims = dimsOf(sq, sk, causal, bf16);
          SCOPED_TRACE("sq " + std::to_string(sq) + " sk " + std::to_string(sk) +
                       (causal ? " causal" : "") + (bf16 ? " bf16" : " f32"));
          int rows = tiles::blockRows(bf16);
          for (int64_t q0 = 0; q0 < sq; q0 += rows) {
            int want = tilesWithVisiblePairs(dims, q0, rows, true, tiles::kKeyTile);
            ASSERT_EQ(keyTilesVisited(dims, q0), want) << "queries from " << q0;
            tiles::TileRange range =
                tiles::keyTilesOf(int(q0), rows, int(sq), int(sk), causal);
            // Visited tiles are a prefix: the kernel's loop starts at 0.
            EXPECT_EQ(range.begin, 0);
            skipped += int(tiles::ceilDiv(int(sk), tiles::kKeyTile)) - want;
            ++checked;
          }
          for (int64_t k0 = 0; k0 < sk; k0 += rows) {
            int want = tilesWithVisiblePairs(dims, k0, rows, false, tiles::kQueryTile);
            ASSERT_EQ(queryTilesVisited(dims, k0), want) << "keys from " << k0;
            tiles::TileRange range =
                tiles::queryTilesOf(int(k0), rows, int(sq), int(sk), causal);
            // The visited tiles are contiguous and end with the last.
            if (want > 0)
              EXPECT_EQ(range.end, tiles::ceilDiv(int(sq), tiles::kQueryTile));
            ++checked;
          }
        }
  EXPECT_GT(checked, 1000);
  EXPECT_GT(skipped, 100); // causal masking does skip tiles
}

TEST(AttentionLaunch, SharedMemoryFitsAnA100AndOptsInPast48KiB) {
  constexpr unsigned kA100 = 163 << 10; // sm_80's opt-in limit per block
  for (bool bf16 : {false, true})
    for (int64_t d = 1; d <= tiles::kMaxHeadDim; ++d) {
      AttentionDims dims = dimsOf(100, 100, true, bf16, d, d);
      for (const AttentionLaunch &launch :
           {forwardLaunch(dims), gradQLaunch(dims), gradKVLaunch(dims)}) {
        EXPECT_LE(launch.sharedBytes, kA100) << launch.entry << " d " << d;
        EXPECT_EQ(launch.sharedBytes % 128, 0u);
      }
    }
  // Head dim 64 bf16 (GPT-2) forward stays small enough for 3 blocks on an
  // H100 SM (228 KiB); at 128 every kernel opts in past the default 48 KiB
  // (AttentionKernel.cpp sets the attribute).
  EXPECT_LE(forwardLaunch(dimsOf(1024, 1024, true, true)).sharedBytes, 76u << 10);
  EXPECT_GT(gradKVLaunch(dimsOf(1024, 1024, true, true, 128, 128)).sharedBytes, 48u << 10);
  // The layout holds each buffer whole: later ones start after earlier ones end.
  tiles::ForwardSmem f = tiles::forwardSmem(true, 128, 128);
  EXPECT_GE(f.k - f.q, 64 * (128 + 8) * 2);
  EXPECT_GE(f.o - f.s, 64 * (64 + 4) * 4);
  EXPECT_GE(f.bytes - f.rowScale, 64 * 4);
  tiles::GradKVSmem g = tiles::gradKVSmem(false, 40, 72);
  EXPECT_GE(g.dv - g.dk, 32 * (48 + 4) * 4);
  EXPECT_GE(g.lse - g.dv, 32 * (80 + 4) * 4);
}

TEST(AttentionLaunch, DimsComeFromTheOperandsAndWhatIsNotCoveredIsRefused) {
  plan::Attention attention;
  attention.set_scale(0.125);
  attention.set_causal(true);
  auto f32 = [](std::vector<int64_t> s) { return tensor(plan::F32, std::move(s)); };
  std::vector<plan::TensorType> in = {f32({2, 12, 100, 64}), f32({2, 12, 80, 64}),
                                      f32({2, 12, 80, 40})};
  std::vector<plan::TensorType> out = {f32({2, 12, 100, 40}), f32({2, 12, 100})};
  AttentionDims dims;
  std::string why;
  ASSERT_TRUE(attentionDimsOf(false, attention, in, out, dims, why)) << why;
  EXPECT_EQ(dims.bh, 24);
  EXPECT_EQ(dims.sq, 100);
  EXPECT_EQ(dims.sk, 80);
  EXPECT_EQ(dims.d, 64);
  EXPECT_EQ(dims.dv, 40);
  EXPECT_TRUE(dims.causal);
  EXPECT_FALSE(dims.bf16);
  EXPECT_FLOAT_EQ(dims.scale, 0.125f);
  EXPECT_EQ(attentionScratchBytes(dims), size_t(24 * 100 * 4));

  std::vector<plan::TensorType> backIn = {in[0], in[1], in[2], out[0], out[1], out[0]};
  std::vector<plan::TensorType> backOut = {in[0], in[1], in[2]};
  ASSERT_TRUE(attentionDimsOf(true, attention, backIn, backOut, dims, why)) << why;

  auto refused = [&](bool backward, std::vector<plan::TensorType> i,
                     std::vector<plan::TensorType> o, const char *expected) {
    std::string reason;
    AttentionDims unused;
    EXPECT_FALSE(attentionDimsOf(backward, attention, i, o, unused, reason)) << expected;
    EXPECT_NE(reason.find(expected), std::string::npos) << reason;
  };
  refused(false, {f32({4, 100, 160}), f32({4, 80, 160}), f32({4, 80, 64})},
          {f32({4, 100, 64}), f32({4, 100})}, "at most 128");
  refused(false, {f32({4, 100, 64}), f32({4, 80, 64}), f32({4, 80, 129})},
          {f32({4, 100, 129}), f32({4, 100})}, "at most 128");
  refused(false, {tensor(plan::F16, {4, 8, 8}), tensor(plan::F16, {4, 8, 8}),
                  tensor(plan::F16, {4, 8, 8})},
          {tensor(plan::F16, {4, 8, 8}), f32({4, 8})}, "not f16");
  refused(false, {f32({4, 100, 64}), f32({3, 80, 64}), f32({4, 80, 64})},
          {f32({4, 100, 64}), f32({4, 100})}, "k is f32[3,80,64], expected f32[4,80,64]");
  refused(false, {f32({4, 100, 64}), f32({4, 80, 64}), f32({4, 80, 64})},
          {f32({4, 100, 64}), tensor(plan::BF16, {4, 100})}, "lse is bf16[4,100]");
  refused(false, {in[0], in[1], in[2]}, {out[0]}, "gives 2 outputs");
  refused(true, backIn, {in[0], in[1], f32({2, 12, 80, 64})},
          "grad_v is f32[2,12,80,64], expected f32[2,12,80,40]");
  refused(false, {f32({70000, 4, 8}), f32({70000, 4, 8}), f32({70000, 4, 8})},
          {f32({70000, 4, 8}), f32({70000, 4})}, "at most 65535 heads");
  // bf16 throughout but lse.
  auto bf = [](std::vector<int64_t> s) { return tensor(plan::BF16, std::move(s)); };
  ASSERT_TRUE(attentionDimsOf(false, attention, {bf({1, 7, 40}), bf({1, 9, 40}), bf({1, 9, 40})},
                              {bf({1, 7, 40}), f32({1, 7})}, dims, why))
      << why;
  EXPECT_TRUE(dims.bf16);
  EXPECT_EQ(forwardLaunch(dims).entry, "dtc_attention_forward_bf16");
  EXPECT_EQ(gradQLaunch(dims).entry, "dtc_attention_grad_q_bf16");
  EXPECT_EQ(gradKVLaunch(dims).entry, "dtc_attention_grad_kv_bf16");

  // bshd: q, k, v, out and the gradients [B, S, H, D]; lse [B, H, Sq].
  plan::Attention bshd = attention;
  bshd.set_bshd(true);
  std::vector<plan::TensorType> rowsIn = {f32({2, 100, 12, 64}), f32({2, 80, 12, 64}),
                                          f32({2, 80, 12, 40})};
  std::vector<plan::TensorType> rowsOut = {f32({2, 100, 12, 40}), f32({2, 12, 100})};
  AttentionDims rows;
  ASSERT_TRUE(attentionDimsOf(false, bshd, rowsIn, rowsOut, rows, why)) << why;
  EXPECT_TRUE(rows.bshd);
  EXPECT_EQ(rows.heads, 12);
  EXPECT_EQ(rows.bh, 24);
  EXPECT_EQ(rows.sq, 100);
  EXPECT_EQ(rows.sk, 80);
  EXPECT_EQ(rows.d, 64);
  EXPECT_EQ(rows.dv, 40);
  std::vector<plan::TensorType> rowsBackIn = {rowsIn[0], rowsIn[1], rowsIn[2],
                                              rowsOut[0], rowsOut[1], rowsOut[0]};
  ASSERT_TRUE(attentionDimsOf(true, bshd, rowsBackIn, rowsIn, rows, why)) << why;
  AttentionDims unused;
  EXPECT_FALSE(attentionDimsOf(false, bshd, in, out, unused, why)); // heads-first shapes
  EXPECT_NE(why.find("k is f32[2,80,12,64], expected f32[2,100,12,64] (bshd: q, k, v, the "
                     "output and the gradients read as [..., H, S, D])"),
            std::string::npos)
      << why;
  EXPECT_FALSE(attentionDimsOf(false, bshd, {f32({4, 8}), f32({4, 8}), f32({4, 8})},
                               {f32({4, 8}), f32({4})}, unused, why));
  EXPECT_NE(why.find("rank of 3 or more"), std::string::npos) << why;

  // packed: q, k and v one [B, S, 3, H, D] buffer, the backward's one
  // output its gradient; k's and v's pieces H D and 2 H D elements on.
  plan::Attention packed = bshd;
  packed.set_packed(true);
  plan::TensorType qkv = f32({2, 100, 3, 12, 64});
  std::vector<plan::TensorType> packedOut = {f32({2, 100, 12, 64}), f32({2, 12, 100})};
  AttentionDims pieces;
  ASSERT_TRUE(attentionDimsOf(false, packed, {qkv, qkv, qkv}, packedOut, pieces, why)) << why;
  EXPECT_TRUE(pieces.packed && pieces.bshd);
  EXPECT_EQ(pieces.heads, 12);
  EXPECT_EQ(pieces.bh, 24);
  EXPECT_EQ(pieces.sq, 100);
  EXPECT_EQ(pieces.sk, 100);
  EXPECT_EQ(pieceOffset(pieces, 0), 0);
  EXPECT_EQ(pieceOffset(pieces, 1), 12 * 64);
  EXPECT_EQ(pieceOffset(pieces, 2), 2 * 12 * 64);
  EXPECT_EQ(pieceOffset(rows, 2), 0); // not packed
  ASSERT_TRUE(attentionDimsOf(true, packed,
                              {qkv, qkv, qkv, packedOut[0], packedOut[1], packedOut[0]}, {qkv},
                              pieces, why))
      << why;
  EXPECT_FALSE(attentionDimsOf(true, packed,
                               {qkv, qkv, qkv, packedOut[0], packedOut[1], packedOut[0]},
                               {rowsIn[0], rowsIn[0], rowsIn[0]}, unused, why));
  EXPECT_NE(why.find("packed: q, k and v must be one bshd buffer [..., S, 3, H, D] and the one "
                     "output its gradient"),
            std::string::npos)
      << why;
  EXPECT_FALSE(attentionDimsOf(false, packed, {qkv, rowsIn[0], qkv}, packedOut, unused, why));
  EXPECT_NE(why.find("packed"), std::string::npos) << why;
}

// Grouped-query attention: k and v with 2 heads where q has 6 (bshd too);
// grad_k and grad_v's kernel is a block per key tile of each of their
// heads. Heads that do not divide q's are refused with the shapes.
TEST(AttentionLaunch, GroupedQueryAttentionReadsKeyValueHeadsAndGridsOverThem) {
  plan::Attention attention;
  attention.set_scale(0.125);
  auto bf16 = [](std::vector<int64_t> s) { return tensor(plan::BF16, std::move(s)); };
  auto f32 = [](std::vector<int64_t> s) { return tensor(plan::F32, std::move(s)); };
  for (bool bshd : {false, true}) {
    attention.set_bshd(bshd);
    auto rows = [&](int64_t heads, int64_t s, int64_t d) {
      return bshd ? bf16({4, s, heads, d}) : bf16({4, heads, s, d});
    };
    std::vector<plan::TensorType> in = {rows(6, 100, 64), rows(2, 100, 64), rows(2, 100, 64),
                                        rows(6, 100, 64), f32({4, 6, 100}), rows(6, 100, 64)};
    std::vector<plan::TensorType> out = {in[0], in[1], in[2]};
    AttentionDims dims;
    std::string why;
    ASSERT_TRUE(attentionDimsOf(true, attention, in, out, dims, why)) << why;
    EXPECT_EQ(dims.bh, 24);
    EXPECT_EQ(dims.group, 3);
    EXPECT_EQ(gradQLaunch(dims).gridY, 24u);
    EXPECT_EQ(gradKVLaunch(dims).gridY, 8u);
    EXPECT_EQ(forwardLaunch(dims).gridY, 24u);
    in[1] = in[2] = rows(4, 100, 64);
    out = {in[0], in[1], in[2]};
    EXPECT_FALSE(attentionDimsOf(true, attention, in, out, dims, why));
    EXPECT_NE(why.find("k is bf16[4,4,100,64], expected bf16[4,6,100,64]"), std::string::npos)
        << why;
  }
}

// The kernels index the bias as (h / inner) * outerStride + (h % inner) *
// innerStride + i * rowStride + j: for every bias shape the compiler makes
// (and more), that is where the broadcast value for (head, query, key) is.
TEST(AttentionLaunch, BiasIndexingFindsEachBroadcastValue) {
  struct Shape {
    std::vector<int64_t> lead, bias; // q's leading dims; the bias's shape
  };
  const int64_t sq = 5, sk = 7;
  std::vector<Shape> shapes = {
      {{2, 3}, {2, 1, 1, sk}},  {{2, 3}, {2, 3, sq, sk}}, {{2, 3}, {1, 3, sq, sk}},
      {{2, 3}, {1, 1, 1, sk}},  {{2, 3}, {2, 1, sq, sk}}, {{4}, {4, sq, sk}},
      {{4}, {1, 1, sk}},        {{1, 2, 3}, {1, 2, 1, sq, sk}}, {{2, 1, 3}, {2, 1, 1, 1, sk}},
      {{2, 3, 2}, {2, 3, 1, 1, sk}}};
  for (const Shape &shape : shapes) {
    std::vector<int64_t> qShape = shape.lead, kShape = shape.lead, lseShape = shape.lead;
    qShape.insert(qShape.end(), {sq, 8});
    kShape.insert(kShape.end(), {sk, 8});
    lseShape.push_back(sq);
    plan::Attention attention;
    attention.set_scale(1);
    attention.set_bias(true);
    auto q = tensor(plan::F32, qShape), k = tensor(plan::F32, kShape);
    AttentionDims dims;
    std::string why;
    ASSERT_TRUE(attentionDimsOf(false, attention, {q, k, k, tensor(plan::F32, shape.bias)},
                                {q, tensor(plan::F32, lseShape)}, dims, why))
        << why;
    ASSERT_TRUE(dims.bias);
    size_t r = shape.lead.size();
    for (int64_t h = 0; h < dims.bh; ++h) {
      // The reference: h's digits over q's leading dims, broadcast where
      // the bias has 1.
      int64_t rest = h, at = 0, stride = shape.bias[r] * sk;
      for (size_t d = r; d-- > 0;) {
        int64_t digit = rest % shape.lead[d];
        rest /= shape.lead[d];
        if (shape.bias[d] != 1)
          at += digit * stride;
        stride *= shape.bias[d];
      }
      for (int64_t i = 0; i < sq; ++i)
        for (int64_t j = 0; j < sk; ++j) {
          int64_t want = at + (shape.bias[r] == 1 ? 0 : i) * sk + j;
          int64_t got = (h / dims.inner) * dims.outerStride + (h % dims.inner) * dims.innerStride +
                        i * dims.rowStride + j;
          ASSERT_EQ(got, want) << "bias of " << shape.bias.size() << " dims, head " << h
                               << ", query " << i << ", key " << j;
        }
    }
  }
  // Broadcast dims between kept ones: not one outer and one inner run.
  plan::Attention attention;
  attention.set_scale(1);
  attention.set_bias(true);
  auto q = tensor(plan::F32, {2, 3, 2, sq, 8}), k = tensor(plan::F32, {2, 3, 2, sk, 8});
  AttentionDims dims;
  std::string why;
  EXPECT_FALSE(attentionDimsOf(false, attention, {q, k, k, tensor(plan::F32, {2, 1, 2, 1, sk})},
                               {q, tensor(plan::F32, {2, 3, 2, sq})}, dims, why));
  EXPECT_NE(why.find("interleave"), std::string::npos) << why;
  EXPECT_FALSE(attentionDimsOf(false, attention, {q, k, k}, {q, tensor(plan::F32, {2, 3, 2, sq})},
                               dims, why));
  EXPECT_NE(why.find("takes 4 inputs"), std::string::npos) << why;
}

TEST(AttentionLaunch, EveryLaunchNamesAnEntryOfTheEmbeddedPtx) {
  std::string ptx = flashAttentionPtx();
  EXPECT_NE(ptx.find(".target sm_80"), std::string::npos);
  for (bool bf16 : {false, true}) {
    AttentionDims dims = dimsOf(100, 100, true, bf16);
    for (const AttentionLaunch &launch :
         {forwardLaunch(dims), gradQLaunch(dims), gradKVLaunch(dims)})
      EXPECT_NE(ptx.find(".entry " + launch.entry + "("), std::string::npos) << launch.entry;
  }
}

} // namespace
