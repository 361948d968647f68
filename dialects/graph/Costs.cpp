//===- Costs.cpp - each graph op's cost ------------------------------------===//
//
// CostOp::cost for every op: FLOPs (a multiply-add is 2), bytes read and
// written, and the op class that picks a device's efficiency. Families
// share a rule; the numbers are on the op's own shapes, so after SPMD
// partitioning they are a rank's local cost.
//
//===----------------------------------------------------------------------===//
#include "dialects/graph/GraphOps.h"

#include "llvm/ADT/SmallPtrSet.h"

using namespace mlir;

namespace dtc::graph {
namespace {

double elements(Value v) { return double(cast<RankedTensorType>(v.getType()).getNumElements()); }

double bytesOf(Value v) {
  Type e = cast<RankedTensorType>(v.getType()).getElementType();
  return elements(v) * double(std::max<unsigned>(1, (e.getIntOrFloatBitWidth() + 7) / 8));
}

/// Every operand read once, every result written once.
double ioBytes(Operation *op) {
  double bytes = 0;
  llvm::SmallPtrSet<Value, 8> read; // a value it reads twice is read once
  for (Value v : op->getOperands())
    if (read.insert(v).second)
      bytes += bytesOf(v);
  for (Value v : op->getResults())
    bytes += bytesOf(v);
  return bytes;
}

OpCost make(Operation *op, double flops, OpCost::Class c) { return {flops, ioBytes(op), c}; }

/// `perElement` FLOPs per result element.
OpCost elementwise(Operation *op, double perElement = 1) {
  return make(op, perElement * elements(op->getResult(0)), OpCost::Elementwise);
}

OpCost dataMovement(Operation *op) { return make(op, 0, OpCost::DataMovement); }

/// A convolution's multiply-adds: each output element sums Cg x kH x kW
/// products; `output` is the forward's output, `weight` its weights.
double convFlops(Value output, Value weight) {
  auto w = cast<RankedTensorType>(weight.getType());
  return 2.0 * elements(output) * double(w.getDimSize(1) * w.getDimSize(2) * w.getDimSize(3));
}

/// Pooling: each output element combines its window's taps.
double poolFlops(Value output, ArrayRef<int64_t> kernel) {
  return elements(output) * double(kernel[0] * kernel[1]);
}

} // namespace

OpCost ParameterOp::cost() { return {}; }
OpCost ConstantOp::cost() { return {}; }

namespace {
template <class Op> double flopsPerElement(Op, double flops) { return flops; }
// The tanh form: a tanh and a few arithmetic operations.
double flopsPerElement(GeluOp op, double flops) {
  return op.getApproximate() == "tanh" ? 13 : flops;
}
} // namespace

#define DTC_ELEMENTWISE_OP(Op, Flops)                                                    \
  OpCost Op::cost() { return elementwise(*this, flopsPerElement(*this, Flops)); }
#include "dialects/graph/ElementwiseOps.def"

OpCost TriluOp::cost() { return dataMovement(*this); }
// A sort of each row: n log2 n comparisons.
OpCost TopKOp::cost() {
  double n = double(cast<RankedTensorType>(getInput().getType()).getDimSize(getAxis()));
  return make(*this, elements(getInput()) * std::max(1.0, std::log2(n)), OpCost::Reduce);
}

// A reduction does one operation per input element.
OpCost ReduceSumOp::cost() { return make(*this, elements(getInput()), OpCost::Reduce); }
OpCost ReduceMeanOp::cost() { return make(*this, elements(getInput()), OpCost::Reduce); }
OpCost ReduceMaxOp::cost() { return make(*this, elements(getInput()), OpCost::Reduce); }
OpCost ReduceMinOp::cost() { return make(*this, elements(getInput()), OpCost::Reduce); }

// Normalisations: a few passes over each element (max, exp, sum, scale).
OpCost SoftmaxOp::cost() { return make(*this, 5 * elements(getInput()), OpCost::Norm); }
OpCost LogSoftmaxOp::cost() { return make(*this, 5 * elements(getInput()), OpCost::Norm); }
OpCost LayerNormOp::cost() {
  return make(*this, (getRms() ? 5 : 8) * elements(getInput()), OpCost::Norm);
}
OpCost LayerNormBackwardOp::cost() {
  double perElement =
      (getRms() ? 10 : 14) + double(getResidual().size()) + 2.0 * double(getPartials().size());
  return make(*this, perElement * elements(getInput()), OpCost::Norm);
}
OpCost CrossEntropyOp::cost() {
  return make(*this, (getGradScale() ? 7 : 4) * elements(getLogits()), OpCost::Norm);
}
OpCost BatchNormOp::cost() { return make(*this, 2 * elements(getInput()), OpCost::Norm); }

// Batched [M,K] x [K,N]: 2 M N K per output matrix.
OpCost MatmulOp::cost() {
  auto lhs = cast<RankedTensorType>(getLhs().getType());
  int64_t k = lhs.getDimSize(getTransposeLhs() ? lhs.getRank() - 2 : lhs.getRank() - 1);
  return make(*this, 2.0 * elements(getOutput()) * double(k), OpCost::Matmul);
}

namespace {
/// Attention's (query, key) pairs that are scored: every one, or under a
/// causal mask those with j <= i + Sk - Sq; times the leading dims.
double attentionPairs(Value q, Value k, bool causal, bool bshd, bool packed, bool interleaved) {
  auto qt = cast<RankedTensorType>(q.getType());
  SmallVector<int64_t, 4> qs = headsFirst(qt.getShape(), bshd, packed, interleaved),
                          ks = headsFirst(cast<RankedTensorType>(k.getType()).getShape(), bshd,
                                          packed, interleaved);
  int64_t sq = qs[qs.size() - 2], sk = ks[ks.size() - 2];
  double rows = 1;
  for (int64_t n : ArrayRef<int64_t>(qs).drop_back(2))
    rows *= double(n);
  double pairs = 0;
  for (int64_t i = 0; i < sq; ++i)
    pairs += double(causal ? std::clamp<int64_t>(i + sk - sq + 1, 0, sk) : sk);
  return rows * pairs;
}
int64_t lastDim(Value v) { return cast<RankedTensorType>(v.getType()).getShape().back(); }
} // namespace

// Two products and a sum per element (the backward's too).
OpCost RotaryOp::cost() { return elementwise(*this, 3); }

// Per scored pair: q.k (2 D), the exponential and sums (~5), p v (2 Dv).
// It reads q, k, v and writes the output and lse: no scores in memory.
OpCost AttentionOp::cost() {
  double perPair = 2.0 * double(lastDim(getQ()) + lastDim(getV())) + 5;
  return make(*this,
              perPair * attentionPairs(getQ(), getK(), getCausal(), getBshd(), getPacked(),
                                       getInterleaved()),
              OpCost::Matmul);
}
// The scores again, then dp = dy v^T, dv += p^T dy, dq += ds k, dk += ds^T q.
OpCost AttentionBackwardOp::cost() {
  double perPair = 2.0 * double(3 * lastDim(getQ()) + 2 * lastDim(getV())) + 8;
  return make(*this,
              perPair * attentionPairs(getQ(), getK(), getCausal(), getBshd(), getPacked(),
                                       getInterleaved()),
              OpCost::Matmul);
}

// The product's, then per output element the bias (1), the activation
// and the addend (1).
OpCost MatmulBiasOp::cost() {
  auto lhs = cast<RankedTensorType>(getLhs().getType());
  int64_t k = lhs.getDimSize(getTransposeLhs() ? lhs.getRank() - 2 : lhs.getRank() - 1);
  double perElement = 1 + (getActivation() == "gelu_tanh" ? 13 : getActivation() == "relu") +
                      double(getAddend().size());
  return make(*this, (2.0 * double(k) + perElement) * elements(getOutput()), OpCost::Matmul);
}

// The product's, then an add per rhs element for the rows' sum.
OpCost MatmulGradOp::cost() {
  auto lhs = cast<RankedTensorType>(getLhs().getType());
  return make(*this,
              2.0 * double(lhs.getDimSize(0)) * elements(getOutput()) + elements(getRhs()),
              OpCost::Matmul);
}

// The product's, then the GELU's derivative (~20) and a product per output
// element.
OpCost MatmulGeluGradOp::cost() {
  auto lhs = cast<RankedTensorType>(getLhs().getType());
  int64_t k = lhs.getDimSize(getTransposeLhs() ? lhs.getRank() - 2 : lhs.getRank() - 1);
  return make(*this, (2.0 * double(k) + 21) * elements(getOutput()), OpCost::Matmul);
}

// The product's, then an add per output element.
OpCost MatmulAccOp::cost() {
  auto lhs = cast<RankedTensorType>(getLhs().getType());
  int64_t k = lhs.getDimSize(getTransposeLhs() ? lhs.getRank() - 2 : lhs.getRank() - 1);
  return make(*this, (2.0 * double(k) + 1) * elements(getOutput()), OpCost::Matmul);
}

OpCost Conv2DOp::cost() {
  OpCost c = make(*this, convFlops(getOutput(), getWeight()), OpCost::Conv);
  if (getBias())
    c.flops += elements(getOutput());
  return c;
}
OpCost Conv2DBackwardInputOp::cost() {
  return make(*this, convFlops(getGradOutput(), getWeight()), OpCost::Conv);
}
OpCost Conv2DBackwardWeightOp::cost() {
  return make(*this, convFlops(getGradOutput(), getOutput()), OpCost::Conv);
}

OpCost MaxPool2DOp::cost() {
  return make(*this, poolFlops(getOutput(), getKernel()), OpCost::Reduce);
}
OpCost AvgPool2DOp::cost() {
  return make(*this, poolFlops(getOutput(), getKernel()), OpCost::Reduce);
}
OpCost MaxPool2DBackwardOp::cost() {
  return make(*this, poolFlops(getGradOutput(), getKernel()), OpCost::Reduce);
}
OpCost AvgPool2DBackwardOp::cost() {
  return make(*this, poolFlops(getGradOutput(), getKernel()), OpCost::Reduce);
}

OpCost GatherOp::cost() { return dataMovement(*this); }
// One add per update element, plus zeroing the result.
OpCost ScatterAddOp::cost() {
  return make(*this, elements(getUpdates()), OpCost::DataMovement);
}

// Views share their operand's bytes: no kernel runs.
OpCost ReshapeOp::cost() { return {}; }
OpCost SqueezeOp::cost() { return {}; }
OpCost UnsqueezeOp::cost() { return {}; }

OpCost TransposeOp::cost() { return dataMovement(*this); }
OpCost ConcatOp::cost() { return dataMovement(*this); }
OpCost SplitOp::cost() { return dataMovement(*this); }
OpCost SliceOp::cost() { return dataMovement(*this); }

// One pass over the result: the body's FLOPs, but only the fused kernel's
// own operands and result move through memory.
OpCost FusedOp::cost() {
  double flops = 0;
  getBody().walk([&](CostOp op) { flops += op.cost().flops; });
  return make(*this, flops, OpCost::Elementwise);
}

} // namespace dtc::graph
