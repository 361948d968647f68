//===- PipelineSearch.cpp - how many pipeline stages for --devices N ------===//
//
// The outer loop of the search for a training step given only a device
// count: pipeline stages P x (data x tensor shapes of N / P). Each stage
// count is searched as a pinned --pp would be (the weights' and kept
// activations' shares of one stage, compiler/ShardingSearchPass.cpp) on a
// copy of the module, and costed as the pipeline runs it: the costliest
// stage does its share of the step's work (1/P when the cuts even the
// forward's FLOPs out), and the schedule's bubble stretches it by
// (M + P - 1) / M for M micro-batches. Fewer stages are tried first; a
// later count only has to beat the best so far, which CBC's bound often
// rules out early. docs/pipeline.md explains.
//
//===----------------------------------------------------------------------===//
#include "compiler/MicroBatches.h"
#include "compiler/ShardingSearch.h"
#include "compiler/TrainingStepParts.h"
#include "dialects/graph/AttrNames.h"
#include "plan/PipelineSchedule.h"

#include "mlir/IR/Diagnostics.h"

#include <chrono>

using namespace mlir;

namespace dtc {

namespace {

constexpr double kMargin = kStageMargin;

/// The samples of one micro-batch: the smallest leading dim of the step's
/// ranked inputs (tokens, labels); what data parallelism can split.
int64_t microBatchSamples(func::FuncOp main) {
  int64_t samples = 0;
  for (BlockArgument arg : main.getArguments())
    if (auto type = dyn_cast<RankedTensorType>(arg.getType()); type && type.getRank() > 0)
      samples = samples == 0 ? type.getDimSize(0) : std::min(samples, type.getDimSize(0));
  return std::max<int64_t>(1, samples);
}

} // namespace

FailureOr<PipelineSearchResult> searchPipelineStages(ModuleOp module,
                                                     const ParallelOptions &options,
                                                     const SearchOptions &base) {
  auto main = module.lookupSymbol<func::FuncOp>("main");
  int64_t devices = options.devices(), microBatches = microBatchesOf(main);
  plan::PipelineSchedule kind =
      plan::scheduleNamed(options.pipelineSchedule).value_or(plan::ONE_F_ONE_B);
  // Interleaved: each stage runs `virtuals` chunks of the layers.
  int64_t virtuals = kind == plan::INTERLEAVED ? std::max<int64_t>(1, options.virtualStages) : 1;
  Block &block = main.getBody().front();
  llvm::SetVector<Operation *> forward = forwardOps(block);
  Activations activations(block);
  SmallVector<double> costs = forwardCosts(forward);

  // The stage counts worth a search: each divides the devices; the model
  // has layer boundaries for it; and a stage's devices are no more than
  // its micro-batch's samples times a node's devices (beyond that data
  // and node-bound tensor parallelism leave devices idle), unless no count
  // is that small.
  PipelineSearchResult result;
  result.samples = microBatchSamples(main);
  std::vector<int64_t> counts;
  int64_t perNode = std::max<int64_t>(1, base.cluster.devicesPerNode);
  int64_t samples = result.samples;
  for (int64_t p = 1; p <= devices; ++p) {
    if (devices % p != 0)
      continue;
    if (options.pipelineStagesBelow > 0 && p >= options.pipelineStagesBelow)
      break;
    if (p > 1) {
      SmallVector<size_t> cuts = pipelineCheckpoints(forward, activations, p * virtuals);
      if (int64_t(cuts.size()) + 1 < p * virtuals)
        break;
      if (!plan::scheduleProblem(kind, p, microBatches, virtuals).empty())
        continue; // interleaved: the micro-batches are not groups of p
    }
    if (devices / p > samples * perNode && p < devices) {
      result.tried.push_back({p, 1, 0, kIdle});
      continue;
    }
    counts.push_back(p);
  }
  if (counts.empty()) // every count leaves devices idle: the most stages
    for (int64_t p = devices; p >= 1; --p)
      if (devices % p == 0 &&
          int64_t(pipelineCheckpoints(forward, activations, p * virtuals).size()) + 1 >=
              p * virtuals &&
          (p == 1 || plan::scheduleProblem(kind, p, microBatches, virtuals).empty())) {
        counts.push_back(p);
        llvm::erase_if(result.tried, [&](const StageCandidate &c) { return c.stages == p; });
        break;
      }

  // What crosses a cut: the main activation forward, its gradient back,
  // once per micro-batch each, a rank's share of it over the link between
  // nodes (or inside one, when a node holds several stages); and a weight
  // read on both sides of a cut (tied embeddings), sent each micro-batch
  // from its stage to the other, its gradient back.
  auto transferSeconds = [&](int64_t p, int64_t virtuals) {
    if (p == 1)
      return 0.0;
    SmallVector<size_t> cuts = pipelineCheckpoints(forward, activations, p * virtuals);
    auto type = cast<ShapedType>(forward[cuts.front()]->getResult(0).getType());
    double bytes = (double(type.getNumElements()) *
                        double(std::max<unsigned>(8, type.getElementTypeBitWidth()) / 8) +
                    double(weightBytesAcrossCheckpoints(forward, activations, cuts))) /
                   double(devices / p);
    const cost::Link &link = devices / p < perNode ? base.cluster.intraNode
                                                   : base.cluster.interNode;
    double seconds = link.latency + bytes / link.bandwidth;
    for (const cost::Protocol &protocol : link.transfers)
      seconds = std::min(seconds, protocol.latency + bytes / protocol.bandwidth);
    // Interleaved, a micro-batch crosses each stage `virtuals` times.
    return 2.0 * double(microBatches * virtuals) * seconds;
  };

  MLIRContext *context = module.getContext();
  OwningOpRef<ModuleOp> best;
  double bestSeconds = std::numeric_limits<double>::infinity();
  std::vector<Diagnostic> lastFailure;
  bool outOfMemory = false;
  int64_t unfit = 0; // the fewest stages that did not fit after a count that did
  // Searches P stages under `kind` (with `virtuals` chunks a stage when
  // interleaved); keeps the plan when it beats the best so far by the
  // margin, and records what it came to in `result.tried`.
  auto tryCount = [&](int64_t p, plan::PipelineSchedule kind, int64_t virtuals) {
    SearchOptions o = base;
    o.searchMeshShape = true;
    // One device a stage: searched on an axis of 1 for its cost only, the
    // stage left unsplit as a pinned --pp leaves it.
    o.mesh = {{"x", devices / p, AxisRole::Free}};
    // Interleaved, the bubble is 1/virtuals as long (Narayanan et al.
    // 2021, section 2.2).
    double bubble =
        (double(microBatches) + double(p - 1) / double(virtuals)) / double(microBatches);
    // The costliest stage sets the pace: 1/P of the step when the cuts even
    // the stages out, more when the layers do not divide evenly (a CNN's, a
    // GPT's head); interleaved, a stage runs `virtuals` chunks.
    int64_t chunks = p * virtuals;
    double share = p > 1 ? largestStageShare(costs,
                                             pipelineCheckpoints(forward, activations, chunks),
                                             chunks) *
                               double(virtuals)
                         : 1.0;
    o.parameterShare = 1.0 / double(p);
    o.keptShare =
        p > 1 ? double(plan::stashSlots(kind, p, 0, microBatches, virtuals)) / double(p) : 1.0;
    // The search's objective is the whole step on one stage's devices.
    o.costBelow = bestSeconds * (1 - kMargin) / (share * bubble);
    OwningOpRef<ModuleOp> work = module.clone();
    std::vector<Diagnostic> held;
    FailureOr<SearchResult> searched = failure();
    auto began = std::chrono::steady_clock::now();
    {
      ScopedDiagnosticHandler hold(context, [&](Diagnostic &d) {
        held.push_back(std::move(d));
        return success();
      });
      searched = searchShardings(*work, work->lookupSymbol<func::FuncOp>("main"), o);
    }
    StageCandidate tried{p, virtuals, 0, ""};
    tried.searchSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    if (failed(searched)) {
      bool memory = (*work)->hasAttr(attr::kOutOfMemory);
      outOfMemory |= memory;
      if (memory && best && kind == plan::ONE_F_ONE_B && p <= microBatches)
        unfit = p;
      tried.outcome = memory ? "does not fit" : "not faster";
      if (virtuals == 1 && (memory || !best))
        lastFailure = std::move(held);
      result.tried.push_back(tried);
      return;
    }
    tried.stepSeconds =
        (searched->computeSeconds + searched->communicationSeconds) * share * bubble +
        transferSeconds(p, virtuals);
    result.tried.push_back(tried);
    // More stages must win by more than the estimate's noise: their
    // schedule has less slack than the bubble formula assumes.
    if (tried.stepSeconds < bestSeconds * (1 - kMargin)) {
      bestSeconds = tried.stepSeconds;
      best = devices / p > 1 ? std::move(work) : module.clone();
      result.stages = p;
      result.virtualStages = virtuals;
      result.search = *searched;
      result.mesh = devices / p > 1 ? searched->mesh : std::vector<MeshAxisSpec>{};
    }
  };
  for (int64_t p : counts) {
    // Memory per device goes roughly as weights / P + activations x P under
    // 1F1B (its first stage keeps P micro-batches of 1/P of the layers, on
    // 1/P of the devices): once a count that fits is followed by one that
    // does not, more stages do not fit either.
    if (unfit > 0) {
      result.tried.push_back({p, 1, 0, kMoreMemory});
      continue;
    }
    tryCount(p, kind, virtuals);
  }
  // No --schedule: the chosen count interleaved too (2 virtual stages, a
  // bubble half as long for twice the transfers and more activations in
  // flight), where the micro-batches and the places to cut allow it, and
  // where the bubble it saves, less the transfers it adds, could win by
  // the margin at all (the same split inside a stage: a bound that needs
  // no search).
  auto interleavedCouldWin = [&](int64_t p) {
    double m = double(microBatches), ratio = (m + double(p - 1) / 2) / (m + double(p - 1));
    double transfers = transferSeconds(p, 1);
    double saved = (bestSeconds - transfers) * (1 - ratio) - (transferSeconds(p, 2) - transfers);
    return saved > kMargin * bestSeconds;
  };
  if (options.searchSchedule && kind == plan::ONE_F_ONE_B && best && result.stages > 1 &&
      plan::scheduleProblem(plan::INTERLEAVED, result.stages, microBatches, 2).empty() &&
      int64_t(pipelineCheckpoints(forward, activations, 2 * result.stages).size()) + 1 >=
          2 * result.stages) {
    if (interleavedCouldWin(result.stages))
      tryCount(result.stages, plan::INTERLEAVED, 2);
    else
      result.tried.push_back({result.stages, 2, 0, kBubbleTooSmall});
  }
  if (!best) {
    for (Diagnostic &d : lastFailure)
      context->getDiagEngine().emit(std::move(d));
    if (outOfMemory)
      module->setAttr(attr::kOutOfMemory, UnitAttr::get(context));
    std::string counted;
    for (int64_t p : counts)
      counted += (counted.empty() ? "" : ", ") + std::to_string(p);
    return main.emitError() << "(--devices " << devices << " tried " << counted
                            << " pipeline stages: none fits)";
  }
  module.getBodyRegion().takeBody(best->getBodyRegion());
  module->setAttrs((*best)->getAttrDictionary());
  module->setAttr(attr::kPipelineStages,
                  Builder(context).getI64IntegerAttr(result.stages));
  if (result.virtualStages > 1)
    module->setAttr(attr::kPipelineVirtualStages,
                    Builder(context).getI64IntegerAttr(result.virtualStages));
  if (unfit > 0) // a search under a lower limit need not try more
    module->setAttr(attr::kPipelineStagesBelow, Builder(context).getI64IntegerAttr(unfit));
  llvm::sort(result.tried, [](const StageCandidate &a, const StageCandidate &b) {
    return std::pair(a.stages, a.virtualStages) < std::pair(b.stages, b.virtualStages);
  });
  return result;
}

} // namespace dtc
