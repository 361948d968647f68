//===- Interior.h - the ops a fusion pattern consumes -----------*- C++ -*-===//
//
// The passes that recognise an expression written out in ops (GELU,
// attention, RMSNorm) and replace it by one op match from the expression's
// root back, taking only ops that nothing else reads: those are erased once
// the root is replaced.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"

#include <cmath>
#include <optional>

namespace dtc {

/// The op of type Op defining `v` when nothing but the expression reads it,
/// recorded in `matched`; else null.
template <class Op>
Op interior(mlir::Value v, llvm::SmallVectorImpl<mlir::Operation *> &matched) {
  auto op = v.getDefiningOp<Op>();
  if (!op || !op->hasOneUse())
    return Op();
  matched.push_back(op);
  return op;
}

/// Whether a constant (scalarConstant's) is within 1e-4 relative of `want`.
inline bool near(std::optional<double> value, double want) {
  return value && std::fabs(*value - want) <= 1e-4 * std::fabs(want);
}

} // namespace dtc
