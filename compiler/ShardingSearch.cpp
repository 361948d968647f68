//===- ShardingSearch.cpp - one split per op, by integer programming ------===//
#include "compiler/ShardingSearch.h"

#include "compiler/Cancel.h"
#include "compiler/Diagnostics.h"

#include "compiler/SearchGraph.h"
#include "dialects/graph/AttrNames.h"

#include "mlir/Dialect/Mesh/IR/MeshDialect.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Debug.h"

#include <chrono>
#include <cmath>
#include <limits>

// `dtc-opt --debug-only=dtc-sharding-search` (with an LLVM built with
// assertions) prints each role assignment tried and what it cost.
#define DEBUG_TYPE "dtc-sharding-search"

namespace dtc::search {

FailureOr<double> Search::decide(search::SolveLimits limits, double costBelow,
                                 bool roundingOnly) {
  if (failed(checkPins()))
    return failure();
  if (nodes_.empty())
    buildGraph();
  if (failed(enumerateAll()))
    return failure();
  FailureOr<search::StrategySolution> solution = solve(limits, costBelow, roundingOnly);
  if (failed(solution))
    return failure();
  return solution->cost;
}

SearchResult Search::annotate() {
  result_.mesh = options_.mesh;
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
    const Strategy &s = (*node.strategies)[size_t(choice_[n])];
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
      // An interleaved q is [..., S, H, 3, D]: split by heads when a factor
      // of its H dim is.
      if (auto attention = dyn_cast<graph::AttentionOp>(node.op);
          attention && attention.getInterleaved()) {
        graph::ShardingRule rule = attention.shardingRule();
        const auto &q = rule.operands[0];
        ++result_.interleavedAttentions;
        result_.headsSplitAttentions += llvm::any_of(
            q[q.size() - 3], [&](int f) { return !s.split[size_t(f)].empty(); });
      }
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

LogicalResult Search::checkPins() {
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

std::string Search::meshText() const {
  std::string text;
  for (const MeshAxisSpec &axis : options_.mesh)
    text += (text.empty() ? "" : " x ") + axis.name + "=" + std::to_string(axis.size);
  return text;
}

} // namespace dtc::search

using namespace mlir;

namespace dtc {

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
  // --devices N: the one free axis of N, and each dp x tp split of it whose
  // tensor-parallel groups stay inside a node of the cluster: consecutive
  // ranks (tp the inner axis), or any when all N share a node.
  if (options.searchMeshShape && options.mesh.size() == 1 &&
      options.mesh[0].role == AxisRole::Free) {
    int64_t n = options.mesh[0].size, perNode = options.cluster.devicesPerNode;
    candidates.push_back(options);
    for (int64_t tp = 2; tp < n && tp <= perNode; ++tp) {
      if (n % tp != 0)
        continue;
      SearchOptions shaped = options;
      shaped.mesh = {{"dp", n / tp, AxisRole::Data}, {"tp", tp, AxisRole::Tensor}};
      candidates.push_back(shaped);
      if (n <= perNode) {
        shaped.mesh = {{"tp", n / tp, AxisRole::Tensor}, {"dp", tp, AxisRole::Data}};
        candidates.push_back(shaped);
      }
    }
  }
  if (free.size() > 1) {
    for (unsigned roles = 1; roles + 1 < (1u << free.size()); ++roles) {
      SearchOptions pinned = options;
      for (auto [i, a] : llvm::enumerate(free))
        pinned.mesh[a].role = (roles >> i) & 1 ? AxisRole::Tensor : AxisRole::Data;
      candidates.push_back(pinned);
    }
    // And, every axis's role searched, the devices as one free axis, as
    // --devices N searches them: each op split its own way over all of
    // them, which no role assignment can (GPT-2 small's loss split by its
    // classes over all 8 devices of a 4x2 mesh, the rest by the batch).
    // The mesh's axes all free are a far larger program (GPT-2 small on
    // 4x2: 16 s, no better plan found), so not searched.
    if (free.size() == options.mesh.size()) {
      SearchOptions flat = options;
      int64_t devices = 1;
      for (const MeshAxisSpec &axis : options.mesh)
        devices *= axis.size;
      flat.mesh = {{"x", devices, AxisRole::Free}};
      candidates.push_back(flat);
    }
  }
  // The most data-parallel first: usually the cheapest, and each later one
  // only has to beat the best so far, which CBC's bound often rules out
  // right after the relaxation (bench/README.md: a GPT-3 step on 128x8).
  // --devices' one free axis goes last: it may split anything anywhere, so
  // its program is the largest and slowest to solve without a cutoff (GPT-3
  // on 128 devices a stage: 5.6 s first, then dp16 x tp8 another 6 s).
  auto allFree = [](const SearchOptions &o) {
    return llvm::all_of(o.mesh, [](const MeshAxisSpec &a) { return a.role == AxisRole::Free; });
  };
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
    order.push_back({allFree(candidates[i]) && candidates.size() > 1
                         ? std::numeric_limits<int64_t>::max()
                         : tensorRanks(candidates[i]),
                     i});
  llvm::sort(order);
  std::vector<SearchOptions> sorted;
  for (auto [ranks, i] : order)
    sorted.push_back(std::move(candidates[i]));
  candidates = std::move(sorted);
  // The graph and its labels are the same under every candidate: built once.
  search::Search graph(module, func, options);
  graph.buildGraph();
  std::unique_ptr<search::Search> best;
  double bestCost = std::numeric_limits<double>::infinity();
  // --devices' free axis is a candidate too: why it failed, for the error
  // when every candidate does.
  std::vector<Diagnostic> freeAxisFailure;
  bool freeAxisTried = false;
  // Two rounds: each candidate's LP relaxation rounded (no CBC), then CBC
  // only on those whose relaxation's bound could beat the best rounded
  // plan by more than the gap CBC stops at, cheapest bound first. CBC
  // runs up to its time limit when it cannot close a program's gap, so
  // running it on every candidate in turn took a 39B GPT's search on 512
  // A100s 30 s; the rounded best usually leaves it nothing to prove.
  std::vector<std::tuple<double, double, size_t>> unsettled; // bound, gap, candidate
  const SearchOptions *bestCandidate = nullptr;
  // What each candidate came to, for the plan's notes.
  std::vector<SearchResult::Alternative> tried(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    // A given mesh's free axes are named with the roles this candidate
    // gives them: "x=2 (data) x y=2 (tensor)".
    std::vector<std::string> axes;
    bool givenAxes = candidates[i].mesh.size() == options.mesh.size() && !options.searchMeshShape;
    for (auto [a, axis] : llvm::enumerate(candidates[i].mesh)) {
      axes.push_back(axis.name + "=" + std::to_string(axis.size));
      if (givenAxes && options.mesh[a].role == AxisRole::Free && axis.role != AxisRole::Free)
        axes.back() += axis.role == AxisRole::Data ? " (data)" : " (tensor)";
    }
    tried[i].mesh =
        llvm::join(axes, " x ") + (allFree(candidates[i]) ? " (each op split its own way)" : "");
    tried[i].seconds = std::numeric_limits<double>::quiet_NaN();
    tried[i].axes = candidates[i].mesh;
  }
  auto tryCandidate = [&](size_t index, bool roundingOnly, search::SolveLimits limits) {
    if (compileCancelled()) // another thread's compile made this one moot
      return;
    const SearchOptions &candidate = candidates[index];
    auto search = std::make_unique<search::Search>(graph, candidate);
    bool freeAxis = candidate.mesh.size() == 1 && candidate.mesh[0].role == AxisRole::Free;
    freeAxisTried |= freeAxis;
    // A role assignment that cannot work (or win) is no error, just no
    // candidate: what it said is kept as why.
    ThreadDiagnosticHandler quiet(module.getContext(), [&](Diagnostic &d) {
      if (tried[index].why.empty() || roundingOnly)
        tried[index].why = d.str();
      if (freeAxis && roundingOnly)
        freeAxisFailure.push_back(std::move(d));
      return success();
    });
    FailureOr<double> cost =
        search->decide(limits, std::min(bestCost, options.costBelow), roundingOnly);
    if (succeeded(cost) &&
        (std::isnan(tried[index].seconds) || *cost < tried[index].seconds)) {
      tried[index].seconds = *cost;
      tried[index].why.clear();
    } else if (failed(cost) && std::isfinite(search->bound()) && search->bound() > 0) {
      tried[index].atLeast = std::max(tried[index].atLeast, search->bound());
    }
    if (roundingOnly && succeeded(cost) && search->unsettled())
      unsettled.push_back({search->bound(), search->gap(), index});
    LLVM_DEBUG({
      llvm::dbgs() << "roles";
      for (const MeshAxisSpec &axis : candidate.mesh)
        llvm::dbgs() << " " << axis.name << "="
                     << (axis.role == AxisRole::Data ? "data" : "tensor");
      if (succeeded(cost))
        llvm::dbgs() << ": " << *cost << " s\n";
      else
        llvm::dbgs() << ": no plan beats " << bestCost << " s\n";
    });
    if (succeeded(cost) && *cost < bestCost) {
      best = std::move(search);
      bestCost = *cost;
      bestCandidate = &candidate;
    }
  };
  for (size_t i = 0; i < candidates.size(); ++i)
    tryCandidate(i, /*roundingOnly=*/true, search::Search::kLimits);
  llvm::sort(unsettled);
  // CBC's full time goes to improving the best plan; a candidate whose
  // rounded plan lost, and which CBC would have to make better than the
  // best, gets less (GPT-3's stages: 5 s of CBC finding nothing was half
  // the whole search).
  size_t bestIndex = best ? size_t(std::find_if(candidates.begin(), candidates.end(),
                                                [&](const SearchOptions &c) {
                                                  return &c == bestCandidate;
                                                }) -
                                   candidates.begin())
                          : candidates.size();
  for (auto [bound, gap, index] : unsettled)
    if (!options.roundingOnly && bound < bestCost * (1 - gap) - 1e-12 * bestCost)
      tryCandidate(index, /*roundingOnly=*/false,
                   index == bestIndex ? search::Search::kLimits
                                      : search::Search::kLosingCandidateLimits);
  if (!best && freeAxisTried) { // the free axis failed among the candidates: say why
    for (Diagnostic &d : freeAxisFailure)
      module.getContext()->getDiagEngine().emit(std::move(d));
    if (candidates.size() > 1)
      func.emitError() << "(the " << candidates.size() - 1
                       << " dp x tp shapes of the devices with tensor-parallel groups inside a "
                          "node fit no better)";
    return failure();
  }
  if (!best) { // no role assignment works: the whole program
    best = std::make_unique<search::Search>(graph, options);
    if (failed(best->decide(search::Search::kLimits, options.costBelow,
                            options.roundingOnly))) {
      if (candidates.size() > 1 && options.searchMeshShape)
        func.emitError() << "(the " << candidates.size() - 1
                         << " dp x tp shapes of the devices with tensor-parallel groups inside a "
                            "node fit no better)";
      return failure();
    }
  }
  SearchResult result = best->annotate();
  if (candidates.size() > 1) {
    for (size_t i = 0; i < candidates.size(); ++i)
      tried[i].chosen = &candidates[i] == bestCandidate;
    result.alternatives = std::move(tried);
  }
  result.unsettled = best->unsettled();
  result.meshSearched = options.searchMeshShape || result.mesh.size() != options.mesh.size();
  result.searchSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

} // namespace dtc
