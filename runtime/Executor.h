//===- Executor.h - running one rank's program on the CPU -------*- C++ -*-===//
//
// An Executor owns a rank's arena: it reads the rank's parameters once
// (only its part of sharded ones), prepares a kernel per instruction, and
// then runs the program as many times as asked, inputs in and outputs out.
// Several ranks run in processes of their own, one Executor each, their
// collectives meeting through the mesh's communicators.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_EXECUTOR_H
#define DTC_RUNTIME_EXECUTOR_H

#include "runtime/Device.h"
#include "runtime/InstructionWaves.h"
#include "runtime/TensorIO.h"
#include "plan/CastCopies.h"
#include "plan/DType.h"

#include "plan.pb.h"

#include <memory>
#include <string>
#include <vector>

namespace dtc::runtime {

namespace cpu {
class Kernel;
class ThreadPool;
} // namespace cpu

class MeshGroups;

/// The parts of a training step's program. Without micro-batches the whole
/// program is one Backward part; with them (plan.training.micro_batches),
/// [0, accumulate_end) is the Backward part, run once per micro-batch; in a
/// pipeline stage's program [0, forward_end) is its Forward part and
/// [forward_end, accumulate_end) its Backward part (an interleaved stage
/// has one of each per virtual stage: RankProgram.part_ends). The rest
/// runs Once per step; the Prologue once at load. Each part's sends and
/// receives are a stream of their own on each channel
/// (plan::transferTag: stages interleave micro-batches' parts differently,
/// each part in micro-batch order).
enum class StepPart { Prologue, Forward, Backward, Once };

class Executor {
public:
  ~Executor();

  /// Prepares rank `rank` (row-major over the mesh) of a validated `plan`;
  /// parameters are read from `modelPath` (the plan's own `model` when
  /// empty). `threads` <= 0: one per core. `groups`: the mesh's
  /// communicators, this process being rank `rank` of them; null when no
  /// other rank runs, where a collective among more than this rank is an
  /// error. With groups, every rank of the mesh must call create (it makes
  /// the groups its collectives use, a collective call of its own).
  /// `device`: run the instructions there (Device.h), the CPU otherwise.
  static std::unique_ptr<Executor> create(const plan::Plan &plan, int rank,
                                          const std::string &modelPath, int threads,
                                          std::string &error, MeshGroups *groups = nullptr,
                                          std::unique_ptr<Device> device = nullptr);

  /// Sets graph input `index` to the whole tensor (of the plan's input
  /// type), of which the rank takes its part when the program shards it;
  /// false with an error naming the input, the expected and the given type
  /// when they differ.
  bool setInput(int index, const HostTensor &tensor, std::string &error);

  /// Graph input `index`'s bytes, sized to its whole type, to be filled in
  /// place; marks the input as set.
  std::vector<char> &inputBytes(int index);

  /// The rows of graph input `index`'s dim 0 that this rank holds, as
  /// (first, count): its block when the program splits dim 0, else all.
  std::pair<int64_t, int64_t> inputRows(int index) const;
  /// Graph input `index`'s bytes for inputRows(index) only (the other dims
  /// whole), to be filled in place: a data-parallel rank reads only its
  /// part of each batch. Marks the input as set.
  std::vector<char> &inputRowBytes(int index);

  /// Runs the program once; every input must have been set.
  bool run(std::string &error);

  /// A training step's end: copies each updated value (plan.training
  /// updates) into its parameter.
  void applyUpdates();

  // A micro-batched training step (plan.training.micro_batches > 1):
  // zeroAccumulators, then per micro-batch its inputs and
  // runMicroBatch + applyMicroBatchUpdates, then runStepEnd + applyUpdates.

  /// Zeroes the gradient accumulators (parameters marked `accumulator`).
  void zeroAccumulators();
  /// The instructions run once per micro-batch, on the inputs as set now;
  /// `last`: the step's last micro-batch, which also runs the once-per-step
  /// reductions that overlap it (RankProgram.overlapped).
  bool runMicroBatch(std::string &error, bool last = false);
  /// The updates the per-micro-batch part makes (the accumulations, batch
  /// norms' running statistics), copied into their parameters.
  void applyMicroBatchUpdates(int64_t chunk = 0);
  /// The instructions run once per step, after the last micro-batch.
  bool runStepEnd(std::string &error);

  // A pipeline stage (plan.training.pipeline): zeroAccumulators, then per
  // micro-batch, in the order plan::pipelineOrder gives the stage,
  // runForward (on the inputs as set now) + applyForwardUpdates and later
  // runBackward + applyMicroBatchUpdates; then runStepEnd, the world's
  // completeSends, and applyUpdates. What the backward reads of the
  // forward (stashed buffers) is kept in the micro-batch's stash slot.
  // An interleaved stage runs each of its virtual stages' (`chunk`'s)
  // forward and backward parts likewise.
  bool pipelined() const { return pipelined_; }
  bool runForward(int64_t microBatch, std::string &error, int64_t chunk = 0);
  bool runBackward(int64_t microBatch, std::string &error, int64_t chunk = 0);
  /// The updates the forward part makes (batch norms' running statistics),
  /// copied into their parameters before the next micro-batch's forward.
  void applyForwardUpdates(int64_t chunk = 0);

  /// The updates this rank's program makes: its own in a pipeline stage's
  /// program, else the plan's.
  static const google::protobuf::RepeatedPtrField<plan::ParameterUpdate> &
  updatesOf(const plan::Plan &plan, const plan::RankProgram &program);
  /// Whether this rank's program computes graph output `index` (a pipeline
  /// stage computes some).
  bool hasOutput(int index) const;

  /// The mesh's communicators (null when this process runs alone).
  MeshGroups *meshGroups() const { return groups_; }
  /// The program this rank runs.
  const plan::RankProgram &program() const { return *program_; }

  /// The bytes of buffer `id` of the rank's program (parameters, for
  /// checkpoints), in the host arena: with a device, call syncToHost first
  /// to read them and syncToDevice after writing them.
  char *bufferData(uint32_t id) { return arena_ + program_->buffers(int(id)).offset(); }
  /// Makes each bf16 copy of a weight (plan/CastCopies.h) from its weight,
  /// in the host arena: after weights are set there other than by a step
  /// (read at load, restored on resuming), before syncToDevice. A copy
  /// split otherwise than its weight is left to the caller, who has its
  /// values (castCopies(): read at load from the model; Trainer on resuming).
  void makeCastCopies();
  /// The program's bf16 copies of weights, as the loader paired them.
  const std::vector<plan::CastCopy> &castCopies() const { return castCopies_; }
  /// The device's arena copied into the host's (a no-op without a device).
  bool syncToHost(std::string &error);
  /// The host's arena copied to the device (a no-op without a device).
  bool syncToDevice(std::string &error);
  /// The device the program runs on; null on the CPU.
  Device *device() const { return device_.get(); }
  /// The first failure of a copy to or from the device outside run()
  /// (output(), the updates, the accumulators); empty when none.
  const std::string &deviceError() const { return deviceError_; }

  /// Measure each instruction's time on later runs (adds two clock reads per
  /// instruction).
  void enableProfile();
  /// Seconds spent in each instruction over all profiled runs.
  const std::vector<double> &profileSeconds() const { return profileSeconds_; }
  int profiledRuns() const { return profiledRuns_; }
  /// Each instruction's median time over the last kProfileHistory profiled
  /// runs (robust to a slow first run or a preempted one).
  std::vector<double> profileMedianSeconds() const;
  /// How many instructions run side by side with others when not profiled
  /// (InstructionWaves.h); profiled, each runs alone.
  size_t instructionsSideBySide() const;
  static constexpr int kProfileHistory = 64;

  /// Graph output `index` of the last run (of a pipeline stage: of the
  /// micro-batch it last ran a part of): the rank's buffer (whole when the
  /// plan replicates the output, as it does graph outputs and the loss).
  /// Empty (no type, no bytes) when another stage computes it (hasOutput).
  HostTensor output(int index) const;

  int threads() const;
  /// The plan's rank count (its mesh's devices).
  int ranks() const;

private:
  Executor() = default;
  int rank_ = 0; // in the plan's mesh, row-major

  /// A prepared instruction and its buffers' addresses (slot 0's for
  /// stashed buffers: stashedInputs/Outputs list which, moved by the slot).
  struct Step {
    std::unique_ptr<cpu::Kernel> kernel;
    std::vector<const void *> inputs;
    std::vector<void *> outputs;
    struct Stashed {
      size_t operand;
      char *base; // copy 0's bytes
      size_t group;
    };
    std::vector<Stashed> stashedInputs, stashedOutputs;
  };
  /// `onHost`: a CPU kernel on the host arena even with a device (the
  /// prologue, run once at load before the arena goes to the device).
  /// `overlapped`: one of RankProgram.overlapped, run early where it can.
  /// `index`: the instruction's in the program (-1 for the prologue's).
  bool prepare(const plan::Instruction &inst, StepPart part, const std::vector<bool> &constant,
               Step &step, std::string &error, bool onHost = false, bool overlapped = false,
               int index = -1);
  /// The instructions step `index`'s kernel runs: on a device, a launch
  /// batch's last instruction runs them all (GpuKernel.batch) and the
  /// others (batched) none; otherwise the instruction itself.
  std::vector<const plan::Instruction *> launchedBy(int index) const;
  /// Their inputs in order, then their outputs: the kernel's operands.
  static std::pair<std::vector<uint32_t>, std::vector<uint32_t>>
  operandsOf(const std::vector<const plan::Instruction *> &members);
  /// An instruction's segment of the step: virtual stage k's forward part
  /// is k, its backward (or the per-micro-batch) part V + k, the
  /// once-per-step part 2V; and the kind of part a segment is.
  int64_t segmentOf(size_t instruction) const;
  StepPart partOfSegment(int64_t segment) const;
  /// Fills the arena, reads parameters, prepares the kernels.
  bool load(const std::string &modelPath, int threads, std::string &error);
  bool readParameters(const std::string &modelPath, std::string &error);
  /// Runs instructions [begin, end); with `copyInputs`, copies the inputs in first.
  bool runRange(size_t begin, size_t end, bool copyInputs, std::string &error,
                int64_t slot = -1, bool last = false);
  /// Copies the updates made in `segment` into their parameters.
  void applyUpdatesOf(int64_t segment);
  /// Where buffer `id`'s bytes are now in the arena at `base` (the host's
  /// or the device's): a stashed one's in the slot of the micro-batch last run.
  const char *bufferBytes(const char *base, uint32_t id) const;
  /// The arena the kernels run on: the device's, or the host's.
  char *kernelArena() const { return deviceArena_ ? deviceArena_ : arena_; }

  /// Where a graph input goes: one of its buffers, which takes all of it or
  /// (sharded) the rank's part of `sizes` at `starts`.
  struct InputCopy {
    uint32_t input;
    char *to;
    size_t offset, bytes; // the buffer's place in the arena (for the device's copy)
    std::vector<int64_t> wholeDims, starts, sizes; // empty: all of it
    int64_t firstRow = 0, rows = 0;                // the rank's rows of dim 0
  };

  const plan::Plan *plan_ = nullptr;
  const plan::RankProgram *program_ = nullptr;
  MeshGroups *groups_ = nullptr;
  std::vector<int64_t> axisSizes_;   // the mesh's
  std::vector<int64_t> coordinates_; // this rank's on the mesh
  std::unique_ptr<cpu::ThreadPool> pool_;
  char *arena_ = nullptr;
  size_t arenaBytes_ = 0;
  std::unique_ptr<Device> device_;
  char *deviceArena_ = nullptr; // owned by device_
  // A device copy's failure outside a run (updates, outputs), said by the
  // next run and by deviceError().
  mutable std::string deviceError_;
  std::vector<Step> steps_;
  std::vector<HostTensor> inputs_;   // whole
  std::vector<InputCopy> inputCopies_;
  std::vector<bool> inputSet_;
  std::vector<bool> inputRowsOnly_; // set by inputRowBytes: holds the rank's rows only
  size_t accumulateEnd_ = 0;           // instructions before it run per micro-batch
  std::vector<size_t> partEnds_;       // a pipeline stage's: where its parts end (2V)
  int64_t virtuals_ = 1;               // virtual stages
  bool pipelined_ = false;
  std::vector<int64_t> slotShifts_;    // per stash group: bytes to the last micro-batch's copy
  std::vector<int64_t> updateSegment_; // per update (updatesOf): the segment that makes it
  std::vector<plan::CastCopy> castCopies_;
  // RankProgram.overlapped: per instruction, the once-per-step ones run
  // right after it in the last micro-batch; and which of those have run
  // this step (the once-per-step part skips them).
  std::vector<std::vector<size_t>> overlappedAfter_;
  /// Small independent instructions run side by side (InstructionWaves.h),
  /// on the CPU with threads: the wave starting at each instruction (-1:
  /// none), and each task's error.
  std::vector<Wave> waves_;
  std::vector<int> waveAt_;
  std::vector<std::string> taskErrors_;
  /// Finds the waves of the prepared program.
  void findWavesOfProgram();
  std::vector<bool> overlappedRan_;
  int64_t microBatches_ = 1;
  /// A replicated pipeline stage's replica count (Pipeline.replicas): it
  /// runs every replicas_-th micro-batch, its own counted from 0 for the
  /// stash and for "the last".
  int64_t replicas_ = 1;
  /// The micro-batch (of the step) running now: a replicated stage's peer
  /// is the replica that runs it.
  int64_t microBatch_ = 0;
  std::vector<double> profileSeconds_; // empty unless profiling
  std::vector<float> profileHistory_;  // kProfileHistory runs of every instruction, a ring
  /// A launch batch's time, measured on the instruction that launches it
  /// (its last), shared among its members by the bytes each moves.
  void shareBatchTime(size_t last, float *history);
  int profiledRuns_ = 0;
};


} // namespace dtc::runtime

#endif // DTC_RUNTIME_EXECUTOR_H
