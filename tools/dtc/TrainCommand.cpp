//===- TrainCommand.cpp - dtc run on a training plan ----------------------===//
//
// Runs a training plan's step (compiler/Training.cpp) over a data set:
// fills the model's inputs and the labels from the data, the optimizer's
// per-step scalars from the schedule, runs the step, checks the loss, then
// copies the new weights and optimizer state into place. Checkpoints hold
// every parameter (weights and optimizer state), the step and the data
// seed: the data order depends only on (seed, step), so a resumed run
// repeats the uninterrupted one exactly. With several ranks, each reads the
// same batches and feeds its part of sharded inputs (the executor cuts it),
// and each checkpoints its own parts of the parameters in a file of its own.
//
//===----------------------------------------------------------------------===//
#include "tools/dtc/Commands.h"
#include "tools/dtc/RankLauncher.h"
#include "tools/dtc/TrainCommand.h"

#include "plan/PlanLoader.h"
#include "plan/Sharding.h"
#include "runtime/TensorIO.h"
#include "runtime/comm/MeshGroups.h"
#include "plan/DType.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/DataSet.h"

#include "onnx.pb.h"

#include <fmt/format.h>

#include <fstream>
#include <map>

#include <chrono>
#include <cmath>
#include <cstring>
#include <sys/stat.h>

namespace dtc::cli {
namespace {

constexpr const char *kLabels = "labels";

/// The learning rate at 0-based `step`: constant, or a linear warm-up to
/// the peak and then a cosine decay to 0 at total_steps.
double learningRate(const plan::Training &t, int64_t step) {
  double peak = t.learning_rate();
  if (t.schedule() != "cosine")
    return peak;
  if (step < t.warmup_steps())
    return peak * double(step + 1) / double(t.warmup_steps());
  double progress = double(step - t.warmup_steps()) /
                    double(std::max<int64_t>(1, t.total_steps() - t.warmup_steps()));
  return peak * 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
}

/// FNV-1a over the rank's program and the plan's training section: a
/// checkpoint belongs to the plan it was written by.
std::string planDigest(const plan::Plan &plan, const plan::RankProgram &program) {
  uint64_t h = 1469598103934665603ull;
  for (const std::string &part :
       {program.SerializeAsString(), plan.training().SerializeAsString()})
    for (unsigned char c : part)
      h = (h ^ c) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

void setScalar(runtime::Executor &executor, int input, float value) {
  std::vector<char> &bytes = executor.inputBytes(input);
  std::memcpy(bytes.data(), &value, sizeof value);
}

/// The whole tensor of parameter buffer `id` (f32): the rank's bytes when
/// the plan does not split it; else every rank's part, all-gathered over
/// `world` (a collective call of every rank, in the same order) and put
/// where it lies in the whole tensor.
bool wholeParameter(const plan::Plan &plan, runtime::Executor &executor, uint32_t id,
                    runtime::Communicator *world, std::string &whole, std::string &error) {
  const plan::Buffer &buffer = executor.program().buffers(int(id));
  const plan::TensorType &part = buffer.type();
  int64_t count = plan::elementCount(part);
  const char *mine = executor.bufferData(id);
  if (buffer.sharding_size() == 0 || !world) {
    whole.assign(mine, size_t(count * 4));
    return true;
  }
  std::vector<int64_t> axisSizes = plan::meshAxisSizes(plan.mesh());
  std::vector<int64_t> parts = plan::shardParts(buffer, axisSizes);
  std::vector<int64_t> shape(part.shape().begin(), part.shape().end()), wholeShape = shape;
  for (size_t d = 0; d < shape.size(); ++d)
    wholeShape[d] *= parts[d];
  std::vector<char> all(size_t(count * 4 * world->size()));
  if (!world->allGather(mine, all.data(), count, plan::F32, error))
    return false;
  int64_t wholeCount = 1;
  for (int64_t d : wholeShape)
    wholeCount *= d;
  whole.assign(size_t(wholeCount * 4), '\0');
  for (int q = 0; q < world->size(); ++q) // each rank's part where it lies
    runtime::pasteSlice(all.data() + size_t(q) * size_t(count * 4), wholeShape,
                        plan::shardStarts(buffer, axisSizes,
                                             runtime::meshCoordinates(q, axisSizes)),
                        shape, 4, whole.data());
  return true;
}

/// Writes the model the plan was compiled from with its trained weights:
/// every initializer that is a parameter of the plan gets the parameter's
/// current bytes, inline (external data is not kept: the result is one
/// self-contained file, under protobuf's 2 GiB limit). Weights split over
/// the ranks are gathered first (every rank takes part); rank 0 writes.
int exportModel(const plan::Plan &plan, runtime::Executor &executor,
                const std::string &modelPath, const std::string &out,
                runtime::Communicator *world) {
  const plan::RankProgram &program = executor.program();
  std::map<std::string, std::string> trained;
  std::string error;
  for (int b = 0; b < program.buffers_size(); ++b) {
    const plan::Buffer &buffer = program.buffers(b);
    if (!buffer.has_parameter() || buffer.parameter().zeros())
      continue;
    if (buffer.type().dtype() != plan::F32)
      return failure("--export: parameter '" + buffer.parameter().initializer() +
                     "' is not f32");
    std::string &whole = trained[buffer.parameter().initializer()];
    if (!wholeParameter(plan, executor, uint32_t(b), world, whole, error))
      return failure("--export: " + error);
  }
  if (world && world->rank() != 0)
    return 0;
  std::ifstream in(modelPath, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ::onnx::ModelProto model;
  if (bytes.empty() || !model.ParseFromString(bytes))
    return failure("--export: cannot read the model " + modelPath);
  int replaced = 0;
  for (::onnx::TensorProto &init : *model.mutable_graph()->mutable_initializer()) {
    auto it = trained.find(init.name());
    if (it == trained.end())
      continue;
    int64_t elements = 1;
    for (int64_t d : init.dims())
      elements *= d;
    if (init.data_type() != ::onnx::TensorProto::FLOAT)
      return failure("--export: initializer '" + init.name() + "' is not f32");
    if (elements * 4 != int64_t(it->second.size()))
      return failure(fmt::format("--export: initializer '{}' has {} elements, the trained "
                                 "parameter {}",
                                 init.name(), elements, it->second.size() / 4));
    init.clear_float_data();
    init.clear_external_data();
    init.set_data_location(::onnx::TensorProto::DEFAULT);
    init.set_raw_data(it->second);
    ++replaced;
  }
  std::string serialized;
  if (!model.SerializeToString(&serialized))
    return failure("--export: the trained model is too large for one ONNX file (2 GiB)");
  if (int rc = writeOutput(out, serialized))
    return rc;
  fmt::print("exported {} with {} trained initializers\n", out, replaced);
  return 0;
}

} // namespace

int runTraining(const plan::Plan &plan, runtime::Executor &executor,
                const TrainRunOptions &options, runtime::Communicator *world) {
  const plan::Training &training = plan.training();
  if (options.data.empty())
    return usageError("a training plan needs --data DIR (one .npy per input + labels.npy) "
                      "or --data TOKENS.bin");
  if (options.steps <= 0)
    return usageError("a training plan needs --steps N (N > 0)");

  // The data set's fields: the model's inputs, then the labels; the
  // optimizer's scalars are ours.
  std::vector<runtime::train::FieldSpec> fields;
  std::vector<int> fieldInputs;
  int labelsInput = -1, lrInput = -1, bc1Input = -1, bc2Input = -1;
  for (int i = 0; i < plan.inputs_size(); ++i) {
    const std::string &name = plan.inputs(i).name();
    if (name == "optimizer.lr")
      lrInput = i;
    else if (name == "optimizer.bias_correction1")
      bc1Input = i;
    else if (name == "optimizer.bias_correction2")
      bc2Input = i;
    else if (name == kLabels)
      labelsInput = i;
    else {
      fields.push_back({name, plan.inputs(i).type()});
      fieldInputs.push_back(i);
    }
  }
  if (labelsInput < 0 || lrInput < 0)
    return failure("the plan's training step lacks its 'labels' or 'optimizer.lr' input: "
                   "recompile it with this dtc");
  fields.push_back({kLabels, plan.inputs(labelsInput).type()});
  fieldInputs.push_back(labelsInput);

  std::string error;
  struct stat st;
  if (stat(options.data.c_str(), &st) != 0)
    return failure("--data '" + options.data + "': no such file or directory");
  bool directory = S_ISDIR(st.st_mode);
  std::unique_ptr<runtime::train::DataSet> data =
      directory ? runtime::train::DataSet::openNpyDir(options.data, fields, error)
                : runtime::train::DataSet::openTokens(options.data, options.tokenBytes, fields,
                                                      error);
  if (!data)
    return failure(error);
  data->setShuffle(options.shuffle, options.seed);
  if (training.loss() == "cross_entropy")
    data->setLabelRange(fields.size() - 1, training.classes(),
                        training.has_ignore_index()
                            ? std::optional<int64_t>(training.ignore_index())
                            : std::nullopt);

  // Every parameter (weights and optimizer state) is checkpointed, by name:
  // this rank's parts of them.
  const plan::RankProgram &program = executor.program();
  std::vector<uint32_t> parameters;
  for (int b = 0; b < program.buffers_size(); ++b)
    if (program.buffers(b).has_parameter())
      parameters.push_back(uint32_t(b));
  std::string digest = planDigest(plan, program);
  std::vector<int64_t> mesh = plan::meshAxisSizes(plan.mesh());
  int64_t rank = world ? world->rank() : 0, ranks = plan::meshDevices(plan.mesh());
  auto meshString = [](const std::vector<int64_t> &sizes) {
    return sizes.empty() ? std::string("1") : fmt::format("{}", fmt::join(sizes, "x"));
  };

  int64_t start = 0;
  if (options.resume) {
    if (options.checkpoint.empty())
      return usageError("--resume needs --checkpoint DIR");
    runtime::train::CheckpointState state;
    bool read = runtime::train::readCheckpoint(options.checkpoint, rank, ranks, state, error);
    if (world) {
      // Ranks replace their files one by one: a run stopped while they were
      // writing leaves some at a newer step. All resume from the oldest,
      // which every rank still has (its file, or its previous one).
      if (!read) { // a rank stopped between keeping its previous file and writing
        std::string first = error;
        read = runtime::train::readCheckpoint(options.checkpoint, rank, ranks, state, error,
                                              true);
        if (!read)
          error = first;
      }
      int64_t oldest = read ? state.step : -1, failed = read ? 0 : 1;
      std::string commError;
      if (!world->allReduce(&oldest, 1, plan::I64, runtime::Reduction::Min, commError) ||
          !world->allReduce(&failed, 1, plan::I64, runtime::Reduction::Max, commError))
        return failure(commError);
      if (!read)
        return failure(error);
      if (failed)
        return failure(options.checkpoint + ": another rank cannot read its checkpoint file");
      if (state.step != oldest) {
        std::string newer = fmt::format("step {}", state.step);
        if (!runtime::train::readCheckpoint(options.checkpoint, rank, ranks, state, error,
                                            true) ||
            state.step != oldest)
          return failure(fmt::format("{}: rank {} holds {}, another rank step {}, and its "
                                     "previous file is not of step {}: the ranks cannot "
                                     "resume together",
                                     options.checkpoint, rank, newer, oldest, oldest));
        fmt::print("resume: the ranks' files are of different steps (the run stopped while "
                   "writing); resuming all from step {}\n",
                   oldest);
      }
    } else if (!read) {
      return failure(error);
    }
    // Files before meshes were recorded are single-rank ones.
    if (state.ranks() != ranks || (!state.mesh.empty() && state.mesh != mesh))
      return failure(fmt::format("{}: the checkpoint was written by a run on mesh {} ({}); "
                                 "this plan's mesh is {} ({})",
                                 options.checkpoint, meshString(state.mesh),
                                 rankCount(state.ranks()), meshString(mesh),
                                 rankCount(ranks)));
    if (state.planDigest != digest)
      return failure(options.checkpoint + ": the checkpoint was written by another plan "
                                          "(recompiled or changed); it cannot resume this one");
    if (state.tensorTypes.size() != parameters.size())
      return failure(options.checkpoint + ": holds " + std::to_string(state.tensorTypes.size()) +
                     " tensors, the plan has " + std::to_string(parameters.size()) +
                     " parameters");
    for (size_t k = 0; k < parameters.size(); ++k) {
      const plan::Buffer &buffer = program.buffers(int(parameters[k]));
      if (state.tensorTypes[k].first != buffer.parameter().initializer() ||
          state.tensorTypes[k].second.SerializeAsString() !=
              buffer.type().SerializeAsString())
        return failure(options.checkpoint + ": tensor '" + state.tensorTypes[k].first +
                       "' does not match the plan's parameter '" +
                       buffer.parameter().initializer() + "'");
      std::memcpy(executor.bufferData(parameters[k]), state.tensorBytes[k].data(),
                  state.tensorBytes[k].size());
    }
    start = state.step;
    if (state.seed != options.seed)
      fmt::print("resume: the checkpoint's data seed {} replaces --seed {}\n", state.seed,
                 options.seed);
    data->setShuffle(options.shuffle, state.seed);
    fmt::print("resumed from {} at step {}\n", options.checkpoint, start);
  }

  auto saveCheckpoint = [&](int64_t completed) -> bool {
    runtime::train::CheckpointState state;
    state.step = completed;
    state.seed = options.seed;
    state.planDigest = digest;
    state.mesh = mesh;
    state.rank = rank;
    for (uint32_t id : parameters) {
      const plan::Buffer &buffer = program.buffers(int(id));
      state.tensorTypes.push_back({buffer.parameter().initializer(), buffer.type()});
      const char *at = executor.bufferData(id);
      state.tensorBytes.emplace_back(at, at + plan::elementCount(buffer.type()) *
                                                plan::dtypeBytes(buffer.type().dtype()));
    }
    return runtime::train::writeCheckpoint(options.checkpoint, state, error);
  };

  fmt::print("training: {} samples, batch {}, {} batches per epoch, {} steps, loss {}, {}\n",
             data->samples(), data->batch(), data->batchesPerEpoch(), options.steps,
             training.loss(), training.optimizer());
  // Each rank reads only its rows of every batch (all of them unless the
  // plan splits the batch).
  std::vector<void *> buffers(fields.size());
  std::vector<std::pair<int64_t, int64_t>> rows;
  for (size_t f = 0; f < fields.size(); ++f)
    rows.push_back(executor.inputRows(fieldInputs[f]));
  for (int64_t step = start; step < options.steps; ++step) {
    auto begin = std::chrono::steady_clock::now();
    for (size_t f = 0; f < fields.size(); ++f)
      buffers[f] = executor.inputRowBytes(fieldInputs[f]).data();
    if (!data->fillBatch(step, buffers.data(), error, &rows))
      return failure(fmt::format("step {}: {}", step + 1, error));
    double lr = learningRate(training, step);
    setScalar(executor, lrInput, float(lr));
    double t = double(step + 1);
    if (bc1Input >= 0)
      setScalar(executor, bc1Input, float(1.0 / (1.0 - std::pow(training.beta1(), t))));
    if (bc2Input >= 0)
      setScalar(executor, bc2Input, float(1.0 / (1.0 - std::pow(training.beta2(), t))));
    if (!executor.run(error))
      return failure(fmt::format("step {}: {}", step + 1, error));
    runtime::HostTensor lossTensor = executor.output(0);
    float loss;
    std::memcpy(&loss, lossTensor.bytes.data(), sizeof loss);
    if (!std::isfinite(loss))
      return failure(fmt::format(
          "step {}: the loss is {}; stopping without saving anything{}",
          step + 1, std::isnan(loss) ? "NaN" : loss > 0 ? "+infinity" : "-infinity",
          options.checkpoint.empty()
              ? " (no --checkpoint was given)"
              : " (the last checkpoint in " + options.checkpoint + " is intact)"));
    executor.applyUpdates();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                          begin)
                    .count();
    fmt::print("step {} loss {:.6f} lr {:.3g} time {:.3f} ms\n", step + 1, loss, lr, ms);
    std::fflush(stdout);
    bool last = step + 1 == options.steps;
    if (!options.checkpoint.empty() && options.checkpointEvery > 0 &&
        ((step + 1) % options.checkpointEvery == 0 || last)) {
      if (!saveCheckpoint(step + 1))
        return failure(error);
    }
  }
  if (!options.exportPath.empty())
    return exportModel(plan, executor,
                       options.modelPath.empty() ? plan.model() : options.modelPath,
                       options.exportPath, world);
  return 0;
}

} // namespace dtc::cli
