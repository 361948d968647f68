//===- TrainingStepParts.h - a training step's forward and its cuts -*- C++ -*-===//
//
// What recomputation (Recompute.cpp) and pipeline stages (PipelineSplit.cpp)
// both read off a training step: its forward ops, which values are
// activations, and its checkpoints (the places a forward can be cut with
// one activation crossing).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_TRAININGSTEPPARTS_H
#define DTC_COMPILER_TRAININGSTEPPARTS_H

#include "mlir/IR/Block.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallVector.h"

namespace dtc {

/// The training step's forward: the ops the loss (the terminator's first
/// operand) depends on, parameters and constants left out, in block order.
llvm::SetVector<mlir::Operation *> forwardOps(mlir::Block &block);

/// The values that change with the step's inputs (not only with parameters
/// and constants): activations, not weights or a weight's cast.
class Activations {
public:
  explicit Activations(mlir::Block &block);
  bool contains(mlir::Value v) const { return varying_.contains(v); }

private:
  llvm::DenseSet<mlir::Value> varying_;
};

/// Positions in `forward` of its checkpoints, in order: ops with one
/// result, an activation that, just after it is made, is the only forward
/// activation the rest of the forward still reads (the step's inputs
/// aside). A transformer has one before each layer and one between its
/// attention and MLP halves.
llvm::SmallVector<size_t> checkpointPositions(const llvm::SetVector<mlir::Operation *> &forward,
                                              const Activations &activations);

/// Each forward op's FLOPs, plus one (no op is free): what pipeline stages
/// even out.
llvm::SmallVector<double> forwardCosts(const llvm::SetVector<mlir::Operation *> &forward);

/// Where `stages - 1` cuts among `checkpoints` (positions in a forward of
/// per-op `costs`) make the costliest stage cheapest: the stages' last
/// positions, the last one the forward's end.
llvm::SmallVector<size_t> balancedCuts(llvm::ArrayRef<double> costs,
                                       llvm::ArrayRef<size_t> checkpoints, int64_t stages);

/// The costliest stage's share of the forward's cost under balancedCuts
/// (1 / stages when the cuts even it out).
double largestStageShare(llvm::ArrayRef<double> costs, llvm::ArrayRef<size_t> checkpoints,
                         int64_t stages);

/// The checkpoints a pipeline may be cut at into `stages` stages: those
/// the model's main activation crosses (a transformer's residual stream,
/// the checkpoints' most common type), not inside its head or loss; and of
/// those, when any are, the ones two forward ops read (a layer and its skip
/// connection: a layer boundary, or between a layer's halves), so no stage
/// holds an embedding or a piece of the head alone. Positions in `forward`.
llvm::SmallVector<size_t> pipelineCheckpoints(const llvm::SetVector<mlir::Operation *> &forward,
                                              const Activations &activations, int64_t stages);

/// Where the cost model may cut (StageCuts.h): pipelineCheckpoints and the
/// other checkpoints of the model's body (up to the last one of a type
/// seen more than once: a block's output), branching ones only when
/// pipelineCheckpoints keeps only those. A CNN's block outputs at every
/// resolution, where pipelineCheckpoints keeps the most common one's.
llvm::SmallVector<size_t> stageCutCandidates(const llvm::SetVector<mlir::Operation *> &forward,
                                             const Activations &activations, int64_t stages);

/// The bytes of the weights that forward ops read on both sides of a
/// checkpoint (directly or through what is made of weights alone, like a
/// transpose), as tied embeddings are: a pipeline cut there sends them from
/// the stage that owns them to the other each micro-batch.
int64_t weightBytesAcrossCheckpoints(const llvm::SetVector<mlir::Operation *> &forward,
                                     const Activations &activations,
                                     llvm::ArrayRef<size_t> checkpoints);

} // namespace dtc

#endif // DTC_COMPILER_TRAININGSTEPPARTS_H
