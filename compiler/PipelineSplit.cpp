//===- PipelineSplit.cpp - a training step cut into pipeline stages -------===//
//
// The partitioned step (one program every rank of a data x tensor mesh
// runs) is cut into stages: each stage's ranks run the part of that program
// for a run of layers, and stages pass activations forward and gradients
// back. Cutting after partitioning keeps the pipeline orthogonal to the
// intra-stage split: a stage is a copy of the same mesh, its collectives
// stay among its own ranks, and a cut value crosses from a rank to the rank
// at the same data- and tensor-parallel place of the next stage, shard to
// shard. Passes description: compiler/Passes.td; why: docs/pipeline.md.
//
//===----------------------------------------------------------------------===//
#include "compiler/BufferLiveness.h"
#include "compiler/CompileNotes.h"
#include "compiler/MicroBatches.h"
#include "compiler/Passes.h"
#include "compiler/PipelineStages.h"
#include "compiler/TrainingStepParts.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"
#include "plan/PipelineSchedule.h"

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

#include <cmath>
#include <limits>
#include <map>
#include <numeric>

namespace dtc {
#define GEN_PASS_DEF_PIPELINESPLIT
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {


struct PipelineSplit : impl::PipelineSplitBase<PipelineSplit> {
  using PipelineSplitBase::PipelineSplitBase;

  void runOnOperation() override {
    // 0: as many as dtc-sharding-search chose for the devices.
    if (stages == 0) {
      ModuleOp module = getOperation();
      auto chosen = module->getAttrOfType<IntegerAttr>(attr::kPipelineStages);
      stages = chosen ? chosen.getInt() : 1;
      module->removeAttr(attr::kPipelineStages); // dtc.pipeline says it from here on
      // And the schedule, when the search found interleaving faster.
      if (auto counts = module->getAttrOfType<DenseI64ArrayAttr>(attr::kPipelineReplicas)) {
        replicas = llvm::to_vector(counts.asArrayRef());
        module->removeAttr(attr::kPipelineReplicas);
      }
      if (auto virtuals = module->getAttrOfType<IntegerAttr>(attr::kPipelineVirtualStages)) {
        schedule = "interleaved";
        virtualStages = virtuals.getInt();
        module->removeAttr(attr::kPipelineVirtualStages);
      }
    }
    if (stages <= 1)
      return;
    if (failed(split()))
      signalPassFailure();
  }

  LogicalResult split() {
    ModuleOp module = getOperation();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main)
      return module.emitError("no function 'main' to cut into pipeline stages");
    auto training = main->getAttrOfType<DictionaryAttr>(attr::kTraining);
    if (!training)
      return main.emitError("pipeline stages split a training step: --pp needs --train");
    std::optional<plan::PipelineSchedule> kind = plan::scheduleNamed(schedule);
    if (!kind)
      return main.emitError("--schedule must be gpipe, 1f1b or interleaved, got '")
             << schedule << "'";
    int64_t microBatches = microBatchesOf(main);
    if (std::string problem = plan::scheduleProblem(*kind, stages, microBatches, virtualStages);
        !problem.empty())
      return main.emitError() << "--pp " << int64_t(stages) << " --schedule " << schedule
                              << " --virtual-stages " << int64_t(virtualStages) << ": " << problem
                              << (*kind == plan::INTERLEAVED && virtualStages >= 2
                                      ? "; use --micro-batches " +
                                            std::to_string((microBatches / stages + 1) * stages)
                                      : std::string());
    SmallVector<int64_t> copies(replicas.begin(), replicas.end());
    if (!copies.empty() && int64_t(copies.size()) != stages)
      return main.emitError() << "--stage-replicas gives " << copies.size() << " counts for "
                              << int64_t(stages) << " stages: give one per stage";
    if (std::string problem = plan::replicaProblem(
            *kind, microBatches, std::vector<int64_t>(copies.begin(), copies.end()));
        !problem.empty())
      return main.emitError() << "--stage-replicas: " << problem;
    Block &block = main.getBody().front();
    // The model's pieces: a stage each, or (interleaved) `virtualStages`
    // a stage, chunk c on stage c mod stages.
    int64_t virtuals = *kind == plan::INTERLEAVED ? int64_t(virtualStages) : 1;
    int64_t chunks = stages * virtuals;
    auto stageOfChunk = [&](int c) { return int(c % stages); };
    auto virtualOf = [&](int c) { return int64_t(c / stages); };

    // The cuts.
    llvm::SetVector<Operation *> forward = forwardOps(block);
    Activations activations(block);
    SmallVector<size_t> checkpoints = pipelineCheckpoints(forward, activations, chunks);
    if (int64_t(checkpoints.size()) + 1 < chunks) {
      if (virtuals > 1)
        return main.emitError() << "--pp " << int64_t(stages) << " --virtual-stages " << virtuals
                                << ": the model can be cut into at most "
                                << checkpoints.size() + 1 << " pieces (it is cut where one "
                                << "activation alone carries the forward on, as between "
                                   "layers), not "
                                << chunks << "; use fewer stages or virtual stages";
      return main.emitError() << "--pp " << int64_t(stages) << ": the model can be cut into at most "
                              << checkpoints.size() + 1
                              << " pipeline stages (it is cut where one activation alone "
                                 "carries the forward on, as between layers); use --pp "
                              << checkpoints.size() + 1 << " or fewer";
    }
    SmallVector<double> costs = forwardCosts(forward);
    SmallVector<size_t> lasts = chunkEnds(forward, activations, checkpoints, chunks);
    // Cut where dtc-sharding-search's cost model said (its own note says
    // why), among more places than evening out FLOPs takes.
    bool byCosts =
        llvm::any_of(lasts, [&](size_t i) { return forward[i]->hasAttr(attr::kStageEnd); });
    size_t places = byCosts ? stageCutCandidates(forward, activations, chunks).size()
                            : checkpoints.size();
    llvm::DenseMap<Operation *, int> stageOf = chunkOfOps(block, forward, activations, lasts,
                                                          chunks);
    Operation *terminator = block.getTerminator();

    // A transfer runs in the forward part when its value is made there, or
    // when it is a weight a forward op of the receiving stage reads (a tied
    // embedding, sent each micro-batch from the stage that owns it).
    auto forwardTransfer = [&](Operation &op, int to) {
      return forward.contains(&op) ||
             (llvm::none_of(op.getResults(), [&](Value r) { return activations.contains(r); }) &&
              llvm::any_of(op.getUsers(), [&](Operation *user) {
                return forward.contains(user) && stageOf.lookup(user) == to;
              }));
    };

    // Forward transfers go to later stages and backward ones to earlier
    // ones; the schedule interleaves forwards and backwards differently on
    // each stage, so one direction between two stages must carry one part.
    std::map<std::pair<int, int>, std::pair<bool, bool>> parts; // (forward, backward)
    for (Operation &op : block.without_terminator()) {
      int s = stageOf.lookup(&op);
      if (s == kAnyStage || op.hasAttr(attr::kOncePerStep))
        continue;
      for (Operation *user : op.getUsers()) {
        int t = stageOf.lookup(user);
        if (user == terminator || t == kAnyStage || t == s)
          continue;
        auto &[f, bw] = parts[{s, t}];
        (forwardTransfer(op, t) ? f : bw) = true;
        if (f && bw)
          return op.emitError() << "--pp: " << (virtuals > 1 ? "chunk " : "stage ") << s
                                << " sends " << (virtuals > 1 ? "chunk " : "stage ") << t
                                << " values of both its forward and its backward; "
                                   "this model cannot be pipelined as cut";
        // Two chunks of one stage would share a value across their parts.
        if (stageOfChunk(s) == stageOfChunk(t))
          return op.emitError() << "--virtual-stages: chunks " << s << " and " << t
                                << " both run on stage " << stageOfChunk(s)
                                << " and one reads what the other makes; this model cannot be "
                                   "interleaved as cut (use --schedule 1f1b)";
      }
    }

    // The stages' functions.
    OpBuilder b(module.getBodyRegion());
    b.setInsertionPoint(main);
    int64_t transfers = 0;
    SmallVector<int64_t> opsPerStage(size_t(stages), 0);
    for (int s = 0; s < int(stages); ++s) {
      auto func = b.create<func::FuncOp>(main.getLoc(), ("stage" + Twine(s)).str(),
                                         main.getFunctionType());
      for (NamedAttribute a : main->getAttrs())
        if (a.getName() != main.getSymNameAttrName() &&
            a.getName() != main.getFunctionTypeAttrName())
          func->setAttr(a.getName(), a.getValue());
      func->setAttr(attr::kStage, b.getI64IntegerAttr(s));
      Block *body = func.addEntryBlock();
      OpBuilder fb = OpBuilder::atBlockEnd(body);
      IRMapping map;
      for (auto [from, to] : llvm::zip(block.getArguments(), body->getArguments()))
        map.map(from, to);
      // Interleaved: which of the stage's chunks an op belongs to.
      auto inChunk = [&](Operation *op, int c) {
        if (virtuals > 1)
          op->setAttr(attr::kChunk, fb.getI64IntegerAttr(virtualOf(c)));
      };
      // The chunks (in order) whose ops read `r`, of those `wanted` takes.
      auto readerChunks = [&](Value r, llvm::function_ref<bool(int)> wanted) {
        SmallVector<int> readers;
        for (Operation *user : r.getUsers()) {
          int t = stageOf.lookup(user);
          if (user != terminator && t != kAnyStage && wanted(t) && !llvm::is_contained(readers, t))
            readers.push_back(t);
        }
        llvm::sort(readers);
        return readers;
      };
      // A transfer of `def`'s value from chunk `from` to chunk `to`, in
      // chunk `in` of this stage: its part, virtual stage and channel.
      auto markTransfer = [&](Operation *transfer, Operation *def, int from, int to, int in) {
        markLike(transfer, def, forwardTransfer(*def, to));
        inChunk(transfer, in);
        if (virtuals > 1)
          transfer->setAttr(attr::kChannel,
                            fb.getI64IntegerAttr(virtualOf(from) * virtuals + virtualOf(to)));
      };
      // What each chunk reads of values it does not make itself: constants
      // (cloned into each chunk that reads them, in its forward part,
      // before anything reads them), received values and input copies.
      // Each chunk has its own, so that no value crosses between a
      // stage's chunks.
      llvm::DenseMap<std::pair<Value, int>, Value> chunkLocal;
      std::function<void(Operation *, int)> readsIn = [&](Operation *op, int c) {
        for (Value operand : op->getOperands()) {
          Operation *def = operand.getDefiningOp();
          if (def && stageOf.lookup(def) == kAnyStage && !chunkLocal.count({operand, c})) {
            readsIn(def, c);
            Operation *clone = fb.clone(*def, map);
            clone->setAttr(attr::kPipelineForward, fb.getUnitAttr());
            inChunk(clone, c);
            for (auto [from, to] : llvm::zip(def->getResults(), clone->getResults()))
              chunkLocal[{from, c}] = to;
          }
          if (auto it = chunkLocal.find({operand, c}); it != chunkLocal.end())
            map.map(operand, it->second);
        }
      };
      for (Operation &op : block.without_terminator()) {
        int at = stageOf.lookup(&op);
        if (at == kAnyStage)
          continue;
        bool isForward = forward.contains(&op);
        if (stageOfChunk(at) == s) {
          // A per-micro-batch backward op reads a step input's copy, made
          // in the forward (the input holds a later micro-batch by then).
          bool perMicroBatch = !isForward && !op.hasAttr(attr::kOncePerStep);
          if (perMicroBatch)
            for (Value operand : op.getOperands())
              if (auto arg = dyn_cast<BlockArgument>(operand); arg && !chunkLocal.count({arg, at})) {
                OpBuilder cb = OpBuilder::atBlockBegin(body);
                auto copy = cb.create<graph::CopyOp>(arg.getLoc(),
                                                         body->getArgument(arg.getArgNumber()));
                copy->setAttr(attr::kPipelineForward, cb.getUnitAttr());
                inChunk(copy, at);
                chunkLocal[{arg, at}] = copy.getResult();
              }
          readsIn(&op, at);
          Operation *copy = fb.clone(op, map);
          for (auto arg : body->getArguments()) // other ops read the inputs themselves
            map.map(block.getArgument(arg.getArgNumber()), arg);
          if (isForward)
            copy->setAttr(attr::kPipelineForward, fb.getUnitAttr());
          inChunk(copy, at);
          for (auto [from, to] : llvm::zip(op.getResults(), copy->getResults()))
            map.map(from, to);
          ++opsPerStage[size_t(s)];
          // Sent to each later reader's chunk, right after it is made.
          for (Value r : op.getResults())
            for (int t : readerChunks(r, [&](int t) { return t != at; })) {
              auto send = fb.create<graph::SendOp>(op.getLoc(), map.lookup(r),
                                                    fb.getI64IntegerAttr(stageOfChunk(t)));
              markTransfer(send, &op, at, t, at);
              ++transfers;
            }
          continue;
        }
        // Another stage's op: each of this stage's chunks that reads of it
        // receives it where the sender sends it.
        for (Value r : op.getResults())
          for (int t : readerChunks(r, [&](int t) { return stageOfChunk(t) == s; })) {
            auto recv = fb.create<graph::RecvOp>(op.getLoc(), r.getType(),
                                                 fb.getI64IntegerAttr(stageOfChunk(at)));
            markTransfer(recv, &op, at, t, t);
            chunkLocal[{r, t}] = recv.getResult();
          }
      }
      // The results this stage computes.
      SmallVector<Value> results;
      SmallVector<Type> types;
      SmallVector<DictionaryAttr> resultAttrs;
      SmallVector<int64_t> indices;
      for (auto [i, v] : llvm::enumerate(terminator->getOperands())) {
        Operation *def = v.getDefiningOp();
        int at = def ? stageOf.lookup(def) : kAnyStage;
        if (at == kAnyStage || stageOfChunk(at) != s)
          continue;
        results.push_back(map.lookup(v));
        types.push_back(v.getType());
        resultAttrs.push_back(main.getResultAttrDict(unsigned(i)));
        indices.push_back(int64_t(i));
      }
      fb.create<func::ReturnOp>(main.getLoc(), results);
      func.setType(FunctionType::get(&getContext(), main.getArgumentTypes(), types));
      func.setAllResultAttrs(resultAttrs);
      func->setAttr(attr::kOutputs, fb.getDenseI64ArrayAttr(indices));
    }
    for (auto [i, v] : llvm::enumerate(terminator->getOperands()))
      if (Operation *def = v.getDefiningOp(); !def || stageOf.lookup(def) == kAnyStage)
        return main.emitError() << "--pp: result " << i
                                << " is a step input or a constant, which no stage computes";

    bool replicated = llvm::any_of(copies, [](int64_t r) { return r > 1; });
    NamedAttrList pipeline;
    pipeline.append("stages", b.getI64IntegerAttr(stages));
    pipeline.append("schedule", b.getStringAttr(schedule));
    pipeline.append("micro_batches", training.getAs<IntegerAttr>("micro_batches")
                                         ? training.getAs<IntegerAttr>("micro_batches")
                                         : b.getI64IntegerAttr(1));
    pipeline.append("virtual_stages", b.getI64IntegerAttr(virtuals));
    if (replicated) // a stage's copies of its mesh (--stage-replicas)
      pipeline.append("replicas", b.getDenseI64ArrayAttr(copies));
    module->setAttr(attr::kPipeline, pipeline.getDictionary(&getContext()));
    // What each stage holds, by the model's own names (first to last) and
    // its share of the forward FLOPs.
    std::string layout, stepName = locationName(main.getLoc());
    double total = 0, largest = 0;
    for (double c : costs)
      total += c;
    for (int s = 0; s < int(chunks); ++s) {
      size_t begin = s == 0 ? 0 : lasts[size_t(s) - 1] + 1, end = lasts[size_t(s)];
      std::string first, last;
      double share = 0;
      for (size_t i = begin; i <= end; ++i) {
        share += costs[i];
        std::string name = locationName(forward[i]->getLoc());
        if (name.empty() || name == stepName) // the loss's ops: the step's own name
          continue;
        if (first.empty())
          first = name;
        last = name;
      }
      layout += (virtuals > 1 ? "; chunk " + std::to_string(s) + " on stage " +
                                    std::to_string(stageOfChunk(s))
                              : "; stage " + std::to_string(s)) +
                ": " +
                (first.empty() ? std::string("(unnamed ops)")
                               : first == last ? first : first + " .. " + last) +
                " (" + std::to_string(end - begin + 1) + " forward ops, " +
                std::to_string(int(std::lround(100 * share / total))) + "% of the FLOPs)";
      largest = std::max(largest, share / total);
    }
    // A stage with half as much again as an even share: the others wait on
    // it for a third of each step or more, which should not go unsaid
    // (unless the cost model chose it so).
    if (largest >= 1.5 / double(chunks) && !byCosts)
      layout += std::string("; warning: one ") + (virtuals > 1 ? "chunk" : "stage") + " does " +
                std::to_string(int(std::lround(100 * largest))) + "% of the forward's FLOPs (" +
                std::to_string(int(std::lround(100.0 / double(chunks)))) +
                "% would be even): the model's places to cut do not divide it into " +
                std::to_string(chunks) + " even " + (virtuals > 1 ? "chunks" : "stages") +
                "; use fewer " + (virtuals > 1 ? "virtual stages" : "stages");
    // Fewer micro-batches than stages: never are all stages busy at once.
    std::string few;
    if (microBatches < stages) {
      char bubble[16];
      std::snprintf(bubble, sizeof bubble, "%.0f%%",
                    100.0 * double(stages - 1) / double(microBatches + stages - 1));
      few = "; warning: " + std::to_string(microBatches) + " micro-batch" +
            (microBatches == 1 ? "" : "es") + " for " + std::to_string(int64_t(stages)) +
            " stages: " +
            (microBatches == 1 ? std::string("one stage works at a time")
                               : "at most " + std::to_string(microBatches) +
                                     " stages work at once") +
            " (a bubble of " + bubble +
            " of the step); use --micro-batches " + std::to_string(int64_t(stages)) +
            " or more";
    }
    for (func::FuncOp func : module.getOps<func::FuncOp>())
      if (func->hasAttr(attr::kStage))
        addNote(func, "pipeline: " + std::to_string(stages) + " stages, " + schedule +
                          " schedule" +
                          (virtuals > 1 ? " of " + std::to_string(virtuals) +
                                              " virtual stages (model chunks) each"
                                        : std::string()) +
                          ", cut at " + std::to_string(chunks - 1) + " of " +
                          std::to_string(places) + " places between layers; " +
                          std::to_string(transfers) +
                          " tensors sent between stages per micro-batch" + layout + few);
    if (replicated && failed(replicateStages(module, copies)))
      return failure();
    main.erase();
    return success();
  }

  /// Stage s on copies[s] replicas of its mesh (PipeDream's stage
  /// replication): each replica accumulates the gradients of its own
  /// micro-batches, so each accumulated sum is summed over the stage's
  /// replicas, once a step, before anything reads it (a collective on the
  /// mesh @stages of every stage's replicas, its group the stage's own:
  /// dtc.replicas = [first, count]).
  LogicalResult replicateStages(ModuleOp module, ArrayRef<int64_t> copies) {
    OpBuilder b(module.getBodyRegion());
    if (!module.lookupSymbol<mesh::MeshOp>(attr::kStagesMesh)) {
      b.setInsertionPointToStart(module.getBody());
      int64_t coordinates = std::accumulate(copies.begin(), copies.end(), int64_t(0));
      b.create<mesh::MeshOp>(module.getLoc(), attr::kStagesMesh, ArrayRef<int64_t>{coordinates});
    }
    // A once-a-step transfer (--clip-norm's gradient norm) has no
    // micro-batch to choose a replica by.
    for (func::FuncOp func : module.getOps<func::FuncOp>()) {
      auto stage = func->getAttrOfType<IntegerAttr>(attr::kStage);
      if (!stage)
        continue;
      WalkResult walk = func.walk([&](Operation *op) {
        std::optional<int64_t> peer;
        if (auto send = dyn_cast<graph::SendOp>(op))
          peer = send.getStage();
        else if (auto recv = dyn_cast<graph::RecvOp>(op))
          peer = recv.getStage();
        if (!peer || !op->hasAttr(attr::kOncePerStep) ||
            (copies[size_t(stage.getInt())] == 1 && copies[size_t(*peer)] == 1))
          return WalkResult::advance();
        op->emitError() << "--stage-replicas: stages " << stage.getInt() << " and " << *peer
                        << " exchange values once a step (as --clip-norm's gradient norm), "
                           "which replicated stages do not yet do: leave out --clip-norm or "
                           "--stage-replicas";
        return WalkResult::interrupt();
      });
      if (walk.wasInterrupted())
        return failure();
    }
    std::string summary;
    for (func::FuncOp func : module.getOps<func::FuncOp>()) {
      auto stage = func->getAttrOfType<IntegerAttr>(attr::kStage);
      if (!stage)
        continue;
      int64_t s = stage.getInt(), count = copies[size_t(s)];
      if (count <= 1)
        continue;
      int64_t first = std::accumulate(copies.begin(), copies.begin() + s, int64_t(0));
      Block &block = func.getBody().front();
      SmallVector<Operation *> sums = accumulations(block);
      llvm::DenseSet<Operation *> summed(sums.begin(), sums.end());
      // What a replica's once-per-step part reads of its micro-batches:
      // the accumulated sums, and nothing else it could combine.
      for (Operation &op : block.without_terminator()) {
        if (!op.hasAttr(attr::kOncePerStep))
          continue;
        for (Value operand : op.getOperands()) {
          Operation *def = operand.getDefiningOp();
          if (!def || summed.contains(def) || def->hasAttr(attr::kOncePerStep) ||
              isa<graph::ParameterOp, graph::ConstantOp>(def))
            continue;
          return op.emitError() << "--stage-replicas: stage " << s
                                << " cannot be replicated: its once-a-step part reads a value "
                                   "of one micro-batch that is not a summed gradient";
        }
      }
      // And what it writes each micro-batch besides its accumulators
      // (batch norms' running statistics): replicas would each keep their
      // own, over their own micro-batches.
      Operation *ret = block.getTerminator();
      for (auto [i, v] : llvm::enumerate(ret->getOperands())) {
        Operation *def = v.getDefiningOp();
        if (!def || summed.contains(def) || def->hasAttr(attr::kOncePerStep) ||
            isa<graph::ParameterOp, graph::ConstantOp>(def) ||
            !func.getResultAttr(unsigned(i), attr::kUpdates))
          continue;
        return def->emitError()
               << "--stage-replicas: stage " << s << " updates '"
               << cast<StringAttr>(func.getResultAttr(unsigned(i), attr::kUpdates)).getValue()
               << "' every micro-batch (a batch norm's running statistics), which each replica "
                  "would keep over its own micro-batches: replicate other stages, or none";
      }
      for (Operation *sum : sums) {
        b.setInsertionPointAfter(sum);
        Value result = sum->getResult(0);
        auto reduce = b.create<mesh::AllReduceOp>(sum->getLoc(), result, attr::kStagesMesh,
                                                  ArrayRef<int16_t>{0}, mesh::ReductionKind::Sum);
        reduce->setAttr(attr::kOncePerStep, b.getUnitAttr());
        reduce->setAttr(attr::kGradientReduction, b.getUnitAttr());
        reduce->setAttr(attr::kReplicas, b.getDenseI64ArrayAttr({first, count}));
        if (Attribute sharding = sum->getAttr(attr::kSharding))
          reduce->setAttr(attr::kSharding, sharding);
        result.replaceUsesWithIf(reduce.getResult(), [&](OpOperand &use) {
          return use.getOwner() != reduce && !isa<func::ReturnOp>(use.getOwner());
        });
      }
      summary += (summary.empty() ? "" : "; ") + std::string("stage ") + std::to_string(s) +
                 " runs on " + std::to_string(count) +
                 " replicas of its mesh, each running 1 micro-batch in " +
                 std::to_string(count) + ", " + std::to_string(sums.size()) +
                 " accumulated gradients summed over them once a step";
    }
    // On every stage, as the pipeline's own note (dtc plan --explain).
    for (func::FuncOp func : module.getOps<func::FuncOp>())
      if (func->hasAttr(attr::kStage))
        addNote(func, "pipeline: " + summary);
    return success();
  }

  /// A transfer runs in the part its value is made in.
  static void markLike(Operation *transfer, Operation *def, bool isForward) {
    if (isForward)
      transfer->setAttr(attr::kPipelineForward, UnitAttr::get(transfer->getContext()));
    if (def->hasAttr(attr::kOncePerStep))
      transfer->setAttr(attr::kOncePerStep, UnitAttr::get(transfer->getContext()));
  }
};

} // namespace
} // namespace dtc
