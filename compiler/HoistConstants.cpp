//===- HoistConstants.cpp - the load-time prologue ------------------------===//
#include "compiler/BufferLiveness.h"
#include "dialects/graph/AttrNames.h"
#include "compiler/Passes.h"

#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace dtc {
#define GEN_PASS_DEF_HOISTCONSTANTS
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

struct HoistConstants : impl::HoistConstantsBase<HoistConstants> {
  using HoistConstantsBase::HoistConstantsBase;

  void runOnOperation() override {
    Block &block = getOperation().getBody().front();
    Builder builder(&getContext());
    llvm::SmallPtrSet<Operation *, 32> fixed;
    SmallVector<Operation *> hoisted;
    for (Operation &op : block) {
      // A receive (from another pipeline stage) is data each step.
      if (!isa<graph::GraphDialect>(op.getDialect()) || op.getNumResults() == 0 ||
          isa<graph::RecvOp>(op))
        continue;
      bool isFixed;
      if (isa<graph::ConstantOp>(op))
        isFixed = true;
      else if (isa<graph::ParameterOp>(op))
        isFixed = parameters;
      else
        isFixed = llvm::all_of(op.getOperands(), [&](Value v) {
          Operation *def = v.getDefiningOp();
          return def && fixed.contains(def);
        });
      if (!isFixed)
        continue;
      fixed.insert(&op);
      hoisted.push_back(&op);
      // Views share their operand's bytes and cost nothing; parameters and
      // constants are loaded, not computed.
      if (!isPersistentOp(&op) && !isViewOp(&op))
        op.setAttr(attr::kPrologue, builder.getUnitAttr());
    }
    // To the front, in order, so that every use follows its definition.
    Operation *anchor = nullptr;
    for (Operation *op : hoisted) {
      if (anchor)
        op->moveAfter(anchor);
      else
        op->moveBefore(&block, block.begin());
      anchor = op;
    }
  }
};

} // namespace
} // namespace dtc
