//===- MeshGroups.cpp - the communicators of a device mesh's axes ---------===//
#include "runtime/comm/MeshGroups.h"

#include <algorithm>

namespace dtc::runtime {

std::vector<int64_t> meshCoordinates(int64_t rank, const std::vector<int64_t> &axisSizes) {
  std::vector<int64_t> coordinates(axisSizes.size());
  for (size_t axis = axisSizes.size(); axis-- > 0;) {
    coordinates[axis] = rank % axisSizes[axis];
    rank /= axisSizes[axis];
  }
  return coordinates;
}

int64_t meshRank(const std::vector<int64_t> &coordinates, const std::vector<int64_t> &axisSizes) {
  int64_t rank = 0;
  for (size_t axis = 0; axis < axisSizes.size(); ++axis)
    rank = rank * axisSizes[axis] + coordinates[axis];
  return rank;
}

namespace {

std::string meshName(const std::vector<int64_t> &axisSizes) {
  std::string name;
  for (int64_t size : axisSizes)
    name += (name.empty() ? "" : "x") + std::to_string(size);
  return name.empty() ? "scalar" : name;
}

/// Row-major index of `coordinates` restricted to the axes where `keep` is
/// set.
int64_t linearIndex(const std::vector<int64_t> &coordinates, const std::vector<int64_t> &sizes,
                    const std::vector<bool> &keep) {
  int64_t index = 0;
  for (size_t axis = 0; axis < sizes.size(); ++axis)
    if (keep[axis])
      index = index * sizes[axis] + coordinates[axis];
  return index;
}

} // namespace

MeshGroups::MeshGroups(Communicator &world, std::vector<int64_t> axisSizes)
    : world_(world), axisSizes_(std::move(axisSizes)),
      coordinates_(meshCoordinates(world.rank(), axisSizes_)) {}

std::unique_ptr<MeshGroups> MeshGroups::create(Communicator &world,
                                               std::vector<int64_t> axisSizes,
                                               std::string &error) {
  int64_t devices = 1;
  bool overflow = false;
  for (int64_t size : axisSizes) {
    if (size < 1) {
      error = "mesh " + meshName(axisSizes) + ": every axis needs at least one device";
      return nullptr;
    }
    overflow = overflow || __builtin_mul_overflow(devices, size, &devices);
  }
  if (overflow || devices != world.size()) {
    error = "mesh " + meshName(axisSizes) + " needs " +
            (overflow ? std::string("over 2^63") : std::to_string(devices)) +
            " ranks, but group '" + world.name() + "' has " + std::to_string(world.size());
    return nullptr;
  }
  return std::unique_ptr<MeshGroups>(new MeshGroups(world, std::move(axisSizes)));
}

Communicator *MeshGroups::group(std::vector<int> axes, std::string &error) {
  std::sort(axes.begin(), axes.end());
  if (auto found = groups_.find(axes); found != groups_.end())
    return found->second.get();

  std::string name = "mesh " + meshName(axisSizes_) + " axes {";
  for (size_t i = 0; i < axes.size(); ++i)
    name += (i ? "," : "") + std::to_string(axes[i]);
  name += "}";
  std::vector<bool> inGroup(axisSizes_.size(), false);
  for (int axis : axes) {
    if (axis < 0 || size_t(axis) >= axisSizes_.size()) {
      error = name + ": axis " + std::to_string(axis) + " is not in [0, " +
              std::to_string(axisSizes_.size()) + ")";
      return nullptr;
    }
    if (inGroup[axis]) {
      error = name + ": axis " + std::to_string(axis) + " is named twice";
      return nullptr;
    }
    inGroup[axis] = true;
  }
  std::vector<bool> outside(inGroup.size());
  for (size_t axis = 0; axis < inGroup.size(); ++axis)
    outside[axis] = !inGroup[axis];

  // Ranks agreeing on every other axis share a color; the key orders them
  // row-major over the group's own axes. Both are below world's size.
  int color = int(linearIndex(coordinates_, axisSizes_, outside));
  int key = int(linearIndex(coordinates_, axisSizes_, inGroup));
  std::unique_ptr<Communicator> communicator = world_.split(color, key, error);
  if (!communicator)
    return nullptr;
  communicator->setName(std::move(name));
  return (groups_[axes] = std::move(communicator)).get();
}

Communicator *MeshGroups::rangeGroup(int axis, int64_t first, int64_t count,
                                     std::string &error) {
  std::vector<int64_t> key{axis, first, count};
  if (auto found = rangeGroups_.find(key); found != rangeGroups_.end())
    return found->second.get();
  std::string name = "mesh " + meshName(axisSizes_) + " axis " + std::to_string(axis) + " [" +
                     std::to_string(first) + ", " + std::to_string(first + count) + ")";
  if (axis < 0 || size_t(axis) >= axisSizes_.size() || first < 0 || count < 1 ||
      first + count > axisSizes_[size_t(axis)]) {
    error = name + ": not on the mesh";
    return nullptr;
  }
  std::vector<bool> outside(axisSizes_.size(), true);
  outside[size_t(axis)] = false;
  int64_t own = coordinates_[size_t(axis)];
  bool in = own >= first && own < first + count;
  // Ranks outside the range each make a group of their own (colors past
  // every in-range one).
  int color = in ? int(linearIndex(coordinates_, axisSizes_, outside))
                 : world_.size() + world_.rank();
  std::unique_ptr<Communicator> communicator =
      world_.split(color, in ? int(own - first) : 0, error);
  if (!communicator)
    return nullptr;
  communicator->setName(std::move(name));
  return (rangeGroups_[key] = std::move(communicator)).get();
}

std::map<std::string, Communicator::Traffic> MeshGroups::traffic() const {
  std::map<std::string, Communicator::Traffic> all = world_.traffic();
  auto add = [&](const Communicator &group) {
    if (&group != &world_)
      for (const auto &[operation, t] : group.traffic()) {
        all[operation].calls += t.calls;
        all[operation].bytes += t.bytes;
      }
  };
  for (const auto &[axes, group] : groups_)
    add(*group);
  for (const auto &[range, group] : rangeGroups_)
    add(*group);
  return all;
}

} // namespace dtc::runtime
