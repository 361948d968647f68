//===- Sharding.h - how values and ops are split over a mesh ----*- C++ -*-===//
//
// The vocabulary the sharding search and the SPMD partitioner share: a
// value's sharding (per dim, the mesh axes that cut it) and an op's split
// (per factor of its sharding rule, the mesh axes that cut it), with the
// attributes that carry them between the two passes.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_SHARDING_H
#define DTC_COMPILER_SHARDING_H

#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"

#include <optional>

namespace dtc {

using MeshAxes = llvm::SmallVector<int16_t, 2>;

/// How a value is split: per dim, the mesh axes that cut it (empty: whole).
struct Sharding {
  llvm::SmallVector<MeshAxes, 4> dims;
  bool replicated() const {
    return llvm::all_of(dims, [](const MeshAxes &a) { return a.empty(); });
  }
  bool operator==(const Sharding &o) const { return dims == o.dims; }
};

/// The factor that decides how a dim is cut: its first factor of size > 1.
int leadingFactor(const graph::ShardingRule &rule, llvm::ArrayRef<int> dimFactors);

/// Whether `factor` may be split: not whole, larger than 1, and leading
/// every dim it is part of.
bool splittable(const graph::ShardingRule &rule, int factor);

/// The sharding of one operand's or result's dims under `split`.
Sharding shardingOf(const graph::ShardingRule &rule, const graph::ShardingRule::Dims &dims,
                    llvm::ArrayRef<MeshAxes> split);

/// An op's split (attr::kSplit), as the search wrote it.
std::optional<llvm::SmallVector<MeshAxes>> readSplit(mlir::Operation *op);
void writeSplit(mlir::Operation *op, llvm::ArrayRef<MeshAxes> split);

graph::ShardingAttr shardingAttr(mlir::Builder &b, const Sharding &s);
/// A sharding read from `dtc.sharding` (whole dims where it is absent).
Sharding readSharding(graph::ShardingAttr attr, int64_t rank);

/// Whether `finer` cuts each dim as `coarse` does, and more: each of its
/// parts lies in one of `coarse`'s (a master split as its update, its
/// copy's parts cast from them).
bool refines(const Sharding &finer, const Sharding &coarse);

} // namespace dtc

#endif // DTC_COMPILER_SHARDING_H
