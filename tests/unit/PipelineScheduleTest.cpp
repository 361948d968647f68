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

/// "F0v0 F1v0 B0v1" for an interleaved order: micro-batch, virtual stage.
std::string chunks(const std::vector<plan::PipelineTask> &order) {
  std::string s;
  for (const plan::PipelineTask &t : order)
    s += (s.empty() ? "" : " ") + std::string(t.forward ? "F" : "B") +
         std::to_string(t.microBatch) + "v" + std::to_string(t.chunk);
  return s;
}

TEST(PipelineSchedule, InterleavedRunsGroupsOfMicroBatchesThroughEachVirtualStage) {
  // p = 2, v = 2, M = 4 (Megatron-LM's order): stage 0 warms up with
  // (p - 1) * 2 + (v - 1) * p = 4 forwards, stage 1 with 2; micro-batches
  // go in groups of p through virtual stage 0, then 1; backwards from the
  // last virtual stage.
  EXPECT_EQ(chunks(plan::pipelineOrder(plan::INTERLEAVED, 2, 0, 4, 2)),
            "F0v0 F1v0 F0v1 F1v1 F2v0 B0v1 F3v0 B1v1 F2v1 B0v0 F3v1 B1v0 B2v1 B3v1 B2v0 B3v0");
  EXPECT_EQ(chunks(plan::pipelineOrder(plan::INTERLEAVED, 2, 1, 4, 2)),
            "F0v0 F1v0 F0v1 B0v1 F1v1 B1v1 F2v0 B0v0 F3v0 B1v0 F2v1 B2v1 F3v1 B3v1 B2v0 B3v0");
  // M = p: every forward first.
  EXPECT_EQ(chunks(plan::pipelineOrder(plan::INTERLEAVED, 2, 1, 2, 2)),
            "F0v0 F1v0 F0v1 F1v1 B0v1 B1v1 B0v0 B1v0");
  // The stash: the most micro-batches in flight on one virtual stage.
  EXPECT_EQ(plan::stashSlots(plan::INTERLEAVED, 2, 0, 4, 2), 4);
  EXPECT_EQ(plan::stashSlots(plan::INTERLEAVED, 2, 1, 4, 2), 3);
  // The last stage forwards micro-batch 4 on virtual stage 0 before its
  // first backward there: 5 in flight (1F1B's last stage keeps 1).
  EXPECT_EQ(plan::stashSlots(plan::INTERLEAVED, 4, 3, 8, 2), 5);
}

TEST(PipelineSchedule, EachPairOfPartsKeepsItsOwnMicroBatches) {
  // Stage 0 of 2, 2 virtual stages, 4 micro-batches (the order above):
  // virtual stage 0 (parts 0 and 2) keeps all 4 before its first
  // backward, virtual stage 1 (parts 1 and 3) only 2.
  EXPECT_EQ(plan::stashSlots(plan::INTERLEAVED, 2, 0, 4, 2, 0, 2), 4);
  EXPECT_EQ(plan::stashSlots(plan::INTERLEAVED, 2, 0, 4, 2, 1, 3), 2);
  // Virtual stage 0's forward to virtual stage 1's: the micro-batches
  // between F v0 and F v1 (F0v0 F1v0, then F0v1).
  EXPECT_EQ(plan::stashSlots(plan::INTERLEAVED, 2, 0, 4, 2, 0, 1), 2);
  // Virtual stage 1's forward to virtual stage 0's backward: longer than
  // either virtual stage's own (F0v1 .. B0v0 spans F1v1 F2v0 B0v1 F3v0).
  EXPECT_EQ(plan::stashSlots(plan::INTERLEAVED, 2, 0, 4, 2, 1, 2), 3);
  // Without virtual stages: the forward-to-backward stash, as above.
  for (int64_t stage = 0; stage < 4; ++stage)
    EXPECT_EQ(plan::stashSlots(plan::ONE_F_ONE_B, 4, stage, 8, 1, 0, 1),
              plan::stashSlots(plan::ONE_F_ONE_B, 4, stage, 8));
  // Megatron-LM's GPT-3 schedule, 8 stages x 2 virtual stages, 96
  // micro-batches: stage 0 keeps 16 and 8, 12 stages' worth in all
  // rather than 16 of each; the last stage 9 and 1.
  EXPECT_EQ(plan::stashSlots(plan::INTERLEAVED, 8, 0, 96, 2, 0, 2), 16);
  EXPECT_EQ(plan::stashSlots(plan::INTERLEAVED, 8, 0, 96, 2, 1, 3), 8);
  EXPECT_DOUBLE_EQ(plan::stashedMicroBatches(plan::INTERLEAVED, 8, 0, 96, 2), 12);
  EXPECT_DOUBLE_EQ(plan::stashedMicroBatches(plan::INTERLEAVED, 8, 7, 96, 2), 5);
  EXPECT_DOUBLE_EQ(plan::stashedMicroBatches(plan::ONE_F_ONE_B, 8, 0, 96), 8);
}

TEST(PipelineSchedule, InterleavedNeedsGroupsOfStagesAndVirtualStages) {
  EXPECT_EQ(plan::scheduleProblem(plan::INTERLEAVED, 4, 8, 2), "");
  EXPECT_EQ(plan::scheduleProblem(plan::INTERLEAVED, 4, 6, 2),
            "the interleaved schedule runs micro-batches in groups of the stage count: 6 "
            "micro-batches is not a multiple of 4 stages");
  EXPECT_EQ(plan::scheduleProblem(plan::INTERLEAVED, 4, 8, 1),
            "the interleaved schedule needs 2 or more virtual stages");
  EXPECT_EQ(plan::scheduleProblem(plan::ONE_F_ONE_B, 4, 8, 2),
            "virtual stages need the interleaved schedule");
  EXPECT_EQ(plan::scheduleProblem(plan::GPIPE, 4, 3, 1), "");
}

/// Runs every stage's order against the pipeline's dependencies (model
/// chunk g = stage + k * stages forwards micro-batch m after chunk g - 1
/// did, backwards it after chunk g + 1 did, the last chunk after its own
/// forward), a stage taking its next task when its inputs are there: true
/// when every stage finishes (no schedule waits on itself).
bool runsToTheEnd(plan::PipelineSchedule schedule, int64_t stages, int64_t m, int64_t v) {
  int64_t chunks = stages * v;
  auto none = std::vector<std::vector<bool>>(size_t(chunks), std::vector<bool>(size_t(m), false));
  std::vector<std::vector<bool>> forwarded = none, backwarded = none;
  std::vector<std::vector<plan::PipelineTask>> orders;
  for (int64_t s = 0; s < stages; ++s)
    orders.push_back(plan::pipelineOrder(schedule, stages, s, m, v));
  std::vector<size_t> next(size_t(stages), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < stages; ++s)
      while (next[size_t(s)] < orders[size_t(s)].size()) {
        const plan::PipelineTask &t = orders[size_t(s)][next[size_t(s)]];
        size_t g = size_t(s + t.chunk * stages), b = size_t(t.microBatch);
        bool ready = t.forward ? g == 0 || forwarded[g - 1][b]
                               : forwarded[g][b] && (g + 1 == size_t(chunks) || backwarded[g + 1][b]);
        if (!ready)
          break;
        (t.forward ? forwarded : backwarded)[g][b] = true;
        ++next[size_t(s)];
        progress = true;
      }
  }
  for (int64_t s = 0; s < stages; ++s)
    if (next[size_t(s)] != orders[size_t(s)].size())
      return false;
  return true;
}

TEST(PipelineSchedule, EverySchedulesStagesRunToTheEnd) {
  for (int64_t stages : {2, 3, 4, 8}) {
    for (int64_t m : {1, 2, 5, 16}) {
      EXPECT_TRUE(runsToTheEnd(plan::GPIPE, stages, m, 1)) << stages << " stages, " << m;
      EXPECT_TRUE(runsToTheEnd(plan::ONE_F_ONE_B, stages, m, 1)) << stages << " stages, " << m;
    }
    for (int64_t v : {2, 3, 4})
      for (int64_t groups : {1, 2, 3, 5}) {
        int64_t m = groups * stages;
        EXPECT_TRUE(runsToTheEnd(plan::INTERLEAVED, stages, m, v))
            << stages << " stages, " << v << " virtual, " << m;
        // Each virtual stage forwards and backwards every micro-batch once,
        // in order, a backward after its forward.
        for (int64_t s = 0; s < stages; ++s) {
          std::vector<int64_t> forwards(size_t(v), 0), backwards(size_t(v), 0);
          for (const plan::PipelineTask &t :
               plan::pipelineOrder(plan::INTERLEAVED, stages, s, m, v)) {
            int64_t &n = (t.forward ? forwards : backwards)[size_t(t.chunk)];
            EXPECT_EQ(t.microBatch, n);
            ++n;
            EXPECT_LE(backwards[size_t(t.chunk)], forwards[size_t(t.chunk)]);
          }
          for (int64_t k = 0; k < v; ++k) {
            EXPECT_EQ(forwards[size_t(k)], m);
            EXPECT_EQ(backwards[size_t(k)], m);
          }
        }
      }
  }
}

/// Replicated stages (Pipeline.replicas): each replica a sequencer running
/// its share of its stage's order; true when every one runs to its end
/// with each part waiting for the parts it depends on, whichever replica
/// ran those.
bool replicasRunToTheEnd(plan::PipelineSchedule schedule, const std::vector<int64_t> &replicas,
                         int64_t m) {
  int64_t stages = int64_t(replicas.size());
  auto none = std::vector<std::vector<bool>>(size_t(stages), std::vector<bool>(size_t(m), false));
  std::vector<std::vector<bool>> forwarded = none, backwarded = none;
  struct Sequencer {
    int64_t stage;
    std::vector<plan::PipelineTask> order;
    size_t next = 0;
  };
  std::vector<Sequencer> sequencers;
  for (int64_t s = 0; s < stages; ++s)
    for (int64_t k = 0; k < replicas[size_t(s)]; ++k)
      sequencers.push_back({s, plan::replicaOrder(schedule, stages, s, m, replicas, k)});
  for (bool progress = true; progress;) {
    progress = false;
    for (Sequencer &q : sequencers)
      while (q.next < q.order.size()) {
        const plan::PipelineTask &t = q.order[q.next];
        size_t g = size_t(q.stage), b = size_t(t.microBatch);
        bool last = g + 1 == size_t(stages);
        bool ready = t.forward ? g == 0 || forwarded[g - 1][b]
                               : forwarded[g][b] && (last || backwarded[g + 1][b]);
        if (!ready)
          break;
        (t.forward ? forwarded : backwarded)[g][b] = true;
        ++q.next;
        progress = true;
      }
  }
  for (const Sequencer &q : sequencers)
    if (q.next != q.order.size())
      return false;
  return true;
}

TEST(PipelineSchedule, ReplicatedStagesTakeTurnsAndRunToTheEnd) {
  std::vector<std::vector<int64_t>> ways = {{1, 2}, {2, 1}, {2, 2}, {1, 1, 2}, {2, 1, 1},
                                            {1, 3, 1}, {3, 1, 2}, {1, 2, 1, 4}, {4, 2, 1, 1}};
  for (const std::vector<int64_t> &replicas : ways)
    for (int64_t m : {12, 24}) {
      for (auto schedule : {plan::GPIPE, plan::ONE_F_ONE_B})
        EXPECT_TRUE(replicasRunToTheEnd(schedule, replicas, m))
            << plan::scheduleName(schedule) << ", " << m << " micro-batches, replicas "
            << ::testing::PrintToString(replicas);
      int64_t stages = int64_t(replicas.size());
      for (int64_t s = 0; s < stages; ++s) {
        int64_t r = replicas[size_t(s)];
        // Replica k runs micro-batches k, k + r, ..., each forward and
        // backward once.
        for (int64_t k = 0; k < r; ++k) {
          std::vector<int64_t> forwards;
          for (const plan::PipelineTask &t :
               plan::replicaOrder(plan::ONE_F_ONE_B, stages, s, m, replicas, k)) {
            EXPECT_EQ(t.microBatch % r, k);
            if (t.forward)
              forwards.push_back(t.microBatch);
          }
          EXPECT_EQ(int64_t(forwards.size()), m / r);
        }
        // The warm-up counts every copy of the later stages; a replica
        // keeps in flight its micro-batches among any warm-up + 1
        // consecutive ones (one replica: p - s).
        int64_t warmup = plan::replicatedWarmup(stages, s, replicas), later = 0;
        for (int64_t t = s + 1; t < stages; ++t)
          later += replicas[size_t(t)];
        EXPECT_EQ(warmup, later);
        int64_t shared = plan::stashSlots(plan::ONE_F_ONE_B, stages, s, m, 1, replicas);
        EXPECT_EQ(shared, std::min<int64_t>((warmup + r) / r, m / r))
            << "stage " << s << " of replicas " << ::testing::PrintToString(replicas);
      }
      // The warm-up never grows from a stage to the next (what keeps the
      // next stage's replicas from waiting on this one's).
      for (int64_t s = 0; s + 1 < stages; ++s)
        EXPECT_GE(plan::replicatedWarmup(stages, s, replicas),
                  plan::replicatedWarmup(stages, s + 1, replicas));
    }
  EXPECT_EQ(plan::replicaProblem(plan::ONE_F_ONE_B, 4, {1, 3}),
            "each of a stage's 3 replicas runs 1 micro-batch in 3, and 4 micro-batches are not "
            "a multiple of 3; use --micro-batches 6");
  EXPECT_NE(plan::replicaProblem(plan::INTERLEAVED, 4, {1, 2}), "");
  EXPECT_EQ(plan::replicaProblem(plan::ONE_F_ONE_B, 4, {1, 1}), "");
}

TEST(PipelineSchedule, NamesRoundTrip) {
  for (auto schedule : {plan::GPIPE, plan::ONE_F_ONE_B, plan::INTERLEAVED})
    EXPECT_EQ(plan::scheduleNamed(plan::scheduleName(schedule)), schedule);
  EXPECT_FALSE(plan::scheduleNamed("zigzag"));
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
    plan::Stash *stash = rank->add_stashes(); // 2 copies of 16 bytes from 0
    stash->set_bytes(16);
    stash->set_slots(2);
    auto *x = rank->add_buffers();
    *x->mutable_type() = type;
    x->set_input(0);
    x->set_offset(32);
    auto *kept = rank->add_buffers();
    *kept->mutable_type() = type;
    kept->set_stash(1);
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
/// backward sends h back, stage 0's receives it (g) and reads a. Each stash has the
/// copies the schedule needs, 16 bytes apart, before the other buffers.
plan::Plan exchangingStages(plan::PipelineSchedule schedule, int64_t microBatches) {
  plan::Plan p = twoStages();
  p.mutable_training()->set_micro_batches(microBatches);
  p.mutable_training()->mutable_pipeline()->set_schedule(schedule);
  for (int s = 0; s < 2; ++s) {
    plan::RankProgram *rank = p.mutable_ranks(s);
    int64_t slots = plan::stashSlots(schedule, 2, s, microBatches);
    rank->mutable_stashes(0)->set_slots(uint32_t(slots));
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
      add({1}, {2})->mutable_copy(); // the backward reads the forward's a
    } else {
      *add({}, {1})->mutable_recv() = along(0);
      add({1}, {2})->mutable_copy();
      *add({1}, {})->mutable_send() = along(0);
      rank->set_outputs(0, 2);
    }
    rank->set_forward_end(2);
    rank->set_accumulate_end(uint32_t(rank->instructions_size()));
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

TEST(PipelinedPlan, RejectsAnInterleavedPlanWithoutItsParts) {
  plan::Plan p = exchangingStages(plan::ONE_F_ONE_B, 2);
  p.mutable_training()->mutable_pipeline()->set_schedule(plan::INTERLEAVED);
  p.mutable_training()->mutable_pipeline()->set_virtual_stages(2);
  EXPECT_TRUE(contains(errorOf(p), "rank 0: 0 part ends for 2 virtual stages (2 each)"));
  // Parts that end elsewhere than the forward and the per-micro-batch part.
  for (int s = 0; s < 2; ++s)
    for (uint32_t end : {1u, 2u, 2u, 2u})
      p.mutable_ranks(s)->add_part_ends(end);
  EXPECT_TRUE(contains(errorOf(p), "rank 0: part_ends do not end at forward_end and "
                                   "accumulate_end"));
  // Micro-batches that are not groups of the stages.
  p.mutable_training()->set_micro_batches(3);
  EXPECT_TRUE(contains(errorOf(p), "training: the interleaved schedule runs micro-batches in "
                                   "groups of the stage count: 3 micro-batches is not a "
                                   "multiple of 2 stages"));
  // A channel past the virtual stages' pairs.
  p = exchangingStages(plan::ONE_F_ONE_B, 2);
  p.mutable_ranks(0)->mutable_instructions(1)->mutable_send()->set_channel(1);
  EXPECT_TRUE(contains(errorOf(p), "transfer channel 1 (there are 1)"));
}

TEST(PipelinedPlan, RejectsAStashWithFewerCopiesThanTheScheduleKeeps) {
  plan::Plan p = exchangingStages(plan::ONE_F_ONE_B, 4);
  p.mutable_ranks(0)->mutable_stashes(0)->set_slots(1);
  EXPECT_TRUE(contains(errorOf(p), "rank 0 (stage 0): stash 0 has 1 copies, but the 1f1b "
                                   "schedule keeps 2 of its 4 micro-batches between the parts "
                                   "that write and read it on that stage"));
}

TEST(PipelinedPlan, RejectsAValueInAStashCopysBytes) {
  // g (received each backward part) on copy 1 of a: micro-batch 1's a
  // would be overwritten before its backward part reads it.
  plan::Plan p = exchangingStages(plan::GPIPE, 2);
  p.mutable_ranks(0)->mutable_buffers(2)->set_offset(16);
  EXPECT_TRUE(contains(errorOf(p), "rank 0, buffer 2 ('g'): shares bytes with a stash, which "
                                   "holds micro-batches' values from one part to a later one"));
  // The input, copied in by each forward part, on copy 1.
  p = exchangingStages(plan::GPIPE, 2);
  p.mutable_ranks(0)->mutable_buffers(0)->set_offset(16);
  EXPECT_TRUE(contains(errorOf(p), "rank 0, buffer 0 ('x'): shares bytes with a stash"));
  // Stashed buffers wider than the step between copies.
  p = exchangingStages(plan::GPIPE, 2);
  p.mutable_ranks(0)->mutable_stashes(0)->set_bytes(8);
  EXPECT_TRUE(contains(errorOf(p), "rank 0, buffer 1 ('a'): outside its stash group's first "
                                   "copy (8 bytes at 0)"));
  // Two groups whose copies overlap: the second starts in the first's copy 1.
  p = exchangingStages(plan::GPIPE, 2);
  plan::Stash *second = p.mutable_ranks(0)->add_stashes();
  second->set_offset(16);
  second->set_bytes(4);
  second->set_slots(1);
  EXPECT_TRUE(contains(errorOf(p), "rank 0: two stash groups' copies share bytes"));
  // A buffer in a group the program does not have.
  p = exchangingStages(plan::GPIPE, 2);
  p.mutable_ranks(0)->mutable_buffers(1)->set_stash(2);
  EXPECT_TRUE(contains(errorOf(p), "rank 0, buffer 1 ('a'): in stash 1 of 1"));
}

TEST(PipelinedPlan, RejectsAStashedInput) {
  plan::Plan p = exchangingStages(plan::GPIPE, 2);
  p.mutable_ranks(0)->mutable_buffers(0)->set_stash(1);
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
    rank.clear_stashes();
    rank.mutable_buffers(1)->set_stash(0);
  }
  EXPECT_TRUE(contains(errorOf(p), "rank 0: output 0 ('y') is left to another program, but only "
                                   "a pipeline stage or a parameter server may leave an output "
                                   "to another and the plan has neither"));
}

TEST(PipelinedPlan, AcceptsTwoStages) {
  std::string error;
  EXPECT_TRUE(plan::validatePlan(twoStages(), error)) << error;
}

TEST(PipelinedPlan, RejectsAStashPastTheArena) {
  plan::Plan p = twoStages();
  p.mutable_ranks(1)->mutable_stashes(0)->set_slots(4); // 4 x 16 bytes from 0: past 48
  EXPECT_TRUE(contains(errorOf(p), "rank 1: stash 0 (4 x 16 bytes at 0) does not fit its arena"));
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
