//===- TrainCommand.h - dtc run on a training plan --------------*- C++ -*-===//
#ifndef DTC_TOOLS_DTC_TRAINCOMMAND_H
#define DTC_TOOLS_DTC_TRAINCOMMAND_H

#include "runtime/Executor.h"
#include "runtime/comm/Communicator.h"
#include "runtime/train/Trainer.h"

namespace dtc::cli {

using TrainRunOptions = runtime::train::TrainOptions;

/// Trains with `plan` (a training plan) on `executor` (runtime/train/
/// Trainer.h), printing one line per step; a usage error for a missing
/// --data or --steps. Returns the exit status. `world`: the mesh's ranks;
/// `everyone`: the job's (a parameter-server plan's servers too).
int runTraining(const plan::Plan &plan, runtime::Executor &executor,
                const TrainRunOptions &options, runtime::Communicator *world = nullptr,
                runtime::Communicator *everyone = nullptr);

} // namespace dtc::cli

#endif // DTC_TOOLS_DTC_TRAINCOMMAND_H
