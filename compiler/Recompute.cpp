//===- Recompute.cpp - recompute forward values in the backward -----------===//
//
// A training step keeps, from the forward to the backward, every value the
// gradients read: with a large batch or sequence that is most of a device's
// memory. This pass trades compute for that memory. It picks a set of
// forward ops to recompute; each backward read of one of their results then
// reads a copy of the op (marked dtc.recompute) computed just before that
// read, from copies of the recomputed ops before it and from the values
// still kept. The original results die with the forward.
//
//   selective  the ops on a path between two matmuls of activations by
//              activations (attention's scores, mask, softmax and the
//              product with the values: Korthikanti et al. 2022). Large,
//              and cheap to recompute. A model without such matmuls has
//              nothing to recompute.
//   full       every forward op but the ones that produce checkpoints: the
//              values that alone carry the forward from one part of the
//              model to the next (each transformer layer's input and the
//              residual between its two halves). The part after the last
//              checkpoint, which the backward reads at once, is kept.
//
// The ops copied are deterministic, so the recomputed values equal the
// originals bit for bit. Runs before the sharding search, which then costs
// the copies' compute and counts the smaller kept set.
//
//===----------------------------------------------------------------------===//
#include "compiler/BufferLiveness.h"
#include "compiler/CompileNotes.h"
#include "compiler/Passes.h"
#include "compiler/TrainingStepParts.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"
#include "plan/FormatBytes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace dtc {
#define GEN_PASS_DEF_RECOMPUTE
#define GEN_PASS_DEF_REGATHERWEIGHTS
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

/// Selective: ops on a path from one activation-by-activation matmul to
/// another (both ends included) that crosses no matmul by a weight: within
/// one attention, from its scores to its product with the values.
llvm::DenseSet<Operation *> selectiveSet(const llvm::SetVector<Operation *> &forward,
                                         const Activations &activations) {
  auto isMatmul = [](Operation *op) { return isa<graph::MatmulOp>(op); };
  auto isActivationMatmul = [&](Operation *op) {
    return isMatmul(op) && llvm::all_of(op->getOperands(), [&](Value v) {
             return activations.contains(v);
           });
  };
  // After: reached from such a matmul; before: reaches one; neither
  // through a weight's matmul.
  llvm::DenseSet<Operation *> after, before;
  for (Operation *op : forward)
    if (isActivationMatmul(op) ||
        (!isMatmul(op) && llvm::any_of(op->getOperands(), [&](Value v) {
          Operation *def = v.getDefiningOp();
          return def && after.contains(def);
        })))
      after.insert(op);
  for (Operation *op : llvm::reverse(forward))
    if (isActivationMatmul(op) ||
        (!isMatmul(op) && llvm::any_of(op->getUsers(), [&](Operation *user) {
          return before.contains(user);
        })))
      before.insert(op);
  llvm::DenseSet<Operation *> chosen;
  for (Operation *op : forward)
    if (after.contains(op) && before.contains(op))
      chosen.insert(op);
  return chosen;
}

/// Full: every forward op but the checkpoints' producers and the ops after
/// the last checkpoint.
llvm::DenseSet<Operation *> fullSet(const llvm::SetVector<Operation *> &forward,
                                    const Activations &activations) {
  SmallVector<size_t> checkpoints = checkpointPositions(forward, activations);
  llvm::DenseSet<Operation *> chosen;
  if (checkpoints.empty())
    return chosen;
  llvm::DenseSet<size_t> isCheckpoint(checkpoints.begin(), checkpoints.end());
  for (size_t i = 0; i < checkpoints.back(); ++i)
    if (!isCheckpoint.contains(i))
      chosen.insert(forward[i]);
  return chosen;
}

/// What copyIntoBackward did: ops copied, and values (and their bytes) the
/// backward no longer reads from the forward.
struct BackwardCopies {
  int64_t copied = 0, values = 0, bytes = 0;
};

/// Each backward read of a `chosen` op's result reads its copy, made just
/// before the first such read; copies read copies of chosen ops.
BackwardCopies copyIntoBackward(Block &block, const llvm::SetVector<Operation *> &forward,
                                const llvm::DenseSet<Operation *> &chosen) {
  IRMapping copies;
  OpBuilder b(block.getParentOp()->getContext());
  BackwardCopies made;
  std::function<Value(Value)> copyOf = [&](Value v) -> Value {
    Operation *def = v.getDefiningOp();
    if (!def || !chosen.contains(def))
      return v;
    if (Value done = copies.lookupOrNull(v))
      return done;
    for (Value operand : def->getOperands())
      copies.map(operand, copyOf(operand));
    Operation *copy = b.clone(*def, copies);
    copy->setAttr(attr::kRecompute, b.getUnitAttr());
    ++made.copied;
    return copies.lookup(v);
  };
  SmallVector<Operation *> backward;
  for (Operation &op : block)
    if (!forward.contains(&op) && !isPersistentOp(&op) && !op.hasTrait<OpTrait::IsTerminator>())
      backward.push_back(&op);
  llvm::DenseSet<Value> freed;
  for (Operation *op : backward) {
    b.setInsertionPoint(op);
    for (OpOperand &use : op->getOpOperands()) {
      Value v = use.get();
      Operation *def = v.getDefiningOp();
      if (!def || !chosen.contains(def))
        continue;
      if (freed.insert(v).second)
        made.bytes += tensorBytes(v);
      use.set(copyOf(v));
    }
  }
  made.values = int64_t(freed.size());
  return made;
}

struct Recompute : impl::RecomputeBase<Recompute> {
  using RecomputeBase::RecomputeBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (mode == "none")
      return;
    if (mode != "selective" && mode != "full") {
      func.emitError("dtc-recompute: mode must be none, selective or full, not '") << mode << "'";
      return signalPassFailure();
    }
    if (func.getNumResults() == 0 || !func->hasAttr(attr::kTraining))
      return; // inference keeps nothing for a backward
    Block &block = func.getBody().front();
    llvm::SetVector<Operation *> forward = forwardOps(block);
    Activations activations(block);
    llvm::DenseSet<Operation *> chosen =
        mode == "full" ? fullSet(forward, activations) : selectiveSet(forward, activations);

    BackwardCopies made = copyIntoBackward(block, forward, chosen);
    if (made.copied == 0 && mode == "selective") {
      bool fused = llvm::any_of(forward, [](Operation *op) { return isa<graph::AttentionOp>(op); });
      addNote(func, std::string("recompute: selective, nothing to recompute: no matmul of two "
                                "activations") +
                        (fused ? " (fused attention keeps no scores; its backward recomputes "
                                 "them anyway)"
                               : ""));
      func->setAttr(attr::kRecomputedNothing, UnitAttr::get(func.getContext()));
      return;
    }
    // A chosen value the step returns (a model output) stays as it is.
    addNote(func, "recompute: " + std::string(mode) + ", " + std::to_string(made.copied) +
                      " ops recomputed in the backward instead of keeping " +
                      std::to_string(made.values) + " values (" +
                      plan::formatBytes(made.bytes) + ", before any split)");
  }
};

/// Weights gathered whole for the forward (ZeRO-3's all-gathers, and what
/// is computed from them alone) are gathered again for the backward rather
/// than kept through it.
struct RegatherWeights : impl::RegatherWeightsBase<RegatherWeights> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.getNumResults() == 0 || !func->hasAttr(attr::kTraining))
      return;
    Block &block = func.getBody().front();
    llvm::SetVector<Operation *> forward = forwardOps(block);
    Activations activations(block);
    llvm::DenseSet<Operation *> chosen;
    for (Operation *op : forward) {
      if (llvm::any_of(op->getResults(), [&](Value r) { return activations.contains(r); }))
        continue;
      if (isa<mesh::AllGatherOp>(op) || llvm::any_of(op->getOperands(), [&](Value v) {
            Operation *def = v.getDefiningOp();
            return def && chosen.contains(def);
          }))
        chosen.insert(op);
    }
    if (chosen.empty())
      return;
    BackwardCopies made = copyIntoBackward(block, forward, chosen);
    if (made.values > 0)
      addNote(func, "weights gathered for the forward are gathered again for the backward: " +
                        std::to_string(made.copied) + " ops repeated instead of keeping " +
                        std::to_string(made.values) + " gathered weights (" +
                        plan::formatBytes(made.bytes) + " per device)");
  }
};

} // namespace
} // namespace dtc
