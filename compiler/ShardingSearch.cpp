//===- ShardingSearch.cpp - one split per op, by integer programming ------===//
#include "compiler/ShardingSearch.h"
#include "dialects/graph/AttrNames.h"

#include "compiler/PlanTypes.h"
#include "compiler/Sharding.h"
#include "compiler/search/StrategyIlp.h"
#include "cost/CostModel.h"
#include "dialects/graph/GraphOps.h"
#include "plan/FormatBytes.h"

#include "mlir/Dialect/Mesh/IR/MeshDialect.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/MapVector.h"

#include <chrono>
#include <limits>
#include <map>

using namespace mlir;

namespace dtc {
namespace {

using graph::ShardingRule;

/// One way to split a node: per factor, the mesh axes; what that makes of
/// its operands and results; and what it costs.
struct Strategy {
  SmallVector<MeshAxes> split;
  SmallVector<Sharding, 3> operands, results;
  MeshAxes partial; // axes of split reductions: the results are partial sums over them
  double compute = 0, communication = 0, memory = 0;
};

/// An op of `main`, or one of its arguments (a rule of one factor per dim).
struct Node {
  Operation *op = nullptr;
  Value argument;
  ShardingRule rule;
  SmallVector<bool> batchFactor;
  bool forward = true;   // the loss depends on it (or inference)
  bool parameter = false;
  bool dataInput = false;
  std::vector<Strategy> strategies;
  llvm::hash_code label = 0;

  ValueRange results() const { return op ? op->getResults() : ValueRange(argument); }
  bool hasBatch() const { return llvm::is_contained(batchFactor, true); }
};

int64_t elementBytes(Type type) {
  Type element = cast<ShapedType>(type).getElementType();
  return std::max<int64_t>(1, int64_t(element.getIntOrFloatBitWidth()) / 8);
}

class Search {
public:
  Search(ModuleOp module, func::FuncOp func, const SearchOptions &options)
      : module_(module), func_(func), options_(options) {
    for (const MeshAxisSpec &axis : options.mesh)
      planMesh_.add_axes()->set_size(axis.size);
  }

  /// Decides (without touching the IR); the predicted objective. Fails
  /// (with a diagnostic) when nothing costs less than `costBelow`.
  FailureOr<double> decide(double timeLimitSeconds,
                           double costBelow = std::numeric_limits<double>::infinity()) {
    if (failed(checkPins()))
      return failure();
    buildNodes();
    markBatch();
    for (Node &node : nodes_)
      if (failed(enumerate(node)))
        return failure();
    costNodes();
    label();
    FailureOr<search::StrategySolution> solution = solve(timeLimitSeconds, costBelow);
    if (failed(solution))
      return failure();
    return solution->cost;
  }

  /// Writes the decision into the IR.
  SearchResult annotate() {
    OpBuilder b(module_.getContext());
    module_.getContext()->loadDialect<mesh::MeshDialect>();
    b.setInsertionPointToStart(module_.getBody());
    SmallVector<int64_t> shape;
    SmallVector<Attribute> names;
    for (const MeshAxisSpec &axis : options_.mesh) {
      shape.push_back(axis.size);
      names.push_back(b.getStringAttr(axis.name));
    }
    b.create<mesh::MeshOp>(module_.getLoc(), "mesh", shape);
    module_->setAttr(attr::kMeshAxisNames, b.getArrayAttr(names));
    std::vector<bool> used(options_.mesh.size(), false);
    for (auto [n, node] : llvm::enumerate(nodes_)) {
      const Strategy &s = node.strategies[size_t(choice_[n])];
      for (const MeshAxes &axes : s.split)
        for (int16_t a : axes)
          used[size_t(a)] = true;
      if (node.parameter) {
        ++result_.parameters;
        result_.splitParameters += !s.results[0].replicated();
      }
      if (node.op) {
        if (isa<graph::ShardableOp>(node.op))
          writeSplit(node.op, s.split);
        continue;
      }
      func_.setArgAttr(cast<BlockArgument>(node.argument).getArgNumber(), attr::kSharding,
                       shardingAttr(b, s.results[0]));
    }
    for (auto [a, axis] : llvm::enumerate(options_.mesh)) {
      if (used[a])
        continue;
      std::string why = "splitting was predicted not to pay";
      for (const Node &node : nodes_)
        if (node.dataInput) {
          int64_t batch = cast<ShapedType>(node.argument.getType()).getDimSize(0);
          if (batch % axis.size != 0)
            why = "the batch of " + std::to_string(batch) + " does not divide by " +
                  std::to_string(axis.size) + ", and nothing else was worth splitting";
        }
      result_.idleAxes.push_back(axis.name + " (" + why + ")");
    }
    return result_;
  }

  static constexpr double kTimeLimitSeconds = 60;

private:
  //===--------------------------------------------------------------------===//
  // The graph as nodes
  //===--------------------------------------------------------------------===//

  LogicalResult checkPins() {
    // A data axis must split every input's batch evenly.
    for (const MeshAxisSpec &axis : options_.mesh) {
      if (axis.role != AxisRole::Data)
        continue;
      for (unsigned i = 0; i < func_.getNumArguments(); ++i) {
        auto type = cast<RankedTensorType>(func_.getArgument(i).getType());
        if (type.getRank() == 0 || type.getDimSize(0) % axis.size == 0)
          continue;
        auto name = func_.getArgAttrOfType<StringAttr>(i, attr::kName);
        return func_.emitError() << "--" << axis.name << " " << axis.size << ": input '"
                                 << (name ? name.getValue() : "") << "' has batch "
                                 << type.getDimSize(0) << ", which " << axis.size
                                 << " ranks cannot split evenly";
      }
    }
    bool data = llvm::any_of(options_.mesh, [](auto &a) { return a.role == AxisRole::Data; });
    if (options_.zero > 0 && !data)
      return func_.emitError() << "--zero " << options_.zero
                               << " shards optimizer state over the data-parallel ranks: "
                                  "give --dp as well";
    return success();
  }

  void buildNodes() {
    Block &block = func_.getBody().front();
    for (BlockArgument arg : block.getArguments()) {
      Node node;
      node.argument = arg;
      auto shape = cast<ShapedType>(arg.getType()).getShape();
      ShardingRule::Dims dims;
      for (int64_t size : shape)
        dims.push_back({node.rule.add(size)});
      node.rule.results.push_back(dims);
      node.dataInput = !shape.empty();
      add(std::move(node));
    }
    for (Operation &op : block.without_terminator()) {
      Node node;
      node.op = &op;
      if (auto shardable = dyn_cast<graph::ShardableOp>(&op))
        node.rule = shardable.shardingRule();
      node.parameter = isa<graph::ParameterOp>(op);
      add(std::move(node));
    }
    // The forward: what the loss (the first result of a training step)
    // depends on. Inference is all forward.
    Operation *ret = block.getTerminator();
    lossPosition_ = block.getOperations().size();
    if (!options_.training)
      return;
    for (Node &node : nodes_)
      node.forward = false;
    SmallVector<Value> work{ret->getOperand(0)};
    if (Operation *loss = ret->getOperand(0).getDefiningOp())
      lossPosition_ = position(loss);
    while (!work.empty()) {
      Value v = work.pop_back_val();
      Node &node = nodes_[nodeOf(v)];
      if (node.forward)
        continue;
      node.forward = true;
      if (node.op)
        llvm::append_range(work, node.op->getOperands());
    }
  }

  void add(Node node) {
    for (auto [i, r] : llvm::enumerate(node.results()))
      nodeOfValue_[r] = {int(nodes_.size()), int(i)};
    if (node.op) {
      positions_[node.op] = positions_.size();
      nodeOfOp_[node.op] = int(nodes_.size());
    }
    nodes_.push_back(std::move(node));
  }

  int nodeOf(Value v) const { return nodeOfValue_.lookup(v).first; }
  int resultIndex(Value v) const { return nodeOfValue_.lookup(v).second; }
  /// Program order; the terminator (not a node) comes last.
  size_t position(Operation *op) const {
    auto it = positions_.find(op);
    return it == positions_.end() ? positions_.size() : it->second;
  }

  /// The batch: dim 0 of every data input, and every factor that leads a
  /// dim made from it. Data axes split only these; tensor axes never do.
  void markBatch() {
    llvm::DenseMap<Value, SmallVector<bool, 4>> batchDims;
    for (Node &node : nodes_) {
      node.batchFactor.assign(node.rule.factors.size(), false);
      if (!node.op) {
        if (node.dataInput)
          node.batchFactor[0] = true;
      } else {
        for (auto [i, operand] : llvm::enumerate(node.op->getOperands())) {
          auto it = batchDims.find(operand);
          if (it == batchDims.end() || i >= node.rule.operands.size())
            continue;
          for (auto [d, factors] : llvm::enumerate(node.rule.operands[i]))
            if (d < it->second.size() && it->second[d])
              for (int f : factors)
                node.batchFactor[size_t(f)] = true;
        }
      }
      for (auto [j, result] : llvm::enumerate(node.results())) {
        if (j >= node.rule.results.size())
          continue;
        SmallVector<bool, 4> dims;
        for (const auto &factors : node.rule.results[j]) {
          int f = leadingFactor(node.rule, factors);
          dims.push_back(f >= 0 && node.batchFactor[size_t(f)]);
        }
        if (llvm::is_contained(dims, true))
          batchDims[result] = dims;
      }
    }
  }

  /// Whether mesh axis `axis` may split factor `f` of `node`.
  bool allowed(const Node &node, size_t axis, int f) const {
    switch (options_.mesh[axis].role) {
    case AxisRole::Free:
      return true;
    case AxisRole::Tensor:
      return !node.batchFactor[size_t(f)] && !node.dataInput;
    case AxisRole::Data:
      if (node.batchFactor[size_t(f)])
        return true;
      // ZeRO: what has no batch is split over the data ranks only as the
      // optimizer's state and updates (stage 1-2) or the weights (stage 3).
      if (node.hasBatch() || node.dataInput)
        return false;
      return node.forward ? (options_.zero == 3 || options_.zero < 0) : options_.zero != 0;
    }
    return false;
  }

  int64_t axesSize(ArrayRef<int16_t> axes) const {
    int64_t n = 1;
    for (int16_t a : axes)
      n *= options_.mesh[size_t(a)].size;
    return n;
  }

  /// Every split of the node's factors: each mesh axis splits at most one
  /// factor, which must divide evenly.
  LogicalResult enumerate(Node &node) {
    const ShardingRule &rule = node.rule;
    size_t axes = options_.mesh.size();
    SmallVector<SmallVector<int, 6>> choices(axes);
    for (size_t a = 0; a < axes; ++a) {
      choices[a].push_back(-1);
      if (node.op && !isa<graph::ShardableOp>(node.op))
        continue;
      for (int f = 0; f < int(rule.factors.size()); ++f)
        if (splittable(rule, f) && allowed(node, a, f))
          choices[a].push_back(f);
    }
    // Pins demand what they can: a split the mesh cannot make (a bias of
    // 10 over 4 ranks) leaves that value whole rather than failing.
    for (bool demand : {true, false}) {
      enumerateSplits(node, choices, demand);
      if (!node.strategies.empty())
        break;
    }
    if (node.strategies.empty())
      return (node.op ? node.op->emitError() : func_.emitError())
             << "no split of this value meets the pinned mesh (" << meshText() << ")";
    return success();
  }

  void enumerateSplits(Node &node, ArrayRef<SmallVector<int, 6>> choices, bool demand) {
    const ShardingRule &rule = node.rule;
    size_t axes = options_.mesh.size();
    SmallVector<int, 4> pick(axes, 0);
    while (true) {
      SmallVector<MeshAxes> split(rule.factors.size());
      for (size_t a = 0; a < axes; ++a)
        if (choices[a][size_t(pick[a])] >= 0)
          split[size_t(choices[a][size_t(pick[a])])].push_back(int16_t(a));
      bool even = true;
      for (auto [f, factor] : llvm::enumerate(rule.factors))
        even = even && factor.size % axesSize(split[f]) == 0;
      if (even && (!demand || meetsPins(node, split)))
        node.strategies.push_back(makeStrategy(node, std::move(split)));
      size_t a = 0;
      while (a < axes && ++pick[a] == int(choices[a].size()))
        pick[a++] = 0;
      if (a == axes)
        break;
    }
  }

  /// Pins that demand a split over the data axes: whatever carries the
  /// batch splits it (data parallelism); with --zero 1..3 the optimizer
  /// state (and stage 3, the weights) are split too.
  bool meetsPins(const Node &node, ArrayRef<MeshAxes> split) const {
    for (size_t a = 0; a < options_.mesh.size(); ++a) {
      if (options_.mesh[a].role != AxisRole::Data)
        continue;
      bool used = false;
      for (auto [f, axes] : llvm::enumerate(split))
        used = used || (llvm::is_contained(axes, int16_t(a)) &&
                        (node.batchFactor[f] || !node.hasBatch()));
      bool demanded = node.hasBatch() ||
                      (node.parameter && !node.forward && options_.zero >= 1) ||
                      (node.parameter && node.forward && options_.zero == 3);
      if (demanded && !used)
        return false;
    }
    return true;
  }

  Strategy makeStrategy(const Node &node, SmallVector<MeshAxes> split) {
    Strategy s;
    for (const auto &dims : node.rule.operands)
      s.operands.push_back(shardingOf(node.rule, dims, split));
    for (const auto &dims : node.rule.results)
      s.results.push_back(shardingOf(node.rule, dims, split));
    for (auto [f, factor] : llvm::enumerate(node.rule.factors))
      if (factor.reduction)
        s.partial.append(split[f].begin(), split[f].end());
    llvm::sort(s.partial);
    s.split = std::move(split);
    return s;
  }

  //===--------------------------------------------------------------------===//
  // Costs
  //===--------------------------------------------------------------------===//

  double localBytes(Value v, const Sharding &s) const {
    auto type = cast<ShapedType>(v.getType());
    double n = double(elementBytes(type));
    for (auto [d, size] : llvm::enumerate(type.getShape()))
      n *= double(size) / double(d < s.dims.size() ? axesSize(s.dims[d]) : 1);
    return n;
  }

  /// v's type on one rank under sharding s (its local shape).
  plan::TensorType localType(Value v, const Sharding &s) const {
    auto type = cast<ShapedType>(v.getType());
    plan::TensorType t;
    for (auto [d, size] : llvm::enumerate(type.getShape()))
      t.add_shape(size / (d < s.dims.size() ? axesSize(s.dims[d]) : 1));
    return t;
  }

  /// A resharding collective's local copies (cost::relayoutSeconds, as the
  /// simulator counts them): from v under `from` to v under `to`.
  double relayoutSeconds(plan::CollectiveKind kind, int64_t axis, int64_t concatAxis, Value v,
                         const Sharding &from, const Sharding &to) const {
    plan::Collective c;
    c.set_kind(kind);
    c.set_axis(axis);
    c.set_concat_axis(concatAxis);
    plan::TensorType in = localType(v, from), out = localType(v, to);
    return cost::relayoutSeconds(c, localBytes(v, from), localBytes(v, to), &in, &out,
                                 options_.cluster.device);
  }

  const cost::Link &link(ArrayRef<int16_t> axes) const {
    plan::Collective c;
    for (int16_t a : axes)
      c.add_mesh_axes(uint32_t(a));
    cost::CollectiveGroup group =
        cost::collectiveGroup(planMesh_, c, options_.cluster.devicesPerNode);
    return group.withinNode ? options_.cluster.intraNode : options_.cluster.interNode;
  }

  double copySeconds(double bytes) const {
    plan::Cost c;
    c.set_bytes(bytes);
    c.set_op_class(plan::OP_DATA_MOVEMENT);
    c.set_dtype(plan::F32);
    return cost::instructionSeconds(c, options_.cluster.device);
  }

  /// What making `have` into `want` costs: all-gathers of dims split where
  /// they should not be, then a local slice of those to be cut. A partial
  /// result was reduce-scattered by its op (half an all-reduce); a reader
  /// that wants it whole pays the all-gather half, one that wants a dim
  /// split over the same axes nothing more.
  double reshardSeconds(Value v, const Sharding &have, const Sharding &want,
                        ArrayRef<int16_t> partial = {}) const {
    double seconds = 0;
    Sharding current = have;
    if (!partial.empty()) {
      bool scattered = false;
      for (size_t d = 0; d < current.dims.size() && !scattered; ++d) {
        MeshAxes sorted = want.dims[d];
        llvm::sort(sorted);
        if (current.dims[d].empty() && sorted == MeshAxes(partial) &&
            cast<ShapedType>(v.getType()).getDimSize(int64_t(d)) % axesSize(partial) == 0) {
          current.dims[d] = want.dims[d];
          scattered = true;
        }
      }
      if (!scattered)
        seconds += cost::collectiveSeconds(cost::Collective::AllGather, cost::Algorithm::Ring,
                                           axesSize(partial), localBytes(v, current),
                                           link(partial));
    }
    if (current == want)
      return seconds;
    for (size_t d = 0; d < current.dims.size(); ++d)
      if (!current.dims[d].empty() && current.dims[d] != want.dims[d]) {
        int64_t ranks = axesSize(current.dims[d]);
        MeshAxes axes = current.dims[d];
        // Moved by one all-to-all to a whole dim that wants these axes (as
        // the partitioner does).
        auto shape = cast<ShapedType>(v.getType()).getShape();
        std::optional<size_t> target;
        for (size_t e = 0; e < current.dims.size() && want.dims[d].empty() && !target; ++e)
          if (e != d && current.dims[e].empty() && want.dims[e] == axes && shape[e] % ranks == 0)
            target = e;
        if (target) {
          Sharding before = current;
          seconds += cost::collectiveSeconds(cost::Collective::AllToAll, cost::Algorithm::Ring,
                                             ranks, localBytes(v, current), link(axes));
          current.dims[*target] = axes;
          current.dims[d].clear();
          // Split along the target dim on the way out, joined along d.
          seconds += relayoutSeconds(plan::ALL_TO_ALL, int64_t(*target), int64_t(d), v, before,
                                     current);
          continue;
        }
        Sharding before = current;
        current.dims[d].clear();
        seconds += cost::collectiveSeconds(cost::Collective::AllGather, cost::Algorithm::Ring,
                                           ranks, localBytes(v, current), link(axes)) +
                   relayoutSeconds(plan::ALL_GATHER, int64_t(d), 0, v, before, current);
      }
    for (size_t d = 0; d < current.dims.size(); ++d)
      if (!want.dims[d].empty() && current.dims[d] != want.dims[d]) {
        seconds += copySeconds(localBytes(v, current));
        current.dims[d] = want.dims[d];
      }
    return seconds;
  }

  void costNodes() {
    const cost::Device &device = options_.cluster.device;
    for (Node &node : nodes_) {
      // Values kept from the forward for the backward count as memory.
      SmallVector<bool, 2> kept;
      for (Value r : node.results())
        kept.push_back(node.op && node.forward && !node.parameter &&
                       position(node.op) < lossPosition_ &&
                       llvm::any_of(r.getUsers(), [&](Operation *user) {
                         return position(user) > lossPosition_;
                       }));
      for (Strategy &s : node.strategies) {
        for (auto [j, r] : llvm::enumerate(node.results()))
          if (!node.op || node.parameter || kept[j])
            s.memory += localBytes(r, s.results[j]);
        if (!node.op)
          continue;
        auto costed = dyn_cast<graph::CostOp>(node.op);
        graph::OpCost opCost = costed ? costed.cost() : graph::OpCost{};
        if (opCost.opClass != graph::OpCost::Free) {
          double parts = 1, bytes = 0;
          for (const MeshAxes &axes : s.split)
            parts *= double(axesSize(axes));
          for (auto [i, operand] : llvm::enumerate(node.op->getOperands()))
            bytes += i < s.operands.size() ? localBytes(operand, s.operands[i]) : 0;
          for (auto [j, r] : llvm::enumerate(node.op->getResults()))
            bytes += localBytes(r, s.results[j]);
          plan::Cost c = planCost(opCost, node.op->getResult(0));
          c.set_flops(opCost.flops / parts);
          c.set_bytes(bytes);
          s.compute = cost::instructionSeconds(c, device);
        }
        // Split reductions leave partial results: their reduce-scatter
        // half here, the all-gather half on the edges that need it whole.
        if (!s.partial.empty())
          for (auto [j, r] : llvm::enumerate(node.op->getResults()))
            s.communication += cost::collectiveSeconds(
                cost::Collective::ReduceScatter, cost::Algorithm::Ring, axesSize(s.partial),
                localBytes(r, s.results[j]), link(s.partial));
      }
    }
  }

  //===--------------------------------------------------------------------===//
  // Tying alike ops, and the integer program
  //===--------------------------------------------------------------------===//

  /// Weisfeiler-Lehman labels: an op's kind, types and attributes (not its
  /// name), refined by its neighbours' labels a few hops out. Ops at the
  /// same place in every layer get the same label and share a decision.
  void label() {
    for (Node &node : nodes_) {
      llvm::hash_code h = llvm::hash_combine(node.forward, node.parameter, node.dataInput,
                                             node.strategies.size());
      for (bool b : node.batchFactor)
        h = llvm::hash_combine(h, b);
      if (!node.op) {
        h = llvm::hash_combine(h, node.argument.getType().getAsOpaquePointer(),
                               cast<BlockArgument>(node.argument).getArgNumber());
      } else {
        h = llvm::hash_combine(h, node.op->getName().getAsOpaquePointer());
        for (Type t : node.op->getResultTypes())
          h = llvm::hash_combine(h, t.getAsOpaquePointer());
        for (Value v : node.op->getOperands())
          h = llvm::hash_combine(h, v.getType().getAsOpaquePointer());
        for (NamedAttribute attr : node.op->getAttrs())
          if (attr.getName() != "name")
            h = llvm::hash_combine(h, attr.getName().getAsOpaquePointer(),
                                   attr.getValue().getAsOpaquePointer());
      }
      node.label = h;
    }
    for (int round = 0; round < kRounds; ++round) {
      std::vector<llvm::hash_code> next(nodes_.size());
      for (auto [n, node] : llvm::enumerate(nodes_)) {
        llvm::hash_code h = node.label;
        if (node.op)
          for (Value v : node.op->getOperands())
            h = llvm::hash_combine(h, size_t(nodes_[size_t(nodeOf(v))].label), resultIndex(v));
        SmallVector<size_t, 8> users;
        for (Value r : node.results())
          for (OpOperand &use : r.getUses()) {
            // Returned: which result it is does not matter (each update is
            // its own result).
            auto it = nodeOfOp_.find(use.getOwner());
            if (it == nodeOfOp_.end()) {
              users.push_back(0);
              continue;
            }
            size_t label = size_t(nodes_[size_t(it->second)].label);
            users.push_back(size_t(llvm::hash_combine(label, use.getOperandNumber())));
          }
        llvm::sort(users);
        for (size_t u : users)
          h = llvm::hash_combine(h, u);
        next[n] = h;
      }
      for (auto [n, node] : llvm::enumerate(nodes_))
        node.label = next[n];
    }
  }

  FailureOr<search::StrategySolution> solve(double timeLimitSeconds, double costBelow) {
    // Groups in order of first appearance (deterministic).
    llvm::DenseMap<size_t, int> groupOfLabel;
    groupOf_.resize(nodes_.size());
    for (auto [n, node] : llvm::enumerate(nodes_)) {
      auto [it, fresh] = groupOfLabel.try_emplace(size_t(node.label), int(groups_.size()));
      if (fresh)
        groups_.push_back(int(n));
      groupOf_[n] = it->second;
    }
    search::StrategyProblem problem;
    problem.nodes.resize(groups_.size());
    search::StrategyProblem::Resource memory;
    memory.name = "memory";
    memory.limit = options_.memoryLimit;
    memory.use.resize(groups_.size());
    for (auto [g, first] : llvm::enumerate(groups_)) {
      size_t count = nodes_[size_t(first)].strategies.size();
      problem.nodes[g].cost.assign(count, 0);
      memory.use[g].assign(count, 0);
    }
    for (auto [n, node] : llvm::enumerate(nodes_)) {
      int g = groupOf_[n];
      for (auto [s, strategy] : llvm::enumerate(node.strategies)) {
        // Among equally fast splits, the one that keeps less memory.
        problem.nodes[size_t(g)].cost[s] +=
            strategy.compute + strategy.communication + strategy.memory * kSecondsPerByteKept;
        memory.use[size_t(g)][s] += strategy.memory;
      }
    }
    problem.resources.push_back(std::move(memory));

    // Edges: operand uses, and updates that must end split as their
    // parameter is. Alike edges between the same groups are costed once.
    std::map<std::tuple<int, int, int, int>, std::pair<std::vector<double>, int>> edges;
    auto addEdge = [&](int from, int resultIdx, int to, int operandIdx, Value v,
                       const std::function<const Sharding &(const Strategy &)> &want) {
      int gu = groupOf_[size_t(from)], gv = groupOf_[size_t(to)];
      const Node &u = nodes_[size_t(from)], &w = nodes_[size_t(to)];
      auto key = std::make_tuple(gu, resultIdx, gv, operandIdx);
      auto [it, fresh] = edges.try_emplace(key);
      ++it->second.second;
      if (!fresh)
        return;
      std::vector<double> &m = it->second.first;
      m.resize(u.strategies.size() * w.strategies.size());
      for (auto [s, su] : llvm::enumerate(u.strategies))
        for (auto [t, sv] : llvm::enumerate(w.strategies))
          m[s * w.strategies.size() + t] =
              reshardSeconds(v, su.results[size_t(resultIdx)], want(sv), su.partial);
    };
    Block &block = func_.getBody().front();
    for (auto [n, node] : llvm::enumerate(nodes_)) {
      if (!node.op)
        continue;
      for (auto [i, v] : llvm::enumerate(node.op->getOperands()))
        if (i < node.rule.operands.size())
          addEdge(nodeOf(v), resultIndex(v), int(n), int(i), v,
                  [i = i](const Strategy &s) -> const Sharding & { return s.operands[i]; });
    }
    llvm::StringMap<int> parameterNode;
    for (auto [n, node] : llvm::enumerate(nodes_))
      if (node.parameter)
        parameterNode[cast<graph::ParameterOp>(node.op).getName()] = int(n);
    for (auto [i, v] : llvm::enumerate(block.getTerminator()->getOperands())) {
      auto name = func_.getResultAttrOfType<StringAttr>(unsigned(i), attr::kUpdates);
      auto it = name ? parameterNode.find(name.getValue()) : parameterNode.end();
      if (it != parameterNode.end()) {
        addEdge(nodeOf(v), resultIndex(v), it->second, -1 - int(i), v,
                [](const Strategy &s) -> const Sharding & { return s.results[0]; });
        continue;
      }
      // Whole on every rank.
      Node &u = nodes_[size_t(nodeOf(v))];
      Sharding whole{SmallVector<MeshAxes, 4>(size_t(cast<ShapedType>(v.getType()).getRank()))};
      for (auto [s, su] : llvm::enumerate(u.strategies))
        problem.nodes[size_t(groupOf_[size_t(nodeOf(v))])].cost[s] +=
            reshardSeconds(v, su.results[size_t(resultIndex(v))], whole, su.partial);
    }
    for (auto &[key, entry] : edges) {
      auto [gu, resultIdx, gv, operandIdx] = key;
      auto &[matrix, count] = entry;
      for (double &c : matrix)
        c *= count;
      size_t columns = nodes_[size_t(groups_[size_t(gv)])].strategies.size();
      if (gu == gv) { // both ends decided together
        for (size_t s = 0; s < columns; ++s)
          problem.nodes[size_t(gu)].cost[s] += matrix[s * columns + s];
        continue;
      }
      problem.edges.push_back({gu, gv, std::move(matrix)});
    }

    search::StrategySolution solution =
        search::solveStrategies(problem, timeLimitSeconds, costBelow);
    result_.ops = int(nodes_.size());
    result_.decisions = int(groups_.size());
    result_.variables = solution.variables;
    result_.constraints = solution.constraints;
    result_.eliminated = solution.eliminated;
    result_.optimal = solution.optimal;
    if (!solution.feasible) {
      double smallest = solution.minimumUse.empty() ? 0 : solution.minimumUse[0];
      if (smallest > options_.memoryLimit)
        return func_.emitError() << "no sharding over mesh " << meshText() << " fits "
                                 << plan::formatBytes(int64_t(options_.memoryLimit))
                                 << " per device: the smallest any sharding needs is "
                                 << plan::formatBytes(int64_t(smallest))
                                 << (options_.training
                                         ? " (weights, optimizer state, inputs and activations "
                                           "kept for backward)"
                                         : " (weights and inputs)")
                                 << "; use more devices or a larger --memory-limit";
      return func_.emitError() << "the sharding search found no plan: " << solution.message;
    }
    choice_.resize(nodes_.size());
    for (size_t n = 0; n < nodes_.size(); ++n)
      choice_[n] = solution.choice[size_t(groupOf_[n])];
    for (auto [n, node] : llvm::enumerate(nodes_)) {
      const Strategy &s = node.strategies[size_t(choice_[n])];
      result_.computeSeconds += s.compute;
      result_.communicationSeconds += s.communication;
      result_.memoryBytes += s.memory;
    }
    result_.communicationSeconds = std::max(
        0.0, solution.cost - result_.computeSeconds - result_.memoryBytes * kSecondsPerByteKept);
    return solution;
  }

  std::string meshText() const {
    std::string text;
    for (const MeshAxisSpec &axis : options_.mesh)
      text += (text.empty() ? "" : " x ") + axis.name + "=" + std::to_string(axis.size);
    return text;
  }

  static constexpr int kRounds = 6;
  /// The tie-break: a gigabyte kept counts as a microsecond.
  static constexpr double kSecondsPerByteKept = 1e-15;

  ModuleOp module_;
  func::FuncOp func_;
  const SearchOptions &options_;
  plan::Mesh planMesh_;
  std::vector<Node> nodes_;
  llvm::DenseMap<Value, std::pair<int, int>> nodeOfValue_;
  llvm::DenseMap<Operation *, size_t> positions_;
  llvm::DenseMap<Operation *, int> nodeOfOp_;
  size_t lossPosition_ = 0;
  std::vector<int> groups_, groupOf_, choice_;
  SearchResult result_;
};

} // namespace

FailureOr<SearchResult> searchShardings(ModuleOp module, func::FuncOp func,
                                        const SearchOptions &options) {
  auto start = std::chrono::steady_clock::now();
  // Several free axes: the unrestricted program is too large for CBC's LP
  // to solve in seconds (its first relaxation alone ignores time limits), so
  // the search tries each way of giving the free axes data and tensor roles
  // (data x tensor, tensor x data, ...; ZeRO, sequence parallelism and which
  // weights split still searched) and keeps the cheapest. Every pinned
  // dp x tp plan on the mesh is among them, so the searched plan is never
  // predicted slower than a pinned one.
  std::vector<SearchOptions> candidates;
  std::vector<size_t> free;
  for (size_t a = 0; a < options.mesh.size(); ++a)
    if (options.mesh[a].role == AxisRole::Free)
      free.push_back(a);
  if (free.size() > 1)
    for (unsigned roles = 1; roles + 1 < (1u << free.size()); ++roles) {
      SearchOptions pinned = options;
      for (auto [i, a] : llvm::enumerate(free))
        pinned.mesh[a].role = (roles >> i) & 1 ? AxisRole::Tensor : AxisRole::Data;
      candidates.push_back(pinned);
    }
  // The most data-parallel first: usually the cheapest, and each later one
  // only has to beat the best so far, which CBC's bound often rules out
  // right after the relaxation (a GPT-3 step on 128x8: 0.3 s, not 2).
  auto tensorRanks = [](const SearchOptions &o) {
    int64_t n = 1;
    for (const MeshAxisSpec &axis : o.mesh)
      n *= axis.role == AxisRole::Tensor ? axis.size : 1;
    return n;
  };
  // Stable, by index (std::stable_sort's buffer is deprecated in C++17's
  // libstdc++ under clang).
  std::vector<std::pair<int64_t, size_t>> order;
  for (size_t i = 0; i < candidates.size(); ++i)
    order.push_back({tensorRanks(candidates[i]), i});
  llvm::sort(order);
  std::vector<SearchOptions> sorted;
  for (auto [ranks, i] : order)
    sorted.push_back(std::move(candidates[i]));
  candidates = std::move(sorted);
  std::unique_ptr<Search> best;
  double bestCost = std::numeric_limits<double>::infinity();
  for (const SearchOptions &candidate : candidates) {
    auto search = std::make_unique<Search>(module, func, candidate);
    // A role assignment that cannot work (or win) is no error, just no candidate.
    ScopedDiagnosticHandler quiet(module.getContext(), [](Diagnostic &) { return success(); });
    FailureOr<double> cost = search->decide(Search::kTimeLimitSeconds, bestCost);
    if (succeeded(cost) && *cost < bestCost) {
      best = std::move(search);
      bestCost = *cost;
    }
  }
  if (!best) { // one free axis, or no role assignment works: the whole program
    best = std::make_unique<Search>(module, func, options);
    if (failed(best->decide(Search::kTimeLimitSeconds)))
      return failure();
  }
  SearchResult result = best->annotate();
  result.searchSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

} // namespace dtc
