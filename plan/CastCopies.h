//===- CastCopies.h - a bf16 step's copies of its f32 weights ---*- C++ -*-===//
//
// A mixed-precision plan keeps each weight the step reads in bf16 as a
// parameter of its own (ParameterSource.cast_of, compiler/
// KeepBf16Weights.cpp), which the step writes with the weight. The runtime
// makes each copy from its weight wherever it sets weights itself (at load,
// on resuming from a checkpoint); checkpoints and exported models leave the
// copies out. The loader checks the pairs, the runtime takes them from here.
// A bf16 inference plan holds the copies alone (no f32 weights), read and
// cast as the model loads. A copy may be split otherwise than its weight
// (ZeRO: the f32 master split over the data-parallel ranks with the
// optimizer's state, the copy the forward reads whole): the rank then does
// not hold what its copy is made of, and the runtime makes the copy's part
// from where the weight's values come from (the model at load, every
// rank's checkpoint file on resuming).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLAN_CASTCOPIES_H
#define DTC_PLAN_CASTCOPIES_H

#include "plan.pb.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtc::plan {

struct CastCopy {
  uint32_t copy;   // the bf16 buffer
  uint32_t weight; // the f32 parameter it is made from; kFromModel: none
  /// Split otherwise than `weight`: made from the weight's source, not
  /// from this rank's part of it.
  bool splitOtherwise = false;
  /// A bf16 inference plan's copies stand alone: the program holds no f32
  /// weight, and the runtime reads the model's initializer and casts it.
  static constexpr uint32_t kFromModel = UINT32_MAX;
};

/// `program`'s copies, in buffer order, on a mesh of `axisSizes`; false
/// with `error` when a copy's weight is not among the program's parameters
/// (allowed, as kFromModel, where `standalone`: an inference plan's), or is
/// not an f32 tensor of the copy's whole shape, or the copy is not bf16.
bool castCopies(const RankProgram &program, const std::vector<int64_t> &axisSizes,
                bool standalone, std::vector<CastCopy> &copies, std::string &error);

/// Whether buffer `buffer` is such a copy (not a weight of the model).
inline bool isCastCopy(const Buffer &buffer) {
  return buffer.has_parameter() && !buffer.parameter().cast_of().empty();
}

} // namespace dtc::plan

#endif // DTC_PLAN_CASTCOPIES_H
