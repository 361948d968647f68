//===- SearchFusion.cpp - the search's ops as the fusion passes run them --===//
//
// The search prices ops before the fusion passes run (those need the
// split), but a step runs their kernels. Elementwise ops run in the groups
// dtc-fuse-elementwise makes (ElementwiseGroups.h, the pass's own
// grouping): a value passed inside a group costs no memory traffic, and a
// group launches once. dtc-fuse-matmul-bias folds more into a GEMM or a
// layer norm gradient: a bias and a residual added to a product, a sum of
// products, a residual added to a layer norm's input gradient, a bias's
// gradient, and the ReLU or tanh GELU after a bias; a tanh GELU's
// gradient into the GEMM that makes its output gradient (DGELU);
// dtc-fuse-loss-gradient has the loss's row kernel write the logits'
// gradient; and dtc-keep-bf16-weights has the optimizer write a weight's
// bf16 copy where the step cast it. The epilogues' adds are mirrored here
// by their shapes (not the passes' every condition), the GELU gradient
// and the loss gradient by the passes' own matchers (FusionMatches.h),
// and priced as nothing or as the bytes left. Priced one by one, GPT-2's
// bf16 step on 4 H100s came to 25.7 ms of compute against its simulated
// plan's 5.4 ms.
//
//===----------------------------------------------------------------------===//
#include "compiler/ElementwiseGroups.h"
#include "compiler/FusionMatches.h"
#include "compiler/SearchGraph.h"

namespace dtc::search {
namespace {

/// What reshapes pass on to `v`, each reshape's input read by nothing
/// else; `v` itself when it is no reshape's.
Value throughViews(Value v) {
  while (auto view = v.getDefiningOp<graph::ReshapeOp>()) {
    if (!view.getInput().hasOneUse())
      break;
    v = view.getInput();
  }
  return v;
}

/// Whether `sum` (a reduce_sum) is a linear layer's bias gradient that
/// the weight gradient's GEMM, x^T dy, sums as it reads dy: over every
/// dim but the last of dy, which (or a view of which) a product reads as
/// its transposed-lhs right operand.
bool isBiasGradient(graph::ReduceSumOp sum) {
  Value dy = sum.getInput();
  int64_t rank = cast<ShapedType>(dy.getType()).getRank();
  SmallVector<int64_t> axes;
  for (int64_t a : sum.getAxes())
    axes.push_back(a < 0 ? a + rank : a);
  llvm::sort(axes);
  if (rank < 2 || axes != llvm::to_vector(llvm::seq<int64_t>(0, rank - 1)))
    return false;
  SmallVector<Value> views{dy};
  if (auto view = dy.getDefiningOp<graph::ReshapeOp>())
    views.push_back(view.getInput());
  for (size_t i = 0, n = views.size(); i < n; ++i)
    for (Operation *user : views[i].getUsers())
      if (auto view = dyn_cast<graph::ReshapeOp>(user))
        views.push_back(view.getOutput());
  return llvm::any_of(views, [](Value v) {
    return llvm::any_of(v.getUsers(), [&](Operation *user) {
      auto product = dyn_cast<graph::MatmulOp>(user);
      return product && product.getTransposeLhs() && product.getRhs() == v &&
             product.getLhs() != v;
    });
  });
}

} // namespace

void Search::markFusion() {
  Block &block = func_.getBody().front();
  for (Node &node : nodes_) {
    node.fusedOperands.clear();
    node.fusedResults.clear();
    node.launched = true;
    node.absorbed = node.epilogue = false;
  }
  auto nodeAt = [&](Operation *op) -> Node * {
    auto it = nodeOfOp_.find(op);
    return it == nodeOfOp_.end() ? nullptr : &nodes_[size_t(it->second)];
  };
  // Values a GEMM or a layer norm gradient writes that may take an add
  // into its epilogue, with how many adds it may still take: a product
  // its bias and then a residual (or another product, as C); a layer
  // norm's input gradient the residual stream's.
  llvm::DenseMap<Value, int> epilogue;
  for (Operation &op : block) {
    if (auto product = dyn_cast<graph::MatmulOp>(op))
      epilogue[product.getOutput()] = 2;
    else if (auto norm = dyn_cast<graph::LayerNormBackwardOp>(op))
      epilogue[norm.getGradInput()] = 1;
  }
  SmallVector<SmallVector<Operation *>> groups = elementwiseGroups(block);
  // Producers first: an epilogue's adds grow a value its consumers' adds
  // may take in turn.
  llvm::sort(groups, [](const auto &a, const auto &b) {
    return a.back()->isBeforeInBlock(b.back());
  });
  // A weight's bf16 copy (dtc-keep-bf16-weights: the optimizer writes it).
  auto weightCopy = [&](Operation *op) {
    auto copy = dyn_cast<graph::CastOp>(op);
    return copy && options_.training && copy.getInput().getDefiningOp<graph::ParameterOp>() &&
           cast<ShapedType>(copy.getOutput().getType()).getElementType().isBF16();
  };
  auto isActivation = [](Operation *op) {
    auto gelu = dyn_cast_or_null<graph::GeluOp>(op);
    return (gelu && gelu.getApproximate() == "tanh") || isa_and_nonnull<graph::ReluOp>(op);
  };
  // Bias adds in a GEMM's epilogue, which a ReLU or tanh GELU may end.
  llvm::DenseSet<Value> biased;
  for (const SmallVector<Operation *> &group : groups) {
    llvm::DenseSet<Operation *> members(group.begin(), group.end());
    // A group of adds alone (a weight's bf16 copy aside: the bias's) whose
    // input a GEMM or a norm gradient writes (read by nothing else) runs
    // in that op's epilogue; so do a bias add and a ReLU or tanh GELU after
    // it (cuBLASLt's RELU_BIAS, GELU_BIAS and, keeping the GELU's input,
    // GELU_AUX_BIAS), which end it, in its group or the next.
    SmallVector<Operation *> kernel;
    for (Operation *op : group)
      if (!weightCopy(op))
        kernel.push_back(op);
    if (kernel.size() == 1 && isActivation(kernel[0]) &&
        biased.contains(throughViews(kernel[0]->getOperand(0)))) {
      if (Node *node = nodeAt(kernel[0]))
        node->absorbed = node->epilogue = true;
      continue;
    }
    Operation *activation = kernel.size() == 2 ? kernel.back() : nullptr; // after a bias
    if (!isActivation(activation) ||
        throughViews(activation->getOperand(0)).getDefiningOp() != kernel[kernel.size() - 2])
      activation = nullptr;
    bool adds = !kernel.empty() && llvm::all_of(kernel, [&](Operation *op) {
      return isa<graph::AddOp>(op) || op == activation;
    });
    int takes = int(kernel.size()) - (activation ? 1 : 0); // the adds
    std::optional<int> room;
    Value source; // the value whose writer's epilogue takes the group
    for (Operation *op : group)
      for (Value operand : op->getOperands())
        if (adds && !room && !members.contains(operand.getDefiningOp()) && operand.hasOneUse())
          if (auto it = epilogue.find(throughViews(operand));
              it != epilogue.end() && it->second >= takes && it->first.hasOneUse()) {
            room = activation ? 0 : it->second - takes;
            source = it->first;
          }
    if (room) {
      // The adds and the views between them and the writer: where those
      // values are split otherwise, the add runs as a kernel of its own
      // (unfusedSeconds).
      for (Operation *op : group)
        if (Node *node = nodeAt(op)) {
          node->absorbed = node->epilogue = true;
          for (Value operand : op->getOperands())
            node->fusedOperands.push_back(members.contains(operand.getDefiningOp()) ||
                                          throughViews(operand) == source);
        }
      for (Operation *op : group)
        for (Value operand : op->getOperands())
          for (Value v = operand; v != source && v.getDefiningOp<graph::ReshapeOp>();
               v = v.getDefiningOp()->getOperand(0))
            if (Node *view = nodeAt(v.getDefiningOp()); view && throughViews(v) == source) {
              view->epilogue = true;
              view->fusedOperands.assign(1, true);
            }
      if (*room > 0)
        epilogue[group.back()->getResult(0)] = *room;
      if (!activation && takes == 1) // a bias alone: an activation may follow
        biased.insert(kernel.back()->getResult(0));
      continue;
    }
    // A kernel reads each of its inputs once, however many of its ops
    // read it (an optimizer's parameter and moments).
    llvm::DenseSet<Value> read;
    for (Operation *op : group) {
      Node *node = nodeAt(op);
      if (!node)
        continue;
      for (Value operand : op->getOperands())
        node->fusedOperands.push_back(members.contains(operand.getDefiningOp()) ||
                                      !read.insert(operand).second);
      for (Value r : op->getResults())
        node->fusedResults.push_back(!r.use_empty() &&
                                     llvm::all_of(r.getUsers(), [&](Operation *user) {
                                       return members.contains(user);
                                     }));
      node->launched = op == group.back();
    }
  }
  // A tanh GELU's gradient multiplied in by the GEMM that makes its output
  // gradient (DGELU): no kernel of its own.
  for (Operation &op : block)
    if (auto product = dyn_cast<graph::MatmulOp>(op))
      if (std::optional<GeluGradientJoin> join = matchGeluGradient(product))
        for (Operation *inside : join->inside)
          if (Node *node = nodeAt(inside))
            node->absorbed = true;
  // The logits' gradient written by the loss's row kernel as it reads the
  // logits (dtc-fuse-loss-gradient): the gradient's ops but its last are
  // no kernel of their own, and the last reads nothing, writing what the
  // row kernel writes. (Not where the classes are split across ranks: the
  // row kernel has no whole row then; a split priced a pass too cheap.)
  for (Operation &op : block)
    if (auto loss = dyn_cast<graph::CrossEntropyOp>(op); loss && !loss.getGradScale()) {
      Value factor;
      SmallVector<Operation *> ops;
      Value gradient = lossGradient(loss, factor, ops);
      if (!gradient)
        continue;
      for (Operation *inside : ops)
        if (Node *node = nodeAt(inside)) {
          bool last = inside == gradient.getDefiningOp();
          node->absorbed = !last;
          if (last) {
            node->fusedOperands.assign(inside->getNumOperands(), true);
            node->fusedResults.assign(1, false);
            node->launched = false;
          }
        }
    }
  for (Operation &op : block) {
    Node *node = nodeAt(&op);
    if (!node)
      continue;
    if (auto sum = dyn_cast<graph::ReduceSumOp>(op); sum && isBiasGradient(sum))
      node->absorbed = true;
    // A weight's bf16 copy: written by the optimizer as it updates the
    // weight, no kernel of its own and no read of the weight.
    if (weightCopy(&op)) {
      node->absorbed = false;
      node->fusedOperands.assign(1, true);
      node->fusedResults.assign(1, false);
      node->launched = false;
    }
  }
}

} // namespace dtc::search
