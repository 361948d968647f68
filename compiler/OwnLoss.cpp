//===- OwnLoss.cpp --------------------------------------------------------===//
#include "compiler/OwnLoss.h"

#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Mesh/IR/MeshDialect.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"

using namespace mlir;

namespace dtc {

LogicalResult keepOwnLoss(func::FuncOp func, int16_t axis, int64_t size, StringRef axisName,
                          StringRef who, StringRef instead) {
  WalkResult shared = func.walk([&](Operation *op) -> WalkResult {
    if (!isa_and_nonnull<mesh::MeshDialect>(op->getDialect()) || isa<mesh::MeshOp>(op) ||
        op->hasAttr(attr::kGradientReduction))
      return WalkResult::advance();
    auto axesOf = op->getAttrOfType<DenseI16ArrayAttr>("mesh_axes");
    if (!axesOf || !llvm::is_contained(axesOf.asArrayRef(), axis))
      return WalkResult::advance();
    auto reduce = dyn_cast<mesh::AllReduceOp>(op);
    auto type = cast<RankedTensorType>(op->getResult(0).getType());
    if (!reduce || type.getRank() != 0 || reduce.getMeshAxes().size() != 1 ||
        reduce.getReduction() != mesh::ReductionKind::Sum) {
      op->emitError() << who << ", but the step " << op->getName() << "s over '" << axisName
                      << "' (batch-norm statistics over the batch?)" << instead;
      return WalkResult::interrupt();
    }
    OpBuilder b(reduce);
    Value scale = b.create<graph::ConstantOp>(
        reduce.getLoc(),
        DenseElementsAttr::get(type, b.getFloatAttr(type.getElementType(), double(size))));
    Value own = b.create<graph::MulOp>(reduce.getLoc(), reduce.getInput(), scale);
    reduce.getResult().replaceAllUsesWith(own);
    reduce.erase();
    return WalkResult::advance();
  });
  return failure(shared.wasInterrupted());
}

} // namespace dtc
