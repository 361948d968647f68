//===- BucketCollectives.cpp - collectives sent together ------------------===//
//
// A collective costs a start-up (a ring's p - 1 latencies, NCCL's launch)
// however small its tensor: a data-parallel step that reduces each of
// GPT-2's 149 gradients on its own pays 149 of them. This pass gathers the
// collectives that one message can carry into graph.bucket ops, walking
// the scheduled ops once with a bucket open for each kind of message:
//
//   - a collective joins the open bucket of its kind while the bucket's
//     inputs stay under the byte limit;
//   - an op that reads an open bucket's member (or an op deferred behind
//     it) is deferred behind the bucket, keeping its order, when it leads
//     nowhere but the step's results (an optimizer's update, a gradient's
//     accumulation, ZeRO's gather of an updated weight); any other reader
//     sends the bucket first;
//   - a collective the step waits for (an activation's) shares a message
//     only side by side; weight gradients' reductions and collectives that
//     lead nowhere but the step's results wait, and share messages across
//     the ops between them;
//   - any other op keeps its place: the bucket is sent where its last
//     member was.
//
// A bucket closes at its byte limit, with the last collective of its kind,
// at a send or receive, at the end of its part of the step, at a reader
// that cannot wait, or when an op must follow two buckets at once; its
// deferred ops then run again through the walk. Nothing but a bucket's
// members moves earlier than a reader the step goes on with.
//
//===----------------------------------------------------------------------===//
#include "compiler/BufferLiveness.h"
#include "compiler/CompileNotes.h"
#include "compiler/ElementwiseGroups.h"
#include "compiler/Passes.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"
#include "plan/FormatBytes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"

#include <deque>

namespace dtc {
#define GEN_PASS_DEF_BUCKETCOLLECTIVES
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

/// The part of the step an op runs in (plan.proto's RankProgram parts):
/// once per step or per micro-batch, a pipeline stage's forward or
/// backward, its model chunk.
std::tuple<bool, bool, int64_t> partOf(Operation *op) {
  auto chunk = op->getAttrOfType<IntegerAttr>(attr::kChunk);
  return {op->hasAttr(attr::kOncePerStep), op->hasAttr(attr::kPipelineForward),
          chunk ? chunk.getInt() : 0};
}

/// Whether `op` is a collective a bucket may take.
bool bucketable(Operation *op) {
  StringRef mesh;
  ArrayRef<int16_t> axes;
  if (auto c = dyn_cast<mesh::AllReduceOp>(op)) {
    // A gradient accumulator's reduction, once a step: it runs early, in
    // place, during the last micro-batch's backward (plan/Overlap.h).
    Operation *def = c.getInput().getDefiningOp();
    if (op->hasAttr(attr::kOncePerStep) && (!def || !def->hasAttr(attr::kOncePerStep)))
      return false;
    mesh = c.getMesh(), axes = c.getMeshAxes();
  } else if (auto c = dyn_cast<mesh::AllGatherOp>(op)) {
    mesh = c.getMesh(), axes = c.getMeshAxes();
  } else if (auto c = dyn_cast<mesh::ReduceScatterOp>(op)) {
    mesh = c.getMesh(), axes = c.getMeshAxes();
  } else {
    return false;
  }
  // Between pipeline stages, or among a stage's replicas: each stage's
  // program is its own, and buckets must match across a group.
  if (mesh == attr::kStagesMesh || op->hasAttr(attr::kReplicas))
    return false;
  auto meshOp = SymbolTable::lookupNearestSymbolFrom<mesh::MeshOp>(
      op, FlatSymbolRefAttr::get(op->getContext(), mesh));
  if (!meshOp)
    return false;
  int64_t ranks = 1;
  for (int16_t a : axes)
    ranks *= meshOp.getShape()[size_t(a)];
  return ranks > 1;
}

/// Whether `a` and `b` may share a bucket: one message, in one part of
/// the step, and both free to wait (`patient`: a weight gradient's
/// reduction, which nothing reads before the optimizer, or a collective
/// whose result leads nowhere but the step's results, as ZeRO's gather of
/// the updated weights does) or neither (an activation's, which the next
/// op may wait for: bucketed with those, it would wait for them too).
bool sameKind(Operation *a, Operation *b, const llvm::DenseSet<Operation *> &patient) {
  return partOf(a) == partOf(b) && patient.contains(a) == patient.contains(b) &&
         graph::bucketMismatch(a, b).empty();
}

struct Bucket {
  SmallVector<Operation *> members;
  int64_t bytes = 0;
  std::tuple<bool, bool, int64_t> part;
  SmallVector<Operation *> deferred;   // ops that must run after the bucket
  llvm::DenseSet<Value> after;          // what the members and deferred ops make
};

class BucketCollectivesPass
    : public impl::BucketCollectivesBase<BucketCollectivesPass> {
public:
  using BucketCollectivesBase::BucketCollectivesBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal() || bytes <= 0)
      return;
    Block &block = func.getBody().front();
    Operation *terminator = block.getTerminator();
    llvm::DenseMap<Operation *, int64_t> position;
    std::deque<Operation *> queue;
    for (Operation &op : block.without_terminator()) {
      position[&op] = int64_t(position.size());
      queue.push_back(&op);
    }
    // Elementwise ops (and views) whose results reach only the step's
    // results through more of them: an optimizer's updates, a gradient's
    // accumulation; and the collectives among them (ZeRO's gathers of
    // updated weights). These may wait behind a bucket, and the
    // collectives among them, with weight gradients' reductions, are the
    // patient ones.
    llvm::DenseSet<Operation *> late, patient;
    for (Operation &op : llvm::reverse(block.without_terminator()))
      if ((isa<graph::FusedOp>(op) || isElementwise(&op) || isViewOp(&op) ||
           bucketable(&op)) &&
          llvm::all_of(op.getUsers(), [&](Operation *user) {
            return user == terminator || late.contains(user);
          }))
        late.insert(&op);
    for (Operation &op : block.without_terminator())
      if (bucketable(&op) && (late.contains(&op) || op.hasAttr(attr::kGradientReduction)))
        patient.insert(&op);
    // Each kind of message in each part: what its collectives send in all.
    // A bucket holds at most `bytes`, and at most a quarter of that total
    // when that is more than 1 MiB (below, a message is mostly start-up):
    // the first ones are then sent while the step goes on, overlapping the
    // ops after them, not all at its end.
    struct Kind {
      Operation *first;
      int64_t bytes = 0, left = 0; // left: collectives not yet in a bucket
    };
    SmallVector<Kind> kinds;
    auto kindOf = [&](Operation *op) -> Kind & {
      for (Kind &kind : kinds)
        if (sameKind(kind.first, op, patient))
          return kind;
      return kinds.emplace_back(Kind{op});
    };
    for (Operation *op : queue)
      if (bucketable(op)) {
        kindOf(op).bytes += tensorBytes(op->getOperand(0));
        ++kindOf(op).left;
      }
    auto limitOf = [&](Operation *op) {
      constexpr int64_t kSmall = 1 << 20;
      return std::min<int64_t>(bytes, std::max<int64_t>(kSmall, kindOf(op).bytes / 4));
    };
    SmallVector<Operation *> order;
    SmallVector<std::unique_ptr<Bucket>> open;
    int64_t buckets = 0, members = 0;
    double sent = 0;

    // A weight's gather (its input a parameter: ZeRO-3's, before the
    // forward and again before the backward) may go before where it
    // stood, since what it reads is there from the step's start. A
    // bucket of them takes the gathers of its kind that follow, up to the
    // next send, receive or part of the step, while what they gather
    // stays within `bytes`: a layer's weights in one message, as FSDP
    // gathers a flattened unit.
    // Views, persistent ops and the prologue stand where the step needs
    // them, in no part of their own.
    auto placed = [](Operation *op) {
      return isViewOp(op) || isPersistentOp(op) || op->hasAttr(attr::kPrologue);
    };
    auto gathersWeight = [](Operation *op) {
      return isa<mesh::AllGatherOp>(op) &&
             op->getOperand(0).getDefiningOp<graph::ParameterOp>() != nullptr;
    };
    auto gatherAhead = [&](Bucket &b) {
      if (patient.contains(b.members.front()) || !llvm::all_of(b.members, gathersWeight))
        return;
      int64_t gathered = 0;
      for (Operation *m : b.members)
        gathered += tensorBytes(m->getResult(0));
      constexpr size_t kWindow = 4096; // ops looked at past the bucket
      size_t looked = 0;
      for (auto it = queue.begin(); it != queue.end() && looked < kWindow; ++looked) {
        Operation *op = *it;
        if (isa<graph::SendOp, graph::RecvOp>(op) || (!placed(op) && partOf(op) != b.part))
          break;
        if (!bucketable(op) || !gathersWeight(op) ||
            !sameKind(b.members.front(), op, patient)) {
          ++it;
          continue;
        }
        gathered += tensorBytes(op->getResult(0));
        if (gathered > bytes)
          break;
        b.members.push_back(op);
        b.bytes += tensorBytes(op->getOperand(0));
        --kindOf(op).left;
        it = queue.erase(it);
      }
    };
    // Sends `closing` (each a bucket op where it has two members or
    // more) and puts their deferred ops back at the front of the walk, in
    // their order.
    auto close = [&](SmallVector<Bucket *> closing) {
      SmallVector<Operation *> again;
      for (Bucket *b : closing) {
        gatherAhead(*b);
        if (b->members.size() == 1) {
          order.push_back(b->members.front());
        } else {
          order.push_back(makeBucket(b->members));
          ++buckets;
          members += int64_t(b->members.size());
          sent += double(b->bytes);
        }
        again.append(b->deferred);
      }
      llvm::sort(again, [&](Operation *x, Operation *y) { return position[x] < position[y]; });
      for (Operation *op : llvm::reverse(again))
        queue.push_front(op);
      llvm::erase_if(open, [&](const std::unique_ptr<Bucket> &o) {
        return llvm::is_contained(closing, o.get());
      });
    };
    auto all = [&] {
      SmallVector<Bucket *> each;
      for (auto &b : open)
        each.push_back(b.get());
      return each;
    };
    auto readsFrom = [](Operation *op, const Bucket &b) {
      return llvm::any_of(op->getOperands(), [&](Value v) { return b.after.contains(v); });
    };

    while (!queue.empty() || !open.empty()) {
      if (queue.empty()) { // the end of the block: what is open closes
        close(all());
        continue;
      }
      Operation *op = queue.front();
      queue.pop_front();
      SmallVector<Bucket *> behind;
      for (auto &b : open)
        if (readsFrom(op, *b))
          behind.push_back(b.get());
      // Sends and receives meet the other stage's in order: nothing moves
      // across them.
      if (isa<graph::SendOp, graph::RecvOp>(op) && !open.empty()) {
        queue.push_front(op);
        close(all());
        continue;
      }
      // An op behind two buckets: all but the latest close, and it is
      // walked again.
      if (behind.size() > 1) {
        queue.push_front(op);
        behind.pop_back();
        close(behind);
        continue;
      }
      if (behind.size() == 1) {
        // Only what leads nowhere but the step's results (an optimizer's
        // update, an accumulation) waits for the bucket; anything else the
        // step goes on with sends it first.
        if (!late.contains(op)) {
          queue.push_front(op);
          close(behind);
          continue;
        }
        behind.front()->deferred.push_back(op);
        for (Value result : op->getResults())
          behind.front()->after.insert(result);
        continue;
      }
      bool unmoved = placed(op);
      if (!unmoved) {
        // An op of a later part: the open buckets of earlier parts close
        // before it.
        SmallVector<Bucket *> ended;
        for (auto &b : open)
          if (b->part != partOf(op))
            ended.push_back(b.get());
        if (!ended.empty()) {
          queue.push_front(op);
          close(ended);
          continue;
        }
      }
      if (!bucketable(op)) {
        // An activation's collectives share a message only side by side:
        // one the step waits for is not held back for a later one.
        if (!unmoved) {
          SmallVector<Bucket *> waiting;
          for (auto &b : open)
            if (!patient.contains(b->members.front()))
              waiting.push_back(b.get());
          if (!waiting.empty()) {
            queue.push_front(op);
            close(waiting);
            continue;
          }
        }
        order.push_back(op);
        continue;
      }
      int64_t size = tensorBytes(op->getOperand(0)), limit = limitOf(op);
      Bucket *same = nullptr;
      for (auto &b : open)
        if (sameKind(b->members.front(), op, patient))
          same = b.get();
      if (same && same->bytes + size > limit) {
        queue.push_front(op);
        close({same});
        continue;
      }
      if (!same) {
        open.push_back(std::make_unique<Bucket>());
        same = open.back().get();
        same->part = partOf(op);
      }
      same->members.push_back(op);
      same->bytes += size;
      same->after.insert(op->getResult(0));
      // Full, or the last of its kind: sent here.
      bool last = --kindOf(op).left == 0;
      if (same->bytes >= limit || last)
        close({same});
    }
    for (Operation *op : order)
      op->moveBefore(terminator);
    for (Operation *op : replaced_)
      op->erase();
    replaced_.clear();
    if (buckets > 0)
      addNote(func, "buckets: " + std::to_string(members) + " collectives sent as " +
                        std::to_string(buckets) + (buckets == 1 ? " message (" : " messages (") +
                        plan::formatBytes(int64_t(sent)) + ", up to " +
                        plan::formatBytes(bytes) +
                        " each, --bucket): each pays a collective's start-up once");
  }

private:
  SmallVector<Operation *> replaced_; // bucketed collectives, erased at the end

  /// One graph.bucket in place of `members` (each read once as its input,
  /// each result read as the bucket's).
  Operation *makeBucket(ArrayRef<Operation *> members) {
    Operation *last = members.back();
    OpBuilder b(last);
    SmallVector<Value> inputs;
    SmallVector<Type> types;
    SmallVector<Location> locations;
    SmallVector<Attribute> shardings;
    bool gradients = true;
    for (Operation *m : members) {
      inputs.push_back(m->getOperand(0));
      types.push_back(m->getResult(0).getType());
      locations.push_back(m->getLoc());
      Attribute sharding = m->getAttr(attr::kSharding);
      shardings.push_back(sharding ? sharding : b.getUnitAttr());
      gradients = gradients && m->hasAttr(attr::kGradientReduction);
    }
    auto bucket = b.create<graph::BucketOp>(b.getFusedLoc(locations), types, inputs);
    Block *body = b.createBlock(&bucket.getBody());
    SmallVector<Value> yielded;
    for (Operation *m : members) {
      IRMapping map;
      map.map(m->getOperand(0), body->addArgument(m->getOperand(0).getType(), m->getLoc()));
      yielded.push_back(b.clone(*m, map)->getResult(0));
    }
    b.create<graph::YieldOp>(last->getLoc(), yielded);
    for (StringRef name : {attr::kOncePerStep, attr::kPipelineForward, attr::kChunk})
      if (Attribute a = last->getAttr(name))
        bucket->setAttr(name, a);
    if (gradients)
      bucket->setAttr(attr::kGradientReduction, b.getUnitAttr());
    bucket->setAttr(attr::kResultShardings, b.getArrayAttr(shardings));
    // Erased at the pass's end: the walk compares later ops with them.
    for (auto [i, m] : llvm::enumerate(members)) {
      m->getResult(0).replaceAllUsesWith(bucket.getResult(unsigned(i)));
      replaced_.push_back(m);
    }
    return bucket;
  }
};

} // namespace
} // namespace dtc
