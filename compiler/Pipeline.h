//===- Pipeline.h - the whole compile, from the graph dialect to a plan -*- C++ -*-===//
//
// `dtc compile` is one pass pipeline (registered as dtc-compile-pipeline,
// so `dtc-opt` runs exactly what `dtc compile` runs) followed by plan
// emission (compiler/PlanEmitter.h, also `dtc-translate --graph-to-plan`).
// docs/compiler-pipeline.md lists the stages.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_PIPELINE_H
#define DTC_COMPILER_PIPELINE_H

#include "compiler/ShardingSearch.h"
#include "compiler/Training.h"
#include "plan.pb.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/LogicalResult.h"

#include <optional>

namespace dtc {

struct CompileOptions {
  std::optional<TrainingOptions> training; // set: compile one training step
  ParallelOptions parallel;                // the devices and what is pinned
  bool fuseAttention = true;               // dtc-fuse-attention (--attention fused)
  /// dtc-interleave-qkv on several devices (compileCheckingLayout turns it
  /// off where the search splits no heads).
  bool interleaveQkv = true;
  /// An inference plan's: "fp32" or "bf16" (dtc-mixed-precision); a
  /// training step's is training->precision.
  std::string precision = "fp32";
  /// The model imported for M micro-batches (each batch / M samples), set
  /// by dtc compile when --train is given without --micro-batches: a
  /// pipeline's micro-batch count is then chosen (microBatchesFor), per
  /// stage count when the stages are searched. Failure with `refused` set
  /// (and no diagnostic) where the model does not import at that count
  /// (an export whose reshapes fix the batch).
  std::function<mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>(int64_t, std::string &refused)>
      modelAt;
};

/// Adds the compile's passes, in order, to `pm` (anchored on the module):
/// buildStepPipeline's, then buildSplitPipeline's.
void buildCompilePipeline(mlir::OpPassManager &pm, const CompileOptions &options);

/// The step to compile: the training step built (with `options.training`)
/// and cleaned up, recomputation applied. Independent of the devices'
/// memory, so done once for any number of searches under lower limits.
void buildStepPipeline(mlir::OpPassManager &pm, const CompileOptions &options);

/// The step split over the devices and made a plan: sharding search,
/// partition, gradient accumulation, pipeline stages, fusion, layout,
/// prologue, schedule and buffer assignment.
void buildSplitPipeline(mlir::OpPassManager &pm, const CompileOptions &options);

/// Registers dtc-compile-pipeline (with options mirroring dtc compile's
/// flags) for dtc-opt.
void registerCompilePipeline();

/// Runs the pipeline on an imported module and emits the plan, with one
/// line per decision in plan.decisions.notes. Errors are reported as MLIR
/// diagnostics.
mlir::LogicalResult compileToPlan(mlir::ModuleOp module, plan::Plan &plan,
                                  const CompileOptions &options);

} // namespace dtc

#endif // DTC_COMPILER_PIPELINE_H
