//===- Trainer.cpp --------------------------------------------------------===//
#include "runtime/train/Trainer.h"

#include "plan/DType.h"
#include "plan/FormatBytes.h"
#include "plan/PipelineSchedule.h"
#include "plan/Ranks.h"
#include "plan/Sharding.h"
#include "runtime/comm/MeshGroups.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/CheckpointParameters.h"
#include "runtime/train/LocalSgd.h"
#include "runtime/train/ParameterServer.h"
#include "runtime/comm/Watchdog.h"
#include "runtime/train/DataSet.h"
#include "runtime/train/ModelExport.h"
#include "runtime/train/Reshard.h"
#include "runtime/train/TrainLog.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <cstring>
#include <sys/stat.h>

namespace dtc::runtime::train {
namespace {

/// The data set's field that holds the labels (labels.npy, or a token
/// file's next tokens).
constexpr const char *kLabels = "labels";

/// The output a --skip-nonfinite step reports its gradients' squares in.
constexpr const char *kGradientSquaresOutput = "gradient_squares";

void setScalar(Executor &executor, int input, float value) {
  std::vector<char> &bytes = executor.inputBytes(input);
  std::memcpy(bytes.data(), &value, sizeof value);
}

} // namespace

namespace {

/// A loss as the progress lines print it: six decimals, or nan / inf /
/// -inf (a NaN's sign bit, which the same step may or may not set, left
/// out).
std::string lossText(float loss) {
  if (std::isnan(loss))
    return "nan";
  return std::isinf(loss) ? (loss > 0 ? "inf" : "-inf") : fmt::format("{:.6f}", loss);
}

/// "70.7 k", "1.23 M": a rate for people.
std::string countText(double n) {
  const char *prefixes[] = {"", " k", " M", " G", " T", " P"};
  int i = 0;
  while (n >= 1000 && i < 5) {
    n /= 1000;
    ++i;
  }
  return fmt::format("{:.3g}{}", n, prefixes[i]);
}

/// "12.3 GFLOP/s".
std::string flopsText(double perSecond) {
  std::string count = countText(perSecond);
  if (count.find(' ') == std::string::npos)
    count += " ";
  return count + "FLOP/s";
}

} // namespace

double scheduledLearningRate(const plan::Training &t, int64_t step) {
  double peak = t.learning_rate();
  if (t.schedule() != "cosine")
    return peak;
  if (step < t.warmup_steps())
    return peak * double(step + 1) / double(t.warmup_steps());
  double progress = double(step - t.warmup_steps()) /
                    double(std::max<int64_t>(1, t.total_steps() - t.warmup_steps()));
  return peak * 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
}

bool Trainer::resume(const TrainOptions &options, const std::string &digest,
                     const std::vector<uint32_t> &parameters, uint64_t &seed, int64_t &start,
                     std::string &error) {
  const plan::RankProgram &program = executor_.program();
  std::vector<int64_t> mesh = plan::meshAxisSizes(plan_.mesh());
  int64_t rank = world_ ? world_->rank() : 0, ranks = plan::meshDevices(plan_.mesh());
  CheckpointState state;
  bool read = readCheckpoint(options.checkpoint, rank, ranks, state, error);
  // A checkpoint of another split (another mesh, another plan of the model,
  // another rank count: no file of this rank) is converted as it is read.
  // (Its layout from the previous file when the last is damaged.)
  CheckpointState previous;
  std::string previousError;
  bool probed =
      read || readCheckpoint(options.checkpoint, rank, ranks, previous, previousError, true);
  const CheckpointState &probe = read ? state : previous;
  int64_t convert = probed ? probe.mesh != mesh || probe.planDigest != digest
                           : error.rfind("cannot open ", 0) == 0 &&
                                 previousError.rfind("cannot open ", 0) == 0;
  std::string commError;
  if (world_ && !world_->allReduce(&convert, 1, plan::I64, Reduction::Max, commError)) {
    error = commError;
    return false;
  }
  if (convert)
    return resumeConverted(options, parameters, seed, start, error);
  // A damaged file (a checksum that does not match, a truncated file) falls
  // back to the one it replaced, said loudly; with several ranks, when the
  // others can resume from that step too.
  bool fellBack = false;
  if (!read) {
    std::string first = error;
    read = readCheckpoint(options.checkpoint, rank, ranks, state, error, true);
    fellBack = read;
    // Set aside only a file that is there but damaged (not a missing one).
    bool damaged = first.rfind("cannot open ", 0) != 0;
    if (read && damaged && !setAsideDamaged(options.checkpoint, rank, ranks, error))
      read = fellBack = false; // the error says why (and the other ranks learn below)
    else if (read)
      progress_(fmt::format("warning: {}{}; resuming from the previous checkpoint (step {}){}",
                            world_ ? fmt::format("rank {}: ", rank) : "", first, state.step,
                            damaged ? "; the damaged file is kept as .damaged" : ""));
    else if (error.find("no previous checkpoint") == std::string::npos)
      error = first + "; and its previous checkpoint: " + error;
    else
      error = first;
  }
  if (world_) {
    // Ranks replace their files one by one: a run stopped while they were
    // writing leaves some at a newer step. All resume from the oldest,
    // which every rank still has (its file, or its previous one).
    int64_t oldest = read ? state.step : -1, failed = read ? ranks : rank;
    if (!world_->allReduce(&oldest, 1, plan::I64, Reduction::Min, commError) ||
        !world_->allReduce(&failed, 1, plan::I64, Reduction::Min, commError)) {
      error = commError;
      return false;
    }
    if (!read)
      return false;
    if (failed < ranks) {
      error = fmt::format("{}: rank {} cannot read its checkpoint file, nor its previous one",
                          options.checkpoint, failed);
      return false;
    }
    if (state.step != oldest) {
      std::string newer = fmt::format("step {}", state.step);
      if (fellBack || !readCheckpoint(options.checkpoint, rank, ranks, state, error, true) ||
          state.step != oldest) {
        error = fmt::format("{}: rank {} holds {}, another rank step {}, and its previous "
                            "file is not of step {}: the ranks cannot resume together",
                            options.checkpoint, rank, newer, oldest, oldest);
        return false;
      }
      progress_(fmt::format("resume: the ranks' files are of different steps (the run "
                            "stopped while writing, or a rank's last file is damaged); "
                            "resuming all from step {}",
                            oldest));
    }
  } else if (!read) {
    return false;
  }
  if (state.tensorTypes.size() != parameters.size()) {
    error = options.checkpoint + ": holds " + std::to_string(state.tensorTypes.size()) +
            " tensors, the plan has " + std::to_string(parameters.size()) + " parameters";
    return false;
  }
  for (size_t k = 0; k < parameters.size(); ++k) {
    const plan::Buffer &buffer = program.buffers(int(parameters[k]));
    if (state.tensorTypes[k].first != buffer.parameter().initializer() ||
        state.tensorTypes[k].second.SerializeAsString() != buffer.type().SerializeAsString()) {
      error = options.checkpoint + ": tensor '" + state.tensorTypes[k].first +
              "' does not match the plan's parameter '" + buffer.parameter().initializer() +
              "'";
      return false;
    }
    std::memcpy(executor_.bufferData(parameters[k]), state.tensorBytes[k].data(),
                state.tensorBytes[k].size());
  }
  if (!readCopiesSplitOtherwise(options.checkpoint, state.step, /*sameSplit=*/true, plan_,
                                executor_, rank, error))
    return false;
  start = state.step;
  skippedBefore_ = state.skippedSteps;
  if (state.seed != options.seed)
    progress_(fmt::format("resume: the checkpoint's data seed {} replaces --seed {}",
                          state.seed, options.seed));
  seed = state.seed;
  progress_(fmt::format("resumed from {} at step {}", options.checkpoint, start));
  return true;
}

bool Trainer::resumeConverted(const TrainOptions &options,
                              const std::vector<uint32_t> &parameters, uint64_t &seed,
                              int64_t &start, std::string &error) {
  const plan::RankProgram &program = executor_.program();
  std::vector<int64_t> mesh = plan::meshAxisSizes(plan_.mesh());
  int64_t rank = world_ ? world_->rank() : 0, ranks = plan::meshDevices(plan_.mesh());
  std::vector<int64_t> coordinates = meshCoordinates(rank, mesh);
  std::vector<WantedPart> wanted;
  for (uint32_t id : parameters) {
    const plan::Buffer &buffer = program.buffers(int(id));
    const auto &model = buffer.parameter().model_shape();
    wanted.push_back({buffer.parameter().initializer(), buffer.type(),
                      partOfBuffer(buffer, mesh, coordinates), executor_.bufferData(id),
                      {model.begin(), model.end()}});
  }
  Resharded read;
  bool ok = readResharded(options.checkpoint, wanted, read, error) &&
            readCopiesSplitOtherwise(options.checkpoint, read.step, /*sameSplit=*/false, plan_,
                                     executor_, rank, error);
  if (world_) {
    int64_t failed = ok ? ranks : rank;
    std::string commError;
    if (!world_->allReduce(&failed, 1, plan::I64, Reduction::Min, commError)) {
      error = commError;
      return false;
    }
    if (ok && failed < ranks) {
      error = fmt::format("{}: rank {} could not convert the checkpoint (its error says why)",
                          options.checkpoint, failed);
      return false;
    }
  }
  if (!ok)
    return false;
  progress_(fmt::format("resume: {} was written by another split of the model (mesh {}, {}); "
                        "converted to this plan's (mesh {}, {}) as it was read",
                        options.checkpoint, plan::meshString(read.mesh),
                        plan::rankCount(read.files), plan::meshString(mesh),
                        plan::rankCount(ranks)));
  start = read.step;
  skippedBefore_ = read.skippedSteps;
  if (read.seed != options.seed)
    progress_(fmt::format("resume: the checkpoint's data seed {} replaces --seed {}", read.seed,
                          options.seed));
  seed = read.seed;
  progress_(fmt::format("resumed from {} at step {}", options.checkpoint, start));
  return true;
}

bool Trainer::runPipelinedStep(int64_t step, int64_t microBatches,
                               const std::function<bool(int64_t)> &feed, double &lossSum,
                               std::string &error) {
  const plan::Pipeline &pipeline = plan_.training().pipeline();
  if (!world_) {
    error = "a pipelined plan runs one process per rank: dtc run -n " +
            std::to_string(plan::meshDevices(plan_.mesh()));
    return false;
  }
  // This rank's stage (and replica of it): its coordinate on the
  // pipeline's axis.
  std::vector<int64_t> sizes = plan::meshAxisSizes(plan_.mesh());
  std::vector<int64_t> coordinates = meshCoordinates(world_->rank(), sizes);
  plan::StageReplica at = plan::stageAtCoordinate(pipeline, coordinates[pipeline.axis()]);
  lossSum = 0;
  int64_t virtuals = std::max<int64_t>(1, pipeline.virtual_stages());
  for (const plan::PipelineTask &task :
       plan::pipelineOrder(pipeline, at.stage, microBatches, at.replica)) {
    std::string what = fmt::format(
        "step {}, micro-batch {} ({}{})", step + 1, task.microBatch + 1,
        task.forward ? "forward" : "backward",
        virtuals > 1 ? fmt::format(" of virtual stage {}", task.chunk) : std::string());
    if (task.forward) {
      if (!feed(task.microBatch))
        return false;
      if (!executor_.runForward(task.microBatch, error, task.chunk)) {
        error = what + ": " + error;
        return false;
      }
      executor_.applyForwardUpdates(task.chunk);
      // The last stage's last virtual stage: the loss.
      if (executor_.hasOutput(0) && task.chunk == virtuals - 1) {
        float microLoss;
        std::memcpy(&microLoss, executor_.output(0).bytes.data(), sizeof microLoss);
        lossSum += microLoss;
      }
      continue;
    }
    if (!executor_.runBackward(task.microBatch, error, task.chunk)) {
      error = what + ": " + error;
      return false;
    }
    executor_.applyMicroBatchUpdates(task.chunk);
  }
  if (!executor_.runStepEnd(error)) {
    error = fmt::format("step {}: {}", step + 1, error);
    return false;
  }
  // The last stage's ranks hold the loss (the same on each; replicas each
  // their micro-batches' part): those with every other coordinate 0 tell
  // every rank the sum, which all check alike.
  int64_t lastStage = int64_t(pipeline.stages()) - 1;
  int64_t replicas = plan::stageReplicas(pipeline, lastStage);
  if (replicas == 1) {
    std::vector<int64_t> last(sizes.size(), 0);
    last[pipeline.axis()] = plan::firstStageCoordinate(pipeline, lastStage);
    if (!world_->broadcast(&lossSum, 1, plan::F64, int(meshRank(last, sizes)), error)) {
      error = fmt::format("step {}: {}", step + 1, error);
      return false;
    }
    return true;
  }
  bool counts = at.stage == lastStage;
  for (size_t a = 0; a < coordinates.size(); ++a)
    counts = counts && (a == pipeline.axis() || coordinates[a] == 0);
  if (!counts)
    lossSum = 0;
  if (!world_->allReduce(&lossSum, 1, plan::F64, Reduction::Sum, error)) {
    error = fmt::format("step {}: {}", step + 1, error);
    return false;
  }
  return true;
}

bool Trainer::run(const TrainOptions &options, std::string &error) {
  const plan::Training &training = plan_.training();
  // A parameter-server job's servers wait for the workers: every rank
  // learns whether each could start (ParameterServer.h).
  bool served = training.has_parameter_servers() && everyone_;
  auto stop = [&] {
    if (served) {
      std::string ignored;
      agreeToStart(*everyone_, false, ignored);
    }
    return false;
  };
  if (options.data.empty() || options.steps <= 0) {
    error = "training needs a data set and a step count";
    return stop();
  }
  // The data set's fields: the model's inputs, then the labels; the
  // optimizer's scalars are ours. The plan says which input is which.
  std::vector<FieldSpec> fields;
  std::vector<int> fieldInputs;
  int labelsInput = -1, lrInput = -1, bc1Input = -1, bc2Input = -1;
  for (int i = 0; i < plan_.inputs_size(); ++i) {
    const plan::Tensor &input = plan_.inputs(i);
    switch (input.role()) {
    case plan::LABELS: labelsInput = i; break;
    case plan::LEARNING_RATE: lrInput = i; break;
    case plan::BIAS_CORRECTION1: bc1Input = i; break;
    case plan::BIAS_CORRECTION2: bc2Input = i; break;
    default:
      fields.push_back({input.name(), input.type()});
      fieldInputs.push_back(i);
    }
  }
  if (labelsInput < 0 || lrInput < 0) {
    error = "the plan's training step has no labels or learning-rate input: recompile it "
            "with this dtc";
    return stop();
  }
  fields.push_back({kLabels, plan_.inputs(labelsInput).type()});
  fieldInputs.push_back(labelsInput);
  // With micro-batches the plan's inputs hold one micro-batch; a step reads
  // micro_batches of them from one batch of the data set.
  int64_t microBatches = std::max<int64_t>(1, training.micro_batches());
  std::vector<int64_t> microRows(fields.size(), 1);
  for (size_t f = 0; f < fields.size(); ++f)
    if (fields[f].type.shape_size() > 0) {
      microRows[f] = fields[f].type.shape(0);
      fields[f].type.set_shape(0, microRows[f] * microBatches);
    }

  struct stat st;
  if (stat(options.data.c_str(), &st) != 0) {
    error = "--data '" + options.data + "': no such file or directory";
    return stop();
  }
  std::unique_ptr<DataSet> data =
      S_ISDIR(st.st_mode) ? DataSet::openNpyDir(options.data, fields, error)
                          : DataSet::openTokens(options.data, options.tokenBytes, fields, error);
  if (!data)
    return stop();
  data->setShuffle(options.shuffle, options.seed);
  if (training.loss() == "cross_entropy")
    data->setLabelRange(fields.size() - 1, training.classes(),
                        training.has_ignore_index()
                            ? std::optional<int64_t>(training.ignore_index())
                            : std::nullopt);

  // Every parameter (weights and optimizer state) is checkpointed, by name:
  // this rank's parts of them, with where each lies in the whole tensor.
  std::vector<int64_t> axisSizes = plan::meshAxisSizes(plan_.mesh());
  std::vector<int64_t> coordinates = meshCoordinates(world_ ? world_->rank() : 0, axisSizes);
  const plan::RankProgram &program = executor_.program();
  std::vector<uint32_t> parameters = checkpointedParameters(program);
  std::string digest = planDigest(plan_, program);

  ReplicaAverage replicas; // local SGD
  if (!replicas.prepare(plan_, executor_, error))
    return stop();
  ServerClient servers; // parameter servers
  if (!servers.prepare(plan_, executor_, everyone_, error))
    return stop();
  if (served && !agreeToStart(*everyone_, true, error))
    return false;
  int64_t start = 0;
  uint64_t dataSeed = options.seed; // a resumed run's is the checkpoint's
  if (options.resume) {
    if (options.checkpoint.empty()) {
      error = "resuming needs a checkpoint directory";
      return false;
    }
    // The parameters are read into the host's arena, the weights' bf16
    // copies made from them (and then to the device's, where the program
    // runs on one).
    bool resumed = resume(options, digest, parameters, dataSeed, start, error);
    if (resumed)
      executor_.makeCastCopies();
    resumed = resumed && executor_.syncToDevice(error);
    // Parameter servers resume from the step the workers do (ParameterServer.h).
    int64_t agreed = 0;
    if (served && !agreeOnResumedStep(*everyone_, resumed ? start : -1, agreed, error))
      return false;
    if (!resumed)
      return false;
    if (served && agreed != start)
      error = fmt::format("rank {}: resumed at step {}, but another rank can only from step {}",
                          everyone_->rank(), start, agreed);
    if (served && !agreeToStart(*everyone_, agreed == start, error))
      return false;
    data->setShuffle(options.shuffle, dataSeed);
  }

  int64_t lastSaved = start; // the step of the checkpoint a failed write leaves
  // --skip-nonfinite: the output that says whether a step's gradients were
  // finite (plan.proto: Training.skip_nonfinite).
  int squaresOutput = -1;
  int64_t skippedSteps = 0;
  if (training.skip_nonfinite())
    for (int o = 0; o < plan_.outputs_size(); ++o)
      if (plan_.outputs(o).name() == kGradientSquaresOutput)
        squaresOutput = o;
  auto saveCheckpoint = [&](int64_t completed) {
    CheckpointState state;
    state.step = completed;
    state.seed = dataSeed;
    state.skippedSteps = skippedBefore_ + skippedSteps;
    state.planDigest = digest;
    state.mesh = plan::meshAxisSizes(plan_.mesh());
    state.rank = world_ ? world_->rank() : 0;
    if (!executor_.syncToHost(error)) // a device's parameters, read from the host's arena
      return false;
    addParameters(state, program, parameters, executor_, axisSizes, coordinates);
    return writeCheckpoint(options.checkpoint, state, error);
  };

  const plan::Pipeline &pipeline = training.pipeline();
  progress_(fmt::format("training: {} samples, batch {}{}{}, {} batches per epoch, {} steps, "
                        "loss {}, {}",
                        data->samples(), data->batch(),
                        microBatches > 1 ? fmt::format(" ({} micro-batches of {})", microBatches,
                                                       data->batch() / microBatches)
                                         : "",
                        executor_.pipelined()
                            ? fmt::format(" through {} pipeline stages ({})", pipeline.stages(),
                                          plan::scheduleName(pipeline.schedule()))
                            : "",
                        data->batchesPerEpoch(), options.steps, training.loss(),
                        training.optimizer()));
  if (replicas.enabled())
    progress_(fmt::format("training: local SGD: each data-parallel rank trains its own replica "
                          "on its part of the batch; the {} weights averaged every {} steps",
                          countText(double(replicas.weightCount())),
                          training.average_every()));
  if (servers.enabled())
    progress_(fmt::format(
        "training: parameter servers: each of {} workers pushes its gradients ({} a step) to "
        "{} and pulls the weights; {}",
        plan::meshDevices(plan_.mesh()), plan::formatBytes(servers.bytesPerStep()),
        servers.servers() == 1 ? "1 server" : fmt::format("{} servers", servers.servers()),
        training.parameter_servers().staleness() == 0
            ? std::string("synchronous")
            : fmt::format("asynchronous, a worker at most {} steps ahead of the slowest",
                          training.parameter_servers().staleness())));
  // Each rank reads only its rows of every batch (all of them unless the
  // plan splits the batch).
  std::vector<void *> buffers(fields.size());
  std::vector<std::pair<int64_t, int64_t>> rows;
  for (size_t f = 0; f < fields.size(); ++f)
    rows.push_back(executor_.inputRows(fieldInputs[f]));
  // What a step does, for its progress line: this rank's FLOPs (its
  // instructions' costs, a micro-batch's part as often as it runs) and the
  // tokens it trains on (an integer first input of [batch, sequence, ...]:
  // its elements; else samples).
  double stepFlops = 0;
  bool micro = microBatches > 1 || executor_.pipelined();
  for (int i = 0; i < program.instructions_size(); ++i)
    stepFlops += double(program.instructions(i).cost().flops()) *
                 double(micro && uint32_t(i) < program.accumulate_end() ? microBatches : 1);
  const plan::TensorType &first = plan_.inputs(fieldInputs.front()).type();
  bool integer = first.dtype() != plan::F32 && first.dtype() != plan::F64 &&
                 first.dtype() != plan::F16 && first.dtype() != plan::BF16;
  bool tokens = integer && first.shape_size() >= 2;
  double perSample = 1;
  for (int d = 1; tokens && d < first.shape_size(); ++d)
    perSample *= double(first.shape(d));
  double unitsPerStep = double(data->batch()) * perSample;
  bool logs = !options.logJson.empty() && (!world_ || world_->rank() == 0);
  std::FILE *log = nullptr;
  if (logs && !(log = std::fopen(options.logJson.c_str(), options.resume ? "a" : "w"))) {
    error = "--log-json " + options.logJson + ": cannot write it";
    return false;
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE *)> closeLog(log, [](std::FILE *f) {
    return f ? std::fclose(f) : 0;
  });
  auto began = std::chrono::steady_clock::now();
  for (int64_t step = start; step < options.steps; ++step) {
    watchdog::setActivity(fmt::format("step {}", step + 1));
    auto begin = std::chrono::steady_clock::now();
    double lr = scheduledLearningRate(training, step);
    setScalar(executor_, lrInput, float(lr));
    // The optimizer's step: a skipped step did not count (as PyTorch's
    // GradScaler skips optimizer.step()).
    double t = double(step + 1 - skippedBefore_ - skippedSteps);
    if (bc1Input >= 0)
      setScalar(executor_, bc1Input, float(1.0 / (1.0 - std::pow(training.beta1(), t))));
    if (bc2Input >= 0)
      setScalar(executor_, bc2Input, float(1.0 / (1.0 - std::pow(training.beta2(), t))));
    // Micro-batch m takes rows [m * b, (m + 1) * b) of the batch (this
    // rank's part of them); without micro-batches, the one pass is the step.
    double lossSum = 0;
    if (microBatches > 1 || executor_.pipelined())
      executor_.zeroAccumulators();
    auto feed = [&](int64_t m) {
      std::vector<std::pair<int64_t, int64_t>> microRowsOfRank = rows;
      for (size_t f = 0; f < fields.size(); ++f) {
        buffers[f] = executor_.inputRowBytes(fieldInputs[f]).data();
        microRowsOfRank[f].first += m * microRows[f];
      }
      if (!data->fillBatch(step, buffers.data(), error, &microRowsOfRank)) {
        error = fmt::format("step {}: {}", step + 1, error);
        return false;
      }
      return true;
    };
    if (executor_.pipelined() && !runPipelinedStep(step, microBatches, feed, lossSum, error))
      return false;
    for (int64_t m = 0; m < microBatches && !executor_.pipelined(); ++m) {
      if (!feed(m))
        return false;
      bool ran = microBatches > 1 ? executor_.runMicroBatch(error, m + 1 == microBatches)
                                  : executor_.run(error);
      if (!ran) {
        error = fmt::format("step {}{}: {}", step + 1,
                            microBatches > 1 ? fmt::format(", micro-batch {}", m + 1) : "",
                            error);
        return false;
      }
      HostTensor lossTensor = executor_.output(0);
      float microLoss;
      std::memcpy(&microLoss, lossTensor.bytes.data(), sizeof microLoss);
      lossSum += microLoss;
      if (microBatches > 1)
        executor_.applyMicroBatchUpdates();
    }
    if (microBatches > 1 && !executor_.pipelined() && !executor_.runStepEnd(error)) {
      error = fmt::format("step {}: {}", step + 1, error);
      return false;
    }
    // Sends are buffered: each step waits for its own to be received.
    if (world_ && !world_->completeSends(error)) {
      error = fmt::format("step {}: {}", step + 1, error);
      return false;
    }
    float loss = float(lossSum / double(microBatches));
    // --skip-nonfinite: the program kept the old weights and state when its
    // gradients were not finite; every rank learns whether it did.
    bool skipped = false;
    if (squaresOutput >= 0) {
      int64_t notFinite = 0;
      if (executor_.hasOutput(squaresOutput)) {
        float squares;
        std::memcpy(&squares, executor_.output(squaresOutput).bytes.data(), sizeof squares);
        notFinite = !std::isfinite(squares);
      }
      std::string commError;
      if (world_ && !world_->allReduce(&notFinite, 1, plan::I64, Reduction::Max, commError)) {
        error = fmt::format("step {}: {}", step + 1, commError);
        return false;
      }
      skipped = notFinite;
      if (skipped) {
        ++skippedSteps;
        progress_(fmt::format("skipped step {}: the gradients are not finite (the loss is {}); "
                              "weights and optimizer state stay as they were (--skip-nonfinite)",
                              step + 1, lossText(loss)));
      }
    }
    if (!std::isfinite(loss) && squaresOutput >= 0 && !skipped)
      progress_(fmt::format("note: step {}: the loss is {}, its gradients finite: the step is "
                            "taken",
                            step + 1, lossText(loss)));
    if (!std::isfinite(loss) && squaresOutput < 0) {
      error = fmt::format("step {}: the loss is {}; stopping without saving anything{}",
                          step + 1,
                          std::isnan(loss) ? "NaN" : loss > 0 ? "+infinity" : "-infinity",
                          options.checkpoint.empty()
                              ? " (no --checkpoint was given)"
                              : " (the last checkpoint in " + options.checkpoint +
                                    " is intact)");
      return false;
    }
    executor_.applyUpdates();
    if (servers.enabled() && !servers.exchange(executor_, step, error)) {
      error = fmt::format("step {}: {}", step + 1, error);
      return false;
    }
    if (replicas.due(step + 1)) {
      watchdog::setActivity(fmt::format("step {}, averaging the replicas", step + 1));
      if (!replicas.average(executor_, error))
        return false;
    }
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin)
            .count();
    double seconds = ms / 1e3, rate = unitsPerStep / seconds, flops = stepFlops / seconds;
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    double left = elapsed / double(step + 1 - start) * double(options.steps - step - 1);
    std::string share = options.peakFlops > 0 && stepFlops > 0
                            ? fmt::format(" ({:.1f}% of the device's peak)",
                                          100 * flops / options.peakFlops)
                            : "";
    progress_(fmt::format("step {} loss {} lr {:.3g} time {:.3f} ms, {} {}/s, {}{}; "
                          "{} of {} steps in {}, {} left",
                          step + 1, lossText(loss), lr, ms, countText(rate),
                          tokens ? "tokens" : "samples", flopsText(flops), share, step + 1,
                          options.steps, plan::formatSeconds(elapsed),
                          plan::formatSeconds(left)));
    if (log)
      writeStepRecord(log, {step + 1, loss, lr, seconds, rate, tokens, flops,
                            options.peakFlops > 0 ? flops / options.peakFlops : -1, elapsed});
    bool last = step + 1 == options.steps;
    if (!options.checkpoint.empty() && options.checkpointEvery > 0 &&
        ((step + 1) % options.checkpointEvery == 0 || last)) {
      // Every rank learns whether each wrote its file (a full disk on one
      // machine), and all stop together; what was saved before stays.
      watchdog::setActivity(fmt::format("step {}, writing its checkpoint", step + 1));
      bool saved = saveCheckpoint(step + 1);
      // A parameter-server job's servers write theirs at the same step.
      Communicator *agree = served ? everyone_ : world_;
      int64_t all = agree ? agree->size() : 1;
      int64_t failed = saved ? all : (agree ? agree->rank() : 0);
      std::string commError;
      if (agree && !agree->allReduce(&failed, 1, plan::I64, Reduction::Min, commError)) {
        error = commError;
        return false;
      }
      std::string kept = lastSaved > 0 ? fmt::format("the checkpoint of step {} in {} is intact",
                                                     lastSaved, options.checkpoint)
                                       : "no checkpoint was written before";
      if (!saved) {
        error += "; " + kept;
        return false;
      }
      if (failed < all) {
        error = fmt::format("rank {} could not write its checkpoint file for step {}; {}",
                            failed, step + 1, kept);
        return false;
      }
      lastSaved = step + 1;
    }
  }
  if (servers.enabled() && servers.bytesWhole() > 0)
    progress_(fmt::format("training: pushed {} to the parameter servers ({:.0f}% of the whole "
                          "gradients' {}: a gradient of untouched rows goes by rows)",
                          plan::formatBytes(servers.bytesPushed()),
                          100.0 * double(servers.bytesPushed()) / double(servers.bytesWhole()),
                          plan::formatBytes(servers.bytesWhole())));
  if (skippedSteps > 0)
    progress_(fmt::format("training: {} of {} steps skipped for non-finite gradients",
                          skippedSteps, options.steps - start));
  if (options.exportPath.empty())
    return true;
  // One model: local SGD's replicas averaged (the checkpoints keep them
  // apart, as an uninterrupted run would have them).
  if (replicas.enabled() && !replicas.due(options.steps) && !replicas.average(executor_, error))
    return false;
  if (!executor_.syncToHost(error))
    return false;
  return exportTrainedModel(plan_, executor_, options.modelPath, options.exportPath, world_,
                            progress_, error);
}

} // namespace dtc::runtime::train
