//===- Gradients.cpp - each graph op's gradient ----------------------------===//
//
// DifferentiableOp::buildGradients for every op, written as graph ops on the
// op's operands, results and result gradients; the autodiff pass
// (compiler/Autodiff.cpp) calls them in reverse order. A broadcasting op
// sums its gradient back to each operand's shape (sumToShape).
//
//===----------------------------------------------------------------------===//
#include "dialects/graph/GraphOps.h"
#include "dialects/graph/ShapeRules.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

#include <cmath>

using namespace mlir;

#include "dialects/graph/GraphInterfaces.cpp.inc"

namespace dtc::graph {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

bool isFloat(Value v) { return isa<FloatType>(typeOf(v).getElementType()); }

/// A rank-0 constant of `like`'s element type.
Value scalar(OpBuilder &b, Location loc, Value like, double value) {
  Type element = typeOf(like).getElementType();
  auto type = RankedTensorType::get({}, element);
  return b.create<ConstantOp>(loc, DenseElementsAttr::get(type, b.getFloatAttr(element, value)));
}

/// Sums `grad` (the shape of a broadcast result) down to `target`'s shape:
/// over the leading dims `target` lacks and the dims where it has size 1.
Value sumToShape(OpBuilder &b, Location loc, Value grad, RankedTensorType target) {
  RankedTensorType type = typeOf(grad);
  if (type.getShape() == target.getShape())
    return grad;
  int64_t extra = type.getRank() - target.getRank();
  SmallVector<int64_t> axes;
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (d < extra || (target.getDimSize(d - extra) == 1 && type.getDimSize(d) != 1))
      axes.push_back(d);
  Value sum = axes.empty() ? grad : b.create<ReduceSumOp>(loc, grad, axes, true).getResult();
  return b.create<ReshapeOp>(loc, RankedTensorType::get(target.getShape(), type.getElementType()),
                             sum);
}

/// `grad` broadcast from a reduction's keepdims shape back to `target`.
Value broadcastTo(OpBuilder &b, Location loc, Value grad, RankedTensorType target) {
  if (typeOf(grad).getShape() == target.getShape())
    return grad;
  return b.create<BroadcastOp>(loc, grad, target.getShape());
}

/// A reduction's result gradient as the keepdims shape over `input`.
Value keepdimsGrad(OpBuilder &b, Location loc, Value grad, RankedTensorType input,
                   ArrayRef<int64_t> axes) {
  SmallVector<int64_t> shape(input.getShape());
  for (int64_t a : axes)
    shape[a] = 1;
  return b.create<ReshapeOp>(loc, RankedTensorType::get(shape, input.getElementType()), grad);
}

/// A zero gradient flows nowhere: every operand gets null.
LogicalResult noGradient(Operation *op, SmallVectorImpl<Value> &grads) {
  grads.assign(op->getNumOperands(), Value());
  return success();
}

LogicalResult notDefined(Operation *op) {
  return op->emitError("the gradient of '") << op->getName() << "' is not defined yet";
}

int64_t normalized(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

} // namespace

//===----------------------------------------------------------------------===//
// Sources
//===----------------------------------------------------------------------===//

LogicalResult ParameterOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &g) {
  return noGradient(*this, g);
}
LogicalResult ConstantOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &g) {
  return noGradient(*this, g);
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

LogicalResult AddOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  Location loc = getLoc();
  g.assign({sumToShape(b, loc, rg[0], typeOf(getLhs())), sumToShape(b, loc, rg[0], typeOf(getRhs()))});
  return success();
}

LogicalResult SubOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  Location loc = getLoc();
  g.assign({sumToShape(b, loc, rg[0], typeOf(getLhs())),
       sumToShape(b, loc, b.create<NegOp>(loc, rg[0]), typeOf(getRhs()))});
  return success();
}

LogicalResult MulOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  Location loc = getLoc();
  g.assign({sumToShape(b, loc, b.create<MulOp>(loc, rg[0], getRhs()), typeOf(getLhs())),
       sumToShape(b, loc, b.create<MulOp>(loc, rg[0], getLhs()), typeOf(getRhs()))});
  return success();
}

LogicalResult DivOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  Location loc = getLoc();
  // d/dlhs = g / rhs; d/drhs = -g * out / rhs
  Value dl = b.create<DivOp>(loc, rg[0], getRhs());
  Value dr = b.create<NegOp>(loc, b.create<MulOp>(loc, dl, getOutput()));
  g.assign({sumToShape(b, loc, dl, typeOf(getLhs())), sumToShape(b, loc, dr, typeOf(getRhs()))});
  return success();
}

LogicalResult PowOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &) {
  return notDefined(*this);
}
LogicalResult MaxOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &) {
  return notDefined(*this);
}
LogicalResult MinOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &) {
  return notDefined(*this);
}

// Comparisons and logic: piecewise constant or boolean; nothing flows back.
#define DTC_NO_GRADIENT(Op)                                                                       \
  LogicalResult Op::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &g) {         \
    return noGradient(*this, g);                                                                  \
  }
DTC_NO_GRADIENT(EqualOp)
DTC_NO_GRADIENT(LessOp)
DTC_NO_GRADIENT(LessEqualOp)
DTC_NO_GRADIENT(GreaterOp)
DTC_NO_GRADIENT(GreaterEqualOp)
DTC_NO_GRADIENT(AndOp)
DTC_NO_GRADIENT(OrOp)
DTC_NO_GRADIENT(XorOp)
DTC_NO_GRADIENT(NotOp)
#undef DTC_NO_GRADIENT

LogicalResult NegOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  g.assign({b.create<NegOp>(getLoc(), rg[0])});
  return success();
}

LogicalResult AbsOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  if (!isFloat(getInput()))
    return noGradient(*this, g);
  Location loc = getLoc();
  Value negative = b.create<LessOp>(loc, getInput(), scalar(b, loc, getInput(), 0.0));
  g.assign({b.create<WhereOp>(loc, negative, b.create<NegOp>(loc, rg[0]), rg[0])});
  return success();
}

LogicalResult ExpOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  g.assign({b.create<MulOp>(getLoc(), rg[0], getOutput())});
  return success();
}

LogicalResult LogOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  g.assign({b.create<DivOp>(getLoc(), rg[0], getInput())});
  return success();
}

LogicalResult SqrtOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  Location loc = getLoc();
  // g / (2 sqrt(x))
  g.assign({b.create<DivOp>(loc, b.create<MulOp>(loc, rg[0], scalar(b, loc, getInput(), 0.5)),
                       getOutput())});
  return success();
}

LogicalResult ReciprocalOp::buildGradients(OpBuilder &b, ValueRange rg,
                                           SmallVectorImpl<Value> &g) {
  Location loc = getLoc();
  // -g * y^2
  g.assign({b.create<NegOp>(loc, b.create<MulOp>(loc, rg[0],
                                            b.create<MulOp>(loc, getOutput(), getOutput())))});
  return success();
}

LogicalResult TanhOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  Location loc = getLoc();
  // g * (1 - y^2)
  Value y2 = b.create<MulOp>(loc, getOutput(), getOutput());
  g.assign({b.create<MulOp>(loc, rg[0], b.create<SubOp>(loc, scalar(b, loc, y2, 1.0), y2))});
  return success();
}

LogicalResult ErfOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  Location loc = getLoc();
  // g * 2/sqrt(pi) * exp(-x^2)
  Value x = getInput();
  Value e = b.create<ExpOp>(loc, b.create<NegOp>(loc, b.create<MulOp>(loc, x, x)));
  g.assign({b.create<MulOp>(loc, rg[0],
                       b.create<MulOp>(loc, e, scalar(b, loc, x, 2.0 / std::sqrt(M_PI))))});
  return success();
}

LogicalResult SigmoidOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  Location loc = getLoc();
  // g * y * (1 - y)
  Value y = getOutput();
  g.assign({b.create<MulOp>(loc, rg[0],
                       b.create<MulOp>(loc, y, b.create<SubOp>(loc, scalar(b, loc, y, 1.0), y)))});
  return success();
}

LogicalResult ReluOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  if (!isFloat(getInput()))
    return noGradient(*this, g);
  Location loc = getLoc();
  Value positive = b.create<GreaterOp>(loc, getInput(), scalar(b, loc, getInput(), 0.0));
  g.assign({b.create<WhereOp>(loc, positive, rg[0], scalar(b, loc, getInput(), 0.0))});
  return success();
}

LogicalResult GeluOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  if (getApproximate() != "none")
    return notDefined(*this);
  Location loc = getLoc();
  // Phi(x) + x phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2, phi(x) = exp(-x^2/2) / sqrt(2 pi)
  Value x = getInput();
  Value cdf = b.create<MulOp>(
      loc, scalar(b, loc, x, 0.5),
      b.create<AddOp>(loc, scalar(b, loc, x, 1.0),
                      b.create<ErfOp>(loc, b.create<MulOp>(loc, x, scalar(b, loc, x, M_SQRT1_2)))));
  Value pdf = b.create<MulOp>(
      loc, scalar(b, loc, x, 1.0 / std::sqrt(2.0 * M_PI)),
      b.create<ExpOp>(loc, b.create<MulOp>(loc, b.create<MulOp>(loc, x, x),
                                           scalar(b, loc, x, -0.5))));
  g.assign({b.create<MulOp>(loc, rg[0], b.create<AddOp>(loc, cdf, b.create<MulOp>(loc, x, pdf)))});
  return success();
}

LogicalResult ClipOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  if (!isFloat(getInput()))
    return noGradient(*this, g);
  Location loc = getLoc();
  Value x = getInput(), inside;
  auto both = [&](Value c) { inside = inside ? b.create<AndOp>(loc, inside, c).getResult() : c; };
  if (auto min = getMin())
    both(b.create<GreaterEqualOp>(loc, x, scalar(b, loc, x, min->convertToDouble())));
  if (auto max = getMax())
    both(b.create<LessEqualOp>(loc, x, scalar(b, loc, x, max->convertToDouble())));
  g.assign({inside ? b.create<WhereOp>(loc, inside, rg[0], scalar(b, loc, x, 0.0)).getResult()
              : rg[0]});
  return success();
}

LogicalResult CastOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  if (!isFloat(getInput()) || !isFloat(getOutput()))
    return noGradient(*this, g);
  g.assign({b.create<CastOp>(getLoc(), getInput().getType(), rg[0])});
  return success();
}

LogicalResult WhereOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  Location loc = getLoc();
  Value zero = scalar(b, loc, getOutput(), 0.0);
  Value dx = b.create<WhereOp>(loc, getCond(), rg[0], zero);
  Value dy = b.create<WhereOp>(loc, getCond(), zero, rg[0]);
  g.assign({Value(), sumToShape(b, loc, dx, typeOf(getX())), sumToShape(b, loc, dy, typeOf(getY()))});
  return success();
}

LogicalResult BroadcastOp::buildGradients(OpBuilder &b, ValueRange rg,
                                          SmallVectorImpl<Value> &g) {
  g.assign({sumToShape(b, getLoc(), rg[0], typeOf(getInput()))});
  return success();
}

LogicalResult TriluOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &) {
  return notDefined(*this);
}

//===----------------------------------------------------------------------===//
// Reductions and normalisations
//===----------------------------------------------------------------------===//

LogicalResult ReduceSumOp::buildGradients(OpBuilder &b, ValueRange rg,
                                          SmallVectorImpl<Value> &g) {
  Location loc = getLoc();
  auto input = typeOf(getInput());
  g.assign({broadcastTo(b, loc, keepdimsGrad(b, loc, rg[0], input, getAxes()), input)});
  return success();
}

LogicalResult ReduceMeanOp::buildGradients(OpBuilder &b, ValueRange rg,
                                           SmallVectorImpl<Value> &g) {
  Location loc = getLoc();
  auto input = typeOf(getInput());
  int64_t count = 1;
  for (int64_t a : getAxes())
    count *= input.getDimSize(a);
  Value scaled = b.create<MulOp>(loc, rg[0], scalar(b, loc, rg[0], 1.0 / double(count)));
  g.assign({broadcastTo(b, loc, keepdimsGrad(b, loc, scaled, input, getAxes()), input)});
  return success();
}

LogicalResult ReduceMaxOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &) {
  return notDefined(*this);
}
LogicalResult ReduceMinOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &) {
  return notDefined(*this);
}

LogicalResult SoftmaxOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  Location loc = getLoc();
  // y * (g - sum(g * y, axis))
  Value y = getOutput();
  int64_t axis = normalized(getAxis(), typeOf(y).getRank());
  Value dot = b.create<ReduceSumOp>(loc, b.create<MulOp>(loc, rg[0], y),
                                    ArrayRef<int64_t>{axis}, true);
  g.assign({b.create<MulOp>(loc, y, b.create<SubOp>(loc, rg[0], dot))});
  return success();
}

LogicalResult LogSoftmaxOp::buildGradients(OpBuilder &b, ValueRange rg,
                                           SmallVectorImpl<Value> &g) {
  Location loc = getLoc();
  // g - exp(y) * sum(g, axis)
  Value y = getOutput();
  int64_t axis = normalized(getAxis(), typeOf(y).getRank());
  Value sum = b.create<ReduceSumOp>(loc, rg[0], ArrayRef<int64_t>{axis}, true);
  g.assign({b.create<SubOp>(loc, rg[0], b.create<MulOp>(loc, b.create<ExpOp>(loc, y), sum))});
  return success();
}

LogicalResult LayerNormOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &) {
  return notDefined(*this);
}
LogicalResult BatchNormOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &) {
  return notDefined(*this);
}

//===----------------------------------------------------------------------===//
// Matrix products, convolutions, pooling
//===----------------------------------------------------------------------===//

// y = L R with L = lhs or lhs^T, R = rhs or rhs^T: dL = g R^T, dR = L^T g,
// transposed back where the operand was; batch dims sum back to each
// operand's shape.
LogicalResult MatmulOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  if (!isFloat(getLhs()))
    return noGradient(*this, g);
  Location loc = getLoc();
  Value A = getLhs(), B = getRhs(), dy = rg[0];
  bool ta = getTransposeLhs(), tb = getTransposeRhs();
  Value dA = ta ? b.create<MatmulOp>(loc, B, dy, tb, true)
                : b.create<MatmulOp>(loc, dy, B, false, !tb);
  Value dB = tb ? b.create<MatmulOp>(loc, dy, A, true, ta)
                : b.create<MatmulOp>(loc, A, dy, !ta, false);
  g.assign({sumToShape(b, loc, dA, typeOf(A)), sumToShape(b, loc, dB, typeOf(B))});
  return success();
}

LogicalResult Conv2DOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &) {
  return notDefined(*this);
}
LogicalResult MaxPool2DOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &) {
  return notDefined(*this);
}
LogicalResult AvgPool2DOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &) {
  return notDefined(*this);
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult GatherOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &) {
  return notDefined(*this);
}

LogicalResult ReshapeOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  g.assign({b.create<ReshapeOp>(getLoc(), getInput().getType(), rg[0])});
  return success();
}
LogicalResult SqueezeOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  g.assign({b.create<ReshapeOp>(getLoc(), getInput().getType(), rg[0])});
  return success();
}
LogicalResult UnsqueezeOp::buildGradients(OpBuilder &b, ValueRange rg,
                                          SmallVectorImpl<Value> &g) {
  g.assign({b.create<ReshapeOp>(getLoc(), getInput().getType(), rg[0])});
  return success();
}

LogicalResult TransposeOp::buildGradients(OpBuilder &b, ValueRange rg,
                                          SmallVectorImpl<Value> &g) {
  ArrayRef<int64_t> perm = getPerm();
  SmallVector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inverse[perm[i]] = int64_t(i);
  g.assign({b.create<TransposeOp>(getLoc(), rg[0], inverse)});
  return success();
}

LogicalResult ConcatOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &) {
  return notDefined(*this);
}
LogicalResult SplitOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &) {
  return notDefined(*this);
}
LogicalResult SliceOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &) {
  return notDefined(*this);
}

LogicalResult FusedOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &) {
  return emitError("autodiff runs before elementwise fusion; a fused op has no gradient");
}

} // namespace dtc::graph
