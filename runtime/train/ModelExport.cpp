//===- ModelExport.cpp ----------------------------------------------------===//
#include "runtime/train/ModelExport.h"

#include "formats/onnx/TensorProto.h"
#include "plan/CastCopies.h"
#include "plan/DType.h"
#include "plan/Ranks.h"
#include "plan/Sharding.h"
#include "runtime/Files.h"
#include "runtime/TensorSlices.h"
#include "runtime/comm/MeshGroups.h"

#include "onnx.pb.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <set>

namespace dtc::runtime::train {
namespace {

/// Past this many bytes of weights an exported model keeps them in a data
/// file even when the model it came from did not (protobuf's limit is 2 GiB).
constexpr int64_t kMostInline = int64_t(1) << 30;
/// Tensors smaller than this stay inside the model (as exporters do).
constexpr int64_t kSmallestExternal = 1024;
/// Where each tensor starts in the data file (a multiple of), for mapping.
constexpr int64_t kDataAlignment = 64;

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

/// A padded parameter's whole (`whole`, f32), cropped to the model's shape
/// (ParameterSource.model_shape): the padding goes back into no model.
void cropToModel(const plan::Plan &plan, const plan::Buffer &buffer, std::string &whole) {
  const plan::ParameterSource &source = buffer.parameter();
  if (source.model_shape_size() == 0)
    return;
  std::vector<int64_t> parts = plan::shardParts(buffer, plan::meshAxisSizes(plan.mesh()));
  std::vector<int64_t> padded, model(source.model_shape().begin(), source.model_shape().end());
  for (int d = 0; d < buffer.type().shape_size(); ++d)
    padded.push_back(buffer.type().shape(d) * parts[size_t(d)]);
  if (padded == model)
    return;
  int64_t count = 1;
  for (int64_t d : model)
    count *= d;
  std::string cropped(size_t(count * 4), '\0');
  copySlice(whole.data(), padded, std::vector<int64_t>(model.size(), 0), model, 4,
            cropped.data());
  whole = std::move(cropped);
}

/// The model's initializer `name`, or null.
const ::onnx::TensorProto *initializerNamed(const ::onnx::ModelProto &model,
                                            const std::string &name) {
  for (const ::onnx::TensorProto &init : model.graph().initializer())
    if (init.name() == name)
      return &init;
  return nullptr;
}

} // namespace

bool exportTrainedModel(const plan::Plan &plan, Executor &executor, const std::string &modelPath,
                        const std::string &out, Communicator *world, int &replaced,
                        std::string &error) {
  // The programs whose parameters are gathered: with several ranks, every
  // program (a pipeline's stages hold different parameters), else the one
  // this process runs. Parameter servers' workers hold every weight.
  std::vector<int> programs = {plan::programIndexOfRank(plan, 0)};
  bool servers = plan.training().has_parameter_servers();
  for (int p = 0; world && !servers && p < plan.ranks_size(); ++p)
    if (p != programs[0])
      programs.push_back(p);
  std::map<std::string, std::string> trained;
  std::vector<const plan::ParameterSource *> copies; // untied: new initializers
  replaced = 0;
  for (int p : programs) {
    const plan::RankProgram &program = plan.ranks(p);
    for (int b = 0; b < program.buffers_size(); ++b) {
      const plan::Buffer &buffer = program.buffers(b);
      if (!buffer.has_parameter() || buffer.parameter().zeros() || buffer.parameter().frozen() ||
          plan::isCastCopy(buffer))
        continue;
      if (buffer.type().dtype() != plan::F32) {
        error = "--export: parameter '" + buffer.parameter().initializer() + "' is not f32";
        return false;
      }
      if (!buffer.parameter().copy_of().empty())
        copies.push_back(&buffer.parameter());
      std::string &whole = trained[buffer.parameter().initializer()];
      if (!wholeParameter(plan, executor, p, uint32_t(b), world, whole, error)) {
        error = "--export: " + error;
        return false;
      }
      if (!world || world->rank() == 0) // the one that writes
        cropToModel(plan, buffer, whole);
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
  // Weights go where the model kept them: into a data file beside `out`
  // when the model had external data (or is too large for one file), else
  // inside it. Initializers the plan did not train are copied as they are,
  // their external bytes too: the result loads wherever it is written.
  // Tied weights the exporter had folded apart: the transpose of the
  // trained one.
  for (const plan::TransposedWeight &tied : plan.training().transposed_weights()) {
    auto of = trained.find(tied.transpose_of());
    if (of == trained.end())
      continue; // not trained (frozen): the model's copy is still right
    const ::onnx::TensorProto *table = initializerNamed(model, tied.transpose_of());
    if (!table || table->dims_size() != 2 ||
        table->dims(0) * table->dims(1) * 4 != int64_t(of->second.size())) {
      error = "--export: '" + tied.initializer() + "' is the transpose of '" +
              tied.transpose_of() + "', which the model does not hold as a 2-D f32 tensor";
      return false;
    }
    int64_t rows = table->dims(0), cols = table->dims(1);
    std::string &copy = trained[tied.initializer()];
    copy.resize(of->second.size());
    const float *from = reinterpret_cast<const float *>(of->second.data());
    float *to = reinterpret_cast<float *>(copy.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        to[c * rows + r] = from[r * cols + c];
  }
  auto &initializers = *model.mutable_graph()->mutable_initializer();
  // An untied copy becomes an initializer of its own, which its reader
  // reads instead of the merged one.
  std::set<std::string> added;
  for (const plan::ParameterSource *copy : copies) {
    if (!added.insert(copy->initializer()).second)
      continue; // a pipeline's stages may each hold it
    const ::onnx::TensorProto *original = initializerNamed(model, copy->copy_of());
    if (!original) {
      error = "--export: the model has no initializer '" + copy->copy_of() +
              "' (the plan copies it as '" + copy->initializer() + "')";
      return false;
    }
    ::onnx::TensorProto init;
    init.set_name(copy->initializer());
    init.set_data_type(original->data_type());
    *init.mutable_dims() = original->dims();
    init.set_raw_data(""); // filled below with the trained bytes
    *model.mutable_graph()->add_initializer() = std::move(init);
    for (::onnx::NodeProto &node : *model.mutable_graph()->mutable_node())
      if (node.output_size() > 0 && node.output(0) == copy->reader())
        for (std::string &input : *node.mutable_input())
          if (input == copy->copy_of())
            input = copy->initializer();
  }
  bool external = false;
  int64_t total = 0;
  for (const ::onnx::TensorProto &init : initializers) {
    external |= formats::onnx::isExternal(init);
    auto it = trained.find(init.name());
    total += it != trained.end() ? int64_t(it->second.size()) : int64_t(init.raw_data().size());
  }
  external |= total > kMostInline;
  std::filesystem::path outPath(out);
  std::string dataName = outPath.filename().string() + ".data";
  std::string dataPath = (outPath.parent_path() / dataName).string();
  std::string modelDir = std::filesystem::path(modelPath).parent_path().string();
  // External bytes of untrained initializers, which `pieces` views: reserved
  // whole, so that no string moves (a short one's bytes move with it).
  std::vector<std::string> copied;
  copied.reserve(size_t(initializers.size()));
  std::vector<std::string_view> pieces; // the data file
  static const std::string padding(kDataAlignment, '\0');
  int64_t offset = 0;
  for (::onnx::TensorProto &init : initializers) {
    std::string label = "--export: initializer '" + init.name() + "'";
    formats::onnx::TensorInfo info; // its dims checked (no overflow)
    if (!formats::onnx::describeTensor(init, label, info, error))
      return false;
    std::string_view bytes;
    if (auto it = trained.find(init.name()); it != trained.end()) {
      if (init.data_type() != ::onnx::TensorProto::FLOAT) {
        error = label + " is not f32";
        return false;
      }
      if (info.count * 4 != int64_t(it->second.size())) {
        error = label + " has " + std::to_string(info.count) +
                " elements, the trained parameter " + std::to_string(it->second.size() / 4);
        return false;
      }
      bytes = it->second;
      ++replaced;
    } else if (formats::onnx::isExternal(init)) {
      if (!formats::onnx::readTensorBytes(init, info, modelDir, label, copied.emplace_back(),
                                          error))
        return false;
      bytes = copied.back();
    } else {
      continue; // inside the model, as it was
    }
    init.clear_float_data();
    init.clear_external_data();
    if (external && int64_t(bytes.size()) >= kSmallestExternal) {
      if (int64_t pad = (kDataAlignment - offset % kDataAlignment) % kDataAlignment) {
        pieces.push_back(std::string_view(padding).substr(0, size_t(pad)));
        offset += pad;
      }
      init.clear_raw_data();
      init.set_data_location(::onnx::TensorProto::EXTERNAL);
      for (auto [key, value] : {std::pair<const char *, std::string>{"location", dataName},
                                {"offset", std::to_string(offset)},
                                {"length", std::to_string(bytes.size())}}) {
        auto *entry = init.add_external_data();
        entry->set_key(key);
        entry->set_value(value);
      }
      pieces.push_back(bytes);
      offset += int64_t(bytes.size());
    } else {
      init.set_data_location(::onnx::TensorProto::DEFAULT);
      init.set_raw_data(std::string(bytes));
    }
  }
  std::string serialized;
  if (!model.SerializeToString(&serialized)) {
    error = "--export: the trained model is too large for one ONNX file (2 GiB)";
    return false;
  }
  // The data first: the model that points into it appears only once it is
  // whole.
  if (!pieces.empty() && !writeFileAtomically(dataPath, dataPath + ".tmp", pieces, error))
    return false;
  return writeFileAtomically(out, out + ".tmp", {serialized}, error);
}

bool exportTrainedModel(const plan::Plan &plan, Executor &executor, const std::string &modelPath,
                        const std::string &out, Communicator *world,
                        const std::function<void(const std::string &)> &say,
                        std::string &error) {
  int replaced = 0;
  if (!exportTrainedModel(plan, executor, modelPath.empty() ? plan.model() : modelPath, out,
                          world, replaced, error))
    return false;
  if (!world || world->rank() == 0)
    say(fmt::format("exported {} with {} trained initializers", out, replaced));
  return true;
}

} // namespace dtc::runtime::train
