//===- CollectiveKernel.h - a plan's collective as a kernel -----*- C++ -*-===//
//
// A Collective instruction runs like any kernel of the program, but moves
// data between ranks through a Communicator, so it lives here rather than
// in runtime/cpu (which does not know MPI). Communicators take and give
// parts as contiguous blocks in group-rank order; a collective along a dim
// that is not the leading one, or over axes listed out of order, packs its
// input into that layout and unpacks what it receives, in scratch buffers
// of its own.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_COLLECTIVEKERNEL_H
#define DTC_RUNTIME_COLLECTIVEKERNEL_H

#include "runtime/cpu/Kernels.h"

#include "plan.pb.h"

#include <memory>
#include <string>
#include <vector>

namespace dtc::runtime {

class Communicator;

/// Prepares `collective` (validated by the plan loader) from an `input` to
/// an `output` buffer, on a mesh of `axisSizes`. `group` carries it: the
/// ranks along the collective's mesh axes, ordered row-major over those axes
/// sorted (as MeshGroups makes them); null only when the group is this rank
/// alone, where every collective is a copy.
std::unique_ptr<cpu::Kernel> makeCollectiveKernel(const plan::Collective &collective,
                                                  const plan::TensorType &input,
                                                  const plan::TensorType &output,
                                                  const std::vector<int64_t> &axisSizes,
                                                  Communicator *group, std::string &error);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_COLLECTIVEKERNEL_H
