//===- TrainCommand.cpp - dtc run on a training plan ----------------------===//
#include "tools/dtc/TrainCommand.h"

#include "tools/dtc/Commands.h"

#include "runtime/train/Federated.h"
#include "runtime/train/ParameterServer.h"
#include "plan/Sharding.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sys/ioctl.h>
#include <unistd.h>

namespace dtc::cli {

int runTraining(const plan::Plan &plan, runtime::Executor &executor,
                const TrainRunOptions &options, runtime::Communicator *world,
                runtime::Communicator *everyone) {
  if (options.data.empty())
    return usageError("a training plan needs --data DIR (one .npy per input + labels.npy) "
                      "or --data TOKENS.bin");
  bool federated = plan.training().sync() == "federated";
  if (federated && options.rounds <= 0)
    return usageError("a federated plan (--sync federated) trains in rounds: give --rounds N");
  if (!federated && (options.rounds > 0 || options.clientsPerRound > 0 ||
                     options.secureAggregation || !options.lostUpdates.empty()))
    return usageError("--rounds, --clients-per-round, --secure-aggregation and --lose-update "
                      "are for a plan compiled with --sync federated");
  if (federated && options.steps > 0)
    return usageError("a federated plan runs --rounds N, not --steps");
  if (options.steps <= 0 && !federated)
    return usageError("a training plan needs --steps N (N > 0)");
  if (options.resume && options.checkpoint.empty())
    return usageError("--resume needs --checkpoint DIR");
  bool servers = plan.training().has_parameter_servers();
  if (servers && !options.checkpoint.empty() && plan.training().parameter_servers().staleness() > 0)
    return usageError("--checkpoint with asynchronous parameter servers (--staleness) is not "
                      "built yet: the servers' states are of no one step");
  // On a terminal each step's line replaces the last one (other lines stay);
  // piped or in a file (CI logs), a line per step. Ranks under mpirun write
  // to a pseudo-terminal whatever mpirun's own output is: a line per step.
  bool terminal = !world && isatty(fileno(stdout));
  bool open = false; // a step's line waits for its newline
  auto say = [&](const std::string &line) {
    bool step = line.rfind("step ", 0) == 0 || line.rfind("round ", 0) == 0;
    if (line.rfind("warning: ", 0) == 0) { // stderr: every rank's shows
      fmt::print(stderr, "{}{}\n", open ? "\n" : "", line);
      open = false;
      return;
    }
    if (terminal && step) {
      // A bar of the run done so far (its step or round of all), then the line.
      int64_t done = std::strtoll(line.c_str() + line.find(' ') + 1, nullptr, 10);
      int64_t all = std::max<int64_t>(1, federated ? options.rounds : options.steps);
      constexpr int kWidth = 24;
      int filled = int(std::clamp<int64_t>(done * kWidth / all, 0, kWidth));
      // The time spent and left (the line's last part) first: a narrow
      // terminal cuts the end.
      size_t last = line.rfind("; ");
      std::string shown =
          last == std::string::npos ? line : line.substr(last + 2) + " | " + line.substr(0, last);
      std::string text = fmt::format("[{}{}] {:3d}% {}", std::string(size_t(filled), '#'),
                                     std::string(size_t(kWidth - filled), '.'),
                                     int(std::clamp<int64_t>(done * 100 / all, 0, 100)), shown);
      // Cut to the terminal's width: a wrapped line would not be replaced.
      struct winsize size {};
      if (ioctl(fileno(stdout), TIOCGWINSZ, &size) == 0 && size.ws_col > 1 &&
          text.size() >= size.ws_col)
        text.resize(size_t(size.ws_col) - 1);
      fmt::print("\r\033[K{}", text);
    } else {
      fmt::print("{}{}\n", open ? "\n" : "", line);
    }
    open = terminal && step;
    std::fflush(stdout);
  };
  runtime::train::Trainer trainer(plan, executor, world, say, everyone);
  std::string error;
  bool ran = false;
  if (servers && everyone && everyone->rank() >= plan::meshDevices(plan.mesh())) {
    ran = runtime::train::runServer(plan, executor, *everyone, options, say, error);
  } else if (federated) {
    ran = runtime::train::runFederated(plan, executor, world, options, say, error);
  } else {
    ran = trainer.run(options, error);
  }
  if (open)
    fmt::print("\n");
  if (!ran)
    return failure(error);
  return 0;
}

} // namespace dtc::cli
