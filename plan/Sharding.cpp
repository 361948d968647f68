//===- Sharding.cpp -------------------------------------------------------===//
#include "plan/Sharding.h"

namespace dtc::plan {

std::vector<int64_t> meshAxisSizes(const plan::Mesh &mesh) {
  std::vector<int64_t> sizes;
  for (const plan::MeshAxis &axis : mesh.axes())
    sizes.push_back(axis.size());
  return sizes;
}

int64_t meshDevices(const plan::Mesh &mesh) {
  int64_t devices = 1;
  for (const plan::MeshAxis &axis : mesh.axes())
    devices *= axis.size();
  return devices;
}

int64_t groupSize(const std::vector<int64_t> &axisSizes, const MeshAxes &axes) {
  int64_t size = 1;
  for (uint32_t axis : axes)
    size *= axisSizes[axis];
  return size;
}

int64_t groupSize(const std::vector<int64_t> &axisSizes, const plan::Collective &collective) {
  if (collective.has_coordinates())
    return collective.coordinates().count();
  return groupSize(axisSizes, collective.mesh_axes());
}

int64_t indexAlong(const std::vector<int64_t> &coordinates,
                   const std::vector<int64_t> &axisSizes, const MeshAxes &axes) {
  int64_t index = 0;
  for (uint32_t axis : axes)
    index = index * axisSizes[axis] + coordinates[axis];
  return index;
}

std::vector<int64_t> shardParts(const plan::Buffer &buffer,
                                const std::vector<int64_t> &axisSizes) {
  std::vector<int64_t> parts(size_t(buffer.type().shape_size()), 1);
  for (int d = 0; d < buffer.sharding_size() && d < buffer.type().shape_size(); ++d)
    parts[size_t(d)] = groupSize(axisSizes, buffer.sharding(d).mesh_axes());
  return parts;
}

std::vector<int64_t> shardStarts(const plan::Buffer &buffer,
                                 const std::vector<int64_t> &axisSizes,
                                 const std::vector<int64_t> &coordinates) {
  std::vector<int64_t> starts(size_t(buffer.type().shape_size()), 0);
  for (int d = 0; d < buffer.sharding_size() && d < buffer.type().shape_size(); ++d)
    starts[size_t(d)] =
        indexAlong(coordinates, axisSizes, buffer.sharding(d).mesh_axes()) *
        buffer.type().shape(d);
  return starts;
}

} // namespace dtc::plan
