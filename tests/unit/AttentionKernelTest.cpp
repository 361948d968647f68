//===- AttentionKernelTest.cpp - the CPU attention kernels against a reference -===//
//
// attention and attention_backward through the CPU backend's makeKernel on
// the shapes the GPU test runs (AttentionReference.h: f32 and bf16, causal
// and not, Sq != Sk with rows that see no key, odd head dims, lengths past
// the kernel's 128-row tiles), on one and two threads, against the plan's
// definition in double. Bounds, relative to each output's largest
// magnitude: f32 1e-5 (sgemm sums in f32, the softmax's sum in double);
// bf16 1e-2 (computed in f32 from the same bf16 inputs, each result rounded
// once to bf16: 2^-9 relative). And what the kernels refuse, with why.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "tests/unit/AttentionReference.h"

#include <gtest/gtest.h>

namespace {

using namespace dtc;
using namespace dtc::attentiontest;

/// Runs `inst` over `inputs` on `threads` threads; the outputs' values.
std::vector<Values> runOnCpu(const plan::Instruction &inst,
                             const std::vector<plan::TensorType> &inTypes,
                             const std::vector<Values> &inputs,
                             const std::vector<plan::TensorType> &outTypes, int threads) {
  std::string error;
  auto kernel = runtime::cpu::makeKernel(inst, inTypes, outTypes, error);
  EXPECT_NE(kernel, nullptr) << error;
  if (!kernel)
    return {};
  std::vector<std::vector<char>> in, out;
  std::vector<const void *> inPointers;
  std::vector<void *> outPointers;
  for (size_t i = 0; i < inputs.size(); ++i) {
    in.push_back(bytesOf(inputs[i], inTypes[i].dtype()));
    inPointers.push_back(in.back().data());
  }
  for (const plan::TensorType &t : outTypes) // NaN bytes: a skipped element shows
    out.emplace_back(size_t(plan::byteSize(t)), char(0xff));
  for (auto &bytes : out)
    outPointers.push_back(bytes.data());
  runtime::cpu::ThreadPool pool(threads);
  EXPECT_TRUE(kernel->run(inPointers.data(), outPointers.data(), pool, error)) << error;
  std::vector<Values> results;
  for (size_t o = 0; o < outTypes.size(); ++o)
    results.push_back(valuesOf(out[o], outTypes[o].dtype()));
  return results;
}

TEST(AttentionKernel, ForwardAndBackwardAgainstADoubleReference) {
  std::mt19937 rng(11);
  for (const Case &c : cases())
    for (int threads : {1, 2}) {
      SCOPED_TRACE(c.name() + ", " + std::to_string(threads) + " threads");
      bool bf16 = c.dtype == plan::BF16;
      double bound = bf16 ? 1e-2 : 1e-5;
      Problem p(c, rng);
      std::vector<Values> got =
          runOnCpu(p.forward, p.forwardInputs(), p.forwardValues(), {p.outType, p.lseType},
                   threads);
      ASSERT_EQ(got.size(), 2u);
      Reference r = forwardReference(c, p.scale, p.q, p.k, p.v, p.bias);
      std::string where;
      EXPECT_LE(worstError(got[0], r.out, 0.0, where), bound) << "out, " << where;
      EXPECT_LE(worstError(got[1], r.lse, 1.0, where), 1e-5) << "lse, " << where;

      p.fromReference(c, r);
      std::vector<Values> grads = runOnCpu(p.backward, p.backwardInputs(),
                                           p.backwardValues(), p.qkv, threads);
      ASSERT_EQ(grads.size(), 3u);
      backwardReference(c, p.scale, p.q, p.k, p.v, p.out, p.lse, p.dout, r, p.bias);
      EXPECT_LE(worstError(grads[0], r.dq, 0.0, where), bound) << "grad_q, " << where;
      EXPECT_LE(worstError(grads[1], r.dk, 0.0, where), bound) << "grad_k, " << where;
      EXPECT_LE(worstError(grads[2], r.dv, 0.0, where), bound) << "grad_v, " << where;
    }
}

// [..., S, H, D] operands (bshd) give each head the results the heads-first
// layout gives it: the kernels gather a head's rows and scatter its results.
TEST(AttentionKernel, HeadsAfterTheSequenceGiveTheSameResults) {
  std::mt19937 rng(13);
  for (const Case &c : cases())
    for (int threads : {1, 2}) {
      SCOPED_TRACE(c.name() + ", " + std::to_string(threads) + " threads");
      double bound = c.dtype == plan::BF16 ? 4e-3 : 1e-6; // a rounding, an f32 ulp
      Problem p(c, rng);
      BshdProblem t(p, c);
      std::vector<Values> want = runOnCpu(p.forward, p.forwardInputs(), p.forwardValues(),
                                          {p.outType, p.lseType}, threads);
      std::vector<Values> got = runOnCpu(t.forward, t.forwardInputs(), t.forwardValues(),
                                         {t.outType, t.lseType}, threads);
      ASSERT_EQ(got.size(), 2u);
      int64_t h = t.heads;
      auto expect = [&](const Values &bshd, const Values &first, int64_t rows, int64_t cols,
                        const char *what, int64_t heads = 0) {
        Values moved = swapHeads(bshd, heads ? heads : h, rows, cols, true);
        std::vector<double> reference(first.begin(), first.end());
        std::string where;
        EXPECT_LE(worstError(moved, reference, 0.0, where), bound) << what << ", " << where;
      };
      expect(got[0], want[0], c.sq, c.dv, "out");
      std::string where;
      EXPECT_LE(worstError(got[1], std::vector<double>(want[1].begin(), want[1].end()), 1.0,
                           where),
                1e-6)
          << "lse, " << where;

      p.fromReference(c, forwardReference(c, p.scale, p.q, p.k, p.v, p.bias));
      t.withOutOf(p, c);
      std::vector<Values> wantGrads =
          runOnCpu(p.backward, p.backwardInputs(), p.backwardValues(), p.qkv, threads);
      std::vector<Values> grads =
          runOnCpu(t.backward, t.backwardInputs(), t.backwardValues(), t.qkv, threads);
      ASSERT_EQ(grads.size(), 3u);
      expect(grads[0], wantGrads[0], c.sq, c.d, "grad_q");
      expect(grads[1], wantGrads[1], c.sk, c.d, "grad_k", c.kvHeads());
      expect(grads[2], wantGrads[2], c.sk, c.dv, "grad_v", c.kvHeads());
    }
}

// q, k and v packed in one [..., S, 3, H, D] buffer (transformers' GPT-2
// projection's product) give the bshd results exactly: the same rows are
// gathered, from 3 H D apart; the backward writes the three gradients
// into one buffer's pieces.
TEST(AttentionKernel, PackedQkvGiveTheBshdResults) {
  std::mt19937 rng(17);
  int run = 0;
  for (const Case &c : cases()) {
    if (!packable(c))
      continue;
    for (int config = 0; config < 4; ++config) { // 1 and 2 threads, both layouts
      int threads = 1 + config % 2;
      bool interleaved = config >= 2;
      SCOPED_TRACE(c.name() + ", " + std::to_string(threads) + " threads" +
                   (interleaved ? ", interleaved [..., S, H, 3, D]" : ""));
      Problem p(c, rng);
      BshdProblem t(p, c);
      PackedProblem k(t, c, interleaved);
      std::vector<Values> want = runOnCpu(t.forward, t.forwardInputs(), t.forwardValues(),
                                          {t.outType, t.lseType}, threads);
      std::vector<Values> got = runOnCpu(k.forward, k.forwardInputs(), k.forwardValues(),
                                         {k.outType, k.lseType}, threads);
      ASSERT_EQ(got.size(), 2u);
      EXPECT_EQ(got[0], want[0]) << "out";
      EXPECT_EQ(got[1], want[1]) << "lse";

      p.fromReference(c, forwardReference(c, p.scale, p.q, p.k, p.v, p.bias));
      t.withOutOf(p, c);
      k.withOutOf(p, c);
      std::vector<Values> wantGrads =
          runOnCpu(t.backward, t.backwardInputs(), t.backwardValues(), t.qkv, threads);
      std::vector<Values> grads =
          runOnCpu(k.backward, k.backwardInputs(), k.backwardValues(), {k.packedType}, threads);
      ASSERT_EQ(grads.size(), 1u);
      ASSERT_EQ(wantGrads.size(), 3u);
      for (int piece = 0; piece < 3; ++piece)
        EXPECT_EQ(k.piece(grads[0], piece), wantGrads[size_t(piece)]) << "gradient " << piece;
      ++run;
    }
  }
  EXPECT_GE(run, 32); // f32 and bf16, with and without a mask and a bias, both layouts
}

TEST(AttentionKernel, RefusesWhatDoesNotFitWithWhy) {
  Case c{{2}, 4, 5, 8, 6, false, plan::F32};
  plan::Instruction inst;
  inst.mutable_attention()->set_scale(0.5);
  auto q = c.type({4, 8}, plan::F32), k = c.type({5, 8}, plan::F32),
       v = c.type({5, 6}, plan::F32), out = c.type({4, 6}, plan::F32),
       lse = c.type({4}, plan::F32);
  std::string error;
  EXPECT_NE(runtime::cpu::makeKernel(inst, {q, k, v}, {out, lse}, error), nullptr) << error;
  auto refused = [&](const plan::Instruction &i, std::vector<plan::TensorType> in,
                     std::vector<plan::TensorType> outs) {
    error.clear();
    EXPECT_EQ(runtime::cpu::makeKernel(i, in, outs, error), nullptr);
    return error;
  };
  EXPECT_EQ(refused(inst, {q, v, v}, {out, lse}),
            "attention: shapes [2,4,8], [2,5,6], [2,5,6] are not q [..., H, Sq, D], k [..., G, "
            "Sk, D], v [..., G, Sk, Dv] (G dividing H)");
  EXPECT_EQ(refused(inst, {q, k, v}, {out, c.type({4}, plan::BF16)}),
            "attention: outputs must be out [..., Sq, Dv] in q's dtype and lse [..., Sq] f32");
  EXPECT_EQ(refused(inst, {q, k, v}, {out}),
            "attention: expected 3 to 4 inputs and 2 outputs, got 3 inputs and 1 outputs");
  // Fewer than two dims (a damaged plan; the plan fuzzer's find): refused,
  // never read before their first dim.
  plan::TensorType flat;
  flat.set_dtype(plan::F32);
  flat.add_shape(8);
  EXPECT_EQ(refused(inst, {flat, flat, flat}, {flat, flat}).rfind("attention: ", 0), 0u)
      << error;
  // A bias: said and given, f32, broadcasting to the scores [2, 4, 5].
  plan::Instruction biased = inst;
  biased.mutable_attention()->set_bias(true);
  plan::TensorType padding = c.type({1, 5}, plan::F32);
  EXPECT_NE(runtime::cpu::makeKernel(biased, {q, k, v, padding}, {out, lse}, error), nullptr)
      << error;
  EXPECT_EQ(refused(biased, {q, k, v}, {out, lse}), "attention: the bias input is missing");
  EXPECT_EQ(refused(inst, {q, k, v, padding}, {out, lse}),
            "attention: an input past the last is not a bias");
  EXPECT_EQ(refused(biased, {q, k, v, c.type({1, 4}, plan::F32)}, {out, lse}),
            "attention: bias f32[2,1,4] is not f32 broadcasting to the scores [..., Sq, Sk] of "
            "q [2,4,8]");
  EXPECT_EQ(refused(biased, {q, k, v, c.type({1, 5}, plan::BF16)}, {out, lse}),
            "attention: bias bf16[2,1,5] is not f32 broadcasting to the scores [..., Sq, Sk] of "
            "q [2,4,8]");
  // bshd: q [..., Sq, H, D], the scores still [..., H, Sq, Sk].
  plan::Instruction bshd = inst;
  bshd.mutable_attention()->set_bshd(true);
  EXPECT_EQ(refused(bshd, {q, k, v}, {out, lse}),
            "attention: shapes [2,4,8], [2,5,8], [2,5,6] are not q [..., Sq, H, D], k [..., Sk, "
            "G, D], v [..., Sk, G, Dv] (G dividing H)");
  // Grouped-query attention: k's and v's heads must divide q's.
  Case g{{2, 6}, 4, 5, 8, 8, false, plan::F32, {}, 3}; // k and v [2, 2, 5, 8]
  EXPECT_NE(runtime::cpu::makeKernel(inst,
                                     {g.type({4, 8}, plan::F32), g.type({5, 8}, plan::F32, true),
                                      g.type({5, 8}, plan::F32, true)},
                                     {g.type({4, 8}, plan::F32), g.type({4}, plan::F32)}, error),
            nullptr)
      << error;
  Case four{{2, 4}, 4, 5, 8, 8, false, plan::F32};
  EXPECT_EQ(refused(inst,
                    {g.type({4, 8}, plan::F32), four.type({5, 8}, plan::F32),
                     four.type({5, 8}, plan::F32)},
                    {g.type({4, 8}, plan::F32), g.type({4}, plan::F32)}),
            "attention: shapes [2,6,4,8], [2,4,5,8], [2,4,5,8] are not q [..., H, Sq, D], k "
            "[..., G, Sk, D], v [..., G, Sk, Dv] (G dividing H)");
  Case c3{{2}, 4, 4, 8, 8, false, plan::F32};
  auto q3 = c3.type({4, 3, 8}, plan::F32), out3 = c3.type({4, 3, 8}, plan::F32);
  EXPECT_NE(runtime::cpu::makeKernel(bshd, {q3, q3, q3}, {out3, c3.type({3, 4}, plan::F32)},
                                     error),
            nullptr)
      << error;
  EXPECT_EQ(refused(bshd, {q3, q3, q3}, {out3, c3.type({4, 3}, plan::F32)}),
            "attention: outputs must be out [..., Sq, H, Dv] in q's dtype and lse [..., H, Sq] "
            "f32");
  // packed: q, k and v one [..., S, 3, H, D] buffer, the backward's one
  // output its gradient.
  plan::Instruction packed = bshd;
  packed.mutable_attention()->set_packed(true);
  auto qkv = c3.type({4, 3, 3, 8}, plan::F32), lse3 = c3.type({3, 4}, plan::F32);
  EXPECT_NE(runtime::cpu::makeKernel(packed, {qkv, qkv, qkv}, {out3, lse3}, error), nullptr)
      << error;
  EXPECT_EQ(refused(packed, {qkv, q3, q3}, {out3, lse3}),
            "attention: packed q, k and v [2,4,3,3,8], [2,4,3,8], [2,4,3,8] are not one bshd "
            "buffer [..., S, 3, H, D]");
  plan::Instruction packedBackward;
  *packedBackward.mutable_attention_backward() = packed.attention();
  EXPECT_NE(runtime::cpu::makeKernel(packedBackward, {qkv, qkv, qkv, out3, lse3, out3}, {qkv},
                                     error),
            nullptr)
      << error;
  EXPECT_EQ(refused(packedBackward, {qkv, qkv, qkv, out3, lse3, out3}, {q3, q3, q3}),
            "attention_backward: expected 6 to 7 inputs and 1 output, got 6 inputs and 3 "
            "outputs");
  plan::Instruction zero;
  zero.mutable_attention()->set_scale(0);
  EXPECT_EQ(refused(zero, {q, k, v}, {out, lse}), "attention: scale must be positive and finite");
  plan::Instruction backward;
  backward.mutable_attention_backward()->set_scale(0.5);
  EXPECT_EQ(refused(backward, {q, k, v, out, out, out}, {q, k, v}),
            "attention_backward: output and grad_output must be [..., Sq, Dv] in q's dtype, lse "
            "[..., Sq] f32");
}

} // namespace
