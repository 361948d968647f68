//===- TrainingStepParts.cpp ----------------------------------------------===//
#include "compiler/TrainingStepParts.h"

#include "compiler/BufferLiveness.h"

#include "mlir/IR/Operation.h"

#include <algorithm>

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

} // namespace dtc
