//===- KeepBf16Weights.cpp - a bf16 step's weights kept in bf16 -----------===//
//
// A mixed-precision step reads each f32 weight through a cast to bf16 (the
// master copy stays f32 for the optimizer). Cast every step, that is a
// kernel per weight, reading 4 bytes and writing 2 of each element, before
// the forward can start. Megatron-LM keeps the bf16 copy instead and has
// the optimizer write it with the f32 weight: here the copy becomes a
// parameter of its own (`cast_of` the weight), the step's casts read it,
// and the step's last act casts the updated weight into it, which
// dtc-fuse-elementwise makes one more output of the optimizer's kernel.
// dtc compile runs it between the sharding search and the partitioner: the
// copy is split as the search split its weight, and where the search split
// the weight's update finer (ZeRO-1 and 2: the update runs on shards over
// the data-parallel ranks, then gathered), the f32 master is kept so split
// too, so that the step gathers the copy's bf16 shards instead of the f32
// update. On a partitioned step (dtc-opt) the copy takes its weight's split.
// Why: docs/training.md. A bf16 inference plan's weights are such copies
// alone: cast as they load, their f32 weights not kept where nothing else
// reads them.
//
//===----------------------------------------------------------------------===//
#include "compiler/CompileNotes.h"
#include "compiler/MixedPrecision.h"
#include "compiler/Passes.h"
#include "compiler/Sharding.h"

#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"

namespace dtc {
#define GEN_PASS_DEF_KEEPBF16WEIGHTS
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

/// The sharding the search decided for `v`, the result of an op it split
/// (none after the partitioner, which drops the splits).
std::optional<Sharding> decidedSharding(Value v) {
  auto result = dyn_cast<OpResult>(v);
  if (!result)
    return std::nullopt;
  auto shardable = dyn_cast<graph::ShardableOp>(result.getOwner());
  std::optional<SmallVector<MeshAxes>> split = readSplit(result.getOwner());
  if (!shardable || !split)
    return std::nullopt;
  graph::ShardingRule rule = shardable.shardingRule();
  return shardingOf(rule, rule.results[result.getResultNumber()], *split);
}

struct KeepBf16Weights : impl::KeepBf16WeightsBase<KeepBf16Weights> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.getBody().empty())
      return;
    bool training = func->hasAttr(attr::kTraining);
    Block &block = func.getBody().front();
    Operation *terminator = block.getTerminator();
    // The step's result updating each parameter, and where new ones go:
    // after the last update (a gradient-squares result stays last).
    llvm::StringMap<unsigned> updateOf;
    unsigned insertAt = terminator->getNumOperands();
    for (unsigned i = 0; i < func.getNumResults(); ++i)
      if (auto name = func.getResultAttrOfType<StringAttr>(i, attr::kUpdates)) {
        updateOf[name.getValue()] = i;
        insertAt = i + 1;
      }

    SmallVector<graph::ParameterOp> weights; // before any copy is added
    for (Operation &op : block)
      if (auto p = dyn_cast<graph::ParameterOp>(op))
        weights.push_back(p);

    OpBuilder b(&getContext());
    int kept = 0, splitMasters = 0;
    int64_t elements = 0;
    for (graph::ParameterOp weight : weights) {
      SmallVector<graph::CastOp> casts = bf16CastsOf(weight);
      if (casts.empty())
        continue;
      auto type = cast<RankedTensorType>(casts.front().getType());
      std::string name = (weight.getName() + ".bf16").str();
      b.setInsertionPointAfter(weight);
      auto copy = b.create<graph::ParameterOp>(weight.getLoc(), type, b.getStringAttr(name));
      // Inference's copies are read from the model's initializer itself (a
      // copy of a merged one reads that: `copy_of`).
      copy.setCastOfAttr(training || !weight.getCopyOf()
                             ? weight.getNameAttr()
                             : b.getStringAttr(*weight.getCopyOf()));
      if (Attribute sharding = weight->getAttr(attr::kSharding))
        copy->setAttr(attr::kSharding, sharding);
      if (std::optional<SmallVector<MeshAxes>> split = readSplit(weight)) // the search's
        writeSplit(copy, *split);
      for (graph::CastOp cast : casts) {
        cast.replaceAllUsesWith(copy.getResult());
        cast.erase();
      }
      ++kept;
      elements += type.getNumElements();
      if (!training) { // inference: the f32 weight is not loaded where nothing else reads it
        if (weight->use_empty())
          weight.erase();
        continue;
      }

      // A weight the step updates: its copy is the update's cast, made
      // where the update is (once per step, with its sharding).
      auto update = updateOf.find(weight.getName());
      if (update == updateOf.end())
        continue; // frozen: the copy made at load serves every step
      Value updated = terminator->getOperand(update->second);
      if (updated == weight.getResult())
        continue;
      // The master split as the update is, where the search split that finer.
      int64_t rank = type.getRank();
      std::optional<Sharding> split = decidedSharding(updated);
      std::optional<Sharding> held = decidedSharding(weight.getResult());
      if (!held)
        held = readSharding(weight->getAttrOfType<graph::ShardingAttr>(attr::kSharding), rank);
      if (split && refines(*split, *held)) { // a parameter's factors are its dims
        weight->setAttr(attr::kSharding, shardingAttr(b, *split));
        writeSplit(weight, split->dims);
        ++splitMasters;
      }
      b.setInsertionPoint(terminator);
      auto next = b.create<graph::CastOp>(updated.getLoc(), type, updated);
      if (Operation *def = updated.getDefiningOp())
        for (StringRef kept : {attr::kSharding, attr::kOncePerStep})
          if (Attribute a = def->getAttr(kept))
            next->setAttr(kept, a);
      NamedAttribute attrs[] = {b.getNamedAttr(attr::kName, b.getStringAttr(name + ".new")),
                                b.getNamedAttr(attr::kUpdates, b.getStringAttr(name))};
      func.insertResult(insertAt, type, b.getDictionaryAttr(attrs));
      terminator->insertOperands(insertAt, ValueRange{next.getResult()});
      ++insertAt;
    }
    if (kept && training)
      addNote(func, "training: " + std::to_string(kept) + " weights (" + formatCount(elements) +
                        " values) kept in bf16 between steps beside their f32 master copies: "
                        "the optimizer writes both, and the step casts none" +
                        (splitMasters ? "; " + std::to_string(splitMasters) +
                                            " masters split as their updates are (ZeRO), "
                                            "their copies gathered in bf16"
                                      : std::string()));
    else if (kept)
      addNote(func, "precision: " + std::to_string(kept) + " weights (" +
                        formatCount(elements) + " values) loaded as bf16 copies, cast as they "
                        "are read from the model (the f32 weights are not kept)");
  }
};

} // namespace
} // namespace dtc
