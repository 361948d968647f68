//===- NcclTransfers.h - pipeline sends and receives over NCCL --*- C++ -*-===//
//
// A pipeline's transfers meet as MPI's messages do: FIFO per pair of
// ranks and tag (plan::transferTag: a part's kind and an interleaved
// channel), sends buffered; the plan loader checks that every rank's
// receives meet their sends under exactly those rules. NCCL's send and
// receive have no tags, and a send does not finish until its receive
// runs. So each (sender, receiver, tag) the rank's program uses gets a
// two-rank communicator of its own (FIFO per pair and tag, as MPI's), and
// a send is buffered on the GPU: the tensor copied into a staging buffer
// on the transfers stream, in the program's order, then sent from there on
// a stream of the communicator's own that nothing waits for (a part of the
// step ends without it). Receives run on the transfers stream, in program
// order, as a rank's MPI receives do. The order the loader checked is then
// the order that runs: no wait that MPI would not have. Communicators are
// made after every kernel, in one order over all ranks (by pair, then
// tag), so no two ranks wait on each other to make them; each pair sends
// one byte as it is made, since NCCL connects a pair at its first send,
// which holds the sender until the receiver comes (two ranks sending each
// other first would wait on each other).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CUDA_NCCLTRANSFERS_H
#define DTC_RUNTIME_CUDA_NCCLTRANSFERS_H

#include "runtime/cuda/CudaKernels.h"

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace dtc::runtime {
class Communicator;
} // namespace dtc::runtime

namespace dtc::runtime::cuda {

class NcclTransfers {
public:
  /// `context`: the transfers stream's (receives and staging copies).
  NcclTransfers(const CudaContext &context, const NcclApi &nccl, int rank)
      : context_(context), nccl_(nccl), rank_(rank) {}
  ~NcclTransfers();

  /// The kernel of a send (its input) or receive (its output) of `bytes`
  /// with `peers` (micro-batch m's is peers[m mod size], m read from
  /// `microBatch`) on `tag`; its communicators come from connect().
  std::unique_ptr<cpu::Kernel> kernel(bool send, size_t bytes, std::vector<int64_t> peers,
                                      int tag, const int64_t *microBatch);

  /// Makes the communicators the kernels use, over `world` (MPI, for
  /// their ids); every rank calls it once its kernels are made.
  bool connect(Communicator &world, std::string &error);

  /// Aborts every communicator (a failed step's sends and receives may
  /// never be met): what the destructor would wait for ends.
  void abort();

  /// Whether any kernel was made.
  bool empty() const { return routes_.empty(); }

  struct Route {
    ncclComm_t comm = nullptr;
    CUstream stream = nullptr; // a send's, after its staging copy
  };
  /// The communicator of (from, to, tag); null before connect().
  const Route *route(int64_t from, int64_t to, int tag) const;

  /// A staging buffer of `bytes` no send still reads; its event is to be
  /// recorded after the send that reads it. 0 with `error` when the GPU
  /// has no memory for one.
  CUdeviceptr staging(size_t bytes, CUevent &sent, std::string &error);

private:
  // (lower rank, higher rank, sender, tag): every rank's order.
  using Key = std::tuple<int64_t, int64_t, int64_t, int>;
  static Key keyOf(int64_t from, int64_t to, int tag) {
    return {std::min(from, to), std::max(from, to), from, tag};
  }
  struct Staging {
    CUdeviceptr at = 0;
    size_t bytes = 0;
    CUevent sent = nullptr;
  };
  const CudaContext &context_;
  const NcclApi &nccl_;
  int rank_;
  std::map<Key, Route> routes_;
  std::vector<Staging> staging_;
};

} // namespace dtc::runtime::cuda

#endif // DTC_RUNTIME_CUDA_NCCLTRANSFERS_H
