//===- StrategyIlp.h - one strategy per node, as an ILP ---------*- C++ -*-===//
//
// Alpa's intra-operator formulation: every node (op) picks one of its
// sharding strategies; a node's strategy costs compute and communication
// time, an edge's pair of strategies costs the resharding between them, and
// resources (per-device memory) bound the sum of what the chosen strategies
// use. The problem is made small first (disallowed and dominated strategies
// dropped, edges merged, edges to a decided node folded into its
// neighbour's costs, nodes with one or two neighbours eliminated by dynamic
// programming) and
// then solved: by per-node minima when nothing couples the nodes any more;
// by rounding the linear relaxation (Clp) when that choice meets the
// relaxation's bound, or is within the gap asked for; else by CBC from that
// choice. Eliminated nodes' choices follow from what is left.
//
// Plain data in and out, no MLIR: the caller maps ops to nodes.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_SEARCH_STRATEGYILP_H
#define DTC_COMPILER_SEARCH_STRATEGYILP_H

#include <limits>
#include <string>
#include <vector>

namespace dtc::search {

struct StrategyProblem {
  struct Node {
    std::vector<double> cost; // seconds per strategy; +infinity: not allowed
  };
  struct Edge {
    int from = 0, to = 0; // from == to: only the diagonal (s, s) counts
    // Row-major [strategy of from][strategy of to]; +infinity: the pair is
    // not allowed. Edges between the same two nodes add up.
    std::vector<double> cost;
  };
  struct Resource {
    std::string name;
    double limit = 0;
    // use[node][strategy]; the chosen strategies' sum must be <= limit. An
    // infinite use disallows the strategy.
    std::vector<std::vector<double>> use;
  };
  std::vector<Node> nodes;
  std::vector<Edge> edges;
  std::vector<Resource> resources;
};

struct StrategySolution {
  // Whether `choice` holds a choice that is allowed and within every limit.
  // False with a `message`: malformed input, proven infeasible, or the time
  // limit ran out before any choice that fits was known.
  bool feasible = false;
  std::vector<int> choice; // a strategy per node, when feasible
  double cost = 0;         // strategyCost(problem, choice)
  bool optimal = false;    // proven optimal (false when a limit cut CBC short)
  double bound = 0;        // no choice costs less (CBC's best bound; `cost` when optimal)
  // Per resource: each node's least use among the strategies that can take
  // part in an allowed choice, summed (the least any choice reaches, when
  // disallowed pairs do not couple nodes further); for "no plan fits: the
  // smallest needs X". Empty when the input is malformed.
  std::vector<double> minimumUse;
  std::string message;                // why not feasible, in words
  int variables = 0, constraints = 0; // size of the integer program CBC saw; 0 without CBC
  // Nodes removed by leaf or series elimination before CBC (those left
  // without neighbours simply take their cheapest strategy and are not
  // counted).
  int eliminated = 0;
  // Strategies dropped because another of the same node is no worse in
  // cost, in use of every binding resource and paired with every strategy
  // of every neighbour, on nodes that a neighbour or their use of a binding
  // resource still coupled.
  int pruned = 0;
  // The choice rounded from the linear relaxation was within the gap of
  // the relaxation's bound (or equal to it), so CBC did not run.
  bool solvedByRounding = false;
  // `roundingOnly` was asked for and the rounded choice is returned
  // without CBC, outside the gap of the relaxation's bound (`bound`).
  bool roundedOnly = false;
  int nodes = 0; // branch-and-bound nodes CBC searched
  // The seconds of SolveLimits stopped CBC or the relaxation before they
  // finished or spent their nodes: the choice may differ on a machine
  // more or less busy.
  bool timedOut = false;
};

/// How much search CBC may spend on a program. The budget is counted in
/// branch-and-bound nodes, so the same problem gets the same choice
/// however busy the machine is; the seconds are a safety net for programs
/// whose nodes are slow, and a choice they cut short says so (timedOut).
struct SolveLimits {
  int nodes = std::numeric_limits<int>::max();
  double seconds = 60;
  /// Nodes times the program's columns: a node of a larger program
  /// re-solves a larger LP, so it gets fewer (nodeColumns / columns, at
  /// least kLeastNodes, at most `nodes`), still counted, not timed.
  double nodeColumns = std::numeric_limits<double>::infinity();
};

/// The fewest nodes SolveLimits::nodeColumns leaves a program.
inline constexpr int kLeastNodes = 20;

/// Programs with at least this many columns are solved to the relative
/// gap given to solveStrategies; smaller ones exactly.
inline constexpr size_t kGapColumns = 10000;

/// The cheapest choice of one strategy per node. Deterministic unless the
/// limits' seconds stop CBC (single-threaded, quiet); CBC checks its time
/// between phases and may overrun short limits by a second or so. Stopped
/// early by either limit, it returns the best choice found (optimal =
/// false): CBC's, or each node at its cheapest or least-using strategy
/// when that fits.
/// Only choices that cost less than `costBelow` are wanted: when none does,
/// the solution is not feasible and says so (CBC stops as soon as its bound
/// shows it, which is how a caller comparing several problems skips the
/// ones that cannot win). A `relativeGap` above 0 lets CBC stop once its
/// best choice is within that fraction of its bound (not `optimal` then,
/// unless the two meet), on programs of 10,000 columns or more; smaller
/// ones are solved exactly. `roundingOnly` returns the relaxation's
/// rounded choice even outside the gap (`roundedOnly`, with the
/// relaxation's bound), CBC running only when rounding finds no choice: a
/// caller comparing several problems rounds each first, then runs CBC on
/// those whose bound could beat the best rounded choice.
StrategySolution solveStrategies(const StrategyProblem &problem, SolveLimits limits = {},
                                 double costBelow = std::numeric_limits<double>::infinity(),
                                 double relativeGap = 0, bool roundingOnly = false);

/// The objective of `choice` (one valid strategy index per node):
/// +infinity when a strategy or pair is not allowed; ignores the limits.
double strategyCost(const StrategyProblem &problem, const std::vector<int> &choice);

} // namespace dtc::search

#endif // DTC_COMPILER_SEARCH_STRATEGYILP_H
