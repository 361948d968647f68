//===- Federated.h - federated averaging over client ranks ------*- C++ -*-===//
//
// Runs a plan compiled with --sync federated (compiler/LocalSgd.cpp): each
// rank along the plan's data axis is a client with a data set of its own
// (DIR/0, DIR/1, ...: the same layout as dtc run --data, one folder per
// client, of any sizes and label mixes) and a replica of the weights. A
// round: the clients chosen for it (all, or --clients-per-round K drawn
// from the seed and the round, the same on every rank) train
// --local-epochs E over their own data from the global model, each at its
// own step count (the step shares nothing between clients); then the
// weights become the mean of the chosen clients' weights weighted by their
// sample counts (McMahan et al. 2017, FedAvg), on every client. A client
// whose update is lost (it dropped out) weighs 0 that round; if every
// chosen client is lost, the global model stays as it was.
//
// With secure aggregation's masking (--secure-aggregation) each client's
// weighted weights travel as 64-bit fixed point plus pairwise masks that
// cancel in the sum (Bonawitz et al. 2017, without its key agreement and
// secret sharing: the masks come from a seed every client knows, so this
// shows the protocol's arithmetic, not its privacy): no single client's
// values are in the clear on the wire. The server is the all-reduce: every
// client learns only the sum.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_TRAIN_FEDERATED_H
#define DTC_RUNTIME_TRAIN_FEDERATED_H

#include "runtime/Executor.h"
#include "runtime/comm/Communicator.h"
#include "runtime/train/Trainer.h"

#include <cstdint>
#include <functional>
#include <string>

namespace dtc::runtime::train {

/// Trains; false with `error` saying why it stopped. `progress` gets a
/// line per round ("round 3 loss 0.41 ..."). `options`: data (DIR, DIR/<client> for each client), rounds,
/// localEpochs, clientsPerRound (0: all), seed, shuffle,
/// secureAggregation, checkpoint / checkpointEvery (rounds) / resume,
/// exportPath, modelPath, and lostUpdates: (client, round) pairs whose
/// update is lost, as if the client had dropped out after training
/// (fault injection for tests); steps is unused.
bool runFederated(const plan::Plan &plan, Executor &executor, Communicator *world,
                  const TrainOptions &options,
                  const std::function<void(const std::string &)> &progress, std::string &error);

/// The clients chosen for 1-based `round`: `perRound` of `clients` (all when
/// 0 or more), drawn from (seed, round), in increasing order.
std::vector<int64_t> clientsOfRound(int64_t clients, int64_t perRound, uint64_t seed,
                                    int64_t round);

} // namespace dtc::runtime::train

#endif // DTC_RUNTIME_TRAIN_FEDERATED_H
