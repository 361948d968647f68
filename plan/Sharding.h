//===- Sharding.h - a rank's part of a tensor split over the mesh -*- C++ -*-===//
//
// A plan splits parameters and inputs over the device mesh (Buffer.sharding)
// and runs collectives among the ranks along some mesh axes
// (Collective.mesh_axes). Both number the parts row-major over the axes in
// the order the plan lists them; these helpers turn that into sizes, part
// indices and slices for the plan loader's checks and the executor. Axes
// must be in range (the loader checks them first).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLAN_SHARDING_H
#define DTC_PLAN_SHARDING_H

#include "plan.pb.h"

#include <cstdint>
#include <vector>

namespace dtc::plan {

using MeshAxes = google::protobuf::RepeatedField<uint32_t>;

/// The mesh's axis sizes, in order.
std::vector<int64_t> meshAxisSizes(const plan::Mesh &mesh);

/// The rank count of the mesh (the product of its axis sizes).
int64_t meshDevices(const plan::Mesh &mesh);

/// How many ranks lie along `axes` (the product of their sizes).
int64_t groupSize(const std::vector<int64_t> &axisSizes, const MeshAxes &axes);

/// How many ranks a collective's group has: along its axes, or the
/// coordinates it names (Collective.coordinates).
int64_t groupSize(const std::vector<int64_t> &axisSizes, const plan::Collective &collective);

/// The row-major index of `coordinates` restricted to `axes`, in the order
/// listed: a rank's part along a sharded dim, or its rank in a plan's group.
int64_t indexAlong(const std::vector<int64_t> &coordinates,
                   const std::vector<int64_t> &axisSizes, const MeshAxes &axes);

/// How many parts each dim of `buffer` is split into (1 for a whole dim).
std::vector<int64_t> shardParts(const plan::Buffer &buffer,
                                const std::vector<int64_t> &axisSizes);

/// Where the part of `buffer` held by the rank at `coordinates` starts in
/// the whole tensor, per dim (the buffer's type is the part's).
std::vector<int64_t> shardStarts(const plan::Buffer &buffer,
                                 const std::vector<int64_t> &axisSizes,
                                 const std::vector<int64_t> &coordinates);

} // namespace dtc::plan

#endif // DTC_PLAN_SHARDING_H
