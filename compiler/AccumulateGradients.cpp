//===- AccumulateGradients.cpp - a micro-batched step's two parts ---------===//
//
// A step that accumulates gradients over micro-batches runs most of its ops
// once per micro-batch (forward, backward, the accumulation) and the rest
// once per step (clipping, the optimizer). This pass draws that line on the
// partitioned step, marking the second part `dtc.once_per_step`, and moves
// each gradient's data-parallel all-reduce across it: summing partial
// gradients locally over the micro-batches and reducing the sum once is the
// same sum at 1/N of the traffic (Megatron-LM and DeepSpeed do the same).
// Later passes keep the parts apart: fusion never mixes them (an op whose
// users are all once-per-step is itself once-per-step, so no group crosses),
// the schedule puts the once-per-step part last, and plan emission records
// where it starts (RankProgram.accumulate_end).
//
//===----------------------------------------------------------------------===//
#include "compiler/CompileNotes.h"
#include "compiler/MicroBatches.h"
#include "compiler/Passes.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

namespace dtc {
#define GEN_PASS_DEF_ACCUMULATEGRADIENTS
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

/// `sum = add(accumulator, gradient)` whose gradient is a sum all-reduce,
/// perhaps then reshaped or cast (which commute with it), read only here:
/// the all-reduce moves after the sum, for every reader but the step's
/// result (the accumulator then holds this rank's partial sums). True when
/// it moved.
bool deferReduction(Operation *sum) {
  Operation *reader = sum;
  unsigned operand = isAccumulator(sum->getOperand(0)) ? 1 : 0;
  Value gradient = sum->getOperand(operand);
  while (Operation *def = gradient.getDefiningOp()) {
    if (!isa<graph::CastOp, graph::ReshapeOp>(def) || !def->hasOneUse())
      break;
    reader = def;
    operand = 0;
    gradient = def->getOperand(0);
  }
  auto reduce = gradient.getDefiningOp<mesh::AllReduceOp>();
  if (!reduce || reduce.getReduction() != mesh::ReductionKind::Sum || !reduce->hasOneUse())
    return false;
  reader->setOperand(operand, reduce.getInput()); // same type: an all-reduce keeps it
  OpBuilder b(sum);
  b.setInsertionPointAfter(sum);
  Value result = sum->getResult(0);
  Value whole = b.create<mesh::AllReduceOp>(reduce.getLoc(), result, reduce.getMesh(),
                                            reduce.getMeshAxes(), mesh::ReductionKind::Sum);
  if (Attribute sharding = sum->getAttr(attr::kSharding))
    whole.getDefiningOp()->setAttr(attr::kSharding, sharding);
  if (reduce->hasAttr(attr::kGradientReduction))
    whole.getDefiningOp()->setAttr(attr::kGradientReduction, b.getUnitAttr());
  result.replaceUsesWithIf(whole, [&](OpOperand &use) {
    return use.getOwner() != whole.getDefiningOp() && !isa<func::ReturnOp>(use.getOwner());
  });
  reduce.erase();
  return true;
}

/// `add(all_slice(accumulator), gradient)` whose sum is gathered back
/// whole into the accumulator (a ZeRO-1 split: the accumulator whole, the
/// gradient and the optimizer's shard split): the accumulation is the
/// gathered gradient added to the whole accumulator, and what else read
/// the split sum reads a slice of it. The accumulation is then one
/// accumulations() finds, so the optimizer behind it runs once a step, not
/// once per micro-batch; each micro-batch still gathers a gradient's worth
/// of bytes. True when rewritten.
bool accumulateWhole(Operation *sum) {
  if (!isa<graph::AddOp>(sum))
    return false;
  unsigned slot = 0;
  mesh::AllSliceOp slice;
  for (unsigned i = 0; i < 2 && !slice; ++i)
    if (auto s = sum->getOperand(i).getDefiningOp<mesh::AllSliceOp>();
        s && isAccumulator(s.getInput())) {
      slice = s;
      slot = i;
    }
  if (!slice)
    return false;
  mesh::AllGatherOp back;
  for (Operation *user : sum->getUsers())
    if (auto g = dyn_cast<mesh::AllGatherOp>(user);
        g && g.getMesh() == slice.getMesh() && g.getMeshAxes() == slice.getMeshAxes() &&
        g.getGatherAxis() == slice.getSliceAxis() && g.getType() == slice.getInput().getType())
      back = g;
  if (!back)
    return false;
  OpBuilder b(sum);
  Value accumulator = slice.getInput();
  Value gradient = b.create<mesh::AllGatherOp>(sum->getLoc(), accumulator.getType(),
                                               slice.getMesh(), slice.getMeshAxes(),
                                               sum->getOperand(1 - slot), slice.getSliceAxis());
  Value whole = b.create<graph::AddOp>(sum->getLoc(), accumulator.getType(), accumulator,
                                       gradient);
  Value part = b.create<mesh::AllSliceOp>(sum->getLoc(), sum->getResult(0).getType(),
                                          slice.getMesh(), slice.getMeshAxes(), whole,
                                          slice.getSliceAxis());
  back.getResult().replaceAllUsesWith(whole);
  back.erase();
  sum->getResult(0).replaceAllUsesWith(part);
  sum->erase();
  if (slice->use_empty())
    slice.erase();
  return true;
}

struct AccumulateGradients : impl::AccumulateGradientsBase<AccumulateGradients> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    Block &block = func.getBody().front();
    SmallVector<Operation *> adds;
    block.walk([&](graph::AddOp add) { adds.push_back(add); });
    for (Operation *add : adds)
      accumulateWhole(add);
    SmallVector<Operation *> sums = accumulations(block);
    if (sums.empty())
      return;
    int deferred = 0;
    // A gradient partial over two groups (a layer norm's scale under
    // sequence parallelism: over dp, and over tp) has two all-reduces in a
    // row: each moves after the sum, the outer first.
    for (Operation *sum : sums)
      while (deferReduction(sum))
        ++deferred;
    llvm::DenseSet<Operation *> once = oncePerStepOps(block);
    Builder b(&getContext());
    int marked = 0, perMicroBatch = 0;
    for (Operation &op : block.without_terminator()) {
      if (isa<graph::ParameterOp, graph::ConstantOp>(op))
        continue;
      if (once.contains(&op)) {
        op.setAttr(attr::kOncePerStep, b.getUnitAttr());
        ++marked;
      } else {
        ++perMicroBatch;
      }
    }
    addNote(func, "gradient accumulation: " + std::to_string(perMicroBatch) +
                      " ops run once per micro-batch, " + std::to_string(marked) +
                      " once per step" +
                      (deferred ? "; " + std::to_string(deferred) +
                                      " gradient all-reduces run once per step on the "
                                      "accumulated sums"
                                : std::string()));
  }
};

} // namespace
} // namespace dtc
