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

#include "mlir/IR/Block.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

namespace dtc {

/// A constant, or an op on constants only: cloned into each chunk that
/// reads it.
inline constexpr int kAnyStage = -1;

/// Each op of `block` (a training step whose forward is `forward`) and
/// the chunk of `chunks` it runs in, the forward cut after the positions
/// `lasts` (balancedCuts'); kAnyStage for constants and ops on them only.
llvm::DenseMap<mlir::Operation *, int> chunkOfOps(mlir::Block &block,
                                                  const llvm::SetVector<mlir::Operation *> &forward,
                                                  const Activations &activations,
                                                  llvm::ArrayRef<size_t> lasts, int64_t chunks);

} // namespace dtc

#endif // DTC_COMPILER_PIPELINESTAGES_H
