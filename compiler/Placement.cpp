//===- Placement.cpp - where a joined op may stand ------------------------===//
#include "compiler/Placement.h"

#include "dialects/graph/AttrNames.h"

#include "mlir/IR/OpDefinition.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;

namespace dtc {

bool samePart(Operation *a, Operation *b) {
  for (StringRef name : {attr::kOncePerStep, attr::kPipelineForward, attr::kChunk})
    if (a->getAttr(name) != b->getAttr(name))
      return false;
  return true;
}

bool sinkReadersBelow(Value value, Operation *below) {
  llvm::SetVector<Operation *> sink;
  SmallVector<Operation *> work(value.getUsers());
  while (!work.empty()) {
    Operation *u = work.pop_back_val();
    if (!u->isBeforeInBlock(below) || !sink.insert(u))
      continue;
    for (Operation *w : u->getUsers())
      work.push_back(w);
  }
  bool movable = llvm::all_of(sink, [&](Operation *u) {
    return samePart(u, below) && !u->hasTrait<OpTrait::IsTerminator>();
  });
  for (Value operand : below->getOperands())
    movable = movable && !sink.contains(operand.getDefiningOp());
  if (!movable)
    return false;
  SmallVector<Operation *> inOrder(sink.begin(), sink.end());
  llvm::sort(inOrder, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  Operation *after = below;
  for (Operation *op : inOrder) {
    op->moveAfter(after);
    after = op;
  }
  return true;
}

} // namespace dtc
