//===- FuseElementwise.cpp - elementwise chains into graph.fused ----------===//
#include "compiler/CompileNotes.h"
#include "dialects/graph/AttrNames.h"
#include "compiler/Passes.h"

#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace dtc {
#define GEN_PASS_DEF_FUSEELEMENTWISE
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

bool isElementwise(Operation *op) { return op->hasTrait<graph::GraphElementwise>(); }

/// Splat constants are free to copy into every group that reads them.
bool isSplatConstant(Operation *op) {
  auto constant = dyn_cast_or_null<graph::ConstantOp>(op);
  if (!constant)
    return false;
  auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
  return dense && dense.isSplat();
}

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

/// Replaces `ops` (in block order; the last is the root) with one
/// graph.fused at the root, whose results are the group's values read
/// outside it, in block order (the root's last).
void outlineGroup(ArrayRef<Operation *> ops) {
  Operation *root = ops.back();
  DenseSet<Operation *> inGroup(ops.begin(), ops.end());
  llvm::SetVector<Value> inputs;
  llvm::SetVector<Operation *> constants;
  SmallVector<Value> outputs;
  for (Operation *op : ops) {
    for (Value operand : op->getOperands()) {
      Operation *def = operand.getDefiningOp();
      if (def && inGroup.contains(def))
        continue;
      if (isSplatConstant(def))
        constants.insert(def);
      else
        inputs.insert(operand);
    }
    if (op != root && llvm::any_of(op->getUsers(),
                                   [&](Operation *u) { return !inGroup.contains(u); }))
      outputs.push_back(op->getResult(0));
  }
  outputs.push_back(root->getResult(0));

  OpBuilder builder(root);
  auto fused = builder.create<graph::FusedOp>(root->getLoc(), ValueRange(outputs).getTypes(),
                                              inputs.getArrayRef());
  if (Attribute sharding = root->getAttr(attr::kSharding)) // how the partitioner split it
    fused->setAttr(attr::kSharding, sharding);
  // A group never mixes a step's parts (dtc-accumulate-gradients): an op
  // whose users are all once-per-step is once-per-step itself.
  if (root->hasAttr(attr::kOncePerStep))
    fused->setAttr(attr::kOncePerStep, UnitAttr::get(root->getContext()));
  if (root->hasAttr(attr::kPipelineForward)) // a pipeline stage's forward part
    fused->setAttr(attr::kPipelineForward, UnitAttr::get(root->getContext()));
  if (Attribute chunk = root->getAttr(attr::kChunk)) // an interleaved stage's virtual stage
    fused->setAttr(attr::kChunk, chunk);
  Block *body = builder.createBlock(&fused.getBody());
  IRMapping mapping;
  for (Value input : inputs)
    mapping.map(input, body->addArgument(input.getType(), input.getLoc()));
  for (Operation *constant : constants)
    builder.clone(*constant, mapping);
  for (Operation *op : ops)
    builder.clone(*op, mapping);
  SmallVector<Value> yielded;
  for (Value output : outputs)
    yielded.push_back(mapping.lookup(output));
  builder.create<graph::YieldOp>(root->getLoc(), yielded);

  for (auto [output, result] : llvm::zip(outputs, fused.getResults()))
    output.replaceAllUsesWith(result);
  for (Operation *op : llvm::reverse(ops))
    op->erase();
  for (Operation *constant : constants)
    if (constant->use_empty())
      constant->erase();
}

struct FuseElementwise : impl::FuseElementwiseBase<FuseElementwise> {
  void runOnOperation() override {
    Block &block = getOperation().getBody().front();
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
    for (auto &group : groups)
      if (!group.empty())
        outlineGroup(group);
    int fused = 0, elementwiseOps = 0, several = 0;
    getOperation().walk([&](graph::FusedOp f) {
      ++fused;
      several += f.getNumResults() > 1;
      f.getBody().walk([&](Operation *op) {
        elementwiseOps += op->hasTrait<graph::GraphElementwise>();
      });
    });
    if (fused)
      addNote(getOperation(),
              "fusion: " + std::to_string(elementwiseOps) + " elementwise ops in " +
                  std::to_string(fused) +
                  " fused kernels (no intermediate tensors inside a kernel" +
                  (several ? "; " + std::to_string(several) +
                                 " of them write several results, as an optimizer's moments with "
                                 "the parameter they update"
                           : std::string()) +
                  ")");
  }
};

} // namespace
} // namespace dtc
