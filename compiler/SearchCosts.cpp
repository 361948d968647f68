//===- SearchCosts.cpp - what splits and reshardings cost -------------------===//
#include "compiler/MicroBatches.h"
#include "compiler/MixedPrecision.h"
#include "compiler/SearchGraph.h"
#include "compiler/PlanTypes.h"
#include "dialects/graph/AttrNames.h"

#include "llvm/ADT/StringMap.h"

namespace dtc::search {

double Search::localBytes(Value v, const Sharding &s) const {
  auto type = cast<ShapedType>(v.getType());
  double n = double(elementBytes(type));
  for (auto [d, size] : llvm::enumerate(type.getShape()))
    n *= double(size) / double(d < s.dims.size() ? axesSize(s.dims[d]) : 1);
  return n;
}

plan::TensorType Search::localType(Value v, const Sharding &s) const {
  auto type = cast<ShapedType>(v.getType());
  plan::TensorType t;
  for (auto [d, size] : llvm::enumerate(type.getShape()))
    t.add_shape(size / (d < s.dims.size() ? axesSize(s.dims[d]) : 1));
  return t;
}

double Search::relayoutSeconds(plan::CollectiveKind kind, int64_t axis, int64_t concatAxis, Value v,
                               const Sharding &from, const Sharding &to) const {
  plan::Collective c;
  c.set_kind(kind);
  c.set_axis(axis);
  c.set_concat_axis(concatAxis);
  plan::TensorType in = localType(v, from), out = localType(v, to);
  return cost::relayoutSeconds(c, localBytes(v, from), localBytes(v, to), &in, &out,
                               options_.cluster.device);
}

const cost::Link &Search::link(ArrayRef<int16_t> axes) const {
  plan::Collective c;
  for (int16_t a : axes)
    c.add_mesh_axes(uint32_t(a));
  cost::CollectiveGroup group =
      cost::collectiveGroup(planMesh_, c, options_.cluster.devicesPerNode);
  return group.withinNode ? options_.cluster.intraNode : options_.cluster.interNode;
}

bool Search::bucketed(Value v) const {
  Operation *def = v.getDefiningOp();
  return options_.buckets && def && def->hasAttr(attr::kWeightGradient);
}

double Search::stagingSeconds(double startUp, double in, double out) const {
  const cost::Device &device = options_.cluster.device;
  if (startUp >= 1 || !device.packsStridedParts)
    return 0;
  return device.streamSeconds(2 * (in + out)) / device.memoryEfficiency;
}

cost::Link Search::linkFor(double startUp, ArrayRef<int16_t> axes) const {
  cost::Link l = link(axes);
  if (startUp >= 1)
    return l;
  l.latency *= startUp;
  for (cost::Protocol &p : l.protocols)
    p.latency *= startUp;
  return l;
}

double Search::copySeconds(double bytes) const {
  plan::Cost c;
  c.set_bytes(bytes);
  c.set_op_class(plan::OP_DATA_MOVEMENT);
  c.set_dtype(plan::F32);
  return cost::instructionSeconds(c, options_.cluster.device);
}

double Search::reshardSeconds(Value v, const Sharding &have, const Sharding &want,
                              ArrayRef<int16_t> partial, double startUp) const {
  if (bucketed(v))
    startUp = 0;
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
                                         linkFor(startUp, partial)) +
                 stagingSeconds(startUp, localBytes(v, current) / double(axesSize(partial)),
                                localBytes(v, current));
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
                                           ranks, localBytes(v, current), linkFor(startUp, axes));
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
                                         ranks, localBytes(v, current), linkFor(startUp, axes)) +
                 relayoutSeconds(plan::ALL_GATHER, int64_t(d), 0, v, before, current);
    }
  for (size_t d = 0; d < current.dims.size(); ++d)
    if (!want.dims[d].empty() && current.dims[d] != want.dims[d]) {
      seconds += copySeconds(localBytes(v, current));
      current.dims[d] = want.dims[d];
    }
  return seconds;
}

double Search::unfusedSeconds(const Node &reader, size_t operand, Value v, const Strategy &su,
                              int resultIdx, const Sharding &want) const {
  if (operand >= reader.fusedOperands.size() || !reader.fusedOperands[operand] ||
      v.getDefiningOp<graph::ParameterOp>() || // a weight's bf16 copy: the optimizer's write
      (su.partial.empty() && su.results[size_t(resultIdx)] == want))
    return 0;
  plan::Cost c;
  c.set_bytes((reader.epilogue ? 3 : 2) * localBytes(v, want));
  c.set_op_class(plan::OP_ELEMENTWISE);
  c.set_dtype(plan::F32);
  return reader.runs * cost::instructionSeconds(c, options_.cluster.device, -1, reader.epilogue);
}

double Search::partialSeconds(Value v, const Sharding &have, ArrayRef<int16_t> partial,
                              double startUp) const {
  if (bucketed(v))
    startUp = 0;
  double bytes = localBytes(v, have);
  return cost::collectiveSeconds(cost::Collective::ReduceScatter, cost::Algorithm::Ring,
                                 axesSize(partial), bytes, linkFor(startUp, partial)) +
         stagingSeconds(startUp, bytes, bytes / double(axesSize(partial)));
}

double Search::undeferredSeconds(const Node &node, const Strategy &s) const {
  // The edges into a cast or reshape on a gradient's way to its
  // accumulator cost its data-parallel reduction once per step, as if it
  // were deferred past the accumulation. It is not when the accumulator is
  // split over those ranks (ZeRO): the partitioner reduces the whole
  // gradient before the cast and keeps its part, every micro-batch. Here
  // the other N - 1 reductions, on the accumulation.
  // (With ZeRO pinned the accumulators are split whatever else is
  // decided; the term would only skew the rest.)
  if (options_.zero >= 1 || node.runs <= 1 || !node.op || !isa<graph::AddOp>(node.op) ||
      s.operands.size() != 2)
    return 0;
  for (unsigned acc = 0; acc < 2; ++acc) {
    Value gradient = node.op->getOperand(1 - acc);
    Operation *via = gradient.getDefiningOp();
    if (!isAccumulator(node.op->getOperand(acc)) || !via ||
        !isa<graph::CastOp, graph::ReshapeOp>(via))
      continue;
    MeshAxes data;
    for (const MeshAxes &axes : s.operands[acc].dims)
      for (int16_t a : axes)
        if (options_.mesh[size_t(a)].role == AxisRole::Data && !llvm::is_contained(data, a))
          data.push_back(a);
    if (data.empty())
      return 0;
    // The gradient's all-reduce (its two halves) per extra micro-batch, on
    // its part that the tensor axes leave each rank.
    Sharding kept = s.operands[1 - acc];
    for (MeshAxes &axes : kept.dims)
      llvm::erase_if(axes, [&](int16_t a) { return llvm::is_contained(data, a); });
    return (node.runs - 1) * 2 * partialSeconds(gradient, kept, data);
  }
  return 0;
}

void Search::markCostFacts() {
  // A micro-batched step: what runs per micro-batch costs N times over.
  double microBatches = double(microBatchesOf(func_));
  Block &block = func_.getBody().front();
  llvm::DenseSet<Operation *> once;
  if (microBatches > 1)
    once = oncePerStepOps(block);
  markFusion();
  // A bf16 step's weights with copies: their casts become the copies, and
  // the updates hold the masters.
  llvm::DenseSet<Operation *> copyCasts;
  llvm::StringMap<int> copiedNode;
  for (auto [n, node] : llvm::enumerate(nodes_))
    if (bf16CopyOf(node)) {
      node.copied = true;
      auto weight = cast<graph::ParameterOp>(node.op);
      copiedNode[weight.getName()] = int(n);
      for (graph::CastOp c : bf16CastsOf(weight))
        copyCasts.insert(c);
    }
  llvm::DenseMap<Value, int> masterOfUpdate;
  for (auto [i, v] : llvm::enumerate(block.getTerminator()->getOperands()))
    if (auto name = func_.getResultAttrOfType<StringAttr>(unsigned(i), attr::kUpdates))
      if (auto it = copiedNode.find(name.getValue());
          it != copiedNode.end() && nodeOf(v) != it->second) {
        masterOfUpdate[v] = it->second;
        nodes_[size_t(it->second)].updated = true;
      }
  for (Node &node : nodes_) {
    if (node.op && !node.parameter && !once.contains(node.op))
      node.runs = microBatches;
    // Values kept from the forward for the backward count as memory.
    for (Value r : node.results()) {
      node.kept.push_back(node.op && node.forward && !node.parameter &&
                          !copyCasts.contains(node.op) && position(node.op) < lossPosition_ &&
                          llvm::any_of(r.getUsers(), [&](Operation *user) {
                            return position(user) > lossPosition_;
                          }));
      node.accumulated.push_back(node.op && feedsOnlyAccumulations(r));
      auto master = masterOfUpdate.find(r);
      node.masterOf.push_back(master == masterOfUpdate.end() ? -1 : master->second);
    }
    llvm::hash_code key = llvm::hash_combine(node.label, int64_t(node.runs), node.launched,
                                              node.absorbed, node.copied, node.updated);
    for (auto [kept, accumulated, master] : llvm::zip(node.kept, node.accumulated, node.masterOf))
      key = llvm::hash_combine(key, kept, accumulated, master >= 0);
    for (bool fused : llvm::concat<bool>(node.fusedOperands, node.fusedResults))
      key = llvm::hash_combine(key, fused);
    node.costKey = size_t(key);
  }
}

double Search::memoryShare(const Node &node) const {
  if (!node.op)
    return 1.0;
  bool held = node.parameter || llvm::any_of(node.masterOf, [](int m) { return m >= 0; });
  return held ? options_.parameterShare : options_.keptShare;
}

void Search::costStrategies(const Node &node, std::vector<Strategy> &strategies) {
  const cost::Device &device = options_.cluster.device;
  // By stage (SearchOptions::stageMemory), the solver weighs the kept
  // part by each stage's micro-batches in flight; else each device is the
  // average stage.
  double share = options_.stageMemory ? 1.0 : memoryShare(node);
  for (Strategy &s : strategies) {
    for (auto [j, r] : llvm::enumerate(node.results())) {
      bool master = node.masterOf[j] >= 0;
      if (node.op && !node.parameter && !node.kept[j] && !master)
        continue;
      double bytes = localBytes(r, s.results[j]);
      if (node.copied) // its bf16 copy, and its master where no update holds it
        bytes = bytes / 2 + (node.updated ? 0.0 : bytes);
      s.memory += bytes * share;
      if (node.kept[j])
        s.keptMemory += bytes * share;
    }
    if (!node.op)
      continue;
    auto costed = dyn_cast<graph::CostOp>(node.op);
    graph::OpCost opCost = costed ? costed.cost() : graph::OpCost{};
    if (opCost.opClass != graph::OpCost::Free && !node.absorbed) {
      double parts = 1, bytes = 0;
      for (const MeshAxes &axes : s.split)
        parts *= double(axesSize(axes));
      for (auto [i, operand] : llvm::enumerate(node.op->getOperands()))
        if (i < s.operands.size() && !(i < node.fusedOperands.size() && node.fusedOperands[i]))
          bytes += localBytes(operand, s.operands[i]);
      for (auto [j, r] : llvm::enumerate(node.op->getResults()))
        if (!(j < node.fusedResults.size() && node.fusedResults[j]))
          bytes += localBytes(r, s.results[j]);
      plan::Cost c = planCost(opCost, computedValue(node.op));
      c.set_flops(opCost.flops / parts);
      c.set_bytes(bytes);
      s.compute = cost::instructionSeconds(c, device, -1, node.launched);
    }
    s.compute *= node.runs;
    // Split reductions leave partial results: their reduce-scatter
    // half here, the all-gather half on the edges that need it whole. A
    // gradient summed into its accumulator is reduced once per step
    // (dtc-accumulate-gradients).
    if (!s.partial.empty())
      for (auto [j, r] : llvm::enumerate(node.op->getResults()))
        if (!node.accumulated[j]) // else costed on its edges (partialSeconds)
          s.communication += node.runs * partialSeconds(r, s.results[j], s.partial);
    s.communication += undeferredSeconds(node, s);
  }
}

} // namespace dtc::search
