//===- CudnnAttentionTest.cpp - cuDNN's fused attention graphs, host side -===//
//
// CudnnAttention::describe without a GPU: what it refuses before asking
// cuDNN, and that the graphs it describes for sm_80 and sm_90 pass
// cudnn-frontend's validation (dims, strides, dtypes, the mask's
// alignment, the softmax statistics' shape) or are refused with the
// frontend's reason. Building plans needs a GPU (tests/gpu).
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/CudnnAttention.h"

#include <gtest/gtest.h>

namespace {

using namespace dtc::runtime::cuda;

AttentionDims dimsOf(int64_t bh, int64_t sq, int64_t sk, int64_t d, bool causal,
                     bool bf16 = true) {
  AttentionDims dims;
  dims.bh = bh, dims.sq = sq, dims.sk = sk, dims.d = d, dims.dv = d;
  dims.causal = causal, dims.bf16 = bf16, dims.scale = 0.125f;
  return dims;
}

TEST(CudnnAttention, RefusesWhatItDoesNotCoverBeforeAskingCudnn) {
  CudnnApi none; // never called for these
  std::string why;
  EXPECT_EQ(CudnnAttention::describe(none, dimsOf(8, 64, 64, 64, false, false), false, 90, why),
            nullptr);
  EXPECT_NE(why.find("not f32"), std::string::npos) << why;
  EXPECT_EQ(CudnnAttention::describe(none, dimsOf(8, 64, 64, 36, false), true, 90, why), nullptr);
  EXPECT_NE(why.find("multiples of 8"), std::string::npos) << why;
  EXPECT_EQ(CudnnAttention::describe(none, dimsOf(8, 96, 64, 64, true), false, 90, why), nullptr);
  EXPECT_NE(why.find("hides every key"), std::string::npos) << why;
}

class CudnnAttentionGraphs : public ::testing::Test {
protected:
  void SetUp() override {
    if (!cudnnAttentionBuilt())
      GTEST_SKIP() << "dtc was built without cudnn-frontend's headers";
    std::string why;
    api_ = cudnnApi(why);
    ASSERT_NE(api_, nullptr) << why;
  }
  const CudnnApi *api_ = nullptr;
};

TEST_F(CudnnAttentionGraphs, ForwardAndBackwardValidateForSm80AndSm90) {
  struct Shape {
    int64_t bh, sq, sk, d;
    bool causal;
  };
  for (int sm : {80, 90})
    for (Shape s : {Shape{24, 128, 128, 64, true}, Shape{2, 100, 260, 128, true},
                    Shape{4, 77, 77, 32, false}, Shape{1, 1024, 1024, 64, true}})
      for (bool backward : {false, true}) {
        std::string why;
        auto graph = CudnnAttention::describe(*api_, dimsOf(s.bh, s.sq, s.sk, s.d, s.causal),
                                              backward, sm, why);
        EXPECT_NE(graph, nullptr) << "sm_" << sm << " bh " << s.bh << " sq " << s.sq << " sk "
                                  << s.sk << " d " << s.d << (backward ? " backward" : "")
                                  << ": " << why;
      }
}

// With a bias (AttentionDims' layout): BERT's padding [B, 1, 1, Sk], one
// per query [1, 1, Sq, Sk] (a sliding window), one per head and query.
TEST_F(CudnnAttentionGraphs, BiasedGraphsValidate) {
  struct Bias {
    int64_t inner, outerStride, innerStride, rowStride;
  };
  const int64_t sq = 128, sk = 128, heads = 12;
  for (int sm : {80, 90})
    for (Bias b : {Bias{heads, sk, 0, 0}, Bias{heads * 4, 0, 0, sk},
                   Bias{heads, 0, sq * sk, sk}, Bias{heads, heads * sq * sk, sq * sk, sk}})
      for (bool backward : {false, true}) {
        AttentionDims dims = dimsOf(4 * heads, sq, sk, 64, false);
        dims.bias = true;
        dims.inner = b.inner, dims.outerStride = b.outerStride;
        dims.innerStride = b.innerStride, dims.rowStride = b.rowStride;
        std::string why;
        EXPECT_NE(CudnnAttention::describe(*api_, dims, backward, sm, why), nullptr)
            << "sm_" << sm << " bias inner " << b.inner << " strides " << b.outerStride << ", "
            << b.innerStride << ", " << b.rowStride << (backward ? " backward" : "") << ": "
            << why;
      }
}

// [batch, seq, heads, dim] operands (bshd): strided heads, with no bias, a
// padding bias per batch, and one per batch and head; a bias whose run of
// heads is not the operands' is refused before cuDNN.
TEST_F(CudnnAttentionGraphs, HeadsAfterTheSequenceValidate) {
  const int64_t heads = 12, sq = 1024;
  struct Bias {
    bool on;
    int64_t inner, outerStride, innerStride;
  };
  for (int sm : {80, 90})
    for (Bias b : {Bias{false, 1, 0, 0}, Bias{true, heads, sq, 0},
                   Bias{true, heads, heads * sq, sq}})
      for (bool backward : {false, true}) {
        AttentionDims dims = dimsOf(8 * heads, sq, sq, 64, !b.on);
        dims.bshd = true, dims.heads = heads;
        dims.bias = b.on, dims.inner = b.inner;
        dims.outerStride = b.outerStride, dims.innerStride = b.innerStride;
        std::string why;
        EXPECT_NE(CudnnAttention::describe(*api_, dims, backward, sm, why), nullptr)
            << "sm_" << sm << (b.on ? " bias" : "") << (backward ? " backward" : "") << ": "
            << why;
      }
  AttentionDims odd = dimsOf(8 * heads, 64, 64, 64, false);
  odd.bshd = true, odd.heads = heads, odd.bias = true;
  odd.inner = 8 * heads, odd.innerStride = 64 * 64;
  std::string why;
  EXPECT_EQ(CudnnAttention::describe(*api_, odd, false, 90, why), nullptr);
  EXPECT_NE(why.find("not per batch and head"), std::string::npos) << why;
}

// q, k and v pieces of one packed [batch, seq, 3, heads, dim] buffer (and
// their gradients written so): rows 3 H D apart.
TEST_F(CudnnAttentionGraphs, PackedPiecesValidate) {
  const int64_t heads = 12, sq = 1024;
  for (int sm : {80, 90})
    for (bool backward : {false, true}) {
      for (bool interleaved : {false, true}) { // [B, S, 3, H, D] or [B, S, H, 3, D]
        AttentionDims dims = dimsOf(8 * heads, sq, sq, 64, true);
        dims.bshd = true, dims.heads = heads, dims.packed = true;
        dims.interleaved = interleaved;
        std::string why;
        EXPECT_NE(CudnnAttention::describe(*api_, dims, backward, sm, why), nullptr)
            << "sm_" << sm << (backward ? " backward" : "") << (interleaved ? " interleaved" : "")
            << ": " << why;
      }
    }
}

// Grouped-query attention (Llama's: 32 query heads on 8 key-value heads;
// multi-query: on 1), bshd and heads first, causal and with a padding bias:
// k, v and their gradients with the key-value heads.
TEST_F(CudnnAttentionGraphs, GroupedQueryAttentionValidates) {
  const int64_t heads = 32, sq = 512;
  for (int sm : {80, 90})
    for (int64_t group : {4, 32})
      for (bool bshd : {false, true})
        for (bool bias : {false, true})
          for (bool backward : {false, true}) {
            AttentionDims dims = dimsOf(2 * heads, sq, sq, 128, !bias);
            dims.group = group;
            dims.bshd = bshd, dims.heads = bshd ? heads : 1;
            if (bias) // [B, 1, 1, Sk]
              dims.bias = true, dims.inner = heads, dims.outerStride = sq;
            std::string why;
            EXPECT_NE(CudnnAttention::describe(*api_, dims, backward, sm, why), nullptr)
                << "sm_" << sm << " group " << group << (bshd ? " bshd" : "")
                << (bias ? " bias" : "") << (backward ? " backward" : "") << ": " << why;
          }
  // A bias whose heads split a group is refused before cuDNN.
  AttentionDims split = dimsOf(2 * heads, sq, sq, 128, false);
  split.group = 4, split.bias = true, split.inner = 2, split.outerStride = sq;
  std::string why;
  EXPECT_EQ(CudnnAttention::describe(*api_, split, false, 90, why), nullptr);
  EXPECT_NE(why.find("splits a group"), std::string::npos) << why;
}

TEST_F(CudnnAttentionGraphs, HeadDimsPastCudnnsLimitAreRefusedWithTheFrontendsReason) {
  // The backward's: 256 on sm_90, 128 on sm_80.
  std::string why;
  EXPECT_EQ(CudnnAttention::describe(*api_, dimsOf(4, 64, 64, 512, false), true, 90, why),
            nullptr);
  EXPECT_NE(why.find("cuDNN's fused attention: "), std::string::npos) << why;
  EXPECT_NE(why.find("256"), std::string::npos) << why;
  EXPECT_EQ(CudnnAttention::describe(*api_, dimsOf(4, 64, 64, 256, false), true, 80, why),
            nullptr);
  EXPECT_NE(why.find("128"), std::string::npos) << why;
  EXPECT_NE(CudnnAttention::describe(*api_, dimsOf(4, 64, 64, 256, false), true, 90, why),
            nullptr)
      << why;
}

} // namespace
