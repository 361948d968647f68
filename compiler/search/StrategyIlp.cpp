//===- StrategyIlp.cpp - one strategy per node, reduced, then CBC ---------===//
//
// The integer program (Alpa, OSDI'22, section 4.2): binary x[v][s] with
// sum_s x[v][s] = 1 per node; per edge (u, v) a variable e[s][t] per allowed
// pair with sum_t e[s][t] = x[u][s] and sum_s e[s][t] = x[v][t], so that
// e[s][t] = x[u][s] * x[v][t] at integral x; objective sum c_v x + sum c_e e;
// a row per resource. e is left continuous: integral x forces it to 0/1, and
// CBC branches on fewer columns.
//
// Before CBC, nodes with one or two neighbours and no say in a binding
// resource are eliminated exactly, as in dynamic programming over the
// (min, +) semiring: a leaf's best strategy for each of its neighbour's goes
// into the neighbour's costs, a node between two others becomes one edge
// between them. Real sharding graphs are mostly trees and chains hanging off
// a backbone, so CBC sees little or nothing of them. Each eliminated node's
// choice is recovered afterwards from its neighbours', newest first.
//
// In between, a strategy is dropped when another of the same node is no
// worse in every way that can matter: its own cost, its use of every
// binding resource, and its pair cost with every strategy left on every
// neighbour. Any choice with the first is then no better than the same
// choice with the second, so the optimum stays; nodes whose use keeps them
// from elimination at least reach CBC with fewer strategies, and some are
// left with one and fold into their neighbours.
//
// What is left goes to Clp's dual simplex as a linear program first: its
// relaxation is nearly integral on sharding problems, so a choice rounded
// from it, repaired into the limits and improved by single changes, is
// usually within the gap of its bound (then CBC does not run); otherwise
// that choice is CBC's start. CBC's own heuristics found poor choices under
// tight memory limits (docs/sharding.md).
//
//===----------------------------------------------------------------------===//
#include "compiler/search/StrategyIlp.h"

#include <Cbc_C_Interface.h>
#include <Clp_C_Interface.h>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <utility>

namespace dtc::search {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// CBC only accepts a new incumbent that improves by its cutoff increment
// (1e-5 by default) and its tolerances are absolute, while costs here are
// seconds (often 1e-6); the objective is scaled so its largest coefficient
// is this.
constexpr double kObjectiveScale = 1e4;

/// "3.2e9" rather than printf's "3.2e+09".
std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  std::string s = text;
  size_t e = s.find('e');
  if (e != std::string::npos) {
    size_t digits = e + 1;
    if (s[digits] == '+')
      s.erase(digits, 1);
    else if (s[digits] == '-')
      ++digits;
    while (digits + 1 < s.size() && s[digits] == '0')
      s.erase(digits, 1);
  }
  return s;
}

std::string describeInput(const StrategyProblem &problem) {
  int nodes = problem.nodes.size();
  for (int v = 0; v < nodes; ++v)
    if (problem.nodes[v].cost.empty())
      return "node " + std::to_string(v) + " has no strategies";
  for (size_t i = 0; i < problem.edges.size(); ++i) {
    const StrategyProblem::Edge &edge = problem.edges[i];
    std::string name = "edge " + std::to_string(i) + " (" + std::to_string(edge.from) + " -> " +
                       std::to_string(edge.to) + ")";
    if (edge.from < 0 || edge.from >= nodes || edge.to < 0 || edge.to >= nodes)
      return name + ": no such node (there are " + std::to_string(nodes) + ")";
    size_t rows = problem.nodes[edge.from].cost.size(),
           columns = problem.nodes[edge.to].cost.size();
    if (edge.cost.size() != rows * columns)
      return name + ": " + std::to_string(edge.cost.size()) + " costs, expected " +
             std::to_string(rows) + " x " + std::to_string(columns);
  }
  for (const StrategyProblem::Resource &resource : problem.resources) {
    if (resource.use.size() != problem.nodes.size())
      return resource.name + ": uses for " + std::to_string(resource.use.size()) +
             " nodes, expected " + std::to_string(nodes);
    for (int v = 0; v < nodes; ++v)
      if (resource.use[v].size() != problem.nodes[v].cost.size())
        return resource.name + ": node " + std::to_string(v) + " has " +
               std::to_string(resource.use[v].size()) + " uses, expected one per strategy (" +
               std::to_string(problem.nodes[v].cost.size()) + ")";
  }
  return "";
}

/// Series elimination replaces two edges by one between the outer nodes;
/// it is done when that edge is new and has at most this many entries, or
/// no more than the two it replaces (else the program CBC may get grows).
constexpr long kSeriesEntries = 4096;

/// Dominance is checked pair by pair of a node's strategies; nodes with
/// more than this many are left alone to keep it cheap.
constexpr int kDominanceStrategies = 64;

/// The problem after the exact reductions: node costs with disallowed
/// strategies at +infinity and folded edges and eliminated nodes added in;
/// the edges that are left, one per pair of nodes.
class ReducedProblem {
public:
  struct PairEdge {
    int a, b;                 // a < b
    std::vector<double> cost; // [strategy of a][strategy of b]
    bool alive = true;
    int through = -1; // the last node eliminated into this edge, for messages
  };

  explicit ReducedProblem(const StrategyProblem &problem) : problem(problem) {
    int nodes = problem.nodes.size();
    cost.resize(nodes);
    edgesOf.resize(nodes);
    for (int v = 0; v < nodes; ++v) {
      cost[v] = problem.nodes[v].cost;
      for (size_t s = 0; s < cost[v].size(); ++s) {
        bool allowed = std::isfinite(cost[v][s]);
        for (const StrategyProblem::Resource &resource : problem.resources)
          allowed = allowed && std::isfinite(resource.use[v][s]);
        if (!allowed)
          cost[v][s] = kInf;
      }
    }
    mergeEdges();
  }

  /// Drops strategies no allowed pair uses and folds edges that no longer
  /// couple their ends, until nothing changes. Returns why the problem is
  /// infeasible, or "".
  std::string reduce();
  /// Then eliminates nodes with one or two neighbours whose use of every
  /// binding resource is the same for each strategy left (the resources in
  /// `binding`, less those that stop binding on the way), and drops
  /// dominated strategies, with reduce()'s steps in between, until nothing
  /// changes. Returns why the problem is infeasible, or "".
  std::string eliminate(std::vector<int> binding);
  /// Sets the eliminated nodes' strategies in `choice`, given the others'.
  void recover(std::vector<int> &choice) const;

  int eliminatedCount() const { return eliminations.size(); }
  /// Whether `v` was eliminated (its cost is folded into its neighbours').
  bool eliminated(int v) const { return !eliminatedNode.empty() && eliminatedNode[v]; }
  int prunedCount() const { return pruned; }
  /// Whether a strategy was dropped as dominated while resource `r` did not
  /// bind: its use was not compared, so each node's least use of it may
  /// have risen above what an allowed choice reaches.
  bool useIgnored(int r) const { return ignoredUse[r]; }

  int strategies(int v) const { return cost[v].size(); }
  bool allowed(int v, int s) const { return cost[v][s] < kInf; }
  int allowedCount(int v) const {
    return std::count_if(cost[v].begin(), cost[v].end(), [](double c) { return c < kInf; });
  }
  /// The cheapest allowed strategy of `v` on its own (the first of equals).
  int cheapest(int v) const {
    return std::min_element(cost[v].begin(), cost[v].end()) - cost[v].begin();
  }

  const StrategyProblem &problem;
  std::vector<std::vector<double>> cost;
  std::vector<PairEdge> edges;
  std::vector<std::vector<int>> edgesOf;

private:
  /// A node gone from the problem: the edges to its one or two neighbours
  /// (second -1 for a leaf), kept as they were to recover its choice.
  struct Elimination {
    int node, first, second;
  };

  void mergeEdges();
  void reduceEdge(int e);
  void propagate();
  void disallow(int v, int s);
  void kill(int e);
  void nominate(int v);
  /// The edge between `a` and `b` that `cost` (rows: strategies of `a`) is
  /// added to, made when there is none; also marks it as passing `through`.
  int addToEdge(int a, int b, const std::vector<double> &pairCost, int through);
  bool usesVary(int v) const;
  /// Whether strategy `t` of `v` is no worse than `s`: in cost, in use of
  /// each binding resource, and paired with each strategy left on each
  /// neighbour.
  bool noWorse(int v, int t, int s) const;
  /// Drops the dominated strategies of nodes whose costs, edges or
  /// neighbours changed since they were last looked at (of two that are
  /// equal, the later); returns how many.
  int pruneDominated();
  void eliminateLeaf(int v);
  bool eliminateSeries(int v);
  /// The other end of `edge` from `v`, and the cost of `v` at `s` with it at `t`.
  static int otherEnd(const PairEdge &edge, int v) { return v == edge.a ? edge.b : edge.a; }
  double pairCost(const PairEdge &edge, int v, int s, int t) const {
    return v == edge.a ? edge.cost[s * strategies(edge.b) + t]
                       : edge.cost[t * strategies(edge.b) + s];
  }
  /// The alive edges of `v`, the first `count` of them.
  std::vector<int> aliveEdges(int v, int count) const;

  std::deque<int> changed;
  std::vector<char> queued;
  std::string infeasible;

  std::map<std::pair<int, int>, int> edgeOfPair; // alive or not
  std::vector<int> degree;                       // alive edges per node
  std::vector<int> binding;
  std::deque<int> candidates, seriesCandidates; // leaves first, then series
  std::vector<char> nominated, inSeries, eliminatedNode;
  std::vector<Elimination> eliminations;
  std::vector<char> unpruned; // nodes to look at for dominated strategies
  std::vector<char> ignoredUse; // per resource, see useIgnored()
  int pruned = 0;
};

/// What each node uses of a resource at least and at most among the
/// strategies left.
struct ResourceRange {
  std::vector<double> least, most;
  double leastSum = 0, mostSum = 0;

  ResourceRange(const StrategyProblem::Resource &resource, const ReducedProblem &reduced) {
    int nodes = reduced.cost.size();
    least.assign(nodes, 0);
    most.assign(nodes, 0);
    for (int v = 0; v < nodes; ++v) {
      double lo = kInf, hi = -kInf;
      for (int s = 0; s < reduced.strategies(v); ++s)
        if (reduced.allowed(v, s)) {
          lo = std::min(lo, resource.use[v][s]);
          hi = std::max(hi, resource.use[v][s]);
        }
      if (lo > hi) // no strategy left: the problem is infeasible anyway
        continue;
      least[v] = lo;
      most[v] = hi;
      leastSum += lo;
      mostSum += hi;
    }
  }
};

void ReducedProblem::mergeEdges() {
  for (const StrategyProblem::Edge &edge : problem.edges) {
    int from = edge.from, to = edge.to;
    int rows = strategies(from), columns = strategies(to);
    auto entry = [&](int s, int t) {
      double c = edge.cost[s * columns + t];
      return std::isnan(c) ? kInf : c;
    };
    if (from == to) { // the pair (s, s) only
      for (int s = 0; s < rows; ++s)
        cost[from][s] += entry(s, s);
      continue;
    }
    int a = std::min(from, to), b = std::max(from, to);
    auto [it, added] = edgeOfPair.try_emplace({a, b}, edges.size());
    if (added) {
      edges.push_back({a, b, std::vector<double>(strategies(a) * strategies(b), 0.0)});
      edgesOf[a].push_back(it->second);
      edgesOf[b].push_back(it->second);
    }
    std::vector<double> &merged = edges[it->second].cost;
    int bStrategies = strategies(b);
    for (int s = 0; s < rows; ++s)
      for (int t = 0; t < columns; ++t)
        merged[from == a ? s * bStrategies + t : t * bStrategies + s] += entry(s, t);
  }
  degree.assign(cost.size(), 0);
  for (const PairEdge &edge : edges) {
    ++degree[edge.a];
    ++degree[edge.b];
  }
  nominated.assign(cost.size(), 0);
  inSeries.assign(cost.size(), 0);
  eliminatedNode.assign(cost.size(), 0);
  unpruned.assign(cost.size(), 1);
  ignoredUse.assign(problem.resources.size(), 0);
}

void ReducedProblem::kill(int e) {
  PairEdge &edge = edges[e];
  edge.alive = false;
  for (int v : {edge.a, edge.b}) {
    --degree[v];
    nominate(v);
  }
}

void ReducedProblem::nominate(int v) {
  unpruned[v] = 1;
  if (!nominated[v] && !eliminatedNode[v]) {
    nominated[v] = 1;
    candidates.push_back(v);
  }
}

void ReducedProblem::disallow(int v, int s) {
  cost[v][s] = kInf;
  nominate(v); // its use of a binding resource may no longer vary
  if (!queued[v]) {
    queued[v] = 1;
    changed.push_back(v);
  }
}

void ReducedProblem::reduceEdge(int e) {
  PairEdge &edge = edges[e];
  int a = edge.a, b = edge.b, na = strategies(a), nb = strategies(b);
  auto c = [&](int s, int t) { return edge.cost[s * nb + t]; };

  // A strategy with no allowed partner on the other end is never chosen;
  // `pair(s, t)`: the cost with v at s and w at t.
  auto dropUnpartnered = [&](int v, int w, auto pair) {
    for (int s = 0; s < strategies(v); ++s) {
      if (!allowed(v, s))
        continue;
      bool partnered = false;
      for (int t = 0; t < strategies(w) && !partnered; ++t)
        partnered = allowed(w, t) && pair(s, t) < kInf;
      if (!partnered)
        disallow(v, s);
    }
  };
  dropUnpartnered(a, b, c);
  dropUnpartnered(b, a, [&](int t, int s) { return c(s, t); });
  for (int v : {a, b})
    if (allowedCount(v) == 0) {
      infeasible = "node " + std::to_string(v) + ": none of its allowed strategies goes with an " +
                   "allowed strategy of node " + std::to_string(v == a ? b : a);
      if (edge.through >= 0)
        infeasible += " (counting the path through node " + std::to_string(edge.through) + ")";
      return;
    }

  // One end decided: the edge is a cost on the other end's strategies.
  if (allowedCount(a) == 1 || allowedCount(b) == 1) {
    bool aDecided = allowedCount(a) == 1;
    int decided = aDecided ? a : b, other = aDecided ? b : a;
    int fixed = cheapest(decided);
    for (int t = 0; t < strategies(other); ++t) {
      if (!allowed(other, t))
        continue;
      double pair = aDecided ? c(fixed, t) : c(t, fixed);
      if (pair < kInf)
        cost[other][t] += pair;
      else
        disallow(other, t);
    }
    kill(e);
    return;
  }

  // c[s][t] = row[s] + column[t] (an all-zero matrix, say): the pair adds
  // nothing that the two nodes' own costs cannot carry.
  int s0 = cheapest(a), t0 = cheapest(b);
  double scale = 0;
  for (int s = 0; s < na; ++s)
    for (int t = 0; t < nb; ++t)
      if (allowed(a, s) && allowed(b, t)) {
        if (!(c(s, t) < kInf))
          return;
        scale = std::max(scale, std::fabs(c(s, t)));
      }
  for (int s = 0; s < na; ++s)
    for (int t = 0; t < nb; ++t)
      if (allowed(a, s) && allowed(b, t) &&
          std::fabs(c(s, t) - c(s, t0) - c(s0, t) + c(s0, t0)) > 1e-12 * scale)
        return;
  for (int s = 0; s < na; ++s)
    if (allowed(a, s))
      cost[a][s] += c(s, t0) - c(s0, t0);
  for (int t = 0; t < nb; ++t)
    if (allowed(b, t))
      cost[b][t] += c(s0, t);
  kill(e);
}

void ReducedProblem::propagate() {
  while (!changed.empty() && infeasible.empty()) {
    int v = changed.front();
    changed.pop_front();
    queued[v] = 0;
    for (size_t i = 0; i < edgesOf[v].size(); ++i) { // reduceEdge does not add edges
      PairEdge &edge = edges[edgesOf[v][i]];
      if (!edge.alive || !infeasible.empty())
        continue;
      unpruned[otherEnd(edge, v)] = 1; // fewer strategies of v to compare with
      reduceEdge(edgesOf[v][i]);
    }
  }
}

std::string ReducedProblem::reduce() {
  int nodes = cost.size();
  for (int v = 0; v < nodes; ++v)
    if (allowedCount(v) == 0)
      return "node " + std::to_string(v) + ": every strategy is disallowed";
  queued.assign(nodes, 0);
  for (size_t e = 0; e < edges.size() && infeasible.empty(); ++e)
    reduceEdge(e);
  propagate();
  return infeasible;
}

std::vector<int> ReducedProblem::aliveEdges(int v, int count) const {
  std::vector<int> found;
  for (int e : edgesOf[v])
    if (edges[e].alive && int(found.size()) < count)
      found.push_back(e);
  return found;
}

bool ReducedProblem::usesVary(int v) const {
  for (int r : binding) {
    const std::vector<double> &use = problem.resources[r].use[v];
    double first = kInf;
    for (int s = 0; s < strategies(v); ++s)
      if (allowed(v, s)) {
        if (first == kInf)
          first = use[s];
        else if (use[s] != first)
          return true;
      }
  }
  return false;
}

bool ReducedProblem::noWorse(int v, int t, int s) const {
  if (cost[v][t] > cost[v][s])
    return false;
  for (int r : binding)
    if (problem.resources[r].use[v][t] > problem.resources[r].use[v][s])
      return false;
  for (int e : edgesOf[v]) {
    const PairEdge &edge = edges[e];
    int w = otherEnd(edge, v);
    for (int u = 0; edge.alive && u < strategies(w); ++u)
      if (allowed(w, u) && pairCost(edge, v, t, u) > pairCost(edge, v, s, u))
        return false;
  }
  return true;
}

int ReducedProblem::pruneDominated() {
  int before = pruned, nodes = cost.size();
  for (int v = 0; v < nodes && infeasible.empty(); ++v) {
    // A node alone whose use does not matter takes its cheapest strategy
    // anyway.
    if (!unpruned[v] || eliminatedNode[v] || strategies(v) > kDominanceStrategies ||
        (degree[v] == 0 && !usesVary(v)))
      continue;
    // Dominance is transitive, so checking against the strategies still
    // allowed loses nothing; ties go to the lower index.
    for (int s = 0; s < strategies(v); ++s)
      for (int t = 0; t < strategies(v) && allowed(v, s); ++t)
        if (t != s && allowed(v, t) && noWorse(v, t, s) && (t < s || !noWorse(v, s, t))) {
          disallow(v, s);
          ++pruned;
        }
    unpruned[v] = 0; // its own strategies dropped change nothing for the others
  }
  if (pruned > before)
    for (size_t r = 0; r < ignoredUse.size(); ++r)
      if (std::find(binding.begin(), binding.end(), int(r)) == binding.end())
        ignoredUse[r] = 1;
  return pruned - before;
}

int ReducedProblem::addToEdge(int a, int b, const std::vector<double> &pairCost, int through) {
  int na = strategies(a), nb = strategies(b);
  int low = std::min(a, b), high = std::max(a, b);
  auto it = edgeOfPair.find({low, high});
  int e;
  if (it != edgeOfPair.end() && edges[it->second].alive) {
    e = it->second;
    --degree[a]; // the edge through the eliminated node merges into this one
    --degree[b];
  } else {
    e = edges.size();
    edges.push_back({low, high, std::vector<double>(na * nb, 0.0)});
    edgeOfPair[{low, high}] = e;
    edgesOf[a].push_back(e);
    edgesOf[b].push_back(e);
  }
  PairEdge &edge = edges[e];
  edge.through = through;
  for (int s = 0; s < na; ++s)
    for (int t = 0; t < nb; ++t)
      edge.cost[a == low ? s * nb + t : t * na + s] += pairCost[s * nb + t];
  return e;
}

void ReducedProblem::eliminateLeaf(int v) {
  int e = aliveEdges(v, 1)[0];
  PairEdge &edge = edges[e];
  int w = otherEnd(edge, v);
  // At reduce()'s fixed point every allowed t has an allowed partner, so
  // the minimum is finite.
  for (int t = 0; t < strategies(w); ++t) {
    if (!allowed(w, t))
      continue;
    double best = kInf;
    for (int s = 0; s < strategies(v); ++s)
      if (allowed(v, s))
        best = std::min(best, cost[v][s] + pairCost(edge, v, s, t));
    cost[w][t] += best;
  }
  eliminations.push_back({v, e, -1});
  eliminatedNode[v] = 1;
  edge.alive = false;
  --degree[v];
  --degree[w];
  nominate(w);
}

bool ReducedProblem::eliminateSeries(int v) {
  std::vector<int> two = aliveEdges(v, 2);
  const PairEdge &first = edges[two[0]], &second = edges[two[1]];
  int u = otherEnd(first, v), w = otherEnd(second, v);
  long nu = allowedCount(u), nv = allowedCount(v), nw = allowedCount(w);
  auto existing = edgeOfPair.find({std::min(u, w), std::max(u, w)});
  bool merges = existing != edgeOfPair.end() && edges[existing->second].alive;
  if (!merges && nu * nw > std::max(kSeriesEntries, nv * (nu + nw)))
    return false;

  // M[a][c] = min_s first[a][s] + cost[v][s] + second[s][c]; +infinity where
  // a or c is not allowed. Every allowed a and c has some finite entry.
  int su = strategies(u), sw = strategies(w);
  std::vector<double> through(su * sw, kInf);
  for (int a = 0; a < su; ++a)
    for (int s = 0; s < strategies(v) && allowed(u, a); ++s) {
      double toV = pairCost(first, v, s, a) + cost[v][s];
      if (!allowed(v, s) || !(toV < kInf))
        continue;
      for (int c = 0; c < sw; ++c)
        if (allowed(w, c))
          through[a * sw + c] = std::min(through[a * sw + c], toV + pairCost(second, v, s, c));
    }
  eliminations.push_back({v, two[0], two[1]});
  eliminatedNode[v] = 1;
  edges[two[0]].alive = edges[two[1]].alive = false;
  degree[v] = 0;
  int e = addToEdge(u, w, through, v);
  nominate(u);
  nominate(w);
  reduceEdge(e);
  return true;
}

std::string ReducedProblem::eliminate(std::vector<int> bindingResources) {
  binding = std::move(bindingResources);
  int nodes = cost.size();
  while (infeasible.empty()) {
    candidates.clear();
    std::fill(nominated.begin(), nominated.end(), 0);
    for (int v = 0; v < nodes; ++v)
      nominate(v);
    while (infeasible.empty()) {
      int v;
      if (!candidates.empty()) {
        v = candidates.front();
        candidates.pop_front();
        nominated[v] = 0;
        if (eliminatedNode[v] || degree[v] == 0 || degree[v] > 2 || usesVary(v))
          continue;
        if (degree[v] == 2) { // after every leaf that is there now
          if (!inSeries[v]) {
            inSeries[v] = 1;
            seriesCandidates.push_back(v);
          }
          continue;
        }
        eliminateLeaf(v);
      } else if (!seriesCandidates.empty()) {
        v = seriesCandidates.front();
        seriesCandidates.pop_front();
        inSeries[v] = 0;
        if (eliminatedNode[v] || degree[v] != 2 || usesVary(v) || !eliminateSeries(v))
          continue;
      } else if (pruneDominated() == 0) {
        break;
      }
      propagate();
    }
    // Strategies dropped on the way may leave a resource that no longer
    // binds; then more nodes may go.
    size_t before = binding.size();
    auto stopsBinding = [&](int r) {
      const StrategyProblem::Resource &resource = problem.resources[r];
      return ResourceRange(resource, *this).mostSum <= resource.limit;
    };
    binding.erase(std::remove_if(binding.begin(), binding.end(), stopsBinding), binding.end());
    if (binding.size() == before)
      break;
    std::fill(unpruned.begin(), unpruned.end(), 1); // less use to compare
  }
  return infeasible;
}

void ReducedProblem::recover(std::vector<int> &choice) const {
  for (auto it = eliminations.rbegin(); it != eliminations.rend(); ++it) {
    int v = it->node;
    const PairEdge &first = edges[it->first];
    int u = otherEnd(first, v), w = -1;
    if (it->second >= 0)
      w = otherEnd(edges[it->second], v);
    int best = cheapest(v); // only when the neighbours' pair is not allowed
    double bestCost = kInf;
    for (int s = 0; s < strategies(v); ++s) {
      if (!allowed(v, s))
        continue;
      double c = pairCost(first, v, s, choice[u]) + cost[v][s];
      if (w >= 0)
        c += pairCost(edges[it->second], v, s, choice[w]);
      if (c < bestCost) {
        bestCost = c;
        best = s;
      }
    }
    choice[v] = best;
  }
}

std::string overLimit(const StrategyProblem::Resource &resource, double least) {
  return resource.name + ": the smallest choice needs " + number(least) + ", the limit is " +
         number(resource.limit);
}

/// The integer program over the coupled nodes, in CBC's column-major form.
/// Costs are shifted to start at zero per node and per edge (the constant
/// does not change the choice) and scaled (see kObjectiveScale); each
/// resource row counts use above each node's least, scaled so that its
/// largest coefficient is 1.
struct IntegerProgram {
  std::vector<std::vector<std::pair<int, double>>> columns; // (row, coefficient)
  std::vector<double> objective, rowLower, rowUpper;
  std::vector<char> integral;
  std::vector<std::vector<int>> xColumn; // [node][strategy]; -1: none
  // [reduced edge][strategy of a * strategies of b + strategy of b]: the
  // pair's column; -1: not allowed (empty for edges no longer alive)
  std::vector<std::vector<int>> eColumn;
  // A choice's cost is offset + secondsPerUnit * its objective.
  double offset = 0, secondsPerUnit = 1;

  IntegerProgram(const StrategyProblem &problem, const ReducedProblem &reduced,
                 const std::vector<ResourceRange> &ranges, const std::vector<int> &binding,
                 const std::vector<char> &coupled);

private:
  int addRow(double lower, double upper) {
    rowLower.push_back(lower);
    rowUpper.push_back(upper);
    return rowLower.size() - 1;
  }
  int addColumn(double cost, bool isIntegral) {
    columns.emplace_back();
    objective.push_back(cost);
    integral.push_back(isIntegral);
    return columns.size() - 1;
  }
};

IntegerProgram::IntegerProgram(const StrategyProblem &problem, const ReducedProblem &reduced,
                               const std::vector<ResourceRange> &ranges,
                               const std::vector<int> &binding, const std::vector<char> &coupled) {
  int nodes = reduced.cost.size();
  xColumn.resize(nodes);
  for (int v = 0; v < nodes; ++v) {
    if (!coupled[v])
      continue;
    double least = reduced.cost[v][reduced.cheapest(v)];
    offset += least;
    int row = addRow(1, 1);
    xColumn[v].assign(reduced.strategies(v), -1);
    for (int s = 0; s < reduced.strategies(v); ++s)
      if (reduced.allowed(v, s)) {
        xColumn[v][s] = addColumn(reduced.cost[v][s] - least, true);
        columns[xColumn[v][s]].push_back({row, 1.0});
      }
  }

  eColumn.resize(reduced.edges.size());
  for (size_t e = 0; e < reduced.edges.size(); ++e) {
    const ReducedProblem::PairEdge &edge = reduced.edges[e];
    if (!edge.alive)
      continue;
    int a = edge.a, b = edge.b, na = reduced.strategies(a), nb = reduced.strategies(b);
    eColumn[e].assign(size_t(na) * size_t(nb), -1);
    auto pairAllowed = [&](int s, int t) {
      return reduced.allowed(a, s) && reduced.allowed(b, t) && edge.cost[s * nb + t] < kInf;
    };
    double least = kInf;
    for (int s = 0; s < na; ++s)
      for (int t = 0; t < nb; ++t)
        if (pairAllowed(s, t))
          least = std::min(least, edge.cost[s * nb + t]);
    offset += least;
    // sum_t e[s][t] - x[a][s] = 0 and sum_s e[s][t] - x[b][t] = 0.
    std::vector<int> rowOfA(na, -1), rowOfB(nb, -1);
    for (int s = 0; s < na; ++s)
      if (reduced.allowed(a, s)) {
        rowOfA[s] = addRow(0, 0);
        columns[xColumn[a][s]].push_back({rowOfA[s], -1.0});
      }
    for (int t = 0; t < nb; ++t)
      if (reduced.allowed(b, t)) {
        rowOfB[t] = addRow(0, 0);
        columns[xColumn[b][t]].push_back({rowOfB[t], -1.0});
      }
    for (int s = 0; s < na; ++s)
      for (int t = 0; t < nb; ++t)
        if (pairAllowed(s, t)) {
          int column = addColumn(edge.cost[s * nb + t] - least, false);
          eColumn[e][size_t(s) * size_t(nb) + size_t(t)] = column;
          columns[column].push_back({rowOfA[s], 1.0});
          columns[column].push_back({rowOfB[t], 1.0});
        }
  }
  double largest = *std::max_element(objective.begin(), objective.end());
  if (largest > 0) {
    for (double &c : objective)
      c *= kObjectiveScale / largest;
    secondsPerUnit = largest / kObjectiveScale;
  }
  for (int v = 0; v < nodes; ++v)
    if (!coupled[v] && !reduced.eliminated(v))
      offset += reduced.cost[v][reduced.cheapest(v)];

  for (int r : binding) {
    const StrategyProblem::Resource &resource = problem.resources[r];
    const ResourceRange &range = ranges[r];
    double largestUse = 0; // > 0: the resource binds
    for (int v = 0; v < nodes; ++v)
      largestUse = std::max(largestUse, range.most[v] - range.least[v]);
    int row = addRow(-DBL_MAX, (resource.limit - range.leastSum) / largestUse);
    for (int v = 0; v < nodes; ++v)
      for (int s = 0; coupled[v] && s < reduced.strategies(v); ++s) {
        double above = resource.use[v][s] - range.least[v];
        if (reduced.allowed(v, s) && above != 0)
          columns[xColumn[v][s]].push_back({row, above / largestUse});
      }
  }
}

/// A choice known to be allowed and within the limits, to fall back on
/// when CBC's time runs out before it finds one: the cheapest strategy per
/// node, or for some binding resource the smallest use per node; the
/// cheaper of those that fit. Uncoupled nodes keep their cheapest strategy,
/// eliminated ones follow the rest. Empty when none fits. (As a MIP start
/// it did not make CBC finish sooner.)
std::vector<int> fallbackChoice(const StrategyProblem &problem, const ReducedProblem &reduced,
                                const std::vector<int> &binding, const std::vector<char> &coupled) {
  int nodes = reduced.cost.size();
  std::vector<std::vector<int>> candidates(1);
  for (int v = 0; v < nodes; ++v)
    candidates[0].push_back(reduced.cheapest(v));
  for (int r : binding) {
    const StrategyProblem::Resource &resource = problem.resources[r];
    std::vector<int> choice = candidates[0];
    for (int v = 0; v < nodes; ++v)
      for (int s = 0; coupled[v] && s < reduced.strategies(v); ++s) {
        auto key = [&](int k) { return std::make_pair(resource.use[v][k], reduced.cost[v][k]); };
        if (reduced.allowed(v, s) && key(s) < key(choice[v]))
          choice[v] = s;
      }
    candidates.push_back(choice);
  }
  std::vector<int> best;
  double bestCost = kInf;
  for (std::vector<int> &choice : candidates) {
    reduced.recover(choice);
    double cost = strategyCost(problem, choice);
    for (int r : binding) {
      double use = 0;
      for (int v = 0; v < nodes; ++v)
        use += problem.resources[r].use[v][choice[v]];
      if (use > problem.resources[r].limit)
        cost = kInf;
    }
    if (cost < bestCost) {
      best = choice;
      bestCost = cost;
    }
  }
  return best;
}

/// The program's matrix as CBC and Clp load it: column starts, row
/// indices, values; and each column's bounds (0 to 1).
struct ColumnMajor {
  std::vector<CoinBigIndex> starts{0};
  std::vector<int> rows;
  std::vector<double> values, lower, upper;

  explicit ColumnMajor(const IntegerProgram &program) {
    for (const auto &column : program.columns) {
      for (auto [row, value] : column) {
        rows.push_back(row);
        values.push_back(value);
      }
      starts.push_back(rows.size());
    }
    lower.assign(program.columns.size(), 0.0);
    upper.assign(program.columns.size(), 1.0);
  }
};

/// The program's linear relaxation, solved by Clp's dual simplex: its
/// objective bounds every choice's from below, and its columns are nearly
/// integral on sharding problems (a 96-layer GPT-3 stage under a tight
/// memory limit: 8 of 1,099 choices fractional).
struct Relaxation {
  bool solved = false, timedOut = false;
  double objective = 0; // in the program's units
  std::vector<double> columns;
};

struct ClpModelDeleter {
  void operator()(Clp_Simplex *model) const { Clp_deleteModel(model); }
};

Relaxation solveRelaxation(const IntegerProgram &program, double timeLimitSeconds) {
  ColumnMajor matrix(program);
  std::unique_ptr<Clp_Simplex, ClpModelDeleter> model(Clp_newModel());
  Clp_loadProblem(model.get(), program.columns.size(), program.rowLower.size(),
                  matrix.starts.data(), matrix.rows.data(), matrix.values.data(),
                  matrix.lower.data(), matrix.upper.data(), program.objective.data(),
                  program.rowLower.data(), program.rowUpper.data());
  Clp_setLogLevel(model.get(), 0);
  if (std::isfinite(timeLimitSeconds))
    Clp_setMaximumSeconds(model.get(), std::max(timeLimitSeconds, 0.01));
  Clp_dual(model.get(), 0);
  Relaxation relaxation;
  relaxation.timedOut = Clp_status(model.get()) == 3; // stopped on its time (no iteration limit)
  if (Clp_status(model.get()) != 0) // not proven optimal: no bound
    return relaxation;
  relaxation.solved = true;
  relaxation.objective = Clp_objectiveValue(model.get());
  const double *columns = Clp_getColSolution(model.get());
  relaxation.columns.assign(columns, columns + program.columns.size());
  return relaxation;
}

/// A choice of the coupled nodes near the relaxation's, made to fit the
/// binding limits and improved by single changes. A change of node `v` to
/// strategy `t` is costed with its edges to its neighbours' current
/// strategies (costAt), so it moves the whole choice's cost by exactly
/// the difference.
class RoundedChoice {
public:
  RoundedChoice(const StrategyProblem &problem, const ReducedProblem &reduced,
                const IntegerProgram &program, const std::vector<int> &binding,
                const std::vector<char> &coupled, const std::vector<double> &columns,
                std::vector<int> start)
      : problem(problem), reduced(reduced), program(program), binding(binding),
        coupled(coupled), columns(columns), choice(std::move(start)) {}

  /// Rounds, repairs and improves; the whole choice (nodes outside the
  /// program keep the start's strategy, eliminated ones follow their
  /// neighbours), or empty when no repair fits the limits.
  std::vector<int> make(bool alongEdges) {
    round(alongEdges);
    used.assign(binding.size(), 0.0);
    for (size_t i = 0; i < binding.size(); ++i)
      for (size_t v = 0; v < choice.size(); ++v)
        used[i] += resource(i).use[v][choice[v]];
    if (!repair())
      return {};
    improve();
    reduced.recover(choice);
    return choice;
  }

private:
  const StrategyProblem::Resource &resource(size_t i) const {
    return problem.resources[binding[i]];
  }
  double weight(int v, int s) const {
    int column = program.xColumn[v][s];
    return column < 0 ? -1.0 : columns[column];
  }
  double costAt(int v, int t) const {
    double c = reduced.cost[v][t];
    for (int e : reduced.edgesOf[v]) {
      const ReducedProblem::PairEdge &edge = reduced.edges[e];
      if (!edge.alive)
        continue;
      int nb = reduced.strategies(edge.b);
      c += v == edge.a ? edge.cost[t * nb + choice[edge.b]] : edge.cost[choice[edge.a] * nb + t];
    }
    return c;
  }
  void move(int v, int t) {
    for (size_t i = 0; i < binding.size(); ++i)
      used[i] += resource(i).use[v][t] - resource(i).use[v][choice[v]];
    choice[v] = t;
  }

  /// Each node's largest column; or, `alongEdges`, breadth-first from the
  /// most certain node of each component, a node next to decided ones
  /// takes the strategy with the most weight paired with theirs (its edge
  /// columns), so that where the relaxation mixes two consistent splits of
  /// a chain, the rounding keeps one whole.
  void round(bool alongEdges) {
    int nodes = reduced.cost.size();
    std::vector<int> order;
    std::vector<double> certain(nodes, 0);
    for (int v = 0; v < nodes; ++v)
      if (coupled[v]) {
        order.push_back(v);
        for (int s = 0; s < reduced.strategies(v); ++s)
          certain[v] = std::max(certain[v], weight(v, s));
      }
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      return certain[a] != certain[b] ? certain[a] > certain[b] : a < b;
    });
    std::vector<char> queued(nodes, 0), chosen(nodes, 0);
    std::deque<int> queue;
    for (int root : order) {
      if (queued[root])
        continue;
      queued[root] = 1;
      queue.push_back(root);
      while (!queue.empty()) {
        int v = queue.front();
        queue.pop_front();
        members.push_back(v);
        std::vector<double> paired(reduced.strategies(v), 0.0);
        for (int e : reduced.edgesOf[v]) {
          const ReducedProblem::PairEdge &edge = reduced.edges[e];
          int w = edge.a == v ? edge.b : edge.a;
          if (!alongEdges || !edge.alive || !chosen[w])
            continue;
          size_t nb = reduced.strategies(edge.b);
          for (int t = 0; t < reduced.strategies(v); ++t) {
            int column = program.eColumn[e][v == edge.a ? t * nb + choice[w] : choice[w] * nb + t];
            paired[t] += column < 0 ? 0.0 : columns[column];
          }
        }
        int best = -1;
        for (int t = 0; t < reduced.strategies(v); ++t)
          if (program.xColumn[v][t] >= 0 &&
              (best < 0 ||
               std::make_pair(paired[t], weight(v, t)) > std::make_pair(paired[best], weight(v, best))))
            best = t;
        if (best >= 0)
          choice[v] = best;
        chosen[v] = 1;
        for (int e : reduced.edgesOf[v]) {
          const ReducedProblem::PairEdge &edge = reduced.edges[e];
          int w = edge.a == v ? edge.b : edge.a;
          if (edge.alive && coupled[w] && !queued[w]) {
            queued[w] = 1;
            queue.push_back(w);
          }
        }
      }
    }
  }

  /// While a limit is exceeded (the most, relative to its limit, first):
  /// the change that takes its excess down at the least added cost per
  /// unit (a change that also saves cost, first). False when none is left.
  bool repair() {
    // Each change lowers the worst excess; several resources could trade
    // excess back and forth, so the changes are bounded.
    for (size_t changes = 0; changes <= 8 * members.size() + 8; ++changes) {
      size_t worst = binding.size();
      auto excess = [&](size_t i) { return (used[i] - resource(i).limit) / resource(i).limit; };
      for (size_t i = 0; i < binding.size(); ++i)
        if (excess(i) > 0 && (worst == binding.size() || excess(i) > excess(worst)))
          worst = i;
      if (worst == binding.size())
        return true;
      double over = used[worst] - resource(worst).limit;
      int bestNode = -1, bestStrategy = -1;
      double bestRate = kInf;
      for (int v : members) {
        double now = costAt(v, choice[v]);
        for (int t = 0; t < reduced.strategies(v); ++t) {
          double saved = resource(worst).use[v][choice[v]] - resource(worst).use[v][t];
          if (!reduced.allowed(v, t) || saved <= 0)
            continue;
          double rate = (costAt(v, t) - now) / std::min(saved, over);
          if (rate < bestRate) {
            bestRate = rate;
            bestNode = v;
            bestStrategy = t;
          }
        }
      }
      if (bestNode < 0)
        return false;
      move(bestNode, bestStrategy);
    }
    return false;
  }

  /// Sweeps over the nodes, each moved to its cheapest strategy that keeps
  /// within the limits, until a sweep lowers the cost no more (or a bound
  /// on sweeps, against rounding noise).
  void improve() {
    for (int sweep = 0; sweep < 100; ++sweep) {
      bool improved = false;
      for (int v : members) {
        double now = costAt(v, choice[v]), bestCost = now;
        int best = choice[v];
        for (int t = 0; t < reduced.strategies(v); ++t) {
          if (!reduced.allowed(v, t) || t == choice[v])
            continue;
          bool fits = true;
          for (size_t i = 0; i < binding.size() && fits; ++i)
            fits = used[i] + resource(i).use[v][t] - resource(i).use[v][choice[v]] <=
                   resource(i).limit;
          double c = fits ? costAt(v, t) : kInf;
          if (c < bestCost - 1e-12 * std::abs(now)) {
            bestCost = c;
            best = t;
          }
        }
        if (best != choice[v]) {
          move(v, best);
          improved = true;
        }
      }
      if (!improved)
        return;
    }
  }

  const StrategyProblem &problem;
  const ReducedProblem &reduced;
  const IntegerProgram &program;
  const std::vector<int> &binding;
  const std::vector<char> &coupled;
  const std::vector<double> &columns; // the relaxation's
  std::vector<int> choice;
  std::vector<int> members; // the coupled nodes, in rounding order
  std::vector<double> used; // per binding resource
};

struct CbcModelDeleter {
  void operator()(Cbc_Model *model) const { Cbc_deleteModel(model); }
};

/// What CBC made of the program.
struct CbcOutcome {
  std::vector<double> columns; // the best solution; empty when none was found
  bool optimal = false, infeasible = false, timedOut = false;
  int nodes = 0;
  double bound = -kInf; // the objective's best possible value, in the program's units
};

/// CBC on the program; `start`, when not empty, is a choice within the
/// limits to start from (its x columns at 1).
CbcOutcome runCbc(const IntegerProgram &program, SolveLimits limits, double costBelow,
                  double relativeGap, const std::vector<int> &start) {
  ColumnMajor matrix(program);
  int columnCount = program.columns.size(), rowCount = program.rowLower.size();
  std::unique_ptr<Cbc_Model, CbcModelDeleter> model(Cbc_newModel());
  Cbc_loadProblem(model.get(), columnCount, rowCount, matrix.starts.data(), matrix.rows.data(),
                  matrix.values.data(), matrix.lower.data(), matrix.upper.data(),
                  program.objective.data(), program.rowLower.data(), program.rowUpper.data());
  if (!start.empty()) {
    std::vector<int> ones;
    for (size_t v = 0; v < program.xColumn.size(); ++v)
      if (!program.xColumn[v].empty() && program.xColumn[v][size_t(start[v])] >= 0)
        ones.push_back(program.xColumn[v][size_t(start[v])]);
    std::vector<double> values(ones.size(), 1.0);
    Cbc_setMIPStartI(model.get(), ones.size(), ones.data(), values.data());
  }
  for (int column = 0; column < columnCount; ++column)
    if (program.integral[column])
      Cbc_setInteger(model.get(), column);
  // Quiet (CbcMain1 prints at level 1 and up); single-threaded, so the
  // search is deterministic; the time limit on the wall clock.
  Cbc_setLogLevel(model.get(), 0);
  Cbc_setParameter(model.get(), "log", "0");
  Cbc_setParameter(model.get(), "slog", "0");
  Cbc_setParameter(model.get(), "timeMode", "elapsed");
  // CBC 2.10's preprocessing occasionally returned a worse choice marked
  // optimal under a binding resource (7 in 160,000 random problems checked
  // by brute force); without it every one was right, at the same speed.
  Cbc_setParameter(model.get(), "preprocess", "off");
  // The relaxations here are nearly integral (a GPT-3 step: 2 of 1,013
  // choices fractional), so the feasibility pump's default 30 passes and
  // probing cuts spent most of a 96-layer search finding what rounding and
  // a few nodes of branching find anyway (bench/README.md).
  Cbc_setParameter(model.get(), "passF", "1");
  Cbc_setParameter(model.get(), "probing", "off");
  // Clp's presolve of the root LP cost more than it saved: a 4-layer GPT's
  // search on 8 A100s took 7.8 s with it and 1.3 s without, the same plan.
  Cbc_setParameter(model.get(), "presolve", "off");
  if (!start.empty()) {
    // From the rounded start, plain branching on the LP's bound did best
    // (docs/sharding.md, "How long CBC searches"): cuts, strong branching
    // and the primal heuristics took 90% of a tight-memory 4-layer GPT's
    // 5 s at the root and a few nodes, for choices 2-3% worse than 200
    // nodes without them reach in 1.5-4 s.
    Cbc_setParameter(model.get(), "cuts", "off");
    Cbc_setParameter(model.get(), "strong", "0");
    Cbc_setParameter(model.get(), "heuristicsOnOff", "off");
  }
  if (std::isfinite(costBelow)) {
    char cutoff[32];
    std::snprintf(cutoff, sizeof cutoff, "%.17g",
                  (costBelow - program.offset) / program.secondsPerUnit);
    Cbc_setParameter(model.get(), "cutoff", cutoff);
  }
  if (relativeGap > 0)
    Cbc_setParameter(model.get(), "ratioGap", number(relativeGap).c_str());
  int nodes = limits.nodes;
  if (std::isfinite(limits.nodeColumns)) // larger programs' nodes cost more: fewer of them
    nodes = int(std::min<double>(nodes, std::max<double>(kLeastNodes,
                                                         limits.nodeColumns / columnCount)));
  if (nodes < std::numeric_limits<int>::max())
    Cbc_setParameter(model.get(), "maxNodes", std::to_string(std::max(nodes, 0)).c_str());
  bool limited = std::isfinite(limits.seconds);
  if (limited)
    Cbc_setParameter(model.get(), "seconds", number(std::max(limits.seconds, 0.01)).c_str());
  auto began = std::chrono::steady_clock::now();
  Cbc_solve(model.get());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();

  CbcOutcome outcome;
  outcome.nodes = Cbc_getNodeCount(model.get());
  // CBC 2.10 may stop at the time limit with status "infeasible" and no
  // time-limit flag; its clock starts after ours.
  outcome.timedOut =
      Cbc_isSecondsLimitReached(model.get()) || (limited && seconds >= 0.99 * limits.seconds);
  bool outOfTime = outcome.timedOut || Cbc_isNodeLimitReached(model.get());
  outcome.optimal = Cbc_isProvenOptimal(model.get()) && !outOfTime;
  outcome.bound = Cbc_getBestPossibleObjValue(model.get());
  // Stopped within the relative gap: "optimal" to CBC, not proven so.
  if (double best = Cbc_getObjValue(model.get());
      outcome.optimal && relativeGap > 0 &&
      best - outcome.bound > 1e-9 * std::max(1.0, std::abs(best)))
    outcome.optimal = false;
  outcome.infeasible = Cbc_isProvenInfeasible(model.get()) && !outOfTime;
  if (const double *best = Cbc_bestSolution(model.get()))
    outcome.columns.assign(best, best + columnCount);
  return outcome;
}

/// The strategy per coupled node that `columns` sets; false when some node
/// has none at 1.
bool readChoice(const IntegerProgram &program, const std::vector<double> &columns,
                std::vector<int> &choice) {
  for (size_t v = 0; v < choice.size(); ++v) {
    int best = -1;
    for (size_t s = 0; s < program.xColumn[v].size(); ++s) {
      int column = program.xColumn[v][s];
      if (column >= 0 && (best < 0 || columns[column] > columns[program.xColumn[v][best]]))
        best = s;
    }
    if (best >= 0 && columns[program.xColumn[v][best]] < 0.5)
      return false;
    if (best >= 0)
      choice[v] = best;
  }
  return true;
}

} // namespace

double strategyCost(const StrategyProblem &problem, const std::vector<int> &choice) {
  double total = 0;
  for (size_t v = 0; v < problem.nodes.size(); ++v)
    total += problem.nodes[v].cost[choice[v]];
  for (const StrategyProblem::Edge &edge : problem.edges)
    total += edge.cost[choice[edge.from] * problem.nodes[edge.to].cost.size() + choice[edge.to]];
  return std::isnan(total) ? kInf : total;
}

namespace {
/// solveStrategies without the final check against `costBelow` (which CBC
/// only uses to stop early).
StrategySolution solveUncut(const StrategyProblem &problem, SolveLimits limits,
                            double costBelow, double relativeGap, bool roundingOnly) {
  StrategySolution solution;
  solution.message = describeInput(problem);
  if (!solution.message.empty())
    return solution;

  ReducedProblem reduced(problem);
  std::string infeasible = reduced.reduce();
  auto measure = [&] {
    std::vector<ResourceRange> ranges;
    for (const StrategyProblem::Resource &resource : problem.resources)
      ranges.emplace_back(resource, reduced);
    return ranges;
  };
  auto bindingOf = [&](const std::vector<ResourceRange> &ranges) {
    std::vector<int> binding;
    for (size_t r = 0; r < ranges.size(); ++r)
      if (ranges[r].mostSum > problem.resources[r].limit)
        binding.push_back(r);
    return binding;
  };
  std::vector<ResourceRange> ranges = measure();
  for (size_t r = 0; r < ranges.size(); ++r) {
    solution.minimumUse.push_back(ranges[r].leastSum);
    if (ranges[r].leastSum > problem.resources[r].limit)
      infeasible +=
          (infeasible.empty() ? "" : "; ") + overLimit(problem.resources[r], ranges[r].leastSum);
  }
  if (infeasible.empty()) {
    // Elimination may drop more strategies: both measures are lower bounds,
    // keep the larger. An eliminated node's use of a binding resource is
    // the same for its every strategy, so the resource rows below count it
    // in their least sums, as if taken off the limit.
    infeasible = reduced.eliminate(bindingOf(ranges));
    ranges = measure();
    for (size_t r = 0; r < ranges.size(); ++r) {
      if (!reduced.useIgnored(r)) // else only the first measure is a bound
        solution.minimumUse[r] = std::max(solution.minimumUse[r], ranges[r].leastSum);
      if (solution.minimumUse[r] > problem.resources[r].limit)
        infeasible += (infeasible.empty() ? "" : "; ") +
                      overLimit(problem.resources[r], solution.minimumUse[r]);
    }
  }
  if (!infeasible.empty()) {
    solution.message = infeasible;
    return solution;
  }
  solution.eliminated = reduced.eliminatedCount();
  solution.pruned = reduced.prunedCount();

  // A node joins the program when an edge still couples it or its use of a
  // binding resource depends on its strategy; the others take their
  // cheapest strategy, or follow their neighbours' when eliminated.
  int nodes = problem.nodes.size();
  std::vector<int> binding = bindingOf(ranges);
  std::vector<char> coupled(nodes, 0);
  for (const ReducedProblem::PairEdge &edge : reduced.edges)
    if (edge.alive)
      coupled[edge.a] = coupled[edge.b] = 1;
  for (int r : binding)
    for (int v = 0; v < nodes; ++v)
      coupled[v] |= ranges[r].most[v] > ranges[r].least[v];
  for (int v = 0; v < nodes; ++v)
    solution.choice.push_back(reduced.cheapest(v));
  if (std::none_of(coupled.begin(), coupled.end(), [](char c) { return c; })) {
    reduced.recover(solution.choice);
    solution.feasible = solution.optimal = true;
    solution.cost = solution.bound = strategyCost(problem, solution.choice);
    return solution;
  }

  IntegerProgram program(problem, reduced, ranges, binding, coupled);
  solution.variables = program.columns.size();
  solution.constraints = program.rowLower.size();
  // Small programs are solved exactly: they take CBC well under a second.
  double gap = program.columns.size() >= kGapColumns ? relativeGap : 0.0;
  auto began = std::chrono::steady_clock::now();
  auto left = [&] {
    SolveLimits rest = limits;
    rest.seconds -= std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    return rest;
  };
  // The relaxation first: its bound, and a choice rounded from it that is
  // often within the gap of it (then CBC is not needed), else CBC's start.
  std::vector<int> rounded;
  double roundedCost = kInf, relaxedBound = -kInf;
  Relaxation relaxation = solveRelaxation(program, limits.seconds);
  solution.timedOut = relaxation.timedOut;
  if (relaxation.solved) {
    relaxedBound = program.offset + program.secondsPerUnit * relaxation.objective;
    // Both roundings, the cheaper kept: each wins on some programs.
    for (bool alongEdges : {false, true}) {
      std::vector<int> choice = RoundedChoice(problem, reduced, program, binding, coupled,
                                              relaxation.columns, solution.choice)
                                    .make(alongEdges);
      double cost = choice.empty() ? kInf : strategyCost(problem, choice);
      if (cost < roundedCost) {
        rounded = std::move(choice);
        roundedCost = cost;
      }
    }
    if (relaxedBound >= costBelow) {
      solution.choice.clear();
      solution.message = "no choice costs less than " + number(costBelow);
      return solution;
    }
    // Within the gap (equal to the bound up to rounding in the last
    // digits: optimal), or not but CBC left to the caller: the rounding.
    bool equal = roundedCost - relaxedBound <= 1e-9 * std::abs(roundedCost);
    bool withinGap = equal || roundedCost - relaxedBound <= gap * roundedCost;
    if (std::isfinite(roundedCost) && (withinGap || roundingOnly)) {
      solution.choice = rounded;
      solution.feasible = true;
      solution.optimal = equal;
      solution.cost = roundedCost;
      solution.bound = std::min(roundedCost, relaxedBound);
      solution.solvedByRounding = withinGap;
      solution.roundedOnly = !withinGap;
      return solution;
    }
  }
  // CBC starts from the rounded choice (its program's nodes only).
  CbcOutcome outcome = runCbc(program, left(), costBelow, gap, rounded);
  solution.nodes = outcome.nodes;
  solution.timedOut |= outcome.timedOut;
  std::vector<int> fallback = fallbackChoice(problem, reduced, binding, coupled);
  if (!rounded.empty() && (fallback.empty() || roundedCost < strategyCost(problem, fallback)))
    fallback = rounded;
  bool found = !outcome.columns.empty() && readChoice(program, outcome.columns, solution.choice);
  if (found) {
    reduced.recover(solution.choice);
    solution.feasible = true;
    solution.optimal = outcome.optimal;
  }
  if (!fallback.empty() &&
      (!found || strategyCost(problem, fallback) < strategyCost(problem, solution.choice))) {
    solution.choice = fallback; // CBC ran out of time before it did better
    solution.feasible = true;
    solution.optimal = false;
  }
  if (!solution.feasible) {
    solution.choice.clear();
    if (outcome.infeasible && std::isfinite(costBelow)) {
      solution.message = "no choice costs less than " + number(costBelow);
    } else if (outcome.infeasible) {
      solution.message = "no choice of strategies has every edge's pair allowed and meets every "
                         "resource limit at once";
      for (int r : binding)
        solution.message += (r == binding.front() ? " (" : "; ") +
                            overLimit(problem.resources[r], ranges[r].leastSum);
      if (!binding.empty())
        solution.message += ")";
    } else {
      solution.message = outcome.timedOut ? "CBC found no choice within the time limit of " +
                                                number(limits.seconds) + " s"
                                          : "CBC found no choice in " +
                                                std::to_string(outcome.nodes) + " nodes";
    }
    return solution;
  }
  solution.cost = strategyCost(problem, solution.choice);
  // CBC's bound is on the program's objective; choices outside the program
  // are at their cheapest, as in `offset`.
  solution.bound = solution.optimal
                       ? solution.cost
                       : std::min(solution.cost,
                                  std::max(relaxedBound,
                                           program.offset + program.secondsPerUnit *
                                                                std::max(0.0, outcome.bound)));
  return solution;
}
} // namespace

StrategySolution solveStrategies(const StrategyProblem &problem, SolveLimits limits,
                                 double costBelow, double relativeGap, bool roundingOnly) {
  StrategySolution solution = solveUncut(problem, limits, costBelow, relativeGap, roundingOnly);
  if (solution.feasible && !(solution.cost < costBelow)) {
    solution.feasible = solution.optimal = false;
    solution.choice.clear();
  }
  if (!solution.feasible && solution.message.empty())
    solution.message = "no choice costs less than " + number(costBelow);
  return solution;
}

} // namespace dtc::search
