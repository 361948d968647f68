//===- Federated.cpp - federated averaging over client ranks --------------===//
#include "runtime/train/Federated.h"

#include "runtime/train/CheckpointParameters.h"

#include "plan/DType.h"
#include "plan/Replicas.h"
#include "plan/Sharding.h"
#include "runtime/comm/MeshGroups.h"
#include "runtime/comm/Watchdog.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/DataSet.h"
#include "runtime/train/ModelExport.h"
#include "runtime/train/Reshard.h"
#include "runtime/train/Trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <set>

namespace dtc::runtime::train {
namespace {

/// Fixed point for masked aggregation: 2^-24 of a unit (a weight times a
/// sample count stays far below 2^39).
constexpr double kFixedPoint = 16777216.0;

/// A pairwise mask's stream: the same for (a, b) on both clients.
std::mt19937_64 maskStream(uint64_t seed, int64_t round, int64_t a, int64_t b) {
  uint64_t h = seed ^ 0x9E3779B97F4A7C15ull;
  for (uint64_t v : {uint64_t(round), uint64_t(a), uint64_t(b)})
    h = (h ^ v) * 0x100000001B3ull;
  return std::mt19937_64(h);
}

} // namespace

std::vector<int64_t> clientsOfRound(int64_t clients, int64_t perRound, uint64_t seed,
                                    int64_t round) {
  std::vector<int64_t> all(size_t(clients), 0);
  for (int64_t c = 0; c < clients; ++c)
    all[size_t(c)] = c;
  if (perRound <= 0 || perRound >= clients)
    return all;
  std::mt19937_64 draw(seed * 0x9E3779B97F4A7C15ull + uint64_t(round));
  for (int64_t i = 0; i < perRound; ++i) { // a partial Fisher-Yates, by rejection
    uint64_t span = uint64_t(clients - i), limit = UINT64_MAX - UINT64_MAX % span, x;
    do
      x = draw();
    while (x >= limit);
    std::swap(all[size_t(i)], all[size_t(i + int64_t(x % span))]);
  }
  all.resize(size_t(perRound));
  std::sort(all.begin(), all.end());
  return all;
}

bool runFederated(const plan::Plan &plan, Executor &executor, Communicator *world,
                  const TrainOptions &options,
                  const std::function<void(const std::string &)> &progress, std::string &error) {
  const plan::Training &training = plan.training();
  if (training.sync() != "federated") {
    error = "--rounds runs federated averaging: compile the plan with --sync federated";
    return false;
  }
  if (training.micro_batches() > 1) {
    error = "federated averaging with micro-batches is not supported";
    return false;
  }
  // This client: its coordinate along the data axes; its group: the other
  // clients (null alone).
  std::vector<int> axes(training.data_axes().begin(), training.data_axes().end());
  std::vector<int64_t> sizes = plan::meshAxisSizes(plan.mesh());
  std::vector<int64_t> coordinates = meshCoordinates(world ? world->rank() : 0, sizes);
  int64_t client = 0, clients = 1;
  for (int a : axes) {
    client = client * sizes[size_t(a)] + coordinates[size_t(a)];
    clients *= sizes[size_t(a)];
  }
  Communicator *group = nullptr;
  if (executor.meshGroups() && !(group = executor.meshGroups()->group(axes, error)))
    return false;

  // The fields, each of this client's rows of the step's batch.
  std::vector<FieldSpec> fields;
  std::vector<int> fieldInputs;
  int labelsInput = -1, lrInput = -1, bc1Input = -1, bc2Input = -1;
  for (int i = 0; i < plan.inputs_size(); ++i) {
    switch (plan.inputs(i).role()) {
    case plan::LABELS: labelsInput = i; break;
    case plan::LEARNING_RATE: lrInput = i; break;
    case plan::BIAS_CORRECTION1: bc1Input = i; break;
    case plan::BIAS_CORRECTION2: bc2Input = i; break;
    default: fieldInputs.push_back(i);
    }
  }
  if (labelsInput < 0 || lrInput < 0) {
    error = "the plan's training step has no labels or learning-rate input: recompile it";
    return false;
  }
  fieldInputs.push_back(labelsInput);
  for (int i : fieldInputs) {
    FieldSpec field{i == labelsInput ? "labels" : plan.inputs(i).name(), plan.inputs(i).type()};
    if (field.type.shape_size() > 0)
      field.type.set_shape(0, executor.inputRows(i).second);
    fields.push_back(field);
  }
  std::string folder = options.data + "/" + std::to_string(client);
  std::unique_ptr<DataSet> data = DataSet::openNpyDir(folder, fields, error);
  if (!data)
    error = fmt::format("client {}: {}", client, error);
  else if (data->batchesPerEpoch() == 0)
    error = fmt::format("client {}: {} samples, fewer than its batch of {}", client,
                        data->samples(), data->batch());
  if (data) {
    data->setShuffle(options.shuffle, options.seed + uint64_t(client));
    if (training.loss() == "cross_entropy")
      data->setLabelRange(fields.size() - 1, training.classes(),
                          training.has_ignore_index()
                              ? std::optional<int64_t>(training.ignore_index())
                              : std::nullopt);
  }

  // The weights averaged: the updated parameters loaded from the model.
  const plan::RankProgram &program = executor.program();
  std::vector<uint32_t> weights;
  int64_t count = 0;
  for (uint32_t id : plan::averagedWeights(plan, program)) {
    const plan::Buffer &buffer = program.buffers(int(id));
    if (buffer.type().dtype() != plan::F32) {
      error = "federated averaging: weight '" + buffer.parameter().initializer() + "' is not f32";
      return false;
    }
    weights.push_back(id);
    count += plan::elementCount(buffer.type());
  }
  auto scalar = [&](int input, float value) {
    if (input >= 0)
      std::memcpy(executor.inputBytes(input).data(), &value, sizeof value);
  };
  std::vector<float> global(static_cast<size_t>(count)); // the round's starting model
  auto copyWeights = [&](bool out) {
    float *p = global.data();
    for (uint32_t id : weights) {
      size_t n = size_t(plan::elementCount(program.buffers(int(id)).type()));
      char *buffer = executor.bufferData(id);
      out ? std::memcpy(p, buffer, n * sizeof(float)) : std::memcpy(buffer, p, n * sizeof(float));
      p += n;
    }
  };

  std::vector<void *> buffers(fields.size());
  int64_t step = 0; // this client's steps so far (schedule, bias corrections, data order)
  // Checkpoints at round ends: the global weights and this client's
  // optimizer state, the rounds done and the client's own steps, a file a
  // rank (the same format and checks as dtc run's steps).
  std::vector<uint32_t> parameters = checkpointedParameters(program);
  std::string digest = planDigest(plan, program);
  int64_t rank = world ? world->rank() : 0, ranks = world ? world->size() : 1;
  int64_t firstRound = 1;
  CheckpointState resumed;
  if (error.empty() && options.resume &&
      readCheckpoint(options.checkpoint, rank, ranks, resumed, error) &&
      (resumed.planDigest != digest || resumed.tensorTypes.size() != parameters.size()))
    error = options.checkpoint + ": a checkpoint of another plan (federated runs resume only "
                                 "under the plan that wrote them)";
  // Every client learns whether each can start (a missing folder or
  // checkpoint file on one machine): all stop together, the client at
  // fault saying why, rather than the others waiting at the first round's
  // end.
  int64_t unready = error.empty() ? clients : client;
  std::string commError;
  if (world && !world->allReduce(&unready, 1, plan::I64, Reduction::Min, commError)) {
    error = commError;
    return false;
  }
  if (unready < clients) {
    if (error.empty())
      error = fmt::format("client {} cannot start (its message says why)", unready);
    return false;
  }
  progress(fmt::format("training: federated averaging over {} clients, {} rounds of {} local "
                       "epoch{}, {} clients a round{}; client {}: {} samples in batches of {}",
                       clients, options.rounds, options.localEpochs,
                       options.localEpochs == 1 ? "" : "s",
                       options.clientsPerRound > 0 && options.clientsPerRound < clients
                           ? std::to_string(options.clientsPerRound)
                           : "all",
                       options.secureAggregation ? ", masked aggregation" : "", client,
                       data->samples(), data->batch()));
  if (options.resume) {
    for (size_t k = 0; k < parameters.size(); ++k)
      std::memcpy(executor.bufferData(parameters[k]), resumed.tensorBytes[k].data(),
                  resumed.tensorBytes[k].size());
    firstRound = resumed.step + 1;
    step = resumed.localSteps;
    progress(fmt::format("resumed from {} after round {}", options.checkpoint, resumed.step));
  }
  auto save = [&](int64_t round) {
    CheckpointState state;
    state.step = round;
    state.localSteps = step;
    state.seed = options.seed;
    state.planDigest = digest;
    state.mesh = sizes;
    state.rank = rank;
    addParameters(state, program, parameters, executor, sizes, coordinates);
    return writeCheckpoint(options.checkpoint, state, error);
  };
  std::vector<double> packed(size_t(count) + 2);
  for (int64_t round = firstRound; round <= options.rounds; ++round) {
    auto begin = std::chrono::steady_clock::now();
    watchdog::setActivity(fmt::format("round {}", round));
    std::vector<int64_t> chosen =
        clientsOfRound(clients, options.clientsPerRound, options.seed, round);
    bool chosenNow = std::binary_search(chosen.begin(), chosen.end(), client);
    copyWeights(/*out=*/true);
    double lossSum = 0;
    int64_t steps = chosenNow ? options.localEpochs * data->batchesPerEpoch() : 0;
    for (int64_t s = 0; s < steps; ++s, ++step) {
      scalar(lrInput, float(scheduledLearningRate(training, step)));
      double t = double(step + 1);
      scalar(bc1Input, float(1.0 / (1.0 - std::pow(training.beta1(), t))));
      scalar(bc2Input, float(1.0 / (1.0 - std::pow(training.beta2(), t))));
      for (size_t f = 0; f < fields.size(); ++f)
        buffers[f] = executor.inputRowBytes(fieldInputs[f]).data();
      if (!data->fillBatch(step, buffers.data(), error) || !executor.run(error)) {
        error = fmt::format("client {}, round {}: {}", client, round, error);
        return false;
      }
      float loss;
      std::memcpy(&loss, executor.output(0).bytes.data(), sizeof loss);
      if (!std::isfinite(loss)) {
        error = fmt::format("client {}, round {}: the loss is {}", client, round, loss);
        return false;
      }
      lossSum += loss;
      executor.applyUpdates();
    }
    bool lost = options.lostUpdates.count({client, round}) > 0;
    double weight = chosenNow && !lost ? double(data->samples()) : 0;
    // This client's part of the sum: [n, n * mean loss, n * each weight].
    packed[0] = weight;
    packed[1] = steps ? weight * lossSum / double(steps) : 0;
    {
      const float *w = nullptr;
      size_t k = 2;
      for (uint32_t id : weights) {
        w = reinterpret_cast<const float *>(executor.bufferData(id));
        for (int64_t i = 0, n = plan::elementCount(program.buffers(int(id)).type()); i < n; ++i)
          packed[k++] = weight * double(w[i]);
      }
    }
    if (group && !options.secureAggregation &&
        !group->allReduce(packed.data(), int64_t(packed.size()), plan::F64, Reduction::Sum, error))
      return false;
    if (group && options.secureAggregation) {
      // Who reports this round (each client's weight), then the masked sum:
      // each pair's mask added by one and taken away by the other.
      std::vector<double> reported(size_t(clients), 0);
      reported[size_t(client)] = weight;
      if (!group->allReduce(reported.data(), clients, plan::F64, Reduction::Sum, error))
        return false;
      std::vector<uint64_t> masked(packed.size());
      for (size_t k = 0; k < packed.size(); ++k)
        masked[k] = uint64_t(int64_t(std::llround(packed[k] * kFixedPoint)));
      for (int64_t other = 0; other < clients && weight > 0; ++other) {
        if (other == client || reported[size_t(other)] == 0)
          continue;
        std::mt19937_64 mask = maskStream(options.seed, round, std::min(client, other),
                                          std::max(client, other));
        for (uint64_t &v : masked)
          v = client < other ? v + mask() : v - mask();
      }
      if (!group->allReduce(masked.data(), int64_t(masked.size()), plan::U64, Reduction::Sum,
                            error))
        return false;
      for (size_t k = 0; k < packed.size(); ++k)
        packed[k] = double(int64_t(masked[k])) / kFixedPoint;
      packed[0] = 0;
      for (double r : reported)
        packed[0] += r;
    }
    double total = packed[0];
    if (total > 0) {
      size_t k = 2;
      for (uint32_t id : weights) {
        auto *w = reinterpret_cast<float *>(executor.bufferData(id));
        for (int64_t i = 0, n = plan::elementCount(program.buffers(int(id)).type()); i < n; ++i)
          w[i] = float(packed[k++] / total);
      }
    } else {
      copyWeights(/*out=*/false); // nobody reported: the round changes nothing
    }
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                          begin)
                    .count();
    std::string who = fmt::format("{} of {} clients", chosen.size(), clients);
    if (lost)
      progress(fmt::format("warning: client {}: its update of round {} was lost; the round "
                           "averages the others",
                           client, round));
    progress(total > 0 ? fmt::format("round {} loss {:.6f} ({}, {} samples) time {:.3f} ms",
                                     round, packed[1] / total, who, int64_t(total), ms)
                       : fmt::format("round {}: no client reported; the model stays as it was",
                                     round));
    bool last = round == options.rounds;
    if (!options.checkpoint.empty() &&
        (last || (options.checkpointEvery > 0 && round % options.checkpointEvery == 0))) {
      // Every client learns whether each saved (as dtc run's steps do).
      int64_t failed = save(round) ? ranks : rank;
      std::string commError;
      if (world && !world->allReduce(&failed, 1, plan::I64, Reduction::Min, commError)) {
        error = commError;
        return false;
      }
      if (failed < ranks) {
        error = fmt::format("{}rank {} could not write its checkpoint file for round {}",
                            error.empty() ? "" : error + "; ", failed, round);
        return false;
      }
    }
  }
  if (options.exportPath.empty())
    return true;
  return exportTrainedModel(plan, executor, options.modelPath, options.exportPath, world,
                            progress, error);
}

} // namespace dtc::runtime::train
