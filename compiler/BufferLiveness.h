//===- BufferLiveness.h - which values need their own bytes -----*- C++ -*-===//
//
// Shared by the schedule and buffer assignment: a value's storage is its own
// unless it is a view (reshape, squeeze, unsqueeze) of another value, and
// parameters and constants persist for the whole program.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_BUFFERLIVENESS_H
#define DTC_COMPILER_BUFFERLIVENESS_H

#include "dialects/graph/AttrNames.h"

#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"

#include <cstdint>

namespace dtc {

/// Reshape-like ops whose result shares its operand's bytes.
bool isViewOp(mlir::Operation *op);

/// Parameters, constants and prologue results: loaded or computed once,
/// never overwritten.
bool isPersistentOp(mlir::Operation *op);

/// Whether `value`'s bytes are persistent (through views).
bool isPersistentValue(mlir::Value value);

/// The value whose bytes `value` uses (follows view ops).
mlir::Value storageOf(mlir::Value value);

/// Bytes of a static tensor value (i1 takes a byte).
int64_t tensorBytes(mlir::Value value);

/// Bytes of a value's storage rounded up to the arena alignment.
int64_t alignedBytes(int64_t bytes);

constexpr int64_t kBufferAlignment = 64;

} // namespace dtc

#endif // DTC_COMPILER_BUFFERLIVENESS_H
