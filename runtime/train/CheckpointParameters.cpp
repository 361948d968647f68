//===- CheckpointParameters.cpp -------------------------------------------===//
#include "runtime/train/CheckpointParameters.h"

#include "plan/CastCopies.h"
#include "plan/DType.h"
#include "plan/Sharding.h"
#include "runtime/comm/MeshGroups.h"
#include "runtime/cpu/BFloat16.h"
#include "runtime/train/Reshard.h"

namespace dtc::runtime::train {

std::vector<uint32_t> checkpointedParameters(const plan::RankProgram &program) {
  std::vector<uint32_t> ids;
  for (int b = 0; b < program.buffers_size(); ++b)
    if (program.buffers(b).has_parameter() && !program.buffers(b).parameter().accumulator() &&
        !plan::isCastCopy(program.buffers(b)))
      ids.push_back(uint32_t(b));
  return ids;
}

void addParameters(CheckpointState &state, const plan::RankProgram &program,
                   const std::vector<uint32_t> &ids, Executor &executor,
                   const std::vector<int64_t> &axisSizes,
                   const std::vector<int64_t> &coordinates) {
  for (uint32_t id : ids) {
    const plan::Buffer &buffer = program.buffers(int(id));
    state.tensorTypes.push_back({buffer.parameter().initializer(), buffer.type()});
    state.tensorParts.push_back(partOfBuffer(buffer, axisSizes, coordinates));
    const char *at = executor.bufferData(id);
    state.tensorBytes.emplace_back(
        at, at + plan::elementCount(buffer.type()) * plan::dtypeBytes(buffer.type().dtype()));
  }
}

bool readCopiesSplitOtherwise(const std::string &dir, int64_t step, bool sameSplit,
                              const plan::Plan &plan, Executor &executor, int64_t rank,
                              std::string &error) {
  const plan::RankProgram &program = executor.program();
  std::vector<int64_t> axisSizes = plan::meshAxisSizes(plan.mesh());
  std::vector<int64_t> coordinates = meshCoordinates(rank, axisSizes);
  std::vector<WantedPart> wanted;
  std::vector<std::vector<float>> values; // each copy's part of its weight, as read
  std::vector<uint32_t> copies;
  std::vector<bool> weightAxes(axisSizes.size(), false);
  for (const plan::CastCopy &c : executor.castCopies()) {
    if (!c.splitOtherwise)
      continue;
    const plan::Buffer &copy = program.buffers(int(c.copy));
    const plan::Buffer &weight = program.buffers(int(c.weight));
    for (const plan::DimSharding &dim : weight.sharding())
      for (uint32_t axis : dim.mesh_axes())
        weightAxes[axis] = true;
    plan::TensorType type = copy.type();
    type.set_dtype(plan::F32);
    values.emplace_back(size_t(plan::elementCount(type)));
    const auto &model = weight.parameter().model_shape();
    wanted.push_back({weight.parameter().initializer(), type,
                      partOfBuffer(copy, axisSizes, coordinates),
                      reinterpret_cast<char *>(values.back().data()),
                      {model.begin(), model.end()}});
    copies.push_back(c.copy);
  }
  if (wanted.empty())
    return true;
  // Ranks that differ from this one elsewhere hold replicas of the parts
  // these do.
  auto holdsAPart = [&](int64_t r) {
    std::vector<int64_t> at = meshCoordinates(r, axisSizes);
    for (size_t a = 0; a < axisSizes.size(); ++a)
      if (!weightAxes[a] && at[a] != coordinates[a])
        return false;
    return true;
  };
  Resharded read;
  if (!readResharded(dir, wanted, read, error, step,
                     sameSplit ? std::function<bool(int64_t)>(holdsAPart) : nullptr)) {
    error = "the bf16 copies of weights split over other ranks: " + error;
    return false;
  }
  for (size_t k = 0; k < copies.size(); ++k)
    cpu::storeBf16(values[k].data(), values[k].size(), executor.bufferData(copies[k]));
  return true;
}

} // namespace dtc::runtime::train
