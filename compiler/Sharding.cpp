//===- Sharding.cpp -------------------------------------------------------===//
#include "compiler/Sharding.h"
#include "dialects/graph/AttrNames.h"

using namespace mlir;

namespace dtc {

int leadingFactor(const graph::ShardingRule &rule, ArrayRef<int> dimFactors) {
  for (int f : dimFactors)
    if (rule.factors[size_t(f)].size > 1)
      return f;
  return -1;
}

bool splittable(const graph::ShardingRule &rule, int factor) {
  const auto &f = rule.factors[size_t(factor)];
  if (f.whole || f.size <= 1)
    return false;
  auto leadsAll = [&](const graph::ShardingRule::Dims &dims) {
    return llvm::all_of(dims, [&](const auto &dim) {
      return !llvm::is_contained(dim, factor) || leadingFactor(rule, dim) == factor;
    });
  };
  return llvm::all_of(rule.operands, leadsAll) && llvm::all_of(rule.results, leadsAll);
}

Sharding shardingOf(const graph::ShardingRule &rule, const graph::ShardingRule::Dims &dims,
                    ArrayRef<MeshAxes> split) {
  Sharding s;
  for (const auto &dim : dims) {
    int f = leadingFactor(rule, dim);
    s.dims.push_back(f < 0 ? MeshAxes{} : split[size_t(f)]);
  }
  return s;
}

static SmallVector<MeshAxes> readEntries(ArrayRef<DenseI64ArrayAttr> entries) {
  SmallVector<MeshAxes> list;
  for (DenseI64ArrayAttr entry : entries) {
    MeshAxes axes;
    for (int64_t axis : entry.asArrayRef())
      axes.push_back(int16_t(axis));
    list.push_back(axes);
  }
  return list;
}

static SmallVector<DenseI64ArrayAttr> entriesOf(Builder &b, ArrayRef<MeshAxes> list) {
  SmallVector<DenseI64ArrayAttr> entries;
  for (const MeshAxes &axes : list)
    entries.push_back(b.getDenseI64ArrayAttr(SmallVector<int64_t>(axes.begin(), axes.end())));
  return entries;
}

std::optional<SmallVector<MeshAxes>> readSplit(Operation *op) {
  auto attr = op->getAttrOfType<graph::SplitAttr>(attr::kSplit);
  if (!attr)
    return std::nullopt;
  return readEntries(attr.getEntries());
}

void writeSplit(Operation *op, ArrayRef<MeshAxes> split) {
  Builder b(op->getContext());
  op->setAttr(attr::kSplit, graph::SplitAttr::get(b.getContext(), entriesOf(b, split)));
}

graph::ShardingAttr shardingAttr(Builder &b, const Sharding &s) {
  return graph::ShardingAttr::get(b.getContext(), entriesOf(b, s.dims));
}

Sharding readSharding(graph::ShardingAttr attr, int64_t rank) {
  Sharding s;
  if (attr)
    s.dims.append(readEntries(attr.getEntries()));
  s.dims.resize(size_t(rank));
  return s;
}

bool refines(const Sharding &finer, const Sharding &coarse) {
  if (finer == coarse || finer.dims.size() != coarse.dims.size())
    return false;
  for (auto [f, c] : llvm::zip(finer.dims, coarse.dims))
    if (f.size() < c.size() || !std::equal(c.begin(), c.end(), f.begin()))
      return false;
  return true;
}

} // namespace dtc
