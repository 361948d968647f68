//===- CheckpointParameters.cpp -------------------------------------------===//
#include "runtime/train/CheckpointParameters.h"

#include "plan/CastCopies.h"
#include "plan/DType.h"
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

} // namespace dtc::runtime::train
