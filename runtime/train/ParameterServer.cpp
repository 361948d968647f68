//===- ParameterServer.cpp - workers and servers of a --sync ps plan ------===//
#include "runtime/train/ParameterServer.h"

#include "plan/DType.h"
#include "plan/ServerTensors.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/CheckpointParameters.h"
#include "plan/Sharding.h"
#include "runtime/comm/Watchdog.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

namespace dtc::runtime::train {
namespace {

/// The buffer of parameter `name` in `program`, or -1.
int64_t parameterBuffer(const plan::RankProgram &program, const std::string &name) {
  for (int b = 0; b < program.buffers_size(); ++b)
    if (program.buffers(b).has_parameter() &&
        program.buffers(b).parameter().initializer() == name)
      return b;
  return -1;
}

int64_t bufferBytes(const plan::RankProgram &program, uint32_t id) {
  const plan::TensorType &type = program.buffers(int(id)).type();
  return plan::elementCount(type) * plan::dtypeBytes(type.dtype());
}

/// Rows of `bytes` (each `rowBytes`) that hold a nonzero byte: an exact
/// test, so a row sent or not changes nothing in the sum.
std::vector<int64_t> nonzeroRows(const char *data, int64_t bytes, int64_t rowBytes) {
  std::vector<int64_t> rows;
  for (int64_t r = 0; r * rowBytes < bytes; ++r) {
    const char *row = data + r * rowBytes;
    for (int64_t i = 0; i < rowBytes; ++i)
      if (row[i]) {
        rows.push_back(r);
        break;
      }
  }
  return rows;
}

/// A row block's or whole tensor's rows where it may go by rows: a matrix
/// or more (an embedding table); 0 for vectors and scalars.
int64_t sparseRowBytes(const plan::TensorType &type) {
  return type.shape_size() >= 2 && type.shape(0) > 1 ? plan::rowBytes(type) : 0;
}

} // namespace

bool agreeToStart(Communicator &everyone, bool ready, std::string &error) {
  int64_t unready = ready ? everyone.size() : everyone.rank();
  std::string commError;
  if (!everyone.allReduce(&unready, 1, plan::I64, Reduction::Min, commError)) {
    error = commError;
    return false;
  }
  if (unready < everyone.size() && ready)
    error = fmt::format("rank {} cannot start (its message says why)", unready);
  return unready == everyone.size();
}

bool agreeOnResumedStep(Communicator &everyone, int64_t step, int64_t &agreed,
                        std::string &error) {
  int64_t lowest = step;
  std::string commError;
  if (!everyone.allReduce(&lowest, 1, plan::I64, Reduction::Min, commError)) {
    error = commError;
    return false;
  }
  agreed = lowest;
  if (lowest < 0 && step >= 0)
    error = "another rank could not resume (its message says why)";
  return lowest >= 0;
}

bool ServerClient::prepare(const plan::Plan &plan, Executor &executor, Communicator *world,
                           std::string &error) {
  if (!plan.training().has_parameter_servers())
    return true;
  const plan::ParameterServers &ps = plan.training().parameter_servers();
  if (!world) {
    error = "a parameter-server plan runs on several ranks: let dtc run start them";
    return false;
  }
  world_ = world;
  int64_t devices = plan::meshDevices(plan.mesh());
  const plan::RankProgram &program = executor.program();
  servers_.resize(ps.servers());
  for (uint32_t k = 0; k < ps.servers(); ++k)
    servers_[k].rank = int(devices + k);
  for (const plan::ServerTensor &t : ps.tensors()) {
    Server &server = servers_[t.server()];
    uint32_t gradient = program.outputs(int(t.gradient()));
    int64_t weight = parameterBuffer(program, t.weight());
    if (weight < 0) {
      error = fmt::format("parameter servers: the worker has no parameter '{}'", t.weight());
      return false;
    }
    server.gradients.push_back({gradient, plan::pushedOffset(plan, t), plan::pushedBytes(plan, t),
                                sparseRowBytes(plan.outputs(int(t.gradient())).type())});
    server.weights.push_back(
        {uint32_t(weight), plan::pulledOffset(plan, t), plan::pulledBytes(plan, t)});
    if (plan::pushedOffset(plan, t) + plan::pushedBytes(plan, t) > bufferBytes(program, gradient) ||
        plan::pulledOffset(plan, t) + plan::pulledBytes(plan, t) >
            bufferBytes(program, uint32_t(weight))) {
      error = fmt::format("parameter servers: '{}''s block lies outside the worker's buffers",
                          t.weight());
      return false;
    }
    bytes_ += server.gradients.back().bytes;
  }
  for (Server &server : servers_) {
    int64_t push = 0, pull = 0;
    for (const Piece &p : server.gradients)
      push += p.bytes;
    server.header.resize(1 + server.gradients.size());
    for (const Piece &p : server.weights)
      pull += p.bytes;
    server.push.resize(size_t(push));
    server.pull.resize(size_t(pull));
  }
  return true;
}

bool ServerClient::exchange(Executor &executor, int64_t step, std::string &error) {
  watchdog::setActivity(fmt::format("step {}, pushing gradients to the servers", step + 1));
  for (Server &server : servers_) {
    server.header[0] = step;
    char *at = server.push.data();
    for (size_t i = 0; i < server.gradients.size(); ++i) {
      const Piece &p = server.gradients[i];
      const char *from = executor.bufferData(p.buffer) + p.offset;
      std::vector<int64_t> rows;
      if (p.rowBytes)
        rows = nonzeroRows(from, p.bytes, p.rowBytes);
      int64_t sparse = int64_t(rows.size()) * (p.rowBytes + int64_t(sizeof(int64_t)));
      if (p.rowBytes && 2 * sparse < p.bytes) {
        server.header[i + 1] = int64_t(rows.size());
        std::memcpy(at, rows.data(), rows.size() * sizeof(int64_t));
        at += rows.size() * sizeof(int64_t);
        for (int64_t r : rows) {
          std::memcpy(at, from + r * p.rowBytes, size_t(p.rowBytes));
          at += p.rowBytes;
        }
      } else {
        server.header[i + 1] = -1;
        std::memcpy(at, from, size_t(p.bytes));
        at += p.bytes;
      }
      whole_ += p.bytes;
    }
    int64_t payload = at - server.push.data();
    pushed_ += payload;
    if (!world_->send(server.header.data(), int64_t(server.header.size() * sizeof(int64_t)),
                      server.rank, kPushTag, error) ||
        !world_->send(server.push.data(), payload, server.rank, kPushRowsTag, error))
      return false;
  }
  watchdog::setActivity(fmt::format("step {}, pulling weights from the servers", step + 1));
  for (Server &server : servers_) {
    if (!world_->recv(server.pull.data(), int64_t(server.pull.size()), server.rank, kPullTag,
                      error))
      return false;
    const char *at = server.pull.data();
    for (const Piece &p : server.weights) {
      std::memcpy(executor.bufferData(p.buffer) + p.offset, at, size_t(p.bytes));
      at += p.bytes;
    }
  }
  return world_->completeSends(error);
}

bool runServer(const plan::Plan &plan, Executor &executor, Communicator &world,
               const TrainOptions &options, const Trainer::Progress &progress,
               std::string &error) {
  const plan::Training &training = plan.training();
  const plan::ParameterServers &ps = training.parameter_servers();
  int64_t workers = plan::meshDevices(plan.mesh());
  int64_t self = world.rank() - workers;
  if (!agreeToStart(world, true, error))
    return false;
  const plan::RankProgram &program = executor.program();
  // Checkpoints: the server's weights (or row blocks) and optimizer state,
  // a file of its own beside the workers'.
  std::vector<uint32_t> parameters = checkpointedParameters(program);
  std::string digest = planDigest(plan, program);
  int64_t rank = world.rank(), ranks = world.size();
  std::vector<int64_t> mesh = plan::meshAxisSizes(plan.mesh());
  int64_t start = 0;
  if (options.resume) {
    CheckpointState state;
    bool read = readCheckpoint(options.checkpoint, rank, ranks, state, error);
    if (read && (state.planDigest != digest || state.tensorTypes.size() != parameters.size())) {
      read = false;
      error = options.checkpoint + ": server " + std::to_string(self) +
              "'s file is of another plan (a parameter-server run resumes only under the plan "
              "that wrote it)";
    }
    int64_t agreed = 0;
    if (!agreeOnResumedStep(world, read ? state.step : -1, agreed, error))
      return false;
    // The workers resume from the oldest step they all hold: this server's
    // previous file when it got further.
    if (state.step != agreed &&
        (!readCheckpoint(options.checkpoint, rank, ranks, state, error, true) ||
         state.step != agreed)) {
      error = fmt::format("{}: server {} holds no file of step {}, where the workers resume",
                          options.checkpoint, self, agreed);
      read = false;
    }
    if (!agreeToStart(world, read, error))
      return false;
    for (size_t k = 0; k < parameters.size(); ++k)
      std::memcpy(executor.bufferData(parameters[k]), state.tensorBytes[k].data(),
                  state.tensorBytes[k].size());
    start = agreed;
  }
  auto save = [&](int64_t completed) {
    CheckpointState state;
    state.step = completed;
    state.seed = options.seed;
    state.planDigest = digest;
    state.mesh = mesh;
    state.rank = rank;
    // A server's buffers are whole (its row blocks are named by the plan).
    addParameters(state, program, parameters, executor, mesh,
                  std::vector<int64_t>(mesh.size(), 0));
    return writeCheckpoint(options.checkpoint, state, error);
  };
  // This server's tensors, in plan order (the workers pack them so).
  struct Held {
    uint32_t gradient, weight; // parameter buffer ids
    int64_t gradientBytes, weightBytes, rowBytes; // rowBytes: as the workers send rows
  };
  std::vector<Held> held;
  int64_t pushBytes = 0, pullBytes = 0;
  for (const plan::ServerTensor &t : ps.tensors()) {
    if (int64_t(t.server()) != self)
      continue;
    int64_t gradient = parameterBuffer(program, t.weight() + ".gradient");
    int64_t weight = parameterBuffer(program, t.weight());
    if (gradient < 0 || weight < 0) {
      error = fmt::format("parameter server {}: its program has no buffers for '{}'", self,
                          t.weight());
      return false;
    }
    if (program.buffers(int(gradient)).type().dtype() != plan::F32) {
      error = fmt::format("parameter server {}: '{}''s gradient is not f32", self, t.weight());
      return false;
    }
    held.push_back({uint32_t(gradient), uint32_t(weight),
                    bufferBytes(program, uint32_t(gradient)),
                    bufferBytes(program, uint32_t(weight)),
                    sparseRowBytes(plan.outputs(int(t.gradient())).type())});
    pushBytes += held.back().gradientBytes;
    pullBytes += held.back().weightBytes;
  }
  // The optimizer's scalars are the server's inputs; the data's are unused.
  int lrInput = -1, bc1Input = -1, bc2Input = -1;
  for (int i = 0; i < plan.inputs_size(); ++i) {
    switch (plan.inputs(i).role()) {
    case plan::LEARNING_RATE: lrInput = i; break;
    case plan::BIAS_CORRECTION1: bc1Input = i; break;
    case plan::BIAS_CORRECTION2: bc2Input = i; break;
    default: break;
    }
    std::vector<char> &bytes = executor.inputBytes(i);
    std::fill(bytes.begin(), bytes.end(), 0);
  }
  auto setScalar = [&](int input, double value) {
    if (input < 0)
      return;
    float v = float(value);
    std::memcpy(executor.inputBytes(input).data(), &v, sizeof v);
  };
  int64_t updates = start; // synchronous: one a step
  // One update on the gradients now in the buffers, for worker step `step`.
  auto update = [&](int64_t step) {
    ++updates;
    setScalar(lrInput, scheduledLearningRate(training, step));
    setScalar(bc1Input, 1.0 / (1.0 - std::pow(training.beta1(), double(updates))));
    setScalar(bc2Input, 1.0 / (1.0 - std::pow(training.beta2(), double(updates))));
    if (!executor.run(error)) {
      error = fmt::format("parameter server {}, update {}: {}", self, updates, error);
      return false;
    }
    executor.applyUpdates();
    return true;
  };
  std::vector<char> push(static_cast<size_t>(pushBytes)), pull(static_cast<size_t>(pullBytes));
  std::vector<int64_t> header(1 + held.size());
  // A push from `worker`: its header, then the tensors (whole or by rows).
  auto receive = [&](int worker) {
    int64_t bytes = 0;
    for (size_t i = 0; i < held.size(); ++i) {
      int64_t rows = header[i + 1];
      if (rows >= 0 && (!held[i].rowBytes || rows * held[i].rowBytes > held[i].gradientBytes)) {
        error = fmt::format("parameter server {}: worker {} pushed {} rows of a tensor of {} "
                            "bytes",
                            self, worker, rows, held[i].gradientBytes);
        return false;
      }
      bytes += rows < 0 ? held[i].gradientBytes
                        : rows * (held[i].rowBytes + int64_t(sizeof(int64_t)));
    }
    return world.recv(push.data(), bytes, worker, kPushRowsTag, error);
  };
  // Adds (or, first, copies) a push's gradients, times `scale`.
  auto take = [&](bool first, float scale) -> bool {
    const char *at = push.data();
    for (size_t i = 0; i < held.size(); ++i) {
      const Held &h = held[i];
      auto *sum = reinterpret_cast<float *>(executor.bufferData(h.gradient));
      int64_t rows = header[i + 1];
      if (rows < 0) {
        const auto *g = reinterpret_cast<const float *>(at);
        int64_t n = h.gradientBytes / int64_t(sizeof(float));
        for (int64_t e = 0; e < n; ++e)
          sum[e] = first ? g[e] * scale : sum[e] + g[e] * scale;
        at += h.gradientBytes;
        continue;
      }
      // By rows: the rows not sent are zero.
      if (first)
        std::memset(sum, 0, size_t(h.gradientBytes));
      std::vector<int64_t> index(static_cast<size_t>(rows));
      std::memcpy(index.data(), at, size_t(rows) * sizeof(int64_t));
      at += rows * int64_t(sizeof(int64_t));
      int64_t width = h.rowBytes / int64_t(sizeof(float));
      for (int64_t r : index) {
        if (r < 0 || (r + 1) * h.rowBytes > h.gradientBytes) {
          error = fmt::format("parameter server {}: a push names row {} of a tensor of {} rows",
                              self, r, h.gradientBytes / h.rowBytes);
          return false;
        }
        const auto *g = reinterpret_cast<const float *>(at);
        float *row = sum + r * width;
        for (int64_t e = 0; e < width; ++e)
          row[e] += g[e] * scale;
        at += h.rowBytes;
      }
    }
    return true;
  };
  auto packWeights = [&] {
    char *at = pull.data();
    for (const Held &h : held) {
      std::memcpy(at, executor.bufferData(h.weight), size_t(h.weightBytes));
      at += h.weightBytes;
    }
  };
  auto stepOfPush = [&] { return header[0]; };
  int64_t headerBytes = int64_t(header.size() * sizeof(int64_t));

  if (ps.staleness() == 0) {
    // Synchronous: every worker's push, summed in rank order, then one update.
    for (int64_t step = start; step < options.steps; ++step) {
      watchdog::setActivity(fmt::format("parameter server {}, step {}", self, step + 1));
      for (int64_t w = 0; w < workers; ++w) {
        if (!world.recv(header.data(), headerBytes, int(w), kPushTag, error) || !receive(int(w)))
          return false;
        if (stepOfPush() != step) {
          error = fmt::format("parameter server {}: worker {} pushed step {} during step {}",
                              self, w, stepOfPush() + 1, step + 1);
          return false;
        }
        if (!take(w == 0, 1.0f))
          return false;
      }
      if (!update(step))
        return false;
      packWeights();
      for (int64_t w = 0; w < workers; ++w)
        if (!world.send(pull.data(), pullBytes, int(w), kPullTag, error))
          return false;
      // With the workers' (Trainer.cpp): every rank learns whether each
      // wrote its file.
      bool last = step + 1 == options.steps;
      if (!options.checkpoint.empty() && options.checkpointEvery > 0 &&
          ((step + 1) % options.checkpointEvery == 0 || last)) {
        bool saved = save(step + 1);
        int64_t failed = saved ? world.size() : world.rank();
        std::string commError;
        if (!world.allReduce(&failed, 1, plan::I64, Reduction::Min, commError)) {
          error = commError;
          return false;
        }
        if (!saved)
          return false;
        if (failed < world.size()) {
          error = fmt::format("rank {} could not write its checkpoint file for step {}", failed,
                              step + 1);
          return false;
        }
      }
    }
    return world.completeSends(error);
  }

  // Asynchronous: each push applied as it comes; a worker's reply waits
  // while it is more than `staleness` steps ahead of the slowest.
  std::vector<int64_t> pushed(size_t(workers), 0);
  std::vector<bool> waiting(size_t(workers), false);
  int64_t heldBack = 0;
  for (int64_t done = 0; done < workers * options.steps; ++done) {
    watchdog::setActivity(fmt::format("parameter server {}, push {} of {}", self, done + 1,
                                      workers * options.steps));
    int source = -1;
    if (!world.recvAny(header.data(), headerBytes, kPushTag, source, error))
      return false;
    if (source < 0 || source >= workers) {
      error = fmt::format("parameter server {}: a push from rank {}, not a worker", self, source);
      return false;
    }
    if (!receive(source))
      return false;
    if (!take(true, float(workers)))
      return false;
    if (!update(stepOfPush()))
      return false;
    pushed[size_t(source)] = stepOfPush() + 1;
    waiting[size_t(source)] = true;
    int64_t slowest = *std::min_element(pushed.begin(), pushed.end());
    bool packed = false;
    for (int64_t w = 0; w < workers; ++w) {
      if (!waiting[size_t(w)])
        continue;
      if (pushed[size_t(w)] - slowest > ps.staleness()) {
        if (w == source)
          ++heldBack;
        continue;
      }
      if (!packed)
        packWeights();
      packed = true;
      if (!world.send(pull.data(), pullBytes, int(w), kPullTag, error))
        return false;
      waiting[size_t(w)] = false;
    }
  }
  if (!world.completeSends(error))
    return false;
  progress(fmt::format("parameter server {}: {} updates, {} replies held for the slowest "
                       "worker (staleness {})",
                       self, updates, heldBack, ps.staleness()));
  return true;
}

} // namespace dtc::runtime::train
