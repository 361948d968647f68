//===- PipelineSchedule.h - the order a pipeline stage runs its work -*- C++ -*-===//
//
// A pipelined training step (plan.proto: Pipeline) runs each micro-batch's
// forward and backward part on every stage. The schedule says in which
// order each stage runs them; the runtime (runtime/train/Trainer.cpp) and
// the simulator (cost/Simulator.cpp) both follow this one function, and the
// compiler sizes each stage's stash by stashSlots.
//
//   GPIPE        every forward, then every backward (Huang et al. 2019):
//                a stage keeps all M micro-batches' activations.
//   ONE_F_ONE_B  stage s of p runs min(p - s - 1, M) forwards, then
//                alternates one forward and one backward, then the
//                remaining backwards (PipeDream-flush, Narayanan et al.
//                2021): at most p - s micro-batches in flight.
//   INTERLEAVED  1F1B over v virtual stages (Narayanan et al. 2021,
//                section 2.2; Megatron-LM's schedule): the model is cut
//                into p * v chunks, stage s runs chunks s, s + p, ...;
//                micro-batches go in groups of p, each group through the
//                stage's chunks in turn, with (p - s - 1) * 2 + (v - 1) * p
//                warm-up forwards. The bubble shrinks v-fold; needs M a
//                multiple of p.
//
// Replicated stages (Pipeline.replicas) run 1F1B or GPIPE, each replica
// its stage's micro-batches m mod R == replica, with a warm-up of one
// forward for every copy of the later stages (replicaOrder).
//
// In all, each virtual stage's forwards and backwards run in micro-batch
// order, so the micro-batches in flight between two parts are consecutive
// and micro-batch m can keep its stash in slot m mod stashSlots. Interleaved,
// the virtual stages keep different numbers in flight (stage 0 of 8 with 2
// virtual stages: 16 and 8), so the stash is counted per pair of parts.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLAN_PIPELINESCHEDULE_H
#define DTC_PLAN_PIPELINESCHEDULE_H

#include "plan.pb.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtc::plan {

/// Virtual stages a pipeline may have: a transfer's tag (transferTag)
/// keeps below MPI's guaranteed 32767.
constexpr int64_t kMaxVirtualStages = 64;

struct PipelineTask {
  bool forward = true;
  int64_t microBatch = 0;
  int64_t chunk = 0; // the virtual stage (INTERLEAVED), else 0
};

/// The order stage `stage` of `stages` runs its micro-batches' parts;
/// `virtualStages` is INTERLEAVED's chunks per stage (1 for the others).
std::vector<PipelineTask> pipelineOrder(PipelineSchedule schedule, int64_t stages, int64_t stage,
                                        int64_t microBatches, int64_t virtualStages = 1);
/// Replica `replica` of the stage (Pipeline.replicas): replicaOrder with
/// the pipeline's replica counts (interleaved: the stage's order).
std::vector<PipelineTask> pipelineOrder(const Pipeline &pipeline, int64_t stage,
                                        int64_t microBatches, int64_t replica = 0);

/// 1F1B's forwards before the first backward on stage `stage` when the
/// stages have `replicas` copies each (every stage's count; empty or
/// missing: one): one for each copy of every later stage, p - s - 1
/// without replicas. A micro-batch in flight below a stage is on one of
/// those copies; fewer leave the later stages' replicas waiting
/// (docs/pipeline.md).
int64_t replicatedWarmup(int64_t stages, int64_t stage, const std::vector<int64_t> &replicas);

/// The tasks replica `replica` of stage `stage` runs (GPIPE or
/// ONE_F_ONE_B): the stage's order with replicatedWarmup's warm-up,
/// keeping the micro-batches m with m mod (the stage's count) == replica.
/// The warm-up never grows from one stage to the next, so each stage keeps
/// the lead over the next that the next's replicas, taking turns, need.
std::vector<PipelineTask> replicaOrder(PipelineSchedule schedule, int64_t stages, int64_t stage,
                                       int64_t microBatches, const std::vector<int64_t> &replicas,
                                       int64_t replica);

/// Every stage's replica count (stageReplicas of each).
std::vector<int64_t> stageReplicaCounts(const Pipeline &pipeline);

/// Replicated stages (Pipeline.replicas): stage s's replica count (1 when
/// not given); the first coordinate on the pipeline's axis of its
/// replicas; the axis' size; and the stage and replica at a coordinate
/// ({-1, -1} past the last).
struct StageReplica {
  int64_t stage = 0, replica = 0;
};
int64_t stageReplicas(const Pipeline &pipeline, int64_t stage);
int64_t firstStageCoordinate(const Pipeline &pipeline, int64_t stage);
int64_t stageCoordinates(const Pipeline &pipeline);
StageReplica stageAtCoordinate(const Pipeline &pipeline, int64_t coordinate);

/// A micro-batch's parts on a stage, numbered as RankProgram.part_ends
/// numbers them: virtual stage c's forward is part c, its backward part
/// V + c (V = virtualStages; 0 and 1 without virtual stages).
///
/// The most micro-batches, at any point of stage `stage`'s order, whose
/// part `from` has run and part `to` has not: the stash copies a value
/// that part `from` makes and part `to` reads last needs (micro-batch m in
/// copy m mod that).
/// Replicated stages (`replicas`: every stage's count, empty: one each):
/// the most any replica of the stage has (a replica's micro-batch m in
/// copy m / its stage's count mod that).
int64_t stashSlots(PipelineSchedule schedule, int64_t stages, int64_t stage,
                   int64_t microBatches, int64_t virtualStages, int64_t from, int64_t to,
                   const std::vector<int64_t> &replicas = {});

/// The most micro-batches whose forward has run and backward has not, on
/// any one virtual stage, at any point of stage `stage`'s order.
int64_t stashSlots(PipelineSchedule schedule, int64_t stages, int64_t stage,
                   int64_t microBatches, int64_t virtualStages = 1,
                   const std::vector<int64_t> &replicas = {});

/// The micro-batches' activations stage `stage` keeps at most, in whole
/// micro-batches of the stage: the mean over its virtual stages of each
/// one's forward-to-backward copies (a virtual stage keeping about 1/V of
/// the stage's activations). stashSlots without virtual stages.
double stashedMicroBatches(PipelineSchedule schedule, int64_t stages, int64_t stage,
                           int64_t microBatches, int64_t virtualStages = 1,
                           const std::vector<int64_t> &replicas = {});

/// What is wrong with replicating stages `replicas` times (one count per
/// stage) under this schedule, or "": every replica runs as many
/// micro-batches, and not interleaved.
std::string replicaProblem(PipelineSchedule schedule, int64_t microBatches,
                           const std::vector<int64_t> &replicas);

/// What is wrong with running `microBatches` through this pipeline, or ""
/// (INTERLEAVED needs a multiple of the stages).
std::string scheduleProblem(PipelineSchedule schedule, int64_t stages, int64_t microBatches,
                            int64_t virtualStages);

/// A point-to-point message's tag: its part of the step (0-3: the
/// runtime's StepPart) and its channel, the same on both sides.
int transferTag(int part, const Transfer &transfer);

/// "gpipe", "1f1b", "interleaved"; and back (nullopt for an unknown name).
std::string scheduleName(PipelineSchedule schedule);
std::optional<PipelineSchedule> scheduleNamed(const std::string &name);

} // namespace dtc::plan

#endif // DTC_PLAN_PIPELINESCHEDULE_H
