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
#include <string>
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

/// Makes the bf16 copies split otherwise than their weights (ZeRO's whole
/// copies of split f32 masters, plan/CastCopies.h) on resuming from the
/// checkpoint in `dir` at `step`: the rank does not hold what such a copy
/// is made of, so each reads its part of the weight from the ranks' files
/// and casts it. `sameSplit`: the checkpoint is this plan's, and only the
/// files of the ranks holding the weights' other parts are read (those
/// differing from this rank along the axes a weight is split over); else
/// every file. False with `error` when the files do not hold them.
bool readCopiesSplitOtherwise(const std::string &dir, int64_t step, bool sameSplit,
                              const plan::Plan &plan, Executor &executor, int64_t rank,
                              std::string &error);

} // namespace dtc::runtime::train

#endif // DTC_RUNTIME_TRAIN_CHECKPOINTPARAMETERS_H
