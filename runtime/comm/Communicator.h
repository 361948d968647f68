//===- Communicator.h - collectives over a group of ranks -------*- C++ -*-===//
//
// The one interface the runtime calls to move data between ranks, whatever
// carries it (MPI on CPU, later NCCL on GPU). A plan's collective on a mesh
// group becomes one call here; the group itself comes from MeshGroups.
//
// Every call is collective over the group (except send and recv) and must be
// made by every rank of the group in the same order with matching counts.
// Failures are returned, never aborted on: a rank that fails a collective
// alone leaves the others waiting, so callers stop the whole job on error.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_COMM_COMMUNICATOR_H
#define DTC_RUNTIME_COMM_COMMUNICATOR_H

#include "plan/DType.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

namespace dtc::runtime {

enum class Reduction { Sum, Max, Min };

/// "sum", "max", "min" for messages.
const char *reductionName(Reduction reduction);

/// Collectives over a group of ranks. Buffers are host memory; counts are
/// elements of the given dtype. Reductions support every integer and float
/// dtype (f16 and bf16 are reduced in float and rounded back, to nearest
/// even); bool supports max (or) and min (and). Data movement supports every
/// dtype. Every call returns false and sets `error` (a sentence naming the
/// operation, the group and the transport's own message) instead of aborting.
class Communicator {
public:
  virtual ~Communicator();

  /// This rank within the group, in [0, size()).
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// The group's name in messages ("world", "mesh 2x2 axes {0}").
  const std::string &name() const { return name_; }
  void setName(std::string name) { name_ = std::move(name); }

  /// Reduces `count` elements over the group, in place.
  virtual bool allReduce(void *data, int64_t count, plan::DType dtype, Reduction reduction,
                         std::string &error) = 0;
  /// `recv` (size() * countPerRank elements) is the ranks' `send` blocks in
  /// rank order.
  virtual bool allGather(const void *send, void *recv, int64_t countPerRank, plan::DType dtype,
                         std::string &error) = 0;
  /// `send` holds size() blocks of countPerRank elements; rank r receives
  /// block r reduced over the group.
  virtual bool reduceScatter(const void *send, void *recv, int64_t countPerRank,
                             plan::DType dtype, Reduction reduction, std::string &error) = 0;
  /// Block p of `send` goes to rank p, where it becomes block `rank()` of
  /// `recv`; both hold size() * countPerRank elements.
  virtual bool allToAll(const void *send, void *recv, int64_t countPerRank, plan::DType dtype,
                        std::string &error) = 0;
  /// Copies `root`'s `count` elements to every rank's `data`.
  virtual bool broadcast(void *data, int64_t count, plan::DType dtype, int root,
                         std::string &error) = 0;
  /// Point to point. A send is buffered: it copies `data` and returns
  /// without waiting for the receive (so no order of sends and receives
  /// between stages deadlocks); completeSends waits until every send so far
  /// was received. A recv blocks, and must ask for exactly the bytes its
  /// matching send sent; anything else is an error. Messages between a pair
  /// of ranks with one tag arrive in order. Tags from 0 to 32767 but
  /// kReservedTag, which collectives may use for their own messages.
  virtual bool send(const void *data, int64_t bytes, int peer, int tag, std::string &error) = 0;
  virtual bool recv(void *data, int64_t bytes, int peer, int tag, std::string &error) = 0;
  virtual bool completeSends(std::string &error) = 0;
  /// A recv from whichever rank's message with `tag` comes first; `source`
  /// says whose (a parameter server takes asynchronous pushes so).
  virtual bool recvAny(void *data, int64_t bytes, int tag, int &source, std::string &error) = 0;
  static constexpr int kReservedTag = 32767;
  virtual bool barrier(std::string &error) = 0;

  /// The sub-group of the ranks that pass the same `color` (>= 0), ranked by
  /// `key` (ties broken by rank in this group), as MPI_Comm_split.
  virtual std::unique_ptr<Communicator> split(int color, int key, std::string &error) = 0;

  /// What this rank sent through this group so far, by operation
  /// ("all_reduce", "send", ...): calls and bytes on the wire as the ring
  /// algorithms move them (an all-reduce of B bytes over p ranks sends
  /// 2 (p - 1) / p B; a reduce-scatter, all-gather or all-to-all of B a rank
  /// (p - 1) B; a broadcast B; a send its bytes), for dtc run --profile.
  struct Traffic {
    int64_t calls = 0;
    double bytes = 0;
  };
  const std::map<std::string, Traffic> &traffic() const { return traffic_; }

protected:
  void tally(const char *operation, double bytes) {
    Traffic &t = traffic_[operation];
    ++t.calls;
    t.bytes += bytes;
  }

private:
  std::string name_;
  std::map<std::string, Traffic> traffic_;
};

} // namespace dtc::runtime

#endif // DTC_RUNTIME_COMM_COMMUNICATOR_H
