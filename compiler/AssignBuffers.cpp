//===- AssignBuffers.cpp - arena offsets with lifetime-based reuse --------===//
#include "compiler/BufferLiveness.h"
#include "compiler/CompileNotes.h"
#include "compiler/MicroBatches.h"
#include "compiler/Passes.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"
#include "plan/FormatBytes.h"
#include "plan/PipelineSchedule.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringMap.h"

#include <map>

namespace dtc {
#define GEN_PASS_DEF_ASSIGNBUFFERS
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

/// A value that owns bytes, alive from the op that defines it to the last
/// op that reads it (or one of its views); positions are op indices, -1 for
/// function arguments, the terminator's index for returned values.
struct Interval {
  Value value;
  int64_t bytes = 0;
  int start = 0, end = 0;
  int64_t offset = -1;
  bool overlaps(const Interval &other) const {
    return start <= other.end && other.start <= end;
  }
};

/// Places each interval at the lowest offset (from `base`) not used by an
/// already placed interval that overlaps it in time; largest first, which is
/// close to optimal in practice (TFLite's "greedy by size").
int64_t placeGreedyBySize(std::vector<Interval> &intervals, int64_t base) {
  std::vector<size_t> order(intervals.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (intervals[a].bytes != intervals[b].bytes)
      return intervals[a].bytes > intervals[b].bytes;
    return a < b;
  });
  int64_t top = base;
  // Placed intervals in offset order (then end), so that the first gap is
  // found in one pass without sorting what overlaps each new one.
  std::vector<const Interval *> placed;
  auto key = [](const Interval *p) { return std::make_pair(p->offset, p->offset + p->bytes); };
  for (size_t i : order) {
    Interval &iv = intervals[i];
    int64_t offset = base;
    for (const Interval *p : placed) {
      if (!p->overlaps(iv))
        continue;
      if (p->offset - offset >= iv.bytes)
        break;
      offset = std::max(offset, p->offset + p->bytes);
    }
    iv.offset = offset;
    top = std::max(top, offset + iv.bytes);
    placed.insert(std::upper_bound(placed.begin(), placed.end(), &iv,
                                   [&](const Interval *a, const Interval *b) {
                                     return key(a) < key(b);
                                   }),
                  &iv);
  }
  return top;
}

/// A training step's new parameter values (results marked `dtc.updates`)
/// that can be written over the parameter they replace, which then saves
/// both their bytes and the copy after the step: those made after the
/// parameter's last read, or by the elementwise op that reads it last (the
/// elementwise kernel reads each block before it stores it, and handles any
/// overlap). Their offsets are set in `offsets`.
llvm::DenseSet<Value> updatesInPlace(func::FuncOp func, llvm::DenseMap<Value, int64_t> &offsets) {
  Block &block = func.getBody().front();
  llvm::DenseSet<Value> result;
  llvm::StringMap<Value> parameters;
  llvm::DenseMap<Operation *, int> position;
  llvm::DenseMap<Value, int> lastRead;
  int index = 0;
  for (Operation &op : block) {
    position[&op] = index;
    if (auto p = dyn_cast<graph::ParameterOp>(op))
      parameters[p.getName()] = p.getResult();
    if (!op.hasTrait<OpTrait::IsTerminator>())
      for (Value operand : op.getOperands())
        lastRead[storageOf(operand)] = index;
    ++index;
  }
  Operation *terminator = block.getTerminator();
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    auto name = func.getResultAttrOfType<StringAttr>(i, attr::kUpdates);
    Value updated = terminator->getOperand(i);
    Operation *producer = updated.getDefiningOp();
    if (!name || !producer || isViewOp(producer) || isPersistentOp(producer) ||
        result.contains(updated))
      continue;
    Value parameter = parameters.lookup(name.getValue());
    if (!parameter || parameter.getType() != updated.getType())
      continue;
    int last = lastRead.lookup(parameter), at = position[producer];
    bool elementwise = isa<graph::FusedOp>(producer) ||
                       producer->hasTrait<graph::GraphElementwise>();
    if (last < at || (last == at && elementwise)) {
      result.insert(updated);
      offsets[updated] = offsets.lookup(parameter);
    }
  }
  return result;
}

/// A pipeline stage's function: its stage and how its schedule runs the
/// micro-batches' parts (plan/PipelineSchedule.h); nullopt otherwise.
struct StageSchedule {
  plan::PipelineSchedule schedule;
  int64_t stages, stage, microBatches, virtuals;
  std::vector<int64_t> replicas; // every stage's (--stage-replicas); empty: one each

  int64_t slots(int64_t from, int64_t to) const {
    return plan::stashSlots(schedule, stages, stage, microBatches, virtuals, from, to, replicas);
  }
  /// Where part `part` of a micro-batch runs among its parts: the
  /// forwards in order, then the backwards from the last virtual stage.
  int64_t turn(int64_t part) const { return part < virtuals ? part : 3 * virtuals - 1 - part; }
};

std::optional<StageSchedule> pipelineStageOf(func::FuncOp func) {
  auto stage = func->getAttrOfType<IntegerAttr>(attr::kStage);
  auto module = func->getParentOfType<ModuleOp>();
  auto pipeline = module ? module->getAttrOfType<DictionaryAttr>(attr::kPipeline) : nullptr;
  if (!stage || !pipeline)
    return std::nullopt;
  auto integer = [&](StringRef name) {
    auto a = pipeline.getAs<IntegerAttr>(name);
    return a ? a.getInt() : 1;
  };
  auto name = pipeline.getAs<StringAttr>("schedule");
  StageSchedule schedule{plan::scheduleNamed(name ? name.str() : "").value_or(plan::ONE_F_ONE_B),
                         integer("stages"), stage.getInt(), integer("micro_batches"),
                         std::max<int64_t>(1, integer("virtual_stages"))};
  if (auto replicas = pipeline.getAs<DenseI64ArrayAttr>("replicas"))
    schedule.replicas.assign(replicas.asArrayRef().begin(), replicas.asArrayRef().end());
  return schedule;
}

struct AssignBuffers : impl::AssignBuffersBase<AssignBuffers> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    Block &block = func.getBody().front();
    Builder b(&getContext());

    // Persistent values first, packed at the start of the arena.
    int64_t parameterBytes = 0, weightBytes = 0, stateBytes = 0, copyBytes = 0;
    llvm::DenseMap<Value, int64_t> offsets;
    for (Operation &op : block)
      if (isPersistentOp(&op)) {
        offsets[op.getResult(0)] = parameterBytes;
        int64_t bytes = alignedBytes(tensorBytes(op.getResult(0)));
        parameterBytes += bytes;
        if (isa<graph::ParameterOp>(op))
          (op.hasAttr(attr::kZeros) ? stateBytes : weightBytes) += bytes;
        if (auto p = dyn_cast<graph::ParameterOp>(op); p && p.getCastOf())
          copyBytes += bytes;
      }

    llvm::DenseSet<Value> overParameter = updatesInPlace(func, offsets);
    llvm::DenseSet<Value> reducedInPlace;
    // A step's accumulated gradient is all-reduced in place, in its
    // accumulator (zeroed before the next step, never checkpointed): one
    // accumulator's bytes, not a second copy of every gradient at once.
    llvm::DenseSet<int64_t> accumulatorOffsets;
    for (Operation &op : block)
      if (isa<graph::ParameterOp>(op) && op.hasAttr(attr::kAccumulator))
        accumulatorOffsets.insert(offsets.lookup(op.getResult(0)));
    for (Operation &op : block)
      if (auto reduce = dyn_cast<mesh::AllReduceOp>(op)) {
        Value sum = reduce.getInput();
        if (overParameter.contains(sum) && sum.getType() == reduce.getType() &&
            accumulatorOffsets.contains(offsets.lookup(sum))) {
          offsets[reduce.getResult()] = offsets.lookup(sum);
          reducedInPlace.insert(reduce.getResult());
        }
      }

    // Lifetimes of the other values that own bytes.
    llvm::MapVector<Value, Interval> intervals;
    for (BlockArgument arg : block.getArguments())
      intervals[arg] = {arg, alignedBytes(tensorBytes(arg)), -1, -1};
    int index = 0;
    for (Operation &op : block) {
      for (Value operand : op.getOperands()) {
        auto it = intervals.find(storageOf(operand));
        if (it != intervals.end())
          it->second.end = index;
      }
      if (!isPersistentOp(&op) && !isViewOp(&op))
        for (Value result : op.getResults())
          if (!overParameter.contains(result) && !reducedInPlace.contains(result))
            intervals[result] = {result, alignedBytes(tensorBytes(result)), index, index};
      ++index;
    }

    // A pipeline stage's stash: what a part of a micro-batch's forward
    // makes and a later part reads, after the persistent values, in groups
    // by the part that makes it and the one that reads it last, each group
    // with as many copies as the schedule keeps micro-batches between the
    // two (interleaved, a virtual stage's own backward, or a later
    // virtual stage's part). Once-per-step readers read the last
    // micro-batch's values, which need no copies.
    int64_t activationBytes = 0;
    llvm::DenseMap<Value, size_t> stashed; // value -> its group
    struct StashGroup {
      int64_t from, to, offset = 0, bytes = 0, slots = 0;
      size_t values = 0;
    };
    SmallVector<StashGroup> groups;
    std::optional<StageSchedule> stage = pipelineStageOf(func);
    if (stage) {
      int64_t virtuals = stage->virtuals;
      llvm::MapVector<Value, std::pair<int64_t, int64_t>> parts; // from, last reader
      for (Operation &op : block) {
        if (op.hasTrait<OpTrait::IsTerminator>())
          continue;
        int64_t part = pipelinePartOf(&op, virtuals);
        if (part >= 2 * virtuals)
          continue; // once per step
        for (Value operand : op.getOperands()) {
          Value storage = storageOf(operand);
          Operation *def = storage.getDefiningOp();
          if (!def || !def->hasAttr(attr::kPipelineForward) || !intervals.count(storage))
            continue;
          int64_t from = pipelinePartOf(def, virtuals);
          if (from == part)
            continue;
          auto [it, fresh] = parts.try_emplace(storage, from, part);
          if (!fresh && stage->turn(part) > stage->turn(it->second.second))
            it->second.second = part;
        }
      }
      std::map<std::pair<int64_t, int64_t>, size_t> groupOf;
      for (auto &[value, fromTo] : parts)
        if (groupOf.try_emplace(fromTo, groupOf.size()).second)
          groups.push_back({fromTo.first, fromTo.second});
      // Groups in part order, then their copies one after another.
      llvm::sort(groups, [&](const StashGroup &a, const StashGroup &b) {
        return std::pair(stage->turn(a.from), stage->turn(a.to)) <
               std::pair(stage->turn(b.from), stage->turn(b.to));
      });
      for (size_t g = 0; g < groups.size(); ++g)
        groupOf[{groups[g].from, groups[g].to}] = g;
      for (auto &[value, iv] : intervals)
        if (auto it = parts.find(value); it != parts.end()) {
          size_t g = groupOf.at(it->second);
          stashed[value] = g;
          offsets[value] = groups[g].bytes; // from the group's start, for now
          groups[g].bytes += iv.bytes;
          ++groups[g].values;
        }
      int64_t at = parameterBytes;
      for (StashGroup &group : groups) {
        group.offset = at;
        group.slots = stage->slots(group.from, group.to);
        at += group.slots * group.bytes;
      }
      for (auto &[value, g] : stashed)
        offsets[value] += groups[g].offset;
      activationBytes = at - parameterBytes;
    }
    bool training = false;
    for (unsigned i = 0; i < func.getNumResults(); ++i)
      training = training || func.getResultAttr(i, attr::kUpdates);
    // A training step's activations kept for backward: what is live across
    // the op that computes the loss (result 0), the forward's end.
    if (training && stashed.empty() && !func->hasAttr(attr::kStage)) {
      Operation *lossOp = storageOf(block.getTerminator()->getOperand(0)).getDefiningOp();
      int turn = 0;
      for (Operation &op : block) {
        if (&op == lossOp)
          break;
        ++turn;
      }
      for (auto &[value, iv] : intervals)
        if (iv.start < turn && iv.end > turn)
          activationBytes += iv.bytes;
    }

    std::vector<Interval> list;
    int64_t unshared = parameterBytes + activationBytes;
    for (auto &[value, iv] : intervals) {
      if (stashed.contains(value))
        continue;
      list.push_back(iv);
      unshared += iv.bytes;
    }
    int64_t arena = placeGreedyBySize(list, parameterBytes + (stage ? activationBytes : 0));
    for (const Interval &iv : list)
      offsets[iv.value] = iv.offset;

    // Views share their operand's offset.
    for (BlockArgument arg : block.getArguments())
      func.setArgAttr(arg.getArgNumber(), attr::kOffset, b.getI64IntegerAttr(offsets[arg]));
    for (Operation &op : block) {
      if (op.getNumResults() == 0)
        continue;
      SmallVector<int64_t> resultOffsets;
      for (Value result : op.getResults())
        resultOffsets.push_back(offsets.lookup(storageOf(result)));
      op.setAttr(attr::kOffsets, b.getDenseI64ArrayAttr(resultOffsets));
    }
    func->setAttr(attr::kUpdatesInPlace, b.getI64IntegerAttr(overParameter.size()));
    func->setAttr(attr::kArenaBytes, b.getI64IntegerAttr(arena));
    func->setAttr(attr::kParameterBytes, b.getI64IntegerAttr(parameterBytes));
    func->setAttr(attr::kUnsharedBytes, b.getI64IntegerAttr(unshared));
    func->setAttr(attr::kWeightBytes, b.getI64IntegerAttr(weightBytes));
    func->setAttr(attr::kWeightCopyBytes, b.getI64IntegerAttr(copyBytes));
    func->setAttr(attr::kOptimizerStateBytes, b.getI64IntegerAttr(stateBytes));
    func->setAttr(attr::kActivationBytes, b.getI64IntegerAttr(activationBytes));
    if (stage) {
      SmallVector<int64_t> triples;
      int64_t perMicroBatch = 0;
      std::string copies;
      for (const StashGroup &group : groups) {
        triples.append({group.offset, group.bytes, group.slots});
        perMicroBatch += group.bytes;
        copies += (copies.empty() ? "" : ", ") + plan::formatBytes(group.bytes) + " x " +
                  std::to_string(group.slots);
      }
      func->setAttr(attr::kStashes, b.getDenseI64ArrayAttr(triples));
      int64_t slots = groups.empty() ? 0 : groups.front().slots;
      bool alike = llvm::all_of(groups, [&](const StashGroup &g) { return g.slots == slots; });
      addNote(func, "pipeline stash: " + std::to_string(stashed.size()) +
                        " values the backward reads from the forward, " +
                        plan::formatBytes(perMicroBatch) + " per micro-batch, " +
                        (alike ? std::to_string(slots) +
                                     (slots == 1 ? " micro-batch in flight"
                                                 : " micro-batches in flight")
                               : plan::formatBytes(activationBytes) +
                                     " for the micro-batches in flight (" + copies + ")"));
    }

    bool prologue = false;
    func.walk([&](Operation *op) { prologue = prologue || op->hasAttr(attr::kPrologue); });
    addNote(func, "memory: peak " + plan::formatBytes(arena) + " = parameters " +
                      (prologue ? "and load-time values " : "") +
                      plan::formatBytes(parameterBytes) + " + activations " +
                      plan::formatBytes(arena - parameterBytes) + " (" +
                      plan::formatBytes(unshared - parameterBytes) + " without buffer reuse)");
    if (training) {
      int updates = 0;
      for (unsigned i = 0; i < func.getNumResults(); ++i)
        updates += bool(func.getResultAttr(i, attr::kUpdates));
      addNote(func, "training: " + std::to_string(overParameter.size()) + " of " +
                        std::to_string(updates) +
                        " updates written over their parameter by the step (no copy, no extra "
                        "buffer)");
    }
  }
};

} // namespace
} // namespace dtc
