//===- PipelineStages.cpp - which pipeline stage each op runs on ----------===//
#include "compiler/PipelineStages.h"

#include "compiler/BufferLiveness.h"
#include "compiler/MicroBatches.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Mesh/IR/MeshDialect.h"
#include "llvm/ADT/StringMap.h"

#include <optional>

using namespace mlir;

namespace dtc {

namespace {
constexpr llvm::StringLiteral kAccumulatorSuffix = ".grad_accumulator"; // Training.cpp's
} // namespace

llvm::DenseMap<Operation *, int> chunkOfOps(Block &block,
                                            const llvm::SetVector<Operation *> &forward,
                                            const Activations &activations,
                                            llvm::ArrayRef<size_t> lasts, int64_t chunks) {

  // Every op's stage. Constants, and ops on constants only, first: they
  // are cloned into each stage that reads them.
  llvm::DenseMap<Operation *, int> stageOf;
  for (Operation &op : block.without_terminator()) {
    bool free = isa<graph::ConstantOp>(op) ||
                (!isa<graph::ParameterOp>(op) && op.getNumOperands() > 0 &&
                 llvm::all_of(op.getOperands(), [&](Value v) {
                   Operation *def = v.getDefiningOp();
                   return def && stageOf.lookup(def) == kAnyStage && stageOf.count(def);
                 }));
    if (free)
      stageOf[&op] = kAnyStage;
  }
  // From here a "stage" is a chunk of the model (the same without
  // virtual stages); the functions group chunks by stageOfChunk.
  int stage = 0;
  for (auto [i, op] : llvm::enumerate(forward)) {
    if (!stageOf.count(op))
      stageOf[op] = stage;
    if (stage + 1 < chunks && i == lasts[size_t(stage)])
      ++stage;
  }
  // A weight, and a forward op on weights only (its cast), goes with its
  // earliest reader, not with the stage before it: weights stay where
  // they are read. Read on several stages (tied embeddings), it is sent
  // on from there.
  auto withEarliestReader = [&](Operation *op) {
    std::optional<int> earliest;
    for (Operation *user : op->getUsers())
      if (forward.contains(user))
        earliest = std::min(earliest.value_or(stageOf[user]), stageOf[user]);
    if (earliest)
      stageOf[op] = *earliest;
  };
  for (Operation *op : llvm::reverse(forward))
    if (stageOf.lookup(op) != kAnyStage &&
        llvm::none_of(op->getResults(), [&](Value r) { return activations.contains(r); }))
      withEarliestReader(op);
  for (Operation &op : block)
    if (isa<graph::ParameterOp>(op))
      withEarliestReader(&op);
  // A weight the forward reads through its bf16 copy (cast_of) goes where
  // the copy does: its stage updates both.
  llvm::StringMap<Operation *> parameterNamed;
  for (Operation &op : block)
    if (auto p = dyn_cast<graph::ParameterOp>(op))
      parameterNamed[p.getName()] = &op;
  for (Operation &op : block)
    if (auto p = dyn_cast<graph::ParameterOp>(op); p && p.getCastOf() && stageOf.count(&op))
      if (Operation *weight = parameterNamed.lookup(*p.getCastOf()); weight && !stageOf.count(weight))
        stageOf[weight] = stageOf[&op];
  // The backward and the optimizer. An op that reads a weight (or a
  // weight's cast) runs on the weight's stage, and a weight's gradient
  // too; another op on the earliest stage it reads from (the gradient of
  // a stage's op reads that stage's activations, and the next stage's
  // gradient), where a cut value counts as the stage that reads it in
  // the forward (it is there already). A recomputed forward op runs
  // where the forward op it copies ran: with its latest input.
  llvm::DenseMap<Value, int> home;
  for (Operation *op : forward)
    for (Value r : op->getResults()) {
      std::optional<int> reader;
      bool one = true;
      for (Operation *user : r.getUsers())
        if (forward.contains(user)) {
          int t = stageOf.lookup(user);
          one = one && (!reader || *reader == t);
          reader = t;
        }
      if (reader && one && *reader != stageOf.lookup(op))
        home[r] = *reader;
    }
  auto stageOfValue = [&](Value v) -> std::optional<int> {
    Operation *def = v.getDefiningOp();
    auto it = def ? stageOf.find(def) : stageOf.end();
    if (it == stageOf.end() || it->second == kAnyStage)
      return std::nullopt;
    return it->second;
  };
  // A weight's gradient is made on the weight's stage (where it is
  // accumulated and applied), whatever activations it reads.
  llvm::StringMap<int> stageOfParameter;
  for (Operation &op : block)
    if (auto p = dyn_cast<graph::ParameterOp>(op); p && stageOf.count(&op))
      stageOfParameter[p.getName()] = stageOf[&op];
  llvm::DenseMap<Operation *, int> gradientOf;
  for (Operation *add : accumulations(block))
    for (Value operand : add->getOperands()) {
      auto acc = operand.getDefiningOp<graph::ParameterOp>();
      if (!acc || !isAccumulator(operand))
        continue;
      StringRef name = acc.getName();
      auto it = stageOfParameter.find(name.drop_back(StringRef(kAccumulatorSuffix).size()));
      if (!name.ends_with(kAccumulatorSuffix) || it == stageOfParameter.end())
        continue;
      Value other = add->getOperand(add->getOperand(0) == operand ? 1 : 0);
      for (Operation *def = other.getDefiningOp(); def && !forward.contains(def);) {
        gradientOf[def] = it->second;
        if (!isa<graph::ReshapeOp, graph::CastOp>(def) && !isa<mesh::MeshDialect>(def->getDialect()))
          break;
        def = def->getOperand(0).getDefiningOp();
      }
    }
  SmallVector<Operation *> unplaced;
  for (Operation &op : block.without_terminator()) {
    if (stageOf.count(&op))
      continue;
    if (auto it = gradientOf.find(&op); it != gradientOf.end()) {
      stageOf[&op] = it->second;
      continue;
    }
    std::optional<int> weights, earliest, latest;
    for (Value operand : op.getOperands()) {
      std::optional<int> s = stageOfValue(operand);
      if (!s)
        continue;
      if (!activations.contains(operand))
        weights = weights ? std::min(*weights, *s) : *s;
      int h = home.count(operand) ? home.lookup(operand) : *s;
      earliest = earliest ? std::min(*earliest, h) : h;
      latest = latest ? std::max(*latest, h) : h;
    }
    if (op.hasAttr(attr::kRecompute) && latest)
      stageOf[&op] = *latest;
    else if (weights || earliest)
      stageOf[&op] = weights ? *weights : *earliest;
    else
      unplaced.push_back(&op);
  }
  // Left: parameters no forward op reads (optimizer state, accumulators)
  // go with their first reader; constants (and ops on them only) anywhere.
  for (Operation *op : llvm::reverse(unplaced)) {
    std::optional<int> first;
    for (Operation *user : op->getUsers())
      if (auto it = stageOf.find(user); it != stageOf.end() && it->second != kAnyStage) {
        first = first ? std::min(*first, it->second) : it->second;
      }
    stageOf[op] = first.value_or(int(chunks) - 1);
  }

Operation *terminator = block.getTerminator();
  // A view of a value (a reshape) goes with its readers when they are all
  // on one other stage: the value is sent once, not with its view too.
  for (Operation &op : llvm::reverse(block.without_terminator())) {
    if (!isViewOp(&op) || forward.contains(&op) || stageOf.lookup(&op) == kAnyStage)
      continue;
    std::optional<int> reader;
    bool one = true;
    for (Operation *user : op.getUsers()) {
      int t = user == terminator ? stageOf.lookup(&op) : stageOf.lookup(user);
      one = one && t != kAnyStage && (!reader || *reader == t);
      reader = t;
    }
    if (reader && one)
      stageOf[&op] = *reader;
  }
  return stageOf;
}

SmallVector<size_t> chunkEnds(const llvm::SetVector<Operation *> &forward,
                              const Activations &activations, ArrayRef<size_t> checkpoints,
                              int64_t chunks) {
  SmallVector<size_t> marked;
  for (size_t i : stageCutCandidates(forward, activations, chunks))
    if (forward[i]->hasAttr(attr::kStageEnd))
      marked.push_back(i);
  if (int64_t(marked.size()) + 1 != chunks)
    return balancedCuts(forwardCosts(forward), checkpoints, chunks);
  marked.push_back(forward.size() - 1);
  return marked;
}

std::shared_ptr<const StageMemory> StageMemory::of(func::FuncOp main, int64_t stages,
                                                   int64_t virtuals,
                                                   plan::PipelineSchedule schedule,
                                                   int64_t microBatches) {
  Block &block = main.getBody().front();
  llvm::SetVector<Operation *> forward = forwardOps(block);
  Activations activations(block);
  int64_t chunks = stages * virtuals;
  SmallVector<size_t> checkpoints = pipelineCheckpoints(forward, activations, chunks);
  if (int64_t(checkpoints.size()) + 1 < chunks)
    return nullptr; // not cut so: dtc-pipeline-split says why
  auto memory = std::make_shared<StageMemory>();
  memory->stages = stages;
  memory->chunkOf = chunkOfOps(block, forward, activations,
                               chunkEnds(forward, activations, checkpoints, chunks), chunks);
  // Chunk c is virtual stage c / stages of stage c mod stages: its
  // forward part c / stages, its backward part virtuals + c / stages.
  for (int64_t c = 0; c < chunks; ++c)
    memory->inFlight.push_back(double(plan::stashSlots(
        schedule, stages, c % stages, microBatches, virtuals, c / stages, virtuals + c / stages)));
  return memory;
}

} // namespace dtc
