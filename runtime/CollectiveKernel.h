//===- CollectiveKernel.h - a plan's collective as a kernel -----*- C++ -*-===//
//
// A Collective instruction runs like any kernel of the program, but moves
// data between ranks through a Communicator, so it lives here rather than
// in runtime/cpu (which does not know MPI); an all-slice sends nothing and
// copies this rank's part, so it needs none. Communicators take and give
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

/// Whether `collective` moves data between ranks (an all-slice does not,
/// and needs no communicator).
bool communicates(const plan::Collective &collective);

/// Prepares `collective` (validated by the plan loader) from `inputs` to
/// `outputs` buffers (one each; several: a bucket, sent as one message),
/// on this rank at `coordinates` of a mesh of `axisSizes`. `group` carries
/// it: the ranks along the collective's mesh axes, ordered row-major over
/// those axes sorted (as MeshGroups makes them); null when the group is
/// this rank alone, where every collective is a copy, or when the
/// collective does not communicate.
std::unique_ptr<cpu::Kernel> makeCollectiveKernel(const plan::Collective &collective,
                                                  const std::vector<plan::TensorType> &inputs,
                                                  const std::vector<plan::TensorType> &outputs,
                                                  const std::vector<int64_t> &axisSizes,
                                                  const std::vector<int64_t> &coordinates,
                                                  Communicator *group, std::string &error);

/// A send of a `type` tensor to world rank `peer` (its input) or a receive
/// of one from it (its output), through `world`, on `stream`
/// (plan::transferTag: below 16,400): FIFO per pair of ranks and stream,
/// as MPI orders messages of one tag. A pipeline stage's parts, and an
/// interleaved one's channels, each have a stream (Executor.h: StepPart),
/// since stages interleave their micro-batches' parts differently. Null
/// with `error` when there is no world (one process) or the peer is this
/// rank (`self`).
/// With several `peers` (a replicated stage's replicas), micro-batch m's
/// goes to or comes from peers[m mod peers], m read from `microBatch`.
std::unique_ptr<cpu::Kernel> makeTransferKernel(bool send, const plan::TensorType &type,
                                                std::vector<int64_t> peers, int64_t self,
                                                int stream, Communicator *world,
                                                std::string &error,
                                                const int64_t *microBatch = nullptr);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_COLLECTIVEKERNEL_H
