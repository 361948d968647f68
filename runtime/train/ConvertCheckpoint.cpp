//===- ConvertCheckpoint.cpp ----------------------------------------------===//
#include "runtime/train/ConvertCheckpoint.h"

#include "plan/DType.h"
#include "plan/FormatBytes.h"
#include "plan/Ranks.h"
#include "plan/Sharding.h"
#include "runtime/comm/MeshGroups.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/CheckpointParameters.h"
#include "runtime/train/Reshard.h"

#include <fmt/format.h>

#include <filesystem>

namespace dtc::runtime::train {

bool convertCheckpoint(const std::string &dir, const plan::Plan &plan, const std::string &out,
                       const std::function<void(const std::string &)> &progress,
                       std::string &error) {
  if (!plan.has_training()) {
    error = "the plan is an inference plan: a checkpoint is converted for a training plan";
    return false;
  }
  const plan::Training &training = plan.training();
  if (!training.sync().empty()) {
    error = fmt::format("a --sync {} plan keeps {} of its own: converting a checkpoint for it "
                        "is not built yet",
                        training.sync(),
                        training.sync() == "ps" ? "the optimizer state on its servers"
                                                : "a replica on each data-parallel rank");
    return false;
  }
  std::error_code ec;
  if (std::filesystem::equivalent(dir, out, ec)) {
    error = "-o " + out + " is the checkpoint folder itself: write the converted one elsewhere";
    return false;
  }
  std::vector<int64_t> mesh = plan::meshAxisSizes(plan.mesh());
  int64_t ranks = plan::planRanks(plan);
  for (int64_t rank = 0; rank < ranks; ++rank) {
    const plan::RankProgram &program = plan.ranks(plan::programIndexOfRank(plan, rank));
    std::vector<int64_t> coordinates = meshCoordinates(rank, mesh);
    CheckpointState state;
    std::vector<WantedPart> wanted;
    // The parameters dtc run checkpoints.
    std::vector<uint32_t> ids = checkpointedParameters(program);
    for (uint32_t id : ids) {
      const plan::Buffer &buffer = program.buffers(int(id));
      state.tensorTypes.push_back({buffer.parameter().initializer(), buffer.type()});
      state.tensorParts.push_back(partOfBuffer(buffer, mesh, coordinates));
      state.tensorBytes.emplace_back(
          size_t(plan::elementCount(buffer.type()) * plan::dtypeBytes(buffer.type().dtype())));
    }
    for (size_t k = 0; k < state.tensorTypes.size(); ++k) {
      const auto &model = program.buffers(int(ids[k])).parameter().model_shape();
      wanted.push_back({state.tensorTypes[k].first, state.tensorTypes[k].second,
                        state.tensorParts[k], state.tensorBytes[k].data(),
                        {model.begin(), model.end()}});
    }
    Resharded read;
    if (!readResharded(dir, wanted, read, error)) {
      error = fmt::format("rank {} of the plan: {}", rank, error);
      return false;
    }
    state.step = read.step;
    state.seed = read.seed;
    state.skippedSteps = read.skippedSteps;
    state.planDigest = planDigest(plan, program);
    state.mesh = mesh;
    state.rank = rank;
    if (!writeCheckpoint(out, state, error)) {
      error = fmt::format("rank {} of the plan: {}", rank, error);
      return false;
    }
    int64_t bytes = 0;
    for (const std::vector<char> &b : state.tensorBytes)
      bytes += int64_t(b.size());
    progress(fmt::format("rank {}: {} tensors, {} (step {}, from {} written by mesh {})", rank,
                         state.tensorTypes.size(), plan::formatBytes(bytes), read.step,
                         plan::rankCount(read.files), plan::meshString(read.mesh)));
  }
  return true;
}

} // namespace dtc::runtime::train
