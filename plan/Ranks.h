//===- Ranks.h - which program each rank of a plan runs ---------*- C++ -*-===//
//
// A plan lists its programs in `ranks` and, when ranks share programs,
// which one each rank runs in `program_of_rank` (plan.proto). Header-only,
// like DType.h, so that the loader, the executor, the simulator and the
// command line read the rule from one place.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLAN_RANKS_H
#define DTC_PLAN_RANKS_H

#include "plan.pb.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace dtc::plan {

/// How many ranks run the plan: one per entry of program_of_rank, else one
/// per program.
inline int64_t planRanks(const plan::Plan &plan) {
  return plan.program_of_rank_size() ? plan.program_of_rank_size() : plan.ranks_size();
}

/// The index in plan.ranks() of the program `rank` runs (not checked
/// against ranks_size(): PlanLoader checks a loaded plan).
inline int programIndexOfRank(const plan::Plan &plan, int64_t rank) {
  return plan.program_of_rank_size() ? int(plan.program_of_rank(int(rank))) : int(rank);
}

/// "1 rank", "4 ranks": for messages.
/// The rank a send or receive of rank `rank` goes to: the absolute peer,
/// or `rank` with its coordinate on one axis changed (AxisPeer; to a
/// replicated stage, the replica that runs micro-batch `microBatch`). -1
/// when the axis or coordinate is off the mesh.
inline int64_t transferPeer(const plan::Transfer &transfer, const std::vector<int64_t> &axisSizes,
                            int64_t rank, int64_t microBatch = 0) {
  if (!transfer.has_along())
    return transfer.peer();
  const plan::AxisPeer &along = transfer.along();
  int64_t coordinate =
      along.coordinate() + (along.replicas() > 1 ? microBatch % int64_t(along.replicas()) : 0);
  if (along.axis() >= axisSizes.size() || along.coordinate() < 0 ||
      along.coordinate() + std::max<int64_t>(1, along.replicas()) > axisSizes[along.axis()])
    return -1;
  int64_t stride = 1;
  for (size_t a = along.axis() + 1; a < axisSizes.size(); ++a)
    stride *= axisSizes[a];
  int64_t own = rank / stride % axisSizes[along.axis()];
  return rank + (coordinate - own) * stride;
}

/// How a transfer names its peer, for people: "rank 3" or "pp=2".
inline std::string transferPeerText(const plan::Transfer &transfer, const plan::Mesh &mesh) {
  if (!transfer.has_along())
    return "rank " + std::to_string(transfer.peer());
  const plan::AxisPeer &along = transfer.along();
  std::string axis = along.axis() < uint32_t(mesh.axes_size()) ? mesh.axes(int(along.axis())).name()
                                                               : "axis" + std::to_string(along.axis());
  if (along.replicas() > 1)
    return "the rank at " + axis + "=" + std::to_string(along.coordinate()) + ".." +
           std::to_string(along.coordinate() + int64_t(along.replicas()) - 1) +
           " that runs the micro-batch";
  return "the rank at " + axis + "=" + std::to_string(along.coordinate());
}

inline std::string rankCount(int64_t ranks) {
  return std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks");
}

/// "2x4" (a mesh's axis sizes), "1" for none: for messages.
inline std::string meshString(const std::vector<int64_t> &sizes) {
  std::string text;
  for (int64_t size : sizes)
    text += (text.empty() ? "" : "x") + std::to_string(size);
  return text.empty() ? "1" : text;
}

} // namespace dtc::plan

#endif // DTC_PLAN_RANKS_H
