//===- SearchStrategies.cpp - each node's splits ----------------------------===//
#include "compiler/SearchGraph.h"

#include "dialects/graph/AttrNames.h"

namespace dtc::search {

namespace {
/// A gradient accumulator (a micro-batched step's): ZeRO-1 keeps it whole,
/// as DeepSpeed's stage 1 does (only the optimizer's state is split), so
/// that the gradient is reduced once a step on the accumulated sum, not
/// reduce-scattered every micro-batch; stage 2 splits it.
bool isAccumulatorNode(const Node &node) {
  return node.parameter && node.op && node.op->hasAttr(attr::kAccumulator);
}
} // namespace

bool Search::allowed(const Node &node, size_t axis, int f) const {
  if (!options_.sequenceParallel && node.sequenceFactor[size_t(f)] &&
      !node.batchFactor[size_t(f)] && options_.mesh[axis].role != AxisRole::Data)
    return false;
  switch (options_.mesh[axis].role) {
  case AxisRole::Free:
    return true;
  case AxisRole::Tensor:
    return !node.batchFactor[size_t(f)] && !node.dataInput;
  case AxisRole::Data:
    if (node.batchFactor[size_t(f)])
      return true;
    // ZeRO: what has no batch is split over the data ranks only as the
    // optimizer's state and updates (stage 1-2) or the weights (stage 3).
    if (node.hasBatch() || node.dataInput)
      return false;
    if (isAccumulatorNode(node))
      return options_.zero != 0 && options_.zero != 1;
    return node.forward ? (options_.zero == 3 || options_.zero < 0) : options_.zero != 0;
  }
  return false;
}

int64_t Search::axesSize(ArrayRef<int16_t> axes) const {
  int64_t n = 1;
  for (int16_t a : axes)
    n *= options_.mesh[size_t(a)].size;
  return n;
}

LogicalResult Search::enumerateAll() {
  llvm::DenseMap<size_t, std::shared_ptr<std::vector<Strategy>>> byKey;
  for (Node &node : nodes_) {
    std::shared_ptr<std::vector<Strategy>> &shared = byKey[node.costKey];
    if (!shared) {
      shared = std::make_shared<std::vector<Strategy>>();
      if (failed(enumerate(node, *shared)))
        return failure();
      costStrategies(node, *shared);
    }
    node.strategies = shared;
  }
  return success();
}

LogicalResult Search::enumerate(const Node &node, std::vector<Strategy> &strategies) {
  const ShardingRule &rule = node.rule;
  size_t axes = options_.mesh.size();
  SmallVector<SmallVector<int, 6>> choices(axes);
  for (size_t a = 0; a < axes; ++a) {
    choices[a].push_back(-1);
    if (node.op && !isa<graph::ShardableOp>(node.op))
      continue;
    for (int f = 0; f < int(rule.factors.size()); ++f)
      if (splittable(rule, f) && allowed(node, a, f))
        choices[a].push_back(f);
  }
  // Pins demand what they can: a split the mesh cannot make (a bias of
  // 10 over 4 ranks) leaves that value whole rather than failing.
  for (bool demand : {true, false}) {
    enumerateSplits(node, choices, demand, strategies);
    if (!strategies.empty())
      break;
  }
  if (strategies.empty())
    return (node.op ? node.op->emitError() : func_.emitError())
           << "no split of this value meets the pinned mesh (" << meshText() << ")";
  return success();
}

void Search::enumerateSplits(const Node &node, ArrayRef<SmallVector<int, 6>> choices,
                             bool demand, std::vector<Strategy> &strategies) {
  const ShardingRule &rule = node.rule;
  size_t axes = options_.mesh.size();
  SmallVector<int, 4> pick(axes, 0);
  while (true) {
    SmallVector<MeshAxes> split(rule.factors.size());
    for (size_t a = 0; a < axes; ++a)
      if (choices[a][size_t(pick[a])] >= 0)
        split[size_t(choices[a][size_t(pick[a])])].push_back(int16_t(a));
    bool even = true;
    for (auto [f, factor] : llvm::enumerate(rule.factors))
      even = even && factor.size % axesSize(split[f]) == 0;
    if (even && (!demand || meetsPins(node, split)))
      strategies.push_back(makeStrategy(node, std::move(split)));
    size_t a = 0;
    while (a < axes && ++pick[a] == int(choices[a].size()))
      pick[a++] = 0;
    if (a == axes)
      break;
  }
}

bool Search::meetsPins(const Node &node, ArrayRef<MeshAxes> split) const {
  for (size_t a = 0; a < options_.mesh.size(); ++a) {
    if (options_.mesh[a].role != AxisRole::Data)
      continue;
    bool used = false;
    for (auto [f, axes] : llvm::enumerate(split))
      used = used || (llvm::is_contained(axes, int16_t(a)) &&
                      (node.batchFactor[f] || !node.hasBatch()));
    bool demanded = node.hasBatch() ||
                    (node.parameter && !node.forward && options_.zero >= 1 &&
                     !(isAccumulatorNode(node) && options_.zero == 1)) ||
                    (node.parameter && node.forward && options_.zero == 3);
    if (demanded && !used)
      return false;
  }
  return true;
}

Strategy Search::makeStrategy(const Node &node, SmallVector<MeshAxes> split) {
  Strategy s;
  for (const auto &dims : node.rule.operands)
    s.operands.push_back(shardingOf(node.rule, dims, split));
  for (const auto &dims : node.rule.results)
    s.results.push_back(shardingOf(node.rule, dims, split));
  for (auto [f, factor] : llvm::enumerate(node.rule.factors))
    if (factor.reduction)
      s.partial.append(split[f].begin(), split[f].end());
  llvm::sort(s.partial);
  s.split = std::move(split);
  return s;
}

} // namespace dtc::search
