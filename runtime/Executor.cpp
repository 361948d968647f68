//===- Executor.cpp -------------------------------------------------------===//
#include "runtime/Executor.h"

#include "plan/FormatBytes.h"

#include "runtime/CollectiveKernel.h"
#include "plan/PipelineSchedule.h"
#include "plan/PlanLoader.h"
#include "plan/Sharding.h"
#include "runtime/comm/MeshGroups.h"
#include "runtime/cpu/BFloat16.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "plan/Ranks.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <set>

namespace dtc::runtime {

namespace {

constexpr size_t kArenaAlignment = 64;

bool sameType(const plan::TensorType &a, const plan::TensorType &b) {
  return a.dtype() == b.dtype() &&
         std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(), b.shape().end());
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
  for (const plan::ParameterUpdate &update : Executor::updatesOf(plan, program))
    written.push_back(range(update.buffer()));
  // Parameter servers: the runtime writes a worker's pulled weights and a
  // server's pushed gradients.
  if (plan.training().has_parameter_servers()) {
    std::set<std::string> pushedOrPulled;
    for (const plan::ServerTensor &t : plan.training().parameter_servers().tensors()) {
      pushedOrPulled.insert(t.weight());
      pushedOrPulled.insert(t.weight() + ".gradient");
    }
    for (int b = 0; b < program.buffers_size(); ++b)
      if (program.buffers(b).has_parameter() &&
          pushedOrPulled.count(program.buffers(b).parameter().initializer()))
        written.push_back(range(uint32_t(b)));
  }
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

std::string shapeToString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<int> axesOf(const plan::Collective &collective) {
  return std::vector<int>(collective.mesh_axes().begin(), collective.mesh_axes().end());
}

/// Makes the communicator of every group any rank's program runs a
/// collective on (beyond a rank alone). Making one is a collective call of
/// all ranks, so every rank makes them all, in one order: sorted, from the
/// whole plan.
bool makeGroups(const plan::Plan &plan, MeshGroups &groups, std::string &error,
                std::vector<std::vector<int>> *made = nullptr) {
  std::set<std::vector<int>> needed;
  std::set<std::vector<int64_t>> ranges; // {axis, first, count}
  for (const plan::RankProgram &program : plan.ranks())
    for (const auto *list : {&program.prologue(), &program.instructions()})
      for (const plan::Instruction &inst : *list)
        if (inst.has_collective() && communicates(inst.collective()) &&
            plan::groupSize(groups.axisSizes(), inst.collective()) > 1) {
          const plan::Collective &c = inst.collective();
          if (c.has_coordinates()) {
            ranges.insert({int64_t(c.mesh_axes(0)), c.coordinates().first(),
                           c.coordinates().count()});
            continue;
          }
          std::vector<int> axes = axesOf(c);
          std::sort(axes.begin(), axes.end());
          needed.insert(axes);
        }
  for (const std::vector<int> &axes : needed)
    if (!groups.group(axes, error))
      return false;
  for (const std::vector<int64_t> &range : ranges)
    if (!groups.rangeGroup(int(range[0]), range[1], range[2], error))
      return false;
  if (made)
    made->assign(needed.begin(), needed.end());
  return true;
}

} // namespace

Executor::~Executor() {
  if (device_)
    device_->release();
  steps_.clear(); // before the device their kernels run on
  device_.reset();
  std::free(arena_);
}

std::unique_ptr<Executor> Executor::create(const plan::Plan &plan, int rank,
                                           const std::string &modelPath, int threads,
                                           std::string &error, MeshGroups *groups,
                                           std::unique_ptr<Device> device) {
  // Parameter servers' ranks follow the mesh's (plan.proto: ParameterServers).
  int64_t devices = plan::meshDevices(plan.mesh());
  int64_t ranks = devices + plan.training().parameter_servers().servers();
  int program = rank >= 0 && rank < ranks ? programIndexOfRank(plan, rank) : rank;
  if (rank < 0 || rank >= ranks || program >= plan.ranks_size()) {
    error = "rank " + std::to_string(rank) + " is not in the plan (" +
            std::to_string(ranks) + " ranks)";
    return nullptr;
  }
  if (rank >= devices && groups) {
    error = "rank " + std::to_string(rank) + " is a parameter server, outside the mesh";
    return nullptr;
  }
  std::unique_ptr<Executor> ex(new Executor);
  ex->plan_ = &plan;
  ex->program_ = &plan.ranks(program);
  ex->groups_ = groups;
  ex->device_ = std::move(device);
  ex->axisSizes_ = plan::meshAxisSizes(plan.mesh());
  ex->coordinates_ = meshCoordinates(rank < devices ? rank : 0, ex->axisSizes_);
  ex->rank_ = rank;
  if (groups) {
    if (groups->axisSizes() != ex->axisSizes_ || groups->coordinates() != ex->coordinates_) {
      error = "the communicators are those of the rank at " +
              shapeToString(groups->coordinates()) + " on a mesh " +
              shapeToString(groups->axisSizes()) + ", not rank " + std::to_string(rank) +
              " of the plan's mesh " + shapeToString(ex->axisSizes_);
      return nullptr;
    }
    // First, before anything that may fail on one rank alone; then the
    // device's own connections over the same groups.
    std::vector<std::vector<int>> made;
    if (!makeGroups(plan, *groups, error, &made) ||
        (ex->device_ && !ex->device_->connect(*groups, made, error)))
      return nullptr;
  }
  if (!ex->load(modelPath, threads, error))
    return nullptr;
  return ex;
}

namespace {

/// A batched instruction's kernel on a device (GpuKernel.batched): a later
/// instruction's launch runs it.
class LaunchedLater final : public cpu::Kernel {
public:
  bool run(const void *const *, void *const *, cpu::ThreadPool &, std::string &) override {
    return true;
  }
};

/// The memory the OS could give this process now (MemAvailable), or -1
/// when it does not say.
int64_t availableMemoryBytes() {
  FILE *meminfo = std::fopen("/proc/meminfo", "r");
  if (!meminfo)
    return -1;
  char line[256];
  long long kib = -1;
  while (std::fgets(line, sizeof line, meminfo))
    if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1)
      break;
  std::fclose(meminfo);
  return kib < 0 ? -1 : int64_t(kib) * 1024;
}

} // namespace

bool Executor::load(const std::string &modelPath, int threads, std::string &error) {
  const plan::RankProgram &program = *program_;
  size_t arenaBytes = std::max<size_t>(
      kArenaAlignment, (program.arena_bytes() + kArenaAlignment - 1) / kArenaAlignment *
                           kArenaAlignment);
  // Before the allocation, which the OS may grant and then kill the
  // process for when the memset touches it: a message with the figures.
  if (int64_t available = availableMemoryBytes(); available >= 0 && int64_t(arenaBytes) > available) {
    error = "the rank needs " + plan::formatBytes(int64_t(arenaBytes)) +
            " of memory (its arena: weights, optimizer state, activations and workspace), but "
            "this machine has " + plan::formatBytes(available) +
            " available: run on a machine with more, or compile the plan for this one "
            "(--memory-limit, or more devices)";
    return false;
  }
  arena_ = static_cast<char *>(std::aligned_alloc(kArenaAlignment, arenaBytes));
  if (!arena_) {
    error = "cannot allocate the rank's arena of " + plan::formatBytes(int64_t(arenaBytes)) +
            " (" + std::to_string(arenaBytes) + " bytes)";
    return false;
  }
  arenaBytes_ = arenaBytes;
  // Bytes no buffer source fills start as zeros, not as whatever was there.
  std::memset(arena_, 0, arenaBytes);
  if (!readParameters(modelPath, error))
    return false;

  // A training step's parts (StepPart), and which part makes each update.
  pipelined_ = plan_->training().pipeline().stages() > 1;
  bool micro = plan_->training().micro_batches() > 1 || pipelined_;
  size_t size = size_t(program.instructions_size());
  accumulateEnd_ = micro ? size_t(program.accumulate_end()) : size;
  virtuals_ = pipelined_ ? std::max<int64_t>(1, plan_->training().pipeline().virtual_stages()) : 1;
  if (const plan::Pipeline &pipeline = plan_->training().pipeline();
      pipelined_ && pipeline.axis() < coordinates_.size())
    replicas_ = plan::stageReplicas(
        pipeline, plan::stageAtCoordinate(pipeline, coordinates_[pipeline.axis()]).stage);
  if (virtuals_ > 1)
    for (uint32_t end : program.part_ends())
      partEnds_.push_back(std::min(size_t(end), accumulateEnd_));
  else
    partEnds_ = {pipelined_ ? std::min(size_t(program.forward_end()), accumulateEnd_) : 0,
                 accumulateEnd_};
  std::vector<int> lastWriter(size_t(program.buffers_size()), -1);
  for (int i = 0; i < program.instructions_size(); ++i)
    for (uint32_t out : program.instructions(i).outputs())
      lastWriter[out] = i;
  for (const plan::ParameterUpdate &update : updatesOf(*plan_, program)) {
    int writer = lastWriter[program.outputs(int(update.output()))];
    // Without micro-batches (or written by no instruction), after the step.
    updateSegment_.push_back(micro && writer >= 0 ? segmentOf(size_t(writer)) : 2 * virtuals_);
  }

  microBatches_ = std::max<int64_t>(1, plan_->training().micro_batches());
  overlappedAfter_.assign(size, {});
  overlappedRan_.assign(size, false);
  // MPI's collectives block the rank's one thread: the reductions overlap
  // nothing here, only move. A pipeline stage keeps them in the
  // once-per-step part: in its last backward they would hold up the sends
  // the stages before it wait for (cost/Simulator.cpp, devices without a
  // communication stream, the same). A device with communication streams
  // runs them there, beside the backward, in a stage too.
  std::vector<bool> overlapped(size, false);
  for (const plan::OverlappedInstruction &o : program.overlapped())
    if (!pipelined_ || (device_ && device_->communicationStreams())) {
      // After the launch that runs the instruction it waits for.
      size_t after = o.after();
      while (device_ && after + 1 < size && program.instructions(int(after)).gpu().batched())
        ++after;
      overlappedAfter_[after].push_back(o.instruction());
      overlapped[o.instruction()] = true;
    }

  pool_ = std::make_unique<cpu::ThreadPool>(threads);
  // The prologue, once: its kernels are used a single time.
  std::vector<bool> constant = constantBuffers(*plan_, program, /*afterPrologue=*/false);
  for (int i = 0; i < program.prologue_size(); ++i) {
    Step step;
    if (!prepare(program.prologue(i), StepPart::Prologue, constant, step, error,
                 /*onHost=*/true) ||
        !step.kernel->run(step.inputs.data(), step.outputs.data(), *pool_, error)) {
      error = "prologue instruction " + std::to_string(i) + ": " + error;
      return false;
    }
  }
  // The arena as loaded (parameters, constants, the prologue's values) to
  // the device, whose copy the program then runs on.
  if (device_) {
    if (!device_->load(*plan_, error))
      return false;
    deviceArena_ = device_->allocate(arenaBytes, error);
    if (!deviceArena_ || !device_->upload(deviceArena_, arena_, arenaBytes, error))
      return false;
  }
  constant = constantBuffers(*plan_, program, /*afterPrologue=*/true);
  for (int i = 0; i < program.instructions_size(); ++i) {
    Step step;
    if (!prepare(program.instructions(i), partOfSegment(segmentOf(size_t(i))), constant, step,
                 error, /*onHost=*/false, overlapped[size_t(i)], i)) {
      error = "instruction " + std::to_string(i) + ": " + error;
      return false;
    }
    steps_.push_back(std::move(step));
  }
  // Transfers over the device's own transport meet their peers' now that
  // every kernel is made.
  if (device_ && !device_->connectTransfers(error))
    return false;
  // A pipeline stage's stashed buffers move by the micro-batch's copy of
  // their group.
  slotShifts_.assign(size_t(program.stashes_size()), 0);
  for (int i = 0; pipelined_ && i < program.instructions_size(); ++i) {
    Step &step = steps_[size_t(i)];
    auto [inputs, outputs] = operandsOf(launchedBy(i));
    for (size_t k = 0; k < inputs.size(); ++k)
      if (uint32_t g = program.buffers(int(inputs[k])).stash())
        step.stashedInputs.push_back(
            {k, static_cast<char *>(const_cast<void *>(step.inputs[k])), size_t(g - 1)});
    for (size_t k = 0; k < outputs.size(); ++k)
      if (uint32_t g = program.buffers(int(outputs[k])).stash())
        step.stashedOutputs.push_back(
            {k, static_cast<char *>(step.outputs[k]), size_t(g - 1)});
  }
  findWavesOfProgram();
  inputs_.resize(plan_->inputs_size());
  inputSet_.assign(plan_->inputs_size(), false);
  inputRowsOnly_.assign(plan_->inputs_size(), false);
  for (const plan::Buffer &buffer : program.buffers()) {
    if (!buffer.has_input())
      continue;
    const plan::TensorType &whole = plan_->inputs(int(buffer.input())).type();
    InputCopy copy{buffer.input(), arena_ + buffer.offset(), size_t(buffer.offset()),
                   size_t(byteSize(buffer.type())), {}, {}, {}, 0, 0};
    copy.rows = whole.shape_size() ? whole.shape(0) : 1;
    if (buffer.sharding_size() != 0) {
      copy.wholeDims.assign(whole.shape().begin(), whole.shape().end());
      copy.starts = plan::shardStarts(buffer, axisSizes_, coordinates_);
      copy.sizes.assign(buffer.type().shape().begin(), buffer.type().shape().end());
      if (!buffer.sharding(0).mesh_axes().empty()) {
        copy.firstRow = copy.starts[0];
        copy.rows = copy.sizes[0];
      }
    }
    inputCopies_.push_back(std::move(copy));
  }
  return true;
}

void Executor::findWavesOfProgram() {
  size_t size = steps_.size();
  waveAt_.assign(size, -1);
  if (device_ || pool_->threads() < 2)
    return;
  // Never a stashed buffer (its bytes move with the micro-batch) nor a
  // reduction the last micro-batch runs early, or what it follows.
  const plan::RankProgram &program = *program_;
  std::vector<bool> overlapped(size, false);
  for (const plan::OverlappedInstruction &o : program.overlapped())
    overlapped[o.instruction()] = overlapped[o.after()] = true;
  auto range = [&](uint32_t id) {
    const plan::Buffer &b = program.buffers(int(id));
    return ByteRange{b.offset(), b.offset() + byteSize(b.type())};
  };
  std::vector<InstructionAccess> access(size);
  for (size_t i = 0; i < size; ++i) {
    const Step &step = steps_[i];
    access[i].alongside = step.kernel->runsAlongsideOthers() && step.stashedInputs.empty() &&
                          step.stashedOutputs.empty() && !overlapped[i];
    for (uint32_t id : program.instructions(int(i)).inputs())
      access[i].reads.push_back(range(id));
    int64_t written = 0;
    for (uint32_t id : program.instructions(int(i)).outputs()) {
      access[i].writes.push_back(range(id));
      written += access[i].writes.back().end - access[i].writes.back().begin;
    }
    access[i].alongside &= written <= kSmallInstructionBytes;
  }
  std::vector<size_t> boundaries(partEnds_.begin(), partEnds_.end());
  boundaries.push_back(accumulateEnd_);
  waves_ = findWaves(access, boundaries);
  size_t widest = 0;
  for (size_t w = 0; w < waves_.size(); ++w) {
    waveAt_[waves_[w].begin] = int(w);
    for (const std::vector<size_t> &level : waves_[w].levels)
      widest = std::max(widest, level.size());
  }
  taskErrors_.assign(widest, "");
}

size_t Executor::instructionsSideBySide() const {
  size_t count = 0;
  for (const Wave &wave : waves_)
    count += wave.end - wave.begin;
  return count;
}

bool Executor::readParameters(const std::string &modelPath, std::string &error) {
  ParameterReader reader;
  bool readerOpen = false;
  if (!plan::castCopies(*program_, axisSizes_, !plan_->has_training(), castCopies_, error))
    return false;
  // A copy is made from its weight below, but where the rank does not hold
  // its values: an inference plan's copy, which stands alone (no f32 weight
  // in the program), and one split otherwise than its weight (ZeRO's). Those
  // read their part of the weight's source as f32 and cast it.
  std::map<uint32_t, plan::ParameterSource> castFrom;
  for (const plan::CastCopy &c : castCopies_)
    if (c.weight == plan::CastCopy::kFromModel) { // the model's f32 initializer
      plan::ParameterSource &weight = castFrom[c.copy];
      weight = program_->buffers(int(c.copy)).parameter();
      weight.set_initializer(weight.cast_of());
      weight.clear_cast_of();
    } else if (c.splitOtherwise) {
      castFrom[c.copy] = program_->buffers(int(c.weight)).parameter();
    }
  for (int b = 0; b < program_->buffers_size(); ++b) {
    const plan::Buffer &buffer = program_->buffers(b);
    char *at = arena_ + buffer.offset();
    if (buffer.has_constant()) {
      std::memcpy(at, buffer.constant().data(), buffer.constant().size());
      continue;
    }
    auto castSource = castFrom.find(uint32_t(b));
    bool fromModel = castSource != castFrom.end();
    if (!buffer.has_parameter() || buffer.parameter().zeros() ||
        (plan::isCastCopy(buffer) && !fromModel))
      continue;
    const plan::ParameterSource *source = fromModel ? &castSource->second : &buffer.parameter();
    // A sharded parameter: the rank's part, as a slice of the whole.
    plan::ParameterSource part;
    std::vector<int64_t> local(buffer.type().shape().begin(), buffer.type().shape().end());
    std::vector<int64_t> parts = plan::shardParts(buffer, axisSizes_);
    if (buffer.sharding_size() != 0) {
      part = *source;
      std::vector<int64_t> starts = plan::shardStarts(buffer, axisSizes_, coordinates_);
      for (size_t d = 0; d < local.size(); ++d) {
        plan::DimSlice *slice = part.add_slice();
        slice->set_start(starts[d]);
        slice->set_size(local[d]);
      }
      source = &part;
    }
    if (source->has_seeded() && fromModel) { // drawn as f32, cast as it is stored
      plan::TensorType f32 = buffer.type();
      f32.set_dtype(plan::F32);
      std::vector<float> values(size_t(plan::elementCount(f32)));
      fillSeeded(*source, f32, values.data());
      cpu::storeBf16(values.data(), values.size(), at);
      continue;
    }
    if (source->has_seeded()) {
      fillSeeded(*source, buffer.type(), at);
      continue;
    }
    std::string label = "parameter '" + source->initializer() + "': ";
    if (!readerOpen) {
      const std::string &path = modelPath.empty() ? plan_->model() : modelPath;
      if (!reader.open(path, error))
        return false;
      readerOpen = true;
    }
    // A padded parameter's whole is the plan's (the loader checked it holds
    // the model's shape); the reader checks the initializer is the model's.
    if (buffer.sharding_size() != 0 && source->model_shape_size() == 0) {
      // A slice in bounds is not enough: the parts must tile the whole.
      std::vector<int64_t> dims;
      if (!reader.dims(sourceInitializer(*source), dims, error)) {
        error = label + error;
        return false;
      }
      bool tiles = dims.size() == local.size();
      for (size_t d = 0; tiles && d < dims.size(); ++d)
        tiles = dims[d] % parts[d] == 0 && dims[d] / parts[d] == local[d];
      if (!tiles) {
        error = label + "the model's initializer is " + shapeToString(dims) +
                ", not cut into " + shapeToString(parts) + " parts of the plan's " +
                shapeToString(local);
        return false;
      }
    }
    if (fromModel) { // read as f32, cast as it is stored
      plan::TensorType f32 = buffer.type();
      f32.set_dtype(plan::F32);
      std::vector<float> values(size_t(plan::elementCount(f32)));
      if (!reader.read(*source, f32, values.data(), error)) {
        error = label + error;
        return false;
      }
      cpu::storeBf16(values.data(), values.size(), at);
      continue;
    }
    if (!reader.read(*source, buffer.type(), at, error)) {
      error = label + error;
      return false;
    }
  }
  makeCastCopies();
  return true;
}

void Executor::makeCastCopies() {
  for (const plan::CastCopy &c : castCopies_) {
    if (c.weight == plan::CastCopy::kFromModel || c.splitOtherwise)
      continue; // read and cast at load (and on resuming: Trainer::remakeCopiesSplitOtherwise)
    const plan::Buffer &copy = program_->buffers(int(c.copy));
    const auto *from = reinterpret_cast<const float *>(bufferData(c.weight));
    cpu::storeBf16(from, size_t(plan::elementCount(copy.type())), arena_ + copy.offset());
  }
}

int Executor::threads() const { return pool_->threads(); }

int Executor::ranks() const { return int(plan::meshDevices(plan_->mesh())); }

void Executor::enableProfile() {
  profileSeconds_.assign(steps_.size(), 0.0);
  profileHistory_.assign(steps_.size() * kProfileHistory, 0.0f);
  profiledRuns_ = 0;
}

// The members launch nothing (LaunchedLater) and run just before the
// last, which launches them all: their time this run is the batch's. Each
// gets the part its bytes (Cost.bytes, the roofline's measure of a
// bandwidth-bound kernel) are of the batch's, so that `dtc run --profile`
// shows an optimizer's updates per weight, not all on the last.
void Executor::shareBatchTime(size_t last, float *history) {
  uint32_t batch = program_->instructions(int(last)).gpu().batch();
  if (batch < 2 || last + 1 < batch)
    return;
  size_t first = last + 1 - batch;
  double total = 0, bytes = 0;
  for (size_t m = first; m <= last; ++m) {
    total += history[m];
    bytes += std::max(0.0, program_->instructions(int(m)).cost().bytes());
  }
  for (size_t m = first; m <= last; ++m) {
    double part = bytes > 0 ? std::max(0.0, program_->instructions(int(m)).cost().bytes()) / bytes
                            : 1.0 / double(batch);
    double share = total * part;
    profileSeconds_[m] += share - double(history[m]);
    history[m] = float(share);
  }
}

int64_t Executor::segmentOf(size_t instruction) const {
  int64_t segment = 0;
  while (segment < 2 * virtuals_ && instruction >= partEnds_[size_t(segment)])
    ++segment;
  return segment;
}

StepPart Executor::partOfSegment(int64_t segment) const {
  return segment < virtuals_       ? StepPart::Forward
         : segment < 2 * virtuals_ ? StepPart::Backward
                                   : StepPart::Once;
}

std::vector<const plan::Instruction *> Executor::launchedBy(int index) const {
  if (!device_)
    return {&program_->instructions(index)};
  const plan::GpuKernel &gpu = program_->instructions(index).gpu();
  if (gpu.batched())
    return {};
  std::vector<const plan::Instruction *> members;
  for (int i = index + 1 - int(std::max(1u, gpu.batch())); i <= index; ++i)
    members.push_back(&program_->instructions(i));
  return members;
}

std::pair<std::vector<uint32_t>, std::vector<uint32_t>>
Executor::operandsOf(const std::vector<const plan::Instruction *> &members) {
  std::vector<uint32_t> inputs, outputs;
  for (const plan::Instruction *member : members) {
    inputs.insert(inputs.end(), member->inputs().begin(), member->inputs().end());
    outputs.insert(outputs.end(), member->outputs().begin(), member->outputs().end());
  }
  return {inputs, outputs};
}

bool Executor::prepare(const plan::Instruction &inst, StepPart part,
                       const std::vector<bool> &constant, Step &step, std::string &error,
                       bool onHost, bool overlapped, int index) {
  // On a device, a launch batch's last instruction runs the kernel of them
  // all on all their operands (GpuKernel.batch); the others launch nothing.
  std::vector<const plan::Instruction *> members{&inst};
  if (device_ && !onHost && index >= 0) {
    if (inst.gpu().batched()) {
      step.kernel = std::make_unique<LaunchedLater>();
      return true;
    }
    members = launchedBy(index);
  }
  auto [inputs, outputs] = operandsOf(members);
  std::vector<plan::TensorType> inTypes, outTypes;
  std::vector<const void *> constants; // host addresses: a CPU kernel may read them now
  char *base = onHost ? arena_ : kernelArena();
  for (uint32_t id : inputs) {
    inTypes.push_back(program_->buffers(id).type());
    step.inputs.push_back(base + program_->buffers(id).offset());
    constants.push_back(constant[id] ? arena_ + program_->buffers(id).offset() : nullptr);
  }
  for (uint32_t id : outputs) {
    outTypes.push_back(program_->buffers(id).type());
    step.outputs.push_back(base + program_->buffers(id).offset());
  }
  if (members.size() > 1) // the batch's generated kernel; no host kernel runs them
    return (step.kernel = device_->kernelFor(inst, inTypes, outTypes, nullptr,
                                             plan::streamOf(inst, overlapped), error)) !=
           nullptr;
  if (inst.has_collective()) {
    Communicator *group = nullptr;
    const plan::Collective &c = inst.collective();
    if (groups_ && communicates(c) && plan::groupSize(axisSizes_, c) > 1 &&
        !(group = c.has_coordinates() ? groups_->rangeGroup(int(c.mesh_axes(0)),
                                                            c.coordinates().first(),
                                                            c.coordinates().count(), error)
                                      : groups_->group(axesOf(c), error)))
      return false;
    step.kernel = makeCollectiveKernel(inst.collective(), inTypes, outTypes, axisSizes_,
                                       coordinates_, group, error);
  } else if (inst.has_send() || inst.has_recv()) {
    bool send = inst.has_send();
    const plan::Transfer &transfer = send ? inst.send() : inst.recv();
    // To a replicated stage: micro-batch m's peer is replica m mod its count.
    std::vector<int64_t> peers;
    int64_t turns = transfer.has_along() ? std::max<uint32_t>(1, transfer.along().replicas()) : 1;
    for (int64_t m = 0; m < turns; ++m)
      peers.push_back(plan::transferPeer(transfer, axisSizes_, rank_, m));
    int tag = plan::transferTag(int(part), transfer);
    const plan::TensorType &type = send ? inTypes[0] : outTypes[0];
    step.kernel = makeTransferKernel(send, type, peers, rank_, tag,
                                     groups_ ? &groups_->world() : nullptr, error, &microBatch_);
    if (step.kernel && device_ && !onHost)
      step.kernel = device_->transferKernel(send, type, std::move(peers), tag, &microBatch_,
                                            std::move(step.kernel), error);
    return step.kernel != nullptr;
  } else {
    step.kernel = cpu::makeKernel(inst, inTypes, outTypes, error, constants);
  }
  if (step.kernel && device_ && !onHost)
    step.kernel = device_->kernelFor(inst, inTypes, outTypes, std::move(step.kernel),
                                     plan::streamOf(inst, overlapped), error);
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
  inputRowsOnly_[index] = false;
  return true;
}

std::vector<char> &Executor::inputBytes(int index) {
  HostTensor &t = inputs_[index];
  t.type = plan_->inputs(index).type();
  t.bytes.resize(size_t(byteSize(t.type)));
  inputSet_[index] = true;
  inputRowsOnly_[index] = false;
  return t.bytes;
}

std::pair<int64_t, int64_t> Executor::inputRows(int index) const {
  for (const InputCopy &copy : inputCopies_)
    if (copy.input == uint32_t(index))
      return {copy.firstRow, copy.rows};
  const plan::TensorType &whole = plan_->inputs(index).type();
  return {0, whole.shape_size() ? whole.shape(0) : 1};
}

std::vector<char> &Executor::inputRowBytes(int index) {
  HostTensor &t = inputs_[index];
  t.type = plan_->inputs(index).type();
  if (t.type.shape_size())
    t.type.set_shape(0, inputRows(index).second);
  t.bytes.resize(size_t(byteSize(t.type)));
  inputSet_[index] = true;
  inputRowsOnly_[index] = true;
  return t.bytes;
}

void Executor::applyUpdates() { applyUpdatesOf(2 * virtuals_); }

void Executor::applyMicroBatchUpdates(int64_t chunk) { applyUpdatesOf(virtuals_ + chunk); }

void Executor::applyForwardUpdates(int64_t chunk) { applyUpdatesOf(chunk); }

void Executor::zeroAccumulators() {
  std::string error;
  for (const plan::Buffer &buffer : program_->buffers())
    if (buffer.has_parameter() && buffer.parameter().accumulator()) {
      if (!device_)
        std::memset(arena_ + buffer.offset(), 0, size_t(byteSize(buffer.type())));
      else if (!device_->zero(deviceArena_ + buffer.offset(), size_t(byteSize(buffer.type())),
                              error))
        deviceError_ = error;
    }
}

bool Executor::runMicroBatch(std::string &error, bool last) {
  return runRange(0, accumulateEnd_, true, error, -1, last);
}

bool Executor::runStepEnd(std::string &error) {
  bool ok = runRange(accumulateEnd_, steps_.size(), false, error);
  overlappedRan_.assign(overlappedRan_.size(), false);
  return ok;
}

bool Executor::runForward(int64_t microBatch, std::string &error, int64_t chunk) {
  microBatch_ = microBatch;
  int64_t own = microBatch / replicas_; // a replica's micro-batches, counted from 0
  return runRange(chunk ? partEnds_[size_t(chunk) - 1] : 0, partEnds_[size_t(chunk)], true, error,
                  own, own + 1 == microBatches_ / replicas_);
}

bool Executor::runBackward(int64_t microBatch, std::string &error, int64_t chunk) {
  microBatch_ = microBatch;
  int64_t own = microBatch / replicas_;
  size_t part = size_t(virtuals_ + chunk);
  return runRange(partEnds_[part - 1], partEnds_[part], false, error, own,
                  own + 1 == microBatches_ / replicas_);
}

const google::protobuf::RepeatedPtrField<plan::ParameterUpdate> &
Executor::updatesOf(const plan::Plan &plan, const plan::RankProgram &program) {
  return plan.training().pipeline().stages() > 1 || plan.training().has_parameter_servers()
             ? program.updates()
             : plan.training().updates();
}

bool Executor::hasOutput(int index) const {
  return index >= 0 && index < program_->outputs_size() &&
         program_->outputs(index) != plan::kNoBuffer;
}

void Executor::applyUpdatesOf(int64_t segment) {
  const auto &updates = updatesOf(*plan_, *program_);
  for (int u = 0; u < updates.size(); ++u) {
    const plan::ParameterUpdate &update = updates[u];
    if (updateSegment_[size_t(u)] != segment)
      continue;
    char *base = kernelArena();
    const char *from = bufferBytes(base, program_->outputs(int(update.output())));
    const plan::Buffer &to = program_->buffers(int(update.buffer()));
    if (from == base + to.offset()) // written in place by the step
      continue;
    std::string error;
    if (!device_)
      std::memmove(base + to.offset(), from, size_t(byteSize(to.type())));
    else if (!device_->copy(base + to.offset(), from, size_t(byteSize(to.type())), error))
      deviceError_ = error;
  }
}

const char *Executor::bufferBytes(const char *base, uint32_t id) const {
  const plan::Buffer &buffer = program_->buffers(int(id));
  return base + buffer.offset() + (buffer.stash() ? slotShifts_[buffer.stash() - 1] : 0);
}

bool Executor::syncToHost(std::string &error) {
  return !device_ || device_->download(arena_, deviceArena_, arenaBytes_, error);
}

bool Executor::syncToDevice(std::string &error) {
  return !device_ || device_->upload(deviceArena_, arena_, arenaBytes_, error);
}

bool Executor::run(std::string &error) { return runRange(0, steps_.size(), true, error); }

bool Executor::runRange(size_t begin, size_t end, bool copyInputs, std::string &error,
                        int64_t slot, bool lastMicroBatch) {
  if (!deviceError_.empty()) { // a copy between steps failed
    error = deviceError_;
    return false;
  }
  for (int i = 0; i < plan_->inputs_size(); ++i)
    if (!inputSet_[i]) {
      error = "input '" + plan_->inputs(i).name() + "' was not given";
      return false;
    }
  // Inputs are copied in on every run: their bytes may be reused by later
  // values once the inputs are dead.
  for (const InputCopy &copy : inputCopies_) {
    if (!copyInputs)
      break;
    const HostTensor &t = inputs_[copy.input];
    if (copy.starts.empty()) {
      std::memcpy(copy.to, t.bytes.data(), t.bytes.size());
    } else if (inputRowsOnly_[copy.input]) { // the rank's rows: cut the other dims
      std::vector<int64_t> whole = copy.wholeDims, starts = copy.starts;
      whole[0] = copy.rows;
      starts[0] -= copy.firstRow;
      copySlice(t.bytes.data(), whole, starts, copy.sizes, dtypeBytes(t.type.dtype()), copy.to);
    } else {
      copySlice(t.bytes.data(), copy.wholeDims, copy.starts, copy.sizes,
                dtypeBytes(t.type.dtype()), copy.to);
    }
    if (device_ && !device_->upload(deviceArena_ + copy.offset, copy.to, copy.bytes, error))
      return false;
  }
  using Clock = std::chrono::steady_clock;
  bool profiling = !profileSeconds_.empty();
  Clock::time_point last = profiling ? Clock::now() : Clock::time_point();
  float *history = profiling ? profileHistory_.data() +
                                   steps_.size() * size_t(profiledRuns_ % kProfileHistory)
                             : nullptr;
  // A micro-batch's copy of each stash group: its stashed buffers' bytes.
  for (size_t g = 0; g < slotShifts_.size(); ++g) {
    const plan::Stash &stash = program_->stashes(int(g));
    slotShifts_[g] = slot < 0 ? 0 : slot % int64_t(stash.slots()) * stash.bytes();
  }
  auto runOne = [&](size_t i) {
    Step &step = steps_[i];
    for (const Step::Stashed &s : step.stashedInputs)
      step.inputs[s.operand] = s.base + slotShifts_[s.group];
    for (const Step::Stashed &s : step.stashedOutputs)
      step.outputs[s.operand] = s.base + slotShifts_[s.group];
    if (!step.kernel->run(step.inputs.data(), step.outputs.data(), *pool_, error) ||
        (device_ && profiling && !device_->synchronize(error))) {
      error = "instruction " + std::to_string(i) + ": " + error;
      return false;
    }
    if (profiling) {
      Clock::time_point now = Clock::now();
      double seconds = std::chrono::duration<double>(now - last).count();
      profileSeconds_[i] += seconds;
      history[i] = float(seconds);
      last = now;
      if (device_)
        shareBatchTime(i, history);
    }
    return true;
  };
  // A wave's levels in turn, each level's instructions at once (each
  // claimed by the next thread free, the largest first).
  auto runWave = [&](const Wave &wave) {
    for (const std::vector<size_t> &level : wave.levels) {
      if (level.size() == 1) {
        if (!runOne(level[0]))
          return false;
        continue;
      }
      std::atomic<bool> failed{false};
      pool_->runTasks(int64_t(level.size()), [&](int64_t t) {
        Step &step = steps_[level[size_t(t)]];
        if (!step.kernel->run(step.inputs.data(), step.outputs.data(), *pool_,
                              taskErrors_[size_t(t)]))
          failed = true;
      });
      if (failed) { // the first task that said why
        size_t t = 0;
        while (t + 1 < level.size() && taskErrors_[t].empty())
          ++t;
        error = "instruction " + std::to_string(level[t]) + ": " + taskErrors_[t];
        for (std::string &e : taskErrors_)
          e.clear();
        return false;
      }
    }
    return true;
  };
  // Each instruction, followed in the last micro-batch by the
  // once-per-step reductions it lets start (RankProgram.overlapped); the
  // once-per-step part skips those that have run. Profiled, each alone.
  for (size_t i = begin; i < end; ++i) {
    if (int w = waveAt_[i]; w >= 0 && !profiling && waves_[size_t(w)].end <= end) {
      if (!runWave(waves_[size_t(w)]))
        return false;
      i = waves_[size_t(w)].end - 1;
      continue;
    }
    if (!overlappedRan_[i] && !runOne(i))
      return false;
    if (lastMicroBatch)
      for (size_t o : overlappedAfter_[i]) {
        if (!runOne(o))
          return false;
        overlappedRan_[o] = true;
      }
  }
  profiledRuns_ += profiling && end == steps_.size(); // a micro-batched step's last part
  // A device's kernels may still run: the part ends when they have.
  return !device_ || device_->synchronize(error);
}

std::vector<double> Executor::profileMedianSeconds() const {
  size_t runs = size_t(std::min(profiledRuns_, kProfileHistory));
  std::vector<double> medians(profileSeconds_.size(), 0.0);
  std::vector<float> times(runs);
  for (size_t i = 0; runs && i < medians.size(); ++i) {
    for (size_t r = 0; r < runs; ++r)
      times[r] = profileHistory_[r * steps_.size() + i];
    std::nth_element(times.begin(), times.begin() + long(runs / 2), times.end());
    medians[i] = times[runs / 2];
  }
  return medians;
}

HostTensor Executor::output(int index) const {
  HostTensor t;
  t.name = plan_->outputs(index).name();
  if (!hasOutput(index)) // another pipeline stage's
    return t;
  const plan::Buffer &buffer = program_->buffers(program_->outputs(index));
  t.type = buffer.type();
  const char *at = bufferBytes(kernelArena(), program_->outputs(index));
  if (!device_) {
    t.bytes.assign(at, at + byteSize(buffer.type()));
    return t;
  }
  t.bytes.resize(size_t(byteSize(buffer.type())));
  std::string error;
  if (!device_->download(t.bytes.data(), at, t.bytes.size(), error)) {
    std::fill(t.bytes.begin(), t.bytes.end(), 0);
    if (deviceError_.empty())
      deviceError_ = "output '" + t.name + "': " + error;
  }
  return t;
}

} // namespace dtc::runtime
