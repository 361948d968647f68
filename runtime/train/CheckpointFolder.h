//===- CheckpointFolder.h - what a checkpoint folder holds -----*- C++ -*-===//
//
// `dtc checkpoint inspect DIR`: every checkpoint file in a folder (each
// rank's last and previous), read and verified (checksums, framing,
// version), and the step a resume of the whole set would start from.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_TRAIN_CHECKPOINTFOLDER_H
#define DTC_RUNTIME_TRAIN_CHECKPOINTFOLDER_H

#include <cstdint>
#include <string>
#include <vector>

namespace dtc::runtime::train {

/// One file of the folder, as a resume would read it.
struct CheckpointFile {
  std::string name;          // checkpoint.rank-2.dtck, checkpoint.dtck.previous, ...
  int64_t rank = 0;          // from the name
  bool previous = false;     // FILE.previous: the one the last write replaced
  int64_t bytes = 0;         // on disk
  bool valid = false;        // read and verified
  std::string problem;       // why not, when not valid
  // When valid:
  int64_t step = 0, tensors = 0;
  std::vector<int64_t> mesh;
  std::string planDigest, dtcVersion;
};

struct CheckpointFolder {
  std::string dir;
  int64_t ranks = 0;            // ranks the files are of (the names say)
  std::vector<CheckpointFile> files; // rank by rank, last before previous
  /// The newest step every rank holds a valid file of (its last or its
  /// previous): where a resume of all ranks starts; -1 when none.
  int64_t resumableStep = -1;
  /// Every file valid.
  bool allValid() const;
};

/// Reads every checkpoint file in `dir`; false with `error` when `dir` is
/// not a readable folder or holds no checkpoint file, or holds files of
/// both a single-rank and a several-rank run.
bool inspectCheckpointFolder(const std::string &dir, CheckpointFolder &folder,
                             std::string &error);

/// The folder for people: a line per file (step, tensors, size, the dtc
/// that wrote it, verified or what is wrong), then where a resume starts.
std::string checkpointFolderText(const CheckpointFolder &folder);

} // namespace dtc::runtime::train

#endif // DTC_RUNTIME_TRAIN_CHECKPOINTFOLDER_H
