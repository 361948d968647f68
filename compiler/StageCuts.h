//===- StageCuts.h - where pipeline stages end, by the cost model -*- C++ -*-===//
//
// The inter-op half of Alpa's search, over layer boundaries: once the
// intra-op search has chosen how each op is split, a dynamic program over
// the places a training step can be cut picks the stages' ends so that the
// costliest stage (its micro-batches' work stretched by the schedule's
// bubble, plus its once-a-step work: optimizer, gradient reductions) is
// cheapest, with every stage's weights, optimizer state and kept
// activations (times its micro-batches in flight: 1F1B's first stage keeps
// P) within the device, and each cut's activation sent forward and its
// gradient back. The figures are the search's own, op by op, so a
// head whose loss is memory-bound, an embedding's optimizer state or a
// first stage short of memory move the cuts where evening out FLOPs would
// not. docs/pipeline.md explains.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_STAGECUTS_H
#define DTC_COMPILER_STAGECUTS_H

#include "cost/Cluster.h"
#include "plan/PipelineSchedule.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <functional>
#include <optional>
#include <string>
#include <memory>
#include <vector>

namespace dtc {

/// What one op of a training step (or an argument, `op` null) costs a
/// device under the sharding search's choice: its compute and
/// communication with the resharding of its operands (seconds a step), and
/// its memory (bytes; `kept` of them the activations kept for the backward,
/// one micro-batch's).
struct OpFigures {
  mlir::Operation *op = nullptr;
  double seconds = 0;
  bool perMicroBatch = false; // runs once per micro-batch (else once a step)
  double memory = 0, kept = 0;
};

/// What cutStages reads of one step and its figures, kept for more cuts
/// of the same (StageCutOptions::cache): the stage search weighs each
/// count's cut and then every fewer count with replicas, each of which
/// walked the whole step (GPT-3's 40k ops) again.
class StageCutCache {
public:
  StageCutCache();
  ~StageCutCache();
  struct Held;
  std::unique_ptr<Held> held;
};

struct StageCutOptions {
  /// Shared by the cuts of one step and its figures (copies of these
  /// options share it); null: nothing kept.
  std::shared_ptr<StageCutCache> cache;
  int64_t stages = 1;
  int64_t virtualStages = 1; // chunks a stage (the interleaved schedule)
  plan::PipelineSchedule schedule = plan::ONE_F_ONE_B;
  int64_t microBatches = 1;
  double memoryLimit = 0; // bytes a device
  bool evenFlops = false;  // --stage-cuts flops: the FLOP-even cut, costed
  /// Seconds to send one micro-batch's `bytes` across a cut (the whole
  /// tensor: the caller shares it over a stage's devices) one way; empty:
  /// free. A chunk pays its cut's each micro-batch, forward and back.
  std::function<double(double bytes)> transfer;
  /// Copies of the stage mesh to share among the stages (more than
  /// `stages`: some stages replicated, each replica running 1 micro-batch in
  /// its count; docs/pipeline.md); 0: one each.
  int64_t copies = 0;
  /// Or each stage's replica count, held (a pinned --stage-replicas).
  std::vector<int64_t> replicas;
  /// Seconds to sum a stage's `bytes` of gradients over its `replicas`
  /// (once a step); needed with either.
  std::function<double(double bytes, int64_t replicas)> replicaReduce;
};

/// StageCutOptions::replicaReduce for stages of `stageDevices` devices on
/// `cluster`: a ring all-reduce among the replicas, inside a node when
/// they all fit on one.
std::function<double(double, int64_t)> replicaReduce(const cost::Cluster &cluster,
                                                     int64_t stageDevices);

/// StageCutOptions::transfer between stages of `stageDevices` devices
/// each on `cluster`: a device sends its share over the link between
/// nodes, or inside one when a node holds several stages.
std::function<double(double)> stageTransfer(const cost::Cluster &cluster, int64_t stageDevices);

/// A pipeline's cuts and what the cost model predicts of them.
struct StageCut {
  /// Each chunk's last position in the step's forward (forwardOps), the
  /// last one the forward's end.
  llvm::SmallVector<size_t> lasts;
  std::vector<double> seconds; // per stage: a step's time on it, bubble included
  std::vector<double> memory;  // per stage: bytes a device
  double stepSeconds = 0;      // the costliest stage's
  /// The cut that evens out forward FLOPs, by the same figures.
  double evenFlopsSeconds = 0;
  bool evenFlopsFits = true;
  /// The cost model's cut differs from (and beats) the FLOP-even one.
  bool byCosts = false;
  /// Every stage within the memory limit, by these figures.
  bool fits = true;
  /// Per stage, the copies of its mesh (StageCutOptions::copies); empty:
  /// one each.
  std::vector<int64_t> replicas;
};

/// Where `main` (before partitioning) is best cut under `options`, given
/// each op's `figures`; the FLOP-even cut unless another is predicted
/// faster by a margin, or fits where it does not (always the FLOP-even
/// one with `evenFlops`). One chunk a stage, a dynamic program finds the
/// best cut; interleaved, where a stage is several chunks apart in the
/// step, a descent from the FLOP-even cut moves one chunk end at a time
/// while that helps. None when the step cannot be cut into that many
/// chunks.
///
/// With `options.copies` copies of the stage mesh for fewer stages (one
/// chunk each): the cut and each stage's replica count, found alternately
/// (each spare copy to the costliest stage that can take it, every count
/// dividing the micro-batches; then the dynamic program with the counts
/// held), a few rounds; none when the copies cannot all be used or
/// nothing fits.
std::optional<StageCut> cutStages(mlir::func::FuncOp main, llvm::ArrayRef<OpFigures> figures,
                                  const StageCutOptions &options);

/// Marks the forward ops at `cut`'s ends (but the last) as stage ends
/// (`dtc.stage_end`) for dtc-pipeline-split when it is cut by costs,
/// clearing earlier marks (unmarked, dtc-pipeline-split evens out FLOPs).
void markStageEnds(mlir::func::FuncOp main, const StageCut &cut);

/// The compile note on `cut`: each stage's predicted time and memory, and
/// how the FLOP-even cut compares.
std::string stageCutNote(const StageCut &cut);

} // namespace dtc

#endif // DTC_COMPILER_STAGECUTS_H
