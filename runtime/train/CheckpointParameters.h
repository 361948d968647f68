//===- CheckpointParameters.h - what a rank's checkpoint holds ---*- C++ -*-===//
//
// A rank checkpoints its program's parameters (weights, optimizer state,
// batch norms' statistics; not gradient accumulators, which are zero
// between steps), each with where its part lies in the whole tensor. dtc
// run's steps, federated rounds, parameter servers and dtc checkpoint
// convert take them from here.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_TRAIN_CHECKPOINTPARAMETERS_H
#define DTC_RUNTIME_TRAIN_CHECKPOINTPARAMETERS_H

#include "runtime/Executor.h"
#include "runtime/train/Checkpoint.h"

#include <cstdint>
#include <vector>

namespace dtc::runtime::train {

/// The buffer ids of `program`'s checkpointed parameters, in buffer order.
std::vector<uint32_t> checkpointedParameters(const plan::RankProgram &program);

/// Adds each of `ids` to `state`: name, type, part (for the rank at
/// `coordinates` of a mesh of `axisSizes`) and its bytes in `executor`.
void addParameters(CheckpointState &state, const plan::RankProgram &program,
                   const std::vector<uint32_t> &ids, Executor &executor,
                   const std::vector<int64_t> &axisSizes,
                   const std::vector<int64_t> &coordinates);

} // namespace dtc::runtime::train

#endif // DTC_RUNTIME_TRAIN_CHECKPOINTPARAMETERS_H
