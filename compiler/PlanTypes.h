//===- PlanTypes.h - the IR's types and costs as a plan states them -*- C++ -*-===//
//
// Shared by plan emission and the sharding search (which costs ops as the
// plan will state them), so that the search does not depend on the emitter.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_PLANTYPES_H
#define DTC_COMPILER_PLANTYPES_H

#include "dialects/graph/GraphOps.h"
#include "plan.pb.h"

#include "mlir/IR/Types.h"
#include "mlir/IR/Value.h"

namespace dtc {

/// The plan's element type for `type`; DTYPE_INVALID if it has none.
plan::DType dtypeOf(mlir::Type type);

/// A ranked tensor type's dtype and shape.
void setType(mlir::Type type, plan::TensorType &out);

/// An op's cost rule as a plan states it; `computed` is the value whose
/// element type is the compute dtype (computedValue's). (The sharding
/// search costs ops the same way, on their local shapes.)
plan::Cost planCost(const graph::OpCost &cost, mlir::Value computed);

/// The value whose element type an op computes in: its first float
/// operand (a product of bf16 operands runs at bf16's rate, also when it
/// keeps an f32 result), else its first result.
mlir::Value computedValue(mlir::Operation *op);

} // namespace dtc

#endif // DTC_COMPILER_PLANTYPES_H
