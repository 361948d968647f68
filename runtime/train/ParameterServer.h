//===- ParameterServer.h - workers and servers of a --sync ps plan -*- C++ -*-===//
//
// A plan compiled with --sync ps (compiler/ParameterServer.cpp) runs on the
// mesh's ranks, the workers, and on Training.parameter_servers.servers more
// ranks, the servers. A worker's step computes its gradients only; it then
// pushes each server the gradients of that server's tensors (one message)
// and pulls their new weights back into its parameters (one message). A
// server holds its tensors' weights and optimizer state: synchronous
// (staleness 0), it sums every worker's push in rank order and runs its
// update once a step, so the step equals the all-reduce plan's; with
// staleness S > 0 it updates with each push as it comes (scaled by the
// worker count: the worker's gradient is its part of the batch's mean) and
// holds the reply to a worker that is more than S steps ahead of the
// slowest (stale synchronous parallel, Ho et al. 2013). Messages go over
// the job's world Communicator, so another backend's takes them over.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_TRAIN_PARAMETERSERVER_H
#define DTC_RUNTIME_TRAIN_PARAMETERSERVER_H

#include "runtime/Executor.h"
#include "runtime/comm/Communicator.h"
#include "runtime/train/Trainer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtc::runtime::train {

/// Message tags of pushes and pulls (below the Communicator's reserved one,
/// above any pipeline transfer's).
constexpr int kPushTag = 32000;
constexpr int kPullTag = 32001;
constexpr int kPushRowsTag = 32002;

// A push is two messages: a header (the worker's 0-based step, then per
// tensor the rows sent, -1 for all of it) and the tensors: each whole, or,
// where fewer than half its bytes are in nonzero rows (an embedding's
// gradient: the rows of the tokens seen), those rows' indices (int64) and
// then the rows. The server adds them into its zeroed buffer: the same sum.

/// A worker's side.
class ServerClient {
public:
  /// The tensors `executor`'s program pushes and pulls (nothing for a plan
  /// without parameter servers); `world` holds every rank of the job.
  bool prepare(const plan::Plan &plan, Executor &executor, Communicator *world,
               std::string &error);
  bool enabled() const { return !servers_.empty(); }
  /// After 0-based `step`'s program ran: pushes its gradients, pulls the
  /// weights (waiting for the servers' update, or under staleness for the
  /// slowest worker).
  bool exchange(Executor &executor, int64_t step, std::string &error);
  /// Bytes a step pushes (and pulls), whole.
  int64_t bytesPerStep() const { return bytes_; }
  /// Bytes pushed so far, and what whole pushes would have been.
  int64_t bytesPushed() const { return pushed_; }
  int64_t bytesWhole() const { return whole_; }
  int64_t servers() const { return int64_t(servers_.size()); }

private:
  struct Piece {
    uint32_t buffer; // the worker's buffer id
    int64_t offset;  // in it (a row block of a tensor cut over servers)
    int64_t bytes;
    int64_t rowBytes = 0; // a gradient sent by rows where sparse; 0: always whole
  };
  struct Server {
    int rank;
    std::vector<Piece> gradients, weights; // in plan order
    std::vector<int64_t> header;
    std::vector<char> push, pull;
  };
  Communicator *world_ = nullptr;
  std::vector<Server> servers_;
  int64_t bytes_ = 0, pushed_ = 0, whole_ = 0;
};

/// Every rank of a parameter-server job learns whether each can start (a
/// worker's missing data): all stop together, the rank at fault saying why,
/// rather than the servers waiting for pushes that never come. `ready`:
/// this rank's; false with `error` (the rank at fault's own, or naming it).
bool agreeToStart(Communicator &everyone, bool ready, std::string &error);

/// After a resume, every rank's step (-1: this rank could not resume):
/// `agreed` the lowest (the step every rank has a file of, a server falling
/// back to its previous one); false with `error` when a rank could not.
bool agreeOnResumedStep(Communicator &everyone, int64_t step, int64_t &agreed,
                        std::string &error);

/// A server rank's run: updates until every worker has pushed
/// `options.steps` steps. Synchronous servers checkpoint with the workers
/// (their weights and optimizer state, a file a server) and resume from
/// them.
bool runServer(const plan::Plan &plan, Executor &executor, Communicator &world,
               const TrainOptions &options, const Trainer::Progress &progress,
               std::string &error);

} // namespace dtc::runtime::train

#endif // DTC_RUNTIME_TRAIN_PARAMETERSERVER_H
