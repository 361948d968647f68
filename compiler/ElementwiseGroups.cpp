//===- ElementwiseGroups.cpp - which elementwise ops share a kernel -------===//
#include "compiler/ElementwiseGroups.h"

#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"

#include "llvm/ADT/SetVector.h"

using namespace mlir;

namespace dtc {

bool isElementwise(Operation *op) { return op && op->hasTrait<graph::GraphElementwise>(); }

namespace {

/// The ops of one group: `root` and the producers that only it (through the
/// group) uses.
SmallVector<Operation *> growGroup(Operation *root, const DenseSet<Operation *> &taken) {
  llvm::SetVector<Operation *> group;
  group.insert(root);
  // A producer joins once all its users are in; adding one user may admit
  // another producer, so iterate to a fixed point (groups are small).
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < group.size(); ++i)
      for (Value operand : group[i]->getOperands()) {
        Operation *def = operand.getDefiningOp();
        if (!def || group.contains(def) || taken.contains(def) || !isElementwise(def))
          continue;
        if (llvm::all_of(def->getUsers(), [&](Operation *u) { return group.contains(u); })) {
          group.insert(def);
          changed = true;
        }
      }
  }
  SmallVector<Operation *> ops(group.begin(), group.end());
  llvm::sort(ops, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  return ops;
}

/// Group `from` (made before `into`, whose root is `intoRoot`) joins group
/// `into` when its values read outside it are read only by `into` or after
/// `intoRoot` (so no outside op between them feeds `into`: no cycle, and the
/// joined kernel, at `intoRoot`, is before every reader), and have the shape
/// `into` loops over. Then one kernel reads the inputs once and writes
/// both: an optimizer's new moments and the parameter they update.
bool canJoin(ArrayRef<Operation *> from, ArrayRef<Operation *> into) {
  Operation *intoRoot = into.back(), *fromRoot = from.back();
  for (StringRef name : {attr::kSharding, attr::kOncePerStep, attr::kPipelineForward,
                         attr::kChunk})
    if (intoRoot->getAttr(name) != fromRoot->getAttr(name))
      return false;
  auto shape = cast<RankedTensorType>(intoRoot->getResult(0).getType()).getShape();
  DenseSet<Operation *> members(from.begin(), from.end());
  members.insert(into.begin(), into.end());
  for (Operation *op : from)
    for (Value result : op->getResults())
      for (Operation *user : result.getUsers()) {
        if (members.contains(user))
          continue;
        if (user->isBeforeInBlock(intoRoot) ||
            cast<RankedTensorType>(result.getType()).getShape() != shape)
          return false;
      }
  return true;
}

/// Joins groups into their consumers where canJoin allows, consumers from
/// the last; `groups` are in the order made (last root first).
void joinGroups(SmallVector<SmallVector<Operation *>> &groups) {
  DenseMap<Operation *, size_t> groupOf;
  for (size_t g = 0; g < groups.size(); ++g)
    for (Operation *op : groups[g])
      groupOf[op] = g;
  for (size_t into = 0; into < groups.size(); ++into) {
    for (bool joined = true; joined && !groups[into].empty();) {
      joined = false;
      for (size_t i = 0; i < groups[into].size() && !joined; ++i)
        for (Value operand : groups[into][i]->getOperands()) {
          auto it = groupOf.find(operand.getDefiningOp());
          if (it == groupOf.end() || it->second == into || groups[it->second].empty() ||
              !canJoin(groups[it->second], groups[into]))
            continue;
          size_t from = it->second;
          for (Operation *op : groups[from])
            groupOf[op] = into;
          groups[into].append(groups[from].begin(), groups[from].end());
          groups[from].clear();
          llvm::sort(groups[into],
                     [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
          joined = true;
          break;
        }
    }
  }
}

} // namespace

SmallVector<SmallVector<Operation *>> elementwiseGroups(Block &block) {
  // Visit consumers before producers: a group grows from its last op.
  SmallVector<SmallVector<Operation *>> groups;
  DenseSet<Operation *> taken;
  SmallVector<Operation *> order;
  for (Operation &op : block)
    order.push_back(&op);
  for (Operation *op : llvm::reverse(order)) {
    if (!isElementwise(op) || taken.contains(op))
      continue;
    groups.push_back(growGroup(op, taken));
    taken.insert(groups.back().begin(), groups.back().end());
  }
  joinGroups(groups);
  llvm::erase_if(groups, [](const auto &group) { return group.empty(); });
  return groups;
}

} // namespace dtc
