//===- BufferLiveness.cpp -------------------------------------------------===//
#include "compiler/BufferLiveness.h"
#include "dialects/graph/AttrNames.h"

#include "dialects/graph/GraphOps.h"

namespace dtc {

bool isViewOp(mlir::Operation *op) {
  return op && mlir::isa<graph::ReshapeOp, graph::SqueezeOp, graph::UnsqueezeOp>(op);
}

bool isPersistentOp(mlir::Operation *op) {
  return op && (mlir::isa<graph::ParameterOp, graph::ConstantOp>(op) ||
                op->hasAttr(attr::kPrologue));
}

bool isPersistentValue(mlir::Value value) {
  return isPersistentOp(storageOf(value).getDefiningOp());
}

mlir::Value storageOf(mlir::Value value) {
  while (isViewOp(value.getDefiningOp()))
    value = value.getDefiningOp()->getOperand(0);
  return value;
}

int64_t tensorBytes(mlir::Value value) {
  auto type = mlir::cast<mlir::RankedTensorType>(value.getType());
  int64_t bits = type.getElementTypeBitWidth();
  return type.getNumElements() * std::max<int64_t>(1, bits / 8);
}

int64_t alignedBytes(int64_t bytes) {
  return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

} // namespace dtc
