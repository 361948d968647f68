//===- KernelMath.h - math functions in generated kernels ----*- C++ -*-===//
//
// The functions a kernel calls (exp, log, tanh, erf, sin, cos, pow) are
// expanded into arithmetic, MLIR's f32 polynomial approximations, before a
// kernel is lowered for any target: a GPU kernel then needs no device
// library (libdevice), and the host lowering of the same kernel, which the
// tests run on the CPU, computes exactly what the GPU will.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_KERNELMATH_H
#define DTC_COMPILER_KERNELMATH_H

#include "mlir/IR/Operation.h"
#include "mlir/Support/LogicalResult.h"

namespace dtc {

/// Expands the math ops under `root` (in place) into arith and polynomial
/// approximations (fused multiply-adds as a multiply and an add), bf16 and
/// f16 ones computed in f32.
mlir::LogicalResult expandKernelMath(mlir::Operation *root);

} // namespace dtc

#endif // DTC_COMPILER_KERNELMATH_H
