//===- FuseElementwise.cpp - elementwise chains into graph.fused ----------===//
#include "compiler/CompileNotes.h"
#include "compiler/ElementwiseGroups.h"
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

/// Splat constants are free to copy into every group that reads them.
bool isSplatConstant(Operation *op) {
  auto constant = dyn_cast_or_null<graph::ConstantOp>(op);
  if (!constant)
    return false;
  auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
  return dense && dense.isSplat();
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
    for (auto &group : elementwiseGroups(getOperation().getBody().front()))
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
