//===- Overlap.h - once-per-step reductions run during the backward -*- C++ -*-===//
//
// A micro-batched step reduces each accumulated gradient over its
// data-parallel group once per step, after the last micro-batch. The
// reduction of a gradient the backward finishes early (the last layer's)
// can run as soon as the last micro-batch has summed it: in place in its
// accumulator, which nothing touches from then to the once-per-step part.
// The compiler lists such reductions (RankProgram.overlapped); the runtime
// and the simulator run them in the last micro-batch, right after the
// instruction that finished the sum, and the loader checks that moving
// them there changes nothing.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLAN_OVERLAP_H
#define DTC_PLAN_OVERLAP_H

#include "plan.pb.h"

#include <string>
#include <vector>

namespace dtc::plan {

/// Why `overlapped` cannot run early in `program`, or "".
std::string overlapProblem(const RankProgram &program, const OverlappedInstruction &overlapped);

/// The first of `program.overlapped()` that cannot run early (or is
/// listed twice), with why; "" when all can.
std::string overlappedProblem(const RankProgram &program);

/// The once-per-step all-reduces of accumulators that can run early, each
/// after the instruction that last writes its accumulator, in program
/// order of the once-per-step part.
std::vector<OverlappedInstruction> overlappableReductions(const RankProgram &program);

} // namespace dtc::plan

#endif // DTC_PLAN_OVERLAP_H
