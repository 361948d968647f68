//===- Autodiff.h - reverse-mode differentiation of a graph -----*- C++ -*-===//
#ifndef DTC_COMPILER_AUTODIFF_H
#define DTC_COMPILER_AUTODIFF_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

namespace dtc {

/// Appends to `func`'s body (before its return) the gradient of the scalar
/// `loss` with respect to every value it depends on, walking the ops in
/// reverse and asking each for its operands' gradients
/// (graph::DifferentiableOp). `grads` maps each value to its gradient.
/// Errors (an op without a gradient on the path) are reported on the op.
mlir::LogicalResult differentiate(mlir::func::FuncOp func, mlir::Value loss,
                                  llvm::DenseMap<mlir::Value, mlir::Value> &grads);

} // namespace dtc

#endif // DTC_COMPILER_AUTODIFF_H
