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

/// Runs `mpirun -n RANKS --oversubscribe --bind-to none DTC ARGS` (ARGS:
/// dtc's arguments after its name, without -n) and waits for it: the job's
/// exit status becomes dtc's (the ranks bind themselves: see
/// runtime::RankJob::bindToCores), or 1 after printing why it could not
/// start (no mpirun on PATH, exec failed).
int relaunchUnderMpirun(int64_t ranks, const Args &args);

/// `dtc run --max-restarts N`: runs the plan's ranks (under mpirun, or dtc
/// itself for one rank) and, when the run ends abnormally (a rank killed or
/// crashed, MPI's abort), starts them all again with --resume from the last
/// checkpoint the run wrote in `checkpoint`, up to `maxRestarts` times,
/// saying each restart on stderr. An error every rank agrees on (bad input,
/// a non-finite loss) is not restarted: it would fail again.
int runWithRestarts(int64_t ranks, const Args &args, int maxRestarts,
                    const std::string &checkpoint);

/// Runs `mpirun -n RANKS ... DTC ARGS` as a child and waits for it: its
/// exit status, or -1 with `error` when it could not run.
int runUnderMpirun(int64_t ranks, const Args &args, std::string &error);

} // namespace dtc::cli

#endif // DTC_TOOLS_DTC_RANKLAUNCHER_H
