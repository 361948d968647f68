// Each stage's order of forward and backward parts under GPipe and 1F1B,
// and the stash copies each keeps; the loader's checks of pipelined plans.
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
  for (int64_t stage = 0; stage < 4; ++stage)
    EXPECT_EQ(text(plan::pipelineOrder(plan::GPIPE, 4, stage, 4)),
              "F0 F1 F2 F3 B0 B1 B2 B3");
  EXPECT_EQ(plan::stashSlots(plan::GPIPE, 4, 0, 8), 8);
}

TEST(PipelineSchedule, OneForwardOneBackwardWarmsUpByStage) {
  EXPECT_EQ(text(plan::pipelineOrder(plan::ONE_F_ONE_B, 4, 0, 6)),
            "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(text(plan::pipelineOrder(plan::ONE_F_ONE_B, 4, 2, 6)),
            "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  EXPECT_EQ(text(plan::pipelineOrder(plan::ONE_F_ONE_B, 4, 3, 6)),
            "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
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
