//===- TrainCommand.cpp - dtc run on a training plan ----------------------===//
#include "tools/dtc/TrainCommand.h"

#include "tools/dtc/Commands.h"

#include <fmt/format.h>

#include <cstdio>

namespace dtc::cli {

int runTraining(const plan::Plan &plan, runtime::Executor &executor,
                const TrainRunOptions &options, runtime::Communicator *world) {
  if (options.data.empty())
    return usageError("a training plan needs --data DIR (one .npy per input + labels.npy) "
                      "or --data TOKENS.bin");
  if (options.steps <= 0)
    return usageError("a training plan needs --steps N (N > 0)");
  if (options.resume && options.checkpoint.empty())
    return usageError("--resume needs --checkpoint DIR");
  runtime::train::Trainer trainer(plan, executor, world, [](const std::string &line) {
    fmt::print("{}\n", line);
    std::fflush(stdout);
  });
  std::string error;
  if (!trainer.run(options, error))
    return failure(error);
  return 0;
}

} // namespace dtc::cli
