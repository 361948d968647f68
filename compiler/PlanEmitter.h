//===- PlanEmitter.h - a scheduled, buffer-assigned graph as a plan -*- C++ -*-===//
#ifndef DTC_COMPILER_PLANEMITTER_H
#define DTC_COMPILER_PLANEMITTER_H

#include "dialects/graph/GraphOps.h"
#include "plan.pb.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include <string>

namespace dtc {

/// Writes the module's `main` function, after fusion, scheduling and buffer
/// assignment, as rank 0's program of a one-device plan. Ops with no
/// instruction get an error at their location.
mlir::LogicalResult emitPlan(mlir::ModuleOp module, plan::Plan &out);

/// An op's cost rule as a plan states it; `computed` is the value whose
/// element type is the compute dtype. (The sharding search costs ops the
/// same way, on their local shapes.)
plan::Cost planCost(const graph::OpCost &cost, mlir::Value computed);

} // namespace dtc

#endif // DTC_COMPILER_PLANEMITTER_H
