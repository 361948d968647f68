//===- SearchGraph.cpp - the graph as nodes ---------------------------------===//
#include "compiler/SearchGraph.h"
#include "dialects/graph/AttrNames.h"

#include "llvm/ADT/StringSet.h"

namespace dtc::search {

void Search::buildGraph() {
  buildNodes();
  markBatch();
  label();
  markCostFacts();
}

void Search::buildNodes() {
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
  // The weights the step updates (not the optimizer's state): their
  // updates' gathers share a bucket (Search::updateSeconds).
  llvm::StringSet<> weights;
  for (Operation &op : block)
    if (auto p = dyn_cast<graph::ParameterOp>(op);
        p && !p->hasAttr(attr::kZeros) && !p->hasAttr(attr::kAccumulator))
      weights.insert(p.getName());
  updates_ = 0;
  for (unsigned i = 0; i < func_.getNumResults(); ++i)
    if (auto name = func_.getResultAttrOfType<StringAttr>(i, attr::kUpdates))
      updates_ += int(weights.contains(name.getValue()));
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

void Search::add(Node node) {
  for (auto [i, r] : llvm::enumerate(node.results()))
    nodeOfValue_[r] = {int(nodes_.size()), int(i)};
  if (node.op) {
    positions_[node.op] = positions_.size();
    nodeOfOp_[node.op] = int(nodes_.size());
  }
  nodes_.push_back(std::move(node));
}

size_t Search::position(Operation *op) const {
  auto it = positions_.find(op);
  return it == positions_.end() ? positions_.size() : it->second;
}

void Search::markBatch() {
  llvm::DenseMap<Value, SmallVector<bool, 4>> batchDims, sequenceDims;
  for (Node &node : nodes_) {
    node.batchFactor.assign(node.rule.factors.size(), false);
    node.sequenceFactor.assign(node.rule.factors.size(), false);
    if (!node.op) {
      if (node.dataInput) {
        node.batchFactor[0] = true;
        for (size_t f = 1; f < node.sequenceFactor.size(); ++f)
          node.sequenceFactor[f] = true;
      }
    } else {
      // A batch dim's leading factor is the batch; what a reshape merged
      // behind it (the sequence of [B S, D]) is not, so that tensor axes
      // may split it (the language-model head and loss by tokens). That,
      // and the leading factors of the data's other dims, followed as the
      // batch is, are the sequence (--no-sequence-parallel).
      auto marked = [](const auto &map, Value v, size_t d) {
        auto it = map.find(v);
        return it != map.end() && d < it->second.size() && it->second[d];
      };
      for (auto [i, operand] : llvm::enumerate(node.op->getOperands())) {
        if (i >= node.rule.operands.size())
          continue;
        for (auto [d, factors] : llvm::enumerate(node.rule.operands[i])) {
          bool batched = marked(batchDims, operand, d);
          bool sequence = marked(sequenceDims, operand, d);
          int lead = leadingFactor(node.rule, factors);
          if (batched && lead >= 0)
            node.batchFactor[size_t(lead)] = true;
          for (int f : factors)
            if (sequence ? f == lead : batched && f != lead)
              node.sequenceFactor[size_t(f)] = true;
        }
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
      SmallVector<bool, 4> sequence;
      for (const auto &factors : node.rule.results[j])
        sequence.push_back(llvm::any_of(
            factors, [&](int64_t f) { return node.sequenceFactor[size_t(f)]; }));
      if (llvm::is_contained(sequence, true))
        sequenceDims[result] = sequence;
    }
  }
}

void Search::label() {
  for (Node &node : nodes_) {
    llvm::hash_code h = llvm::hash_combine(node.forward, node.parameter, node.dataInput);
    for (bool b : llvm::concat<bool>(node.batchFactor, node.sequenceFactor))
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

} // namespace dtc::search
