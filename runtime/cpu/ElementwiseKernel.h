//===- ElementwiseKernel.h - fused elementwise expressions ------*- C++ -*-===//
#ifndef DTC_RUNTIME_CPU_ELEMENTWISEKERNEL_H
#define DTC_RUNTIME_CPU_ELEMENTWISEKERNEL_H

#include "runtime/cpu/Kernels.h"

namespace dtc::runtime::cpu {

/// The kernel for a plan::Elementwise instruction: evaluates the expression
/// DAG once per output element, inputs broadcast (NumPy rules) to the
/// outputs' shape (one shape; several outputs are nodes of one pass).
std::unique_ptr<Kernel> makeElementwiseKernel(const plan::Elementwise &expr,
                                              const std::vector<plan::TensorType> &inputTypes,
                                              const std::vector<plan::TensorType> &outputTypes,
                                              std::string &error);

/// The vector instructions the elementwise loops are compiled for; each
/// kernel takes the widest its CPU has.
enum class VectorIsa { Baseline, Avx2, Avx512 };

/// Keeps kernels made from now on to `isa` or narrower, so that tests cover
/// every compiled loop whatever CPU runs them.
void limitElementwiseIsa(VectorIsa isa);

} // namespace dtc::runtime::cpu

#endif // DTC_RUNTIME_CPU_ELEMENTWISEKERNEL_H
