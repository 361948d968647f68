//===- Streams.h - which stream a rank's instruction runs on ----*- C++ -*-===//
//
// A device with streams (a GPU) runs a rank's communication beside its
// compute, as Megatron-LM's runtime does: collectives on one stream, a
// pipeline's sends and receives on another, and the once-per-step gradient
// reductions that overlap the last backward (RankProgram.overlapped) on a
// third, so that a long gradient reduction holds up neither the backward's
// tensor-parallel collectives nor the next stage's activations. The
// simulator (cost/Simulator.cpp) times a plan on these streams and the
// CUDA runtime (runtime/cuda/CudaDevice.cpp) queues its work on them: one
// rule, here, for both.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLAN_STREAMS_H
#define DTC_PLAN_STREAMS_H

#include "plan.pb.h"

namespace dtc::plan {

enum class Stream : int { Compute = 0, Collectives = 1, Transfers = 2, Reductions = 3 };
constexpr int kStreams = 4;

/// Whether `inst` talks to other ranks (a collective other than a local
/// slice, a send, a receive).
bool communicates(const Instruction &inst);

/// The stream `inst` runs on where the device has communication streams;
/// `overlapped`: it is one of RankProgram.overlapped, run early.
Stream streamOf(const Instruction &inst, bool overlapped);

} // namespace dtc::plan

#endif // DTC_PLAN_STREAMS_H
