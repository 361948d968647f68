//===- StrategyIlpTest.cpp - the strategy program against brute force -----===//
#include "compiler/search/StrategyIlp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <limits>
#include <random>

using namespace dtc::search;

namespace {

/// A uniform draw from [0, hi).
double uniform(std::mt19937 &rng, double hi) { return hi * double(rng()) / 4294967296.0; }

constexpr double kInf = std::numeric_limits<double>::infinity();

/// Adds `count` nodes of `strategies` strategies to `problem`, each costing
/// up to 1 ms and using `drawUse()` of `memory`; adds to `least` and `most`
/// the nodes' least and most use.
template <typename Draw>
void addRandomNodes(StrategyProblem &problem, StrategyProblem::Resource &memory, int count,
                    int strategies, std::mt19937 &rng, Draw drawUse, double &least,
                    double &most) {
  for (int v = 0; v < count; ++v) {
    StrategyProblem::Node node;
    std::vector<double> use;
    for (int s = 0; s < strategies; ++s) {
      node.cost.push_back(uniform(rng, 1e-3));
      use.push_back(drawUse());
    }
    least += *std::min_element(use.begin(), use.end());
    most += *std::max_element(use.begin(), use.end());
    problem.nodes.push_back(node);
    memory.use.push_back(use);
  }
}

/// The best choice by trying every one; cost +infinity when none is allowed
/// within the limits.
struct Enumerated {
  std::vector<int> choice;
  double cost = kInf;
  double leastUse = kInf; // of resource 0, over the allowed choices
};

std::vector<double> resourceUse(const StrategyProblem &problem, const std::vector<int> &choice) {
  std::vector<double> use;
  for (const StrategyProblem::Resource &resource : problem.resources) {
    double sum = 0;
    for (size_t v = 0; v < choice.size(); ++v)
      sum += resource.use[v][choice[v]];
    use.push_back(sum);
  }
  return use;
}

Enumerated enumerate(const StrategyProblem &problem) {
  Enumerated best;
  std::vector<int> choice(problem.nodes.size(), 0);
  while (true) {
    double cost = strategyCost(problem, choice);
    std::vector<double> use = resourceUse(problem, choice);
    if (cost < kInf && !use.empty())
      best.leastUse = std::min(best.leastUse, use[0]);
    bool fits = true;
    for (size_t r = 0; r < use.size(); ++r)
      fits = fits && use[r] <= problem.resources[r].limit;
    if (fits && cost < best.cost) {
      best.cost = cost;
      best.choice = choice;
    }
    size_t v = 0;
    while (v < choice.size() && ++choice[v] == int(problem.nodes[v].cost.size()))
      choice[v++] = 0;
    if (v == choice.size())
      return best;
  }
}

/// Each node's cheapest strategy on its own.
std::vector<int> greedy(const StrategyProblem &problem) {
  std::vector<int> choice;
  for (const StrategyProblem::Node &node : problem.nodes)
    choice.push_back(std::min_element(node.cost.begin(), node.cost.end()) - node.cost.begin());
  return choice;
}

/// `solve`'s result, and the processor seconds it took (steadier than the
/// wall clock on a busy machine).
template <typename Solve> StrategySolution timed(Solve solve, double &seconds) {
  std::clock_t start = std::clock();
  StrategySolution solution = solve();
  seconds = double(std::clock() - start) / CLOCKS_PER_SEC;
  return solution;
}

void expectNear(double actual, double expected) {
  EXPECT_NEAR(actual, expected, 1e-9 * (1 + std::fabs(expected)));
}

/// Gives a random node a copy of one of its strategies, then makes the copy
/// or the original (at random) no better than the other: a cost, a use of
/// every resource and pair costs no lower, sometimes all equal.
void addDominatedStrategy(StrategyProblem &problem, std::mt19937 &rng) {
  auto below = [&](int n) { return int(rng() % uint32_t(n)); };
  auto more = [&] { return below(2) ? 0.0 : 1 + below(3); };
  int v = below(problem.nodes.size());
  int n = problem.nodes[v].cost.size(), original = below(n);
  int worse = below(2) ? n : original;
  std::vector<double> &cost = problem.nodes[v].cost;
  cost.push_back(cost[original]);
  cost[worse] += more();
  for (StrategyProblem::Resource &resource : problem.resources) {
    std::vector<double> &use = resource.use[v];
    use.push_back(use[original]);
    use[worse] += more();
  }
  for (StrategyProblem::Edge &edge : problem.edges) {
    if (edge.from != v && edge.to != v)
      continue;
    int columns = problem.nodes[edge.to].cost.size(); // with the copy when v is the end
    std::vector<double> grown;
    if (edge.from == v) { // a row more
      grown = edge.cost;
      grown.insert(grown.end(), edge.cost.begin() + original * columns,
                   edge.cost.begin() + (original + 1) * columns);
      for (int t = 0; t < columns; ++t)
        grown[worse * columns + t] += more();
    } else { // a column more
      for (size_t row = 0; row < edge.cost.size() / (columns - 1); ++row) {
        grown.insert(grown.end(), edge.cost.begin() + row * (columns - 1),
                     edge.cost.begin() + (row + 1) * (columns - 1));
        grown.push_back(grown[row * columns + original]);
        grown[row * columns + worse] += more();
      }
    }
    edge.cost = grown;
  }
}

TEST(StrategyIlp, ChainBeatsGreedy) {
  // Each node alone prefers strategy 0; two neighbours both at 0 pay 5.
  StrategyProblem problem;
  problem.nodes = {{{0, 1}}, {{0, 1}}, {{0, 1.5}}};
  problem.edges = {{0, 1, {5, 0, 0, 0}}, {1, 2, {5, 0, 0, 0.25}}};
  Enumerated best = enumerate(problem);
  ASSERT_EQ(best.choice, (std::vector<int>{0, 1, 0}));
  ASSERT_GT(strategyCost(problem, greedy(problem)), best.cost + 1);

  StrategySolution solution = solveStrategies(problem);
  ASSERT_TRUE(solution.feasible) << solution.message;
  EXPECT_TRUE(solution.optimal);
  EXPECT_EQ(solution.choice, best.choice);
  expectNear(solution.cost, best.cost);
  EXPECT_EQ(solution.variables, 0); // a chain: eliminated from its ends, no CBC
  EXPECT_EQ(solution.eliminated, 2);
  EXPECT_TRUE(solution.message.empty());

  // Memory that depends on every node's strategy keeps them all for CBC;
  // the best choice uses 1, the most 3.
  problem.resources = {{"memory", 1, {{0, 1}, {0, 1}, {0, 1}}}};
  solution = solveStrategies(problem);
  ASSERT_TRUE(solution.feasible) << solution.message;
  EXPECT_TRUE(solution.optimal);
  EXPECT_EQ(solution.choice, best.choice);
  EXPECT_GT(solution.variables, 0);
  EXPECT_EQ(solution.eliminated, 0);
}

TEST(StrategyIlp, RandomProblemsMatchBruteForce) {
  // Random graphs, and every fourth round a ring: no leaves there, so
  // elimination has to start in series. Some nodes use the same memory in
  // every strategy and may be eliminated even where the limit binds.
  std::mt19937 rng(20240611);
  auto below = [&](int n) { return int(rng() % uint32_t(n)); };
  int solvedByCbc = 0, solvedByRounding = 0, binding = 0, overLimit = 0, infeasible = 0;
  int eliminatedSome = 0, eliminatedThenCbc = 0, solvedInSeries = 0, prunedSome = 0;
  int stoppedAtRounding = 0;
  for (int round = 0; round < 80; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    bool ring = round % 4 == 3;
    StrategyProblem problem;
    int nodes = 4 + below(3);
    for (int v = 0; v < nodes; ++v) {
      StrategyProblem::Node node;
      for (int s = 0, n = 2 + below(3); s < n; ++s)
        node.cost.push_back(!ring && below(12) == 0 ? kInf : uniform(rng, 10));
      problem.nodes.push_back(node);
    }
    for (int e = 0, n = ring ? nodes : 3 + below(6); e < n; ++e) {
      StrategyProblem::Edge edge;
      if (ring) {
        edge.from = e;
        edge.to = (e + 1) % nodes;
        if (below(2))
          std::swap(edge.from, edge.to);
      } else if (e > 0 && below(3) == 0) { // parallel, or reversed
        edge = problem.edges[below(e)];
        if (below(2))
          std::swap(edge.from, edge.to);
      } else {
        edge.from = below(nodes);
        edge.to = (edge.from + 1 + below(nodes - 1)) % nodes;
      }
      int rows = problem.nodes[edge.from].cost.size(), columns = problem.nodes[edge.to].cost.size();
      edge.cost.assign(rows * columns, 0.0);
      // 0: all zero, 1: row plus column, else anything; a ring's edges all
      // couple their ends.
      int kind = ring ? 2 : below(6);
      std::vector<double> row(rows), column(columns);
      for (double &r : row)
        r = uniform(rng, 3);
      for (double &c : column)
        c = uniform(rng, 3);
      for (int s = 0; s < rows; ++s)
        for (int t = 0; t < columns; ++t)
          edge.cost[s * columns + t] = kind == 0                 ? 0
                                       : kind == 1               ? row[s] + column[t]
                                       : !ring && below(20) == 0 ? kInf
                                                                 : uniform(rng, 8);
      problem.edges.push_back(edge);
    }
    StrategyProblem::Resource memory{"memory", 0, {}};
    double least = 0, most = 0;
    for (int v = 0; v < nodes; ++v) {
      // In a ring only node 0's use depends on its strategy.
      bool same = ring ? v > 0 : below(3) == 0;
      std::vector<double> use;
      for (size_t s = 0; s < problem.nodes[v].cost.size(); ++s)
        use.push_back(same && s > 0 ? use[0] : below(10));
      least += *std::min_element(use.begin(), use.end());
      most += *std::max_element(use.begin(), use.end());
      memory.use.push_back(use);
    }
    memory.limit = least - 1 + below(int(most - least) + 3);
    problem.resources.push_back(memory);
    // In two rounds of three but rings (whose nodes past 0 must use the
    // same in every strategy), a strategy no better than another of its
    // node, or the same; its own generator keeps the rest as it was.
    std::mt19937 extra(round);
    if (!ring && round % 3 != 2)
      addDominatedStrategy(problem, extra);

    Enumerated best = enumerate(problem);
    StrategySolution solution = solveStrategies(problem);
    ASSERT_EQ(solution.feasible, best.cost < kInf) << solution.message;
    ASSERT_EQ(solution.minimumUse.size(), 1u);
    // Between each node's least use on its own and the least of any allowed
    // choice.
    if (best.leastUse < kInf) {
      EXPECT_LE(least, solution.minimumUse[0]);
      EXPECT_LE(solution.minimumUse[0], best.leastUse);
    }
    if (!solution.feasible) {
      EXPECT_FALSE(solution.message.empty());
      ++infeasible;
      continue;
    }
    EXPECT_TRUE(solution.optimal);
    ASSERT_EQ(solution.choice.size(), size_t(nodes));
    expectNear(solution.cost, best.cost);
    expectNear(solution.bound, best.cost); // proven: the bound is the cost
    expectNear(strategyCost(problem, solution.choice), best.cost);
    EXPECT_LE(resourceUse(problem, solution.choice)[0], memory.limit);
    EXPECT_EQ(solveStrategies(problem).choice, solution.choice); // deterministic
    // Asked for less than a bound just above the best, CBC (told the bound
    // in its own units) still finds it; just below, nothing is found.
    double above = best.cost + 1e-4 * std::abs(best.cost) + 1e-6;
    StrategySolution under = solveStrategies(problem, {}, above);
    ASSERT_TRUE(under.feasible) << under.message;
    expectNear(under.cost, best.cost);
    double below = best.cost - 1e-4 * std::abs(best.cost) - 1e-6;
    StrategySolution none = solveStrategies(problem, {}, below);
    EXPECT_FALSE(none.feasible);
    EXPECT_NE(none.message.find("costs less than"), std::string::npos) << none.message;
    // Rounding only: the relaxation's rounded choice, costing no less than
    // the best, its bound no more; exact whenever it did not stop there.
    StrategySolution roundedOnly = solveStrategies(problem, {}, kInf, 0, /*roundingOnly=*/true);
    ASSERT_TRUE(roundedOnly.feasible) << roundedOnly.message;
    EXPECT_LE(resourceUse(problem, roundedOnly.choice)[0], memory.limit);
    expectNear(strategyCost(problem, roundedOnly.choice), roundedOnly.cost);
    EXPECT_GE(roundedOnly.cost, best.cost - 1e-9 * std::abs(best.cost));
    EXPECT_LE(roundedOnly.bound, best.cost + 1e-9 * std::abs(best.cost));
    if (!roundedOnly.roundedOnly)
      expectNear(roundedOnly.cost, best.cost);
    else
      EXPECT_FALSE(roundedOnly.optimal);
    stoppedAtRounding += roundedOnly.roundedOnly;
    if (ring) {
      // Series elimination shrinks the ring to one node (the last of the
      // others goes as a leaf), which CBC decides if its memory matters.
      EXPECT_EQ(solution.eliminated, nodes - 1);
      solvedInSeries += solution.eliminated == nodes - 1;
    }

    solvedByCbc += solution.variables > 0 && !solution.solvedByRounding;
    solvedByRounding += solution.solvedByRounding;
    prunedSome += solution.pruned > 0;
    eliminatedSome += solution.eliminated > 0;
    eliminatedThenCbc += solution.eliminated > 0 && solution.variables > 0;
    binding += most > memory.limit;
    // The limit decided: without it the best choice is cheaper.
    StrategyProblem unlimited = problem;
    unlimited.resources[0].limit = kInf;
    overLimit += enumerate(unlimited).cost < best.cost - 1e-9;
  }
  // The rounds cover every case: CBC, and the relaxation rounded to a
  // choice that meets its bound (then proven optimal without CBC).
  EXPECT_GE(solvedByCbc + solvedByRounding, 30);
  EXPECT_GE(solvedByCbc, 15);
  EXPECT_GE(solvedByRounding, 8);
  EXPECT_GE(binding, 30);
  EXPECT_GE(overLimit, 15);
  EXPECT_GE(infeasible, 8);
  EXPECT_GE(eliminatedSome, 35);
  EXPECT_GE(eliminatedThenCbc, 20); // CBC's choice completed by recovery
  EXPECT_GE(solvedInSeries, 12);
  EXPECT_GE(prunedSome, 25);
  EXPECT_GE(stoppedAtRounding, 10); // rounded outside the gap, CBC left out
}

TEST(StrategyIlp, ResourceBelowTheLeastUseIsInfeasible) {
  StrategyProblem problem;
  problem.nodes = {{{1, 2}}, {{1, 2}}, {{1, 2}}};
  problem.edges = {{0, 1, {0, 1, 1, 0}}, {1, 2, {0, 1, 1, 0}}};
  problem.resources = {{"memory", 5, {{4, 2}, {3, 5}, {6, 1}}},
                       {"host memory", 100, {{1, 1}, {1, 1}, {1, 1}}}};
  StrategySolution solution = solveStrategies(problem);
  EXPECT_FALSE(solution.feasible);
  EXPECT_FALSE(solution.optimal);
  EXPECT_TRUE(solution.choice.empty());
  EXPECT_EQ(solution.minimumUse, (std::vector<double>{6, 3}));
  EXPECT_EQ(solution.message, "memory: the smallest choice needs 6, the limit is 5");
  EXPECT_EQ(solution.variables, 0); // told without CBC

  problem.resources[0].limit = 3.2e9;
  problem.resources[0].use = {{4e9, 2e9}, {3e9, 5e9}, {6e9, 1e9}};
  EXPECT_EQ(solveStrategies(problem).message,
            "memory: the smallest choice needs 6e9, the limit is 3.2e9");
}

TEST(StrategyIlp, LimitsThatOnlyMeetTogetherAreInfeasible) {
  // Each limit alone can be met, but not both: CBC proves it.
  StrategyProblem problem;
  problem.nodes = {{{1, 1}}, {{1, 1}}};
  problem.edges = {{0, 1, {0, 1, 1, 0}}};
  problem.resources = {{"memory", 1, {{0, 2}, {0, 2}}}, {"time", 1, {{2, 0}, {2, 0}}}};
  StrategySolution solution = solveStrategies(problem);
  EXPECT_FALSE(solution.feasible);
  EXPECT_EQ(solution.minimumUse, (std::vector<double>{0, 0}));
  EXPECT_EQ(solution.message,
            "no choice of strategies has every edge's pair allowed and meets every resource "
            "limit at once (memory: the smallest choice needs 0, the limit is 1; time: the "
            "smallest choice needs 0, the limit is 1)");
  EXPECT_GT(solution.variables, 0);
}

TEST(StrategyIlp, DisallowedStrategiesAndPairsAreNeverChosen) {
  // Strategy 0 of node 0 would make every edge free, and the pair (1, 1) of
  // nodes 1 and 2 is the cheapest otherwise; neither is allowed.
  StrategyProblem problem;
  problem.nodes = {{{kInf, 3, 3}}, {{2, 0}}, {{2, 0.5}}, {{kInf, 1}}};
  problem.edges = {{0, 1, {0, 0, 4, 4, 4, 5}},
                   {1, 2, {1, 1, 1, kInf}},
                   {2, 0, {0, 4, 5, 0, 4, 4}},
                   {3, 2, {0, 0, 0, 0}}};
  Enumerated best = enumerate(problem);
  StrategySolution solution = solveStrategies(problem);
  ASSERT_TRUE(solution.feasible) << solution.message;
  EXPECT_NE(solution.choice[0], 0);
  EXPECT_FALSE(solution.choice[1] == 1 && solution.choice[2] == 1);
  EXPECT_EQ(solution.choice[3], 1);
  EXPECT_EQ(solution.choice, best.choice);
  expectNear(solution.cost, best.cost);

  problem.nodes[0].cost = {kInf, kInf, kInf};
  solution = solveStrategies(problem);
  EXPECT_FALSE(solution.feasible);
  EXPECT_EQ(solution.message, "node 0: every strategy is disallowed");

  // A triangle whose pairs each allow something, but not all at once: two
  // edges want equal strategies, the third different ones. Eliminating node
  // 0 leaves two edges between nodes 1 and 2 that allow nothing together.
  problem.nodes = {{{0, 0}}, {{0, 0}}, {{0, 0}}};
  problem.edges = {
      {0, 1, {0, kInf, kInf, 0}}, {1, 2, {0, kInf, kInf, 0}}, {2, 0, {kInf, 0, 0, kInf}}};
  solution = solveStrategies(problem);
  EXPECT_FALSE(solution.feasible);
  EXPECT_EQ(solution.message, "node 1: none of its allowed strategies goes with an allowed "
                              "strategy of node 2 (counting the path through node 0)");
}

TEST(StrategyIlp, ReductionsShrinkTheProgram) {
  // Three edges between nodes 0 and 1 (one reversed) make one matrix: x has
  // 2 + 2 columns, e 4; a row per node, per strategy of each end, and one
  // for memory, which both nodes' strategies change and which binds (it
  // keeps them from being eliminated). The merged matrix, [[1, 3], [2, 1]],
  // leaves neither strategy of either node dominated.
  StrategyProblem problem;
  problem.nodes = {{{0, 0}}, {{0, 0}}, {{5, 1}}, {{2, 3}}};
  problem.edges = {{0, 1, {1, 0, 0, 1}},
                   {1, 0, {0, 2, 0, 0}},
                   {0, 1, {0, 3, 0, 0}},
                   {1, 2, {0, 0, 0, 0}},  // all zero: nothing
                   {2, 3, {1, 1, 4, 4}}}; // a cost of node 2's strategy alone
  problem.resources = {{"memory", 4, {{0, 1}, {0, 1}, {1, 1}, {2, 2}}}};
  StrategySolution solution = solveStrategies(problem);
  ASSERT_TRUE(solution.feasible) << solution.message;
  EXPECT_EQ(solution.variables, 8);
  EXPECT_EQ(solution.constraints, 7);
  EXPECT_EQ(solution.eliminated, 0);
  EXPECT_EQ(solution.pruned, 0);
  Enumerated best = enumerate(problem);
  EXPECT_EQ(solution.choice, best.choice);
  expectNear(solution.cost, best.cost);

  // Without the limit node 0 is a leaf of node 1: eliminated, no CBC.
  problem.resources.clear();
  solution = solveStrategies(problem);
  ASSERT_TRUE(solution.feasible);
  EXPECT_EQ(solution.variables, 0);
  EXPECT_EQ(solution.eliminated, 1);
  EXPECT_TRUE(solution.optimal);
  best = enumerate(problem);
  EXPECT_EQ(solution.choice, best.choice);
  expectNear(solution.cost, best.cost);

  // Node 1 decided: every edge folds into a neighbour's costs, no CBC.
  problem.nodes[1].cost = {kInf, 0};
  solution = solveStrategies(problem);
  ASSERT_TRUE(solution.feasible);
  EXPECT_EQ(solution.variables, 0);
  EXPECT_EQ(solution.eliminated, 0);
  EXPECT_TRUE(solution.optimal);
  best = enumerate(problem);
  EXPECT_EQ(solution.choice, best.choice);
  expectNear(solution.cost, best.cost);

  // A resource that every choice meets binds nothing.
  problem.resources = {{"memory", 100, {{1, 2}, {1, 2}, {1, 2}, {1, 2}}}};
  solution = solveStrategies(problem);
  EXPECT_EQ(solution.variables, 0);
  EXPECT_EQ(solution.minimumUse, (std::vector<double>{5}));
}

TEST(StrategyIlp, DominatedStrategyIsDropped) {
  // A triangle whose every node's memory depends on its strategy, under a
  // limit that binds: nothing can be eliminated, CBC decides. Strategy 2
  // of node 0 is strategy 0 made worse: dearer, a pair cost with node 1
  // higher, the rest the same. The program is the one without it.
  StrategyProblem problem;
  problem.nodes = {{{0, 1, 0.5}}, {{0, 1}}, {{0, 1}}};
  problem.edges = {{0, 1, {0, 3, 3, 0, 1, 3}}, {2, 0, {0, 2, 0, 2, 0, 2}}, {1, 2, {0, 1, 1, 0}}};
  problem.resources = {{"memory", 4, {{2, 0, 2}, {2, 0}, {2, 0}}}};
  Enumerated best = enumerate(problem);
  ASSERT_LT(best.cost, kInf);
  StrategySolution solution = solveStrategies(problem);
  ASSERT_TRUE(solution.feasible) << solution.message;
  EXPECT_TRUE(solution.optimal);
  EXPECT_EQ(solution.pruned, 1);
  EXPECT_EQ(solution.eliminated, 0);
  EXPECT_NE(solution.choice[0], 2);
  EXPECT_EQ(solution.choice, best.choice);
  expectNear(solution.cost, best.cost);
  EXPECT_EQ(solution.minimumUse, (std::vector<double>{0}));

  StrategyProblem without = problem;
  without.nodes[0].cost.pop_back();
  without.edges[0].cost = {0, 3, 3, 0};
  without.edges[1].cost = {0, 2, 2, 0};
  without.resources[0].use[0].pop_back();
  StrategySolution reference = solveStrategies(without);
  EXPECT_EQ(reference.pruned, 0);
  EXPECT_GT(reference.variables, 0);
  EXPECT_EQ(solution.variables, reference.variables);
  EXPECT_EQ(solution.constraints, reference.constraints);
  EXPECT_EQ(solution.choice, reference.choice);

  // Equal strategies: the later one goes.
  problem.nodes[0].cost[2] = 0;
  problem.edges[0].cost[4] = 0;
  solution = solveStrategies(problem);
  EXPECT_EQ(solution.pruned, 1);
  EXPECT_EQ(solution.choice, reference.choice);
  EXPECT_EQ(solution.variables, reference.variables);
}

TEST(StrategyIlp, MalformedProblemsAreNamed) {
  StrategyProblem problem;
  problem.nodes = {{{0, 1}}, {{0, 1, 2}}};
  problem.edges = {{0, 1, {0, 1, 2, 3, 4}}};
  EXPECT_EQ(solveStrategies(problem).message, "edge 0 (0 -> 1): 5 costs, expected 2 x 3");
  problem.edges = {{0, 2, {0}}};
  EXPECT_EQ(solveStrategies(problem).message, "edge 0 (0 -> 2): no such node (there are 2)");
  problem.edges.clear();
  problem.resources = {{"memory", 1, {{0, 0}, {0, 0}}}};
  EXPECT_EQ(solveStrategies(problem).message,
            "memory: node 1 has 2 uses, expected one per strategy (3)");
}

TEST(StrategyIlp, LongChainSolvesFast) {
  // 2000 nodes in a chain, 4 strategies each, against dynamic programming
  // (which the solver does too, without CBC); then with a memory limit that
  // the best choice meets exactly (the row stays in the program: other
  // choices would exceed it, and every node's use varies, so none is
  // eliminated).
  const int nodes = 2000, strategies = 4;
  std::mt19937 rng(7);
  StrategyProblem problem;
  StrategyProblem::Resource memory{"memory", 0, {}};
  for (int v = 0; v < nodes; ++v) {
    StrategyProblem::Node node;
    std::vector<double> use;
    for (int s = 0; s < strategies; ++s) {
      node.cost.push_back(uniform(rng, 1e-3));
      use.push_back(double(1 << (strategies - 1 - s)) * 1e6);
    }
    problem.nodes.push_back(node);
    memory.use.push_back(use);
    if (v > 0) {
      StrategyProblem::Edge edge{v - 1, v, {}};
      for (int s = 0; s < strategies; ++s)
        for (int t = 0; t < strategies; ++t)
          edge.cost.push_back(s == t ? 0 : uniform(rng, 2e-3));
      problem.edges.push_back(edge);
    }
  }

  // best[v][s]: the cheapest prefix ending with node v at s.
  std::vector<std::vector<double>> best(nodes, std::vector<double>(strategies));
  std::vector<std::vector<int>> from(nodes, std::vector<int>(strategies, 0));
  best[0] = problem.nodes[0].cost;
  for (int v = 1; v < nodes; ++v)
    for (int t = 0; t < strategies; ++t) {
      best[v][t] = kInf;
      for (int s = 0; s < strategies; ++s) {
        double c = best[v - 1][s] + problem.edges[v - 1].cost[s * strategies + t];
        if (c < best[v][t]) {
          best[v][t] = c;
          from[v][t] = s;
        }
      }
      best[v][t] += problem.nodes[v].cost[t];
    }
  std::vector<int> choice(nodes);
  choice[nodes - 1] =
      std::min_element(best[nodes - 1].begin(), best[nodes - 1].end()) - best[nodes - 1].begin();
  for (int v = nodes - 1; v > 0; --v)
    choice[v - 1] = from[v][choice[v]];
  double optimum = best[nodes - 1][choice[nodes - 1]];

  double seconds = 0;
  StrategySolution solution = timed([&] { return solveStrategies(problem); }, seconds);
  ASSERT_TRUE(solution.feasible) << solution.message;
  EXPECT_TRUE(solution.optimal);
  expectNear(solution.cost, optimum);
  EXPECT_EQ(solution.variables, 0); // eliminated leaf by leaf
  EXPECT_EQ(solution.eliminated, nodes - 1);
  EXPECT_LT(seconds, 0.5); // about 0.01 s (0.8 s through CBC)
  RecordProperty("cpu_ms_unlimited", int(seconds * 1000));

  for (int v = 0; v < nodes; ++v)
    memory.limit += memory.use[v][choice[v]];
  problem.resources.push_back(memory);
  solution = timed([&] { return solveStrategies(problem); }, seconds);
  ASSERT_TRUE(solution.feasible) << solution.message;
  EXPECT_TRUE(solution.optimal);
  expectNear(solution.cost, optimum);
  EXPECT_LE(resourceUse(problem, solution.choice)[0], memory.limit);
  EXPECT_GT(solution.variables, nodes * strategies); // every node's memory counts
  EXPECT_LT(seconds, 3.0);
  RecordProperty("cpu_ms_limited", int(seconds * 1000));
}

TEST(StrategyIlp, TreeIsEliminatedWithoutCbc) {
  // 5000 nodes, each hanging off a random earlier one, 6 strategies; a few
  // strategies and pairs disallowed. Against dynamic programming from the
  // last node back.
  const int nodes = 5000, strategies = 6;
  std::mt19937 rng(11);
  StrategyProblem problem;
  std::vector<int> parent(nodes, -1);
  for (int v = 0; v < nodes; ++v) {
    StrategyProblem::Node node;
    for (int s = 0; s < strategies; ++s)
      node.cost.push_back(s > 0 && rng() % 20 == 0 ? kInf : uniform(rng, 1e-3));
    problem.nodes.push_back(node);
    if (v == 0)
      continue;
    parent[v] = rng() % v;
    StrategyProblem::Edge edge{parent[v], v, {}};
    for (int s = 0; s < strategies; ++s)
      for (int t = 0; t < strategies; ++t)
        edge.cost.push_back(s == t ? 0 : rng() % 30 == 0 ? kInf : uniform(rng, 2e-3));
    if (rng() % 2) { // as the child's edge to its parent
      std::vector<double> transposed;
      for (int t = 0; t < strategies; ++t)
        for (int s = 0; s < strategies; ++s)
          transposed.push_back(edge.cost[s * strategies + t]);
      edge = {v, parent[v], transposed};
    }
    problem.edges.push_back(edge);
  }

  // best[v][s]: the cheapest subtree of v with v at s; children come after
  // their parent, so the last node is a leaf of what is left.
  std::vector<std::vector<double>> best;
  for (const StrategyProblem::Node &node : problem.nodes)
    best.push_back(node.cost);
  for (int v = nodes - 1; v > 0; --v) {
    const StrategyProblem::Edge &edge = problem.edges[v - 1];
    for (int t = 0; t < strategies; ++t) {
      double least = kInf;
      for (int s = 0; s < strategies; ++s)
        least = std::min(least, best[v][s] + (edge.from == v ? edge.cost[s * strategies + t]
                                                             : edge.cost[t * strategies + s]));
      best[parent[v]][t] += least;
    }
  }
  double optimum = *std::min_element(best[0].begin(), best[0].end());
  ASSERT_LT(optimum, kInf);

  double seconds = 0;
  StrategySolution solution = timed([&] { return solveStrategies(problem); }, seconds);
  ASSERT_TRUE(solution.feasible) << solution.message;
  EXPECT_TRUE(solution.optimal);
  expectNear(solution.cost, optimum);
  expectNear(strategyCost(problem, solution.choice), optimum);
  EXPECT_EQ(solution.variables, 0);
  EXPECT_EQ(solution.constraints, 0);
  EXPECT_EQ(solution.eliminated, nodes - 1);
  EXPECT_LT(seconds, 0.5); // about 0.03 s
  RecordProperty("cpu_ms", int(seconds * 1000));
}

TEST(StrategyIlp, LadderWithMemoryLimit) {
  // Two chains of 200 nodes with a rung between every eighth pair: a
  // backbone of elementwise ops on either side, exchanging now and then.
  // Memory in whole units: every node uses 1 whatever its strategy, except
  // one in the middle of each stretch of the first chain, which uses 0 to 6
  // by strategy. The limit binds: those nodes stay, and of the others at
  // most the rungs' ends; the rest are eliminated in series and CBC decides
  // the few dozen left (about 40 of 400).
  // Against dynamic programming over (strategies at a position, memory
  // used).
  const int length = 200, strategies = 4, rungEvery = 8;
  std::mt19937 rng(5);
  auto nodeOf = [](int position, int side) { return 2 * position + side; };
  StrategyProblem problem;
  StrategyProblem::Resource memory{"memory", 0, {}};
  int least = 0, most = 0;
  for (int p = 0; p < length; ++p)
    for (int side = 0; side < 2; ++side) {
      StrategyProblem::Node node;
      std::vector<double> use;
      bool varies = side == 0 && p % rungEvery == rungEvery / 2;
      for (int s = 0; s < strategies; ++s) {
        node.cost.push_back(uniform(rng, 1e-3));
        use.push_back(varies ? int(rng() % 7) : 1);
      }
      least += *std::min_element(use.begin(), use.end());
      most += *std::max_element(use.begin(), use.end());
      problem.nodes.push_back(node);
      memory.use.push_back(use);
    }
  auto addEdge = [&](int from, int to, bool diagonalFree) {
    StrategyProblem::Edge edge{from, to, {}};
    for (int s = 0; s < strategies; ++s)
      for (int t = 0; t < strategies; ++t)
        edge.cost.push_back(diagonalFree && s == t ? 0 : uniform(rng, 2e-3));
    problem.edges.push_back(edge);
  };
  for (int p = 0; p < length; ++p) {
    if (p % rungEvery == 0)
      addEdge(nodeOf(p, 0), nodeOf(p, 1), false);
    for (int side = 0; side < 2 && p + 1 < length; ++side)
      addEdge(nodeOf(p, side), nodeOf(p + 1, side), true);
  }
  memory.limit = least + (most - least) / 4;
  problem.resources.push_back(memory);

  auto edgeCost = [&](int from, int to, int s, int t) {
    for (const StrategyProblem::Edge &edge : problem.edges)
      if (edge.from == from && edge.to == to)
        return edge.cost[s * strategies + t];
    return 0.0;
  };
  // best[a][b][m]: the cheapest choice up to a position with the chains at
  // a and b there, using m units of memory (at most the limit).
  auto ladderOptimum = [&](int limit) {
    const int pairs = strategies * strategies;
    std::vector<double> best(pairs * (limit + 1), kInf), next;
    for (int p = 0; p < length; ++p) {
      next.assign(best.size(), kInf);
      int u = nodeOf(p, 0), w = nodeOf(p, 1);
      for (int a = 0; a < strategies; ++a)
        for (int b = 0; b < strategies; ++b) {
          double own = problem.nodes[u].cost[a] + problem.nodes[w].cost[b] + edgeCost(u, w, a, b);
          int use = memory.use[u][a] + memory.use[w][b];
          for (int q = 0; q < (p == 0 ? 1 : pairs); ++q) {
            double along = p == 0 ? 0
                                  : edgeCost(nodeOf(p - 1, 0), u, q / strategies, a) +
                                        edgeCost(nodeOf(p - 1, 1), w, q % strategies, b);
            for (int m = 0; m + use <= limit; ++m) {
              double before = p == 0 ? (m == 0 ? 0 : kInf) : best[q * (limit + 1) + m];
              double &after = next[(a * strategies + b) * (limit + 1) + m + use];
              after = std::min(after, before + along + own);
            }
          }
        }
      best.swap(next);
    }
    return *std::min_element(best.begin(), best.end());
  };
  double optimum = ladderOptimum(memory.limit);
  ASSERT_LT(optimum, kInf);
  double unlimited = ladderOptimum(most);
  ASSERT_LT(unlimited, optimum - 1e-9); // the limit decides

  double seconds = 0;
  StrategySolution solution = timed([&] { return solveStrategies(problem); }, seconds);
  ASSERT_TRUE(solution.feasible) << solution.message;
  EXPECT_TRUE(solution.optimal);
  expectNear(solution.cost, optimum);
  EXPECT_LE(resourceUse(problem, solution.choice)[0], memory.limit);
  EXPECT_GT(solution.variables, 0);
  EXPECT_GE(solution.eliminated, 2 * length - 3 * length / rungEvery);
  EXPECT_LT(seconds, 2.0);
  RecordProperty("cpu_ms_limited", int(seconds * 1000));

  // Without the limit the whole ladder goes, in series. (A few edges that
  // stand for long stretches fold instead: the cheapest path through them
  // passes the same strategy whatever its ends, a row plus a column. Their
  // ends then have no neighbours left and are not counted.)
  problem.resources.clear();
  solution = timed([&] { return solveStrategies(problem); }, seconds);
  ASSERT_TRUE(solution.feasible) << solution.message;
  EXPECT_TRUE(solution.optimal);
  expectNear(solution.cost, unlimited);
  EXPECT_EQ(solution.variables, 0);
  EXPECT_GE(solution.eliminated, 2 * length - 10);
  EXPECT_LT(seconds, 0.5);
  RecordProperty("cpu_ms_unlimited", int(seconds * 1000));
}

TEST(StrategyIlp, LargeTightChainIsRoundedWithinTheGap) {
  // A chain large enough for the relative gap (over 10,000 columns) whose
  // every node's memory depends on its strategy, so none is eliminated,
  // under a binding limit. Without cycles its relaxation is integral but
  // where the memory row cuts it: rounded (the edges' weights keeping
  // neighbours consistent) and repaired, the choice is within 1% of the
  // bound and CBC does not run. Against dynamic programming over
  // (strategy, memory used).
  const int length = 2500, strategies = 3;
  std::mt19937 rng(11);
  StrategyProblem problem;
  StrategyProblem::Resource memory{"memory", 0, {}};
  double least = 0, most = 0;
  addRandomNodes(problem, memory, length, strategies, rng, [&] { return double(rng() % 10); },
                 least, most);
  for (int v = 0; v + 1 < length; ++v) {
    StrategyProblem::Edge edge{v, v + 1, {}};
    for (int s = 0; s < strategies; ++s)
      for (int t = 0; t < strategies; ++t)
        edge.cost.push_back(s == t ? 0 : uniform(rng, 2e-3));
    problem.edges.push_back(edge);
  }
  memory.limit = std::floor(least + (most - least) / 3);
  problem.resources.push_back(memory);

  // best[s][m]: the cheapest choice up to a node with it at s, using m units.
  const int limit = int(memory.limit);
  std::vector<double> best(strategies * (limit + 1), kInf), next;
  for (int v = 0; v < length; ++v) {
    next.assign(best.size(), kInf);
    for (int s = 0; s < strategies; ++s) {
      int use = int(memory.use[v][s]);
      for (int q = 0; q < (v == 0 ? 1 : strategies); ++q) {
        double along = v == 0 ? 0 : problem.edges[v - 1].cost[q * strategies + s];
        for (int m = 0; m + use <= limit; ++m) {
          double before = v == 0 ? (m == 0 ? 0 : kInf) : best[q * (limit + 1) + m];
          double &after = next[s * (limit + 1) + m + use];
          after = std::min(after, before + along + problem.nodes[v].cost[s]);
        }
      }
    }
    best.swap(next);
  }
  double optimum = *std::min_element(best.begin(), best.end());
  ASSERT_LT(optimum, kInf);

  StrategySolution solution = solveStrategies(problem, {}, kInf, 0.01);
  ASSERT_TRUE(solution.feasible) << solution.message;
  EXPECT_GE(solution.variables, 10000);
  EXPECT_TRUE(solution.solvedByRounding);
  EXPECT_LE(resourceUse(problem, solution.choice)[0], memory.limit);
  expectNear(solution.cost, strategyCost(problem, solution.choice));
  // Within 1% of the bound, which is no more than the optimum.
  EXPECT_LE(solution.bound, optimum + 1e-12);
  EXPECT_LE(solution.cost, solution.bound * 1.01 + 1e-12);
  EXPECT_GE(solution.cost, optimum - 1e-12);
}

/// A chain with random extra edges and a tight limit on random memory use:
/// seconds for CBC to prove optimal.
StrategyProblem tightChainWithExtraEdges() {
  const int nodes = 40, strategies = 4;
  std::mt19937 rng(3);
  StrategyProblem problem;
  StrategyProblem::Resource memory{"memory", 0, {}};
  double least = 0, most = 0;
  addRandomNodes(problem, memory, nodes, strategies, rng, [&] { return uniform(rng, 1e9); },
                 least, most);
  for (int e = 0; e < nodes - 1 + 80; ++e) {
    int from = e < nodes - 1 ? e : rng() % nodes, to = e < nodes - 1 ? e + 1 : rng() % nodes;
    if (from == to)
      continue;
    StrategyProblem::Edge edge{from, to, {}};
    for (int s = 0; s < strategies; ++s)
      for (int t = 0; t < strategies; ++t)
        edge.cost.push_back(s == t ? 0 : uniform(rng, 2e-3));
    problem.edges.push_back(edge);
  }
  memory.limit = least + 0.2 * (most - least);
  problem.resources.push_back(memory);
  return problem;
}

TEST(StrategyIlp, TimeLimitStillGivesAChoiceThatFits) {
  // Stopped after 0.05 s, CBC has no proof, but the choice fits.
  StrategyProblem problem = tightChainWithExtraEdges();
  auto start = std::chrono::steady_clock::now();
  StrategySolution solution =
      solveStrategies(problem, SolveLimits{std::numeric_limits<int>::max(), 0.05});
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(solution.feasible) << solution.message;
  EXPECT_FALSE(solution.optimal);
  EXPECT_TRUE(solution.timedOut);
  EXPECT_LE(resourceUse(problem, solution.choice)[0], problem.resources[0].limit);
  expectNear(solution.cost, strategyCost(problem, solution.choice));
  EXPECT_LT(seconds, 2.0); // CBC overruns short limits a little
  // CBC's bound: no choice is cheaper, the optimum included.
  StrategySolution optimum = solveStrategies(problem);
  ASSERT_TRUE(optimum.optimal);
  EXPECT_FALSE(optimum.timedOut);
  EXPECT_LE(solution.bound, optimum.cost + 1e-12);
  EXPECT_LE(optimum.cost, solution.cost + 1e-12);
  EXPECT_GT(solution.bound, 0.5 * optimum.cost); // a bound, not just zero
}

TEST(StrategyIlp, NodeBudgetStopsTheSameWayEveryTime) {
  // The budget the compiler gives CBC is nodes, so a plan does not depend
  // on the machine's load: a few nodes leave no proof, the same choice on
  // every run, fitting, and no worse than the optimum's bound says.
  StrategyProblem problem = tightChainWithExtraEdges();
  StrategySolution optimum = solveStrategies(problem);
  ASSERT_TRUE(optimum.optimal);
  ASSERT_GT(optimum.nodes, 5) << "the problem no longer needs branching";
  SolveLimits few{5, 60};
  StrategySolution first = solveStrategies(problem, few);
  ASSERT_TRUE(first.feasible) << first.message;
  EXPECT_FALSE(first.optimal);
  EXPECT_FALSE(first.timedOut);
  EXPECT_GT(first.nodes, 0);
  EXPECT_LE(first.nodes, few.nodes);
  EXPECT_LE(resourceUse(problem, first.choice)[0], problem.resources[0].limit);
  EXPECT_LE(first.bound, optimum.cost + 1e-12);
  EXPECT_LE(optimum.cost, first.cost + 1e-12);
  for (int run = 0; run < 3; ++run) {
    StrategySolution again = solveStrategies(problem, few);
    EXPECT_EQ(again.choice, first.choice);
    EXPECT_EQ(again.nodes, first.nodes);
    EXPECT_EQ(again.bound, first.bound);
  }
}

TEST(StrategyIlp, NodeColumnsGiveLargerProgramsFewerNodes) {
  // Nodes of a larger program re-solve a larger LP: the compiler's budget
  // also bounds nodes times columns, still a count, not a clock.
  StrategyProblem problem = tightChainWithExtraEdges();
  StrategySolution optimum = solveStrategies(problem);
  ASSERT_TRUE(optimum.optimal);
  ASSERT_GT(optimum.nodes, kLeastNodes) << "the problem no longer needs enough branching";
  constexpr int kAny = std::numeric_limits<int>::max();
  double columns = optimum.variables;
  // Node-columns for twice the nodes it needs: the optimum, proven.
  StrategySolution ample = solveStrategies(problem, {kAny, 60, 2 * columns * optimum.nodes});
  EXPECT_TRUE(ample.optimal);
  EXPECT_EQ(ample.choice, optimum.choice);
  // For two nodes: the least it gives a program, kLeastNodes.
  StrategySolution scarce = solveStrategies(problem, {kAny, 60, 2 * columns});
  ASSERT_TRUE(scarce.feasible) << scarce.message;
  EXPECT_FALSE(scarce.optimal);
  EXPECT_FALSE(scarce.timedOut);
  EXPECT_LE(scarce.nodes, kLeastNodes);
  EXPECT_LE(optimum.cost, scarce.cost + 1e-12);
  // The node count still caps it.
  StrategySolution capped = solveStrategies(problem, {5, 60, 2 * columns * optimum.nodes});
  EXPECT_LE(capped.nodes, 5);
}

} // namespace
