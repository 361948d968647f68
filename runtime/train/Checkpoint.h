//===- Checkpoint.h - saving and resuming a training run --------*- C++ -*-===//
//
// A checkpoint is one file, DIR/checkpoint.dtck, replaced atomically: a
// crash while writing leaves the previous checkpoint as it was, and reading
// checks everything (framing, version, every tensor's size), so a truncated
// or foreign file is a message, never a crash or a silently short state.
// A run on several ranks writes one file per rank, DIR/checkpoint.rank-R.dtck,
// each with the rank's parts of the parameters and the run's mesh.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_TRAIN_CHECKPOINT_H
#define DTC_RUNTIME_TRAIN_CHECKPOINT_H

#include "plan.pb.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dtc::runtime::train {

/// The checkpoint format this runtime reads and writes.
constexpr uint32_t kCheckpointFormatVersion = 1;

/// The file's name inside the checkpoint folder (a single-rank run's).
constexpr const char *kCheckpointFileName = "checkpoint.dtck";

/// The file rank `rank` of a run on `ranks` ranks writes in the folder:
/// kCheckpointFileName for one rank, checkpoint.rank-R.dtck for several.
std::string checkpointFileName(int64_t rank, int64_t ranks);

struct CheckpointState {
  int64_t step = 0;          // steps completed
  uint64_t seed = 0;         // data shuffling seed
  std::string planDigest;    // identifies the plan it belongs to (caller computes it)
  std::vector<std::pair<std::string, plan::TensorType>> tensorTypes; // names + types, in order
  std::vector<std::vector<char>> tensorBytes; // raw little-endian bytes per tensor
  std::vector<int64_t> mesh; // the run's mesh axis sizes; empty: one rank
  int64_t rank = 0;          // the rank whose parts these are

  /// The run's rank count.
  int64_t ranks() const;
};

/// Writes DIR/checkpoint.dtck (or, with several ranks, the file of
/// state.rank) atomically: to DIR/checkpoint.dtck.tmp, fsync
/// the file, rename over the old one, fsync DIR. Creates DIR if missing. A
/// crash at any point leaves the previous checkpoint intact and valid. false
/// with `error` on any I/O error, or when `state` is inconsistent (a tensor's
/// bytes not its type's size) or too large for one file (2 GiB for now).
bool writeCheckpoint(const std::string &dir, const CheckpointState &state,
                     std::string &error);

/// Reads DIR/checkpoint.dtck into `state` and validates it (framing and
/// length, format version, every tensor's byte size equal to its type's).
/// false with `error` naming the file and what is wrong; `state` is then
/// left as it was.
bool readCheckpoint(const std::string &dir, CheckpointState &state,
                    std::string &error);

/// Reads rank `rank`'s file of a run on `ranks` ranks, as readCheckpoint;
/// the file must say it is that rank's. A missing file's message says what
/// the folder holds instead (another rank count's checkpoint). With
/// `previous`, the rank's file before its last write: with several ranks,
/// writeCheckpoint keeps it (FILE.previous), so that a run stopped while
/// its ranks were writing can resume every rank from the older step.
bool readCheckpoint(const std::string &dir, int64_t rank, int64_t ranks,
                    CheckpointState &state, std::string &error, bool previous = false);

} // namespace dtc::runtime::train

#endif // DTC_RUNTIME_TRAIN_CHECKPOINT_H
