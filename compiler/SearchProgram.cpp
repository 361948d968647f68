//===- SearchProgram.cpp - the integer program ------------------------------===//
#include "compiler/CompileNotes.h"
#include "compiler/MicroBatches.h"
#include "compiler/MixedPrecision.h"
#include "compiler/SearchGraph.h"
#include "compiler/TrainingStepParts.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"
#include "plan/FormatBytes.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <functional>
#include <map>
#include <set>
#include <tuple>

namespace dtc::search {

/// What the least memory a device needs is made of, each value at its
/// smallest split ("; at the least: weights 1.2 GiB, optimizer state 2.4 GiB,
/// activations kept for backward 3.1 GiB; the largest: wte 512 MiB, ..."):
/// the largest memory row's (a pipeline's fullest stage).
std::string Search::leastMemoryText(const search::StrategySolution &solution) const {
  const StageMemory *stages = options_.stageMemory.get();
  size_t row = 0;
  for (size_t k = 1; k < solution.minimumUse.size(); ++k)
    if (solution.minimumUse[k] > solution.minimumUse[row])
      row = k;
  std::map<std::string, double> kinds;
  llvm::StringMap<double> held; // bytes per weight or state
  for (const Node &node : nodes_) {
    int stage = stages && node.op ? stages->stageOf(node.op) : kAnyStage;
    if (stages && stage != kAnyStage && size_t(stage) != row)
      continue;
    double least = std::numeric_limits<double>::infinity();
    for (const Strategy &s : *node.strategies)
      least = std::min(least, stages ? s.memory + s.keptMemory * (stages->copiesOn(node.op, int64_t(row)) - 1)
                                     : s.memory);
    if (!(least > 0) || !std::isfinite(least))
      continue;
    std::string kind = "activations kept for backward", name;
    auto master = llvm::find_if(node.masterOf, [](int m) { return m >= 0; });
    const Node &holder = master != node.masterOf.end() ? nodes_[size_t(*master)] : node;
    if (auto p = holder.op ? dyn_cast<graph::ParameterOp>(holder.op) : graph::ParameterOp()) {
      name = p.getName().str(); // a bf16 step's master, as its update holds it, is its weight's
      kind = p->hasAttr(attr::kAccumulator) ? "gradient accumulators"
             : p->hasAttr(attr::kZeros)     ? "optimizer state"
                                            : "weights";
    } else if (node.dataInput || !node.op) {
      kind = "inputs";
    }
    kinds[kind] += least;
    if (!name.empty())
      held[name] += least;
  }
  std::vector<std::pair<double, std::string>> largest;
  for (const auto &entry : held)
    largest.push_back({entry.getValue(), entry.getKey().str()});
  std::vector<std::pair<double, std::string>> byKind;
  for (const auto &[kind, bytes] : kinds)
    byKind.push_back({bytes, kind});
  std::sort(byKind.rbegin(), byKind.rend());
  std::string text = "; at the least";
  if (stages)
    text += " on stage " + std::to_string(row);
  text += ":";
  for (size_t i = 0; i < byKind.size(); ++i)
    text += (i ? ", " : " ") + byKind[i].second + " " + plan::formatBytes(int64_t(byKind[i].first));
  std::sort(largest.rbegin(), largest.rend());
  for (size_t i = 0; i < largest.size() && i < 3; ++i)
    text += (i ? ", " : "; the largest weights and state: ") + largest[i].second + " " +
            plan::formatBytes(int64_t(largest[i].first));
  // Changes that would fit, with what each would need (estimates from the
  // parts above): ZeRO-3 where --zero pinned less (weights, state and
  // accumulators split over the data axes), or smaller micro-batches
  // (the kept activations shrink with them), or more devices.
  double state = kinds["weights"] + kinds["optimizer state"] + kinds["gradient accumulators"];
  double rest = solution.minimumUse[row] - state, activations = kinds["activations kept for backward"];
  int64_t data = 1;
  for (const MeshAxisSpec &axis : options_.mesh)
    data *= axis.role == AxisRole::Data ? axis.size : 1;
  std::vector<std::string> changes;
  if (options_.zero >= 0 && options_.zero < 3 && data > 1 &&
      state / double(data) + rest <= options_.memoryLimit)
    changes.push_back("--zero 3 (about " + plan::formatBytes(int64_t(state / double(data) + rest)) +
                      ")");
  if (options_.training && activations > 0)
    for (int64_t m = 2; m <= 64; m *= 2)
      if (solution.minimumUse[row] - activations + activations / double(m) <=
          options_.memoryLimit) {
        changes.push_back(
            "micro-batches " + std::to_string(m) + " times smaller (--micro-batches; about " +
            plan::formatBytes(int64_t(solution.minimumUse[row] - activations +
                                      activations / double(m))) +
            ")");
        break;
      }
  // Full recomputation, where the step has none: the activations kept are
  // each layer's input (the forward's checkpoints), and the backward makes
  // one layer's again at a time, holding them and their gradients: the
  // largest layer's activations twice more.
  bool recomputed = false;
  func::FuncOp func = func_;
  func.walk([&](Operation *op) { recomputed |= op->hasAttr(attr::kRecompute); });
  if (options_.training && activations > 0 && !recomputed) {
    Block &block = func.getBody().front();
    llvm::SetVector<Operation *> forward = forwardOps(block);
    llvm::SmallVector<size_t> checkpoints = checkpointPositions(forward, Activations(block));
    double kept = 0, layer = 0, largestLayer = 0;
    size_t next = 0; // the next checkpoint
    for (size_t position = 0; position < forward.size(); ++position) {
      auto it = nodeOfOp_.find(forward[position]);
      double least = std::numeric_limits<double>::infinity();
      if (it != nodeOfOp_.end())
        for (const Strategy &s : *nodes_[size_t(it->second)].strategies)
          least = std::min(least, s.memory);
      if (!std::isfinite(least))
        least = 0;
      if (next < checkpoints.size() && checkpoints[next] == position) {
        kept += least;
        largestLayer = std::max(largestLayer, layer);
        layer = 0;
        ++next;
      } else {
        layer += least;
      }
    }
    largestLayer = std::max(largestLayer, layer);
    double need = solution.minimumUse[row] - activations +
                  std::min(kept + 2 * largestLayer, activations);
    if (need <= options_.memoryLimit)
      changes.push_back("--recompute full (about " + plan::formatBytes(int64_t(need)) + ")");
  }
  // More devices, as more data-parallel ranks with ZeRO-3: the state split
  // over all of them and each one's share of the batch (its activations)
  // smaller alike. The fewest doublings that fit, while each rank keeps a
  // sample.
  int64_t devices = 1, samples = 0; // the batch: a data input's dim 0
  for (const MeshAxisSpec &axis : options_.mesh)
    devices *= axis.size;
  for (const Node &node : nodes_)
    if (node.dataInput && node.argument)
      if (auto type = dyn_cast<ShapedType>(node.argument.getType()); type && type.getRank() > 0)
        samples = std::max(samples, type.getDimSize(0));
  for (int64_t k = 2; k <= 1024 && data * k <= samples; k *= 2) {
    double need = state / double(data * k) + (rest - activations) + activations / double(k);
    if (need <= options_.memoryLimit) {
      changes.push_back("--devices " + std::to_string(devices * k) +
                        (options_.zero == 3 ? "" : " with --zero 3") + " (" +
                        std::to_string(k) + " times the data-parallel ranks, each with 1/" +
                        std::to_string(k) + " of its samples: about " +
                        plan::formatBytes(int64_t(need)) + ")");
      break;
    }
  }
  if (!changes.empty())
    text += "; would fit: " + llvm::join(changes, ", or ");
  return text;
}

/// "splits of the largest ops, each other split costed with the rest of the
/// plan held: h.0.mlp.c_fc (matmul, 2 alike) f32[8,64,1024/tp] chosen;
/// f32[8/dp,64,1024] +1.20 ms; ...": for the three groups of alike ops with
/// the most compute, the two cheapest other splits of their result, each
/// one's change to the predicted step (its own compute and communication,
/// and its resharding to the neighbours' chosen splits), and the memory
/// limit it would break.
std::string Search::splitAlternativesText(const search::StrategyProblem &problem,
                                          const search::StrategySolution &solution) const {
  int64_t devices = 1;
  for (const MeshAxisSpec &axis : options_.mesh)
    devices *= axis.size;
  if (devices < 2 || groups_.empty())
    return "";
  // Each group's chosen compute and member count.
  std::vector<double> compute(groups_.size(), 0);
  std::vector<int> members(groups_.size(), 0);
  for (auto [n, node] : llvm::enumerate(nodes_)) {
    int g = groupOf_[n];
    compute[size_t(g)] += (*node.strategies)[size_t(solution.choice[size_t(g)])].compute;
    ++members[size_t(g)];
  }
  // The model's own ops (the forward: the backward's and the optimizer's
  // splits follow from theirs), one group per name and result type.
  std::vector<size_t> order;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Node &node = nodes_[size_t(groups_[g])];
    if (node.op && node.forward && !node.parameter && node.strategies->size() > 1 &&
        !isa<graph::ParameterOp, graph::ConstantOp>(node.op) && node.op->getNumResults() &&
        isa<FloatType>(getElementTypeOrSelf(node.op->getResult(0).getType())))
      order.push_back(g);
  }
  // The most compute first; alike compute in program order.
  llvm::sort(order, [&](size_t a, size_t b) {
    return compute[a] != compute[b] ? compute[a] > compute[b] : a < b;
  });
  std::vector<double> used(problem.resources.size(), 0);
  for (size_t k = 0; k < problem.resources.size(); ++k)
    for (size_t g = 0; g < groups_.size(); ++g)
      used[k] += problem.resources[k].use[g][size_t(solution.choice[g])];
  auto axesText = [&](ArrayRef<int16_t> axes) {
    SmallVector<std::string> names;
    for (int16_t a : axes)
      names.push_back(size_t(a) < options_.mesh.size() ? options_.mesh[size_t(a)].name
                                                       : "axis" + std::to_string(a));
    return names.size() == 1 ? names[0] : "(" + llvm::join(names, ",") + ")";
  };
  auto typeText = [&](Value v, const Sharding &sharding) {
    auto type = cast<ShapedType>(v.getType());
    std::string text;
    llvm::raw_string_ostream os(text);
    os << type.getElementType() << "[";
    for (int64_t d = 0; d < type.getRank(); ++d) {
      os << (d ? "," : "") << type.getDimSize(d);
      if (size_t(d) < sharding.dims.size() && !sharding.dims[size_t(d)].empty())
        os << "/" << axesText(sharding.dims[size_t(d)]);
    }
    os << "]";
    return text;
  };
  // A split reduction's result: partial sums the plan adds up over axes
  // (a loss over split classes: parts the partitioner combines).
  auto partialText = [&](const Node &node, const Strategy &s) {
    if (s.partial.empty())
      return std::string();
    if (isa<graph::CrossEntropyOp>(node.op))
      return " (its classes over " + axesText(s.partial) + ")";
    return " (partial sums over " + axesText(s.partial) + ")";
  };
  // Group g's chosen split of its first result and its two cheapest other
  // splits, each with what it would add (time; memory, when `memory`) and
  // any limit it would break.
  auto alternatives = [&](size_t g, const std::string &label, bool memory) {
    const Node &node = nodes_[size_t(groups_[g])];
    int chosen = solution.choice[g];
    const std::vector<Strategy> &strategies = *node.strategies;
    Value result = node.results().empty() ? Value() : node.results()[0];
    if (!result || strategies[size_t(chosen)].results.empty())
      return std::string();
    // Each other strategy's change to the objective, the others held.
    std::vector<std::pair<double, int>> deltas;
    for (int s = 0; s < int(strategies.size()); ++s) {
      if (s == chosen || !std::isfinite(problem.nodes[g].cost[size_t(s)]))
        continue;
      double delta = problem.nodes[g].cost[size_t(s)] - problem.nodes[g].cost[size_t(chosen)];
      for (const search::StrategyProblem::Edge &e : problem.edges) {
        if (e.from == int(g)) {
          size_t columns = e.cost.size() / strategies.size();
          size_t other = size_t(solution.choice[size_t(e.to)]);
          delta += e.cost[size_t(s) * columns + other] - e.cost[size_t(chosen) * columns + other];
        } else if (e.to == int(g)) {
          size_t other = size_t(solution.choice[size_t(e.from)]);
          delta += e.cost[other * strategies.size() + size_t(s)] -
                   e.cost[other * strategies.size() + size_t(chosen)];
        }
      }
      if (std::isfinite(delta))
        deltas.push_back({delta, s});
    }
    // A pipeline's search costs the whole step on one stage's devices:
    // a stage runs its share of it.
    for (auto &[delta, s] : deltas)
      delta *= options_.stageMemory ? options_.parameterShare : 1.0;
    llvm::sort(deltas);
    std::string text = label + (members[g] > 1 ? ", " + std::to_string(members[g]) + " alike" : "") +
                       ") " + typeText(result, strategies[size_t(chosen)].results[0]) +
                       partialText(node, strategies[size_t(chosen)]) + " chosen";
    for (size_t k = 0; k < deltas.size() && k < 2; ++k) {
      size_t s = size_t(deltas[k].second);
      if (strategies[s].results.empty())
        continue;
      text += "; " + typeText(result, strategies[s].results[0]) + partialText(node, strategies[s]) +
              " " + (deltas[k].first < 0 ? "-" : "+") + formatSeconds(std::fabs(deltas[k].first));
      // The memory it changes on the fullest row.
      double more = 0;
      for (size_t r = 0; r < problem.resources.size(); ++r) {
        double change = problem.resources[r].use[g][s] - problem.resources[r].use[g][size_t(chosen)];
        if (std::fabs(change) > std::fabs(more))
          more = change;
      }
      if (memory && std::fabs(more) >= 1)
        text += ", " + plan::formatBytes(int64_t(std::fabs(more))) +
                (more > 0 ? " more" : " less") + " a device";
      for (size_t r = 0; r < problem.resources.size(); ++r) {
        double over = used[r] - problem.resources[r].use[g][size_t(chosen)] +
                      problem.resources[r].use[g][s] - problem.resources[r].limit;
        if (over > 0) {
          text += " and over the " + problem.resources[r].name + " limit by " +
                  plan::formatBytes(int64_t(over));
          break;
        }
      }
    }
    return text;
  };
  std::vector<std::string> parts;
  std::set<std::string> seen;
  for (size_t i = 0; i < order.size() && parts.size() < 3; ++i) {
    const Node &node = nodes_[size_t(groups_[order[i]])];
    std::string name = locationName(node.op->getLoc());
    std::string opName = node.op->getName().stripDialect().str();
    std::string text =
        alternatives(order[i], name.empty() ? "(" + opName : name + " (" + opName, false);
    if (!text.empty() && seen.insert(text).second)
      parts.push_back(text);
  }
  // And the weights holding the most memory: split (tensor parallelism, or
  // ZeRO over the data axes) or whole on every device.
  std::optional<size_t> heaviest;
  std::vector<double> held(groups_.size(), 0);
  for (auto [n, node] : llvm::enumerate(nodes_)) {
    auto p = node.op ? dyn_cast<graph::ParameterOp>(node.op) : graph::ParameterOp();
    if (!p || p->hasAttr(attr::kZeros) || p->hasAttr(attr::kAccumulator) ||
        node.strategies->size() < 2)
      continue;
    size_t g = size_t(groupOf_[n]);
    held[g] += (*node.strategies)[size_t(solution.choice[g])].memory;
    if (!heaviest || held[g] > held[*heaviest])
      heaviest = g;
  }
  if (heaviest) {
    auto p = cast<graph::ParameterOp>(nodes_[size_t(groups_[*heaviest])].op);
    std::string text = alternatives(*heaviest, p.getName().str() + " (weight", true);
    if (!text.empty())
      parts.push_back(text);
  }
  if (parts.empty())
    return "";
  return "splits of the largest ops and weights (each other split costed with the rest of the "
         "plan held): " +
         llvm::join(parts, " | ");
}

FailureOr<search::StrategySolution> Search::solve(search::SolveLimits budget, double costBelow,
                                                  bool roundingOnly) {
  // Groups in order of first appearance (deterministic).
  llvm::DenseMap<size_t, int> groupOfLabel;
  groupOf_.resize(nodes_.size());
  for (auto [n, node] : llvm::enumerate(nodes_)) {
    auto [it, fresh] = groupOfLabel.try_emplace(groupLabel(node), int(groups_.size()));
    if (fresh)
      groups_.push_back(int(n));
    groupOf_[n] = it->second;
  }
  search::StrategyProblem problem;
  problem.nodes.resize(groups_.size());
  // Memory: one limit for the average stage, or one per pipeline stage
  // (its own ops' weights and state, their kept activations times its
  // micro-batches in flight; ops on constants in every stage).
  const StageMemory *stages = options_.stageMemory.get();
  size_t limits = stages ? size_t(stages->stages) : 1;
  for (size_t k = 0; k < limits; ++k) {
    search::StrategyProblem::Resource memory;
    memory.name = stages ? "memory of stage " + std::to_string(k) : "memory";
    memory.limit = options_.memoryLimit;
    memory.use.resize(groups_.size());
    problem.resources.push_back(std::move(memory));
  }
  for (auto [g, first] : llvm::enumerate(groups_)) {
    size_t count = nodes_[size_t(first)].strategies->size();
    problem.nodes[g].cost.assign(count, 0);
    for (auto &memory : problem.resources)
      memory.use[g].assign(count, 0);
  }
  for (auto [n, node] : llvm::enumerate(nodes_)) {
    int g = groupOf_[n];
    int stage = stages && node.op ? stages->stageOf(node.op) : kAnyStage;
    for (auto [s, strategy] : llvm::enumerate(*node.strategies)) {
      // Among equally fast splits, the one that keeps less memory.
      problem.nodes[size_t(g)].cost[s] +=
          strategy.compute + strategy.communication + strategy.memory * kSecondsPerByteKept;
      for (size_t k = 0; k < limits; ++k)
        if (stage == kAnyStage || size_t(stage) == k)
          problem.resources[k].use[size_t(g)][s] +=
              stages ? strategy.memory + strategy.keptMemory * (stages->copiesOn(node.op, k) - 1)
                     : strategy.memory;
    }
  }

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
    m.resize(u.strategies->size() * w.strategies->size());
    // Resharding happens as often as the reader runs. A gradient on its
    // way into an accumulator (its partial sums costed here, not on its op)
    // is reduced once per step when the reader keeps its split and only
    // the partial sums are left to combine (the all-reduce deferred past
    // the accumulation), every micro-batch otherwise (ZeRO's
    // reduce-scatter into a split accumulator; any other resharding, which
    // the accumulation cannot defer).
    bool accumulated = feedsOnlyAccumulations(v);
    double factor = operandIdx >= 0 ? regatherFactor(v, w) : 1.0;
    for (auto [s, su] : llvm::enumerate(*u.strategies))
      for (auto [t, sv] : llvm::enumerate(*w.strategies))
        m[s * w.strategies->size() + t] =
            operandIdx < 0
                ? updateSeconds(v, su, resultIdx, w, want(sv))
                : factor * edgeSeconds(v, accumulated, su, resultIdx, want(sv), w.runs) +
                      unfusedSeconds(w, size_t(operandIdx), v, su, resultIdx, want(sv));
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
    for (auto [s, su] : llvm::enumerate(*u.strategies))
      problem.nodes[size_t(groupOf_[size_t(nodeOf(v))])].cost[s] +=
          reshardSeconds(v, su.results[size_t(resultIndex(v))], whole, su.partial);
  }
  for (auto &[key, entry] : edges) {
    auto [gu, resultIdx, gv, operandIdx] = key;
    auto &[matrix, count] = entry;
    for (double &c : matrix)
      c *= count;
    size_t columns = nodes_[size_t(groups_[size_t(gv)])].strategies->size();
    if (gu == gv) { // both ends decided together
      for (size_t s = 0; s < columns; ++s)
        problem.nodes[size_t(gu)].cost[s] += matrix[s * columns + s];
      continue;
    }
    problem.edges.push_back({gu, gv, std::move(matrix)});
  }

  search::StrategySolution solution =
      search::solveStrategies(problem, budget, costBelow, kRelativeGap, roundingOnly);
  unsettled_ = solution.roundedOnly;
  bound_ = solution.bound;
  gap_ = size_t(solution.variables) >= search::kGapColumns ? kRelativeGap : 0.0;
  result_.ops = int(nodes_.size());
  result_.decisions = int(groups_.size());
  result_.variables = solution.variables;
  result_.constraints = solution.constraints;
  result_.eliminated = solution.eliminated;
  result_.optimal = solution.optimal;
  result_.rounded = solution.solvedByRounding;
  result_.nodes = solution.nodes;
  result_.timedOut = solution.timedOut;
  result_.gap = solution.cost > 0 ? std::max(0.0, solution.cost - solution.bound) / solution.cost
                                  : 0.0;
  if (!solution.feasible) {
    double smallest = solution.minimumUse.empty()
                          ? 0
                          : *std::max_element(solution.minimumUse.begin(),
                                              solution.minimumUse.end());
    if (smallest > options_.memoryLimit) {
      module_->setAttr(attr::kOutOfMemory, UnitAttr::get(module_.getContext()));
      return func_.emitError() << "no sharding over mesh " << meshText() << " fits "
                               << plan::formatBytes(int64_t(options_.memoryLimit))
                               << " per device: the smallest any sharding needs is "
                               << plan::formatBytes(int64_t(smallest))
                               << (options_.training
                                       ? " (weights, optimizer state, inputs and activations "
                                         "kept for backward)"
                                       : " (weights and inputs)")
                               << "; use more devices or a larger --memory-limit"
                               << leastMemoryText(solution);
    }
    return func_.emitError() << "the sharding search found no plan: " << solution.message;
  }
  choice_.resize(nodes_.size());
  for (size_t n = 0; n < nodes_.size(); ++n)
    choice_[n] = solution.choice[size_t(groupOf_[n])];
  for (auto [n, node] : llvm::enumerate(nodes_)) {
    const Strategy &s = (*node.strategies)[size_t(choice_[n])];
    result_.computeSeconds += s.compute;
    result_.communicationSeconds += s.communication;
    result_.memoryBytes += s.memory;
  }
  result_.splitAlternatives = splitAlternativesText(problem, solution);
  figureOps();
  double memorySum = result_.memoryBytes; // what the objective's tie-break counted
  if (stages) { // the fullest stage's
    result_.memoryBytes = 0;
    for (const auto &memory : problem.resources) {
      double used = 0;
      for (size_t g = 0; g < groups_.size(); ++g)
        used += memory.use[g][size_t(solution.choice[g])];
      result_.memoryBytes = std::max(result_.memoryBytes, used);
    }
  }
  // Fusions the split breaks (unfusedSeconds) are on edges, but compute.
  for (auto [n, node] : llvm::enumerate(nodes_))
    if (node.op)
      for (auto [i, v] : llvm::enumerate(node.op->getOperands()))
        if (i < node.rule.operands.size()) {
          int u = nodeOf(v);
          const Strategy &su = (*nodes_[size_t(u)].strategies)[size_t(choice_[size_t(u)])];
          const Strategy &s = (*node.strategies)[size_t(choice_[n])];
          result_.computeSeconds += unfusedSeconds(node, i, v, su, resultIndex(v), s.operands[i]);
        }
  result_.communicationSeconds = std::max(
      0.0, solution.cost - result_.computeSeconds - memorySum * kSecondsPerByteKept);
  return solution;
}

Value Search::bf16CopyOf(const Node &parameter) const {
  auto weight = dyn_cast_or_null<graph::ParameterOp>(parameter.op);
  if (!weight || !options_.training || !options_.bf16Copies)
    return {};
  SmallVector<graph::CastOp> casts = bf16CastsOf(weight);
  return casts.empty() ? Value() : casts.front().getResult();
}

double Search::updateSeconds(Value update, const Strategy &su, int resultIdx,
                             const Node &parameter, const Sharding &want) const {
  Value priced = update;
  if (Value copy = bf16CopyOf(parameter); copy && refines(su.results[size_t(resultIdx)], want))
    priced = copy; // the same shape in bf16: the copy's shards, cast where the update is
  return edgeSeconds(priced, feedsOnlyAccumulations(update), su, resultIdx, want, parameter.runs,
                     options_.buckets ? 1.0 / double(std::max(updates_, 1)) : 1.0);
}

double Search::regatherFactor(Value v, const Node &reader) const {
  if (!reader.forward || !nodes_[size_t(nodeOf(v))].parameter || !options_.training)
    return 1.0;
  auto readInBackward = [&](Value x) {
    return llvm::any_of(x.getUsers(), [&](Operation *user) {
      return user->getNumResults() > 0 && !nodes_[size_t(nodeOf(user->getResult(0)))].forward;
    });
  };
  if (readInBackward(v))
    return 2.0;
  if (reader.op)
    for (Value r : reader.op->getResults())
      if (readInBackward(r))
        return 2.0;
  return 1.0;
}

double Search::edgeSeconds(Value v, bool accumulated, const Strategy &su, int resultIdx,
                           const Sharding &want, double runs, double startUp) const {
  const Sharding &have = su.results[size_t(resultIdx)];
  double seconds = reshardSeconds(v, have, want, su.partial, startUp);
  if (accumulated && !su.partial.empty())
    seconds += partialSeconds(v, have, su.partial, startUp);
  return (accumulated && want == have ? 1.0 : runs) * seconds;
}

void Search::figureOps() {
  // Each node's own compute and communication, and the resharding of what
  // it reads (an update's into its parameter's split counts on the
  // parameter): the objective op by op, as a pipeline stage runs it.
  result_.opFigures.clear();
  for (auto [n, node] : llvm::enumerate(nodes_)) {
    const Strategy &s = (*node.strategies)[size_t(choice_[n])];
    // A device's own bytes, not the average stage's share of them
    // (costStrategies without stageMemory).
    double share = options_.stageMemory ? 1.0 : memoryShare(node);
    OpFigures f{node.op, s.compute + s.communication, node.runs > 1, s.memory / share,
                s.keptMemory / share};
    if (node.op)
      for (auto [i, v] : llvm::enumerate(node.op->getOperands()))
        if (i < node.rule.operands.size()) {
          int u = nodeOf(v);
          const Strategy &su = (*nodes_[size_t(u)].strategies)[size_t(choice_[size_t(u)])];
          f.seconds += regatherFactor(v, node) * edgeSeconds(v, feedsOnlyAccumulations(v), su,
                                                             resultIndex(v), s.operands[i],
                                                             node.runs) +
                       unfusedSeconds(node, i, v, su, resultIndex(v), s.operands[i]);
        }
    result_.opFigures.push_back(f);
  }
  llvm::StringMap<size_t> parameterNode;
  for (auto [n, node] : llvm::enumerate(nodes_))
    if (node.parameter)
      parameterNode[cast<graph::ParameterOp>(node.op).getName()] = n;
  Operation *terminator = func_.getBody().front().getTerminator();
  for (auto [i, v] : llvm::enumerate(terminator->getOperands())) {
    auto name = func_.getResultAttrOfType<StringAttr>(unsigned(i), attr::kUpdates);
    auto it = name ? parameterNode.find(name.getValue()) : parameterNode.end();
    if (it == parameterNode.end())
      continue;
    int u = nodeOf(v);
    const Strategy &su = (*nodes_[size_t(u)].strategies)[size_t(choice_[size_t(u)])];
    const Strategy &sp = (*nodes_[it->second].strategies)[size_t(choice_[it->second])];
    result_.opFigures[it->second].seconds +=
        updateSeconds(v, su, resultIndex(v), nodes_[it->second], sp.results[0]);
  }
}

} // namespace dtc::search
