//===- Kernels.h - CPU kernels for plan instructions ------------*- C++ -*-===//
//
// One kernel per plan instruction kind (plan.proto's Instruction.op). A kernel
// is prepared once from the instruction and its buffer types, where it checks
// dtypes and shapes and precomputes what it can (broadcast strides, GEMM
// shapes); running it then only reads and writes memory.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CPU_KERNELS_H
#define DTC_RUNTIME_CPU_KERNELS_H

#include "plan.pb.h"

#include <memory>
#include <string>
#include <vector>

namespace dtc::runtime::cpu {

class ThreadPool;

/// A prepared instruction. `inputs[i]` and `outputs[i]` point at dense,
/// row-major buffers of the types the kernel was prepared with.
class Kernel {
public:
  virtual ~Kernel() = default;
  /// Returns false with `error` set only for data-dependent failures (an
  /// out-of-range gather index); everything else was checked in makeKernel.
  virtual bool run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
                   std::string &error) = 0;
  /// Whether run() may go on while another kernel's runs on another
  /// thread: its state its own (its members, thread_local scratch), no
  /// library's shared state (a oneDNN stream, OpenBLAS's threads), no other
  /// rank waited for. The executor then runs it beside instructions it
  /// does not depend on (runtime/InstructionWaves.h).
  virtual bool runsAlongsideOthers() const { return false; }
};

/// Prepares the kernel for `inst` over buffers of the given types; on an
/// unsupported dtype or inconsistent shapes returns null with `error` saying
/// what is wrong (without the instruction index: the caller adds it).
/// `constantInputs[i]`, when given and not null, holds input i's bytes,
/// which stay as they are for the kernel's life (parameters, constants):
/// the kernel may prepare them once (reorder weights into a blocked layout)
/// and then ignore what run() is given for that input.
std::unique_ptr<Kernel> makeKernel(const plan::Instruction &inst,
                                   const std::vector<plan::TensorType> &inputTypes,
                                   const std::vector<plan::TensorType> &outputTypes,
                                   std::string &error,
                                   const std::vector<const void *> &constantInputs = {});

} // namespace dtc::runtime::cpu

#endif // DTC_RUNTIME_CPU_KERNELS_H
