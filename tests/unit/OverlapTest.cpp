// Which once-per-step reductions may run in the last micro-batch
// (plan/Overlap.h), and the loader's refusal of one that may not: moving
// it there must change nothing.
#include "plan/Overlap.h"

#include <gtest/gtest.h>

using namespace dtc;

namespace {

/// A micro-batched step on one rank: instruction 0 sums a gradient (g)
/// into its accumulator in place (a, at offset 0), instruction 1 makes
/// something else (h); in the once-per-step part, instruction 2 reduces
/// the sum in place and instruction 3 reads it.
plan::RankProgram step() {
  plan::RankProgram p;
  plan::TensorType type;
  type.set_dtype(plan::F32);
  type.add_shape(4);
  auto buffer = [&](int64_t offset, bool accumulator) {
    plan::Buffer *b = p.add_buffers();
    *b->mutable_type() = type;
    b->set_offset(offset);
    if (accumulator)
      b->mutable_parameter()->set_accumulator(true);
    return uint32_t(p.buffers_size() - 1);
  };
  uint32_t a = buffer(0, true), g = buffer(16, false), sum = buffer(0, false),
           h = buffer(32, false), reduced = buffer(0, false), out = buffer(48, false);
  auto add = [&](std::vector<uint32_t> in, std::vector<uint32_t> outs) {
    plan::Instruction *inst = p.add_instructions();
    for (uint32_t id : in)
      inst->add_inputs(id);
    for (uint32_t id : outs)
      inst->add_outputs(id);
    return inst;
  };
  add({a, g}, {sum})->mutable_elementwise();
  add({g}, {h})->mutable_copy();
  plan::Collective *c = add({sum}, {reduced})->mutable_collective();
  c->set_kind(plan::ALL_REDUCE);
  c->add_mesh_axes(0);
  add({reduced}, {out})->mutable_copy();
  p.set_accumulate_end(2);
  p.set_arena_bytes(64);
  return p;
}

plan::OverlappedInstruction overlapped(uint32_t instruction, uint32_t after) {
  plan::OverlappedInstruction o;
  o.set_instruction(instruction);
  o.set_after(after);
  return o;
}

TEST(Overlap, AReductionInPlaceRunsAfterItsLastSum) {
  std::vector<plan::OverlappedInstruction> found = plan::overlappableReductions(step());
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].instruction(), 2u);
  EXPECT_EQ(found[0].after(), 0u);
  EXPECT_EQ(plan::overlapProblem(step(), overlapped(2, 0)), "");
}

TEST(Overlap, NothingMayTouchTheSumBetween) {
  // A later per-micro-batch instruction reads the sum: the reduction
  // waits for it (and may run after it).
  plan::RankProgram p = step();
  p.mutable_instructions(1)->add_inputs(2);
  EXPECT_EQ(plan::overlapProblem(p, overlapped(2, 0)),
            "instruction 1 touches the accumulator outside the part before instruction 0");
  ASSERT_EQ(plan::overlappableReductions(p).size(), 1u);
  EXPECT_EQ(plan::overlappableReductions(p)[0].after(), 1u);
  // A once-per-step instruction before the reduction reads the sum (a norm
  // of the unreduced gradients): it must not see it reduced.
  p = step();
  p.mutable_instructions()->SwapElements(2, 3);
  p.mutable_instructions(2)->set_inputs(0, 2);
  EXPECT_EQ(plan::overlapProblem(p, overlapped(3, 0)),
            "instruction 2 touches the accumulator before the reduction");
  EXPECT_TRUE(plan::overlappableReductions(p).empty());
}

TEST(Overlap, OnlyAnInPlaceReductionOfAnAccumulator) {
  plan::RankProgram p = step();
  p.mutable_buffers(4)->set_offset(48); // reduced elsewhere
  EXPECT_EQ(plan::overlapProblem(p, overlapped(2, 0)),
            "only an all-reduce in place in a gradient accumulator may run early");
  p = step();
  p.mutable_buffers(0)->mutable_parameter()->set_accumulator(false);
  EXPECT_EQ(plan::overlapProblem(p, overlapped(2, 0)),
            "only an all-reduce in place in a gradient accumulator may run early");
  EXPECT_EQ(plan::overlapProblem(step(), overlapped(3, 0)), "only an all-reduce may run early");
  EXPECT_EQ(plan::overlapProblem(step(), overlapped(1, 0)),
            "instruction 1 is not in the once-per-step part [2, 4)");
  EXPECT_EQ(plan::overlapProblem(step(), overlapped(2, 2)),
            "runs after instruction 2, which is not in the per-micro-batch part");
  EXPECT_EQ(plan::overlapProblem(step(), overlapped(2, 1)),
            "instruction 1 does not write the accumulator");
}

TEST(Overlap, TheLoaderChecksEveryListedOne) {
  plan::RankProgram p = step();
  EXPECT_EQ(plan::overlappedProblem(p), "");
  *p.add_overlapped() = overlapped(2, 0);
  EXPECT_EQ(plan::overlappedProblem(p), "");
  *p.add_overlapped() = overlapped(2, 0);
  EXPECT_EQ(plan::overlappedProblem(p), "instruction 2 is overlapped twice");
  p.mutable_overlapped(1)->set_instruction(3);
  EXPECT_EQ(plan::overlappedProblem(p),
            "overlapped instruction 3: only an all-reduce may run early");
}

} // namespace
