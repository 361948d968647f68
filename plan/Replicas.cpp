//===- Replicas.cpp - the weights local SGD averages ----------------------===//
#include "plan/Replicas.h"

#include "plan/DType.h"

namespace dtc::plan {

std::vector<uint32_t> averagedWeights(const Plan &plan, const RankProgram &program) {
  const auto &updates =
      program.updates_size() > 0 ? program.updates() : plan.training().updates();
  std::vector<uint32_t> ids;
  for (const ParameterUpdate &u : updates) {
    if (int(u.buffer()) >= program.buffers_size())
      continue;
    const Buffer &b = program.buffers(int(u.buffer()));
    const ParameterSource &source = b.parameter();
    if (b.has_parameter() && !source.zeros() && !source.accumulator() && !source.frozen())
      ids.push_back(u.buffer());
  }
  return ids;
}

int64_t averagedWeightBytes(const Plan &plan, const RankProgram &program) {
  int64_t bytes = 0;
  for (uint32_t id : averagedWeights(plan, program)) {
    const TensorType &type = program.buffers(int(id)).type();
    bytes += elementCount(type) * dtypeBytes(type.dtype());
  }
  return bytes;
}

} // namespace dtc::plan
