//===- WrapIds.h - negative ids counted from a table's end ------*- C++ -*-===//
//
// ONNX's Gather counts a negative id from the end of the table's axis. A
// table that is not the model's whole axis (padded, or one rank's block)
// reads ids that were wrapped by the model's row count first.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_WRAPIDS_H
#define DTC_COMPILER_WRAPIDS_H

#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"

namespace dtc {

/// where(ids < 0, ids + rows, ids), built at `b`'s insertion point: a
/// pass over the ids alone.
inline graph::WhereOp wrapNegativeIds(mlir::OpBuilder &b, mlir::Location loc, mlir::Value ids,
                                      int64_t rows) {
  auto type = mlir::cast<mlir::RankedTensorType>(ids.getType());
  auto scalar = [&](int64_t v) -> mlir::Value {
    auto t = mlir::RankedTensorType::get({}, type.getElementType());
    return b.create<graph::ConstantOp>(
        loc, mlir::DenseElementsAttr::get(
                 t, llvm::APInt(t.getElementTypeBitWidth(), uint64_t(v), true)));
  };
  mlir::Value negative = b.create<graph::LessOp>(loc, ids, scalar(0));
  return b.create<graph::WhereOp>(loc, negative, b.create<graph::AddOp>(loc, ids, scalar(rows)),
                                  ids);
}

} // namespace dtc

#endif // DTC_COMPILER_WRAPIDS_H
