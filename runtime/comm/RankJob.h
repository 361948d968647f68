//===- RankJob.h - this process as one rank of a plan's job -----*- C++ -*-===//
//
// A plan for several ranks runs one process per rank over MPI, started by
// mpirun or srun (or by `dtc run`, which re-executes itself under mpirun:
// tools/dtc/RankLauncher.h). Each process joins the job here: MPI, the
// world, the groups of the plan's mesh, and where on its machine it runs.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_COMM_RANKJOB_H
#define DTC_RUNTIME_COMM_RANKJOB_H

#include "runtime/comm/MeshGroups.h"
#include "runtime/comm/MpiCommunicator.h"

#include "plan.pb.h"

#include <memory>
#include <string>
#include <vector>

namespace dtc::runtime {

/// Binds this process (and the threads it starts later) to `threads` cores
/// of its own, rank `nodeRank` of the `nodeSize` ranks on its machine taking
/// the cores after those of the ranks before it, when nobody bound it (it
/// may run on every core) and they all fit on its cores; otherwise leaves
/// the OS to place it. Returns a line saying which.
std::string bindToCores(int nodeRank, int nodeSize, int threads);

class RankJob {
public:
  /// Joins the job; null with `error` when MPI does not start or the job's
  /// size is not the plan's device count (then only rank 0's `error` says
  /// so, the others' is empty: one message is enough).
  static std::unique_ptr<RankJob> join(const plan::Plan &plan, std::string &error);
  ~RankJob();

  int rank() const { return world_->rank(); }
  int size() const { return world_->size(); }
  /// Every rank of the job.
  Communicator &world() { return *world_; }
  /// The mesh's ranks: the world, or without a plan's parameter servers
  /// (ranks past the mesh) the workers alone.
  Communicator &meshWorld() { return meshWorld_ ? *meshWorld_ : *world_; }
  /// This rank's mesh communicators; null on a parameter server.
  MeshGroups *groups() { return groups_.get(); }
  /// Threads per rank when none are asked for: the machine's cores shared
  /// by the job's ranks on it.
  int defaultThreads() const;

  /// runtime::bindToCores for this rank among the job's ranks on its machine.
  std::string bindToCores(int threads);

  /// Rank 0 speaks for the job: outputs and the loss are replicated, so the
  /// other ranks' stdout would only repeat it. Their stderr still shows.
  void quietOtherRanks() const;

  /// Ends this rank's part of the job with `status` and the `errors` it
  /// held back (one text each, as they would have been printed). When every
  /// rank fails (they all find the same bad input), rank 0 prints each
  /// distinct error once, naming the ranks unless all had it, and the job
  /// ends without MPI's abort: the exit status is `status`, or 0 with
  /// `status` written to the file DTC_STATUS_FILE names when dtc started the
  /// ranks (so that mpirun stays quiet and dtc exits with it). When some rank
  /// does not fail (within a few seconds), this one prints its own errors,
  /// its rank first, and ends the job (MPI_Abort): the others may be
  /// waiting for it in a collective.
  int finish(int status, const std::vector<std::string> &errors = {});

  /// The environment variable naming the file in which rank 0 leaves the
  /// job's status for the dtc that started the ranks.
  static constexpr const char *kStatusFile = "DTC_STATUS_FILE";

private:
  RankJob() = default;
  std::unique_ptr<MpiSession> session_;
  std::unique_ptr<Communicator> world_;
  std::unique_ptr<Communicator> meshWorld_; // with parameter servers
  std::unique_ptr<MeshGroups> groups_;
  int nodeRank_ = 0, nodeSize_ = 1; // this rank among the job's ranks on its machine
};

} // namespace dtc::runtime

#endif // DTC_RUNTIME_COMM_RANKJOB_H
