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
// rules out early. searchStagedStep, the search of one count, cuts the
// stages by the cost model where the FLOP-even cut's do not fit.
// docs/pipeline.md explains.
//
//===----------------------------------------------------------------------===//
#include "compiler/BufferLiveness.h"
#include "compiler/Cancel.h"
#include "compiler/Diagnostics.h"
#include "compiler/MicroBatches.h"
#include "compiler/ShardingSearch.h"
#include "compiler/TrainingStepParts.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"
#include "plan/PipelineSchedule.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/ScopeExit.h"

#include <chrono>
#include <future>
#include <map>
#include <variant>

using namespace mlir;

namespace dtc {

namespace {

constexpr double kMargin = kStageMargin;

/// Fewer stages with replicas are weighed only when the costliest of P
/// stages takes this much more than their mean.
constexpr double kUnevenStages = 1.1;

/// The training step at one micro-batch count, and what the stage search
/// reads of it: its forward, the forward's per-op costs, where it can be
/// cut.
struct Step {
  explicit Step(ModuleOp module, OwningOpRef<ModuleOp> owned = {})
      : owned(std::move(owned)), module(module),
        main(module.lookupSymbol<func::FuncOp>("main")),
        microBatches(microBatchesOf(main)), samples(batchSamplesOf(main)),
        forward(forwardOps(main.getBody().front())), activations(main.getBody().front()),
        costs(forwardCosts(forward)) {}

  SmallVector<size_t> cuts(int64_t chunks) const {
    return pipelineCheckpoints(forward, activations, chunks);
  }

  OwningOpRef<ModuleOp> owned; // null for the module the pass runs on
  ModuleOp module;
  func::FuncOp main;
  int64_t microBatches, samples;
  llvm::SetVector<Operation *> forward;
  Activations activations;
  SmallVector<double> costs;
};

} // namespace

FailureOr<SearchResult> searchStagedStep(ModuleOp module, func::FuncOp main,
                                         SearchOptions search, const StageCutOptions &cuts) {
  MLIRContext *context = module.getContext();
  std::vector<Diagnostic> held;
  auto searchHeld = [&](ModuleOp m, func::FuncOp f, const SearchOptions &o, bool keep) {
    ThreadDiagnosticHandler hold(context, [&](Diagnostic &d) {
      if (keep)
        held.push_back(std::move(d));
      return success();
    });
    return searchShardings(m, f, o);
  };
  auto given = [&](FailureOr<SearchResult> result) {
    for (Diagnostic &d : held)
      context->getDiagEngine().emit(std::move(d));
    return result;
  };
  FailureOr<SearchResult> result = searchHeld(module, main, search, true);
  if (succeeded(result) || !module->hasAttr(attr::kOutOfMemory) || cuts.evenFlops)
    return given(result);
  // The average stage of a cut that evens out memory: a P-th of the
  // weights, and of the activations the stages keep in flight together.
  OwningOpRef<ModuleOp> copy = module.clone();
  auto average = copy->lookupSymbol<func::FuncOp>("main");
  SearchOptions shares = search;
  shares.stageMemory = nullptr;
  double inFlight = 0;
  for (int64_t s = 0; s < cuts.stages; ++s)
    inFlight += plan::stashedMicroBatches(cuts.schedule, cuts.stages, s, cuts.microBatches,
                                          cuts.virtualStages);
  shares.parameterShare = 1.0 / double(cuts.stages);
  shares.keptShare = inFlight / double(cuts.stages * cuts.stages);
  FailureOr<SearchResult> figured = searchHeld(*copy, average, shares, false);
  if (failed(figured))
    return given(failure());
  std::optional<StageCut> cut = cutStages(average, figured->opFigures, cuts);
  if (!cut || !cut->fits || !cut->byCosts)
    return given(failure());
  markStageEnds(main, *cut);
  search.stageMemory = StageMemory::of(main, cuts.stages, cuts.virtualStages, cuts.schedule,
                                       cuts.microBatches);
  module->removeAttr(attr::kOutOfMemory);
  result = searchHeld(module, main, search, false);
  if (failed(result)) {
    module->setAttr(attr::kOutOfMemory, UnitAttr::get(context));
    return given(failure());
  }
  return result;
}

FailureOr<PipelineSearchResult> searchPipelineStages(ModuleOp module,
                                                     const ParallelOptions &options,
                                                     const SearchOptions &base) {
  int64_t devices = options.devices();
  plan::PipelineSchedule kind =
      plan::scheduleNamed(options.pipelineSchedule).value_or(plan::ONE_F_ONE_B);
  // Interleaved: each stage runs `virtuals` chunks of the layers.
  int64_t virtuals = kind == plan::INTERLEAVED ? std::max<int64_t>(1, options.virtualStages) : 1;
  int64_t perNode = std::max<int64_t>(1, base.cluster.devicesPerNode);
  // --dp / --tp given with --devices: every stage's mesh keeps those axes,
  // the rest of its devices one searched axis; a count whose stage they
  // do not divide is not searched.
  std::vector<MeshAxisSpec> pins;
  int64_t pinned = 1;
  for (const MeshAxisSpec &axis : base.mesh)
    if (axis.role != AxisRole::Free) {
      pins.push_back(axis);
      pinned *= axis.size;
    }
  auto stageTakesPins = [&](int64_t p) { return devices % p == 0 && (devices / p) % pinned == 0; };

  // The step as given, and, when --micro-batches was not given, the step
  // built again for each stage count's micro-batch count (microBatchesFor:
  // a sample per data-parallel rank); one stage runs the step as given
  // (see tryStages).
  std::map<int64_t, std::unique_ptr<Step>> steps;
  Step &given = *steps.emplace(0, std::make_unique<Step>(module)).first->second;
  int64_t batch = given.samples * given.microBatches;
  bool chooseMicroBatches = bool(options.stepWithMicroBatches);
  auto microBatchesAt = [&](int64_t p) {
    return chooseMicroBatches && p > 1
               ? microBatchesFor(batch, devices / p, perNode, options.dataParallel)
               : given.microBatches;
  };
  // Counts the model does not take (an export's reshapes fixing the
  // batch), with why.
  std::map<int64_t, std::string> refusedCounts;
  auto stepWith = [&](int64_t m) -> Step * {
    if (m == given.microBatches)
      return &given;
    if (auto found = steps.find(m); found != steps.end())
      return found->second.get();
    if (refusedCounts.count(m))
      return nullptr;
    std::string refused;
    FailureOr<OwningOpRef<ModuleOp>> built = options.stepWithMicroBatches(m, refused);
    if (failed(built)) {
      if (!refused.empty())
        refusedCounts[m] = refused;
      return nullptr;
    }
    ModuleOp step = **built;
    return steps.emplace(m, std::make_unique<Step>(step, std::move(*built)))
        .first->second.get();
  };

  // The stage counts worth a search: each divides the devices; the model
  // has layer boundaries for it; and a stage's devices are no more than
  // its micro-batch's samples times a node's devices (beyond that data
  // and node-bound tensor parallelism leave devices idle), unless no count
  // is that small.
  PipelineSearchResult result;
  result.samples = chooseMicroBatches ? batch : given.samples;
  result.microBatchesSearched = chooseMicroBatches;
  std::vector<int64_t> counts;
  auto cutsAllow = [&](int64_t p) {
    return p == 1 || int64_t(given.cuts(p * virtuals).size()) + 1 >= p * virtuals;
  };
  for (int64_t p = 1; p <= devices; ++p) {
    if (!stageTakesPins(p))
      continue;
    if (options.pipelineStagesBelow > 0 && p >= options.pipelineStagesBelow)
      break;
    if (!cutsAllow(p))
      break;
    if (p > 1 && !plan::scheduleProblem(kind, p, microBatchesAt(p), virtuals).empty())
      continue; // interleaved: the micro-batches are not groups of p
    if (devices / p > batch / microBatchesAt(p) * perNode && p < devices) {
      result.tried.push_back({p, 1, 0, kIdle});
      continue;
    }
    counts.push_back(p);
  }
  if (counts.empty()) // every count leaves devices idle: the most stages
    for (int64_t p = devices; p >= 1; --p)
      if (stageTakesPins(p) && cutsAllow(p) &&
          (p == 1 || plan::scheduleProblem(kind, p, microBatchesAt(p), virtuals).empty())) {
        counts.push_back(p);
        llvm::erase_if(result.tried, [&](const StageCandidate &c) { return c.stages == p; });
        break;
      }

  // What crosses a cut: the main activation forward, its gradient back,
  // once per micro-batch each, a rank's share of it (StageCuts.h's
  // stageTransfer; the stage cut counts these itself: `tiedOnly`); and a
  // weight read on both sides of a cut (tied embeddings), sent each
  // micro-batch from its stage to the other, its gradient back.
  auto transferSeconds = [&](const Step &step, int64_t p, int64_t virtuals,
                             bool tiedOnly = false) {
    if (p == 1)
      return 0.0;
    SmallVector<size_t> cuts = step.cuts(p * virtuals);
    double bytes =
        double(weightBytesAcrossCheckpoints(step.forward, step.activations, cuts)) +
        (tiedOnly ? 0.0 : double(tensorBytes(step.forward[cuts.front()]->getResult(0))));
    if (bytes == 0)
      return 0.0;
    // Interleaved, a micro-batch crosses each stage `virtuals` times.
    return 2.0 * double(step.microBatches * virtuals) *
           stageTransfer(base.cluster, devices / p)(bytes);
  };

  MLIRContext *context = module.getContext();
  // Replicated stages do not exchange once-a-step values (the global
  // gradient norm of --clip-norm): not weighed then.
  // Nor do they keep running statistics (batch norms') over the whole
  // step's micro-batches.
  bool noReplicas = false;
  if (auto training = given.main->getAttrOfType<DictionaryAttr>(attr::kTraining)) {
    if (auto clip = training.getAs<FloatAttr>("clip_norm"))
      noReplicas = clip.getValueAsDouble() > 0;
    if (auto running = training.getAs<IntegerAttr>("running_statistics"))
      noReplicas |= running.getInt() > 0;
  }
  OwningOpRef<ModuleOp> best;
  Step *bestStep = nullptr;
  double bestSeconds = std::numeric_limits<double>::infinity();
  std::vector<Diagnostic> lastFailure;
  int64_t lastFailureStages = 0;
  bool outOfMemory = false;
  int64_t unfit = 0; // the fewest stages that did not fit after a count that did
  // The best count by its step without replicas (result.unreplicated):
  // the plan a replicated pick is checked against.
  struct Unreplicated {
    StageCandidate candidate;
    Step *step = nullptr;
  } plain;
  plain.candidate.stepSeconds = std::numeric_limits<double>::infinity();
  // What trying a count came to. kRefused: the model does not take the
  // count's micro-batches.
  enum Outcome { kChosen, kSlower, kUnfit, kUnbuilt, kRefused };
  // A count's search, before it is weighed against the others (commit):
  // what evaluate reads is fixed when it is called (the bound it searches
  // under, `toBeat`), so that it may run on another thread.
  struct Evaluation {
    int64_t p = 1, virtuals = 1, m = 1;
    bool refine = false;
    Step *step = nullptr;
    StageCandidate tried;
    OwningOpRef<ModuleOp> work;
    FailureOr<SearchResult> searched = failure();
    std::vector<Diagnostic> held;
    std::optional<StageCut> cut;
    double unreplicated = 0;
  };
  // `refine`: the chosen count again, CBC closing what rounding left.
  // `toBeat`: the step its search must beat (by the margin).
  auto evaluate = [&, context](Step *step, int64_t p, plan::PipelineSchedule kind,
                               int64_t virtuals, bool refine, double toBeat) {
    auto began = std::chrono::steady_clock::now();
    Evaluation e;
    e.p = p;
    e.virtuals = virtuals;
    e.m = step->microBatches;
    e.refine = refine;
    e.step = step;
    int64_t m = e.m;
    SearchOptions o = base;
    o.searchMeshShape = true;
    // Counts are compared on their relaxations rounded: CBC, which runs
    // to its time limit where it cannot close a gap, only on the one
    // chosen (refine).
    o.roundingOnly = !refine;
    // One device a stage: searched on an axis of 1 for its cost only, the
    // stage left unsplit as a pinned --pp leaves it.
    o.mesh = pins;
    if (pins.empty() || devices / p / pinned > 1)
      o.mesh.push_back({"x", devices / p / pinned, AxisRole::Free});
    // Interleaved, the bubble is 1/virtuals as long (Narayanan et al.
    // 2021, section 2.2).
    double bubble = (double(m) + double(p - 1) / double(virtuals)) / double(m);
    // The costliest stage sets the pace: 1/P of the step when the cuts even
    // the stages out, more when the layers do not divide evenly (a CNN's, a
    // GPT's head); interleaved, a stage runs `virtuals` chunks.
    int64_t chunks = p * virtuals;
    double share =
        p > 1 ? largestStageShare(step->costs, step->cuts(chunks), chunks) * double(virtuals)
              : 1.0;
    o.parameterShare = 1.0 / double(p);
    o.keptShare = p > 1 ? plan::stashedMicroBatches(kind, p, 0, m, virtuals) / double(p) : 1.0;
    // The search's objective is the whole step on one stage's devices.
    // Fewer stages with replicas (below) can even out what P stages
    // cannot: then the costliest copy's share may be as low as 1/P.
    bool replicable = p > 2 && virtuals == 1 && kind != plan::INTERLEAVED && m > 1 &&
                      !options.stageCutsByFlops && options.searchStageReplicas &&
                      !noReplicas;
    double boundShare = replicable ? std::min(share, 1.0 / double(p)) : share;
    o.costBelow = refine ? std::numeric_limits<double>::infinity()
                         : toBeat * (1 - kMargin) / (boundShare * bubble);
    e.work = step->module.clone();
    if (p > 1)
      o.stageMemory =
          StageMemory::of(e.work->lookupSymbol<func::FuncOp>("main"), p, virtuals, kind, m);
    StageCutOptions cuts{nullptr,
                         p,
                         virtuals,
                         kind,
                         m,
                         base.memoryLimit,
                         options.stageCutsByFlops,
                         stageTransfer(base.cluster, devices / p)};
    {
      ThreadDiagnosticHandler hold(context, [&](Diagnostic &d) {
        e.held.push_back(std::move(d));
        return success();
      });
      auto workMain = e.work->lookupSymbol<func::FuncOp>("main");
      e.searched = p > 1 ? searchStagedStep(*e.work, workMain, o, cuts)
                         : searchShardings(*e.work, workMain, o);
    }
    e.tried = StageCandidate{p, virtuals, 0, ""};
    e.tried.microBatches = m;
    auto done = [&] {
      e.tried.searchSeconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      return std::move(e);
    };
    if (failed(e.searched))
      return done();
    const SearchResult &searched = *e.searched;
    // The stages' ends by the search's own figures (StageCuts.h): the
    // costliest stage's step, bubble included.
    std::optional<StageCut> &cut = e.cut;
    // This step and its figures are cut again below (fewer stages,
    // replicated): what the cuts read of them is kept.
    cuts.cache = std::make_shared<StageCutCache>();
    if (p > 1)
      cut = cutStages(e.work->lookupSymbol<func::FuncOp>("main"), searched.opFigures, cuts);
    // Fewer stages on the same P copies of the stage mesh, a costlier
    // stage on more of them (PipeDream's stage replication: each replica
    // runs 1 micro-batch in its count): where the layers do not divide
    // into P even stages, as a GPT whose head outweighs a layer.
    // Only where the P stages are uneven: replicas share a costlier
    // stage's micro-batches, which even stages have none of.
    auto uneven = [](const StageCut &c) {
      double total = 0;
      for (double t : c.seconds)
        total += t;
      return c.stepSeconds > kUnevenStages * total / double(c.seconds.size());
    };
    e.unreplicated =
        cut ? cut->stepSeconds + transferSeconds(*step, p, virtuals, /*tiedOnly=*/true)
            : (searched.computeSeconds + searched.communicationSeconds) * share * bubble +
                  transferSeconds(*step, p, virtuals);
    if (cut && replicable && uneven(*cut)) {
      StageCutOptions fewer = cuts;
      fewer.copies = p;
      fewer.replicaReduce = replicaReduce(base.cluster, devices / p);
      for (int64_t q = p - 1; q >= 2; --q) {
        fewer.stages = q;
        std::optional<StageCut> replicated =
            cutStages(e.work->lookupSymbol<func::FuncOp>("main"), searched.opFigures, fewer);
        if (replicated && replicated->fits &&
            replicated->stepSeconds < cut->stepSeconds * (1 - kMargin))
          cut = replicated;
      }
    }
    e.tried.stepSeconds =
        cut ? cut->stepSeconds + transferSeconds(*step, p, virtuals, /*tiedOnly=*/true)
            : e.unreplicated;
    if (cut)
      e.tried.replicas = cut->replicas;
    if (!e.tried.replicas.empty())
      e.tried.unreplicatedSeconds = e.unreplicated;
    return done();
  };
  // What a count came to, weighed against the best so far: kept when it
  // beats it by the margin; recorded in `result.tried`.
  auto commit = [&](Evaluation e) -> Outcome {
    int64_t p = e.p, virtuals = e.virtuals, m = e.m;
    Step *step = e.step;
    StageCandidate &tried = e.tried;
    std::optional<StageCut> &cut = e.cut;
    if (failed(e.searched) && e.refine)
      return kSlower; // the rounded plan stays
    if (failed(e.searched)) {
      bool memory = (*e.work)->hasAttr(attr::kOutOfMemory);
      outOfMemory |= memory;
      tried.outcome = memory ? "does not fit" : "not faster";
      // Nothing fitting, the message is the most stages' (the least
      // memory a device).
      if (virtuals == 1 && (memory || !best) && p >= lastFailureStages) {
        lastFailure = std::move(e.held);
        lastFailureStages = p;
      }
      result.tried.push_back(tried);
      return memory ? kUnfit : kSlower;
    }
    const SearchResult &searched = *e.searched;
    if (!e.refine && e.unreplicated < plain.candidate.stepSeconds * (1 - kMargin)) {
      plain.candidate = {p, virtuals, e.unreplicated, "", 0, m, {}};
      plain.step = step;
    }
    if (e.refine) {
      for (StageCandidate &c : result.tried)
        if (c.stages == p && c.virtualStages == virtuals && c.microBatches == m &&
            c.outcome.empty()) {
          c.searchSeconds += tried.searchSeconds;
          if (tried.stepSeconds < c.stepSeconds)
            c.stepSeconds = tried.stepSeconds;
        }
      if (tried.stepSeconds < bestSeconds) {
        bestSeconds = tried.stepSeconds;
        best = devices / p > 1 ? std::move(e.work) : step->module.clone();
        result.search = searched;
        result.mesh = devices / p > 1 ? searched.mesh : std::vector<MeshAxisSpec>{};
        result.cut = cut;
        result.replicas = tried.replicas;
        result.stages = cut && !cut->replicas.empty() ? int64_t(cut->replicas.size()) : p;
      }
      return kChosen;
    }
    result.tried.push_back(tried);
    // More stages must win by more than the estimate's noise: their
    // schedule has less slack than the bubble formula assumes.
    if (tried.stepSeconds < bestSeconds * (1 - kMargin)) {
      bestSeconds = tried.stepSeconds;
      best = devices / p > 1 ? std::move(e.work) : step->module.clone();
      bestStep = step;
      result.replicas = tried.replicas;
      result.stages = cut && !cut->replicas.empty() ? int64_t(cut->replicas.size()) : p;
      result.virtualStages = virtuals;
      result.microBatches = m;
      result.search = searched;
      result.mesh = devices / p > 1 ? searched.mesh : std::vector<MeshAxisSpec>{};
      result.cut = cut;
      return kChosen;
    }
    return kSlower;
  };
  // The step for `m` micro-batches, or why not: kRefused (recorded in
  // `result.tried`) where the model does not take them, kUnbuilt where
  // the builder failed.
  auto prepare = [&](int64_t p, int64_t virtuals, int64_t m) -> std::variant<Step *, Outcome> {
    if (compileCancelled())
      return kUnbuilt;
    Step *step = stepWith(m);
    if (!step && refusedCounts.count(m)) {
      // The importer's message names the model first: once is enough.
      llvm::StringRef why = refusedCounts[m];
      if (size_t colon = why.find(": ");
          colon != llvm::StringRef::npos && why.take_front(colon).ends_with(".onnx"))
        why = why.drop_front(colon + 2);
      std::string samples =
          std::to_string(batch / m) + (batch / m == 1 ? " sample" : " samples");
      StageCandidate tried{p, virtuals, 0,
                           "not built: the model does not take micro-batches of " + samples +
                               " (" + why.str() + ")"};
      tried.microBatches = m;
      result.tried.push_back(tried);
      return kRefused;
    }
    if (!step)
      return kUnbuilt;
    return step;
  };
  // Searches P stages under `kind` (with `virtuals` chunks a stage when
  // interleaved) and weighs the plan.
  auto tryCount = [&](int64_t p, plan::PipelineSchedule kind, int64_t virtuals, int64_t m,
                      bool refine = false,
                      std::optional<double> toBeat = std::nullopt) -> Outcome {
    std::variant<Step *, Outcome> step = prepare(p, virtuals, m);
    if (auto *outcome = std::get_if<Outcome>(&step))
      return *outcome;
    return commit(evaluate(std::get<Step *>(step), p, kind, virtuals, refine,
                           toBeat.value_or(bestSeconds)));
  };
  // The counts in the order searched: from the fewest stages whose
  // weights and optimizer state fit when a node's devices split them, up
  // while the predicted step shrinks, then down from there while it
  // shrinks. The step over stage counts is taken as having one minimum
  // (the bubble, transfers and the stages' imbalance grow with P; each
  // device's weights and data-parallel traffic shrink), so a count past a
  // slower one is not searched; a count that does not fit ends the way
  // down (fewer stages hold more weights). docs/pipeline.md explains.
  double stateBytes = 0;
  given.main.walk([&](graph::ParameterOp op) {
    auto type = cast<ShapedType>(op.getType());
    stateBytes += double(type.getNumElements()) *
                  double(std::max<unsigned>(8, type.getElementTypeBitWidth()) / 8);
  });
  size_t start = 0;
  while (start + 1 < counts.size() &&
         stateBytes / double(counts[start] * std::min(perNode, devices / counts[start])) >
             base.memoryLimit)
    ++start;
  auto skip = [&](size_t from, size_t to, const char *why) {
    for (size_t i = from; i < to; ++i)
      result.tried.push_back({counts[i], 1, 0, why});
  };
  // One stage: the batch whole, or, chosen and that does not fit, in
  // micro-batches of a sample a device (data parallelism over them all,
  // a micro-batch's activations at a time).
  auto orSmallerMicroBatches = [&](int64_t p, Outcome outcome) {
    if (int64_t m = microBatchesFor(batch, devices, 1, devices);
        p == 1 && chooseMicroBatches && outcome == kUnfit && m != given.microBatches)
      outcome = tryCount(p, kind, virtuals, m);
    return outcome;
  };
  auto tryStages = [&](int64_t p) {
    return orSmallerMicroBatches(p, tryCount(p, kind, virtuals, microBatchesAt(p)));
  };
  // While the way up searches a count, the next count up is searched
  // beside it: on another thread where the context allows threads, else
  // when its turn comes. Either way under the bound of the best before the
  // count beside it, so that the plan and its notes do not depend on the
  // machine. The way up stops at the first count slower than the best; the
  // search ahead is then stopped and forgotten.
  std::atomic<bool> stopAhead{false};
  struct Ahead {
    size_t index;
    std::future<Evaluation> evaluation;
  };
  std::optional<Ahead> ahead;
  bool threads = context->isMultithreadingEnabled();
  const std::atomic<bool> *cancelled = compileCancelFlag();
  auto settleAhead = [&] {
    if (!ahead)
      return;
    stopAhead = true;
    if (threads && ahead->evaluation.valid())
      ahead->evaluation.wait();
    ahead.reset();
    stopAhead = false;
  };
  auto settled = llvm::make_scope_exit(settleAhead);
  auto launchAhead = [&](size_t i) {
    int64_t p = counts[i];
    Step *step = nullptr;
    {
      // A step that does not build is built again, and said so, in turn.
      ThreadDiagnosticHandler quiet(context, [](Diagnostic &) { return success(); });
      step = stepWith(microBatchesAt(p));
    }
    if (!step || compileCancelled())
      return;
    double toBeat = bestSeconds;
    auto run = [&evaluate, &stopAhead, cancelled, step, p, kind, virtuals, toBeat,
                onThread = threads] {
      if (onThread)
        setCompileCancelFlag(&stopAhead, cancelled);
      Evaluation e = evaluate(step, p, kind, virtuals, /*refine=*/false, toBeat);
      if (onThread)
        setCompileCancelFlag(nullptr);
      return e;
    };
    ahead = Ahead{i, std::async(threads ? std::launch::async : std::launch::deferred, run)};
  };
  for (size_t i = start; i < counts.size(); ++i) {
    int64_t p = counts[i];
    std::optional<std::future<Evaluation>> mine;
    if (ahead && ahead->index == i) {
      mine = std::move(ahead->evaluation);
      ahead.reset();
    }
    if (i + 1 < counts.size())
      launchAhead(i + 1);
    Outcome outcome = mine ? orSmallerMicroBatches(p, commit(mine->get())) : tryStages(p);
    if (outcome == kUnbuilt)
      return failure(); // the step's builder said why
    if (outcome == kRefused)
      continue; // `tried` says why
    // Memory per device goes roughly as weights / P + activations x P under
    // 1F1B with M micro-batches given (its first stage keeps P
    // micro-batches of 1/P of the layers, on 1/P of the devices): once a
    // count that fits is followed by one that does not, more stages do not
    // fit either. With the micro-batches chosen per count, a micro-batch
    // shrinks as P grows: not so.
    if (outcome == kUnfit && best && !chooseMicroBatches && kind == plan::ONE_F_ONE_B &&
        p <= given.microBatches) {
      unfit = p;
      skip(i + 1, counts.size(), kMoreMemory);
      break;
    }
    if (outcome == kSlower && best) {
      skip(i + 1, counts.size(), kPastSlower);
      break;
    }
  }
  settleAhead();
  for (size_t i = start; i-- > 0;) {
    Outcome outcome = tryStages(counts[i]);
    if (outcome == kUnbuilt)
      return failure();
    if (outcome == kRefused)
      continue;
    if (outcome != kChosen) {
      skip(0, i, outcome == kUnfit ? kFewerUnfit : kPastSlower);
      break;
    }
  }
  // No --schedule: the chosen count interleaved too (2 virtual stages, a
  // bubble half as long for twice the transfers and more activations in
  // flight), where the micro-batches and the places to cut allow it, and
  // where the bubble it saves, less the transfers it adds, could win by
  // the margin at all (the same split inside a stage: a bound that needs
  // no search).
  auto interleavedCouldWin = [&](const Step &step, int64_t p, double seconds) {
    double m = double(step.microBatches), ratio = (m + double(p - 1) / 2) / (m + double(p - 1));
    double transfers = transferSeconds(step, p, 1);
    double saved =
        (seconds - transfers) * (1 - ratio) - (transferSeconds(step, p, 2) - transfers);
    return saved > kMargin * seconds;
  };
  // The copies of the stage mesh the chosen plan runs on (its stages, or
  // their replicas).
  auto chosenCopies = [&] {
    int64_t copies = 0;
    for (int64_t r : result.replicas)
      copies += r;
    return result.replicas.empty() ? result.stages : copies;
  };
  // Replicated stages chosen: the count without them (their check's
  // plan) is the one tried interleaved.
  Step *flat = result.replicas.empty() ? bestStep : plain.step;
  int64_t flatStages = result.replicas.empty() ? result.stages : plain.candidate.stages;
  double flatSeconds = result.replicas.empty() ? bestSeconds : plain.candidate.stepSeconds;
  if (options.searchSchedule && kind == plan::ONE_F_ONE_B && best && flat && flatStages > 1 &&
      plan::scheduleProblem(plan::INTERLEAVED, flatStages, flat->microBatches, 2).empty() &&
      int64_t(flat->cuts(2 * flatStages).size()) + 1 >= 2 * flatStages) {
    if (!interleavedCouldWin(*flat, flatStages, flatSeconds))
      result.tried.push_back({flatStages, 2, 0, kBubbleTooSmall, 0, flat->microBatches});
    else if (tryCount(flatStages, plan::INTERLEAVED, 2, flat->microBatches, false,
                      flatSeconds) == kUnbuilt)
      return failure();
  }
  if (!result.replicas.empty() && plain.step)
    result.unreplicated = plain.candidate;
  if (best && result.search.unsettled &&
      tryCount(chosenCopies(), result.virtualStages > 1 ? plan::INTERLEAVED : kind,
               result.virtualStages, result.microBatches, /*refine=*/true) == kUnbuilt)
    return failure();
  if (!best) {
    for (Diagnostic &d : lastFailure)
      context->getDiagEngine().emit(std::move(d));
    if (outOfMemory)
      module->setAttr(attr::kOutOfMemory, UnitAttr::get(context));
    std::string counted;
    for (int64_t p : counts)
      counted += (counted.empty() ? "" : ", ") + std::to_string(p);
    bool one = counts.size() == 1 && counts.front() == 1;
    return given.main.emitError() << "(--devices " << devices << " tried " << counted
                                  << (one ? " pipeline stage" : " pipeline stages")
                                  << ": none fits)";
  }
  module.getBodyRegion().takeBody(best->getBodyRegion());
  // The module's own attributes (the cluster the search costed on) stay;
  // a step built again for other micro-batches has not got them.
  NamedAttrList attributes(module->getAttrDictionary());
  for (NamedAttribute a : (*best)->getAttrs())
    attributes.set(a.getName(), a.getValue());
  module->setAttrs(attributes.getDictionary(context));
  module->setAttr(attr::kPipelineStages,
                  Builder(context).getI64IntegerAttr(result.stages));
  if (!result.replicas.empty())
    module->setAttr(attr::kPipelineReplicas,
                    Builder(context).getDenseI64ArrayAttr(result.replicas));
  // Positions in the forward: the same in the module searched and in the
  // step it was copied from.
  if (result.cut)
    markStageEnds(module.lookupSymbol<func::FuncOp>("main"), *result.cut);
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
