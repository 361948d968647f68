//===- TrainCommand.h - dtc run on a training plan --------------*- C++ -*-===//
#ifndef DTC_TOOLS_DTC_TRAINCOMMAND_H
#define DTC_TOOLS_DTC_TRAINCOMMAND_H

#include "runtime/Executor.h"
#include "runtime/comm/Communicator.h"

#include <string>

namespace dtc::cli {

struct TrainRunOptions {
  std::string data;            // a directory of .npy files, or a token file
  int tokenBytes = 2;          // token files: 2 (uint16) or 4 (uint32)
  int64_t steps = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  std::string checkpoint;      // directory; empty: none
  int64_t checkpointEvery = 0; // steps; 0 with a checkpoint dir: only at the end
  bool resume = false;
  std::string exportPath;      // the trained model as ONNX (rank 0's weights); empty: none
  std::string modelPath;       // where the plan's parameters came from (--model), or empty
};

/// Trains with `plan` (a training plan) on `executor`; prints one line per
/// step. `world`: the job's ranks when several run (each reads the same
/// batches and feeds its part; each checkpoints its own parameters), null
/// for one process. Returns the exit status.
int runTraining(const plan::Plan &plan, runtime::Executor &executor,
                const TrainRunOptions &options, runtime::Communicator *world = nullptr);

} // namespace dtc::cli

#endif // DTC_TOOLS_DTC_TRAINCOMMAND_H
