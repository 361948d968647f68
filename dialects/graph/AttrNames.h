//===- AttrNames.h - the discardable attributes dtc's IR carries -*- C++ -*-===//
//
// Every attribute name that one stage writes and another reads, in one
// place: the importer's (graph.*) and the compiler passes' (dtc.*). Each
// says who writes it and what it holds; docs/compiler-pipeline.md shows
// them in order.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_DIALECTS_GRAPH_ATTRNAMES_H
#define DTC_DIALECTS_GRAPH_ATTRNAMES_H

#include "llvm/ADT/StringRef.h"

namespace dtc::attr {

// The importer (frontends/).
/// Module: the file the model came from (parameters are read from there).
constexpr llvm::StringLiteral kSource = "graph.source";
/// Module: the ONNX opset the model was imported at.
constexpr llvm::StringLiteral kOpset = "graph.opset";
/// Module: initializers imported as another's transpose, {copy = "of"}
/// (tied weights the exporter folded apart; the export writes them back).
constexpr llvm::StringLiteral kTransposedWeights = "graph.transposed_weights";
/// Argument or result of @main: the graph input's or output's name.
constexpr llvm::StringLiteral kName = "graph.name";

// dtc-build-training-step.
/// @main: the training options, for the plan (loss, optimizer, schedule...).
constexpr llvm::StringLiteral kTraining = "dtc.training";
/// Argument of @main: what the runtime feeds it (labels, learning_rate,
/// bias_correction1, bias_correction2); absent for the model's own inputs.
constexpr llvm::StringLiteral kRole = "dtc.role";
/// Result of @main: the parameter this result replaces after each step.
constexpr llvm::StringLiteral kUpdates = "dtc.updates";
/// graph.parameter: starts at zero (optimizer state), read from no file.
constexpr llvm::StringLiteral kZeros = "dtc.zeros";
/// Result of @main (dtc-autodiff): the parameter this is the gradient of.
constexpr llvm::StringLiteral kGradientOf = "dtc.gradient_of";
/// A zero-initialised parameter that sums a weight's gradient over a step's
/// micro-batches (ParameterOp; unit): zeroed before each step, never
/// checkpointed.
constexpr llvm::StringLiteral kAccumulator = "dtc.accumulator";
/// An op that runs once per step, after the last micro-batch (the
/// optimizer's side of a micro-batched step; unit). Ops without it run once
/// per micro-batch.
constexpr llvm::StringLiteral kOncePerStep = "dtc.once_per_step";
/// The op that makes a trained weight's gradient (unit; dtc-build-training-
/// step): dtc-spmd-partition marks the reduction of its partial sums
/// (over the ranks that split the batch) kGradientReduction.
constexpr llvm::StringLiteral kWeightGradient = "dtc.weight_gradient";
/// A mesh all-reduce or reduce-scatter of a weight's gradient (unit), which
/// dtc-compress-gradients may send in bf16 or f16.
constexpr llvm::StringLiteral kGradientReduction = "dtc.gradient_reduction";

// dtc-recompute.
/// An op that recomputes a forward value in the backward (unit): a copy of
/// a forward op, kept apart from it (CSE would merge them back).
constexpr llvm::StringLiteral kRecompute = "dtc.recompute";

// Generated models (frontends/gpt): a parameter's seeded initialiser.
constexpr llvm::StringLiteral kInitValue = "dtc.init_value";
constexpr llvm::StringLiteral kInitStd = "dtc.init_std";

// dtc-build-training-step (compiler/PadClasses.h).
/// graph.parameter: the model's shape of a weight the step pads (a
/// classifier's classes to a round count); what it holds past it is zeros.
constexpr llvm::StringLiteral kModelShape = "dtc.model_shape";

// dtc-sharding-search and dtc-spmd-partition.
/// Module: the mesh's axis names, in the order of `mesh.mesh @mesh`.
constexpr llvm::StringLiteral kMeshAxisNames = "dtc.mesh_axis_names";
/// An op: per factor of its sharding rule, the mesh axes that split it.
constexpr llvm::StringLiteral kSplit = "dtc.split";
/// Argument of @main or graph.parameter: per dim, the mesh axes that split it.
constexpr llvm::StringLiteral kSharding = "dtc.sharding";
/// An op of several results: each result's sharding (an empty one when
/// whole), as kSharding says for an op of one.
constexpr llvm::StringLiteral kResultShardings = "dtc.result_shardings";

// dtc-hoist-constants.
/// An op computed once, at load (the prologue).
constexpr llvm::StringLiteral kPrologue = "dtc.prologue";

// dtc-sharding-search.
/// @main: the bytes per device the search counted (weights, optimizer
/// state, accumulators, inputs, kept activations), to compare with the
/// arena buffer assignment makes.
constexpr llvm::StringLiteral kSearchedBytes = "dtc.searched_bytes";
/// On main, a --devices search of one stage: the dp x tp meshes it predicted
/// within its error of its pick, as (dp, tp) pairs, for dtc compile to
/// simulate (compileCheckingMeshes).
constexpr llvm::StringLiteral kCloseMeshes = "dtc.close_meshes";

/// Module: the packed attentions whose projections dtc-interleave-qkv laid
/// out by heads and how many of them the search split by heads (two
/// integers), for dtc compile to try the model's packing where none is
/// (compileCheckingLayout).
constexpr llvm::StringLiteral kInterleavedHeads = "dtc.interleaved_heads";

/// Module: set when the search failed because no sharding fits the memory
/// limit (compileToPlan then tries recomputation).
constexpr llvm::StringLiteral kOutOfMemory = "dtc.out_of_memory";

/// Training step (unit): set by dtc-recompute when selective recomputation
/// found nothing to recompute, so the step is the one without it
/// (--recompute auto then skips the mode rather than search it again).
constexpr llvm::StringLiteral kRecomputedNothing = "dtc.recomputed_nothing";

/// A forward op after which a pipeline stage (or chunk) ends (unit): where
/// dtc-sharding-search cut the step by its costs (compiler/StageCuts.h),
/// for dtc-pipeline-split; unmarked, the stages even out forward FLOPs.
constexpr llvm::StringLiteral kStageEnd = "dtc.stage_end";

/// Module: the pipeline stages dtc-sharding-search chose for `devices`
/// (pp=0), for dtc-pipeline-split (stages=0).
constexpr llvm::StringLiteral kPipelineStages = "dtc.pipeline_stages";
/// Module: the fewest stages that did not fit after a count that did (a
/// search under a lower memory limit tries fewer).
constexpr llvm::StringLiteral kPipelineStagesBelow = "dtc.pipeline_stages_below";
/// Module: the cluster a split plan was searched on (cluster-file JSON),
/// for the plan (Plan.cluster: dtc simulate's default).
constexpr llvm::StringLiteral kCluster = "dtc.cluster";
/// graph.parameter (unit): a frozen attention mask whose values are 0
/// where query i may see key j, j <= i + cols - rows over its last two
/// dims, and a large negative number elsewhere: causal. Set by the ONNX
/// importer, which reads the values; dtc-fuse-attention cannot.
constexpr llvm::StringLiteral kCausalMask = "dtc.causal_mask";
/// Module: "cuda" when compiled for NVIDIA GPUs (dtc-outline-kernels ran),
/// for the plan (Plan.backend), whether or not any kernel was generated.
constexpr llvm::StringLiteral kBackend = "dtc.backend";
/// Module: the virtual stages a searched schedule chose (the interleaved
/// schedule was faster), for dtc-pipeline-split (stages=0).
constexpr llvm::StringLiteral kPipelineVirtualStages = "dtc.pipeline_virtual_stages";
/// Module: each stage's copies of the stage mesh when the search chose to
/// replicate some (their sum the copies), for dtc-pipeline-split (stages=0).
constexpr llvm::StringLiteral kPipelineReplicas = "dtc.pipeline_replicas";
/// Module: with kPipelineReplicas, the count the search would have chosen
/// without replicas: {stages, virtual_stages, micro_batches, note (the
/// stage search's note for it)}, which dtc compile checks the replicated
/// plan against (compiled pinned, not searched again).
constexpr llvm::StringLiteral kPipelineUnreplicated = "dtc.pipeline_unreplicated";

// dtc-pipeline-split.
/// Module: {stages, schedule, micro_batches, virtual_stages, replicas} of
/// a pipelined step (replicas: per stage, empty when each has one).
constexpr llvm::StringLiteral kPipeline = "dtc.pipeline";
/// Module: the mesh of a replicated pipeline's stage replicas, one
/// coordinate each (dtc-pipeline-split's --stage-replicas).
constexpr llvm::StringLiteral kStagesMesh = "stages";
/// A collective on kStagesMesh: [first coordinate, count], the replicas of
/// its stage, which alone make its group.
constexpr llvm::StringLiteral kReplicas = "dtc.replicas";
/// A stage's function: its stage number.
constexpr llvm::StringLiteral kStage = "dtc.stage";
/// Module: {servers, staleness, tensors} of a parameter-server step
/// (dtc-parameter-server): each tensor {weight, server, gradient (the
/// worker's output index), weight_output (the server's)}.
constexpr llvm::StringLiteral kParameterServers = "dtc.parameter_servers";
/// A parameter server's parameter that is a row block of the initializer:
/// [first row, the whole tensor's rows] (dtc-parameter-server).
constexpr llvm::StringLiteral kRows = "dtc.rows";
/// A parameter server's function (dtc-parameter-server): its number.
constexpr llvm::StringLiteral kServer = "dtc.server";
/// A stage's function: the indices in @main's results of its results.
constexpr llvm::StringLiteral kOutputs = "dtc.outputs";
/// An op of a stage's forward part (unit): run per micro-batch before the
/// backward part, whose reads of forward values are stashed.
constexpr llvm::StringLiteral kPipelineForward = "dtc.pipeline_forward";
/// An interleaved pipeline stage's op: which of the stage's model chunks
/// (virtual stages) it belongs to; 0 when absent.
constexpr llvm::StringLiteral kChunk = "dtc.chunk";
/// An interleaved pipeline's send or receive: its channel (plan.proto:
/// Transfer.channel).
constexpr llvm::StringLiteral kChannel = "dtc.channel";

// dtc-schedule.
/// @main: the order kept and both orders' simulated activation peaks.
constexpr llvm::StringLiteral kSchedule = "dtc.schedule";

// dtc-assign-buffers.
/// Argument of @main: its byte offset in the arena.
constexpr llvm::StringLiteral kOffset = "dtc.offset";
/// An op: its results' byte offsets in the arena.
constexpr llvm::StringLiteral kOffsets = "dtc.offsets";
/// @main: the arena's size and what it holds.
constexpr llvm::StringLiteral kArenaBytes = "dtc.arena_bytes";
constexpr llvm::StringLiteral kParameterBytes = "dtc.parameter_bytes";
constexpr llvm::StringLiteral kUnsharedBytes = "dtc.unshared_bytes";
constexpr llvm::StringLiteral kWeightBytes = "dtc.weight_bytes";
/// Of those: the weights' bf16 copies (dtc-keep-bf16-weights).
constexpr llvm::StringLiteral kWeightCopyBytes = "dtc.weight_copy_bytes";
/// A pipeline stage's function: its stash's groups (plan.proto: Stash) as
/// offset, bytes per micro-batch and copies, three numbers a group.
constexpr llvm::StringLiteral kStashes = "dtc.stashes";
constexpr llvm::StringLiteral kOptimizerStateBytes = "dtc.optimizer_state_bytes";
constexpr llvm::StringLiteral kActivationBytes = "dtc.activation_bytes";
/// @main: how many updates are written over their parameter (no copy).
constexpr llvm::StringLiteral kUpdatesInPlace = "dtc.updates_in_place";

// GPU kernels (dtc-outline-kernels, dtc-kernels-to-ptx; docs/gpu-kernels.md).
/// The nested module holding the generated kernel functions.
constexpr llvm::StringLiteral kKernelModule = "dtc_kernels";
/// graph.fused (and the other ops with a kernel): its kernel function
/// (@dtc_kernels::@kernel_N).
constexpr llvm::StringLiteral kKernel = "dtc.kernel";
/// A kernel function: chip -> PTX text.
constexpr llvm::StringLiteral kPtx = "dtc.ptx";
/// A kernel function: its PTX entry point's name.
constexpr llvm::StringLiteral kPtxEntry = "dtc.ptx_entry";
/// A kernel function: [grid, block], blocks and threads a block.
constexpr llvm::StringLiteral kLaunch = "dtc.launch";
/// A kernel function: the threads it runs (its parallel loop's extent).
constexpr llvm::StringLiteral kThreads = "dtc.threads";
/// A kernel function over rows: its parallel loop runs `dtc.threads` rows,
/// each row's work spread over this many threads of a block (nested
/// parallel loops over the lanes; compiler/RowsToGpu.cpp).
constexpr llvm::StringLiteral kLanes = "dtc.lanes";
/// A kernel function: its outputs must be zeros before it runs.
constexpr llvm::StringLiteral kZeroOutputs = "dtc.zero_outputs";
/// A kernel function: its last argument is a status word it sets to 1
/// when its data is out of range (a gather's index).
constexpr llvm::StringLiteral kStatus = "dtc.status";
/// A kernel function: per PTX entry parameter, the function argument
/// (the instruction's buffer: inputs, then outputs) it is.
constexpr llvm::StringLiteral kParams = "dtc.params";
/// dtc-batch-kernels. A graph op launched with the ops before it: how many
/// instructions its kernel runs (itself and those before it).
constexpr llvm::StringLiteral kBatch = "dtc.batch";
/// A graph op launched by a later op's kernel (unit): it launches nothing.
constexpr llvm::StringLiteral kBatched = "dtc.batched";
/// A batch's kernel function: per argument, which of the batch's operands
/// it is (the members' inputs in order, then their outputs).
constexpr llvm::StringLiteral kBatchOperands = "dtc.batch_operands";

// Every pass that decides something.
/// @main: one line per decision, in the order the passes made them; plan
/// emission copies them into the plan's decisions (compiler/CompileNotes.h).
constexpr llvm::StringLiteral kNotes = "dtc.notes";

} // namespace dtc::attr

#endif // DTC_DIALECTS_GRAPH_ATTRNAMES_H
