//===- MicroBatches.cpp ---------------------------------------------------===//
#include "compiler/MicroBatches.h"

#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/IR/BuiltinOps.h"

using namespace mlir;

namespace dtc {

int64_t microBatchesOf(func::FuncOp main) {
  auto training = main->getAttrOfType<DictionaryAttr>(attr::kTraining);
  auto count = training ? training.getAs<IntegerAttr>("micro_batches") : IntegerAttr();
  return count ? std::max<int64_t>(1, count.getInt()) : 1;
}

int64_t batchSamplesOf(func::FuncOp main) {
  int64_t samples = 0;
  for (BlockArgument arg : main.getArguments())
    if (auto type = dyn_cast<RankedTensorType>(arg.getType()); type && type.getRank() > 0)
      samples = samples == 0 ? type.getDimSize(0) : std::min(samples, type.getDimSize(0));
  return std::max<int64_t>(1, samples);
}

int64_t microBatchesFor(int64_t batch, int64_t stageDevices, int64_t devicesPerNode,
                        int64_t dataParallel) {
  int64_t samples = dataParallel > 0
                        ? dataParallel
                        : std::max<int64_t>(1, stageDevices / std::max<int64_t>(1, devicesPerNode));
  for (; samples < batch; ++samples)
    if (batch % samples == 0)
      return batch / samples;
  return 1;
}

int64_t virtualStagesOf(Operation *op) {
  auto module = op->getParentOfType<ModuleOp>();
  auto pipeline = module ? module->getAttrOfType<DictionaryAttr>(attr::kPipeline) : nullptr;
  auto count = pipeline ? pipeline.getAs<IntegerAttr>("virtual_stages") : IntegerAttr();
  return count ? std::max<int64_t>(1, count.getInt()) : 1;
}

int64_t pipelinePartOf(Operation *op, int64_t virtualStages) {
  if (op->hasAttr(attr::kOncePerStep))
    return 2 * virtualStages;
  auto chunk = op->getAttrOfType<IntegerAttr>(attr::kChunk);
  int64_t k = chunk ? chunk.getInt() : 0;
  return op->hasAttr(attr::kPipelineForward) ? k : virtualStages + k;
}

bool isAccumulator(Value v) {
  auto p = v.getDefiningOp<graph::ParameterOp>();
  return p && p->hasAttr(attr::kAccumulator);
}

SmallVector<Operation *> accumulations(Block &block) {
  SmallVector<Operation *> sums;
  for (Operation &op : block)
    if (isa<graph::AddOp>(op) &&
        (isAccumulator(op.getOperand(0)) || isAccumulator(op.getOperand(1))))
      sums.push_back(&op);
  return sums;
}

llvm::DenseSet<Operation *> oncePerStepOps(Block &block) {
  llvm::DenseSet<Operation *> once;
  SmallVector<Operation *> work;
  for (Operation *sum : accumulations(block))
    llvm::append_range(work, sum->getUsers());
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    if (isa<func::ReturnOp>(op) || !once.insert(op).second)
      continue;
    llvm::append_range(work, op->getUsers());
  }
  if (once.empty())
    return once;
  for (Operation &op : llvm::reverse(block.without_terminator())) {
    if (once.contains(&op) || op.use_empty() || isa<graph::ParameterOp, graph::ConstantOp>(op))
      continue;
    if (llvm::all_of(op.getUsers(), [&](Operation *user) { return once.contains(user); }))
      once.insert(&op);
  }
  return once;
}

bool feedsOnlyAccumulations(Value v) {
  if (v.use_empty())
    return false;
  for (Operation *user : v.getUsers()) {
    bool accumulation = isa<graph::AddOp>(user) && (isAccumulator(user->getOperand(0)) ||
                                                    isAccumulator(user->getOperand(1)));
    if (accumulation)
      continue;
    if (!isa<graph::CastOp, graph::ReshapeOp>(user) || !feedsOnlyAccumulations(user->getResult(0)))
      return false;
  }
  return true;
}

} // namespace dtc
