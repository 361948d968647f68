//===- MixedPrecision.h - a model computing in bf16 -------------*- C++ -*-===//
#ifndef DTC_COMPILER_MIXEDPRECISION_H
#define DTC_COMPILER_MIXEDPRECISION_H

#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace dtc {

/// Mixed precision (bf16, as Megatron-LM and PyTorch's autocast at O2):
/// the model computes in bf16 from end to end. Every f32 value the
/// model's outputs depend on becomes bf16; weights, constants and inputs
/// stay f32 and are cast once where the model reads them; values leave
/// bf16 through a cast wherever something outside the model reads them
/// (the loss, batch norms' running statistics). Kernels keep their
/// arithmetic in f32 (reductions accumulate in f32) and store bf16, so
/// activations, their gradients and the tensor-parallel collectives
/// move half the bytes. The gradients of the casts cast back: each
/// weight's gradient arrives in f32, where the optimizer keeps the master
/// weights and its state.
/// Returns how many tables (values computed from constants, frozen
/// parameters and integer inputs alone) stay f32 until activations read
/// them.
int castModelToBf16(mlir::func::FuncOp func);

/// The casts to bf16 through which such a model reads f32 parameter
/// `weight`, when it is a weight (not the optimizer's state, a gradient
/// accumulator or itself a copy): what dtc-keep-bf16-weights keeps a bf16
/// copy of, and the search prices as kept so. Empty otherwise.
llvm::SmallVector<graph::CastOp> bf16CastsOf(graph::ParameterOp weight);

} // namespace dtc

#endif // DTC_COMPILER_MIXEDPRECISION_H
