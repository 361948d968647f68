//===- RankLauncher.h - dtc run on several ranks ----------------*- C++ -*-===//
//
// A plan for several ranks runs one process per rank over MPI. Started by
// hand, `dtc run` re-executes itself under mpirun, one process per rank of
// the plan's mesh; started by mpirun or srun (on a cluster), it joins the
// job as one rank (runtime/comm/RankJob.h). A single-rank plan run by hand
// never starts MPI.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_TOOLS_DTC_RANKLAUNCHER_H
#define DTC_TOOLS_DTC_RANKLAUNCHER_H

#include "tools/dtc/Commands.h"

#include <cstdint>

namespace dtc::cli {

/// Replaces this process with `mpirun -n RANKS --oversubscribe --bind-to
/// none DTC ARGS` (ARGS: dtc's arguments after its name, without -n), so
/// that mpirun's exit status is dtc's (the ranks bind themselves: see
/// runtime::RankJob::bindToCores). Returns only when it cannot (no
/// mpirun on PATH, exec failed), with 1 after printing why.
int relaunchUnderMpirun(int64_t ranks, const Args &args);

/// Runs `mpirun -n RANKS ... DTC ARGS` as a child and waits for it: its
/// exit status, or -1 with `error` when it could not run.
int runUnderMpirun(int64_t ranks, const Args &args, std::string &error);

} // namespace dtc::cli

#endif // DTC_TOOLS_DTC_RANKLAUNCHER_H
