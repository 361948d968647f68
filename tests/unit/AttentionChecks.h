//===- AttentionChecks.h - a GPU attention kernel against the reference -*- C++ -*-===//
//
// The checks the flash kernels (runtime/cuda/kernels/FlashAttention.cu)
// pass, on a GPU (tests/gpu/GpuAttentionTest.cpp, which also holds cuDNN's
// fused attention to them) and on the CPU through the emulator
// (tests/emulator/FlashAttentionOnHostTest.cpp): one case of
// AttentionReference.h, forward then backward, with q, k, v heads first,
// after the sequence (bshd) or packed ([..., S, 3, H, D] or interleaved
// [..., S, H, 3, D]), against the double reference.
//
// Bounds, relative to each output's largest magnitude: f32 1e-4 (the
// kernels use FMA and the accurate expf/logf, no TF32). bf16 2e-2: the
// inputs are the same bf16 values in both, but the kernels round P and dS
// to bf16 (8 significant bits, a relative 2^-9 = 2e-3 each; cuDNN does
// the same) before their tensor-core products and round each output to
// bf16 (another 2e-3); summed over a row these errors partly cancel, so a
// few times 2e-3 is expected and 2e-2 leaves room without hiding a wrong
// mask or tile (which is off by O(1)). lse is f32 in both: its scores are
// f32 sums of exact bf16 products, so 1e-4 (f32) and 1e-3 (bf16) of
// max(1, |lse|).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_TESTS_UNIT_ATTENTIONCHECKS_H
#define DTC_TESTS_UNIT_ATTENTIONCHECKS_H

#include "tests/unit/AttentionReference.h"

#include <gtest/gtest.h>

#include <functional>
#include <optional>

namespace dtc::attentiontest {

/// Runs an instruction on the kernels under test: its outputs' values
/// (fewer after a failure, which it reports through gtest).
using RunAttention = std::function<std::vector<Values>(
    const plan::Instruction &inst, const std::vector<plan::TensorType> &inputTypes,
    const std::vector<Values> &inputs, const std::vector<plan::TensorType> &outputTypes)>;

/// Each result's worst error against the reference.
struct Errors {
  double out = 0, lse = 0, dq = 0, dk = 0, dv = 0;
};

inline double outputBound(const Case &c) { return c.dtype == plan::BF16 ? 2e-2 : 1e-4; }
inline double lseBound(const Case &c) { return c.dtype == plan::BF16 ? 1e-3 : 1e-4; }

/// The layouts a case runs in: heads first, [..., S, H, D] (bshd) and
/// q, k, v one packed [..., S, 3, H, D] buffer (cases with Sq == Sk and
/// D == Dv only).
enum class Layout { HeadsFirst, Bshd, Packed, Interleaved };

/// Case `c` in `layout` through `run`, its inputs drawn from `seed`: each
/// result (moved back to heads first) within the bounds above.
inline Errors checkAttention(const Case &c, Layout layout, unsigned seed,
                             const RunAttention &run) {
  Errors e;
  std::mt19937 rng(seed);
  Problem p(c, rng);
  BshdProblem t(p, c);
  std::optional<PackedProblem> k;
  bool packed = layout == Layout::Packed || layout == Layout::Interleaved;
  if (packed)
    k.emplace(t, c, layout == Layout::Interleaved);
  const int64_t h = t.heads;
  auto back = [&](const Values &x, int64_t rows, int64_t cols) {
    return layout == Layout::HeadsFirst ? x : swapHeads(x, h, rows, cols, true);
  };
  std::vector<Values> got =
      layout == Layout::HeadsFirst
          ? run(p.forward, p.forwardInputs(), p.forwardValues(), {p.outType, p.lseType})
      : layout == Layout::Bshd
          ? run(t.forward, t.forwardInputs(), t.forwardValues(), {t.outType, t.lseType})
          : run(k->forward, k->forwardInputs(), k->forwardValues(), {k->outType, k->lseType});
  EXPECT_EQ(got.size(), 2u);
  if (got.size() != 2)
    return e;
  Reference r = forwardReference(c, p.scale, p.q, p.k, p.v, p.bias);
  std::string where;
  e.out = worstError(back(got[0], c.sq, c.dv), r.out, 0.0, where);
  EXPECT_LE(e.out, outputBound(c)) << "out, " << where;
  e.lse = worstError(got[1], r.lse, 1.0, where);
  EXPECT_LE(e.lse, lseBound(c)) << "lse, " << where;

  // The backward reads the reference's out and lse.
  p.fromReference(c, r);
  t.withOutOf(p, c);
  if (k)
    k->withOutOf(p, c);
  std::vector<Values> grads =
      layout == Layout::HeadsFirst
          ? run(p.backward, p.backwardInputs(), p.backwardValues(), p.qkv)
      : layout == Layout::Bshd
          ? run(t.backward, t.backwardInputs(), t.backwardValues(), t.qkv)
          : run(k->backward, k->backwardInputs(), k->backwardValues(), {k->packedType});
  backwardReference(c, p.scale, p.q, p.k, p.v, p.out, p.lse, p.dout, r, p.bias);
  if (packed) {
    EXPECT_EQ(grads.size(), 1u);
    if (grads.size() != 1)
      return e;
    grads = {k->piece(grads[0], 0), k->piece(grads[0], 1), k->piece(grads[0], 2)};
  }
  EXPECT_EQ(grads.size(), 3u);
  if (grads.size() != 3)
    return e;
  e.dq = worstError(back(grads[0], c.sq, c.d), r.dq, 0.0, where);
  EXPECT_LE(e.dq, outputBound(c)) << "grad_q, " << where;
  auto backKv = [&](const Values &x, int64_t rows, int64_t cols) {
    return layout == Layout::HeadsFirst ? x : swapHeads(x, c.kvHeads(), rows, cols, true);
  };
  e.dk = worstError(backKv(grads[1], c.sk, c.d), r.dk, 0.0, where);
  EXPECT_LE(e.dk, outputBound(c)) << "grad_k, " << where;
  e.dv = worstError(backKv(grads[2], c.sk, c.dv), r.dv, 0.0, where);
  EXPECT_LE(e.dv, outputBound(c)) << "grad_v, " << where;
  return e;
}

} // namespace dtc::attentiontest

#endif // DTC_TESTS_UNIT_ATTENTIONCHECKS_H
