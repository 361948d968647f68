//===- ConstantValues.h - a value computed from constants, evaluated -*- C++ -*-===//
//
// Attention masks are computed from constants by ops (a triangle, or
// positions compared, as transformers' exports write them), too large for
// the dialect's folders at real sequence lengths. evaluateConstant runs
// such a computation at compile time, for the passes that must know the
// mask (dtc-fuse-attention).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_CONSTANTVALUES_H
#define DTC_COMPILER_CONSTANTVALUES_H

#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>
#include <vector>

namespace dtc {

/// A tensor's elements, row-major, as floats (booleans 0 and 1; integers
/// exact up to 2^24, which positions and masks stay under).
struct ConstantValues {
  llvm::SmallVector<int64_t> shape;
  std::vector<float> values;
};

/// `v`'s value when it is a float constant holding one number (of any
/// shape that broadcasts as a scalar does: every dim 1).
std::optional<double> scalarConstant(mlir::Value v);

/// `v`'s elements when it is computed from constants by ops this knows
/// (constants; elementwise arithmetic, comparisons, logic and where with
/// broadcasting; casts, reshapes, broadcasts, transposes; trilu; gather;
/// sums, maxima and minima), no tensor on the way past `maxElements`;
/// nullopt otherwise.
std::optional<ConstantValues> evaluateConstant(mlir::Value v, int64_t maxElements);

} // namespace dtc

#endif // DTC_COMPILER_CONSTANTVALUES_H
