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

/// Replaces `ops` (in block order; the last is the root) with one graph.fused.
void outlineGroup(ArrayRef<Operation *> ops) {
  Operation *root = ops.back();
  DenseSet<Operation *> inGroup(ops.begin(), ops.end());
  llvm::SetVector<Value> inputs;
  llvm::SetVector<Operation *> constants;
  for (Operation *op : ops)
    for (Value operand : op->getOperands()) {
      Operation *def = operand.getDefiningOp();
      if (def && inGroup.contains(def))
        continue;
      if (isSplatConstant(def))
        constants.insert(def);
      else
        inputs.insert(operand);
    }

  OpBuilder builder(root);
  auto fused = builder.create<graph::FusedOp>(root->getLoc(), root->getResult(0).getType(),
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
  builder.create<graph::YieldOp>(root->getLoc(), mapping.lookup(root->getResult(0)));

  root->getResult(0).replaceAllUsesWith(fused.getResult());
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
    for (auto &group : groups)
      outlineGroup(group);
    int fused = 0, elementwiseOps = 0;
    getOperation().walk([&](graph::FusedOp f) {
      ++fused;
      f.getBody().walk([&](Operation *op) {
        elementwiseOps += op->hasTrait<graph::GraphElementwise>();
      });
    });
    if (fused)
      addNote(getOperation(), "fusion: " + std::to_string(elementwiseOps) +
                                  " elementwise ops in " + std::to_string(fused) +
                                  " fused kernels (no intermediate tensors inside a kernel)");
  }
};

} // namespace
} // namespace dtc
