//===- ShardingRules.cpp - how each graph op's dims may be split ----------===//
//
// One rule per op (or per family): which operand and result dims share a
// factor, which factors are reductions and which must stay whole. See
// ShardingRule in GraphOps.h; docs/sharding.md explains how the search and
// the SPMD partitioner use them.
//
//===----------------------------------------------------------------------===//
#include "dialects/graph/GraphOps.h"

using namespace mlir;

namespace dtc::graph {
namespace {

using Dims = ShardingRule::Dims;
using Combine = ShardingRule::Combine;

ArrayRef<int64_t> shapeOf(Value v) { return cast<ShapedType>(v.getType()).getShape(); }

/// Dims each made of one factor: `factors[i]` for dim i.
Dims single(ArrayRef<int> factors) {
  Dims dims;
  for (int f : factors)
    dims.push_back({f});
  return dims;
}

/// One parallel factor per dim of `shape`.
SmallVector<int> parallelFactors(ShardingRule &rule, ArrayRef<int64_t> shape) {
  SmallVector<int> ids;
  for (int64_t size : shape)
    ids.push_back(rule.add(size));
  return ids;
}

/// `operand` broadcast (NumPy rules) onto the dims `factors` of a shape:
/// aligned from the right; a size-1 dim against a larger one has no factor.
Dims broadcastDims(const ShardingRule &rule, ArrayRef<int64_t> operand, ArrayRef<int> factors) {
  Dims dims;
  size_t lead = factors.size() - operand.size();
  for (size_t d = 0; d < operand.size(); ++d) {
    int f = factors[lead + d];
    if (operand[d] == rule.factors[size_t(f)].size)
      dims.push_back({f});
    else
      dims.push_back({});
  }
  return dims;
}

/// Elementwise ops (and fused groups of them): every result dim is a
/// factor; operands broadcast onto it.
ShardingRule elementwise(Operation *op) {
  ShardingRule rule;
  SmallVector<int> out = parallelFactors(rule, shapeOf(op->getResult(0)));
  for (Value operand : op->getOperands())
    rule.operands.push_back(broadcastDims(rule, shapeOf(operand), out));
  for (size_t r = 0; r < op->getNumResults(); ++r) // a fused op's are all one shape
    rule.results.push_back(single(out));
  return rule;
}

/// Ops that only produce values: each dim a factor.
ShardingRule source(Operation *op) {
  ShardingRule rule;
  rule.results.push_back(single(parallelFactors(rule, shapeOf(op->getResult(0)))));
  return rule;
}

/// Input and output are the same shape; `wholeFrom`.. dims must stay whole
/// (normalised or windowed together), the rest are parallel.
ShardingRule sameShape(Operation *op, ArrayRef<int64_t> wholeDims) {
  ShardingRule rule;
  SmallVector<int> ids = parallelFactors(rule, shapeOf(op->getResult(0)));
  for (int64_t d : wholeDims)
    rule.factors[size_t(ids[size_t(d)])].whole = true;
  for (Value operand : op->getOperands())
    rule.operands.push_back(broadcastDims(rule, shapeOf(operand), ids));
  rule.results.push_back(single(ids));
  return rule;
}

/// Reductions: the reduced dims are reduction factors combined by `combine`.
ShardingRule reduce(Operation *op, ArrayRef<int64_t> axes, bool keepdims, Combine combine) {
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(op->getOperand(0));
  SmallVector<int> ids;
  Dims result;
  for (int64_t d = 0; d < int64_t(in.size()); ++d) {
    bool reduced = llvm::is_contained(axes, d);
    ids.push_back(rule.add(in[size_t(d)], reduced, false, combine));
    if (!reduced)
      result.push_back({ids.back()});
    else if (keepdims)
      result.push_back({});
  }
  rule.operands.push_back(single(ids));
  rule.results.push_back(result);
  return rule;
}

/// Dims of a [N, C, H, W] tensor (or [N, H, W, C] when channels last) from
/// its four factors.
Dims imageDims(int n, int c, int h, int w, bool channelsLast) {
  return channelsLast ? single({n, h, w, c}) : single({n, c, h, w});
}

/// Spatial dims of an image, as whole factors.
std::pair<int, int> spatial(ShardingRule &rule, ArrayRef<int64_t> shape, bool channelsLast) {
  int h = rule.add(shape[channelsLast ? 1 : 2], false, true);
  int w = rule.add(shape[channelsLast ? 2 : 3], false, true);
  return {h, w};
}

/// A convolution-like op from image `in` [N,C,H,W] to image `out`
/// [N,M,OH,OW] through weights [M,C/g,kh,kw]: N parallel, M parallel, C a
/// reduction; with groups, channels stay whole.
struct ConvFactors {
  int n, c, m, h, w, oh, ow, kh, kw;
};
ConvFactors convFactors(ShardingRule &rule, ArrayRef<int64_t> in, ArrayRef<int64_t> out,
                        ArrayRef<int64_t> weight, int64_t groups, bool channelsLast,
                        bool channelsReduce) {
  ConvFactors f;
  bool grouped = groups != 1;
  f.n = rule.add(in[0]);
  f.c = rule.add(in[channelsLast ? 3 : 1], channelsReduce, grouped);
  f.m = rule.add(out[channelsLast ? 3 : 1], !channelsReduce, grouped);
  std::tie(f.h, f.w) = spatial(rule, in, channelsLast);
  std::tie(f.oh, f.ow) = spatial(rule, out, channelsLast);
  f.kh = rule.add(weight[2], false, true);
  f.kw = rule.add(weight[3], false, true);
  return f;
}

} // namespace

ShardingRule ParameterOp::shardingRule() { return source(*this); }
ShardingRule ConstantOp::shardingRule() { return source(*this); }

#define DTC_ELEMENTWISE_OP(Op, Flops)                                                    \
  ShardingRule Op::shardingRule() { return elementwise(*this); }
#include "dialects/graph/ElementwiseOps.def"
ShardingRule FusedOp::shardingRule() { return elementwise(*this); }

// The axis is whole (its k results come from all n); the other dims map
// one to one.
ShardingRule TopKOp::shardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(getInput());
  Dims operand, result;
  for (int64_t d = 0; d < int64_t(in.size()); ++d) {
    if (d == getAxis()) {
      operand.push_back({rule.add(in[size_t(d)], false, true)});
      result.push_back({rule.add(getK(), false, true)});
    } else {
      int id = rule.add(in[size_t(d)]);
      operand.push_back({id});
      result.push_back({id});
    }
  }
  rule.operands.push_back(operand);
  rule.results.push_back(result);
  return rule;
}

ShardingRule TriluOp::shardingRule() {
  int64_t rank = int64_t(shapeOf(getInput()).size());
  return sameShape(*this, {rank - 2, rank - 1});
}
ShardingRule SoftmaxOp::shardingRule() { return sameShape(*this, {int64_t(getAxis())}); }
ShardingRule LogSoftmaxOp::shardingRule() { return sameShape(*this, {int64_t(getAxis())}); }
ShardingRule LayerNormOp::shardingRule() {
  SmallVector<int64_t> normalised;
  for (int64_t d = int64_t(getAxis()); d < int64_t(shapeOf(getInput()).size()); ++d)
    normalised.push_back(d);
  return sameShape(*this, normalised); // scale and bias broadcast onto the normalised dims
}
ShardingRule RotaryOp::shardingRule() {
  // An element reads its partner half a row away: the last dim stays
  // whole; the tables broadcast.
  return sameShape(*this, {int64_t(shapeOf(getInput()).size()) - 1});
}
ShardingRule LayerNormBackwardOp::shardingRule() {
  // Rows split; a row (the normalised dims) stays whole; the statistics
  // have the rows' dims. Partial sums over groups of rows (made after the
  // step is split) keep the rows whole: a split would make them partial
  // while grad_input is not.
  ShardingRule rule;
  ArrayRef<int64_t> shape = shapeOf(getInput());
  int64_t axis = int64_t(getAxis());
  bool partials = !getPartials().empty();
  SmallVector<int> ids;
  for (int64_t d = 0; d < int64_t(shape.size()); ++d)
    ids.push_back(rule.add(shape[size_t(d)], false, partials || d >= axis));
  Dims all = single(ids), row = single(ArrayRef<int>(ids).drop_front(axis)), statistics;
  for (int64_t d = 0; d < int64_t(shape.size()); ++d)
    statistics.push_back(d < axis ? Dims::value_type{ids[size_t(d)]} : Dims::value_type{});
  rule.operands = {all, row, all};
  if (!getResidual().empty())
    rule.operands.push_back(all);
  rule.results = {all, statistics, statistics};
  if (partials) {
    Dims sums{{rule.add(shapeOf(getPartials()[0])[0], false, true)}};
    for (int64_t d = 1; d < int64_t(shape.size()); ++d)
      sums.push_back(d < axis ? Dims::value_type{} : Dims::value_type{ids[size_t(d)]});
    rule.results.append(getPartials().size(), sums);
  }
  return rule;
}
ShardingRule CrossEntropyOp::shardingRule() {
  // Rows split; labels and results have the rows' dims. The classes split
  // too (each rank's block of the vocabulary: no logits gathered), their
  // parts combined as LogSumExp; not once the op writes the logits'
  // gradient (dtc-fuse-loss-gradient, after partitioning), which needs the
  // row's whole log-sum-exp.
  ShardingRule rule;
  ArrayRef<int64_t> shape = shapeOf(getLogits());
  SmallVector<int> ids;
  bool fused = bool(getGradScale());
  for (int64_t d = 0; d + 1 < int64_t(shape.size()); ++d)
    ids.push_back(rule.add(shape[size_t(d)]));
  ids.push_back(rule.add(shape.back(), /*reduction=*/!fused, /*whole=*/fused,
                         Combine::LogSumExp));
  Dims rows = single(ArrayRef<int>(ids).drop_back());
  rule.operands = {single(ids), rows};
  rule.results = {rows, rows};
  if (getGradScale()) {
    rule.operands.push_back(rows);
    rule.results.push_back(single(ids));
  }
  return rule;
}
ShardingRule BatchNormOp::shardingRule() {
  // Statistics are per channel: [C] operands line up with dim 1.
  ShardingRule rule;
  SmallVector<int> ids = parallelFactors(rule, shapeOf(getInput()));
  rule.operands.push_back(single(ids));
  for (unsigned i = 1; i < getOperation()->getNumOperands(); ++i)
    rule.operands.push_back(single({ids[1]}));
  rule.results.push_back(single(ids));
  return rule;
}

ShardingRule ReduceSumOp::shardingRule() {
  return reduce(*this, getAxes(), getKeepdims(), Combine::Sum);
}
ShardingRule ReduceMeanOp::shardingRule() {
  return reduce(*this, getAxes(), getKeepdims(), Combine::Mean);
}
ShardingRule ReduceMaxOp::shardingRule() {
  return reduce(*this, getAxes(), getKeepdims(), Combine::Max);
}
ShardingRule ReduceMinOp::shardingRule() {
  return reduce(*this, getAxes(), getKeepdims(), Combine::Min);
}

// [batch..., M, K] x [batch..., K, N] -> [batch..., M, N]; batch dims
// broadcast; K is a sum.
ShardingRule MatmulOp::shardingRule() {
  return shardingRuleOf(getOutput(), getLhs(), getRhs(), getTransposeLhs(), getTransposeRhs());
}

ShardingRule MatmulOp::shardingRuleOf(Value output, Value lhsValue, Value rhsValue,
                                      bool transposeLhs, bool transposeRhs) {
  ShardingRule rule;
  ArrayRef<int64_t> out = shapeOf(output), lhs = shapeOf(lhsValue), rhs = shapeOf(rhsValue);
  size_t batch = out.size() - 2;
  SmallVector<int> ids = parallelFactors(rule, out);
  int k = rule.add(lhs[transposeLhs ? lhs.size() - 2 : lhs.size() - 1], true);
  auto side = [&](ArrayRef<int64_t> shape, int inner, int outer, bool transpose) {
    SmallVector<int> batchIds(ids.begin(), ids.begin() + long(batch));
    Dims dims = broadcastDims(rule, shape.drop_back(2), batchIds);
    dims.push_back({transpose ? inner : outer});
    dims.push_back({transpose ? outer : inner});
    return dims;
  };
  rule.operands.push_back(side(lhs, k, ids[batch], transposeLhs));
  rule.operands.push_back(side(rhs, ids[batch + 1], k, transposeRhs));
  rule.results.push_back(single(ids));
  return rule;
}

namespace {
/// A product's rule with its contraction whole: an epilogue reads the whole
/// sum.
ShardingRule wholeSumRule(Value output, Value lhs, Value rhs, bool transposeLhs,
                          bool transposeRhs) {
  ShardingRule rule = MatmulOp::shardingRuleOf(output, lhs, rhs, transposeLhs, transposeRhs);
  for (ShardingRule::Factor &f : rule.factors)
    f.whole = f.whole || f.reduction;
  return rule;
}
} // namespace

// The product's rule; the bias lies along the output's columns, and the
// contraction stays whole (the bias and activation apply to the whole sum).
ShardingRule MatmulBiasOp::shardingRule() {
  ShardingRule rule =
      wholeSumRule(getOutput(), getLhs(), getRhs(), getTransposeLhs(), getTransposeRhs());
  rule.operands.push_back({rule.results[0].back()});
  if (!getAddend().empty()) // split as the output
    rule.operands.push_back(rule.results[0]);
  if (getPreactivation()) // split as the output
    rule.results.push_back(rule.results[0]);
  return rule;
}

// The product's rule, the contraction whole (the rows' sum reads every
// row); the sum lies along the output's columns.
ShardingRule MatmulGradOp::shardingRule() {
  ShardingRule rule = wholeSumRule(getOutput(), getLhs(), getRhs(), /*transposeLhs=*/true, false);
  auto sum = cast<RankedTensorType>(getBiasGrad().getType());
  ShardingRule::Dims dims(size_t(sum.getRank())); // size-1 dims have no factor
  if (!dims.empty())
    dims.back() = rule.results[0].back();
  rule.results.push_back(dims);
  return rule;
}

// The product's rule, the contraction whole (the derivative multiplies the
// whole sum); the GELU's input splits as the output.
ShardingRule MatmulGeluGradOp::shardingRule() {
  ShardingRule rule =
      wholeSumRule(getOutput(), getLhs(), getRhs(), getTransposeLhs(), getTransposeRhs());
  rule.operands.push_back(rule.results[0]);
  return rule;
}

// The product's rule, the contraction whole (the addend is added to the
// whole sum); the addend splits as the output.
ShardingRule MatmulAccOp::shardingRule() {
  ShardingRule rule =
      wholeSumRule(getOutput(), getLhs(), getRhs(), getTransposeLhs(), getTransposeRhs());
  rule.operands.push_back(rule.results[0]);
  return rule;
}

namespace {
/// Attention's rule: each leading dim (batch, heads) a parallel factor of
/// every operand and result; the sequences and head dims whole (a row's
/// softmax needs all its keys; the backward sums over queries). The
/// forward's queries are independent but for a causal mask's offset, so
/// without one they split too. A bias splits with the scores along the
/// dims it has (not those it broadcasts).
/// With `bshd` the rule is made for the heads-first view of q, k, v and the
/// output (headsFirst) and their dims swapped back; lse and the bias are
/// heads-first either way. Packed, q, k and v are one value whose
/// sequence is the queries' and the keys' (whole), its 3 whole too.
/// Grouped-query attention (k and v with G heads where q has H = G R):
/// q's heads are two factors, the groups (k's and v's heads, split) and
/// the heads within a group (whole: split, their key-value gradients
/// would be partial sums).
ShardingRule attentionRule(Operation *op, Value q, Value k, Value v, Value bias,
                           bool splitQueries, bool bshd, bool packed, bool interleaved) {
  ShardingRule rule;
  SmallVector<int64_t, 4> qs = headsFirst(shapeOf(q), bshd, packed, interleaved);
  size_t lead = qs.size() - 2;
  SmallVector<int64_t, 4> kvLead(headsFirst(shapeOf(k), bshd, packed, interleaved));
  kvLead.resize(lead);
  SmallVector<int> ids = parallelFactors(rule, kvLead);
  // The heads within a group, beside the group in q's heads dim; -1 without.
  int within = lead && kvLead.back() != qs[lead - 1]
                   ? rule.add(qs[lead - 1] / kvLead.back(), false, true)
                   : -1;
  int sq = rule.add(qs[lead], false, !splitQueries || packed);
  int sk = packed ? sq : rule.add(headsFirst(shapeOf(k), bshd)[lead], false, true);
  int d = rule.add(qs.back(), false, true);
  int dv = packed ? d : rule.add(shapeOf(v).back(), false, true);
  int piece = packed ? rule.add(3, false, true) : -1;
  auto dims = [&](std::initializer_list<int> last, bool layout = true, bool kv = false) {
    Dims result = single(ids);
    if (within >= 0 && !kv)
      result.back().push_back(within);
    for (int f : last)
      result.push_back({f});
    if (bshd && layout)
      std::swap(result[result.size() - 3], result[result.size() - 2]);
    return result;
  };
  Dims qDims = dims({sq, d}), kDims = dims({sk, d}, true, true),
       vDims = dims({sk, dv}, true, true), outDims = dims({sq, dv}), lseDims = dims({sq}, false);
  if (packed) { // [..., S, 3, H, D] or interleaved [..., S, H, 3, D]
    qDims.insert(qDims.end() - (interleaved ? 1 : 2), SmallVector<int, 2>{piece});
    kDims = vDims = qDims;
  }
  rule.operands = {qDims, kDims, vDims};
  bool backward = isa<AttentionBackwardOp>(op);
  if (backward) // output, lse, grad_output
    rule.operands.append({outDims, lseDims, outDims});
  if (bias) {
    ArrayRef<int64_t> bs = shapeOf(bias);
    using Factors = Dims::value_type;
    Dims biasDims;
    for (size_t d = 0; d < lead; ++d)
      biasDims.push_back(bs[d] == 1 ? Factors{} : lseDims[d]);
    biasDims.push_back(bs[lead] == 1 ? Factors{} : Factors{sq});
    biasDims.push_back(Factors{sk});
    rule.operands.push_back(biasDims);
  }
  if (backward && packed)
    rule.results = {qDims};
  else if (backward)
    rule.results = {qDims, kDims, vDims};
  else
    rule.results = {outDims, lseDims};
  return rule;
}
} // namespace

ShardingRule AttentionOp::shardingRule() {
  return attentionRule(*this, getQ(), getK(), getV(), getBias(), !getCausal(), getBshd(),
                       getPacked(), getInterleaved());
}
ShardingRule AttentionBackwardOp::shardingRule() {
  return attentionRule(*this, getQ(), getK(), getV(), getBias(), false, getBshd(), getPacked(),
                       getInterleaved());
}

ShardingRule Conv2DOp::shardingRule() {
  ShardingRule rule;
  bool last = getChannelsLast();
  ConvFactors f = convFactors(rule, shapeOf(getInput()), shapeOf(getOutput()),
                              shapeOf(getWeight()), getGroups(), last, /*channelsReduce=*/true);
  rule.operands.push_back(imageDims(f.n, f.c, f.h, f.w, last));
  rule.operands.push_back(single({f.m, f.c, f.kh, f.kw}));
  if (getBias())
    rule.operands.push_back(single({f.m}));
  rule.results.push_back(imageDims(f.n, f.m, f.oh, f.ow, last));
  // The bias (and a fused ReLU) apply to the whole sum: each rank's partial
  // sum must not get its own.
  if (getBias() || getRelu())
    rule.factors[size_t(f.c)].whole = true;
  return rule;
}
ShardingRule Conv2DBackwardInputOp::shardingRule() {
  // grad_output [N,M,OH,OW], weight [M,C,kh,kw] -> grad input [N,C,H,W]: M sums.
  ShardingRule rule;
  ConvFactors f = convFactors(rule, shapeOf(getOutput()), shapeOf(getGradOutput()),
                              shapeOf(getWeight()), getGroups(), false, /*channelsReduce=*/false);
  rule.operands.push_back(imageDims(f.n, f.m, f.oh, f.ow, false));
  rule.operands.push_back(single({f.m, f.c, f.kh, f.kw}));
  rule.results.push_back(imageDims(f.n, f.c, f.h, f.w, false));
  return rule;
}
ShardingRule Conv2DBackwardWeightOp::shardingRule() {
  // input [N,C,H,W], grad_output [N,M,OH,OW] -> grad weight [M,C,kh,kw]: N sums.
  ShardingRule rule;
  ConvFactors f = convFactors(rule, shapeOf(getInput()), shapeOf(getGradOutput()),
                              shapeOf(getOutput()), getGroups(), false, /*channelsReduce=*/false);
  rule.factors[size_t(f.m)].reduction = false;
  rule.factors[size_t(f.n)].reduction = true;
  rule.operands.push_back(imageDims(f.n, f.c, f.h, f.w, false));
  rule.operands.push_back(imageDims(f.n, f.m, f.oh, f.ow, false));
  rule.results.push_back(single({f.m, f.c, f.kh, f.kw}));
  return rule;
}

/// Pooling and its gradients: batch and channels parallel, windows whole.
static ShardingRule pool(Operation *op, bool channelsLast) {
  int64_t h = channelsLast ? 1 : 2, w = channelsLast ? 2 : 3;
  ShardingRule rule;
  ArrayRef<int64_t> out = shapeOf(op->getResult(0));
  int n = rule.add(out[0]), c = rule.add(out[channelsLast ? 3 : 1]);
  for (Value operand : op->getOperands()) {
    ArrayRef<int64_t> shape = shapeOf(operand);
    rule.operands.push_back(imageDims(n, c, rule.add(shape[size_t(h)], false, true),
                                      rule.add(shape[size_t(w)], false, true), channelsLast));
  }
  rule.results.push_back(imageDims(n, c, rule.add(out[size_t(h)], false, true),
                                   rule.add(out[size_t(w)], false, true), channelsLast));
  return rule;
}
ShardingRule MaxPool2DOp::shardingRule() { return pool(*this, getChannelsLast()); }
ShardingRule AvgPool2DOp::shardingRule() { return pool(*this, getChannelsLast()); }
ShardingRule MaxPool2DBackwardOp::shardingRule() { return pool(*this, false); }
ShardingRule AvgPool2DBackwardOp::shardingRule() { return pool(*this, false); }

/// Gather and scatter-add: data [pre..., V, post...], indices [I...],
/// gathered [pre..., I..., post...]. The table dim V may split (a
/// vocabulary-parallel embedding: each rank looks its indices up in its
/// block of rows, dtc-spmd-partition shifting them there): in gather it is
/// in no result, a sum of the ranks' lookups (zeros where an index is in
/// another block); in scatter-add each rank adds into its block. Only a
/// table of kSplitTableRows rows or more (a vocabulary): a small table (a
/// toy's vocabulary, a short model's positions) saves little split and
/// adds choices to every search; the searched plans of the lit tests' small
/// models stay as they were. For scatter-add (the gathered values summed
/// into the table) the index dims are sums.
constexpr int64_t kSplitTableRows = 1024;
static void gatherDims(ShardingRule &rule, ArrayRef<int64_t> data, ArrayRef<int64_t> indices,
                       int64_t axis, bool indexSums, Dims &dataDims, Dims &indexDims,
                       Dims &gatheredDims) {
  int64_t rank = int64_t(data.size());
  axis = axis < 0 ? axis + rank : axis;
  SmallVector<int> dataIds;
  for (int64_t d = 0; d < rank; ++d) {
    bool rows = d == axis;
    dataIds.push_back(rule.add(data[size_t(d)], /*reduction=*/rows && !indexSums,
                               /*whole=*/rows && data[size_t(d)] < kSplitTableRows));
  }
  SmallVector<int> indexIds;
  for (int64_t size : indices)
    indexIds.push_back(rule.add(size, indexSums));
  dataDims = single(dataIds);
  indexDims = single(indexIds);
  for (int64_t d = 0; d < axis; ++d)
    gatheredDims.push_back({dataIds[size_t(d)]});
  for (int id : indexIds)
    gatheredDims.push_back({id});
  for (int64_t d = axis + 1; d < rank; ++d)
    gatheredDims.push_back({dataIds[size_t(d)]});
}
ShardingRule GatherOp::shardingRule() {
  ShardingRule rule;
  Dims data, indices, gathered;
  gatherDims(rule, shapeOf(getData()), shapeOf(getIndices()), getAxis(), false, data, indices,
             gathered);
  rule.operands = {data, indices};
  rule.results = {gathered};
  return rule;
}
ShardingRule ScatterAddOp::shardingRule() {
  ShardingRule rule;
  Dims table, indices, updates;
  gatherDims(rule, shapeOf(getOutput()), shapeOf(getIndices()), getAxis(), true, table, indices,
             updates);
  rule.operands = {updates, indices};
  rule.results = {table};
  return rule;
}

/// Reshape-like ops: dims are matched in groups of equal element count.
/// Within a group, a dim that is split into several keeps them as its
/// factors (major first), several merged into one likewise; a group that is
/// both split and merged stays whole. Size-1 dims have no factor.
static ShardingRule reshape(Operation *op) {
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(op->getOperand(0)), out = shapeOf(op->getResult(0));
  Dims inDims(in.size()), outDims(out.size());
  size_t i = 0, o = 0;
  auto skipOnes = [&] {
    while (i < in.size() && in[i] == 1)
      ++i;
    while (o < out.size() && out[o] == 1)
      ++o;
  };
  skipOnes();
  while (i < in.size() && o < out.size()) {
    size_t i0 = i, o0 = o;
    int64_t a = in[i++], b = out[o++];
    while (a != b) {
      if (a < b)
        a *= in[i++];
      else
        b *= out[o++];
    }
    size_t nIn = i - i0, nOut = o - o0;
    if (nIn == 1) { // one dim split into nOut (or kept)
      for (size_t k = o0; k < o; ++k) {
        int f = rule.add(out[k]);
        outDims[k] = {f};
        inDims[i0].push_back(f);
      }
    } else if (nOut == 1) { // nIn dims merged into one
      for (size_t k = i0; k < i; ++k) {
        int f = rule.add(in[k]);
        inDims[k] = {f};
        outDims[o0].push_back(f);
      }
    } else {
      for (size_t k = i0; k < i; ++k)
        inDims[k] = {rule.add(in[k], false, true)};
      for (size_t k = o0; k < o; ++k)
        outDims[k] = {rule.add(out[k], false, true)};
    }
    skipOnes();
  }
  rule.operands.push_back(inDims);
  rule.results.push_back(outDims);
  return rule;
}
ShardingRule ReshapeOp::shardingRule() { return reshape(*this); }
ShardingRule SqueezeOp::shardingRule() { return reshape(*this); }
ShardingRule UnsqueezeOp::shardingRule() { return reshape(*this); }

ShardingRule TransposeOp::shardingRule() {
  ShardingRule rule;
  SmallVector<int> ids = parallelFactors(rule, shapeOf(getInput()));
  Dims out;
  for (int64_t p : getPerm())
    out.push_back({ids[size_t(p)]});
  rule.operands.push_back(single(ids));
  rule.results.push_back(out);
  return rule;
}

/// Concat, split and slice: the dims they cut or join stay whole (each
/// tensor its own factor there); the other dims are shared.
static ShardingRule cutOrJoin(Operation *op, ArrayRef<bool> cut) {
  ShardingRule rule;
  ArrayRef<int64_t> ref = shapeOf(op->getResult(0));
  SmallVector<int> shared;
  for (size_t d = 0; d < ref.size(); ++d)
    shared.push_back(cut[d] ? -1 : rule.add(ref[d]));
  auto dimsOf = [&](Value v) {
    Dims dims;
    ArrayRef<int64_t> shape = shapeOf(v);
    for (size_t d = 0; d < shape.size(); ++d)
      dims.push_back({cut[d] ? rule.add(shape[d], false, true) : shared[d]});
    return dims;
  };
  for (Value operand : op->getOperands())
    rule.operands.push_back(dimsOf(operand));
  for (Value result : op->getResults())
    rule.results.push_back(dimsOf(result));
  return rule;
}
static SmallVector<bool> onlyAxis(Value v, int64_t axis) {
  SmallVector<bool> cut(shapeOf(v).size(), false);
  cut[size_t(axis < 0 ? axis + int64_t(cut.size()) : axis)] = true;
  return cut;
}
ShardingRule ConcatOp::shardingRule() { return cutOrJoin(*this, onlyAxis(getOutput(), getAxis())); }
ShardingRule SplitOp::shardingRule() { return cutOrJoin(*this, onlyAxis(getInput(), getAxis())); }
ShardingRule SliceOp::shardingRule() {
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getOutput());
  SmallVector<bool> cut;
  for (size_t d = 0; d < in.size(); ++d)
    cut.push_back(in[d] != out[d]);
  return cutOrJoin(*this, cut);
}


} // namespace dtc::graph
