//===- MeshGroups.h - the communicators of a device mesh's axes -*- C++ -*-===//
//
// A device mesh numbers its ranks row-major over the axis sizes: on a 2x3
// mesh rank 4 sits at (1, 1). A collective along a set of axes runs among
// the ranks that differ only in those axes' coordinates: on a 2x2 mesh,
// axis 0's groups are {0,2} and {1,3}, axis 1's {0,1} and {2,3}, axes {0,1}
// the whole mesh. A tensor dim split over two axes needs the group of both.
//
// Within a group, ranks are ordered row-major over the group's axes, so on a
// single-axis group a rank's group rank is its coordinate on that axis.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_COMM_MESHGROUPS_H
#define DTC_RUNTIME_COMM_MESHGROUPS_H

#include "runtime/comm/Communicator.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dtc::runtime {

/// Row-major coordinates of `rank` on a mesh of `axisSizes`.
std::vector<int64_t> meshCoordinates(int64_t rank, const std::vector<int64_t> &axisSizes);
/// The rank at `coordinates` on a mesh of `axisSizes`.
int64_t meshRank(const std::vector<int64_t> &coordinates, const std::vector<int64_t> &axisSizes);

class MeshGroups {
public:
  /// The groups of a mesh of `axisSizes` (each >= 1) over `world`, whose
  /// size must be their product. `world` must outlive the MeshGroups.
  static std::unique_ptr<MeshGroups> create(Communicator &world, std::vector<int64_t> axisSizes,
                                            std::string &error);

  const std::vector<int64_t> &axisSizes() const { return axisSizes_; }
  /// All ranks (point-to-point transfers name their peer's world rank).
  Communicator &world() { return world_; }
  /// This rank's coordinates.
  const std::vector<int64_t> &coordinates() const { return coordinates_; }

  /// The group of this rank along `axes` (any order, no repeats; empty: this
  /// rank alone). The first request for a set of axes splits the world, so
  /// every rank must make it, and first requests must come in the same
  /// order on every rank; later requests are looked up. Null with `error`
  /// on bad axes or a failed split.
  Communicator *group(std::vector<int> axes, std::string &error);

  /// The group along one axis of the ranks at coordinates [first, first +
  /// count) on it (a replicated pipeline stage's replicas): this rank's,
  /// when its coordinate is in the range (its group rank: coordinate -
  /// first), else this rank alone. Made by every rank, like group().
  Communicator *rangeGroup(int axis, int64_t first, int64_t count, std::string &error);

  /// What this rank sent so far over the world and every group, by
  /// operation (Communicator::traffic).
  std::map<std::string, Communicator::Traffic> traffic() const;

private:
  MeshGroups(Communicator &world, std::vector<int64_t> axisSizes);

  Communicator &world_;
  std::vector<int64_t> axisSizes_;
  std::vector<int64_t> coordinates_;
  std::map<std::vector<int>, std::unique_ptr<Communicator>> groups_;
  std::map<std::vector<int64_t>, std::unique_ptr<Communicator>> rangeGroups_;
};

} // namespace dtc::runtime

#endif // DTC_RUNTIME_COMM_MESHGROUPS_H
