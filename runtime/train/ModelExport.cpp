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

#include <cstring>
#include <map>
#include <set>

namespace dtc::runtime::train {
namespace {

/// Parameter `id` of program `program`, whole (f32). Every rank calls it
/// for the same parameters in the same order: unless every rank holds the
/// whole parameter (one program for all, the parameter not split), each
/// distinct part is broadcast over `world` by the first rank that holds it
/// and put where it lies in the whole; ranks of another program (a
/// pipeline's other stages) hold none. A rank needs the whole once, not a
/// part from every rank.
bool wholeParameter(const plan::Plan &plan, Executor &executor, int program, uint32_t id,
                    Communicator *world, std::string &whole, std::string &error) {
  const plan::RankProgram &owner = plan.ranks(program);
  const plan::Buffer &buffer = owner.buffers(int(id));
  const plan::TensorType &part = buffer.type();
  int64_t count = plan::elementCount(part);
  bool everyRank = true;
  for (int q = 0; world && q < world->size(); ++q)
    everyRank = everyRank && plan::programIndexOfRank(plan, q) == program;
  if (!world || (everyRank && buffer.sharding_size() == 0)) {
    whole.assign(executor.bufferData(id), size_t(count * 4));
    return true;
  }
  std::vector<int64_t> axisSizes = plan::meshAxisSizes(plan.mesh());
  std::vector<int64_t> parts = plan::shardParts(buffer, axisSizes);
  std::vector<int64_t> shape(part.shape().begin(), part.shape().end()), wholeShape = shape;
  int64_t wholeCount = 1;
  for (size_t d = 0; d < shape.size(); ++d)
    wholeCount *= wholeShape[d] *= parts[d];
  whole.assign(size_t(wholeCount * 4), '\0');
  std::vector<char> piece(size_t(count * 4));
  std::set<std::vector<int64_t>> sent; // the parts' starts
  for (int q = 0; q < world->size(); ++q) {
    if (plan::programIndexOfRank(plan, q) != program)
      continue;
    std::vector<int64_t> starts =
        plan::shardStarts(buffer, axisSizes, meshCoordinates(q, axisSizes));
    if (!sent.insert(starts).second)
      continue;
    if (q == world->rank())
      std::memcpy(piece.data(), executor.bufferData(id), piece.size());
    if (!world->broadcast(piece.data(), count, plan::F32, q, error))
      return false;
    pasteSlice(piece.data(), wholeShape, starts, shape, 4, whole.data());
  }
  return true;
}

} // namespace

bool exportTrainedModel(const plan::Plan &plan, Executor &executor, const std::string &modelPath,
                        const std::string &out, Communicator *world, int &replaced,
                        std::string &error) {
  // The programs whose parameters are gathered: with several ranks, every
  // program (a pipeline's stages hold different parameters), else the one
  // this process runs.
  std::vector<int> programs = {plan::programIndexOfRank(plan, 0)};
  for (int p = 0; world && p < plan.ranks_size(); ++p)
    if (p != programs[0])
      programs.push_back(p);
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
