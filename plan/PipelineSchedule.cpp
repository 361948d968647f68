//===- PipelineSchedule.cpp -----------------------------------------------===//
#include "plan/PipelineSchedule.h"

#include <algorithm>

namespace dtc::plan {

std::vector<PipelineTask> pipelineOrder(PipelineSchedule schedule, int64_t stages, int64_t stage,
                                        int64_t microBatches) {
  std::vector<PipelineTask> order;
  int64_t warmup = schedule == GPIPE ? microBatches
                                     : std::min(stages - stage - 1, microBatches);
  int64_t forwards = 0, backwards = 0;
  for (; forwards < warmup; ++forwards)
    order.push_back({true, forwards});
  for (; forwards < microBatches; ++forwards, ++backwards) {
    order.push_back({true, forwards});
    order.push_back({false, backwards});
  }
  for (; backwards < microBatches; ++backwards)
    order.push_back({false, backwards});
  return order;
}

int64_t stashSlots(PipelineSchedule schedule, int64_t stages, int64_t stage,
                   int64_t microBatches) {
  int64_t inFlight = 0, most = 0;
  for (const PipelineTask &task : pipelineOrder(schedule, stages, stage, microBatches)) {
    inFlight += task.forward ? 1 : -1;
    most = std::max(most, inFlight);
  }
  return most;
}

std::string scheduleName(PipelineSchedule schedule) {
  switch (schedule) {
  case GPIPE:
    return "gpipe";
  case ONE_F_ONE_B:
    return "1f1b";
  default:
    return "unknown";
  }
}

std::optional<PipelineSchedule> scheduleNamed(const std::string &name) {
  if (name == "gpipe")
    return GPIPE;
  if (name == "1f1b")
    return ONE_F_ONE_B;
  return std::nullopt;
}

} // namespace dtc::plan
