//===- SpmdPartition.cpp - one program for every rank, on its shards -------===//
//
// SPMD partitioning in one forward walk. An op the sharding search decided
// (`dtc.split`) is split as it says; any other op follows its operands'
// shardings through its sharding rule. Each op is rebuilt on its local
// shapes with the collectives that its split implies: all-gathers and
// slices of operands, all-reduces (or reduce-scatters) of partial results.
// docs/sharding.md has the picture.
//
//===----------------------------------------------------------------------===//
#include "compiler/CompileNotes.h"
#include "dialects/graph/AttrNames.h"
#include "compiler/Passes.h"
#include "compiler/WrapIds.h"
#include "compiler/Sharding.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace dtc {
#define GEN_PASS_DEF_SPMDPARTITION
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

using graph::ShardingRule;
using Axes = MeshAxes;

class Partitioner {
public:
  Partitioner(func::FuncOp func, mesh::MeshOp mesh)
      : func_(func), mesh_(mesh), b_(func.getContext()) {}

  LogicalResult run() {
    Block &oldBlock = func_.getBody().front();
    auto *newBlock = new Block();
    SmallVector<Type> argTypes;
    for (BlockArgument arg : oldBlock.getArguments()) {
      Sharding s = argSharding(arg.getArgNumber(), arg);
      if (failed(checkDivisible(arg, s, func_.getLoc())))
        return failure();
      Type local = localType(arg.getType(), s);
      argTypes.push_back(local);
      Value newArg = newBlock->addArgument(local, arg.getLoc());
      map_.map(arg, newArg);
      shardings_[newArg] = s;
    }
    b_.setInsertionPointToEnd(newBlock);
    for (Operation &op : oldBlock.without_terminator())
      if (failed(partition(&op))) {
        delete newBlock;
        return failure();
      }
    // Results whole on every rank (the loss, a graph output), but an
    // update split as its parameter is, so that it can overwrite it.
    llvm::StringMap<Sharding> parameters;
    newBlock->walk([&](graph::ParameterOp p) { parameters[p.getName()] = current(p); });
    SmallVector<Value> results;
    for (auto [i, v] : llvm::enumerate(oldBlock.getTerminator()->getOperands())) {
      Value local = map_.lookup(v);
      Sharding want{SmallVector<Axes, 4>(rankOf(local))};
      if (auto name = func_.getResultAttrOfType<StringAttr>(unsigned(i), attr::kUpdates))
        if (auto it = parameters.find(name.getValue()); it != parameters.end())
          want = it->second;
      results.push_back(reshardOperand(local, want));
    }
    b_.create<func::ReturnOp>(func_.getLoc(), results);
    func_.getBody().push_back(newBlock);
    oldBlock.dropAllDefinedValueUses();
    oldBlock.erase();
    func_.setType(FunctionType::get(func_.getContext(), argTypes, ValueRange(results).getTypes()));
    // Whole values that every reader took in a locally made cut are dead.
    SmallVector<Operation *> ops;
    for (Operation &op : newBlock->without_terminator())
      ops.push_back(&op);
    for (Operation *op : llvm::reverse(ops)) // readers before what they read
      if (op->use_empty() && isPure(op))
        op->erase();
    // Every split value says how (dtc plan shows it); parameters already do.
    for (Operation &op : newBlock->without_terminator()) {
      if (op.getNumResults() == 1 && !isa<graph::ParameterOp>(op))
        if (Sharding s = current(op.getResult(0)); !s.replicated())
          op.setAttr(attr::kSharding, shardingAttr(b_, s));
      if (op.getNumResults() > 1) { // attention's output and lse, its gradients
        SmallVector<Attribute> each;
        bool split = false;
        for (Value result : op.getResults()) {
          Sharding s = current(result);
          split = split || !s.replicated();
          each.push_back(shardingAttr(b_, s));
        }
        if (split)
          op.setAttr(attr::kResultShardings, b_.getArrayAttr(each));
      }
    }
    fuseReduceScatters(*newBlock);
    return success();
  }

  /// An all-reduce whose every reader keeps only its block is a
  /// reduce-scatter (half the traffic); a slice of what was just gathered
  /// over the same axes is the value itself.
  void fuseReduceScatters(Block &block) {
    SmallVector<mesh::AllReduceOp> reduces;
    block.walk([&](mesh::AllReduceOp op) { reduces.push_back(op); });
    for (mesh::AllReduceOp &reduce : reduces)
      reduce = commuteTowardSlices(reduce);
    for (mesh::AllReduceOp reduce : reduces) {
      auto slices = llvm::to_vector(reduce->getUsers());
      auto first = slices.empty() ? nullptr : dyn_cast<mesh::AllSliceOp>(slices.front());
      bool fusable = first && first.getMeshAxes() == reduce.getMeshAxes() &&
                     llvm::all_of(slices, [&](Operation *user) {
                       auto slice = dyn_cast<mesh::AllSliceOp>(user);
                       return slice && slice.getMeshAxes() == first.getMeshAxes() &&
                              slice.getSliceAxis() == first.getSliceAxis();
                     });
      if (!fusable)
        continue;
      b_.setInsertionPoint(reduce);
      Value scattered = b_.create<mesh::ReduceScatterOp>(
          reduce.getLoc(), first.getType(), mesh_.getSymName(), reduce.getMeshAxes(),
          reduce.getInput(), reduce.getReduction(), first.getSliceAxis());
      if (Attribute sharding = first->getAttr(attr::kSharding))
        scattered.getDefiningOp()->setAttr(attr::kSharding, sharding);
      if (reduce->hasAttr(attr::kGradientReduction))
        scattered.getDefiningOp()->setAttr(attr::kGradientReduction, b_.getUnitAttr());
      for (Operation *user : slices) {
        user->getResult(0).replaceAllUsesWith(scattered);
        user->erase();
      }
      reduce.erase();
    }
    SmallVector<mesh::AllSliceOp> slices;
    block.walk([&](mesh::AllSliceOp op) { slices.push_back(op); });
    for (mesh::AllSliceOp slice : slices)
      if (auto gather = slice.getInput().getDefiningOp<mesh::AllGatherOp>())
        if (gather.getMeshAxes() == slice.getMeshAxes() &&
            gather.getGatherAxis() == slice.getSliceAxis()) {
          slice.getResult().replaceAllUsesWith(gather.getInput());
          slice.erase();
          if (gather->use_empty())
            gather.erase();
        }
  }

  /// A sum all-reduce read only through reshapes and a cast on the way to
  /// slices (a bias's gradient summed to 1x1xN and reshaped to N; a bf16
  /// gradient cast to f32 for its f32 accumulator shard) brought next to
  /// the slices so that the pair fuses: a reshape moves before the
  /// all-reduce (a sum of equal shapes commutes with it) and the slices
  /// before the cast (slicing commutes with it, and the cast then converts
  /// only the block kept). The all-reduce in its new place is returned.
  mesh::AllReduceOp commuteTowardSlices(mesh::AllReduceOp reduce) {
    if (reduce.getReduction() != mesh::ReductionKind::Sum)
      return reduce;
    while (reduce->hasOneUse()) {
      Operation *user = *reduce->getUsers().begin();
      if (auto reshape = dyn_cast<graph::ReshapeOp>(user)) {
        b_.setInsertionPoint(reduce);
        Operation *early = b_.clone(*reshape);
        early->setOperand(0, reduce.getInput());
        auto moved = b_.create<mesh::AllReduceOp>(reduce.getLoc(), early->getResult(0),
                                                  reduce.getMesh(), reduce.getMeshAxes(),
                                                  reduce.getReduction());
        moved->setAttrs(reduce->getAttrs());
        reshape.getResult().replaceAllUsesWith(moved.getResult());
        reshape.erase();
        reduce.erase();
        reduce = moved;
        continue;
      }
      auto convert = dyn_cast<graph::CastOp>(user);
      if (!convert || convert->use_empty())
        return reduce;
      auto first = dyn_cast<mesh::AllSliceOp>(*convert->getUsers().begin());
      bool slicesOnly = first && llvm::all_of(convert->getUsers(), [&](Operation *u) {
        auto slice = dyn_cast<mesh::AllSliceOp>(u);
        return slice && slice.getMeshAxes() == first.getMeshAxes() &&
               slice.getSliceAxis() == first.getSliceAxis();
      });
      if (!slicesOnly)
        return reduce;
      b_.setInsertionPoint(convert);
      auto blockType = cast<RankedTensorType>(first.getType());
      Value block = b_.create<mesh::AllSliceOp>(
          first.getLoc(), blockType.clone(getElementTypeOrSelf(reduce.getType())),
          first.getMesh(), first.getMeshAxes(), reduce.getResult(), first.getSliceAxis());
      Operation *late = b_.clone(*convert);
      late->setOperand(0, block);
      late->getResult(0).setType(blockType);
      if (Attribute sharding = first->getAttr(attr::kSharding)) {
        block.getDefiningOp()->setAttr(attr::kSharding, sharding);
        late->setAttr(attr::kSharding, sharding);
      }
      for (Operation *slice : llvm::to_vector(convert->getUsers())) {
        slice->getResult(0).replaceAllUsesWith(late->getResult(0));
        slice->erase();
      }
      convert.erase();
      return reduce;
    }
    return reduce;
  }

private:
  static int64_t rankOf(Value v) { return cast<ShapedType>(v.getType()).getRank(); }

  int64_t axesSize(ArrayRef<int16_t> axes) {
    int64_t n = 1;
    for (int16_t a : axes)
      n *= mesh_.getShape()[size_t(a)];
    return n;
  }

  Sharding argSharding(unsigned index, Value arg) {
    return readSharding(func_.getArgAttrOfType<graph::ShardingAttr>(index, attr::kSharding), rankOf(arg));
  }

  LogicalResult checkDivisible(Value v, const Sharding &s, Location loc) {
    auto shape = cast<ShapedType>(v.getType()).getShape();
    for (size_t d = 0; d < s.dims.size(); ++d)
      if (shape[d] % axesSize(s.dims[d]) != 0)
        return emitError(loc) << "dim " << d << " of size " << shape[d]
                              << " cannot be split into " << axesSize(s.dims[d])
                              << " equal parts";
    return success();
  }

  Type localType(Type global, const Sharding &s) {
    auto type = cast<RankedTensorType>(global);
    SmallVector<int64_t> shape(type.getShape());
    for (size_t d = 0; d < s.dims.size(); ++d)
      shape[d] /= axesSize(s.dims[d]);
    return type.clone(shape);
  }

  /// How a new (local) value is split; whole when nothing was recorded.
  Sharding current(Value v) const {
    Sharding s = shardings_.lookup(v);
    s.dims.resize(size_t(rankOf(v)));
    return s;
  }

  /// `v` (local, sharded as recorded) as `want`: dims cut where they should
  /// not be are all-gathered. A dim to be cut that is whole is not asked
  /// for: factors are only split where an operand already is.
  Value reshard(Value v, const Sharding &want) {
    Sharding have = current(v);
    for (size_t d = 0; d < have.dims.size(); ++d) {
      if (have.dims[d] == want.dims[d] || have.dims[d].empty())
        continue;
      auto type = cast<RankedTensorType>(v.getType());
      SmallVector<int64_t> shape(type.getShape());
      // The same axes wanted on a whole dim instead: one all-to-all moves
      // the split there (each rank sends a part of its block to each).
      if (std::optional<size_t> e = moveTarget(have, want, d, shape)) {
        shape[d] *= axesSize(have.dims[d]);
        shape[*e] /= axesSize(have.dims[d]);
        v = b_.create<mesh::AllToAllOp>(v.getLoc(), type.clone(shape), mesh_.getSymName(),
                                        have.dims[d], v, APInt(64, *e), APInt(64, d));
        have.dims[*e] = have.dims[d];
        have.dims[d].clear();
        shardings_[v] = have;
        continue;
      }
      shape[d] *= axesSize(have.dims[d]);
      v = b_.create<mesh::AllGatherOp>(v.getLoc(), type.clone(shape), mesh_.getSymName(),
                                       have.dims[d], v, APInt(64, d));
      have.dims[d].clear();
      shardings_[v] = have;
    }
    return v;
  }

  /// A whole dim that `want` splits over exactly the axes that split dim
  /// `d` (which `want` keeps whole), evenly; the all-to-all's target.
  std::optional<size_t> moveTarget(const Sharding &have, const Sharding &want, size_t d,
                                   ArrayRef<int64_t> shape) {
    if (!want.dims[d].empty())
      return std::nullopt;
    for (size_t e = 0; e < have.dims.size(); ++e)
      if (e != d && have.dims[e].empty() && want.dims[e] == have.dims[d] &&
          shape[e] % axesSize(have.dims[d]) == 0)
        return e;
    return std::nullopt;
  }

  /// The factor split: from the operands as they are, first come first.
  SmallVector<Axes> assignFactors(Operation *op, const ShardingRule &rule) {
    SmallVector<Axes> assign(rule.factors.size());
    llvm::SmallDenseSet<int16_t> used;
    for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
      Sharding s = current(map_.lookup(operand));
      for (size_t d = 0; d < s.dims.size() && d < rule.operands[i].size(); ++d) {
        int f = leadingFactor(rule, rule.operands[i][d]);
        if (s.dims[d].empty() || f < 0 || rule.factors[size_t(f)].whole || !assign[size_t(f)].empty())
          continue;
        if (llvm::any_of(s.dims[d], [&](int16_t a) { return used.contains(a); }))
          continue;
        if (rule.factors[size_t(f)].size % axesSize(s.dims[d]) != 0)
          continue;
        assign[size_t(f)] = s.dims[d];
        used.insert(s.dims[d].begin(), s.dims[d].end());
      }
    }
    // A split factor must lead every dim it is in.
    auto dropTrailing = [&](const ShardingRule::Dims &dims) {
      for (const auto &dim : dims)
        for (int f : dim)
          if (f != leadingFactor(rule, dim) && rule.factors[size_t(f)].size > 1)
            assign[size_t(f)].clear();
    };
    for (const auto &dims : rule.operands)
      dropTrailing(dims);
    for (const auto &dims : rule.results)
      dropTrailing(dims);
    return assign;
  }

  LogicalResult partition(Operation *op) {
    auto shardable = dyn_cast<graph::ShardableOp>(op);
    if (!shardable)
      return op->emitError("cannot partition '") << op->getName() << "': it has no sharding rule";
    ShardingRule rule = shardable.shardingRule();
    std::optional<SmallVector<Axes>> decided = readSplit(op);
    if (decided && decided->size() != rule.factors.size())
      return op->emitError("'") << attr::kSplit << "' names " << decided->size()
                                << " factors; the op's sharding rule has " << rule.factors.size();
    SmallVector<Axes> assign = decided ? *decided : assignFactors(op, rule);
    // A constant stays whole: its readers cut it (locally, when a splat).
    if (isa<graph::ConstantOp>(op))
      assign.assign(rule.factors.size(), Axes{});

    SmallVector<Value> operands;
    SmallVector<Sharding> wanted;
    for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
      wanted.push_back(shardingOf(rule, rule.operands[i], assign));
      // A value read twice the same way (a packed attention's q, k and v)
      // is resharded once.
      Value local;
      for (size_t j = 0; j < i && !local; ++j)
        if (op->getOperand(unsigned(j)) == operand && wanted[j] == wanted[i])
          local = operands[j];
      operands.push_back(local ? local : reshardOperand(map_.lookup(operand), wanted[i]));
    }
    for (auto [i, operand] : llvm::enumerate(operands))
      if (!operand)
        return op->emitError("cannot partition '")
               << op->getName() << "': operand " << i << " (from '"
               << op->getOperand(unsigned(i)).getDefiningOp()->getName()
               << "') is whole on every rank and would have to be cut (only splat constants "
                  "can be cut locally)";

    // Cross-entropy over a block of the classes reads its labels shifted
    // to the block (combineClassSplit writes out the rest).
    auto crossEntropy = dyn_cast<graph::CrossEntropyOp>(op);
    Axes classAxes;
    if (crossEntropy)
      classAxes = assign[size_t(rule.operands[0].back().front())];
    Value labels = crossEntropy ? operands[1] : Value();
    if (!classAxes.empty())
      operands[1] = shiftIndices(op->getLoc(), labels, classAxes,
                                 cast<ShapedType>(crossEntropy.getLogits().getType()).getShape());
    // So does a gather from (or a scatter-add into) a block of a table's
    // rows: an index in another block selects nothing (skip_outside).
    Axes rowAxes;
    std::optional<int64_t> tableAxis = gatherAxis(op);
    if (tableAxis) {
      bool gather = isa<graph::GatherOp>(op);
      const ShardingRule::Dims &table = gather ? rule.operands[0] : rule.results[0];
      rowAxes = assign[size_t(table[size_t(*tableAxis)].front())];
      if (!rowAxes.empty()) {
        auto shape = cast<ShapedType>((gather ? op->getOperand(0) : op->getResult(0)).getType());
        ArrayRef<int64_t> rows = shape.getShape().take_front(*tableAxis + 1);
        operands[1] = shiftIndices(op->getLoc(), wrapNegative(op->getLoc(), operands[1],
                                                              rows.back()),
                                   rowAxes, rows);
      }
    }

    Operation *local = b_.clone(*op, map_);
    local->setOperands(operands);
    local->removeAttr(attr::kSplit);
    for (auto [i, result] : llvm::enumerate(local->getResults())) {
      Sharding s = shardingOf(rule, rule.results[i], assign);
      result.setType(localType(op->getResult(i).getType(), s));
      shardings_[result] = s;
      if (isa<graph::ParameterOp>(local) && !s.replicated())
        local->setAttr(attr::kSharding, shardingAttr(b_, s));
    }
    localiseAttributes(local);
    if (!rowAxes.empty()) {
      local->setAttr("skip_outside", b_.getUnitAttr());
      ++splitTables_;
    }
    if (!classAxes.empty()) {
      ++classSplitLosses_;
      return combineClassSplit(crossEntropy, local, labels, operands[1], classAxes);
    }

    // Split reductions leave partial results: combine them now.
    for (auto [i, result] : llvm::enumerate(local->getResults())) {
      Value combined = result;
      for (auto [f, factor] : llvm::enumerate(rule.factors))
        if (factor.reduction && !assign[f].empty())
          combined = combine(combined, assign[f], factor.combine);
      map_.map(op->getResult(i), combined);
      if (combined != result) {
        Sharding s = current(result); // a copy: inserting may move the map's entries
        shardings_[combined] = s;
      }
    }
    return success();
  }

  /// An operand as the op needs it: dims split where they should not be
  /// are all-gathered; dims to be cut that are whole are made again at
  /// their local shape when that is free (cutLocally), otherwise each rank
  /// slices out its block.
  Value reshardOperand(Value v, const Sharding &want) {
    Value gathered = reshard(v, want);
    if (current(gathered).dims == want.dims)
      return gathered;
    if (Value cut = cutLocally(gathered, want))
      return cut;
    Sharding have = current(gathered);
    for (size_t d = 0; d < want.dims.size(); ++d) {
      if (want.dims[d].empty() || have.dims[d] == want.dims[d])
        continue;
      have.dims[d] = want.dims[d];
      // A value cut so before is read again: the cut is local, and the
      // earlier one is no larger than what it was cut from, which would
      // otherwise live until here (and readers match: the loss gradient's
      // labels are the loss's).
      auto &cuts = slices_[{gathered, d}];
      auto made = llvm::find_if(cuts, [&](std::pair<Axes, Value> &c) {
        return c.first == want.dims[d] && c.second.getParentBlock() == b_.getInsertionBlock();
      });
      if (made != cuts.end()) {
        gathered = made->second;
        continue;
      }
      auto type = cast<RankedTensorType>(gathered.getType());
      SmallVector<int64_t> shape(type.getShape());
      shape[d] /= axesSize(want.dims[d]);
      Value cut = b_.create<mesh::AllSliceOp>(gathered.getLoc(), type.clone(shape),
                                              mesh_.getSymName(), want.dims[d], gathered,
                                              APInt(64, d));
      cuts.push_back({want.dims[d], cut});
      gathered = cut;
      shardings_[gathered] = have;
    }
    return gathered;
  }

  /// A whole value made again at its local shape from cut operands, when
  /// that is cheap and needs no data from other ranks: splat constants,
  /// broadcasts, elementwise ops and reshapes that keep the cut dims
  /// (the loss gradient spread over the batch). Null otherwise.
  Value cutLocally(Value whole, const Sharding &want, int depth = 0) {
    Operation *def = whole.getDefiningOp();
    if (!def || depth > 8 || !current(whole).replicated())
      return nullptr;
    auto type = cast<RankedTensorType>(localType(whole.getType(), want));
    ArrayRef<int64_t> shape = cast<ShapedType>(whole.getType()).getShape();
    // The operand's part: its dims aligned from the right, cut where they
    // have the same extent as the result's cut dims.
    auto operandPart = [&](Value operand) -> Value {
      ArrayRef<int64_t> in = cast<ShapedType>(operand.getType()).getShape();
      Sharding part{SmallVector<Axes, 4>(in.size())};
      size_t lead = shape.size() - in.size();
      for (size_t d = lead; d < shape.size(); ++d)
        if (in[d - lead] == shape[d])
          part.dims[d - lead] = want.dims[d];
      if (part.replicated())
        return operand;
      if (current(operand).dims == part.dims)
        return operand;
      return cutLocally(operand, part, depth + 1);
    };
    Value cut;
    if (auto constant = dyn_cast<graph::ConstantOp>(def)) {
      auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
      if (dense && dense.isSplat())
        cut = b_.create<graph::ConstantOp>(def->getLoc(),
                                           DenseElementsAttr::get(type, dense.getSplatValue<Attribute>()));
    } else if (auto broadcast = dyn_cast<graph::BroadcastOp>(def)) {
      if (Value input = operandPart(broadcast.getInput()))
        cut = b_.create<graph::BroadcastOp>(def->getLoc(), type, input,
                                            b_.getDenseI64ArrayAttr(type.getShape()));
    } else if (def->hasTrait<graph::GraphElementwise>() && def->getNumResults() == 1) {
      SmallVector<Value> operands;
      for (Value operand : def->getOperands())
        operands.push_back(operandPart(operand));
      if (!llvm::is_contained(operands, Value())) {
        Operation *clone = b_.clone(*def);
        clone->setOperands(operands);
        clone->getResult(0).setType(type);
        cut = clone->getResult(0);
      }
    } else if (auto reshape = dyn_cast<graph::ReshapeOp>(def)) {
      // Only when the cut dims lead both shapes unchanged ([B,S] -> [B,S,1]).
      ArrayRef<int64_t> in = cast<ShapedType>(reshape.getInput().getType()).getShape();
      Sharding part{SmallVector<Axes, 4>(in.size())};
      bool keeps = true;
      for (size_t d = 0; d < want.dims.size(); ++d)
        if (!want.dims[d].empty()) {
          keeps = keeps && d < in.size() && in[d] == shape[d];
          for (size_t e = 0; keeps && e < d; ++e)
            keeps = in[e] == shape[e];
          if (keeps)
            part.dims[d] = want.dims[d];
        }
      if (keeps)
        if (Value input = cutLocally(reshape.getInput(), part, depth + 1))
          cut = b_.create<graph::ReshapeOp>(def->getLoc(), type, input);
    }
    if (cut)
      shardings_[cut] = want;
    return cut;
  }

  /// A gather's or scatter-add's table axis (normalised); none for other ops.
  static std::optional<int64_t> gatherAxis(Operation *op) {
    auto axisOf = [](int64_t axis, Value table) {
      return axis < 0 ? axis + cast<ShapedType>(table.getType()).getRank() : axis;
    };
    if (auto g = dyn_cast<graph::GatherOp>(op))
      return axisOf(g.getAxis(), g.getData());
    if (auto s = dyn_cast<graph::ScatterAddOp>(op))
      return axisOf(s.getAxis(), s.getOutput());
    return std::nullopt;
  }

  /// `indices` with the negative ones counted from the end of `dim` rows,
  /// as a gather of the whole table reads them (skip_outside wraps none).
  Value wrapNegative(Location loc, Value indices, int64_t dim) {
    graph::WhereOp wrapped = wrapNegativeIds(b_, loc, indices, dim);
    for (Value v : {wrapped.getCond(), wrapped.getResult()})
      shardings_[v] = current(indices);
    return wrapped;
  }

  /// `indices` (local) less this rank's first row, where the last dim of
  /// `shape` (a loss's classes, a table's rows) is split over `axes` in
  /// blocks: an index in another block falls outside [0, block), where
  /// cross-entropy counts no class and a skip_outside gather takes zeros.
  Value shiftIndices(Location loc, Value indices, const Axes &axes, ArrayRef<int64_t> shape) {
    auto type = cast<RankedTensorType>(indices.getType());
    Type index = type.getElementType();
    int64_t parts = axesSize(axes);
    int64_t block = shape.back() / parts;
    SmallVector<APInt> firsts;
    for (int64_t k = 0; k < parts; ++k)
      firsts.push_back(APInt(index.getIntOrFloatBitWidth(), uint64_t(k * block), true));
    Value all = b_.create<graph::ConstantOp>(
        loc, DenseElementsAttr::get(RankedTensorType::get({parts}, index), firsts));
    Value first = b_.create<mesh::AllSliceOp>(loc, RankedTensorType::get({1}, index),
                                              mesh_.getSymName(), axes, all, APInt(64, 0));
    Value shifted = b_.create<graph::SubOp>(loc, type, indices, first);
    shardings_[shifted] = current(indices);
    return shifted;
  }

  /// Megatron's vocabulary-parallel loss: `local`, cross-entropy over this
  /// rank's block of classes (labels `shifted` to it), gave lse_k and, on
  /// the rank holding the row's label, loss_k = lse_k - x[label]. The row's
  /// lse is M + log(sum_k exp(lse_k - M)) with M = max_k lse_k, and its loss
  /// lse - x[label] = lse + sum_k [label in block k] (loss_k - lse_k); 0 for
  /// a label that is no class. Three all-reduces of a value per row, the
  /// last two side by side.
  LogicalResult combineClassSplit(graph::CrossEntropyOp op, Operation *local, Value labels,
                                  Value shifted, const Axes &axes) {
    Location loc = op.getLoc();
    Sharding rows = current(local->getResult(0));
    Value lossK = local->getResult(0), lseK = local->getResult(1);
    SmallVector<mesh::MeshAxis> meshAxes(axes.begin(), axes.end());
    auto reduce = [&](Value v, mesh::ReductionKind kind) -> Value {
      return b_.create<mesh::AllReduceOp>(loc, v, mesh_.getSymName(), meshAxes, kind);
    };
    auto index = [&](int64_t v) -> Value {
      auto t = RankedTensorType::get({}, cast<ShapedType>(labels.getType()).getElementType());
      return b_.create<graph::ConstantOp>(
          loc, DenseElementsAttr::get(t, APInt(t.getElementTypeBitWidth(), uint64_t(v), true)));
    };
    auto within = [&](Value v, int64_t end) -> Value { // 0 <= v < end
      return b_.create<graph::AndOp>(loc, b_.create<graph::GreaterEqualOp>(loc, v, index(0)),
                                     b_.create<graph::LessOp>(loc, v, index(end)));
    };
    auto zero = b_.create<graph::ConstantOp>(
        loc, DenseElementsAttr::get(RankedTensorType::get({}, b_.getF32Type()), 0.f));
    int64_t classes = cast<ShapedType>(op.getLogits().getType()).getShape().back();
    Value most = reduce(lseK, mesh::ReductionKind::Max);
    Value exps = b_.create<graph::ExpOp>(loc, b_.create<graph::SubOp>(loc, lseK, most));
    Value mine = b_.create<graph::WhereOp>(loc, within(shifted, classes / axesSize(axes)),
                                           b_.create<graph::SubOp>(loc, lossK, lseK), zero);
    // Side by side, the two sums go as one message (dtc-bucket-collectives).
    Value sum = reduce(exps, mesh::ReductionKind::Sum);
    Value picked = reduce(mine, mesh::ReductionKind::Sum); // -x[label]
    Value lse = b_.create<graph::AddOp>(loc, most, b_.create<graph::LogOp>(loc, sum));
    Value loss = b_.create<graph::WhereOp>(loc, within(labels, classes),
                                           b_.create<graph::AddOp>(loc, lse, picked), zero);
    // What was made here is split as the rows are (the scalars are whole).
    for (Operation *made = local->getNextNode(); made; made = made->getNextNode())
      for (Value r : made->getResults())
        if (rankOf(r) == rows.dims.size())
          shardings_[r] = rows;
    map_.map(op.getLoss(), loss);
    map_.map(op.getLse(), lse);
    return success();
  }

  Value combine(Value partial, ArrayRef<int16_t> axes, ShardingRule::Combine how) {
    using Combine = ShardingRule::Combine;
    mesh::ReductionKind kind = how == Combine::Max   ? mesh::ReductionKind::Max
                               : how == Combine::Min ? mesh::ReductionKind::Min
                                                     : mesh::ReductionKind::Sum;
    if (how == Combine::Mean) { // the sum of the parts' shares
      auto scalar = RankedTensorType::get({}, cast<ShapedType>(partial.getType()).getElementType());
      Value parts = b_.create<graph::ConstantOp>(
          partial.getLoc(), DenseElementsAttr::get(scalar, b_.getFloatAttr(scalar.getElementType(),
                                                                          double(axesSize(axes)))));
      partial = b_.create<graph::DivOp>(partial.getLoc(), partial, parts);
    }
    auto reduce = b_.create<mesh::AllReduceOp>(partial.getLoc(), partial, mesh_.getSymName(),
                                               SmallVector<mesh::MeshAxis>(axes), kind);
    if (Operation *def = partial.getDefiningOp(); def && def->hasAttr(attr::kWeightGradient))
      reduce->setAttr(attr::kGradientReduction, b_.getUnitAttr());
    return reduce;
  }

  /// Attributes that spell out a shape follow the local one.
  void localiseAttributes(Operation *op) {
    if (auto broadcast = dyn_cast<graph::BroadcastOp>(op))
      broadcast.setShape(cast<ShapedType>(broadcast.getType()).getShape());
    if (auto slice = dyn_cast<graph::SliceOp>(op))
      slice.setSizes(cast<ShapedType>(slice.getType()).getShape());
  }

public:
  /// How many cross-entropies were split over their classes.
  int classSplitLosses() const { return classSplitLosses_; }
  int splitTables() const { return splitTables_; }

private:
  int classSplitLosses_ = 0;
  int splitTables_ = 0; // gathers and scatter-adds over a block of rows
  func::FuncOp func_;
  mesh::MeshOp mesh_;
  OpBuilder b_;
  IRMapping map_;
  llvm::DenseMap<Value, Sharding> shardings_;
  /// The all_slices made of each (value, dim): the axes cut over, the cut.
  llvm::DenseMap<std::pair<Value, size_t>, SmallVector<std::pair<Axes, Value>, 1>> slices_;
};

struct SpmdPartition : impl::SpmdPartitionBase<SpmdPartition> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto mesh = module.lookupSymbol<mesh::MeshOp>("mesh");
    auto func = module.lookupSymbol<func::FuncOp>("main");
    if (!mesh || !func)
      return; // nothing to partition: a single-device module
    Partitioner partitioner(func, mesh);
    if (failed(partitioner.run()))
      return signalPassFailure();
    int collectives = 0;
    func.walk([&](Operation *op) {
      collectives += isa<mesh::MeshDialect>(op->getDialect()) && !isa<mesh::MeshOp>(op);
    });
    addNote(func, "partition: each rank runs its part of every op; " +
                      std::to_string(collectives) + " collectives inserted");
    if (int n = partitioner.classSplitLosses())
      addNote(func, "partition: " + std::string(n == 1 ? "the loss's" : "the losses'") +
                        " classes split across ranks (vocabulary-parallel cross-entropy, as "
                        "Megatron-LM's: each rank's block of the logits, its rows' log-sum-exps "
                        "and picked logits combined by three all-reduces of a value per row, "
                        "two of them side by side; no logits gathered)");
    if (int n = partitioner.splitTables())
      addNote(func, "partition: " + std::to_string(n) +
                        " gathers and scatter-adds over a block of a table's rows (a "
                        "vocabulary-parallel embedding, as Megatron-LM's: each rank looks its "
                        "ids up in its rows, zeros for the others', and the lookups add up; "
                        "the gradient lands in each rank's rows, no table gathered)");
  }
};

} // namespace
} // namespace dtc
