//===- SearchGraph.h - the sharding search's nodes and strategies -*- C++ -*-===//
//
// The inside of dtc-sharding-search (ShardingSearch.h): `Search` decides
// one split per op for one assignment of roles to the mesh axes. Its parts
// live in the files that each do one of them:
//
//   SearchGraph.cpp       the graph as nodes: ops and arguments, the batch,
//                         alike ops' labels (Weisfeiler-Lehman)
//   SearchStrategies.cpp  each node's splits under the axes' roles and pins
//   SearchCosts.cpp       what a split computes, keeps and communicates, and
//                         what resharding between two splits costs
//   SearchProgram.cpp     the integer program over tied groups, solved by CBC
//   ShardingSearch.cpp    deciding, writing the decision into the IR, and the
//                         driver over role assignments (searchShardings)
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_SEARCHGRAPH_H
#define DTC_COMPILER_SEARCHGRAPH_H

#include "compiler/Sharding.h"
#include "compiler/ShardingSearch.h"
#include "compiler/search/StrategyIlp.h"
#include "cost/CostModel.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/Hashing.h"

#include <limits>
#include <memory>
#include <vector>

namespace dtc::search {

using namespace mlir;

using graph::ShardingRule;

/// One way to split a node: per factor, the mesh axes; what that makes of
/// its operands and results; and what it costs.
struct Strategy {
  SmallVector<MeshAxes> split;
  SmallVector<Sharding, 3> operands, results;
  MeshAxes partial; // axes of split reductions: the results are partial sums over them
  double compute = 0, communication = 0, memory = 0;
  /// Of `memory`, the activations kept for the backward (per micro-batch
  /// in flight, with SearchOptions::stageMemory; else already shared).
  double keptMemory = 0;
};

/// An op of `main`, or one of its arguments (a rule of one factor per dim).
struct Node {
  Operation *op = nullptr;
  Value argument;
  ShardingRule rule;
  SmallVector<bool> batchFactor;
  /// Factors that index the data's other dims (a sequence, an image's
  /// pixels) as the batch factors index its first: what a tensor axis
  /// splits under sequence parallelism.
  SmallVector<bool> sequenceFactor;
  bool forward = true;   // the loss depends on it (or inference)
  bool parameter = false;
  bool dataInput = false;
  /// Times it runs per step: a micro-batched step's per-micro-batch ops
  /// run once per micro-batch (compiler/MicroBatches.h).
  double runs = 1;
  /// Per result: kept from the forward for the backward (counted as
  /// memory); summed only into gradient accumulators (reduced once a step).
  SmallVector<bool, 2> kept, accumulated;
  /// A bf16 step's weights and their copies (dtc-keep-bf16-weights): a
  /// weight that keeps a bf16 copy (`copied`) is counted as that copy,
  /// split as the weight is; its f32 master as the result that updates it
  /// (`masterOf`: the weight's node, else -1), which the plan keeps split
  /// as the update is where that is finer (ZeRO), or with the weight when
  /// nothing updates it (`updated` false). The casts that become the copy
  /// keep nothing of their own.
  SmallVector<int, 2> masterOf;
  bool copied = false, updated = false;
  /// How the fusion passes will run it (markFusion): per operand and per
  /// result, a value passed inside its kernel, which costs no memory
  /// traffic; `launched` where its kernel starts (one op of a group);
  /// `absorbed` into another op's kernel (a GEMM's epilogue), costing
  /// nothing of its own; `epilogue`: an absorbed add or a view between it
  /// and the op whose epilogue takes it.
  SmallVector<bool, 4> fusedOperands, fusedResults;
  bool launched = true, absorbed = false, epilogue = false;
  /// Its splits, shared with every node of the same `costKey`: those are
  /// enumerated and costed once.
  std::shared_ptr<std::vector<Strategy>> strategies;
  llvm::hash_code label = 0;
  /// The label and the facts above that a split's cost depends on: nodes
  /// with equal keys have the same splits at the same costs.
  size_t costKey = 0;

  ValueRange results() const { return op ? op->getResults() : ValueRange(argument); }
  bool hasBatch() const { return llvm::is_contained(batchFactor, true); }
};

inline int64_t elementBytes(Type type) {
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
  /// The same function's search under other options (another role
  /// assignment or mesh), reusing `graph`'s nodes and alike-op labels,
  /// which do not depend on the mesh.
  Search(const Search &graph, const SearchOptions &options)
      : Search(graph.module_, graph.func_, options) {
    nodes_ = graph.nodes_;
    nodeOfValue_ = graph.nodeOfValue_;
    positions_ = graph.positions_;
    nodeOfOp_ = graph.nodeOfOp_;
    lossPosition_ = graph.lossPosition_;
    updates_ = graph.updates_;
  }

  /// The graph as nodes, with the batch marked and alike ops labelled:
  /// what decide() needs first, done once for any number of copies.
  void buildGraph();

  /// Decides (without touching the IR); the predicted objective. Fails
  /// (with a diagnostic) when nothing costs less than `costBelow`.
  /// `roundingOnly`: the LP relaxation rounded, without CBC even when it
  /// is not within the gap of its bound (then unsettled()).
  FailureOr<double> decide(search::SolveLimits limits,
                           double costBelow = std::numeric_limits<double>::infinity(),
                           bool roundingOnly = false);

  /// After decide(roundingOnly): the choice is the relaxation's rounded,
  /// outside the gap of bound(), which CBC might close.
  bool unsettled() const { return unsettled_; }
  /// No choice costs less (the relaxation's or CBC's bound).
  double bound() const { return bound_; }
  /// The relative gap CBC stops at on this program (0: solved exactly).
  double gap() const { return gap_; }

  /// Writes the decision into the IR.
  SearchResult annotate();

  /// CBC's budget on a search (docs/sharding.md, "How long CBC
  /// searches"): nodes, so that a plan does not depend on how busy the
  /// machine is, about 1-4 s on a tight-memory 4-layer GPT (9,000
  /// columns); fewer on larger programs, whose nodes are slower (2
  /// million node-columns: 65 on GPT-3's 30,642 columns); the seconds
  /// only stop programs whose nodes are slower still.
  static constexpr search::SolveLimits kLimits{200, 10, 2e6};
  /// CBC's budget on a candidate mesh or role assignment whose rounded
  /// plan lost but whose bound could still win.
  static constexpr search::SolveLimits kLosingCandidateLimits{50, 3, 5e5};
  /// CBC stops once its plan is within this fraction of its bound (on
  /// large programs), and the relaxation's rounded plan within it needs
  /// no CBC: the last percent took a GPT-3 stage's search from 3.5 s to
  /// its 5 s limit. 2%, well inside the cost model's own error: at 1%, a
  /// 96-layer GPT-3 step on dp128 x tp8 rounded 1.0x% from its bound spent
  /// CBC's 5 s on a plan that simulates no faster (8.94 s, 8.96 s).
  static constexpr double kRelativeGap = 0.02;

private:
  //===--------------------------------------------------------------------===//
  // The graph as nodes
  //===--------------------------------------------------------------------===//

  LogicalResult checkPins();

  void buildNodes();

  void add(Node node);

  int nodeOf(Value v) const { return nodeOfValue_.lookup(v).first; }
  int resultIndex(Value v) const { return nodeOfValue_.lookup(v).second; }
  /// Program order; the terminator (not a node) comes last.
  size_t position(Operation *op) const;

  /// The batch: dim 0 of every data input, and every factor that leads a
  /// dim made from it. Data axes split only these; tensor axes never do.
  void markBatch();

  /// Whether mesh axis `axis` may split factor `f` of `node`.
  bool allowed(const Node &node, size_t axis, int f) const;

  int64_t axesSize(ArrayRef<int16_t> axes) const;

  /// Every node's splits, costed: each mesh axis splits at most one factor,
  /// which must divide evenly. Enumerated once per costKey.
  LogicalResult enumerateAll();

  LogicalResult enumerate(const Node &node, std::vector<Strategy> &strategies);

  void enumerateSplits(const Node &node, ArrayRef<SmallVector<int, 6>> choices, bool demand,
                       std::vector<Strategy> &strategies);

  /// Pins that demand a split over the data axes: whatever carries the
  /// batch splits it (data parallelism); with --zero 1..3 the optimizer
  /// state (and stage 3, the weights) are split too.
  bool meetsPins(const Node &node, ArrayRef<MeshAxes> split) const;

  Strategy makeStrategy(const Node &node, SmallVector<MeshAxes> split);

  //===--------------------------------------------------------------------===//
  // Costs
  //===--------------------------------------------------------------------===//

  double localBytes(Value v, const Sharding &s) const;

  /// v's type on one rank under sharding s (its local shape).
  plan::TensorType localType(Value v, const Sharding &s) const;

  /// A resharding collective's local copies (cost::relayoutSeconds, as the
  /// simulator counts them): from v under `from` to v under `to`.
  double relayoutSeconds(plan::CollectiveKind kind, int64_t axis, int64_t concatAxis, Value v,
                         const Sharding &from, const Sharding &to) const;

  const cost::Link &link(ArrayRef<int16_t> axes) const;
  /// The link `axes` cross as a collective uses it, paying `startUp` of
  /// its start-up: 1 alone; in a bucket (SearchOptions::buckets) its
  /// share of the bucket's, 0 for a weight gradient's reductions (many
  /// to a bucket), 1 / the updated weights for an update's gathers
  /// (Search::updateSeconds). (A weight's gathers for the forward are
  /// bucketed too, but priced on their own: gathered together they live
  /// together, which the search's memory does not count.)
  cost::Link linkFor(double startUp, ArrayRef<int16_t> axes) const;
  /// Whether `v` is a weight gradient whose reductions go in buckets.
  bool bucketed(Value v) const;
  /// A bucketed collective (`startUp` below 1) from `in` to `out` local
  /// bytes: staged through the bucket's buffer each way where the device
  /// packs parts (the CPU runtime; cost::collectiveInstructionSeconds),
  /// else nothing.
  double stagingSeconds(double startUp, double in, double out) const;

  double copySeconds(double bytes) const;

  /// What making `have` into `want` costs: all-gathers of dims split where
  /// they should not be, then a local slice of those to be cut. A partial
  /// result was reduce-scattered by its op (half an all-reduce); a reader
  /// that wants it whole pays the all-gather half, one that wants a dim
  /// split over the same axes nothing more.
  /// `startUp`: the share of each collective's start-up it pays
  /// (linkFor; a weight gradient's pay none).
  double reshardSeconds(Value v, const Sharding &have, const Sharding &want,
                        ArrayRef<int16_t> partial = {}, double startUp = 1) const;

  /// The reduce-scatter half of combining partial sums over `partial`.
  double partialSeconds(Value v, const Sharding &have, ArrayRef<int16_t> partial,
                        double startUp = 1) const;
  /// A step's seconds to bring `v`, result `resultIdx` of a node split by
  /// `su`, to `want` for a reader that runs `runs` times a step (once when
  /// it only accumulates `v` and keeps its split: `accumulated`).
  double edgeSeconds(Value v, bool accumulated, const Strategy &su, int resultIdx,
                     const Sharding &want, double runs, double startUp = 1) const;
  /// An update's edge into its weight `parameter` (split `want`): a bf16
  /// step's weight keeps a bf16 copy (dtc-keep-bf16-weights), and where
  /// the update is split finer than the weight (ZeRO-1 and 2) the master
  /// stays split with it and the copy's bf16 shards are gathered, half the
  /// f32 update's bytes. The step's last gathers go in a bucket: each
  /// pays its share of one start-up, as if every weight's were there.
  double updateSeconds(Value update, const Strategy &su, int resultIdx, const Node &parameter,
                       const Sharding &want) const;
  /// The bf16 cast a bf16 step reads weight `parameter` through, which
  /// becomes its copy; null where it keeps none (SearchOptions::bf16Copies).
  Value bf16CopyOf(const Node &parameter) const;
  /// What a fused edge (Node::fusedOperands) costs when the two ends are
  /// split differently, or the writer leaves partial sums: the value
  /// written by one kernel and read by the next, or an epilogue's add run
  /// as a kernel of its own. 0 where the fusion holds.
  double unfusedSeconds(const Node &reader, size_t operand, Value v, const Strategy &su,
                        int resultIdx, const Sharding &want) const;
  /// 2 where `reader` is a forward op reading weight `v` and the backward
  /// reads `v` or what `reader` makes of it: a gather for `reader` is
  /// made again for the backward (dtc-regather-weights, ZeRO-3's), so its
  /// edge costs twice; else 1.
  double regatherFactor(Value v, const Node &reader) const;
  /// result_.opFigures under choice_.
  void figureOps();

  /// An accumulation's per-micro-batch reductions that its edges priced as
  /// deferred (a ZeRO-split accumulator behind a cast).
  double undeferredSeconds(const Node &node, const Strategy &s) const;

  /// How often each node runs per step, and which of its results are kept
  /// for the backward or only accumulated: mesh-independent facts the
  /// costs depend on, in each node's costKey.
  void markCostFacts();
  /// Each node's fusedOperands, fusedResults, launched and absorbed
  /// (SearchFusion.cpp).
  void markFusion();

  /// Each strategy's compute, communication and memory, weighted by how
  /// often its node runs per step.
  void costStrategies(const Node &node, std::vector<Strategy> &strategies);
  /// The share of a device's bytes that `node`'s memory counts without
  /// SearchOptions::stageMemory: a pipeline's average stage holds its
  /// weights and state once, its activations per micro-batch in flight.
  double memoryShare(const Node &node) const;

  //===--------------------------------------------------------------------===//
  // Tying alike ops, and the integer program
  //===--------------------------------------------------------------------===//

  /// Weisfeiler-Lehman labels: an op's kind, types and attributes (not its
  /// name), refined by its neighbours' labels a few hops out. Ops at the
  /// same place in every layer get the same label and share a decision
  /// (with their count of strategies, once enumerated: groupLabel).
  void label();

  /// The label a node decides under: its own and its number of
  /// strategies, so that a group's members index the same splits.
  size_t groupLabel(const Node &node) const {
    return size_t(llvm::hash_combine(node.label, node.strategies->size()));
  }

  FailureOr<search::StrategySolution> solve(search::SolveLimits budget, double costBelow,
                                            bool roundingOnly);

  std::string meshText() const;
  std::string leastMemoryText(const search::StrategySolution &solution) const;
  std::string splitAlternativesText(const search::StrategyProblem &problem,
                                    const search::StrategySolution &solution) const;

  static constexpr int kRounds = 6;
  /// The tie-break: a gigabyte kept counts as a microsecond.
  static constexpr double kSecondsPerByteKept = 1e-15;

  bool unsettled_ = false;
  double bound_ = 0, gap_ = 0;
  ModuleOp module_;
  func::FuncOp func_;
  const SearchOptions &options_;
  plan::Mesh planMesh_;
  std::vector<Node> nodes_;
  llvm::DenseMap<Value, std::pair<int, int>> nodeOfValue_;
  llvm::DenseMap<Operation *, size_t> positions_;
  llvm::DenseMap<Operation *, int> nodeOfOp_;
  size_t lossPosition_ = 0;
  int updates_ = 0; // weights the step updates
  std::vector<int> groups_, groupOf_, choice_;
  SearchResult result_;
};

} // namespace dtc::search

#endif // DTC_COMPILER_SEARCHGRAPH_H
