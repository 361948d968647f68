//===- Pipeline.h - from the graph dialect to a plan ------------*- C++ -*-===//
#ifndef DTC_COMPILER_PIPELINE_H
#define DTC_COMPILER_PIPELINE_H

#include "compiler/Training.h"
#include "plan.pb.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

namespace dtc {

/// Runs fusion, scheduling and buffer assignment on an imported module and
/// writes the plan, with one line per decision in plan.decisions.notes.
/// With `training`, the plan is one training step (compiler/Training.h).
/// Errors are reported as MLIR diagnostics.
/// How the work is split over devices (pinned by the user).
struct ParallelOptions {
  int64_t dataParallel = 1; // --dp: ranks that each take a part of the batch
};

mlir::LogicalResult compileToPlan(mlir::ModuleOp module, plan::Plan &plan,
                                  const TrainingOptions *training = nullptr,
                                  const ParallelOptions &parallel = {});

} // namespace dtc

#endif // DTC_COMPILER_PIPELINE_H
