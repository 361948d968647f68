//===- ScheduleForMemory.cpp - a memory-aware op order --------------------===//
#include "compiler/BufferLiveness.h"
#include "compiler/CompileNotes.h"
#include "compiler/MicroBatches.h"
#include "compiler/Passes.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"
#include "plan/FormatBytes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

#include <algorithm>
#include <functional>

namespace dtc {
#define GEN_PASS_DEF_SCHEDULEFORMEMORY
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

/// Simulates the bytes live along an order of the (non-persistent) ops.
class MemorySimulator {
public:
  explicit MemorySimulator(Block &block) {
    for (BlockArgument arg : block.getArguments())
      define(arg);
    for (Operation &op : block) {
      if (isPersistentOp(&op))
        continue;
      for (Value result : op.getResults())
        if (!isViewOp(&op))
          define(result);
      for (Value operand : op.getOperands())
        if (auto it = remainingUses_.find(storageOf(operand)); it != remainingUses_.end())
          ++it->second;
      if (op.hasTrait<OpTrait::IsTerminator>())
        for (Value operand : op.getOperands())
          pinned_.insert(storageOf(operand));
    }
  }

  /// Bytes allocated minus bytes freed if `op` ran now.
  int64_t netBytes(Operation *op) const {
    int64_t net = 0;
    if (!isViewOp(op))
      for (Value result : op->getResults())
        net += tensorBytes(result);
    llvm::SmallDenseMap<Value, int, 4> uses;
    for (Value operand : op->getOperands())
      ++uses[storageOf(operand)];
    for (auto [value, count] : uses) {
      auto it = remainingUses_.find(value);
      if (it != remainingUses_.end() && it->second == count && !pinned_.contains(value))
        net -= tensorBytes(value);
    }
    return net;
  }

  /// Runs `op`; returns the live bytes at its peak (inputs and outputs).
  int64_t run(Operation *op) {
    if (!isViewOp(op))
      for (Value result : op->getResults())
        live_ += tensorBytes(result);
    int64_t peak = live_;
    for (Value operand : op->getOperands()) {
      auto it = remainingUses_.find(storageOf(operand));
      if (it != remainingUses_.end() && --it->second == 0 && !pinned_.contains(it->first))
        live_ -= tensorBytes(it->first);
    }
    return peak;
  }

  int64_t startBytes() const { return live_; }

private:
  void define(Value value) {
    remainingUses_[value] = 0;
    if (isa<BlockArgument>(value))
      live_ += tensorBytes(value);
  }

  llvm::DenseMap<Value, int> remainingUses_;
  llvm::DenseSet<Value> pinned_;
  int64_t live_ = 0;
};

int64_t peakOf(Block &block, ArrayRef<Operation *> order) {
  MemorySimulator sim(block);
  int64_t peak = sim.startBytes();
  for (Operation *op : order)
    peak = std::max(peak, sim.run(op));
  return peak;
}

/// Greedy list schedule of `ops` (the block's non-persistent, non-terminator
/// ops, in source order).
SmallVector<Operation *> greedyOrder(Block &block, ArrayRef<Operation *> ops) {
  DenseMap<Operation *, size_t> index;
  for (auto [i, op] : llvm::enumerate(ops))
    index[op] = i;
  // Ops on weights only (a weight's cast, its ZeRO-3 all-gather) run
  // lazily, right before the first op that reads them: run early they would
  // hold a whole weight through everything in between.
  // A send of a weight (a tied embedding's, to the stage that also reads
  // it) has no reader to wait for: it is not lazy.
  std::vector<bool> lazy(ops.size(), false);
  for (auto [i, op] : llvm::enumerate(ops))
    lazy[i] = op->getNumOperands() > 0 && !isa<graph::SendOp>(op) &&
              llvm::all_of(op->getOperands(), [&](Value v) {
                Operation *def = v.getDefiningOp();
                auto it = def ? index.find(def) : index.end();
                return it != index.end() ? bool(lazy[it->second])
                                         : def && isPersistentValue(v);
              });
  // Ops waiting for how many (eager) producers among `ops`.
  std::vector<int> waiting(ops.size(), 0);
  for (auto [i, op] : llvm::enumerate(ops))
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp(); def && index.count(def) && !lazy[index[def]])
        ++waiting[i];
  // Sends and receives keep their order: each pair of pipeline stages meets
  // its transfers in the order both sides list them.
  std::vector<size_t> nextTransfer(ops.size(), ops.size());
  std::optional<size_t> lastTransfer;
  for (auto [i, op] : llvm::enumerate(ops))
    if (isa<graph::SendOp, graph::RecvOp>(op)) {
      if (lastTransfer) {
        nextTransfer[*lastTransfer] = i;
        ++waiting[i];
      }
      lastTransfer = i;
    }
  std::vector<size_t> ready;
  for (size_t i = 0; i < ops.size(); ++i)
    if (waiting[i] == 0 && !lazy[i])
      ready.push_back(i);

  MemorySimulator sim(block);
  SmallVector<Operation *> order;
  std::vector<bool> done(ops.size(), false);
  auto release = [&](Operation *op) {
    // getUsers() lists a user once per use, as `waiting` counted them.
    if (lazy[index[op]])
      return;
    for (Operation *user : op->getUsers())
      if (auto it = index.find(user); it != index.end() && --waiting[it->second] == 0)
        ready.push_back(it->second);
    if (size_t next = nextTransfer[index[op]]; next < ops.size() && --waiting[next] == 0)
      ready.push_back(next);
  };
  std::function<void(Operation *)> pull = [&](Operation *op) {
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp(); def && index.count(def)) {
        size_t j = index[def];
        if (lazy[j] && !done[j]) {
          pull(def);
          done[j] = true;
          sim.run(def);
          order.push_back(def);
        }
      }
  };
  while (!ready.empty()) {
    size_t best = 0;
    int64_t bestNet = 0;
    for (size_t r = 0; r < ready.size(); ++r) {
      int64_t net = sim.netBytes(ops[ready[r]]);
      if (r == 0 || net < bestNet || (net == bestNet && ready[r] < ready[best])) {
        best = r;
        bestNet = net;
      }
    }
    Operation *op = ops[ready[best]];
    ready.erase(ready.begin() + best);
    pull(op);
    done[index[op]] = true;
    sim.run(op);
    order.push_back(op);
    release(op);
  }
  // Lazy ops no eager op reads (a weight's cast the step returns).
  for (auto [i, op] : llvm::enumerate(ops))
    if (lazy[i] && !done[i]) {
      pull(op);
      done[i] = true;
      sim.run(op);
      order.push_back(op);
    }
  return order;
}

/// Moves each gradient accumulation of the per-micro-batch part (an op
/// that reads an accumulator) to right after the last op it reads from: a
/// weight's gradient is summed as soon as it is made rather than after the
/// whole backward, so its buffer is free early, and the last layers'
/// sums are final (and their once-per-step reduction can start) while the
/// first layers' backward still runs.
void accumulateEarly(SmallVector<Operation *> &order) {
  llvm::DenseMap<Operation *, size_t> position;
  for (auto [i, op] : llvm::enumerate(order))
    position[op] = i;
  llvm::DenseMap<Operation *, SmallVector<Operation *>> after;
  llvm::DenseSet<Operation *> moved;
  for (Operation *op : order) {
    if (op->hasAttr(attr::kOncePerStep) || llvm::none_of(op->getOperands(), isAccumulator))
      continue;
    Operation *last = nullptr;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp(); def && position.count(def) &&
                                                    (!last || position[def] > position[last]))
        last = def;
    if (last && position[last] < position[op]) {
      after[last].push_back(op);
      moved.insert(op);
    }
  }
  // Each op, then what moves after it (and what moves after those).
  SmallVector<Operation *> early;
  std::function<void(Operation *)> place = [&](Operation *op) {
    early.push_back(op);
    if (auto it = after.find(op); it != after.end())
      for (Operation *next : it->second)
        place(next);
  };
  for (Operation *op : order)
    if (!moved.contains(op))
      place(op);
  order = std::move(early);
}

/// Reorders the once-per-step ops at the end of `order` so that each runs
/// right before its first reader among them (a post-order walk of the
/// operands of each op that nothing else there reads). Those sinks (a
/// parameter's update) go in the order their inputs are final in the
/// per-micro-batch part: the last layer's gradients, accumulated first in
/// the backward, are reduced first, so that on a device with a
/// communication stream the data-parallel all-reduces overlap the rest of
/// the last micro-batch's backward (as PyTorch DDP's buckets do). A
/// pipeline stage's once part keeps its order (its sends and receives
/// meet the other stage's in that order).
void lateOncePerStep(SmallVector<Operation *> &order) {
  auto first = llvm::find_if(order, [](Operation *op) { return op->hasAttr(attr::kOncePerStep); });
  if (first == order.end())
    return;
  size_t begin = size_t(first - order.begin());
  llvm::DenseSet<Operation *> pending(order.begin() + long(begin), order.end());
  SmallVector<Operation *> late;
  std::function<void(Operation *)> visit = [&](Operation *op) {
    if (!pending.erase(op))
      return;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        visit(def);
    late.push_back(op);
  };
  // Readers in order: each pulls in what it reads just before itself.
  SmallVector<Operation *> readers(order.begin() + long(begin), order.end());
  bool transfers = llvm::any_of(readers, [](Operation *op) {
    return isa<graph::SendOp, graph::RecvOp>(op);
  });
  if (transfers) // a pipeline stage's once part: keep its order
    return;
  // When each op's inputs from the per-micro-batch part are final: the
  // latest position there of what it reads, through the once part.
  llvm::DenseMap<Operation *, size_t> position, ready;
  for (auto [i, op] : llvm::enumerate(order))
    position[op] = i;
  std::function<size_t(Operation *)> readyOf = [&](Operation *op) -> size_t {
    if (auto it = ready.find(op); it != ready.end())
      return it->second;
    size_t at = 0;
    for (Value operand : op->getOperands()) {
      Operation *def = operand.getDefiningOp();
      auto p = def ? position.find(def) : position.end();
      if (p == position.end())
        continue;
      at = std::max(at, p->second < begin ? p->second : readyOf(def));
    }
    return ready[op] = at;
  };
  // From the part's sinks (what nothing else in it reads: the updates), in
  // the order their inputs are final, then anything left.
  SmallVector<Operation *> sinks;
  for (Operation *op : readers)
    if (llvm::none_of(op->getUsers(), [&](Operation *user) { return pending.contains(user); }))
      sinks.push_back(op);
  llvm::sort(sinks, [&](Operation *a, Operation *b) {
    return std::pair(readyOf(a), position[a]) < std::pair(readyOf(b), position[b]);
  });
  for (Operation *op : sinks)
    visit(op);
  for (Operation *op : readers)
    visit(op);
  std::copy(late.begin(), late.end(), order.begin() + long(begin));
}

struct ScheduleForMemory : impl::ScheduleForMemoryBase<ScheduleForMemory> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    Block &block = func.getBody().front();
    SmallVector<Operation *> sources, ops;
    // Views of persistent values go with them: prologue ops may read them.
    for (Operation &op : block.without_terminator()) {
      bool source = isPersistentOp(&op) || (isViewOp(&op) && isPersistentValue(op.getResult(0)));
      (source ? sources : ops).push_back(&op);
    }

    // A pipeline stage: what its forward part reads is forward too (a
    // fused group's or a layout change's new ops).
    if (func->hasAttr(attr::kStage))
      for (Operation *op : llvm::reverse(ops))
        if (!op->hasAttr(attr::kPipelineForward) && !op->hasAttr(attr::kOncePerStep) &&
            llvm::any_of(op->getUsers(), [](Operation *user) {
              return user->hasAttr(attr::kPipelineForward);
            }))
          op->setAttr(attr::kPipelineForward, UnitAttr::get(op->getContext()));
    // An interleaved stage: an op a later pass made (a layout change) is
    // in its readers' virtual stage, or else its operands'.
    int64_t virtuals = virtualStagesOf(func);
    if (virtuals > 1) {
      auto chunkFrom = [](Operation *op, auto &&others) {
        for (Operation *other : others)
          if (Attribute chunk = other ? other->getAttr(attr::kChunk) : nullptr) {
            op->setAttr(attr::kChunk, chunk);
            return;
          }
      };
      for (Operation *op : llvm::reverse(ops))
        if (!op->hasAttr(attr::kChunk))
          chunkFrom(op, op->getUsers());
      for (Operation *op : ops)
        if (!op->hasAttr(attr::kChunk))
          chunkFrom(op, llvm::map_range(op->getOperands(),
                                        [](Value v) { return v.getDefiningOp(); }));
    }
    SmallVector<Operation *> greedy = greedyOrder(block, ops);
    if (greedy.size() != ops.size()) {
      func.emitError("schedule: the function's ops form a cycle");
      return signalPassFailure();
    }
    // A micro-batched step runs its once-per-step part last (nothing of the
    // per-micro-batch part reads it, so either order stays valid), and a
    // pipeline stage its forward part first (which reads nothing of the
    // backward); an interleaved one each virtual stage's forward, then
    // each one's backward (which read nothing of each other).
    for (SmallVector<Operation *> *order : {&ops, &greedy}) {
      std::vector<SmallVector<Operation *>> parts(size_t(2 * virtuals + 1));
      for (Operation *op : *order)
        parts[size_t(pipelinePartOf(op, virtuals))].push_back(op);
      order->clear();
      for (auto &p : parts)
        order->append(p.begin(), p.end());
    }
    // The once-per-step part is one chain per parameter (reduce the
    // gradient, average it, update the moments and the weight): run each
    // op just before the first op that reads it, so that one chain's
    // temporaries are live at a time, not every parameter's averaged
    // gradient at once.
    for (SmallVector<Operation *> *order : {&ops, &greedy}) {
      accumulateEarly(*order);
      lateOncePerStep(*order);
    }
    int64_t sourcePeak = peakOf(block, ops), greedyPeak = peakOf(block, greedy);
    bool useGreedy = greedyPeak < sourcePeak;
    ArrayRef<Operation *> chosen = useGreedy ? greedy : ops;

    // Sources first, then the chosen order, then the terminator.
    Operation *terminator = block.getTerminator();
    for (Operation *op : sources)
      op->moveBefore(terminator);
    for (Operation *op : chosen)
      op->moveBefore(terminator);

    Builder b(&getContext());
    func->setAttr(attr::kSchedule,
                  b.getDictionaryAttr({
                      b.getNamedAttr("order", b.getStringAttr(useGreedy ? "memory" : "source")),
                      b.getNamedAttr("source_peak_bytes", b.getI64IntegerAttr(sourcePeak)),
                      b.getNamedAttr("memory_peak_bytes", b.getI64IntegerAttr(greedyPeak)),
                  }));
    addNote(func, std::string("schedule: ") +
                      (useGreedy ? "memory-greedy order" : "source order kept") +
                      " (simulated activation peak " + plan::formatBytes(greedyPeak) +
                      " greedy vs " + plan::formatBytes(sourcePeak) + " source)");
  }
};

} // namespace
} // namespace dtc
