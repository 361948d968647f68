//===- ShardingSearchPass.cpp - dtc-sharding-search -----------------------===//
//
// The pass around the search (ShardingSearch.cpp): the mesh from what the
// user pinned, the cluster the plans are costed on, and the notes that say
// what was decided.
//
//===----------------------------------------------------------------------===//
#include "compiler/CompileNotes.h"
#include "compiler/Diagnostics.h"
#include "compiler/MicroBatches.h"
#include "plan/PipelineSchedule.h"
#include "compiler/Passes.h"
#include "compiler/SearchGraph.h"
#include "compiler/ShardingSearch.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphDialect.h"
#include "plan/FormatBytes.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <cmath>
#include <limits>

namespace dtc {
#define GEN_PASS_DEF_SHARDINGSEARCH
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {

int64_t ParallelOptions::devices() const {
  int64_t n = 1;
  for (int64_t size : mesh)
    n *= size;
  return std::max(n, std::max<int64_t>(1, dataParallel) * std::max<int64_t>(1, tensorParallel));
}

std::optional<cost::Cluster> ParallelOptions::loadCluster(std::string &error) const {
  if (cluster)
    return cluster;
  return clusterFile.empty() ? cost::preset(preset, error) : cost::loadCluster(clusterFile, error);
}

std::vector<MeshAxisSpec> meshAxes(const ParallelOptions &p) {
  std::vector<MeshAxisSpec> axes;
  if (p.dataParallel > 1)
    axes.push_back({"dp", p.dataParallel, AxisRole::Data});
  if (p.tensorParallel > 1)
    axes.push_back({"tp", p.tensorParallel, AxisRole::Tensor});
  int64_t pinned = 1;
  for (const MeshAxisSpec &a : axes)
    pinned *= a.size;
  if (axes.empty()) {
    static const char *kNames[] = {"x", "y", "z", "w"};
    for (auto [i, size] : llvm::enumerate(p.mesh))
      if (size > 1)
        axes.push_back({i < 4 ? kNames[i] : "a" + std::to_string(i), size, AxisRole::Free});
  } else if (p.devices() / pinned > 1) {
    axes.push_back({"x", p.devices() / pinned, AxisRole::Free});
  }
  return axes;
}

namespace {

/// `axes` as given (free axes say "searched", pins name their flag), or the
/// shape the search chose for --devices.
std::string meshNote(const std::vector<MeshAxisSpec> &given, const ParallelOptions &p,
                     const SearchResult &r) {
  const std::vector<MeshAxisSpec> &axes = r.meshSearched ? r.mesh : given;
  std::string text = "mesh: ", pinned;
  for (const MeshAxisSpec &a : axes) {
    text += (text.size() > 6 ? " x " : "") + a.name + "=" + std::to_string(a.size);
    if (a.role != AxisRole::Free)
      pinned += std::string(pinned.empty() ? "" : ", ") + "--" + a.name;
  }
  // --dp / --tp with --devices: their axes pinned, the rest searched.
  std::string flags = p.dataParallel > 1 ? "--dp" : "";
  if (p.tensorParallel > 1)
    flags += (flags.empty() ? "" : ", ") + std::string("--tp");
  std::vector<std::string> sizes;
  for (int64_t n : p.mesh)
    sizes.push_back(std::to_string(n));
  // Pinned stages: --devices counted every stage's (p.mesh is one copy's).
  int64_t copies = std::max<int64_t>(1, p.pipelineStages);
  if (!p.stageReplicas.empty()) {
    copies = 0;
    for (int64_t n : p.stageReplicas)
      copies += n;
  }
  std::string devices = std::to_string(p.devices() * copies);
  if (r.meshSearched && !p.searchMeshShape)
    text += " (searched: the devices of --mesh " + llvm::join(sizes, "x") + " as one axis)";
  else if (r.meshSearched && !flags.empty())
    text += " (" + flags + " pinned, the rest searched from --devices " + devices + ")";
  else if (r.meshSearched)
    text += " (searched from --devices " + devices + ")";
  else
    text += pinned.empty() ? " (searched)" : " (pinned by " + pinned + ")";
  if (p.zero >= 0)
    text += ", ZeRO stage " + std::to_string(p.zero) + " pinned";
  if (!p.sequenceParallel)
    text += ", activations whole along the sequence (--no-sequence-parallel)";
  text += "; " + std::to_string(r.splitParameters) + " of " + std::to_string(r.parameters) +
          " parameters split";
  for (const std::string &idle : r.idleAxes)
    text += "; warning: nothing is split over " + idle + ": its devices all repeat the same work";
  return text;
}

/// The pipeline stages --devices chose, and what each count tried came to.
std::string stagesNote(const ParallelOptions &p, const PipelineSearchResult &r) {
  auto plural = [](int64_t n, const char *what) {
    return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
  };
  int64_t copies = 0;
  for (int64_t n : r.replicas)
    copies += n;
  auto replicasText = [](const std::vector<int64_t> &replicas) {
    std::string text;
    for (int64_t n : replicas)
      text += (text.empty() ? "" : ",") + std::to_string(n);
    return text;
  };
  std::string text =
      "pipeline: " + plural(r.stages, "stage") +
      (r.replicas.empty()
           ? " of " + plural(p.devices() / r.stages, "device")
           : " on " + std::to_string(copies) + " copies of " +
                 plural(p.devices() / copies, "device") + " (stage replicas " +
                 replicasText(r.replicas) + ": a costlier stage on more copies)") +
      ", searched from --devices " +
                     std::to_string(p.devices()) + " (predicted step with the " +
                     p.pipelineSchedule + " bubble and transfers:";
  std::string idle, more, past, fewer;
  double seconds = 0;
  auto list = [](std::string &to, int64_t stages) {
    to += (to.empty() ? "" : ", ") + std::to_string(stages);
  };
  // Counts tried, in order; neighbours that came to the same untimed
  // outcome (not built, for the same reason) share one entry: "2, 4 and 8
  // stages (8 micro-batches) not built: ...".
  struct Entry {
    std::vector<int64_t> counts;
    std::string head, rest; // head: a replicated count's own text
  };
  std::vector<Entry> entries;
  for (const StageCandidate &c : r.tried) {
    seconds += c.searchSeconds;
    if (c.outcome == kIdle) {
      list(idle, c.stages);
      continue;
    }
    if (c.outcome == kMoreMemory) {
      list(more, c.stages);
      continue;
    }
    if (c.outcome == kPastSlower) {
      list(past, c.stages);
      continue;
    }
    if (c.outcome == kFewerUnfit) {
      list(fewer, c.stages);
      continue;
    }
    std::string head = c.replicas.empty() ? ""
                                          : std::to_string(c.stages) + " copies as " +
                                                plural(int64_t(c.replicas.size()), "stage") +
                                                " replicated " + replicasText(c.replicas);
    std::string rest =
        (c.virtualStages > 1
             ? " interleaved (" + std::to_string(c.virtualStages) + " virtual stages each) "
             : " ") +
        (r.microBatchesSearched && c.outcome != kBubbleTooSmall
             ? "(" + std::to_string(c.microBatches) +
                   (c.microBatches == 1 ? " micro-batch) " : " micro-batches) ")
             : std::string()) +
        (c.outcome.empty() ? formatSeconds(c.stepSeconds) : c.outcome) +
        ((r.replicas.empty() ? c.stages == r.stages && c.replicas.empty()
                             : c.replicas == r.replicas) &&
                 c.virtualStages == r.virtualStages && c.microBatches == r.microBatches &&
                 c.outcome.empty()
             ? " (chosen)"
             : "");
    if (!c.outcome.empty() && head.empty() && !entries.empty() &&
        entries.back().head.empty() && entries.back().rest == rest)
      entries.back().counts.push_back(c.stages);
    else
      entries.push_back({{c.stages}, head, rest});
  }
  for (const Entry &e : entries) {
    std::string counts;
    for (size_t i = 0; i < e.counts.size(); ++i)
      counts += (i == 0 ? "" : i + 1 == e.counts.size() ? " and " : ", ") +
                std::to_string(e.counts[i]);
    text += " " +
            (e.head.empty() ? counts + (e.counts.size() == 1 && e.counts[0] == 1 ? " stage"
                                                                                  : " stages")
                            : e.head) +
            e.rest + ",";
  }
  text.pop_back();
  if (!idle.empty())
    text += "; " + idle + " not tried: a stage's devices would outnumber a micro-batch's " +
            plural(r.samples, "sample") + " times a node's " +
            plural(p.cluster->devicesPerNode, "device");
  if (p.pipelineStagesBelow > 0)
    text += "; " + std::to_string(p.pipelineStagesBelow) +
            " or more not tried: an earlier search's plan with them did not fit";
  if (!more.empty())
    text += "; " + more + " not tried: more stages than a count that does not fit keep more "
                          "activations";
  if (!past.empty())
    text += "; " + past + " not tried: past a count predicted slower";
  if (!fewer.empty())
    text += "; " + fewer + " not tried: fewer stages than a count that does not fit";
  if (r.microBatchesSearched)
    text += "; --micro-batches not given: each count's is the most that leave each "
            "data-parallel rank a sample of the batch of " +
            std::to_string(r.samples) + ", with a node's " +
            plural(p.cluster->devicesPerNode, "device") + " of tensor parallelism";
  char searched[48];
  std::snprintf(searched, sizeof searched, "; searched in %.1f s", seconds);
  return text + searched + ")";
}

/// attr::kPipelineUnreplicated on `module`: the count `r` would have
/// chosen without replicas, and the stage note that would have said so
/// (each replicated count's step without its replicas).
void markUnreplicated(ModuleOp module, const ParallelOptions &p, const PipelineSearchResult &r) {
  PipelineSearchResult plain = r;
  const StageCandidate &u = *r.unreplicated;
  plain.stages = u.stages;
  plain.virtualStages = u.virtualStages;
  plain.microBatches = u.microBatches;
  plain.replicas.clear();
  for (StageCandidate &c : plain.tried)
    if (!c.replicas.empty()) {
      c.replicas.clear();
      c.stepSeconds = c.unreplicatedSeconds;
    }
  Builder b(module.getContext());
  module->setAttr(attr::kPipelineUnreplicated,
                  b.getDictionaryAttr({
                      b.getNamedAttr("stages", b.getI64IntegerAttr(u.stages)),
                      b.getNamedAttr("virtual_stages", b.getI64IntegerAttr(u.virtualStages)),
                      b.getNamedAttr("micro_batches", b.getI64IntegerAttr(u.microBatches)),
                      b.getNamedAttr("note", b.getStringAttr(stagesNote(p, plain))),
                  }));
}

std::string searchNote(const SearchResult &r, double limit) {
  char solve[256];
  if (r.rounded && r.optimal) // the relaxation was integral: CBC not needed
    std::snprintf(solve, sizeof solve, "optimal in %.2f s (the LP relaxation rounded meets its bound)",
                  r.searchSeconds);
  else if (r.rounded)
    std::snprintf(solve, sizeof solve,
                  "within %.2g%% of the LP bound in %.2f s (the relaxation rounded, no CBC needed)",
                  100 * r.gap, r.searchSeconds);
  else if (r.timedOut) // the safety net, not the node budget: load decided where it stopped
    std::snprintf(solve, sizeof solve,
                  "CBC stopped by its time limit after %d nodes in %.2f s, within %.2g%% of its "
                  "bound (a busier or idler machine may choose otherwise)",
                  r.nodes, r.searchSeconds, 100 * r.gap);
  else if (r.optimal)
    std::snprintf(solve, sizeof solve, "CBC optimal after %d nodes in %.2f s", r.nodes,
                  r.searchSeconds);
  else // stopped at its gap or its node budget
    std::snprintf(solve, sizeof solve, "CBC within %.2g%% of its bound after %d nodes in %.2f s",
                  100 * r.gap, r.nodes, r.searchSeconds);
  return "search: " + std::to_string(r.ops) + " ops, " + std::to_string(r.decisions) +
         " decisions (alike ops in each layer decide together), " +
         std::to_string(r.eliminated) + " settled by exact reductions, " +
         std::to_string(r.variables) + " variables left, " + solve + "; predicted per step " +
         formatSeconds(r.computeSeconds) + " compute + " +
         formatSeconds(r.communicationSeconds) + " communication, " +
         plan::formatBytes(int64_t(r.memoryBytes)) +
         " per device of weights, optimizer state and kept activations (limit " +
         plan::formatBytes(int64_t(limit)) + ")";
}

/// The dp x tp meshes `r` predicted within 20% of its pick (the search's
/// own error: it adds communication to compute, docs/sharding.md) as
/// attr::kCloseMeshes on `main`: (dp, tp) pairs.
void markCloseMeshes(func::FuncOp main, const SearchResult &r) {
  double chosen = 0;
  for (const SearchResult::Alternative &a : r.alternatives)
    if (a.chosen)
      chosen = a.seconds;
  SmallVector<int64_t> pairs;
  for (const SearchResult::Alternative &a : r.alternatives) {
    if (a.chosen || std::isnan(a.seconds) || !(chosen > 0) || a.seconds > 1.2 * chosen ||
        a.axes.size() != 2)
      continue;
    int64_t dp = 0, tp = 0;
    for (const MeshAxisSpec &axis : a.axes) {
      if (axis.role == AxisRole::Data)
        dp = axis.size;
      else if (axis.role == AxisRole::Tensor)
        tp = axis.size;
    }
    if (dp > 1 && tp > 1)
      pairs.append({dp, tp});
  }
  if (!pairs.empty())
    main->setAttr(attr::kCloseMeshes, Builder(main.getContext()).getDenseI64ArrayAttr(pairs));
}

/// attr::kInterleavedHeads on the module, where the step has interleaved
/// projections.
void markInterleavedHeads(ModuleOp module, const SearchResult &r) {
  if (r.interleavedAttentions > 0)
    module->setAttr(attr::kInterleavedHeads,
                    Builder(module.getContext())
                        .getDenseI64ArrayAttr({r.interleavedAttentions, r.headsSplitAttentions}));
}

/// "alternatives: dp=16 x tp=8 predicted 3.21 s (chosen); dp=32 x tp=4 3.48 s
/// (8.4% slower); x=128 (each op split its own way): does not fit ...": the
/// mesh shapes and role assignments the search compared, best first, those
/// without a plan last with why (the search's own message, shortened).
std::string alternativesNote(const SearchResult &r) {
  std::vector<const SearchResult::Alternative *> order;
  double best = std::numeric_limits<double>::infinity();
  for (const SearchResult::Alternative &a : r.alternatives) {
    order.push_back(&a);
    if (a.chosen && !std::isnan(a.seconds))
      best = a.seconds;
  }
  llvm::stable_sort(order, [](const auto *a, const auto *b) {
    if (std::isnan(a->seconds) != std::isnan(b->seconds))
      return std::isnan(b->seconds);
    return !std::isnan(a->seconds) && a->seconds < b->seconds;
  });
  std::vector<std::string> parts;
  for (const SearchResult::Alternative *a : order) {
    std::string text = a->mesh;
    if (!std::isnan(a->seconds))
      text += " " + formatSeconds(a->seconds) +
              (a->chosen ? " (chosen)"
                         : std::isfinite(best) && best > 0
                               ? " (" + std::to_string(int(std::lround(
                                            100 * (a->seconds / best - 1)))) +
                                     "% slower)"
                               : "");
    else {
      std::string why = a->why.substr(0, a->why.find(" ("));
      if (why.rfind("no sharding over mesh", 0) == 0) // "... fits X per device: the smallest ..."
        why = "does not fit" + why.substr(std::min(why.size(), why.find(" fits ") + 5));
      else if (why.find("no choice costs less than") != std::string::npos)
        why = a->atLeast > 0 ? "at least " + formatSeconds(a->atLeast) +
                                   (std::isfinite(best) && a->atLeast >= 1.01 * best
                                        ? " (" + std::to_string(int(std::lround(
                                                     100 * (a->atLeast / best - 1)))) +
                                              "% slower at best)"
                                        : "")
                             : "slower than a plan found before it";
      text += ": " + why;
    }
    parts.push_back(text);
  }
  return "alternatives (mesh shapes and roles compared, predicted per step): " +
         llvm::join(parts, "; ");
}

struct ShardingSearch : impl::ShardingSearchBase<ShardingSearch> {
  using ShardingSearchBase::ShardingSearchBase;

  /// From C++, with a cluster that may already be loaded.
  explicit ShardingSearch(const ParallelOptions &given) : given_(given) {
    mesh = given.mesh;
    dataParallel = given.dataParallel;
    tensorParallel = given.tensorParallel;
    zero = given.zero;
    sequenceParallel = given.sequenceParallel;
    preset = given.preset;
    clusterFile = given.clusterFile;
    if (given.memoryLimit > 0)
      memoryLimit = std::to_string(int64_t(given.memoryLimit));
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main) {
      module.emitError("no function 'main' to split");
      return signalPassFailure();
    }
    FailureOr<ParallelOptions> options = parallelOptions(main);
    if (failed(options))
      return signalPassFailure();
    module->setAttr(attr::kCluster,
                    StringAttr::get(&getContext(), cost::toJson(*options->cluster)));
    if (options->devices() <= 1) {
      // Stages of one device each: the search runs for its figures alone,
      // to cut the stages by them.
      if (options->pipelineStages > 1 && main->hasAttr(attr::kTraining))
        cutOneDeviceStages(module, *options);
      return;
    }
    SearchOptions search;
    search.mesh = meshAxes(*options);
    search.training = main->hasAttr(attr::kTraining);
    search.zero = options->zero;
    search.sequenceParallel = options->sequenceParallel;
    search.searchMeshShape = options->searchMeshShape;
    search.cluster = *options->cluster;
    search.memoryLimit = options->memoryLimitOn(*options->cluster);
    search.buckets = options->bucketBytes > 0;
    search.bf16Copies = options->sync.empty();
    if (options->pipelineStages == 0 && options->searchMeshShape && search.training) {
      FailureOr<PipelineSearchResult> chosen = searchPipelineStages(module, *options, search);
      if (failed(chosen))
        return signalPassFailure();
      main = module.lookupSymbol<func::FuncOp>("main");
      addNote(main, stagesNote(*options, *chosen));
      if (chosen->unreplicated)
        markUnreplicated(module, *options, *chosen);
      if (!chosen->mesh.empty())
        addNote(main, meshNote(search.mesh, *options, chosen->search));
      addNote(main, searchNote(chosen->search, search.memoryLimit));
      if (!chosen->search.alternatives.empty())
        addNote(main, alternativesNote(chosen->search));
      if (chosen->stages <= 1)
        markCloseMeshes(main, chosen->search);
      markInterleavedHeads(module, chosen->search);
      if (!chosen->search.splitAlternatives.empty())
        addNote(main, chosen->search.splitAlternatives);
      if (chosen->cut)
        addNote(main, stageCutNote(*chosen->cut));
      main->setAttr(attr::kSearchedBytes, Builder(&getContext()).getI64IntegerAttr(
                                              int64_t(chosen->search.memoryBytes)));
      return;
    }
    if (int64_t stages = options->pipelineStages; stages > 1) {
      std::optional<plan::PipelineSchedule> kind = plan::scheduleNamed(options->pipelineSchedule);
      int64_t microBatches = microBatchesOf(main);
      search.parameterShare = 1.0 / double(stages);
      search.keptShare =
          plan::stashedMicroBatches(kind.value_or(plan::ONE_F_ONE_B), stages, 0, microBatches,
                                    options->virtualStages) /
          double(stages);
      if (kind) // each stage's memory as dtc-pipeline-split will cut it
        search.stageMemory = StageMemory::of(
            main, stages, *kind == plan::INTERLEAVED ? options->virtualStages : 1, *kind,
            microBatches);
    }
    if (!options->stagesSearched.empty())
      addNote(main, options->stagesSearched);
    FailureOr<SearchResult> result =
        search.stageMemory
            ? searchStagedStep(module, main, search,
                               *pinnedCuts(main, *options, search.memoryLimit))
            : searchShardings(module, main, search);
    if (failed(result))
      return signalPassFailure();
    addNote(main, meshNote(search.mesh, *options, *result));
    addNote(main, searchNote(*result, search.memoryLimit));
    markInterleavedHeads(module, *result);
    if (!result->alternatives.empty())
      addNote(main, alternativesNote(*result));
    if (!result->splitAlternatives.empty())
      addNote(main, result->splitAlternatives);
    if (options->pipelineStages > 1)
      cutStagesBy(main, main, result->opFigures, *options, search.memoryLimit);
    main->setAttr(attr::kSearchedBytes,
                  Builder(&getContext()).getI64IntegerAttr(int64_t(result->memoryBytes)));
  }

private:
  /// How a pinned --pp cuts its stages (each of `options.devices()`);
  /// none when the schedule is unknown.
  static std::optional<StageCutOptions> pinnedCuts(func::FuncOp main,
                                                   const ParallelOptions &options,
                                                   double memoryLimit) {
    std::optional<plan::PipelineSchedule> kind = plan::scheduleNamed(options.pipelineSchedule);
    if (!kind)
      return std::nullopt;
    StageCutOptions cuts{nullptr,
                         options.pipelineStages,
                         *kind == plan::INTERLEAVED ? options.virtualStages : 1,
                         *kind,
                         microBatchesOf(main),
                         memoryLimit,
                         options.stageCutsByFlops,
                         stageTransfer(*options.cluster, options.devices())};
    // Replicated stages (--stage-replicas): their counts held.
    if (int64_t(options.stageReplicas.size()) == options.pipelineStages) {
      cuts.replicas = options.stageReplicas;
      cuts.replicaReduce = replicaReduce(*options.cluster, options.devices());
    }
    return cuts;
  }

  /// A pinned --pp: the stages' ends by `figures`, the search's of
  /// `searched` (`main` or a copy of it), marked on `main`'s forward (the
  /// same positions in both), with a note.
  static void cutStagesBy(func::FuncOp main, func::FuncOp searched,
                          const std::vector<OpFigures> &figures, const ParallelOptions &options,
                          double memoryLimit) {
    std::optional<StageCutOptions> cuts = pinnedCuts(main, options, memoryLimit);
    if (!cuts) // dtc-pipeline-split names the schedule it does not know
      return;
    std::optional<StageCut> cut = cutStages(searched, figures, *cuts);
    if (!cut) // too few places to cut: dtc-pipeline-split says so
      return;
    markStageEnds(main, *cut);
    addNote(main, stageCutNote(*cut));
  }

  /// --pp P over one device a stage: no split to search, but the search's
  /// figures on a copy (an axis of one, no memory limit: nothing to
  /// choose) cut the stages, each within memory.
  void cutOneDeviceStages(ModuleOp module, const ParallelOptions &options) {
    OwningOpRef<ModuleOp> copy = module.clone();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    auto searched = copy->lookupSymbol<func::FuncOp>("main");
    SearchOptions search;
    search.mesh = {{"x", 1, AxisRole::Free}};
    search.training = true;
    search.zero = options.zero;
    search.sequenceParallel = options.sequenceParallel;
    search.cluster = *options.cluster;
    search.memoryLimit = std::numeric_limits<double>::max();
    FailureOr<SearchResult> result = failure();
    {
      ThreadDiagnosticHandler quiet(&getContext(), [](Diagnostic &) { return success(); });
      result = searchShardings(*copy, searched, search);
    }
    if (succeeded(result))
      cutStagesBy(main, searched, result->opFigures, options,
                  options.memoryLimitOn(*options.cluster));
  }

  /// The options as given from C++, or read from the pass's textual ones.
  FailureOr<ParallelOptions> parallelOptions(func::FuncOp main) {
    ParallelOptions p = given_.value_or(ParallelOptions{});
    if (!given_) {
      p.mesh.assign(mesh.begin(), mesh.end());
      if (devices > 0) {
        p.mesh.push_back(devices);
        p.searchMeshShape = true;
      }
      p.dataParallel = dataParallel;
      p.tensorParallel = tensorParallel;
      p.pipelineStages = pipelineStages;
      p.searchSchedule = pipelineSchedule == "searched";
      if (!p.searchSchedule)
        p.pipelineSchedule = pipelineSchedule;
      if (p.pipelineSchedule == "interleaved")
        p.virtualStages = 2;
      p.zero = int(zero);
      p.sequenceParallel = sequenceParallel;
      if (stageCuts != "costs" && stageCuts != "flops")
        return main.emitError("stage-cuts takes costs or flops, got '") << stageCuts << "'";
      p.stageCutsByFlops = stageCuts == "flops";
      p.preset = preset;
      p.clusterFile = clusterFile;
      if (!memoryLimit.empty()) {
        std::optional<double> bytes = plan::parseByteSize(memoryLimit);
        if (!bytes || *bytes <= 0)
          return main.emitError("memory-limit needs a size like 40GiB, got '")
                 << memoryLimit << "'";
        p.memoryLimit = *bytes;
      }
    }
    if (p.searchMeshShape && p.mesh.size() != 1)
      return main.emitError("devices and mesh are two ways to give the devices: give one");
    if (p.memoryLimit < 0)
      return main.emitError("memory-limit needs a size like 40GiB");
    if (p.zero < -1 || p.zero > 3)
      return main.emitError("zero takes a stage 0, 1, 2 or 3, got ") << p.zero;
    for (int64_t size : p.mesh)
      if (size < 1)
        return main.emitError("mesh sizes must be at least 1");
    std::string error;
    p.cluster = p.loadCluster(error);
    if (!p.cluster)
      return main.emitError(error);
    return p;
  }

  std::optional<ParallelOptions> given_;
};

} // namespace

std::unique_ptr<Pass> createShardingSearchPass(const ParallelOptions &options) {
  return std::make_unique<ShardingSearch>(options);
}

} // namespace dtc
