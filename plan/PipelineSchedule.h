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
//
// In both, forwards and backwards each run in micro-batch order, so the
// micro-batches in flight on a stage are consecutive and micro-batch m can
// keep its stash in slot m mod stashSlots.
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

struct PipelineTask {
  bool forward = true;
  int64_t microBatch = 0;
};

/// The order stage `stage` of `stages` runs its micro-batches' parts.
std::vector<PipelineTask> pipelineOrder(PipelineSchedule schedule, int64_t stages, int64_t stage,
                                        int64_t microBatches);

/// The most micro-batches whose forward has run and backward has not, at
/// any point of stage `stage`'s order: the stash copies it needs.
int64_t stashSlots(PipelineSchedule schedule, int64_t stages, int64_t stage,
                   int64_t microBatches);

/// "gpipe", "1f1b"; and back (nullopt for an unknown name).
std::string scheduleName(PipelineSchedule schedule);
std::optional<PipelineSchedule> scheduleNamed(const std::string &name);

} // namespace dtc::plan

#endif // DTC_PLAN_PIPELINESCHEDULE_H
