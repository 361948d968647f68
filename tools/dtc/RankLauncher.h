//===- RankLauncher.h - dtc run on several ranks ----------------*- C++ -*-===//
//
// A plan for several ranks runs one process per rank over MPI. Started by
// hand, `dtc run` re-executes itself under mpirun, one process per rank of
// the plan's mesh; started by mpirun or srun (on a cluster), it joins the
// job as one rank. A single-rank plan run by hand never starts MPI.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_TOOLS_DTC_RANKLAUNCHER_H
#define DTC_TOOLS_DTC_RANKLAUNCHER_H

#include "tools/dtc/Commands.h"

#include "runtime/comm/MeshGroups.h"
#include "runtime/comm/MpiCommunicator.h"

#include "plan.pb.h"

#include <memory>

namespace dtc::cli {

/// Replaces this process with `mpirun -n RANKS --oversubscribe --bind-to
/// none DTC ARGS` (ARGS: dtc's arguments after its name, without -n), so
/// that mpirun's exit status is dtc's (the ranks bind themselves: see
/// RankJob::bindToCores). Returns only when it cannot (no
/// mpirun on PATH, exec failed), with 1 after printing why.
int relaunchUnderMpirun(int64_t ranks, const Args &args);

/// Runs `mpirun -n RANKS ... DTC ARGS` as a child and waits for it: its
/// exit status, or -1 with `error` when it could not run.
int runUnderMpirun(int64_t ranks, const Args &args, std::string &error);

/// Binds this process (and the threads it starts later) to `threads` cores
/// of its own, rank `nodeRank` of the `nodeSize` ranks on its machine taking
/// the cores after those of the ranks before it, when nobody bound it (it
/// may run on every core) and they all fit on its cores; otherwise leaves
/// the OS to place it. Returns a line saying which.
std::string bindToCores(int nodeRank, int nodeSize, int threads);

/// This process as one rank of a job that mpirun or srun started: MPI, the
/// world and the groups of the plan's mesh.
class RankJob {
public:
  /// Joins the job; null after printing why not (MPI does not start, the
  /// job's size is not the plan's device count, named by `planPath`).
  static std::unique_ptr<RankJob> join(const plan::Plan &plan, const std::string &planPath);
  ~RankJob();

  int rank() const { return world_->rank(); }
  int size() const { return world_->size(); }
  runtime::Communicator &world() { return *world_; }
  runtime::MeshGroups &groups() { return *groups_; }
  /// Threads per rank when none are asked for: the machine's cores shared
  /// by the job's ranks on it.
  int defaultThreads() const;

  /// cli::bindToCores for this rank among the job's ranks on its machine.
  std::string bindToCores(int threads);

  /// Ends the job with `status` when it is not 0 and other ranks may be
  /// waiting for this one in a collective (MPI_Abort); else returns it.
  int finish(int status);

private:
  RankJob() = default;
  std::unique_ptr<runtime::MpiSession> session_;
  std::unique_ptr<runtime::Communicator> world_;
  std::unique_ptr<runtime::MeshGroups> groups_;
  int nodeRank_ = 0, nodeSize_ = 1; // this rank among the job's ranks on its machine
};

} // namespace dtc::cli

#endif // DTC_TOOLS_DTC_RANKLAUNCHER_H
