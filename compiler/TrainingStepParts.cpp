//===- TrainingStepParts.cpp ----------------------------------------------===//
#include "compiler/TrainingStepParts.h"

#include "compiler/BufferLiveness.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <algorithm>
#include <limits>

using namespace mlir;

namespace dtc {

llvm::SetVector<Operation *> forwardOps(Block &block) {
  llvm::DenseSet<Operation *> seen;
  SmallVector<Value> work{block.getTerminator()->getOperand(0)};
  while (!work.empty()) {
    Operation *op = work.pop_back_val().getDefiningOp();
    if (!op || isPersistentOp(op) || !seen.insert(op).second)
      continue;
    for (Value operand : op->getOperands())
      work.push_back(operand);
  }
  llvm::SetVector<Operation *> forward;
  for (Operation &op : block)
    if (seen.contains(&op))
      forward.insert(&op);
  return forward;
}

Activations::Activations(Block &block) {
  for (BlockArgument arg : block.getArguments())
    varying_.insert(arg);
  for (Operation &op : block)
    if (llvm::any_of(op.getOperands(), [&](Value v) { return varying_.contains(v); }))
      for (Value r : op.getResults())
        varying_.insert(r);
}

SmallVector<size_t> checkpointPositions(const llvm::SetVector<Operation *> &forward,
                                        const Activations &activations) {
  llvm::DenseMap<Operation *, size_t> index;
  for (auto [i, op] : llvm::enumerate(forward))
    index[op] = i;
  // The last forward read of each forward op's results.
  std::vector<size_t> lastRead(forward.size(), 0);
  for (auto [i, op] : llvm::enumerate(forward)) {
    lastRead[i] = i;
    for (Operation *user : op->getUsers())
      if (auto it = index.find(user); it != index.end())
        lastRead[i] = std::max(lastRead[i], it->second);
  }
  // Sweep: how many ops' results are still to be read after position i.
  std::vector<int> liveAt(forward.size() + 1, 0);
  for (auto [i, op] : llvm::enumerate(forward))
    if (lastRead[i] > i && llvm::any_of(op->getResults(), [&](Value r) {
          return activations.contains(r);
        })) {
      ++liveAt[i];
      --liveAt[lastRead[i]];
    }
  SmallVector<size_t> checkpoints;
  int live = 0;
  for (size_t i = 0; i < forward.size(); ++i) {
    live += liveAt[i];
    // Live across the gap after op i: exactly one producer, op i itself.
    if (live == 1 && lastRead[i] > i && forward[i]->getNumResults() == 1 &&
        activations.contains(forward[i]->getResult(0)))
      checkpoints.push_back(i);
  }
  return checkpoints;
}

SmallVector<double> forwardCosts(const llvm::SetVector<Operation *> &forward) {
  SmallVector<double> costs;
  for (Operation *op : forward) {
    auto costed = dyn_cast<graph::CostOp>(op);
    costs.push_back(1.0 + (costed ? costed.cost().flops : 0.0)); // 1: no op is free
  }
  return costs;
}

SmallVector<size_t> balancedCuts(ArrayRef<double> costs, ArrayRef<size_t> checkpoints,
                                 int64_t stages) {
  std::vector<double> prefix(costs.size() + 1, 0);
  for (size_t i = 0; i < costs.size(); ++i)
    prefix[i + 1] = prefix[i] + costs[i];
  // Ends: the checkpoints, then the forward's last op.
  SmallVector<size_t> ends(checkpoints.begin(), checkpoints.end());
  ends.push_back(costs.size() - 1);
  size_t n = ends.size();
  auto span = [&](int64_t from, size_t to) { // ops (ends[from], ends[to]]
    return prefix[ends[to] + 1] - (from < 0 ? 0 : prefix[ends[size_t(from)] + 1]);
  };
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][j]: the cheapest costliest stage of k + 1 stages ending at ends[j].
  std::vector<std::vector<double>> best(size_t(stages), std::vector<double>(n, inf));
  std::vector<std::vector<int64_t>> from(size_t(stages), std::vector<int64_t>(n, -1));
  for (size_t j = 0; j < n; ++j)
    best[0][j] = span(-1, j);
  for (size_t k = 1; k < size_t(stages); ++k)
    for (size_t j = k; j < n; ++j)
      for (size_t i = k - 1; i < j; ++i) {
        double worst = std::max(best[k - 1][i], span(int64_t(i), j));
        if (worst < best[k][j]) {
          best[k][j] = worst;
          from[k][j] = int64_t(i);
        }
      }
  SmallVector<size_t> lasts(static_cast<size_t>(stages), 0);
  size_t j = n - 1;
  for (size_t k = size_t(stages); k-- > 0;) {
    lasts[k] = ends[j];
    if (k > 0)
      j = size_t(from[k][j]);
  }
  return lasts;
}

double largestStageShare(ArrayRef<double> costs, ArrayRef<size_t> checkpoints, int64_t stages) {
  SmallVector<size_t> lasts = balancedCuts(costs, checkpoints, stages);
  double total = 0, largest = 0, stage = 0;
  size_t next = 0;
  for (size_t i = 0; i < costs.size(); ++i) {
    stage += costs[i];
    total += costs[i];
    if (next < lasts.size() && i == lasts[next]) {
      largest = std::max(largest, stage);
      stage = 0;
      ++next;
    }
  }
  largest = std::max(largest, stage);
  return total > 0 ? largest / total : 1.0;
}

namespace {

/// Whether two forward ops read the checkpoint at `i` (a layer and its
/// skip connection: a layer boundary).
bool branches(const llvm::SetVector<Operation *> &forward, size_t i) {
  llvm::SmallPtrSet<Operation *, 4> readers;
  for (Operation *user : forward[i]->getResult(0).getUsers())
    if (forward.contains(user))
      readers.insert(user);
  return readers.size() > 1;
}

/// pipelineCheckpoints, and whether it kept only the branching ones.
std::pair<SmallVector<size_t>, bool> mainCheckpoints(const llvm::SetVector<Operation *> &forward,
                                                     const Activations &activations,
                                                     int64_t stages) {
  SmallVector<size_t> checkpoints = checkpointPositions(forward, activations);
  llvm::DenseMap<Type, int> typeCounts;
  for (size_t i : checkpoints)
    ++typeCounts[forward[i]->getResult(0).getType()];
  Type mainType;
  for (size_t i : checkpoints) {
    Type t = forward[i]->getResult(0).getType();
    if (!mainType || typeCounts[t] > typeCounts[mainType])
      mainType = t;
  }
  llvm::erase_if(checkpoints,
                 [&](size_t i) { return forward[i]->getResult(0).getType() != mainType; });
  SmallVector<size_t> branching;
  for (size_t i : checkpoints)
    if (branches(forward, i))
      branching.push_back(i);
  // A model with skip connections is cut only between its layers (and
  // their halves): more stages than that would hold an embedding or a
  // piece of the head alone. One without (an MLP) anywhere its activation
  // goes on alone.
  if (!branching.empty())
    return {branching, true};
  return {checkpoints, false};
}

} // namespace

SmallVector<size_t> pipelineCheckpoints(const llvm::SetVector<Operation *> &forward,
                                        const Activations &activations, int64_t stages) {
  return mainCheckpoints(forward, activations, stages).first;
}

SmallVector<size_t> stageCutCandidates(const llvm::SetVector<Operation *> &forward,
                                       const Activations &activations, int64_t stages) {
  auto [main, branchingOnly] = mainCheckpoints(forward, activations, stages);
  SmallVector<size_t> all = checkpointPositions(forward, activations);
  llvm::DenseMap<Type, int> typeCounts;
  for (size_t i : all)
    ++typeCounts[forward[i]->getResult(0).getType()];
  // The body ends at the last checkpoint of a type that repeats (a block's
  // output); what follows is the head.
  size_t bodyEnd = main.empty() ? 0 : main.back();
  for (size_t i : all)
    if (typeCounts[forward[i]->getResult(0).getType()] > 1)
      bodyEnd = std::max(bodyEnd, i);
  llvm::SmallDenseSet<size_t> chosen(main.begin(), main.end());
  for (size_t i : all)
    if (i <= bodyEnd && (!branchingOnly || branches(forward, i)))
      chosen.insert(i);
  SmallVector<size_t> candidates(chosen.begin(), chosen.end());
  llvm::sort(candidates);
  return candidates;
}

int64_t weightBytesAcrossCheckpoints(const llvm::SetVector<Operation *> &forward,
                                     const Activations &activations,
                                     ArrayRef<size_t> checkpoints) {
  if (checkpoints.empty())
    return 0;
  llvm::DenseMap<Operation *, size_t> index;
  for (auto [i, op] : llvm::enumerate(forward))
    index[op] = i;
  // Per weight-only value, the first and last forward op on activations
  // that reads it (directly or through other weight-only ops), found from
  // the readers back, in reverse block order.
  llvm::DenseMap<Value, std::pair<size_t, size_t>> span;
  auto widen = [&](Value v, size_t first, size_t last) {
    auto [it, fresh] = span.try_emplace(v, first, last);
    if (!fresh)
      it->second = {std::min(it->second.first, first), std::max(it->second.second, last)};
  };
  for (Operation *op : llvm::reverse(forward)) {
    bool onActivations = llvm::any_of(op->getResults(), [&](Value r) {
      return activations.contains(r);
    });
    std::optional<std::pair<size_t, size_t>> reach;
    if (onActivations) {
      reach = {index[op], index[op]};
    } else {
      for (Value r : op->getResults())
        if (auto it = span.find(r); it != span.end())
          reach = reach ? std::pair{std::min(reach->first, it->second.first),
                                    std::max(reach->second, it->second.second)}
                        : it->second;
    }
    if (!reach)
      continue;
    for (Value operand : op->getOperands())
      if (!activations.contains(operand))
        widen(operand, reach->first, reach->second);
  }
  // Constants (masks, position tables) are cloned into each stage: only
  // parameters count.
  int64_t bytes = 0;
  for (auto &entry : span) {
    Value v = entry.first;
    auto [first, last] = entry.second;
    if (!isa_and_nonnull<graph::ParameterOp>(v.getDefiningOp()))
      continue;
    if (llvm::any_of(checkpoints, [&, first = first, last = last](size_t cut) {
          return first <= cut && cut < last;
        })) {
      auto type = cast<ShapedType>(v.getType());
      bytes += type.getNumElements() * std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
    }
  }
  return bytes;
}

} // namespace dtc
