//===- Device.h - where a rank's arena and kernels live ---------*- C++ -*-===//
//
// The Executor runs a rank's program on the CPU by itself; given a Device
// (the CUDA backend's: runtime/cuda/CudaDevice.h) it keeps a second copy of
// the arena there and runs the instructions' kernels on it. The host arena
// stays the place where parameters are read, the load-time prologue runs
// and inputs are assembled; the Executor moves bytes between the two
// through this interface. A device kernel is a cpu::Kernel whose run()
// gets device addresses (and may return before the work is done: the
// Executor synchronizes at the end of each part of a step).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_DEVICE_H
#define DTC_RUNTIME_DEVICE_H

#include "plan.pb.h"
#include "plan/Streams.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dtc::runtime {

namespace cpu {
class Kernel;
} // namespace cpu

class MeshGroups;

class Device {
public:
  virtual ~Device() = default;

  /// What the device is, for messages ("NVIDIA H100 80GB HBM3 (sm_90)").
  virtual std::string name() const = 0;

  /// The rank's arena of `bytes` on the device; null with a message giving
  /// the bytes needed and the device's free memory when it has too little.
  virtual char *allocate(size_t bytes, std::string &error) = 0;
  virtual bool upload(char *to, const void *from, size_t bytes, std::string &error) = 0;
  virtual bool download(void *to, const char *from, size_t bytes, std::string &error) = 0;
  /// Device to device (regions may overlap).
  virtual bool copy(char *to, const char *from, size_t bytes, std::string &error) = 0;
  virtual bool zero(char *at, size_t bytes, std::string &error) = 0;
  /// Waits for the work queued so far; false with the first error a kernel hit.
  virtual bool synchronize(std::string &error) = 0;
  /// Called before the kernels are destroyed: work still in flight (a
  /// failed step's) is abandoned or finished, so that freeing the kernels'
  /// memory does not wait on a peer that will never come.
  virtual void release() {}

  /// The plan the device runs instructions of (its GPU modules), before
  /// any kernelFor; false with a message when it cannot load them.
  virtual bool load(const plan::Plan &plan, std::string &error) = 0;

  /// Connects the device to the mesh's other ranks' for the collectives
  /// over `groups` (each a sorted list of mesh axes, the same list in the
  /// same order on every rank: a collective call of them all).
  virtual bool connect(MeshGroups &mesh, const std::vector<std::vector<int>> &groups,
                       std::string &error) = 0;

  /// The kernel running `inst` on the device: its own (a generated kernel,
  /// a library call) or, where it has none, `host` (the CPU backend's
  /// kernel of `inst`) run on copies of its operands brought to the host
  /// and back. `stream`: where plan/Streams.h puts it (the device's
  /// communication runs on that stream where it has one, ordered against
  /// the rest by the bytes each touches). Null with a message when
  /// neither can run.
  virtual std::unique_ptr<cpu::Kernel>
  kernelFor(const plan::Instruction &inst, const std::vector<plan::TensorType> &inputs,
            const std::vector<plan::TensorType> &outputs, std::unique_ptr<cpu::Kernel> host,
            plan::Stream stream, std::string &error) = 0;

  /// A pipeline transfer: a send of a `type` tensor (its input) or a
  /// receive of one (its output), micro-batch m's peer peers[m mod size]
  /// (m read from `microBatch`), meeting the peer's on `tag` as MPI's
  /// messages of one tag do (plan::transferTag). Through the device's own
  /// transport where it has one, else `host` (MPI) on host copies. Null
  /// with a message when neither can run.
  virtual std::unique_ptr<cpu::Kernel>
  transferKernel(bool send, const plan::TensorType &type, std::vector<int64_t> peers, int tag,
                 const int64_t *microBatch, std::unique_ptr<cpu::Kernel> host,
                 std::string &error) = 0;

  /// Connects the transfers transferKernel made to their peers', once the
  /// rank's every kernel is made (each rank with transfers calls it).
  virtual bool connectTransfers(std::string &error) = 0;

  /// Whether the device runs collectives on streams of their own, beside
  /// the compute (after connect): then the once-per-step reductions that
  /// can overlap the last backward do, in a pipeline stage too.
  virtual bool communicationStreams() const = 0;

  /// How many instructions run on the host for want of a device kernel, by
  /// kind ("conv2d 3, top_k 1"); empty when none.
  virtual std::string hostStagedSummary() const = 0;

  /// Which libraries' kernels ran what, where a choice was made ("attention
  /// on cuDNN 2, on dtc's flash kernels 0"); empty when there was none.
  virtual std::string kernelSummary() const { return {}; }
};

} // namespace dtc::runtime

#endif // DTC_RUNTIME_DEVICE_H
