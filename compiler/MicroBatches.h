//===- MicroBatches.h - a micro-batched step's two parts --------*- C++ -*-===//
//
// A training step with micro-batches (compiler/Training.cpp) adds each
// gradient to an accumulator; what reads the accumulated sums (clipping,
// the optimizer) runs once per step, the rest once per micro-batch. The
// sharding search costs the parts by how often they run, and
// dtc-accumulate-gradients marks them for the later passes; both draw the
// line here.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_MICROBATCHES_H
#define DTC_COMPILER_MICROBATCHES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

namespace dtc {

/// `main`'s micro-batch count (dtc.training's micro_batches); 1 without.
int64_t microBatchesOf(mlir::func::FuncOp main);

/// The samples of `main`'s batch (a micro-batch's, in a micro-batched
/// step): the smallest leading dim of its ranked inputs (tokens, labels);
/// what data parallelism can split.
int64_t batchSamplesOf(mlir::func::FuncOp main);

/// The micro-batch count a pipeline of stages of `stageDevices` devices
/// runs `batch` samples in when --micro-batches is not given: the most
/// micro-batches (the smallest micro-batch, the shortest bubble) that
/// still give each data-parallel rank a sample: `dataParallel` ranks when
/// --dp pins them, else a stage's devices less a node's worth of tensor
/// parallelism (`devicesPerNode`). Megatron-LM's runs use micro-batches of
/// one or two samples a rank (docs/pipeline.md, "Micro-batches").
int64_t microBatchesFor(int64_t batch, int64_t stageDevices, int64_t devicesPerNode,
                        int64_t dataParallel);

/// A gradient accumulator: a parameter marked `dtc.accumulator`.
bool isAccumulator(mlir::Value v);

/// The accumulations: `graph.add`s of an accumulator and a gradient.
llvm::SmallVector<mlir::Operation *> accumulations(mlir::Block &block);

/// The ops that run once per step: those that read an accumulated sum, and
/// those that only such ops read (so an elementwise group never mixes the
/// parts). Parameters and constants are in neither part.
llvm::DenseSet<mlir::Operation *> oncePerStepOps(mlir::Block &block);

/// A pipeline's virtual stages (the module's dtc.pipeline virtual_stages;
/// 1 without an interleaved pipeline).
int64_t virtualStagesOf(mlir::Operation *op);

/// Which part of a pipeline stage's step an op runs in: the forward of
/// virtual stage k is part k, its backward part V + k, and the
/// once-per-step part 2V (V = `virtualStages`; without a pipeline all
/// per-micro-batch ops are in part V).
int64_t pipelinePartOf(mlir::Operation *op, int64_t virtualStages);

/// Whether `v` reaches nothing but accumulations (through reshapes and
/// casts): a gradient summed before it is reduced.
bool feedsOnlyAccumulations(mlir::Value v);

} // namespace dtc

#endif // DTC_COMPILER_MICROBATCHES_H
