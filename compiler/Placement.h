//===- Placement.h - where a joined op may stand ----------------*- C++ -*-===//
//
// The fusion passes that join two ops into one (a product and the sum of
// its rows, a layer norm's gradient and its scale's) put the joined op
// where one of them stood; the other's readers may then have to move
// after it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"

namespace dtc {

/// Whether `a` and `b` belong to the same part of a step (the attributes a
/// split step's parts carry).
bool samePart(mlir::Operation *a, mlir::Operation *b);

/// Moves the ops before `below` that read `value` (directly or through
/// one another) to just after it, in their order; whether they could be
/// (each in `below`'s part, none a terminator or read by `below`). Moves
/// nothing when they cannot.
bool sinkReadersBelow(mlir::Value value, mlir::Operation *below);

} // namespace dtc
