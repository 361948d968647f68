// Each stage's order of forward and backward parts under GPipe and 1F1B,
// and the stash copies each keeps; the loader's checks of pipelined plans:
// the stages, the stash (its copies, what may share their bytes), the loss,
// and sends and receives that pair within each part and all meet in the
// stages' schedule.
#include "plan/PipelineSchedule.h"
#include "plan/PlanLoader.h"

#include <gtest/gtest.h>

#include <string>

using namespace dtc;

namespace {

/// "F0 F1 B0 B1" for an order.
std::string text(const std::vector<plan::PipelineTask> &order) {
  std::string s;
  for (const plan::PipelineTask &t : order)
    s += (s.empty() ? "" : " ") + std::string(t.forward ? "F" : "B") +
         std::to_string(t.microBatch);
  return s;
}

TEST(PipelineSchedule, GPipeRunsEveryForwardThenEveryBackward) {
  for (int64_t stage = 0; stage < 4; ++stage) {
    EXPECT_EQ(text(plan::pipelineOrder(plan::GPIPE, 4, stage, 4)),
              "F0 F1 F2 F3 B0 B1 B2 B3");
    // Every stage keeps all M micro-batches.
    EXPECT_EQ(plan::stashSlots(plan::GPIPE, 4, stage, 4), 4);
    EXPECT_EQ(plan::stashSlots(plan::GPIPE, 4, stage, 8), 8);
  }
}

TEST(PipelineSchedule, OneForwardOneBackwardWarmsUpByStage) {
  EXPECT_EQ(text(plan::pipelineOrder(plan::ONE_F_ONE_B, 4, 0, 6)),
            "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(text(plan::pipelineOrder(plan::ONE_F_ONE_B, 4, 2, 6)),
            "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  EXPECT_EQ(text(plan::pipelineOrder(plan::ONE_F_ONE_B, 4, 3, 6)),
            "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  // M = p: the first stage warms up with every forward but the last.
  EXPECT_EQ(text(plan::pipelineOrder(plan::ONE_F_ONE_B, 4, 0, 4)), "F0 F1 F2 F3 B0 B1 B2 B3");
  EXPECT_EQ(text(plan::pipelineOrder(plan::ONE_F_ONE_B, 4, 1, 4)), "F0 F1 F2 B0 F3 B1 B2 B3");
  for (int64_t stage = 0; stage < 4; ++stage)
    EXPECT_EQ(plan::stashSlots(plan::ONE_F_ONE_B, 4, stage, 4), 4 - stage);
  // At most p - s micro-batches in flight on stage s; never more than M.
  for (int64_t stage = 0; stage < 4; ++stage)
    EXPECT_EQ(plan::stashSlots(plan::ONE_F_ONE_B, 4, stage, 8), 4 - stage);
  EXPECT_EQ(plan::stashSlots(plan::ONE_F_ONE_B, 4, 0, 2), 2);
}

TEST(PipelineSchedule, EveryMicroBatchRunsOnceEachWayInOrder) {
  for (auto schedule : {plan::GPIPE, plan::ONE_F_ONE_B})
    for (int64_t stages : {2, 3, 8})
      for (int64_t m : {1, 2, 5, 16})
        for (int64_t stage = 0; stage < stages; ++stage) {
          int64_t forwards = 0, backwards = 0;
          for (const plan::PipelineTask &t : plan::pipelineOrder(schedule, stages, stage, m)) {
            // In order each way, and a backward only after its forward.
            EXPECT_EQ(t.microBatch, t.forward ? forwards : backwards);
            (t.forward ? forwards : backwards)++;
            EXPECT_LE(backwards, forwards);
          }
          EXPECT_EQ(forwards, m);
          EXPECT_EQ(backwards, m);
        }
}

TEST(PipelineSchedule, NamesRoundTrip) {
  for (auto schedule : {plan::GPIPE, plan::ONE_F_ONE_B})
    EXPECT_EQ(plan::scheduleNamed(plan::scheduleName(schedule)), schedule);
  EXPECT_FALSE(plan::scheduleNamed("interleaved"));
}

/// Two stages on a pp=2 mesh, each one copy instruction from its input to
/// a stashed buffer; stage 1 computes the output.
plan::Plan twoStages() {
  plan::Plan p;
  p.set_format_version(plan::kPlanFormatVersion);
  auto *axis = p.mutable_mesh()->add_axes();
  axis->set_name("pp");
  axis->set_size(2);
  p.mutable_training()->set_micro_batches(2);
  auto *pipeline = p.mutable_training()->mutable_pipeline();
  pipeline->set_stages(2);
  pipeline->set_schedule(plan::ONE_F_ONE_B);
  plan::TensorType type;
  type.set_dtype(plan::F32);
  type.add_shape(4);
  *p.add_inputs()->mutable_type() = type;
  p.mutable_inputs(0)->set_name("x");
  *p.add_outputs()->mutable_type() = type;
  p.mutable_outputs(0)->set_name("y");
  for (int s = 0; s < 2; ++s) {
    p.add_program_of_rank(uint32_t(s));
    auto *rank = p.add_ranks();
    rank->set_arena_bytes(48);
    rank->set_stash_bytes(16);
    rank->set_stash_slots(2);
    auto *x = rank->add_buffers();
    *x->mutable_type() = type;
    x->set_input(0);
    x->set_offset(32);
    auto *kept = rank->add_buffers();
    *kept->mutable_type() = type;
    kept->set_stashed(true);
    auto *copy = rank->add_instructions();
    copy->add_inputs(0);
    copy->add_outputs(1);
    copy->mutable_copy();
    rank->set_forward_end(1);
    rank->set_accumulate_end(1);
    rank->add_outputs(s == 1 ? 1 : plan::kNoBuffer);
  }
  return p;
}

std::string errorOf(const plan::Plan &p) {
  std::string error;
  EXPECT_FALSE(plan::validatePlan(p, error));
  return error;
}

testing::AssertionResult contains(const std::string &text, const std::string &part) {
  if (text.find(part) != std::string::npos)
    return testing::AssertionSuccess();
  return testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

plan::Transfer along(int64_t stage) {
  plan::Transfer t;
  t.mutable_along()->set_axis(0);
  t.mutable_along()->set_coordinate(stage);
  return t;
}

/// Two stages that exchange a tensor each micro-batch, as the compiler
/// cuts a step: stage 0's forward stashes its input (a) and sends it;
/// stage 1 receives it (h, stashed), and its copy is the loss y; stage 1's
/// backward sends h back, stage 0's receives it (g). Each stash has the
/// copies the schedule needs, 16 bytes apart, before the other buffers.
plan::Plan exchangingStages(plan::PipelineSchedule schedule, int64_t microBatches) {
  plan::Plan p = twoStages();
  p.mutable_training()->set_micro_batches(microBatches);
  p.mutable_training()->mutable_pipeline()->set_schedule(schedule);
  for (int s = 0; s < 2; ++s) {
    plan::RankProgram *rank = p.mutable_ranks(s);
    int64_t slots = plan::stashSlots(schedule, 2, s, microBatches);
    rank->set_stash_slots(uint32_t(slots));
    rank->clear_instructions();
    plan::TensorType type = rank->buffers(0).type();
    rank->mutable_buffers(0)->set_name("x");
    rank->mutable_buffers(0)->set_offset(16 * slots);
    rank->mutable_buffers(1)->set_name(s == 0 ? "a" : "h");
    auto *other = rank->add_buffers(); // 2: stage 0's g, stage 1's y
    *other->mutable_type() = type;
    other->set_name(s == 0 ? "g" : "y");
    other->set_offset(16 * slots + 16);
    rank->set_arena_bytes(16 * slots + 32);
    auto add = [&](std::vector<uint32_t> inputs, std::vector<uint32_t> outputs) {
      plan::Instruction *inst = rank->add_instructions();
      for (uint32_t id : inputs)
        inst->add_inputs(id);
      for (uint32_t id : outputs)
        inst->add_outputs(id);
      return inst;
    };
    if (s == 0) {
      add({0}, {1})->mutable_copy();
      *add({1}, {})->mutable_send() = along(1);
      *add({}, {2})->mutable_recv() = along(1);
    } else {
      *add({}, {1})->mutable_recv() = along(0);
      add({1}, {2})->mutable_copy();
      *add({1}, {})->mutable_send() = along(0);
      rank->set_outputs(0, 2);
    }
    rank->set_forward_end(2);
    rank->set_accumulate_end(3);
  }
  return p;
}

TEST(PipelinedPlan, AcceptsStagesExchangingTensorsUnderEitherSchedule) {
  for (auto schedule : {plan::GPIPE, plan::ONE_F_ONE_B})
    for (int64_t m : {1, 2, 4}) {
      std::string error;
      EXPECT_TRUE(plan::validatePlan(exchangingStages(schedule, m), error))
          << plan::scheduleName(schedule) << ", " << m << " micro-batches: " << error;
    }
}

TEST(PipelinedPlan, RejectsTransfersThatDoNotPairWithinAPart) {
  // Stage 0 sends a in its backward part; stage 1 receives it in its
  // forward part: the streams of the two parts do not pair.
  plan::Plan p = exchangingStages(plan::ONE_F_ONE_B, 2);
  plan::RankProgram *first = p.mutable_ranks(0);
  first->mutable_instructions()->SwapElements(1, 2);
  first->set_forward_end(1);
  EXPECT_TRUE(contains(errorOf(p), "rank 0 sends 0 tensors to rank 1 in the forward part, "
                                   "which receives 1 from it"));
}

TEST(PipelinedPlan, RejectsTransfersThatWaitForEachOther) {
  // Both stages receive before they send, in the forward part: counts and
  // types pair, but each waits for the other.
  plan::Plan p = exchangingStages(plan::GPIPE, 2);
  p.mutable_ranks(0)->mutable_instructions()->SwapElements(1, 2);
  p.mutable_ranks(0)->set_forward_end(3);
  p.mutable_ranks(1)->set_forward_end(3);
  EXPECT_TRUE(contains(errorOf(p),
                       "the ranks' sends and receives cannot all meet under the gpipe schedule "
                       "with 2 micro-batches: rank 0 (stage 0) waits in the forward part of "
                       "micro-batch 0 (instruction 1) for a tensor from rank 1, and rank 1 "
                       "(stage 1) waits in the forward part of micro-batch 0 (instruction 0) "
                       "for a tensor from rank 0"));
}

TEST(PipelinedPlan, RejectsAStashWithFewerCopiesThanTheScheduleKeeps) {
  plan::Plan p = exchangingStages(plan::ONE_F_ONE_B, 4);
  p.mutable_ranks(0)->set_stash_slots(1);
  EXPECT_TRUE(contains(errorOf(p), "rank 0 (stage 0): a stash of 1 copies, but the 1f1b "
                                   "schedule keeps 2 of its 4 micro-batches in flight on that "
                                   "stage"));
}

TEST(PipelinedPlan, RejectsAValueInAStashCopysBytes) {
  // g (received each backward part) on copy 1 of a: micro-batch 1's a
  // would be overwritten before its backward part reads it.
  plan::Plan p = exchangingStages(plan::GPIPE, 2);
  p.mutable_ranks(0)->mutable_buffers(2)->set_offset(16);
  EXPECT_TRUE(contains(errorOf(p), "rank 0, buffer 2 ('g'): shares bytes with stash copy 1 of "
                                   "2, which holds a micro-batch's values from its forward to "
                                   "its backward part"));
  // The input, copied in by each forward part, on copy 1.
  p = exchangingStages(plan::GPIPE, 2);
  p.mutable_ranks(0)->mutable_buffers(0)->set_offset(16);
  EXPECT_TRUE(contains(errorOf(p), "rank 0, buffer 0 ('x'): shares bytes with stash copy 1"));
  // Stashed buffers wider than the step between copies.
  p = exchangingStages(plan::GPIPE, 2);
  p.mutable_ranks(0)->set_stash_bytes(8);
  EXPECT_TRUE(contains(errorOf(p), "rank 0: its stashed buffers span 16 bytes, more than the 8 "
                                   "bytes between stash copies"));
}

TEST(PipelinedPlan, RejectsAStashedInput) {
  plan::Plan p = exchangingStages(plan::GPIPE, 2);
  p.mutable_ranks(0)->mutable_buffers(0)->set_stashed(true);
  EXPECT_TRUE(contains(errorOf(p), "rank 0, buffer 0 ('x'): stashed, but a parameter, constant, "
                                   "input or load-time value"));
}

TEST(PipelinedPlan, RejectsALossTheLastStageDoesNotComputeInItsForwardPart) {
  plan::Plan p = exchangingStages(plan::GPIPE, 2);
  p.mutable_ranks(0)->set_outputs(0, 0);
  p.mutable_ranks(1)->set_outputs(0, plan::kNoBuffer);
  EXPECT_TRUE(contains(errorOf(p), "rank 1 (the last stage) does not compute the loss (output 0)"));
  p = exchangingStages(plan::GPIPE, 2);
  p.mutable_ranks(1)->set_forward_end(1);
  EXPECT_TRUE(contains(errorOf(p), "rank 1 (the last stage) computes the loss (output 0) after "
                                   "its forward part"));
}

TEST(PipelinedPlan, RejectsAnOutputLeftToAnotherStageWithoutStages) {
  plan::Plan p = twoStages();
  p.mutable_training()->clear_pipeline();
  for (plan::RankProgram &rank : *p.mutable_ranks()) {
    rank.set_forward_end(0);
    rank.set_stash_slots(0);
    rank.mutable_buffers(1)->set_stashed(false);
  }
  EXPECT_TRUE(contains(errorOf(p), "rank 0: output 0 ('y') is left to another program, but only "
                                   "a pipeline stage may leave an output to another stage and "
                                   "the plan has none"));
}

TEST(PipelinedPlan, AcceptsTwoStages) {
  std::string error;
  EXPECT_TRUE(plan::validatePlan(twoStages(), error)) << error;
}

TEST(PipelinedPlan, RejectsAStashPastTheArena) {
  plan::Plan p = twoStages();
  p.mutable_ranks(1)->set_stash_slots(4); // 4 x 16 bytes from 0: past the arena's 48
  std::string message = errorOf(p);
  EXPECT_NE(message.find("stash"), std::string::npos) << message;
}

TEST(PipelinedPlan, RejectsStagesTheMeshAxisDoesNotHave) {
  plan::Plan p = twoStages();
  p.mutable_training()->mutable_pipeline()->set_stages(3);
  std::string message = errorOf(p);
  EXPECT_NE(message.find("3 pipeline stages, but mesh axis 0 is not of that size"),
            std::string::npos)
      << message;
}

TEST(PipelinedPlan, RejectsPipelineFieldsInAPlanWithoutStages) {
  plan::Plan p = twoStages();
  p.mutable_training()->clear_pipeline();
  std::string message = errorOf(p);
  EXPECT_NE(message.find("no pipeline stages"), std::string::npos) << message;
}

} // namespace
