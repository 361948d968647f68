//===- Pipeline.cpp -------------------------------------------------------===//
#include "compiler/Pipeline.h"

#include "compiler/Cancel.h"
#include "compiler/CompileNotes.h"
#include "compiler/Diagnostics.h"
#include "compiler/MicroBatches.h"
#include "compiler/Passes.h"
#include "compiler/PlanEmitter.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"
#include "cost/Simulator.h"
#include "plan/FormatBytes.h"
#include "plan/Ranks.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"

#include <future>
#include <thread>

using namespace mlir;

namespace dtc {

namespace {
thread_local const std::atomic<bool> *cancelFlag = nullptr, *cancelAlso = nullptr;

/// Whether the step keeps bf16 copies of its weights (dtc-keep-bf16-weights):
/// a bf16 step whose weights change only through the step, or bf16 inference.
bool keepsBf16Copies(const CompileOptions &options) {
  return (options.training && options.training->precision == "bf16" &&
          options.parallel.sync.empty()) ||
         (!options.training && options.precision == "bf16");
}
} // namespace

void setCompileCancelFlag(const std::atomic<bool> *flag, const std::atomic<bool> *also) {
  cancelFlag = flag;
  cancelAlso = also;
}

const std::atomic<bool> *compileCancelFlag() { return cancelFlag; }

bool compileCancelled() {
  return (cancelFlag && cancelFlag->load(std::memory_order_relaxed)) ||
         (cancelAlso && cancelAlso->load(std::memory_order_relaxed));
}

void buildCompilePipeline(OpPassManager &pm, const CompileOptions &options) {
  buildStepPipeline(pm, options);
  buildSplitPipeline(pm, options);
}

void buildStepPipeline(OpPassManager &pm, const CompileOptions &options) {
  bool split = options.parallel.devices() > 1 || options.parallel.pipelineStages > 1;
  // Before the training step is built: its backward then differentiates
  // one gelu, one rms layer_norm.
  pm.nest<func::FuncOp>().addPass(createFuseGelu());
  pm.nest<func::FuncOp>().addPass(createFuseRmsNorm());
  pm.nest<func::FuncOp>().addPass(createFuseRotary());
  if (options.fuseAttention)
    pm.nest<func::FuncOp>().addPass(createFuseAttention());
  // Packed projections by heads where tensor parallelism may split them
  // (a copy of each weight a step, which one device would pay for nothing).
  const ParallelOptions &parallel = options.parallel;
  if (options.fuseAttention && options.interleaveQkv && parallel.devices() > 1 &&
      parallel.dataParallel != parallel.devices())
    pm.nest<func::FuncOp>().addPass(createInterleaveQkv());
  if (options.training) {
    TrainingOptions training = *options.training;
    training.modelOutputs = training.modelOutputs && !split;
    pm.addPass(createBuildTrainingStepPass(training));
  } else if (options.precision == "bf16") {
    pm.nest<func::FuncOp>().addPass(createMixedPrecision());
  }
  OpPassManager &cleanup = pm.nest<func::FuncOp>();
  cleanup.addPass(createCanonicalizerPass());
  cleanup.addPass(createCSEPass());
  if (options.training && options.training->recompute != "none" &&
      options.training->recompute != "auto") // compileToPlan decides auto
    cleanup.addPass(createRecompute(RecomputeOptions{options.training->recompute}));
}

void buildSplitPipeline(OpPassManager &pm, const CompileOptions &options) {
  int64_t stages = options.parallel.pipelineStages;
  // Stages of one device search too: for the figures their cuts go by.
  if (options.parallel.devices() > 1 || (stages > 1 && options.training))
    pm.addPass(createShardingSearchPass(options.parallel));
  // Weights that change only through the step keep their bf16 copies: each
  // split as the search split its weight, and the f32 master as the search
  // split its update where that is finer (ZeRO: the master split with the
  // optimizer's state, the copy the forward reads whole; docs/training.md).
  if (keepsBf16Copies(options))
    pm.nest<func::FuncOp>().addPass(createKeepBf16Weights());
  pm.addPass(createSpmdPartition());
  if (options.training && !options.parallel.sync.empty() && options.parallel.sync != "ps") {
    LocalSgdOptions local;
    local.averageEvery = options.parallel.averageEvery;
    local.federated = options.parallel.sync == "federated";
    pm.nest<func::FuncOp>().addPass(createLocalSgd(local));
  }
  if (options.training && options.parallel.devices() > 1)
    pm.nest<func::FuncOp>().addPass(createRegatherWeights());
  if (options.training) // micro-batched steps (a searched count's too)
    pm.nest<func::FuncOp>().addPass(createAccumulateGradients());
  if (options.training && options.parallel.sync == "ps") {
    ParameterServerOptions ps;
    ps.servers = options.parallel.servers;
    ps.staleness = options.parallel.staleness;
    pm.addPass(createParameterServer(ps));
  }
  llvm::StringRef compress = options.parallel.compressGradients;
  if (options.training && compress.starts_with("powersgd")) {
    PowerSgdOptions power; // "powersgd" or "powersgd:R"
    if (llvm::StringRef r = compress.drop_front(8); r.consume_front(":"))
      r.getAsInteger(10, power.rank);
    pm.nest<func::FuncOp>().addPass(createPowerSgd(power));
  } else if (options.training && !options.parallel.compressGradients.empty()) {
    CompressGradientsOptions compress;
    compress.precision = options.parallel.compressGradients;
    pm.nest<func::FuncOp>().addPass(createCompressGradients(compress));
  }
  // Before the split, so that a pipeline's last stage keeps the logits'
  // gradient for its backward as it would have kept the logits.
  if (options.training)
    pm.nest<func::FuncOp>().addPass(createFuseLossGradient());
  // 0: as many stages as the search chose for --devices.
  if (stages > 1 || (stages == 0 && options.training)) {
    PipelineSplitOptions pipeline;
    pipeline.stages = stages;
    pipeline.schedule = options.parallel.pipelineSchedule;
    pipeline.virtualStages = options.parallel.virtualStages;
    pipeline.replicas = options.parallel.stageReplicas;
    pm.addPass(createPipelineSplit(pipeline));
  }
  OpPassManager &fpm = pm.nest<func::FuncOp>();
  if (!options.training) // folds inference batch norms into the weights
    fpm.addPass(createFuseConv());
  fpm.addPass(createChannelsLast());
  fpm.addPass(createFuseMatmulBias());
  fpm.addPass(createFuseNormGradients());
  fpm.addPass(createFuseElementwise());
  HoistConstantsOptions hoist;
  hoist.parameters = !options.training; // trained parameters change every step
  fpm.addPass(createHoistConstants(hoist));
  fpm.addPass(createScheduleForMemory());
  BucketCollectivesOptions buckets;
  buckets.bytes = options.parallel.bucketBytes;
  fpm.addPass(createBucketCollectives(buckets));
  fpm.addPass(createAssignBuffers());
  if (options.parallel.backend == "cuda") {
    pm.addPass(createOutlineKernels());
    pm.addPass(createBatchKernels());
    pm.addPass(createKernelsToPtx());
  }
}

namespace {

/// dtc-compile-pipeline's options: dtc compile's flags, spelled as pass
/// options (`train=true optimizer=sgd lr=0.1 mesh=2,2 preset=a100-80g`).
struct CompilePipelineOptions : public PassPipelineOptions<CompilePipelineOptions> {
  Option<bool> train{*this, "train", llvm::cl::desc("Compile one training step"),
                     llvm::cl::init(false)};
  Option<std::string> loss{*this, "loss", llvm::cl::desc("cross_entropy or mse"),
                           llvm::cl::init("cross_entropy")};
  ListOption<int64_t> ignoreIndex{*this, "ignore-index",
                                  llvm::cl::desc("cross_entropy: a label left out")};
  Option<std::string> optimizer{*this, "optimizer", llvm::cl::desc("adamw or sgd"),
                                llvm::cl::init("adamw")};
  Option<double> learningRate{*this, "lr", llvm::cl::desc("Peak learning rate"),
                              llvm::cl::init(1e-3)};
  Option<double> momentum{*this, "momentum", llvm::cl::desc("sgd: momentum"),
                          llvm::cl::init(0.9)};
  Option<double> beta1{*this, "beta1", llvm::cl::desc("adamw: beta1"), llvm::cl::init(0.9)};
  Option<double> beta2{*this, "beta2", llvm::cl::desc("adamw: beta2"), llvm::cl::init(0.999)};
  Option<double> epsilon{*this, "epsilon", llvm::cl::desc("adamw: epsilon"),
                         llvm::cl::init(1e-8)};
  Option<double> weightDecay{*this, "weight-decay", llvm::cl::desc("Weight decay"),
                             llvm::cl::init(0.0)};
  Option<double> clipNorm{*this, "clip-norm", llvm::cl::desc("Global gradient norm clip"),
                          llvm::cl::init(0.0)};
  Option<bool> skipNonFinite{*this, "skip-nonfinite",
                             llvm::cl::desc("Skip the update when the gradients are not finite"),
                             llvm::cl::init(false)};
  Option<std::string> schedule{*this, "schedule", llvm::cl::desc("constant or cosine"),
                               llvm::cl::init("constant")};
  Option<int64_t> warmupSteps{*this, "warmup", llvm::cl::desc("Warm-up steps"),
                              llvm::cl::init(0)};
  Option<int64_t> totalSteps{*this, "total-steps", llvm::cl::desc("cosine: total steps"),
                             llvm::cl::init(0)};
  Option<std::string> precision{*this, "precision", llvm::cl::desc("fp32 or bf16"),
                                llvm::cl::init("fp32")};
  Option<int64_t> microBatches{*this, "micro-batches",
                               llvm::cl::desc("Gradient accumulation: micro-batches per step"),
                               llvm::cl::init(1)};
  Option<std::string> trainOutput{*this, "train-output",
                                  llvm::cl::desc("The model output the loss reads (by name)"),
                                  llvm::cl::init("")};
  Option<int64_t> padClasses{*this, "pad-classes",
                             llvm::cl::desc("cross_entropy: a vocabulary padded to a multiple "
                                            "of this (0: never)"),
                             llvm::cl::init(128)};
  Option<std::string> recompute{
      *this, "recompute",
      llvm::cl::desc("none, selective or full: recompute activations in the backward"),
      llvm::cl::init("none")};
  ListOption<int64_t> mesh{*this, "mesh", llvm::cl::desc("Free mesh axes, e.g. 2,2")};
  Option<int64_t> devices{*this, "devices",
                          llvm::cl::desc("Devices, the mesh's shape searched too"),
                          llvm::cl::init(0)};
  Option<int64_t> dp{*this, "dp", llvm::cl::desc("Data-parallel axis size"),
                     llvm::cl::init(0)};
  Option<int64_t> tp{*this, "tp", llvm::cl::desc("Tensor-parallel axis size"),
                     llvm::cl::init(0)};
  Option<int64_t> pp{*this, "pp", llvm::cl::desc("Pipeline stages"), llvm::cl::init(1)};
  Option<std::string> pipelineSchedule{*this, "pipeline-schedule",
                                       llvm::cl::desc("gpipe, 1f1b or interleaved"),
                                       llvm::cl::init("1f1b")};
  Option<int64_t> virtualStages{*this, "virtual-stages",
                                llvm::cl::desc("Model chunks per stage (interleaved)"),
                                llvm::cl::init(1)};
  ListOption<int64_t> stageReplicas{*this, "stage-replicas",
                                    llvm::cl::desc("Copies of each stage's mesh, e.g. 1,2")};
  Option<int64_t> zero{*this, "zero", llvm::cl::desc("ZeRO stage (-1: searched)"),
                       llvm::cl::init(-1)};
  Option<bool> sequenceParallel{
      *this, "sequence-parallel",
      llvm::cl::desc("Tensor-parallel axes may split the data's sequence dims"),
      llvm::cl::init(true)};
  Option<std::string> preset{*this, "preset", llvm::cl::desc("Cluster preset"),
                             llvm::cl::init("cpu-local")};
  Option<std::string> cluster{*this, "cluster", llvm::cl::desc("Cluster file (JSON)"),
                              llvm::cl::init("")};
  Option<std::string> attention{*this, "attention",
                                llvm::cl::desc("fused (default) or unfused"),
                                llvm::cl::init("fused")};
  Option<std::string> backend{*this, "backend",
                              llvm::cl::desc("cuda: elementwise groups as GPU kernels too"),
                              llvm::cl::init("")};
  Option<std::string> sync{*this, "sync",
                           llvm::cl::desc("local: data-parallel replicas averaged every "
                                          "average-every steps; federated: FedAvg clients "
                                          "(empty: all-reduce)"),
                           llvm::cl::init("")};
  Option<int64_t> averageEvery{*this, "average-every",
                               llvm::cl::desc("local SGD: steps between averages"),
                               llvm::cl::init(4)};
  Option<int64_t> servers{*this, "servers", llvm::cl::desc("ps: server ranks"),
                          llvm::cl::init(1)};
  Option<int64_t> staleness{*this, "staleness",
                            llvm::cl::desc("ps: 0 synchronous, S > 0 asynchronous"),
                            llvm::cl::init(0)};
  Option<std::string> compressGradients{
      *this, "compress-gradients",
      llvm::cl::desc("Weight gradients' reductions in bf16 or f16 (empty: f32)"),
      llvm::cl::init("")};
  Option<std::string> memoryLimit{*this, "memory-limit",
                                  llvm::cl::desc("Bytes per device, e.g. 40GiB"),
                                  llvm::cl::init("")};
  Option<std::string> bucket{*this, "bucket",
                             llvm::cl::desc("A collectives bucket's bytes, e.g. 25MiB (0: none)"),
                             llvm::cl::init("25MiB")};

  CompileOptions toCompileOptions() const {
    CompileOptions o;
    o.fuseAttention = attention != "unfused";
    if (train) {
      TrainingOptions t;
#define DTC_COPY(field) t.field = field;
      DTC_TRAINING_OPTION_FIELDS(DTC_COPY)
#undef DTC_COPY
      if (!ignoreIndex.empty())
        t.ignoreIndex = ignoreIndex[0];
      t.recompute = recompute;
      o.training = t;
    } else {
      o.precision = precision;
    }
    ParallelOptions &p = o.parallel;
    p.mesh.assign(mesh.begin(), mesh.end());
    if (devices > 0) { // with a mesh too: refused by the search pass
      p.mesh.push_back(devices);
      p.searchMeshShape = true;
    }
    p.dataParallel = dp;
    p.tensorParallel = tp;
    p.pipelineStages = pp;
    p.pipelineSchedule = pipelineSchedule;
    p.virtualStages = virtualStages;
    p.stageReplicas.assign(stageReplicas.begin(), stageReplicas.end());
    p.zero = int(zero);
    p.sequenceParallel = sequenceParallel;
    p.preset = preset;
    p.clusterFile = cluster;
    p.compressGradients = compressGradients;
    p.sync = sync;
    p.backend = backend;
    p.averageEvery = averageEvery;
    p.servers = servers;
    p.staleness = staleness;
    // A size that does not parse reaches the search as a negative limit,
    // which it refuses with a message.
    if (!memoryLimit.empty())
      p.memoryLimit = plan::parseByteSize(memoryLimit).value_or(-1);
    p.bucketBytes = int64_t(plan::parseByteSize(bucket).value_or(0));
    return o;
  }
};

} // namespace

void registerCompilePipeline() {
  // Once per process: MLIR refuses a pipeline registered twice.
  static PassPipelineRegistration<CompilePipelineOptions> registration(
      "dtc-compile-pipeline",
      "What dtc compile runs: training step, sharding search, partition, fusion, layout, "
      "prologue, schedule and buffer assignment",
      [](OpPassManager &pm, const CompilePipelineOptions &options) {
        buildCompilePipeline(pm, options.toCompileOptions());
      });
}

namespace {

int64_t intAttrOf(func::FuncOp main, StringRef name) {
  auto value = main->getAttrOfType<IntegerAttr>(name);
  return value ? value.getInt() : 0;
}

/// `options` with the stage count and schedule of `pipeline` (dtc.pipeline's
/// form: stages, virtual_stages, replicas; null: one stage) pinned, as
/// --devices N --pp P would pin them (each stage searched on N / P devices).
CompileOptions withStages(DictionaryAttr pipeline, CompileOptions options) {
  auto integer = [&](StringRef name) {
    auto a = pipeline ? pipeline.getAs<IntegerAttr>(name) : IntegerAttr();
    return a ? a.getInt() : 1;
  };
  ParallelOptions &parallel = options.parallel;
  parallel.pipelineStages = integer("stages");
  // Replicated stages: the stage mesh is one copy's.
  int64_t copies = parallel.pipelineStages;
  if (auto replicas = pipeline ? pipeline.getAs<DenseI64ArrayAttr>("replicas") : nullptr) {
    parallel.stageReplicas.assign(replicas.asArrayRef().begin(), replicas.asArrayRef().end());
    copies = 0;
    for (int64_t n : parallel.stageReplicas)
      copies += n;
  }
  if (copies > 1 && parallel.mesh.size() == 1)
    parallel.mesh = {parallel.mesh.front() / copies};
  if (integer("virtual_stages") > 1) {
    parallel.pipelineSchedule = "interleaved";
    parallel.virtualStages = integer("virtual_stages");
  }
  parallel.searchSchedule = false;
  parallel.stepWithMicroBatches = nullptr;
  return options;
}

/// withStages of what the stage search chose for `compiled`.
CompileOptions withStagesOf(ModuleOp compiled, CompileOptions options) {
  return withStages(compiled->getAttrOfType<DictionaryAttr>(attr::kPipeline), options);
}

/// The pipeline on a copy of `module`, again with a lowered search limit
/// while buffer assignment's arena overshoots `limit` (the figure dtc
/// simulate checks; the search counts weights, state and kept activations,
/// not the backward's transients and workspace). The compiled copy, or
/// failure (with `outOfMemory` set when memory was what failed and keeping
/// fewer activations might fit). Given `recomputedNothing`, a step that
/// selective recomputation left as it was (the plan without it) stops the
/// compile at once, failing with it set.
FailureOr<OwningOpRef<ModuleOp>> compileFitting(ModuleOp module, const CompileOptions &options,
                                                const cost::Cluster &cluster, double limit,
                                                bool &outOfMemory,
                                                bool *recomputedNothing = nullptr) {
  bool searched = options.parallel.devices() > 1;
  CompileOptions attempt = options;
  attempt.parallel.cluster = cluster;
  constexpr int kTries = 4;
  int64_t firstArena = 0;
  // Searched stages: a search again under a lower limit first keeps the
  // stage count (and schedule) the first search chose, searching only
  // each stage's split: the stage search is most of a large model's
  // compile time, and a limit lowered by the workspace rarely changes the
  // count. The first search's note says what it compared.
  std::string stagesNote, bucketsNote;
  bool bucketsDropped = false; // the first plan over the limit compiled without buckets
  int64_t bucketedArena = 0;   // that first plan's arena, with its buckets
  std::optional<CompileOptions> unpinned;
  // The step (with `o`'s micro-batches) of `model`: built once for each
  // search (under a lower limit, or with the stage count kept) to split a
  // copy of.
  auto buildStep = [&](ModuleOp model,
                       const CompileOptions &o) -> FailureOr<OwningOpRef<ModuleOp>> {
    OwningOpRef<ModuleOp> step = model.clone();
    PassManager pm(module.getContext());
#ifdef NDEBUG
    // As the split's below: a stage search builds the step once per
    // micro-batch count it weighs (GPT-3 on --devices 1024: six).
    pm.enableVerifier(false);
#endif
    buildStepPipeline(pm, o);
    if (failed(pm.run(*step))) {
      outOfMemory = (*step)->hasAttr(attr::kOutOfMemory);
      return failure();
    }
    if (recomputedNothing && o.training && o.training->recompute == "selective" &&
        llvm::any_of(step->getOps<func::FuncOp>(), [](func::FuncOp f) {
          return f->hasAttr(attr::kRecomputedNothing);
        })) {
      *recomputedNothing = true;
      return failure();
    }
    return step;
  };
  // No --micro-batches: a step built again for another count.
  auto stepWith = [&, modelAt = options.modelAt](
                      const CompileOptions &o, int64_t microBatches,
                      std::string &refused) -> FailureOr<OwningOpRef<ModuleOp>> {
    FailureOr<OwningOpRef<ModuleOp>> model = modelAt(microBatches, refused);
    if (failed(model))
      return failure();
    CompileOptions withCount = o;
    withCount.training->microBatches = microBatches;
    return buildStep(**model, withCount);
  };
  // Batch norms' statistics are over the micro-batch: a count not given
  // stays 1 for them.
  bool batchStatistics = false;
  module.walk([&](graph::BatchNormOp) { batchStatistics = true; });
  bool chooseMicroBatches = options.modelAt && options.training && !batchStatistics;
  std::string microBatchesNote;
  if (!options.parallel.stagesSearched.empty()) {
    // A count a search chose, kept with its micro-batches: its note says
    // how they were chosen.
  } else if (chooseMicroBatches && options.parallel.pipelineStages > 1) {
    // Pinned stages: the count for them, the step built with it.
    int64_t batch = batchSamplesOf(module.lookupSymbol<func::FuncOp>("main"));
    int64_t m = microBatchesFor(batch, options.parallel.devices(), cluster.devicesPerNode,
                                options.parallel.dataParallel);
    attempt.training->microBatches = m;
    microBatchesNote = "micro-batches: " + std::to_string(m) + " of " +
                       std::to_string(batch / m) + (batch / m == 1 ? " sample" : " samples") +
                       " for --pp " +
                       std::to_string(options.parallel.pipelineStages) +
                       " (--micro-batches not given: the most that leave each data-parallel "
                       "rank a sample)";
  } else if (options.modelAt && options.training && options.parallel.pipelineStages > 1) {
    microBatchesNote = "micro-batches: 1 for --pp " +
                       std::to_string(options.parallel.pipelineStages) +
                       " (--micro-batches not given, and the model's batch norms would see "
                       "each micro-batch's statistics: --micro-batches N splits it anyway)";
  } else if (chooseMicroBatches && options.parallel.pipelineStages == 0) {
    attempt.parallel.stepWithMicroBatches = [&, stepWith, o = attempt](int64_t m,
                                                                       std::string &refused) {
      return stepWith(o, m, refused);
    };
  }
  std::string refused;
  FailureOr<OwningOpRef<ModuleOp>> built =
      attempt.training && attempt.training->microBatches > 1 && chooseMicroBatches
          ? stepWith(attempt, attempt.training->microBatches, refused)
          : buildStep(module, attempt);
  if (failed(built)) {
    if (!refused.empty()) // pinned stages' micro-batches the model does not take
      emitError(module.getLoc()) << microBatchesNote << ", which the model does not take: "
                                 << refused << " (--micro-batches 1 runs the batch whole)";
    return failure();
  }
  OwningOpRef<ModuleOp> step = std::move(*built), searchedStep;
  for (int tries = 1;; ++tries) {
    if (compileCancelled())
      return failure();
    OwningOpRef<ModuleOp> work = step->clone();
    PassManager pm(module.getContext());
#ifdef NDEBUG
    // Verifying the split module after each pass took a quarter of a
    // GPT-3 stage's compile; dtc-opt (and so every pass's lit test) and
    // debug builds still verify, and the plan loader validates what the
    // emitter writes (docs/sharding.md, "Planning time").
    pm.enableVerifier(false);
#endif
    buildSplitPipeline(pm, attempt);
    // A kept stage count's errors are said only when there is nothing to
    // fall back to.
    std::vector<Diagnostic> held;
    LogicalResult ran = failure();
    {
      std::optional<ThreadDiagnosticHandler> hold;
      if (unpinned)
        hold.emplace(module.getContext(), [&](Diagnostic &d) {
          held.push_back(std::move(d));
          return success();
        });
      ran = pm.run(*work);
    }
    if (failed(ran) && unpinned) {
      // The kept count does not fit the lower limit: search the others
      // again. Fewer stages are searched under the limit the count was
      // chosen under (the lowered one answers that count's overflow, not
      // theirs); from one stage, all of them under the lowered limit.
      int64_t kept = attempt.parallel.pipelineStages;
      double lowered = attempt.parallel.memoryLimit;
      attempt = *unpinned;
      if (kept > 1)
        attempt.parallel.pipelineStagesBelow =
            attempt.parallel.pipelineStagesBelow > 0
                ? std::min(attempt.parallel.pipelineStagesBelow, kept)
                : kept;
      else
        attempt.parallel.memoryLimit = lowered;
      unpinned.reset();
      stagesNote.clear();
      if (searchedStep)
        step = std::move(searchedStep);
      --tries;
      continue;
    }
    for (Diagnostic &d : held)
      module.getContext()->getDiagEngine().emit(std::move(d));
    if (failed(ran)) {
      outOfMemory = (*work)->hasAttr(attr::kOutOfMemory) || tries > 1;
      if (tries > 1)
        module.emitError() << "(the search ran again with its limit lowered to "
                           << plan::formatBytes(int64_t(attempt.parallel.memoryLimit))
                           << ": its first plan needed " << plan::formatBytes(firstArena)
                           << " with the workspace the search does not count, more than "
                           << plan::formatBytes(int64_t(limit)) << ")";
      return failure();
    }
    // A pipeline's stages differ: the largest arena must fit.
    func::FuncOp main;
    for (func::FuncOp f : programFunctions(*work))
      if (!main || intAttrOf(f, attr::kArenaBytes) > intAttrOf(main, attr::kArenaBytes))
        main = f;
    int64_t arena = intAttrOf(main, attr::kArenaBytes);
    if (double(arena) <= limit) {
      if (!stagesNote.empty())
        for (func::FuncOp f : programFunctions(*work))
          addNote(f, stagesNote + "; searched again with " +
                         std::to_string(attempt.parallel.pipelineStages) +
                         (attempt.parallel.pipelineStages == 1 ? " stage" : " stages") +
                         " kept, under the lower limit below");
      if (!microBatchesNote.empty())
        addNote(programFunctions(*work).front(), microBatchesNote);
      if (!bucketsNote.empty())
        addNote(main, bucketsNote);
      if (tries > 1)
        addNote(main, "memory: the search's limit lowered to " +
                          plan::formatBytes(int64_t(attempt.parallel.memoryLimit)) +
                          " so that the plan, with its workspace, fits " +
                          plan::formatBytes(int64_t(limit)) + " (" + std::to_string(tries) +
                          " searches)");
      return work;
    }
    int64_t persistent = intAttrOf(main, attr::kParameterBytes);
    if (tries == 1)
      firstArena = arena;
    // The next search keeps room for what this one did not count (the
    // backward's transients, workspace), and goes below this one's limit.
    double searchLimit = attempt.parallel.memoryLimitOn(cluster);
    double uncounted = double(arena - intAttrOf(main, attr::kSearchedBytes));
    double lowered = std::min(searchLimit - (double(arena) - limit), limit - uncounted) -
                     0.01 * uncounted;
    // A bucket keeps its members' inputs (and what waits behind it) until
    // it is sent: over the limit, the same split is compiled once without
    // buckets; when that does not fit either, the search goes on under a
    // lower limit without them where they were what made the plan larger,
    // else with them.
    bool bucketed = false;
    work->walk([&](graph::BucketOp) { bucketed = true; });
    if (bucketed && !bucketsDropped) {
      bucketsNote = "buckets: none (--bucket 0): with them the plan needs " +
                    plan::formatBytes(arena) + ", more than the " +
                    plan::formatBytes(int64_t(limit));
      bucketsDropped = true;
      bucketedArena = arena;
      attempt.parallel.bucketBytes = 0;
      --tries;
      continue;
    }
    if (bucketsDropped && attempt.parallel.bucketBytes == 0 && arena >= bucketedArena) {
      attempt.parallel.bucketBytes = options.parallel.bucketBytes;
      bucketsNote.clear();
    }
    if (!searched || tries == kTries || lowered <= 0) {
      outOfMemory = double(persistent) < limit; // else no recomputation helps
      bool recomputed = options.training && options.training->recompute == "full";
      return module.emitError()
             << "the plan needs " << plan::formatBytes(arena) << " per device"
             << (main->hasAttr(attr::kStage)
                     ? " on its largest pipeline stage (stage " +
                           std::to_string(main->getAttrOfType<IntegerAttr>(attr::kStage).getInt()) +
                           ")"
                     : std::string())
             << " ("
             << plan::formatBytes(persistent) << " weights, optimizer state and load-time values, "
             << plan::formatBytes(arena - persistent)
             << " activations and workspace), more than the " << plan::formatBytes(int64_t(limit))
             << (options.parallel.memoryLimit > 0 ? " given by --memory-limit"
                                                  : " the device holds")
             << (searched ? " after " + std::to_string(tries) + " searches" : std::string())
             << (recomputed ? " with full recomputation" : "")
             << ": use more devices, "
             << (options.parallel.pipelineStages > 1 ? "more pipeline stages (--pp), " : "")
             << "--micro-batches N (activations of a smaller batch at a time), "
             << (recomputed || !options.training ? "" : "--recompute full, ")
             << "--zero 3 (split weights) or a larger --memory-limit";
    }
    double chosenUnder = attempt.parallel.memoryLimit;
    attempt.parallel.memoryLimit = lowered;
    if (auto below = (*work)->getAttrOfType<IntegerAttr>(attr::kPipelineStagesBelow))
      attempt.parallel.pipelineStagesBelow = below.getInt();
    if (attempt.parallel.pipelineStages == 0 && attempt.training) {
      // Keep the count (and schedule, and micro-batches) the search chose,
      // with its note.
      unpinned = attempt;
      unpinned->parallel.memoryLimit = chosenUnder;
      attempt = withStagesOf(*work, attempt);
      auto pipeline = (*work)->getAttrOfType<DictionaryAttr>(attr::kPipeline);
      auto chosen = pipeline ? pipeline.getAs<IntegerAttr>("micro_batches") : IntegerAttr();
      if (int64_t m = chosen ? chosen.getInt() : microBatchesOf(main); // one stage: main's
          chooseMicroBatches && m != microBatchesOf(step->lookupSymbol<func::FuncOp>("main"))) {
        std::string notTaken; // the search built it: not expected
        FailureOr<OwningOpRef<ModuleOp>> rebuilt = stepWith(attempt, m, notTaken);
        if (failed(rebuilt)) {
          if (!notTaken.empty())
            emitError(module.getLoc()) << notTaken;
          return failure();
        }
        attempt.training->microBatches = m;
        searchedStep = std::move(step);
        step = std::move(*rebuilt);
      }
      for (const std::string &note : notesOf(main))
        if (note.find("searched from --devices") != std::string::npos &&
            note.rfind("pipeline: ", 0) == 0)
          stagesNote = note;
    }
  }
}

/// One --recompute mode's compile: the module, or failure with the
/// diagnostics it held.
struct Attempt {
  FailureOr<OwningOpRef<ModuleOp>> work = failure();
  bool outOfMemory = false;
  bool recomputedNothing = false; // the mode's step is the one without it: skipped
  std::vector<Diagnostic> held;
};

/// A plan that fills more than this share of the device's memory was
/// bound by it: --recompute auto then also tries the next mode.
constexpr double kTightMemory = 0.95;

/// One compiled --recompute mode, its plan and what the simulator says of it.
struct Candidate {
  OwningOpRef<ModuleOp> module;
  std::string mode;
  plan::Plan plan;
  double step = 0;      // seconds; 0 when it cannot be simulated
  int64_t peak = 0;     // bytes, the largest rank's
  std::string note;     // why this mode, "" when nothing to say
  std::vector<Diagnostic> held; // what its compile said (warnings), shown if chosen
};

/// Whether compiles may run on threads beside this one: the context
/// allows it and the machine has the cores.
bool compilesBeside(MLIRContext *context) {
  return context->isMultithreadingEnabled() && std::thread::hardware_concurrency() > 1;
}

/// Loads every dialect a compile with `options` needs: loading one is not
/// thread-safe, so it is done before compiles run on several threads.
void loadDialectsFor(MLIRContext *context, const CompileOptions &options) {
  PassManager pm(context);
  buildCompilePipeline(pm, options);
  DialectRegistry registry;
  pm.getDependentDialects(registry);
  context->appendDialectRegistry(registry);
  context->loadAllAvailableDialects();
}

/// A compile of a candidate's module into its plan: compileWithCompression
/// or one of the compiles that call it.
using CompileFn =
    function_ref<LogicalResult(ModuleOp, plan::Plan &, const CompileOptions &)>;

/// `candidate` compiled by `compile` with `options`, what the compile says
/// held in `candidate.held` until it is known whose plan is kept.
LogicalResult compileHeld(Candidate &candidate, const CompileOptions &options,
                          CompileFn compile) {
  ThreadDiagnosticHandler hold(candidate.module->getContext(), [&](Diagnostic &d) {
    candidate.held.push_back(std::move(d));
    return success();
  });
  return compile(*candidate.module, candidate.plan, options);
}

/// "dp=4 x tp=2": a plan's mesh ("one device" without one).
std::string meshText(const plan::Plan &plan) {
  std::vector<std::string> axes;
  for (const plan::MeshAxis &axis : plan.mesh().axes())
    axes.push_back(axis.name() + "=" + std::to_string(axis.size()));
  return axes.empty() ? std::string("one device") : llvm::join(axes, " x ");
}

/// What `candidate`'s compile said, shown.
void emitHeld(Candidate &candidate) {
  for (Diagnostic &d : candidate.held)
    candidate.module->getContext()->getDiagEngine().emit(std::move(d));
  candidate.held.clear();
}

/// Simulates `candidate`'s plan on the cluster it was compiled for (with
/// as many nodes as its ranks need).
void predict(Candidate &candidate, cost::Cluster cluster) {
  int64_t ranks = plan::planRanks(candidate.plan);
  if (cluster.devicesPerNode > 0)
    cluster.nodes =
        std::max(cluster.nodes, (ranks + cluster.devicesPerNode - 1) / cluster.devicesPerNode);
  cost::Simulation sim = cost::simulate(candidate.plan, cluster, /*keepEvents=*/false);
  if (!sim.error.empty())
    return;
  candidate.step = sim.stepSeconds;
  for (const cost::RankTime &rank : sim.ranks)
    candidate.peak = std::max(candidate.peak, rank.memoryPeakBytes);
}

/// compileFitting, and when the stage search chose replicated stages
/// (predicted by its own figures, whose bubble formula is rougher for
/// replicas), the same compile without them: the one the simulator says is
/// faster, with a note on both.
FailureOr<OwningOpRef<ModuleOp>> compileFittingChecked(ModuleOp module,
                                                       const CompileOptions &options,
                                                       const cost::Cluster &cluster,
                                                       double limit, bool &outOfMemory,
                                                       bool *recomputedNothing = nullptr) {
  // The search prices weight gradients' reductions as bucketed; where its
  // plans do not fit, the compile without buckets (priced one by one) may
  // find one that does.
  FailureOr<OwningOpRef<ModuleOp>> first = failure();
  {
    std::vector<Diagnostic> held;
    std::optional<ThreadDiagnosticHandler> hold;
    if (options.parallel.bucketBytes > 0)
      hold.emplace(module.getContext(), [&](Diagnostic &d) {
        held.push_back(std::move(d));
        return success();
      });
    first = compileFitting(module, options, cluster, limit, outOfMemory, recomputedNothing);
    hold.reset();
    bool retry = failed(first) && outOfMemory && options.parallel.bucketBytes > 0 &&
                 !(recomputedNothing && *recomputedNothing);
    if (retry) {
      CompileOptions unbucketed = options;
      unbucketed.parallel.bucketBytes = 0;
      first = compileFitting(module, unbucketed, cluster, limit, outOfMemory, recomputedNothing);
      if (succeeded(first))
        addNote(programFunctions(**first).front(),
                "buckets: none (--bucket 0): with them no plan the search found fits " +
                    plan::formatBytes(int64_t(limit)));
    } else {
      for (Diagnostic &d : held)
        module.getContext()->getDiagEngine().emit(std::move(d));
    }
  }
  auto replicated = [](ModuleOp m) {
    auto pipeline = m->getAttrOfType<DictionaryAttr>(attr::kPipeline);
    return pipeline && pipeline.get("replicas");
  };
  if (failed(first) || !replicated(**first) || options.parallel.pipelineStages != 0)
    return first;
  // The plan without replicas: the count the search would have chosen
  // without them, pinned (its split searched again, not the counts).
  CompileOptions plain = options;
  plain.parallel.searchStageReplicas = false;
  if (auto kept = (**first)->getAttrOfType<DictionaryAttr>(attr::kPipelineUnreplicated)) {
    (**first)->removeAttr(attr::kPipelineUnreplicated);
    plain = withStages(kept, plain);
    if (auto m = kept.getAs<IntegerAttr>("micro_batches"); m && plain.training)
      plain.training->microBatches = m.getInt();
    if (auto note = kept.getAs<StringAttr>("note"))
      plain.parallel.stagesSearched = note.str();
  }
  bool unfit = false;
  FailureOr<OwningOpRef<ModuleOp>> second = failure();
  {
    ThreadDiagnosticHandler quiet(module.getContext(), [](Diagnostic &) { return success(); });
    second = compileFitting(module, plain, cluster, limit, unfit);
  }
  if (failed(second))
    return first;
  Candidate a{std::move(*first), "replicas", {}, 0, 0, {}, {}};
  Candidate b{std::move(*second), "none", {}, 0, 0, {}, {}};
  for (Candidate *c : {&a, &b})
    if (succeeded(emitPlan(*c->module, c->plan)))
      predict(*c, cluster);
  bool keepReplicas = a.step > 0 && (b.step <= 0 || a.step < b.step);
  Candidate &kept = keepReplicas ? a : b;
  addNote(programFunctions(*kept.module).front(),
          "pipeline: stage replicas " + std::string(keepReplicas ? "kept" : "not kept") +
              ": simulated " + plan::formatSeconds(a.step) + " a step with them, " +
              plan::formatSeconds(b.step) + " without");
  return std::move(kept.module);
}

/// `candidate` becomes `module` and its plan `plan`, with `note` (if any)
/// among the first program's notes in both: in the plan after the
/// recomputation's own note, or before the first program's summary lines.
LogicalResult keep(ModuleOp module, Candidate &candidate, plan::Plan &plan,
                   const std::string &note) {
  if (!note.empty())
    addNote(programFunctions(*candidate.module).front(), note);
  module.getBodyRegion().takeBody(candidate.module->getBodyRegion());
  module->setAttrs(candidate.module.get()->getAttrDictionary());
  if (candidate.plan.ranks_size() == 0)
    return emitPlan(module, plan);
  plan = std::move(candidate.plan);
  if (note.empty())
    return success();
  auto &notes = *plan.mutable_decisions()->mutable_notes();
  int at = notes.size();
  for (int i = 0; i < notes.size(); ++i) {
    llvm::StringRef line = notes.Get(i);
    if (line.starts_with("recompute: "))
      at = i + 1;
    else if (at == notes.size() && (line.starts_with("prologue: ") ||
                                    line.starts_with("instructions: ")))
      at = i;
  }
  *notes.Add() = note;
  std::rotate(notes.begin() + at, notes.end() - 1, notes.end());
  return success();
}

} // namespace

/// compileToPlan for one choice of gradient compression.
LogicalResult compileWithCompression(ModuleOp module, plan::Plan &plan,
                                     const CompileOptions &options) {
  if (!module.lookupSymbol<func::FuncOp>("main"))
    return module.emitError("no function 'main' to compile");
  std::string error;
  std::optional<cost::Cluster> cluster = options.parallel.loadCluster(error);
  if (!cluster)
    return module.emitError(error);
  double limit = options.parallel.memoryLimitOn(*cluster);

  // --recompute auto: the cheapest recomputation whose plan fits, none
  // first. A plan that fills the device's memory (its search gave up speed
  // to fit) is compared with the next mode's: recomputing a little can free
  // memory for a faster split, and the faster of the two predicted steps
  // is kept. With several devices the search dominates the compile, so
  // selective recomputation compiles beside none on a second thread
  // (docs/recompute-auto.md). What did not fit is said only if nothing does.
  std::vector<std::string> modes{"none"};
  if (options.training && options.training->recompute != "auto")
    modes = {options.training->recompute};
  else if (options.training)
    modes = {"none", "selective", "full"};
  MLIRContext *context = module.getContext();
  // Each mode's diagnostics are held until it is known whose are shown.
  std::atomic<bool> notNeeded{false}; // the speculative compile's
  // A compile this one runs beside another's (compileCheckingMeshes) stops
  // with it.
  const std::atomic<bool> *outer = compileCancelFlag();
  auto compileMode = [&, outer](const std::string &mode, bool speculative) {
    Attempt attempt;
    setCompileCancelFlag(speculative ? &notNeeded : outer, speculative ? outer : nullptr);
    CompileOptions o = options;
    if (o.training)
      o.training->recompute = mode;
    ThreadDiagnosticHandler hold(context, [&](Diagnostic &diagnostic) {
      attempt.held.push_back(std::move(diagnostic));
      return success();
    });
    attempt.work = compileFittingChecked(module, o, *cluster, limit, attempt.outOfMemory,
                                         modes.size() > 1 ? &attempt.recomputedNothing : nullptr);
    setCompileCancelFlag(speculative ? nullptr : outer);
    return attempt;
  };
  std::future<Attempt> ahead;
  if (modes.size() > 1 && options.parallel.devices() > 1 && compilesBeside(context)) {
    loadDialectsFor(context, options);
    ahead = std::async(std::launch::async, compileMode, modes[1], true);
  }
  // `module` is read by the other thread until it ends.
  auto finish = [&](Candidate &chosen, const std::string &note) {
    notNeeded = true; // a speculative compile still running stops at its next search
    if (ahead.valid())
      ahead.wait();
    for (Diagnostic &diagnostic : chosen.held)
      context->getDiagEngine().emit(std::move(diagnostic));
    return keep(module, chosen, plan, note);
  };
  std::optional<Candidate> kept; // the first that fits, when tight
  bool selectiveIsNone = false; // selective recomputation found nothing to recompute
  for (auto [i, mode] : llvm::enumerate(modes)) {
    bool last = i + 1 == modes.size();
    Attempt attempt = i == 1 && ahead.valid() ? ahead.get() : compileMode(mode, false);
    if (attempt.recomputedNothing && !last) {
      // Its plan would be none's: a tight one that fits is kept as it is
      // (what comparing the two would keep); one that does not fit goes
      // on to full recomputation.
      selectiveIsNone = true;
      if (kept)
        return finish(*kept, "recompute: none chosen by --recompute auto: its plan fills " +
                                 plan::formatBytes(kept->peak) + " of " +
                                 plan::formatBytes(int64_t(limit)) +
                                 ", and selective recomputation finds nothing to recompute");
      continue;
    }
    if (failed(attempt.work) && kept)
      return finish(*kept, kept->note);
    if (failed(attempt.work)) {
      if (last || !attempt.outOfMemory) {
        notNeeded = true;
        if (ahead.valid())
          ahead.wait();
        for (Diagnostic &diagnostic : attempt.held)
          context->getDiagEngine().emit(std::move(diagnostic));
        if (last && modes.size() > 1 && attempt.outOfMemory)
          module.emitError("(--recompute auto tried none, selective and full: none fits)");
        return failure();
      }
      continue;
    }
    Candidate candidate{std::move(*attempt.work), mode, {}, 0, 0, {}, std::move(attempt.held)};
    if (i > 0 && !kept)
      candidate.note = "recompute: " + mode + " chosen by --recompute auto: without recomputation" +
                       (i > 1 && !selectiveIsNone ? " or with selective recomputation" : "") +
                       " the plan does not fit " + plan::formatBytes(int64_t(limit)) +
                       " per device" +
                       (selectiveIsNone ? " (selective recomputation finds nothing to recompute)"
                                        : "");
    if (modes.size() == 1)
      return finish(candidate, candidate.note);
    if (failed(emitPlan(*candidate.module, candidate.plan)))
      return failure();
    predict(candidate, *cluster);
    if (kept) {
      bool faster = candidate.step > 0 && candidate.step < kept->step;
      Candidate &chosen = faster ? candidate : *kept;
      auto with = [](const std::string &m) {
        return m == "none" ? std::string("without recomputation") : "with " + m + " recomputation";
      };
      std::string note = (!faster && !kept->note.empty() ? kept->note + "; "
                                                          : "recompute: " + chosen.mode +
                                                                " chosen by --recompute auto: ") +
                         "predicted step " + plan::formatSeconds(chosen.step) + ", " +
                         (faster ? "faster than " + plan::formatSeconds(kept->step) + " " +
                                       with(kept->mode) + ", whose plan fills " +
                                       plan::formatBytes(kept->peak) + " of " +
                                       plan::formatBytes(int64_t(limit))
                                 : "against " + plan::formatSeconds(candidate.step) + " " +
                                       with(mode) + " (the plan " + with(chosen.mode) +
                                       " fills " + plan::formatBytes(kept->peak) + " of " +
                                       plan::formatBytes(int64_t(limit)) + ")");
      return finish(chosen, note);
    }
    if (last || double(candidate.peak) < kTightMemory * limit)
      return finish(candidate, candidate.note);
    kept = std::move(candidate);
  }
  return failure();
}

/// A labelled compile to compare (--compress-gradients auto, --sync auto).
struct Choice {
  std::string label;
  CompileOptions options;
};

/// Each choice compiled on a copy of `module` by `compile`, simulated on
/// the plan's cluster, the fastest kept in `module` and `plan`, with the
/// note "<what>: <label> chosen by <flag> (predicted step: <each, or why
/// it failed>)<suffix>". When every choice fails, the first's errors.
LogicalResult keepFastest(ModuleOp module, plan::Plan &plan, const CompileOptions &options,
                          const std::vector<Choice> &choices,
                          function_ref<LogicalResult(ModuleOp, plan::Plan &,
                                                     const CompileOptions &)>
                              compile,
                          const std::string &what, const std::string &flag,
                          const std::string &suffix = "") {
  std::string error;
  std::optional<cost::Cluster> cluster = options.parallel.loadCluster(error);
  if (!cluster)
    return module.emitError(error);
  std::optional<Candidate> best;
  std::vector<std::string> figures;
  std::vector<Diagnostic> firstFailure;
  for (const Choice &choice : choices) {
    Candidate candidate{module.clone(), choice.label, {}, 0, 0, {}, {}};
    LogicalResult compiled = failure();
    std::string why;
    {
      ThreadDiagnosticHandler hold(module.getContext(), [&](Diagnostic &d) {
        if (why.empty() && d.getSeverity() == DiagnosticSeverity::Error)
          why = d.str();
        candidate.held.push_back(std::move(d));
        return success();
      });
      compiled = compile(*candidate.module, candidate.plan, choice.options);
    }
    if (failed(compiled)) {
      if (firstFailure.empty())
        firstFailure = std::move(candidate.held);
      figures.push_back(candidate.mode + " failed: " + why);
      continue;
    }
    predict(candidate, *cluster);
    figures.push_back(candidate.mode + " " + plan::formatSeconds(candidate.step));
    if (!best || (candidate.step > 0 && candidate.step < best->step))
      best = std::move(candidate);
  }
  if (!best) {
    for (Diagnostic &d : firstFailure)
      module.getContext()->getDiagEngine().emit(std::move(d));
    return failure();
  }
  for (Diagnostic &d : best->held)
    module.getContext()->getDiagEngine().emit(std::move(d));
  std::string note = what + ": " + best->mode + " chosen by " + flag +
                     " (predicted step: " + llvm::join(figures, ", ") + ")" + suffix;
  return keep(module, *best, plan, note);
}

/// compileWithCompression, and again with the q, k, v projections as the
/// model packs them where the step laid them out by heads
/// (dtc-interleave-qkv) but the search split none by heads: the layout
/// then costs a copy of each such weight and its gradient a step and
/// breaks the collectives' buckets (GPT-2 small on 8 H100s, its split
/// data-parallel but for the loss's classes: 4.92 ms by heads, 4.23 ms
/// packed). The faster simulated plan is kept. With `meshSearched`
/// (--devices, or a --mesh whose axes' roles are searched) the packed step
/// is compiled wherever the step has such projections, split by heads or
/// not: its search may pick another mesh, one that the by-heads step's
/// search ranked behind a split by heads (GPT-2 small on --devices 8, its
/// token embedding padded: dp=4 x tp=2 by heads 5.10 ms, x=8 packed 4.23
/// ms).
LogicalResult compileCheckingLayout(ModuleOp module, plan::Plan &plan,
                                    const CompileOptions &options, bool meshSearched) {
  if (!options.interleaveQkv || options.parallel.devices() <= 1)
    return compileWithCompression(module, plan, options);
  Candidate byHeads{module.clone(), "by heads", {}, 0, 0, {}, {}};
  LogicalResult compiled = compileHeld(byHeads, options, compileWithCompression);
  auto counts = (*byHeads.module)->getAttrOfType<DenseI64ArrayAttr>(attr::kInterleavedHeads);
  if (failed(compiled) || !counts || counts.size() != 2 || counts[0] == 0 ||
      (counts[1] > 0 && !meshSearched)) {
    emitHeld(byHeads);
    return failed(compiled) ? failure() : keep(module, byHeads, plan, "");
  }
  CompileOptions asPacked = options;
  asPacked.interleaveQkv = false;
  Candidate packed{module.clone(), "packed", {}, 0, 0, {}, {}};
  std::string error;
  std::optional<cost::Cluster> cluster = options.parallel.loadCluster(error);
  if (!cluster || failed(compileHeld(packed, asPacked, compileWithCompression))) {
    emitHeld(byHeads);
    return keep(module, byHeads, plan, "");
  }
  predict(byHeads, *cluster);
  predict(packed, *cluster);
  bool keepPacked = packed.step > 0 && !(byHeads.step > 0 && byHeads.step < packed.step);
  Candidate &kept = keepPacked ? packed : byHeads;
  bool one = counts[0] == 1;
  std::string what = std::to_string(counts[0]) + " packed q, k, v projection" +
                     (one ? " " : "s ") +
                     (keepPacked ? (one ? "kept as the model packs it" : "kept as the model packs them")
                      : counts[1] == 0 ? "laid out by heads all the same"
                                       : "laid out by heads kept");
  std::string note;
  if (counts[1] == 0) {
    note = "layout: " + what + ": the searched split " +
           (one ? "does not cut it" : "cuts none of them") +
           " by heads, and the layout by heads costs a copy of each weight and its gradient a "
           "step (simulated " +
           plan::formatSeconds(packed.step) + " a step packed, " +
           plan::formatSeconds(byHeads.step) + " by heads)";
  } else {
    note = "layout: " + what + ": the step searched both ways (simulated " +
           plan::formatSeconds(packed.step) + " a step packed, on " + meshText(packed.plan) +
           "; " + plan::formatSeconds(byHeads.step) + " by heads, on " + meshText(byHeads.plan) +
           (one ? ", cut by heads)" : ", " + std::to_string(counts[1]) + " of them cut by heads)");
  }
  emitHeld(kept);
  return keep(module, kept, plan, note);
}

/// compileCheckingLayout, and for --devices N (or a --mesh whose axes'
/// roles are all searched) on a training step also plain data parallelism
/// over the devices (ZeRO and recomputation still chosen) and the dp x tp
/// meshes the search predicted close to its pick (attr::kCloseMeshes):
/// the one the simulator finds fastest. The search's objective adds
/// communication to compute, where the runtime overlaps them (GPT-2 small
/// on 4 H100s: the search's mixed split simulates at 6.69 ms, data
/// parallelism at 6.46 ms; on --mesh 2x2, 6.80 ms against 5.82 ms).
LogicalResult compileCheckingMeshes(ModuleOp module, plan::Plan &plan,
                                    const CompileOptions &options) {
  const ParallelOptions &p = options.parallel;
  bool devicesGiven = p.searchMeshShape && p.mesh.size() == 1;
  bool meshGiven = !p.searchMeshShape && p.mesh.size() > 1;
  int64_t devices = p.devices();
  if (!options.training || !(devicesGiven || meshGiven) || devices < 2 || !p.sync.empty() ||
      p.dataParallel || p.tensorParallel || p.pipelineStages > 1)
    return compileCheckingLayout(module, plan, options, /*meshSearched=*/false);
  std::vector<std::string> sizes;
  for (int64_t n : p.mesh)
    sizes.push_back(std::to_string(n));
  std::string flag = devicesGiven ? "--devices " + sizes[0] : "--mesh " + llvm::join(sizes, "x");
  std::string plainDp = "plain data parallelism (dp=" + std::to_string(devices) + ")";
  std::string error;
  std::optional<cost::Cluster> cluster = p.loadCluster(error);
  if (!cluster)
    return module.emitError(error);
  MLIRContext *context = module.getContext();
  // Each compile's diagnostics held until it is known whose are shown.
  // The search's own candidate compiles the packed step wherever there is
  // one (see compileCheckingLayout); pinned meshes where no heads split.
  auto compileHeld = [](Candidate &c, const CompileOptions &o, bool meshSearched = false) {
    return dtc::compileHeld(c, o, [&](ModuleOp m, plan::Plan &p, const CompileOptions &o) {
      return compileCheckingLayout(m, p, o, meshSearched);
    });
  };
  CompileOptions data = options;
  data.parallel.mesh.clear();
  data.parallel.searchMeshShape = false;
  data.parallel.dataParallel = devices;
  data.parallel.pipelineStages = 1;
  // Plain data parallelism does not depend on the search: it compiles
  // beside it, on another thread where there are cores for it. So do the
  // meshes the search names, beside each other. Each compile holds its
  // own diagnostics (compileHeld) on its own copy of the model.
  bool beside = compilesBeside(context);
  if (beside)
    for (const CompileOptions *o : std::initializer_list<const CompileOptions *>{&options, &data})
      loadDialectsFor(context, *o);
  auto launch = [&](auto compile) {
    return std::async(beside ? std::launch::async : std::launch::deferred, compile);
  };
  Candidate plain{module.clone(), "data parallel", {}, 0, 0, {}, {}};
  std::future<LogicalResult> plainCompiled = launch([&] { return compileHeld(plain, data); });
  auto settled = llvm::make_scope_exit([&] {
    if (beside && plainCompiled.valid())
      plainCompiled.wait();
  });
  Candidate searched{module.clone(), "searched", {}, 0, 0, {}, {}};
  LogicalResult compiled = compileHeld(searched, options, /*meshSearched=*/true);
  // The kept dp plan's mesh note says pinned, which the user did not.
  auto fromDevices = [&](Candidate &c) {
    std::string from = "(from " + flag + ")";
    auto reword = [&](std::string &line) {
      size_t at = line.find("(pinned by --");
      if (line.rfind("mesh: ", 0) == 0 && at != std::string::npos)
        line.replace(at, line.find(')', at) + 1 - at, from);
    };
    for (std::string &line : *c.plan.mutable_decisions()->mutable_notes())
      reword(line);
    for (func::FuncOp f : programFunctions(*c.module)) {
      std::vector<std::string> notes = notesOf(f);
      if (notes.empty())
        continue;
      SmallVector<Attribute> attrs;
      for (std::string &line : notes) {
        reword(line);
        attrs.push_back(StringAttr::get(context, line));
      }
      f->setAttr(attr::kNotes, ArrayAttr::get(context, attrs));
    }
  };
  if (failed(compiled)) {
    // Out of memory, its errors stand unless plain data parallelism has a
    // plan that fits (the search's retry under a lower limit, which makes
    // up for the workspace it does not count, can miss one).
    std::string why;
    for (Diagnostic &d : searched.held)
      if (d.getSeverity() == DiagnosticSeverity::Error && why.empty())
        why = d.str();
    if (why.find(" per device") == std::string::npos || failed(plainCompiled.get())) {
      emitHeld(searched);
      return failure();
    }
    emitHeld(plain);
    fromDevices(plain);
    return keep(module, plain, plan,
                "mesh: " + plainDp + " kept by " + flag +
                    ", the search's own plans not fitting (" +
                    why.substr(0, why.find(" (")) + ")");
  }
  // Already plain data parallelism: one "dp" axis, no stages.
  std::string mesh = meshText(searched.plan);
  if (searched.plan.mesh().axes_size() == 1 && searched.plan.mesh().axes(0).name() == "dp") {
    emitHeld(searched);
    return keep(module, searched, plan, "");
  }
  // Plain data parallelism, and the dp x tp meshes the search predicted
  // within its error of its pick (attr::kCloseMeshes), each pinned.
  std::vector<Candidate> others;
  others.push_back({module.clone(), "", {}, 0, 0, {}, {}}); // plain's place
  std::vector<CompileOptions> pins;
  for (func::FuncOp f : programFunctions(*searched.module))
    if (auto pairs = f->getAttrOfType<DenseI64ArrayAttr>(attr::kCloseMeshes))
      for (size_t i = 0; i + 1 < size_t(pairs.size()); i += 2) {
        CompileOptions pinned = data;
        pinned.parallel.dataParallel = pairs[i];
        pinned.parallel.tensorParallel = pairs[i + 1];
        std::string label =
            "dp=" + std::to_string(pairs[i]) + " x tp=" + std::to_string(pairs[i + 1]);
        others.push_back({module.clone(), label, {}, 0, 0, {}, {}});
        pins.push_back(pinned);
      }
  std::vector<std::future<LogicalResult>> pinnedCompiled;
  for (size_t i = 1; i < others.size(); ++i)
    pinnedCompiled.push_back(
        launch([&, i] { return compileHeld(others[i], pins[i - 1]); }));
  for (size_t i = 1; i < others.size(); ++i)
    if (failed(pinnedCompiled[i - 1].get()))
      others[i].step = -1;
  bool plainFailed = failed(plainCompiled.get());
  others.front() = std::move(plain);
  if (plainFailed)
    others.front().step = -1;
  predict(searched, *cluster);
  Candidate *best = &searched;
  std::vector<std::string> figures;
  for (Candidate &c : others) {
    if (c.step < 0) // did not compile
      continue;
    predict(c, *cluster);
    if (c.step <= 0 || searched.step <= 0)
      continue;
    figures.push_back((c.mode == "data parallel" ? plainDp : c.mode) +
                      " " + plan::formatSeconds(c.step));
    if (c.step < best->step * (1 - 0.01))
      best = &c;
  }
  std::string note;
  if (best != &searched)
    note = "mesh: " +
           (best->mode == "data parallel" ? plainDp : best->mode) + " kept by " + flag +
           ": simulated " + plan::formatSeconds(best->step) +
           " a step, against " + plan::formatSeconds(searched.step) +
           " for the searched split (" + mesh + "); compared: " + llvm::join(figures, ", ");
  else if (!figures.empty())
    note = "mesh: the searched split (" + mesh + ") kept by " + flag + ": simulated " +
           plan::formatSeconds(searched.step) + " a step; compared: " +
           llvm::join(figures, ", ");
  if (best != &searched)
    fromDevices(*best);
  emitHeld(*best);
  return keep(module, *best, plan, note);
}

/// One --sync mode's compile: --compress-gradients auto's choice among
/// compressions, or the one given.
LogicalResult compileWithSync(ModuleOp module, plan::Plan &plan, const CompileOptions &options) {
  if (options.parallel.compressGradients != "auto")
    return compileCheckingMeshes(module, plan, options);
  // --compress-gradients auto: each choice compiled (none, bf16, PowerSGD
  // rank 4), simulated on the plan's cluster, the fastest kept. Lossy
  // compression is the user's to allow; which pays is the cost model's to
  // say (docs/gradient-compression.md).
  std::vector<Choice> choices;
  for (const char *choice : {"", "bf16", "powersgd:4"}) {
    choices.push_back({*choice ? choice : "f32", options});
    choices.back().options.parallel.compressGradients = choice;
  }
  return keepFastest(module, plan, options, choices, compileCheckingMeshes,
                     "gradient compression", "--compress-gradients auto");
}

LogicalResult compileToPlan(ModuleOp module, plan::Plan &plan, const CompileOptions &options) {
  if (!options.training || options.parallel.sync != "auto")
    return compileWithSync(module, plan, options);
  // --sync auto: the all-reduce and each mode the user has allowed
  // resources or terms for, compiled and simulated on the plan's cluster,
  // the fastest kept. Synchronous parameter servers (the same updates as
  // the all-reduce) need --servers K, the ranks they run on; local SGD
  // (another trajectory) needs --average-every H, the drift the user
  // accepts; asynchronous servers need --staleness. Which pays is the cost
  // model's to say (docs/parameter-servers.md). Those two keep whole
  // weights on each worker: ZeRO, unless pinned, is not searched for them.
  std::vector<Choice> choices{{"all-reduce", options}};
  choices.back().options.parallel.sync = "";
  auto wholeWeights = [](CompileOptions o, const std::string &sync) {
    o.parallel.sync = sync;
    if (o.parallel.zero < 0)
      o.parallel.zero = 0;
    return o;
  };
  const ParallelOptions &p = options.parallel;
  if (p.servers > 0)
    choices.push_back(
        {std::to_string(p.servers) + (p.servers == 1 ? " parameter server" : " parameter servers") +
             (p.staleness > 0 ? " (staleness " + std::to_string(p.staleness) + ")" : ""),
         wholeWeights(options, "ps")});
  if (p.averageEvery > 0)
    choices.push_back({"local SGD averaging every " + std::to_string(p.averageEvery) + " steps",
                       wholeWeights(options, "local")});
  return keepFastest(module, plan, options, choices, compileWithSync, "synchronisation",
                     "--sync auto",
                     choices.size() == 1 ? "; give --servers K to compare K parameter servers, "
                                           "--average-every H to compare local SGD"
                                         : "");
}

} // namespace dtc
