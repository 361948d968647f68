//===- Reshard.h - a checkpoint read under another split ---------*- C++ -*-===//
//
// A checkpoint written by one plan resumes under another plan of the same
// model (dp=4 to dp=2 x tp=2, ZeRO-3, pipelined, one device): every rank's
// file records where its part of each tensor lies in the whole tensor
// (Checkpoint.h: TensorPart), so each rank of the new plan takes, file by
// file, the pieces of its own parts that each file holds.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_TRAIN_RESHARD_H
#define DTC_RUNTIME_TRAIN_RESHARD_H

#include "runtime/train/Checkpoint.h"

#include <functional>
#include <string>
#include <vector>

namespace dtc::runtime::train {

/// A tensor part this rank needs, and where its bytes go.
/// Where the rank at `coordinates` holds its part of `buffer` in the whole
/// tensor (empty for a whole one).
TensorPart partOfBuffer(const plan::Buffer &buffer, const std::vector<int64_t> &axisSizes,
                        const std::vector<int64_t> &coordinates);

struct WantedPart {
  std::string name;
  plan::TensorType type; // the part's
  TensorPart part;       // where it lies in the whole (empty: whole)
  char *into = nullptr;  // type's bytes
  // A padded parameter's (ParameterSource.model_shape): a checkpoint of
  // this shape, from before the padding, is padded with zeros.
  std::vector<int64_t> modelShape;
};

/// What a converted resume read.
struct Resharded {
  int64_t step = 0;
  uint64_t seed = 0;
  int64_t skippedSteps = 0;     // of `step`, skipped for non-finite gradients
  int64_t files = 0;            // the checkpoint's ranks
  std::vector<int64_t> mesh;    // the mesh that wrote it
};

/// Fills every wanted part from the checkpoint in `dir` at the newest step
/// all its ranks hold (each rank's last file, or its previous one), reading
/// one file at a time; false with `error` when the folder holds no such
/// step, a tensor is missing, its whole shape or dtype differs (another
/// model), or the files do not cover a wanted part. Two whole shapes may
/// differ by padding: a checkpoint tensor of the wanted part's modelShape
/// is padded with zeros, and a padded one (each dim at least the plan's)
/// is cropped when all it crops away is zero.
///
/// `step` (not -1) asks for that step rather than the newest, and
/// `fromRank`, where given, names the ranks whose files hold what is wanted
/// (the others' are not read).
bool readResharded(const std::string &dir, std::vector<WantedPart> &wanted, Resharded &read,
                   std::string &error, int64_t step = -1,
                   const std::function<bool(int64_t)> &fromRank = nullptr);

} // namespace dtc::runtime::train

#endif // DTC_RUNTIME_TRAIN_RESHARD_H
