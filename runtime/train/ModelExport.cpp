//===- ModelExport.cpp ----------------------------------------------------===//
#include "runtime/train/ModelExport.h"

#include "formats/onnx/TensorProto.h"
#include "plan/DType.h"
#include "plan/Ranks.h"
#include "plan/Sharding.h"
#include "runtime/Files.h"
#include "runtime/TensorSlices.h"
#include "runtime/comm/MeshGroups.h"

#include "onnx.pb.h"

#include <map>

namespace dtc::runtime::train {
namespace {

/// The whole tensor of parameter buffer `id` (f32): the rank's bytes when
/// the plan does not split it; else every rank's part, all-gathered over
/// `world` (a collective call of every rank, in the same order) and put
/// where it lies in the whole tensor.
/// Parameter `id` of program `program`, whole, on rank 0 (and on the ranks
/// that hold it). Every rank calls it for the same parameters in the same
/// order: a world all-gather of each rank's part, where ranks of another
/// program (a pipeline's other stages) send zeros of the same size.
bool wholeParameter(const plan::Plan &plan, Executor &executor, int program, uint32_t id,
                    Communicator *world, std::string &whole, std::string &error) {
  const plan::RankProgram &owner = plan.ranks(program);
  const plan::Buffer &buffer = owner.buffers(int(id));
  const plan::TensorType &part = buffer.type();
  int64_t count = plan::elementCount(part);
  bool mine = &executor.program() == &owner;
  if (!world) {
    whole.assign(executor.bufferData(id), size_t(count * 4));
    return true;
  }
  bool pipelined = plan.training().pipeline().stages() > 1;
  if (buffer.sharding_size() == 0 && !pipelined) {
    whole.assign(executor.bufferData(id), size_t(count * 4));
    return true;
  }
  std::vector<int64_t> axisSizes = plan::meshAxisSizes(plan.mesh());
  std::vector<int64_t> parts = plan::shardParts(buffer, axisSizes);
  std::vector<int64_t> shape(part.shape().begin(), part.shape().end()), wholeShape = shape;
  for (size_t d = 0; d < shape.size(); ++d)
    wholeShape[d] *= parts[d];
  std::vector<char> zeros;
  if (!mine)
    zeros.assign(size_t(count * 4), '\0');
  std::vector<char> all(size_t(count * 4 * world->size()));
  if (!world->allGather(mine ? executor.bufferData(id) : zeros.data(), all.data(), count,
                        plan::F32, error))
    return false;
  int64_t wholeCount = 1;
  for (int64_t d : wholeShape)
    wholeCount *= d;
  whole.assign(size_t(wholeCount * 4), '\0');
  for (int q = 0; q < world->size(); ++q) // each holder's part where it lies
    if (plan::programIndexOfRank(plan, q) == program)
      pasteSlice(all.data() + size_t(q) * size_t(count * 4), wholeShape,
                 plan::shardStarts(buffer, axisSizes, meshCoordinates(q, axisSizes)), shape, 4,
                 whole.data());
  return true;
}

} // namespace

bool exportTrainedModel(const plan::Plan &plan, Executor &executor, const std::string &modelPath,
                        const std::string &out, Communicator *world, int &replaced,
                        std::string &error) {
  // The programs whose parameters are gathered: this rank's (every rank
  // runs the same), or a pipeline's every stage's.
  std::vector<int> programs;
  if (plan.training().pipeline().stages() > 1 && world) {
    for (int p = 0; p < plan.ranks_size(); ++p)
      programs.push_back(p);
  } else {
    programs.push_back(world ? plan::programIndexOfRank(plan, world->rank()) : 0);
  }
  std::map<std::string, std::string> trained;
  replaced = 0;
  for (int p : programs) {
    const plan::RankProgram &program = plan.ranks(p);
    for (int b = 0; b < program.buffers_size(); ++b) {
      const plan::Buffer &buffer = program.buffers(b);
      if (!buffer.has_parameter() || buffer.parameter().zeros())
        continue;
      if (buffer.type().dtype() != plan::F32) {
        error = "--export: parameter '" + buffer.parameter().initializer() + "' is not f32";
        return false;
      }
      std::string &whole = trained[buffer.parameter().initializer()];
      if (!wholeParameter(plan, executor, p, uint32_t(b), world, whole, error)) {
        error = "--export: " + error;
        return false;
      }
    }
  }
  if (world && world->rank() != 0)
    return true;
  std::string bytes, readError;
  ::onnx::ModelProto model;
  if (!readWholeFile(modelPath, bytes, readError) || !model.ParseFromString(bytes)) {
    error = "--export: cannot read the model " + modelPath;
    return false;
  }
  for (::onnx::TensorProto &init : *model.mutable_graph()->mutable_initializer()) {
    auto it = trained.find(init.name());
    if (it == trained.end())
      continue;
    if (init.data_type() != ::onnx::TensorProto::FLOAT) {
      error = "--export: initializer '" + init.name() + "' is not f32";
      return false;
    }
    formats::onnx::TensorInfo info; // its dims checked (no overflow)
    if (!formats::onnx::describeTensor(init, "--export: initializer '" + init.name() + "'",
                                       info, error))
      return false;
    if (info.count * 4 != int64_t(it->second.size())) {
      error = "--export: initializer '" + init.name() + "' has " +
              std::to_string(info.count) + " elements, the trained parameter " +
              std::to_string(it->second.size() / 4);
      return false;
    }
    init.clear_float_data();
    init.clear_external_data();
    init.set_data_location(::onnx::TensorProto::DEFAULT);
    init.set_raw_data(it->second);
    ++replaced;
  }
  std::string serialized;
  if (!model.SerializeToString(&serialized)) {
    error = "--export: the trained model is too large for one ONNX file (2 GiB)";
    return false;
  }
  return writeFileAtomically(out, out + ".tmp", {serialized}, error);
}

} // namespace dtc::runtime::train
