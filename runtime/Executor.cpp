//===- Executor.cpp -------------------------------------------------------===//
#include "runtime/Executor.h"

#include "runtime/PlanLoader.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace dtc::runtime {

namespace {

constexpr size_t kArenaAlignment = 64;

bool sameType(const plan::TensorType &a, const plan::TensorType &b) {
  return a.dtype() == b.dtype() &&
         std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(), b.shape().end());
}

int64_t byteSize(const plan::TensorType &type) {
  return elementCount(type) * dtypeBytes(type.dtype());
}

/// Which buffers hold bytes that never change (before or after the
/// prologue ran): those inside a parameter, a constant or (after) a prologue
/// output that no instruction and no graph input writes.
std::vector<bool> constantBuffers(const plan::Plan &plan, const plan::RankProgram &program,
                                  bool afterPrologue) {
  using Range = std::pair<int64_t, int64_t>; // [begin, end) in the arena
  auto range = [&](uint32_t id) {
    const plan::Buffer &b = program.buffers(id);
    return Range{b.offset(), b.offset() + byteSize(b.type())};
  };
  std::vector<Range> fixed, written;
  for (int b = 0; b < program.buffers_size(); ++b) {
    const plan::Buffer &buffer = program.buffers(b);
    if (buffer.has_parameter() || buffer.has_constant())
      fixed.push_back(range(b));
    else if (buffer.has_input())
      written.push_back(range(b));
  }
  for (const plan::Instruction &inst : program.prologue())
    for (uint32_t id : inst.outputs())
      (afterPrologue ? fixed : written).push_back(range(id));
  for (const plan::Instruction &inst : program.instructions())
    for (uint32_t id : inst.outputs())
      written.push_back(range(id));
  // A training step writes new weights into its parameters.
  for (const plan::ParameterUpdate &update : plan.training().updates())
    written.push_back(range(update.buffer()));
  std::vector<bool> constant(program.buffers_size(), false);
  for (int b = 0; b < program.buffers_size(); ++b) {
    Range r = range(b);
    if (r.first == r.second)
      continue;
    bool inside = std::any_of(fixed.begin(), fixed.end(), [&](const Range &f) {
      return f.first <= r.first && r.second <= f.second;
    });
    bool overwritten = std::any_of(written.begin(), written.end(), [&](const Range &w) {
      return w.first < r.second && r.first < w.second;
    });
    constant[b] = inside && !overwritten;
  }
  return constant;
}

} // namespace

std::string typeToString(const plan::TensorType &type) {
  std::string s = std::string(dtypeName(type.dtype())) + "[";
  for (int i = 0; i < type.shape_size(); ++i)
    s += (i ? "," : "") + std::to_string(type.shape(i));
  return s + "]";
}

Executor::~Executor() {
  steps_.clear();
  std::free(arena_);
}

std::unique_ptr<Executor> Executor::create(const plan::Plan &plan, int rank,
                                           const std::string &modelPath, int threads,
                                           std::string &error) {
  if (rank < 0 || rank >= plan.ranks_size()) {
    error = "rank " + std::to_string(rank) + " is not in the plan (" +
            std::to_string(plan.ranks_size()) + " ranks)";
    return nullptr;
  }
  std::unique_ptr<Executor> ex(new Executor);
  ex->plan_ = &plan;
  ex->program_ = &plan.ranks(rank);
  const plan::RankProgram &program = *ex->program_;

  size_t arenaBytes = std::max<size_t>(
      kArenaAlignment, (program.arena_bytes() + kArenaAlignment - 1) / kArenaAlignment *
                           kArenaAlignment);
  ex->arena_ = static_cast<char *>(std::aligned_alloc(kArenaAlignment, arenaBytes));
  if (!ex->arena_) {
    error = "cannot allocate the rank's arena of " + std::to_string(arenaBytes) + " bytes";
    return nullptr;
  }
  // Bytes no buffer source fills start as zeros, not as whatever was there.
  std::memset(ex->arena_, 0, arenaBytes);

  // Parameters and constants, once.
  ParameterReader reader;
  bool readerOpen = false;
  for (int b = 0; b < program.buffers_size(); ++b) {
    const plan::Buffer &buffer = program.buffers(b);
    char *at = ex->arena_ + buffer.offset();
    if (buffer.has_constant()) {
      std::memcpy(at, buffer.constant().data(), buffer.constant().size());
    } else if (buffer.has_parameter() && buffer.parameter().has_seeded()) {
      fillSeeded(buffer.parameter(), buffer.type(), at);
    } else if (buffer.has_parameter() && !buffer.parameter().zeros()) {
      if (!readerOpen) {
        const std::string &path = modelPath.empty() ? plan.model() : modelPath;
        if (!reader.open(path, error))
          return nullptr;
        readerOpen = true;
      }
      if (!reader.read(buffer.parameter(), buffer.type(), at, error)) {
        error = "parameter '" + buffer.parameter().initializer() + "': " + error;
        return nullptr;
      }
    }
  }

  ex->pool_ = std::make_unique<cpu::ThreadPool>(threads);
  // The prologue, once: its kernels are used a single time.
  std::vector<bool> constant = constantBuffers(plan, program, /*afterPrologue=*/false);
  for (int i = 0; i < program.prologue_size(); ++i) {
    Step step;
    if (!ex->prepare(program.prologue(i), constant, step, error) ||
        !step.kernel->run(step.inputs.data(), step.outputs.data(), *ex->pool_, error)) {
      error = "prologue instruction " + std::to_string(i) + ": " + error;
      return nullptr;
    }
  }
  constant = constantBuffers(plan, program, /*afterPrologue=*/true);
  for (int i = 0; i < program.instructions_size(); ++i) {
    Step step;
    if (!ex->prepare(program.instructions(i), constant, step, error)) {
      error = "instruction " + std::to_string(i) + ": " + error;
      return nullptr;
    }
    ex->steps_.push_back(std::move(step));
  }
  ex->inputs_.resize(plan.inputs_size());
  ex->inputSet_.assign(plan.inputs_size(), false);
  return ex;
}

int Executor::threads() const { return pool_->threads(); }

void Executor::enableProfile() {
  profileSeconds_.assign(steps_.size(), 0.0);
  profiledRuns_ = 0;
}

bool Executor::prepare(const plan::Instruction &inst, const std::vector<bool> &constant,
                       Step &step, std::string &error) {
  std::vector<plan::TensorType> inTypes, outTypes;
  std::vector<const void *> constants;
  for (uint32_t id : inst.inputs()) {
    inTypes.push_back(program_->buffers(id).type());
    step.inputs.push_back(arena_ + program_->buffers(id).offset());
    constants.push_back(constant[id] ? step.inputs.back() : nullptr);
  }
  for (uint32_t id : inst.outputs()) {
    outTypes.push_back(program_->buffers(id).type());
    step.outputs.push_back(arena_ + program_->buffers(id).offset());
  }
  step.kernel = cpu::makeKernel(inst, inTypes, outTypes, error, constants);
  return step.kernel != nullptr;
}

bool Executor::setInput(int index, const HostTensor &tensor, std::string &error) {
  const plan::Tensor &want = plan_->inputs(index);
  if (!sameType(want.type(), tensor.type)) {
    error = "input '" + want.name() + "': expected " + typeToString(want.type()) +
            ", given " + typeToString(tensor.type);
    return false;
  }
  inputs_[index] = tensor;
  inputSet_[index] = true;
  return true;
}

std::vector<char> &Executor::inputBytes(int index) {
  HostTensor &t = inputs_[index];
  t.type = plan_->inputs(index).type();
  t.bytes.resize(size_t(byteSize(t.type)));
  inputSet_[index] = true;
  return t.bytes;
}

void Executor::applyUpdates() {
  for (const plan::ParameterUpdate &update : plan_->training().updates()) {
    const plan::Buffer &from = program_->buffers(int(program_->outputs(int(update.output()))));
    const plan::Buffer &to = program_->buffers(int(update.buffer()));
    if (from.offset() != to.offset()) // else written in place by the step
      std::memmove(arena_ + to.offset(), arena_ + from.offset(), size_t(byteSize(to.type())));
  }
}

bool Executor::run(std::string &error) {
  for (int i = 0; i < plan_->inputs_size(); ++i)
    if (!inputSet_[i]) {
      error = "input '" + plan_->inputs(i).name() + "' was not given";
      return false;
    }
  // Inputs are copied in on every run: their bytes may be reused by later
  // values once the inputs are dead.
  for (const plan::Buffer &buffer : program_->buffers())
    if (buffer.has_input()) {
      const HostTensor &t = inputs_[buffer.input()];
      std::memcpy(arena_ + buffer.offset(), t.bytes.data(), t.bytes.size());
    }
  using Clock = std::chrono::steady_clock;
  bool profiling = !profileSeconds_.empty();
  Clock::time_point last = profiling ? Clock::now() : Clock::time_point();
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step &step = steps_[i];
    if (!step.kernel->run(step.inputs.data(), step.outputs.data(), *pool_, error)) {
      error = "instruction " + std::to_string(i) + ": " + error;
      return false;
    }
    if (profiling) {
      Clock::time_point now = Clock::now();
      profileSeconds_[i] += std::chrono::duration<double>(now - last).count();
      last = now;
    }
  }
  profiledRuns_ += profiling;
  return true;
}

HostTensor Executor::output(int index) const {
  const plan::Buffer &buffer = program_->buffers(program_->outputs(index));
  HostTensor t;
  t.name = plan_->outputs(index).name();
  t.type = buffer.type();
  const char *at = arena_ + buffer.offset();
  t.bytes.assign(at, at + byteSize(buffer.type()));
  return t;
}

} // namespace dtc::runtime
