//===- PipelineStages.h - which pipeline stage each op runs on --*- C++ -*-===//
//
// A training step cut into chunks of layers (pipeline stages, or an
// interleaved schedule's virtual stages): the chunk each op runs in. The
// forward is cut at given positions; weights go with their earliest
// reader; the backward and the optimizer with the weights and activations
// they read. dtc-pipeline-split cuts the step by it, and the sharding
// search counts each stage's memory by it (docs/pipeline.md).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_PIPELINESTAGES_H
#define DTC_COMPILER_PIPELINESTAGES_H

#include "compiler/TrainingStepParts.h"
#include "plan/PipelineSchedule.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "mlir/IR/Block.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

#include <memory>
#include <vector>

namespace dtc {

/// A constant, or an op on constants only: cloned into each chunk that
/// reads it.
inline constexpr int kAnyStage = -1;

/// Each op of `block` (a training step whose forward is `forward`) and
/// the chunk of `chunks` it runs in, the forward cut after the positions
/// `lasts` (chunkEnds'); kAnyStage for constants and ops on them only.
llvm::DenseMap<mlir::Operation *, int> chunkOfOps(mlir::Block &block,
                                                  const llvm::SetVector<mlir::Operation *> &forward,
                                                  const Activations &activations,
                                                  llvm::ArrayRef<size_t> lasts, int64_t chunks);

/// Each of `chunks` chunks' last position in `forward`: the places to
/// cut (stageCutCandidates) marked `dtc.stage_end` (where
/// dtc-sharding-search cut by its costs, compiler/StageCuts.h) when
/// `chunks` - 1 of them are, else the cuts among `checkpoints`
/// (pipelineCheckpoints) that even out forward FLOPs (balancedCuts).
llvm::SmallVector<size_t> chunkEnds(const llvm::SetVector<mlir::Operation *> &forward,
                                    const Activations &activations,
                                    llvm::ArrayRef<size_t> checkpoints, int64_t chunks);

/// Which pipeline stage each op of a training step runs on, and what each
/// stage keeps: what the sharding search limits stage by stage.
struct StageMemory {
  int64_t stages = 1;
  llvm::DenseMap<mlir::Operation *, int> chunkOf; // missing or kAnyStage: every stage's
  /// Per chunk (virtual stage c / stages of stage c mod stages): the
  /// micro-batches whose kept activations it holds at most.
  std::vector<double> inFlight;

  /// The stage `op` runs on, or kAnyStage.
  int stageOf(mlir::Operation *op) const {
    auto it = chunkOf.find(op);
    return it == chunkOf.end() || it->second == kAnyStage ? kAnyStage
                                                          : int(it->second % stages);
  }
  /// The copies of `op`'s kept results stage `stage` holds: its chunk's
  /// micro-batches in flight (an op of every stage: the stage's first
  /// chunk's, the most).
  double copiesOn(mlir::Operation *op, int64_t stage) const {
    auto it = chunkOf.find(op);
    return it == chunkOf.end() || it->second == kAnyStage ? inFlight[size_t(stage)]
                                                          : inFlight[size_t(it->second)];
  }

  /// `main` cut into `stages` (`virtuals` chunks each, chunk c on stage c
  /// mod stages) as dtc-pipeline-split will cut it, each stage with
  /// `schedule`'s stash of `microBatches`.
  static std::shared_ptr<const StageMemory> of(mlir::func::FuncOp main, int64_t stages,
                                                int64_t virtuals, plan::PipelineSchedule schedule,
                                                int64_t microBatches);
};

} // namespace dtc

#endif // DTC_COMPILER_PIPELINESTAGES_H
