//===- Trainer.h - a training plan's step over a data set -------*- C++ -*-===//
//
// Runs a training plan's step (compiler/Training.cpp) over a data set:
// fills the model's inputs and the labels from the data, the optimizer's
// per-step scalars from the schedule (each input found by its role in the
// plan), runs the step, checks the loss, then copies the new weights and
// optimizer state into place. Checkpoints hold every parameter (weights and
// optimizer state), the step and the data seed: the data order depends only
// on (seed, step), so a resumed run repeats the uninterrupted one exactly.
// With several ranks, each reads the same batches and feeds its part of
// sharded inputs (the executor cuts it), and each checkpoints its own parts
// of the parameters in a file of its own. `dtc run` is flags and printing
// around this.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_TRAIN_TRAINER_H
#define DTC_RUNTIME_TRAIN_TRAINER_H

#include "runtime/Executor.h"
#include "runtime/comm/Communicator.h"

#include "plan.pb.h"

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>

namespace dtc::runtime::train {

struct TrainOptions {
  std::string data;            // a directory of .npy files, or a token file
  int tokenBytes = 2;          // token files: 2 (uint16) or 4 (uint32)
  int64_t steps = 0;           // train up to this step (resumed runs count from 0)
  uint64_t seed = 0;
  bool shuffle = true;
  std::string checkpoint;      // directory; empty: none
  int64_t checkpointEvery = 0; // steps; 0: only at the end (with a checkpoint directory)
  bool resume = false;
  std::string exportPath;      // the trained model as ONNX (rank 0 writes); empty: none
  std::string modelPath;       // where the plan's parameters came from; empty: the plan's
  std::string logJson;         // one JSON record per step, appended (rank 0); empty: none
  double peakFlops = 0;        // a device's peak FLOP/s, for the step's share of it; 0: not shown
  // Federated averaging (a plan compiled with --sync federated; Federated.h):
  int64_t rounds = 0;
  int64_t localEpochs = 1;
  int64_t clientsPerRound = 0; // 0: all
  bool secureAggregation = false;
  std::set<std::pair<int64_t, int64_t>> lostUpdates; // (client, round)
};

/// The learning rate at 0-based `step`: constant, or a linear warm-up to
/// the peak and then a cosine decay to 0 at total_steps.
double scheduledLearningRate(const plan::Training &training, int64_t step);

class Trainer {
public:
  /// What a run says as it goes, a line at a time ("training: ...",
  /// "step 3 loss 2.1 ..."); the caller prints them. A line that starts
  /// "warning: " is one every rank may say (a damaged checkpoint file of its
  /// own): the caller shows it whichever rank says it.
  using Progress = std::function<void(const std::string &line)>;

  /// `world`: the mesh's ranks when several run the plan, null for one
  /// process; `everyone`: the job's ranks, parameter servers too (the
  /// world when null).
  Trainer(const plan::Plan &plan, Executor &executor, Communicator *world, Progress progress,
          Communicator *everyone = nullptr)
      : plan_(plan), executor_(executor), world_(world), everyone_(everyone ? everyone : world),
        progress_(std::move(progress)) {}

  /// Trains; false with `error` saying why it stopped (bad data, a
  /// checkpoint of another plan, a non-finite loss, ...). What was saved
  /// before an error stays intact.
  bool run(const TrainOptions &options, std::string &error);

private:
  /// A pipeline stage's part of one step: its micro-batches' forward and
  /// backward parts in the schedule's order (`feed(m)` sets micro-batch m's
  /// inputs) and the once-per-step part; `lossSum` is the sum of the
  /// micro-batches' losses, which the last stage computes and every rank
  /// learns.
  bool runPipelinedStep(int64_t step, int64_t microBatches,
                        const std::function<bool(int64_t)> &feed, double &lossSum,
                        std::string &error);
  bool resume(const TrainOptions &options, const std::string &digest,
              const std::vector<uint32_t> &parameters, uint64_t &seed, int64_t &start,
              std::string &error);
  /// resume() from a checkpoint of another split of the model.
  bool resumeConverted(const TrainOptions &options, const std::vector<uint32_t> &parameters,
                       uint64_t &seed, int64_t &start, std::string &error);

  const plan::Plan &plan_;
  Executor &executor_;
  // Steps a resumed run's checkpoint had skipped (--skip-nonfinite): not
  // counted in the optimizer's step count.
  int64_t skippedBefore_ = 0;
  Communicator *world_;
  Communicator *everyone_;
  Progress progress_;
};

} // namespace dtc::runtime::train

#endif // DTC_RUNTIME_TRAIN_TRAINER_H
