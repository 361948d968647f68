//===- Pipeline.h - from the graph dialect to a plan ------------*- C++ -*-===//
#ifndef DTC_COMPILER_PIPELINE_H
#define DTC_COMPILER_PIPELINE_H

#include "compiler/Training.h"
#include "cost/Cluster.h"
#include "plan.pb.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

namespace dtc {

/// Runs fusion, scheduling and buffer assignment on an imported module and
/// writes the plan, with one line per decision in plan.decisions.notes.
/// With `training`, the plan is one training step (compiler/Training.h).
/// Errors are reported as MLIR diagnostics.
/// The devices, and what the user pinned of how work is split over them;
/// the rest the sharding search decides (compiler/ShardingSearch.h).
struct ParallelOptions {
  std::vector<int64_t> mesh; // --mesh AxB / --devices N: free axes; empty: the pins'
  int64_t dataParallel = 0;  // --dp: a mesh axis that splits the batch (0: none)
  int64_t tensorParallel = 0; // --tp: a mesh axis that splits anything but the batch
  int zero = -1;             // --zero 0..3; -1: searched
  double memoryLimit = 0;    // --memory-limit bytes per device; 0: the cluster's capacity
  cost::Cluster cluster;     // what the search costs plans on

  int64_t devices() const;
};

mlir::LogicalResult compileToPlan(mlir::ModuleOp module, plan::Plan &plan,
                                  const TrainingOptions *training = nullptr,
                                  const ParallelOptions &parallel = {});

} // namespace dtc

#endif // DTC_COMPILER_PIPELINE_H
