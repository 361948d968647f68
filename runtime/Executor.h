//===- Executor.h - running one rank's program on the CPU -------*- C++ -*-===//
//
// An Executor owns a rank's arena: it reads the rank's parameters once,
// prepares a kernel per instruction, and then runs the program as many
// times as asked, inputs in and outputs out.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_EXECUTOR_H
#define DTC_RUNTIME_EXECUTOR_H

#include "runtime/TensorIO.h"
#include "runtime/plan/DType.h"

#include "plan.pb.h"

#include <memory>
#include <string>
#include <vector>

namespace dtc::runtime {

namespace cpu {
class Kernel;
class ThreadPool;
} // namespace cpu

class Executor {
public:
  ~Executor();

  /// Prepares rank `rank` of a validated `plan`; parameters are read from
  /// `modelPath` (the plan's own `model` when empty). `threads` <= 0: one per
  /// core.
  static std::unique_ptr<Executor> create(const plan::Plan &plan, int rank,
                                          const std::string &modelPath, int threads,
                                          std::string &error);

  /// Sets graph input `index`; false with an error naming the input, the
  /// expected and the given type when they differ.
  bool setInput(int index, const HostTensor &tensor, std::string &error);

  /// Graph input `index`'s bytes, sized to its type, to be filled in place
  /// (training batches); marks the input as set.
  std::vector<char> &inputBytes(int index);

  /// Runs the program once; every input must have been set.
  bool run(std::string &error);

  /// A training step's end: copies each updated value (plan.training
  /// updates) into its parameter.
  void applyUpdates();

  /// The bytes of buffer `id` of the rank's program (parameters, for
  /// checkpoints).
  char *bufferData(uint32_t id) { return arena_ + program_->buffers(int(id)).offset(); }

  /// Measure each instruction's time on later runs (adds two clock reads per
  /// instruction).
  void enableProfile();
  /// Seconds spent in each instruction over all profiled runs.
  const std::vector<double> &profileSeconds() const { return profileSeconds_; }
  int profiledRuns() const { return profiledRuns_; }

  /// Graph output `index` of the last run.
  HostTensor output(int index) const;

  int threads() const;

private:
  Executor() = default;

  /// A prepared instruction and its buffers' addresses.
  struct Step {
    std::unique_ptr<cpu::Kernel> kernel;
    std::vector<const void *> inputs;
    std::vector<void *> outputs;
  };
  bool prepare(const plan::Instruction &inst, const std::vector<bool> &constant, Step &step,
               std::string &error);

  const plan::Plan *plan_ = nullptr;
  const plan::RankProgram *program_ = nullptr;
  std::unique_ptr<cpu::ThreadPool> pool_;
  char *arena_ = nullptr;
  std::vector<Step> steps_;
  std::vector<HostTensor> inputs_;
  std::vector<bool> inputSet_;
  std::vector<double> profileSeconds_; // empty unless profiling
  int profiledRuns_ = 0;
};

/// "f32[2,3]" for messages.
std::string typeToString(const plan::TensorType &type);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_EXECUTOR_H
