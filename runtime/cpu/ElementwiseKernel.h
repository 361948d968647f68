//===- ElementwiseKernel.h - fused elementwise expressions ------*- C++ -*-===//
#ifndef DTC_RUNTIME_CPU_ELEMENTWISEKERNEL_H
#define DTC_RUNTIME_CPU_ELEMENTWISEKERNEL_H

#include "runtime/cpu/Kernels.h"

namespace dtc::runtime::cpu {

/// The kernel for a plan::Elementwise instruction: evaluates the expression
/// DAG once per output element, inputs broadcast (NumPy rules) to the
/// output's shape.
std::unique_ptr<Kernel> makeElementwiseKernel(const plan::Elementwise &expr,
                                              const std::vector<plan::TensorType> &inputTypes,
                                              const plan::TensorType &outputType,
                                              std::string &error);

} // namespace dtc::runtime::cpu

#endif // DTC_RUNTIME_CPU_ELEMENTWISEKERNEL_H
