//===- PipelineSchedule.cpp -----------------------------------------------===//
#include "plan/PipelineSchedule.h"

#include <algorithm>
#include <numeric>

namespace dtc::plan {

namespace {

/// Megatron-LM's interleaved 1F1B (forward_backward_pipelining_with_
/// interleaving): the k-th forward (backward) of the stage's M * v runs
/// micro-batch k / (p v) * p + k mod p on virtual stage k / p mod v
/// (counted from the last for backwards).
std::vector<PipelineTask> interleavedOrder(int64_t stages, int64_t stage, int64_t microBatches,
                                           int64_t virtualStages) {
  int64_t total = microBatches * virtualStages, group = stages * virtualStages;
  int64_t warmup = microBatches == stages
                       ? total
                       : std::min(total, (stages - stage - 1) * 2 + (virtualStages - 1) * stages);
  auto task = [&](int64_t k, bool forward) {
    int64_t chunk = k % group / stages;
    return PipelineTask{forward, k / group * stages + k % stages,
                        forward ? chunk : virtualStages - 1 - chunk};
  };
  std::vector<PipelineTask> order;
  for (int64_t k = 0; k < warmup; ++k)
    order.push_back(task(k, true));
  for (int64_t k = 0; k < total - warmup; ++k) {
    order.push_back(task(warmup + k, true));
    order.push_back(task(k, false));
  }
  for (int64_t k = total - warmup; k < total; ++k)
    order.push_back(task(k, false));
  return order;
}

/// 1F1B with `warmup` forwards before the first backward.
std::vector<PipelineTask> oneFOneB(int64_t microBatches, int64_t warmup) {
  std::vector<PipelineTask> order;
  warmup = std::min(warmup, microBatches);
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

} // namespace

std::vector<PipelineTask> pipelineOrder(PipelineSchedule schedule, int64_t stages, int64_t stage,
                                        int64_t microBatches, int64_t virtualStages) {
  if (schedule == INTERLEAVED)
    return interleavedOrder(stages, stage, microBatches, std::max<int64_t>(virtualStages, 1));
  return oneFOneB(microBatches, schedule == GPIPE ? microBatches : stages - stage - 1);
}

int64_t replicatedWarmup(int64_t stages, int64_t stage, const std::vector<int64_t> &replicas) {
  int64_t warmup = 0;
  for (int64_t t = stage + 1; t < stages; ++t)
    warmup += t < int64_t(replicas.size()) ? std::max<int64_t>(1, replicas[size_t(t)]) : 1;
  return warmup;
}

std::vector<PipelineTask> replicaOrder(PipelineSchedule schedule, int64_t stages, int64_t stage,
                                       int64_t microBatches, const std::vector<int64_t> &replicas,
                                       int64_t replica) {
  int64_t count = stage < int64_t(replicas.size()) ? std::max<int64_t>(1, replicas[size_t(stage)])
                                                    : 1;
  if (count <= 1 && replicatedWarmup(stages, stage, replicas) == stages - stage - 1)
    return pipelineOrder(schedule, stages, stage, microBatches);
  std::vector<PipelineTask> order;
  for (const PipelineTask &task :
       oneFOneB(microBatches, schedule == GPIPE ? microBatches
                                                : replicatedWarmup(stages, stage, replicas)))
    if (task.microBatch % count == replica)
      order.push_back(task);
  return order;
}

std::vector<PipelineTask> pipelineOrder(const Pipeline &pipeline, int64_t stage,
                                        int64_t microBatches, int64_t replica) {
  if (pipeline.schedule() == INTERLEAVED)
    return pipelineOrder(pipeline.schedule(), pipeline.stages(), stage, microBatches,
                         pipeline.virtual_stages());
  return replicaOrder(pipeline.schedule(), pipeline.stages(), stage, microBatches,
                      stageReplicaCounts(pipeline), replica);
}

std::vector<int64_t> stageReplicaCounts(const Pipeline &pipeline) {
  std::vector<int64_t> counts;
  for (int64_t s = 0; s < int64_t(pipeline.stages()); ++s)
    counts.push_back(stageReplicas(pipeline, s));
  return counts;
}

int64_t stageReplicas(const Pipeline &pipeline, int64_t stage) {
  return stage < pipeline.replicas_size() ? std::max<int64_t>(1, pipeline.replicas(int(stage)))
                                          : 1;
}

int64_t firstStageCoordinate(const Pipeline &pipeline, int64_t stage) {
  int64_t first = 0;
  for (int64_t s = 0; s < stage; ++s)
    first += stageReplicas(pipeline, s);
  return first;
}

int64_t stageCoordinates(const Pipeline &pipeline) {
  return firstStageCoordinate(pipeline, pipeline.stages());
}

StageReplica stageAtCoordinate(const Pipeline &pipeline, int64_t coordinate) {
  for (int64_t s = 0; s < int64_t(pipeline.stages()); ++s) {
    int64_t replicas = stageReplicas(pipeline, s);
    if (coordinate < replicas)
      return {s, coordinate};
    coordinate -= replicas;
  }
  return {-1, -1};
}

int64_t stashSlots(PipelineSchedule schedule, int64_t stages, int64_t stage,
                   int64_t microBatches, int64_t virtualStages, int64_t from, int64_t to,
                   const std::vector<int64_t> &replicas) {
  virtualStages = std::max<int64_t>(virtualStages, 1);
  int64_t count = stage < int64_t(replicas.size()) ? std::max<int64_t>(1, replicas[size_t(stage)])
                                                    : 1;
  int64_t most = 0;
  for (int64_t replica = 0; replica < count; ++replica) {
    int64_t inFlight = 0;
    for (const PipelineTask &task :
         schedule == INTERLEAVED
             ? pipelineOrder(schedule, stages, stage, microBatches, virtualStages)
             : replicaOrder(schedule, stages, stage, microBatches, replicas, replica)) {
      int64_t part = task.forward ? task.chunk : virtualStages + task.chunk;
      if (part == from)
        most = std::max(most, ++inFlight);
      else if (part == to)
        --inFlight;
    }
  }
  return most;
}

namespace {

/// Each virtual stage's forward-to-backward stash copies on `stage`.
std::vector<int64_t> virtualStageSlots(PipelineSchedule schedule, int64_t stages, int64_t stage,
                                       int64_t microBatches, int64_t virtualStages,
                                       const std::vector<int64_t> &replicas) {
  virtualStages = std::max<int64_t>(virtualStages, 1);
  std::vector<int64_t> slots;
  for (int64_t c = 0; c < virtualStages; ++c)
    slots.push_back(stashSlots(schedule, stages, stage, microBatches, virtualStages, c,
                               virtualStages + c, replicas));
  return slots;
}

} // namespace

int64_t stashSlots(PipelineSchedule schedule, int64_t stages, int64_t stage,
                   int64_t microBatches, int64_t virtualStages,
                   const std::vector<int64_t> &replicas) {
  std::vector<int64_t> slots =
      virtualStageSlots(schedule, stages, stage, microBatches, virtualStages, replicas);
  return *std::max_element(slots.begin(), slots.end());
}

double stashedMicroBatches(PipelineSchedule schedule, int64_t stages, int64_t stage,
                           int64_t microBatches, int64_t virtualStages,
                           const std::vector<int64_t> &replicas) {
  std::vector<int64_t> slots =
      virtualStageSlots(schedule, stages, stage, microBatches, virtualStages, replicas);
  return double(std::accumulate(slots.begin(), slots.end(), int64_t(0))) / double(slots.size());
}

std::string scheduleProblem(PipelineSchedule schedule, int64_t stages, int64_t microBatches,
                            int64_t virtualStages) {
  if (schedule != INTERLEAVED)
    return virtualStages > 1 ? "virtual stages need the interleaved schedule" : "";
  if (virtualStages < 2)
    return "the interleaved schedule needs 2 or more virtual stages";
  if (microBatches % stages != 0)
    return "the interleaved schedule runs micro-batches in groups of the stage count: " +
           std::to_string(microBatches) + " micro-batch" + (microBatches == 1 ? "" : "es") +
           " is not a multiple of " + std::to_string(stages) + " stages";
  return "";
}

std::string replicaProblem(PipelineSchedule schedule, int64_t microBatches,
                           const std::vector<int64_t> &replicas) {
  bool replicated = std::any_of(replicas.begin(), replicas.end(), [](int64_t r) { return r > 1; });
  if (!replicated)
    return "";
  if (schedule == INTERLEAVED)
    return "replicated stages run the gpipe or 1f1b schedule, not interleaved";
  for (int64_t r : replicas)
    if (r < 1 || microBatches % r != 0)
      return "each of a stage's " + std::to_string(r) + " replicas runs 1 micro-batch in " +
             std::to_string(r) + ", and " + std::to_string(microBatches) + " micro-batch" +
             (microBatches == 1 ? " is" : "es are") + " not a multiple of " + std::to_string(r) +
             "; use --micro-batches " + std::to_string((microBatches / r + 1) * r);
  return "";
}

int transferTag(int part, const Transfer &transfer) {
  return part + 4 * int(transfer.channel());
}

std::string scheduleName(PipelineSchedule schedule) {
  switch (schedule) {
  case GPIPE:
    return "gpipe";
  case ONE_F_ONE_B:
    return "1f1b";
  case INTERLEAVED:
    return "interleaved";
  default:
    return "unknown";
  }
}

std::optional<PipelineSchedule> scheduleNamed(const std::string &name) {
  if (name == "gpipe")
    return GPIPE;
  if (name == "1f1b")
    return ONE_F_ONE_B;
  if (name == "interleaved")
    return INTERLEAVED;
  return std::nullopt;
}

} // namespace dtc::plan
