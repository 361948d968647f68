//===- ShardingSearch.h - how to split every op over a mesh -----*- C++ -*-===//
//
// The intra-op sharding search (Alpa's formulation): every op of `main`
// picks a split of its sharding rule's factors over the mesh axes; the
// objective is compute + communication (partial sums combined) +
// resharding between producer and consumer, on the cluster's cost model;
// each device's memory (weights, optimizer state, activations kept for
// backward) is a constraint. Ops whose neighbourhoods look alike (the
// same position in each transformer layer) share one decision, so the
// integer program has the size of one layer, and CBC solves it exactly.
// The choice is written as `dtc.split` on each op and `dtc.sharding` on
// each argument, for dtc-spmd-partition. docs/sharding.md explains; the
// pass dtc-sharding-search (ShardingSearchPass.cpp) runs it, and
// SearchGraph.h lists the files its parts live in.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_SHARDINGSEARCH_H
#define DTC_COMPILER_SHARDINGSEARCH_H

#include "compiler/PipelineStages.h"
#include "compiler/StageCuts.h"
#include "cost/Cluster.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Pass/Pass.h"
#include "llvm/ADT/DenseMap.h"

#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtc {

/// What a mesh axis may split. A data axis (pinned by --dp) splits the
/// batch and what follows from it; with ZeRO also optimizer state,
/// updates and (stage 3) weights. A tensor axis (--tp) splits anything
/// but the batch. A free axis (--mesh, --devices) splits anything.
enum class AxisRole { Free, Data, Tensor };

struct MeshAxisSpec {
  std::string name;
  int64_t size = 1;
  AxisRole role = AxisRole::Free;
};

struct SearchOptions {
  std::vector<MeshAxisSpec> mesh;
  bool training = false;  // main is a training step: its first result is the loss
  int zero = -1;          // ZeRO stage pinned by --zero; -1: the search decides
  /// --no-sequence-parallel: no axis but a data one splits the data's
  /// sequence dims (activations whole over tensor-parallel ranks, as
  /// Megatron-LM kept them before 2022).
  bool sequenceParallel = true;
  double memoryLimit = 0; // bytes per device
  cost::Cluster cluster;
  /// --devices N: `mesh` is one free axis of N, and the search also tries
  /// each data x tensor factorization of N whose tensor groups fit in a
  /// node, keeping the cheapest.
  bool searchMeshShape = false;
  /// Pipeline stages: the share of the weights and optimizer state a
  /// device holds (1 / stages), and of the kept activations (the first
  /// stage's in-flight micro-batches / stages).
  double parameterShare = 1, keptShare = 1;
  /// Pipeline stages, set: memory is limited stage by stage instead of by
  /// the shares above (which make every stage the average one), each
  /// stage holding its own ops' weights and state, and their kept
  /// activations for its micro-batches in flight; the plan's memory is
  /// its fullest stage's.
  std::shared_ptr<const StageMemory> stageMemory;
  /// Each candidate's LP relaxation rounded, and no CBC at all (the plan
  /// `unsettled` when outside the gap): for comparing many searches, then
  /// searching the chosen one again in full.
  bool roundingOnly = false;
  /// Only plans predicted cheaper than this are wanted: the search fails
  /// (quietly worse, not out of memory) when none is.
  double costBelow = std::numeric_limits<double>::infinity();
  /// Weight gradients' reductions go in buckets (--bucket above 0,
  /// dtc-bucket-collectives): priced by their bytes, their start-up paid
  /// once for many.
  bool buckets = true;
  /// A bf16 step's weights keep bf16 copies beside their f32 masters
  /// (dtc-keep-bf16-weights; not under --sync, whose weights change
  /// outside the step): an update split finer than its weight gathers
  /// the copy's bf16 shards (Search::updateSeconds).
  bool bf16Copies = true;
};

struct SearchResult {
  int ops = 0, decisions = 0; // ops, and the tied groups that decide for them
  int variables = 0, constraints = 0; // what CBC got after exact reductions
  int eliminated = 0;                  // decisions the reductions settled
  bool optimal = false;
  bool rounded = false; // the LP relaxation rounded was within the gap: no CBC
  /// SearchOptions::roundingOnly, and the rounded plan is outside the gap
  /// of its bound: CBC might still improve it.
  bool unsettled = false;
  double gap = 0;                    // not optimal: (cost - CBC's bound) / cost
  int nodes = 0;                     // branch-and-bound nodes CBC searched
  /// CBC's seconds ran out before its nodes did: the plan may differ on a
  /// machine more or less busy (search::SolveLimits).
  bool timedOut = false;
  std::vector<MeshAxisSpec> mesh;    // the mesh decided on (its shape searched or given)
  bool meshSearched = false; // its shape came from --devices, or --mesh as one axis
  double searchSeconds = 0;          // wall time of the whole search
  double computeSeconds = 0;         // predicted per step, per device
  double communicationSeconds = 0;   // collectives and resharding
  double memoryBytes = 0;            // weights, optimizer state, kept activations
  int splitParameters = 0, parameters = 0;
  /// Packed attentions whose q, k, v projection dtc-interleave-qkv laid
  /// out by heads, and how many of them the chosen split cuts by heads.
  int interleavedAttentions = 0, headsSplitAttentions = 0;
  // Mesh axes over which no value is split (their devices all repeat the
  // same work), each with why: the batch does not divide, or splitting
  // was predicted not to pay.
  std::vector<std::string> idleAxes;
  /// The mesh shapes and role assignments compared (--devices, several
  /// free axes): each one's predicted objective (NaN: none, `why` says
  /// why: over the memory limit, or no plan could beat the best), the
  /// chosen one marked.
  struct Alternative {
    std::string mesh, why;
    std::vector<MeshAxisSpec> axes; // the candidate's mesh
    double seconds = 0;
    double atLeast = 0; // no plan: what none can beat (its LP bound), when known
    bool chosen = false;
  };
  std::vector<Alternative> alternatives;
  /// The largest ops' other splits, each costed with the rest of the plan
  /// held (a note's text; empty on one device).
  std::string splitAlternatives;
  /// Each op's (and argument's) figures under the choice, for cutting
  /// pipeline stages by them (StageCuts.h); ops of the module searched.
  std::vector<OpFigures> opFigures;
};

/// The devices, and what the user pinned of how work is split over them;
/// the rest the search decides. dtc-sharding-search's options.
struct ParallelOptions {
  /// --backend cuda: elementwise groups also as GPU kernels (PTX) in the
  /// plan; "" or "cpu": the CPU backend's instructions alone.
  std::string backend;
  std::vector<int64_t> mesh; // --mesh AxB / --devices N: free axes; empty: the pins'
  int64_t dataParallel = 0;  // --dp: a mesh axis that splits the batch (0: none)
  int64_t tensorParallel = 0; // --tp: a mesh axis that splits anything but the batch
  int zero = -1;             // --zero 0..3; -1: searched
  bool sequenceParallel = true; // --no-sequence-parallel: false (SearchOptions)
  /// --compress-gradients: weight gradients' reductions travel in this type
  /// ("bf16", "f16"), or as PowerSGD's factors ("powersgd", "powersgd:R");
  /// empty: f32, as computed.
  std::string compressGradients;
  /// --sync local: the data-parallel ranks ("dp" axis) keep replicas that
  /// the runtime averages every `averageEvery` steps (dtc-local-sgd);
  /// "federated": clients that share nothing within a round (FedAvg);
  /// "ps": the data-parallel ranks are workers and `servers` more ranks
  /// hold the weights (dtc-parameter-server; `staleness` > 0: asynchronous);
  /// empty: one all-reduce of the gradients a step.
  std::string sync;
  int64_t averageEvery = 4;
  int64_t servers = 1;
  int64_t staleness = 0;
  bool searchMeshShape = false; // --devices: `mesh` is {N}, whose shape is searched too
  double memoryLimit = 0;    // --memory-limit bytes per device; 0: the cluster's capacity
  /// --bucket: collectives of one group sent together up to this many
  /// bytes (dtc-bucket-collectives); 0: each on its own.
  int64_t bucketBytes = 25 << 20;
  /// --pp: stages, each a copy of the mesh above (1: none; 0 with --devices
  /// and a training step: searched, see searchPipelineStages).
  int64_t pipelineStages = 1;
  /// Searched stages: only counts below this (0: any); a search again
  /// under a lower memory limit skips the counts that did not fit.
  int64_t pipelineStagesBelow = 0;
  std::string pipelineSchedule = "1f1b"; // --schedule gpipe|1f1b|interleaved
  /// --stage-cuts flops: stages even out forward FLOPs rather than the
  /// cost model's step (StageCuts.h).
  bool stageCutsByFlops = false;
  int64_t virtualStages = 1; // --virtual-stages: model chunks per stage (interleaved)
  /// --stage-replicas: copies of each stage's mesh (PipeDream's stage
  /// replication; docs/pipeline.md); empty: one each.
  std::vector<int64_t> stageReplicas;
  /// Searched stages (--devices): fewer stages with replicas may be
  /// chosen (off for the plan they are checked against).
  bool searchStageReplicas = true;
  /// A pinned stage count that a search chose (compileFittingChecked's
  /// plan without replicas: PipelineSearchResult::unreplicated): that
  /// search's note, said in place of the pinned count's.
  std::string stagesSearched;
  /// Searched stages without --schedule: the chosen count is also tried
  /// interleaved (2 virtual stages), and kept so when that is faster.
  bool searchSchedule = false;
  /// What the search costs plans on: `cluster` when given (already
  /// loaded), else the file `clusterFile`, else the preset `preset`.
  std::optional<cost::Cluster> cluster;
  std::string preset = "cpu-local", clusterFile;
  /// --micro-batches not given (dtc compile sets it): the training step
  /// built again for another micro-batch count, which searched pipeline
  /// stages choose per stage count (microBatchesFor); failure with a
  /// diagnostic when it cannot be built, or with `refused` set (and none)
  /// when the model does not take that count (CompileOptions::modelAt).
  std::function<mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>(int64_t, std::string &refused)>
      stepWithMicroBatches;

  int64_t devices() const;
  /// `cluster`, else the file, else the preset; null with `error`.
  std::optional<cost::Cluster> loadCluster(std::string &error) const;
  /// The bytes a device may hold on `c`: --memory-limit, else its capacity
  /// less what the runtime keeps.
  double memoryLimitOn(const cost::Cluster &c) const {
    return memoryLimit > 0 ? memoryLimit : c.device.planMemory();
  }
};

/// The mesh's axes: the pinned ones (dp, tp), then what is left of the
/// devices as one free axis, or the --mesh axes when nothing is pinned.
std::vector<MeshAxisSpec> meshAxes(const ParallelOptions &options);

/// dtc-sharding-search with `options`.
std::unique_ptr<mlir::Pass> createShardingSearchPass(const ParallelOptions &options);

/// Decides and annotates; adds `mesh.mesh @mesh` and the axis names.
/// Fails with a diagnostic when no split fits the memory limit (naming the
/// smallest any split needs) or a pin cannot be met.
mlir::FailureOr<SearchResult> searchShardings(mlir::ModuleOp module, mlir::func::FuncOp func,
                                              const SearchOptions &options);

/// searchShardings for a step cut into pipeline stages (`search`'s
/// stageMemory: the FLOP-even cut's). When no split fits those stages
/// (1F1B's first stage keeps P micro-batches), and `cuts` is not
/// evenFlops: the search for the average stage of a memory-even cut (a
/// P-th of the weights and of all stages' kept activations) on a copy,
/// the stages cut by its figures within memory (StageCuts.h, marked on
/// `main`), and the search again on those stages. Its diagnostics are the
/// first search's when that fails too.
mlir::FailureOr<SearchResult> searchStagedStep(mlir::ModuleOp module, mlir::func::FuncOp main,
                                               SearchOptions search,
                                               const StageCutOptions &cuts);

/// One pipeline stage count tried for --devices N.
struct StageCandidate {
  int64_t stages = 1;
  int64_t virtualStages = 1; // 2 or more: the interleaved schedule's
  double stepSeconds = 0; // predicted: the stage's share of the step, with the bubble
  std::string outcome;    // "" when it was searched and fit; else why not
  double searchSeconds = 0; // wall time of its search
  int64_t microBatches = 1; // the step's, chosen per count when not given
  /// Fewer stages than `stages` copies of the stage mesh, some replicated
  /// (StageCutOptions::copies): each stage's count; empty: one each.
  std::vector<int64_t> replicas;
  /// With `replicas`: the same count's step without them (0: not known).
  double unreplicatedSeconds = 0;
};

/// A StageCandidate's outcome when interleaving was not searched: the
/// bubble it would save, less the transfers it adds, is under the margin.
/// A pipeline with more stages, or another schedule, replaces the one
/// chosen only when predicted at least this much faster (the estimates'
/// noise; more stages have less slack than the bubble formula assumes).
inline constexpr double kStageMargin = 0.02;

inline constexpr const char *kBubbleTooSmall = "not tried (its bubble saving is under 2%)";

/// A StageCandidate's outcome when not searched: its stage would have more
/// devices than data parallelism within a micro-batch and tensor
/// parallelism within a node can use.
inline constexpr const char *kIdle = "idle";
/// Not searched: a count with fewer stages already did not fit (1F1B keeps
/// more activations a device the more stages there are).
inline constexpr const char *kMoreMemory = "more memory";
/// Not searched: past a count whose predicted step was slower than the
/// best (the step over stage counts is taken to have one minimum).
inline constexpr const char *kPastSlower = "past slower";
/// Not searched: fewer stages than a count that did not fit.
inline constexpr const char *kFewerUnfit = "fewer unfit";

struct PipelineSearchResult {
  int64_t stages = 1;
  /// Each stage's copies of the stage mesh when some stage is replicated
  /// (their sum the copies); empty: one each.
  std::vector<int64_t> replicas;
  int64_t virtualStages = 1; // more: interleaved was faster (searchSchedule)
  SearchResult search; // the chosen stage count's sharding
  std::vector<MeshAxisSpec> mesh;
  std::vector<StageCandidate> tried;
  int64_t samples = 1; // a micro-batch's
  /// Chosen per stage count (options.stepWithMicroBatches): the chosen
  /// count's; else the step's as given.
  int64_t microBatches = 1;
  bool microBatchesSearched = false;
  /// Where the chosen stages end, by the search's figures (marked on the
  /// module's forward); none with one stage.
  std::optional<StageCut> cut;
  /// With `replicas`: the count the search would have chosen without them
  /// (each count's step unreplicated, by the same rules), which the
  /// compile checks the replicated plan against by simulation: it is then
  /// compiled pinned rather than searched again.
  std::optional<StageCandidate> unreplicated;
};

/// --devices N for a training step with no --pp: each stage count P that
/// divides N and the model's layer boundaries allow, with the sharding
/// search (and its dp x tp shapes) on N / P devices per stage under the
/// stages' memory shares; keeps the one whose predicted step, the bubble
/// of `base`'s schedule and micro-batches counted, is shortest. Annotates
/// `module` as searchShardings does and records the stages as
/// `dtc.pipeline_stages` for dtc-pipeline-split.
mlir::FailureOr<PipelineSearchResult> searchPipelineStages(mlir::ModuleOp module,
                                                           const ParallelOptions &options,
                                                           const SearchOptions &base);

} // namespace dtc

#endif // DTC_COMPILER_SHARDINGSEARCH_H
