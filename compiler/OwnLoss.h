//===- OwnLoss.h - data-parallel ranks that share nothing -------*- C++ -*-===//
//
// Federated clients (dtc-local-sgd) and asynchronous parameter-server
// workers (dtc-parameter-server) run apart: no collective may join them
// over the data axis. The step's loss was built as the all-reduced sum of
// each rank's mean divided by the axis's size; it becomes the rank's own
// mean (its part times the size). Any other collective over the axis (batch
// norms' statistics over the batch) is an error.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_OWNLOSS_H
#define DTC_COMPILER_OWNLOSS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/LogicalResult.h"

#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace dtc {

/// Rewrites `func`'s collectives over mesh axis `axis` (of `size` ranks)
/// that are not gradient reductions; an error that starts with `who` and
/// ends with `instead` when one is not the loss's scalar sum.
mlir::LogicalResult keepOwnLoss(mlir::func::FuncOp func, int16_t axis, int64_t size,
                                llvm::StringRef axisName, llvm::StringRef who,
                                llvm::StringRef instead);

} // namespace dtc

#endif // DTC_COMPILER_OWNLOSS_H
