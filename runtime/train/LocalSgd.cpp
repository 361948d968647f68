//===- LocalSgd.cpp - averaging local SGD's replicas ----------------------===//
#include "runtime/train/LocalSgd.h"

#include "plan/DType.h"
#include "plan/Replicas.h"
#include "runtime/comm/MeshGroups.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace dtc::runtime::train {

bool ReplicaAverage::prepare(const plan::Plan &plan, Executor &executor, std::string &error) {
  const plan::Training &training = plan.training();
  if (training.sync() != "local")
    return true;
  if (training.average_every() < 1 || training.data_axes_size() == 0) {
    error = "the plan's local SGD has no averaging period or no data axes: recompile it";
    return false;
  }
  every_ = training.average_every();
  axes_.assign(training.data_axes().begin(), training.data_axes().end());
  const plan::RankProgram &program = executor.program();
  for (uint32_t id : plan::averagedWeights(plan, program)) {
    const plan::Buffer &buffer = program.buffers(int(id));
    const plan::ParameterSource &source = buffer.parameter();
    for (const plan::DimSharding &dim : buffer.sharding())
      for (uint32_t axis : dim.mesh_axes())
        if (std::find(axes_.begin(), axes_.end(), int(axis)) != axes_.end()) {
          error = fmt::format("local SGD: weight '{}' is split over data axis {}: its replicas "
                              "cannot be averaged (compile with --zero 0)",
                              source.initializer(), axis);
          return false;
        }
    if (buffer.type().dtype() != plan::F32) {
      error = fmt::format("local SGD: weight '{}' is not f32", source.initializer());
      return false;
    }
    weights_.push_back(id);
    count_ += plan::elementCount(buffer.type());
  }
  packed_.resize(size_t(count_));
  return true;
}

bool ReplicaAverage::average(Executor &executor, std::string &error) {
  MeshGroups *groups = executor.meshGroups();
  if (!groups) // one rank: its replica is the mean
    return true;
  Communicator *group = groups->group(axes_, error);
  if (!group)
    return false;
  const plan::RankProgram &program = executor.program();
  float *at = packed_.data();
  for (uint32_t id : weights_) {
    int64_t n = plan::elementCount(program.buffers(int(id)).type());
    std::memcpy(at, executor.bufferData(id), size_t(n) * sizeof(float));
    at += n;
  }
  if (!group->allReduce(packed_.data(), count_, plan::F32, Reduction::Sum, error))
    return false;
  float scale = 1.0f / float(group->size());
  at = packed_.data();
  for (uint32_t id : weights_) {
    int64_t n = plan::elementCount(program.buffers(int(id)).type());
    auto *w = reinterpret_cast<float *>(executor.bufferData(id));
    for (int64_t i = 0; i < n; ++i)
      w[i] = at[i] * scale;
    at += n;
  }
  return true;
}

} // namespace dtc::runtime::train
