//===- Checkpoint.h - saving and resuming a training run --------*- C++ -*-===//
//
// A checkpoint is one file, DIR/checkpoint.dtck, replaced atomically: a
// crash while writing leaves the previous checkpoint as it was, and reading
// checks everything (framing, version, the file's and every tensor's CRC-32C,
// every tensor's size), so a truncated, damaged or foreign file is a
// message, never a crash or a silently wrong state. The file a write
// replaces stays beside it as checkpoint.dtck.previous, to fall back to.
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
constexpr uint32_t kCheckpointFormatVersion = 2;

/// The file's name inside the checkpoint folder (a single-rank run's).
constexpr const char *kCheckpointFileName = "checkpoint.dtck";

/// The file rank `rank` of a run on `ranks` ranks writes in the folder:
/// kCheckpointFileName for one rank, checkpoint.rank-R.dtck for several.
std::string checkpointFileName(int64_t rank, int64_t ranks);

/// What a file name in a checkpoint folder is: a checkpoint file
/// (checkpointFileName's, or FILE.previous), whose rank, whether it is a
/// previous one and whether it is one of several ranks' files; false for
/// any other name (a write's leftover .tmp, a set-aside .damaged).
bool parseCheckpointFileName(const std::string &name, int64_t &rank, bool &previous,
                             bool &perRank);

/// Where a rank's part of a tensor lies in the whole tensor.
struct TensorPart {
  std::vector<int64_t> wholeShape; // empty: the tensor is whole
  std::vector<int64_t> start;      // per dim, with wholeShape
};

struct CheckpointState {
  int64_t step = 0;          // steps completed
  int64_t skippedSteps = 0;  // of them, skipped for non-finite gradients
  int64_t localSteps = 0;    // federated: `step` counts rounds, this the client's steps
  uint64_t seed = 0;         // data shuffling seed
  std::string planDigest;    // identifies the plan it belongs to (caller computes it)
  std::vector<std::pair<std::string, plan::TensorType>> tensorTypes; // names + types, in order
  std::vector<std::vector<char>> tensorBytes; // raw little-endian bytes per tensor
  std::vector<TensorPart> tensorParts; // per tensor, or empty: all whole
  std::vector<int64_t> mesh; // the run's mesh axis sizes; empty: one rank
  int64_t rank = 0;          // the rank whose parts these are
  std::string dtcVersion;    // read: the dtc that wrote it (written: this one's)

  /// The run's rank count.
  int64_t ranks() const;
};

/// Writes DIR/checkpoint.dtck (or, with several ranks, the file of
/// state.rank) atomically: keep the old file as FILE.previous (a hard
/// link), write DIR/checkpoint.dtck.tmp, fsync the file, rename over the
/// old one, fsync DIR. Creates DIR if missing. A
/// crash at any point leaves the previous checkpoint intact and valid. false
/// with `error` on any I/O error, or when `state` is inconsistent (a tensor's
/// bytes not its type's size) or too large for one file (2 GiB for now).
bool writeCheckpoint(const std::string &dir, const CheckpointState &state,
                     std::string &error);

/// FNV-1a over the rank's program and the plan's training section, in hex:
/// a checkpoint belongs to the plan it was written by.
std::string planDigest(const plan::Plan &plan, const plan::RankProgram &program);

/// Reads DIR/checkpoint.dtck into `state` and validates it (framing and
/// length, the file's checksum, format version, every tensor's checksum and
/// byte size equal to its type's).
/// false with `error` naming the file and what is wrong; `state` is then
/// left as it was.
bool readCheckpoint(const std::string &dir, CheckpointState &state,
                    std::string &error);

/// Reads rank `rank`'s file of a run on `ranks` ranks, as readCheckpoint;
/// the file must say it is that rank's. A missing file's message says what
/// the folder holds instead (another rank count's checkpoint). With
/// `previous`, the rank's file before its last write (FILE.previous): the
/// checkpoint to fall back to when the last is damaged, and with several
/// ranks the older step that a run stopped while its ranks were writing
/// resumes every rank from.
bool readCheckpoint(const std::string &dir, int64_t rank, int64_t ranks,
                    CheckpointState &state, std::string &error, bool previous = false);

/// Renames rank `rank`'s damaged last file to FILE.damaged, so that the
/// next write keeps the previous file (the one a resume fell back to) as
/// the previous, and the damaged bytes stay for a look.
bool setAsideDamaged(const std::string &dir, int64_t rank, int64_t ranks, std::string &error);

/// Reads and validates one checkpoint file, whatever its name (dtc
/// checkpoint inspect).
bool readCheckpointFile(const std::string &path, CheckpointState &state, std::string &error);

} // namespace dtc::runtime::train

#endif // DTC_RUNTIME_TRAIN_CHECKPOINT_H
