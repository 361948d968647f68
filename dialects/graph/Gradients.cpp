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

/// A zero tensor of `type` (a splat constant).
Value zeros(OpBuilder &b, Location loc, RankedTensorType type) {
  return b.create<ConstantOp>(
      loc, DenseElementsAttr::get(type, b.getZeroAttr(type.getElementType())));
}

/// `type` with dim `d` set to `size`.
RankedTensorType withDim(RankedTensorType type, int64_t d, int64_t size) {
  SmallVector<int64_t> shape(type.getShape());
  shape[d] = size;
  return RankedTensorType::get(shape, type.getElementType());
}

/// `grad` between `before` and `after` zeros along `d` (blocks of size 0 left out).
Value padWithZeros(OpBuilder &b, Location loc, Value grad, int64_t d, int64_t before,
                   int64_t after) {
  SmallVector<Value> pieces;
  if (before > 0)
    pieces.push_back(zeros(b, loc, withDim(typeOf(grad), d, before)));
  pieces.push_back(grad);
  if (after > 0)
    pieces.push_back(zeros(b, loc, withDim(typeOf(grad), d, after)));
  return pieces.size() == 1 ? grad : b.create<ConcatOp>(loc, pieces, d).getResult();
}

/// max/min: the gradient goes to the operand the result was taken from;
/// `lhsWins` is true on ties, so they go to lhs.
LogicalResult selectedGradients(OpBuilder &b, Location loc, Value lhsWins, Value grad,
                                RankedTensorType lhs, RankedTensorType rhs,
                                SmallVectorImpl<Value> &g) {
  Value zero = scalar(b, loc, grad, 0.0);
  g.assign({sumToShape(b, loc, b.create<WhereOp>(loc, lhsWins, grad, zero), lhs),
            sumToShape(b, loc, b.create<WhereOp>(loc, lhsWins, zero, grad), rhs)});
  return success();
}

/// reduce_max/min: g * (x == y) / count(x == y) over the reduced axes; ties
/// share the gradient equally (its sum is kept).
Value extremumGradient(OpBuilder &b, Location loc, Value input, Value output, Value grad,
                       ArrayRef<int64_t> axes) {
  auto type = typeOf(input);
  Value y = keepdimsGrad(b, loc, output, type, axes);
  Value hit = b.create<CastOp>(loc, type, b.create<EqualOp>(loc, input, y));
  Value count = b.create<ReduceSumOp>(loc, hit, axes, true);
  Value share = b.create<DivOp>(loc, keepdimsGrad(b, loc, grad, type, axes), count);
  return b.create<MulOp>(loc, hit, share);
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

LogicalResult PowOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  if (!isFloat(getLhs()))
    return noGradient(*this, g);
  Location loc = getLoc();
  // y = x^p: d/dx = g * p * x^(p-1); d/dp = g * y * log(x) where x > 0, else 0
  // (x = 0: y is 0 or 1 whatever p > 0 is; x < 0: y is defined for integer p only)
  Value x = getLhs(), p = getRhs(), dy = rg[0];
  Value power = b.create<PowOp>(loc, x, b.create<SubOp>(loc, p, scalar(b, loc, p, 1.0)));
  Value dx = b.create<MulOp>(loc, dy, b.create<MulOp>(loc, p, power));
  Value zero = scalar(b, loc, x, 0.0);
  Value positive = b.create<GreaterOp>(loc, x, zero);
  Value logx = b.create<LogOp>(loc, b.create<WhereOp>(loc, positive, x, scalar(b, loc, x, 1.0)));
  Value dp = b.create<MulOp>(loc, dy, b.create<MulOp>(loc, getOutput(), logx));
  g.assign({sumToShape(b, loc, dx, typeOf(x)), sumToShape(b, loc, dp, typeOf(p))});
  return success();
}

LogicalResult MaxOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  if (!isFloat(getLhs()))
    return noGradient(*this, g);
  // to lhs where lhs >= rhs, else to rhs
  Value lhsWins = b.create<GreaterEqualOp>(getLoc(), getLhs(), getRhs());
  return selectedGradients(b, getLoc(), lhsWins, rg[0], typeOf(getLhs()), typeOf(getRhs()), g);
}

LogicalResult MinOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  if (!isFloat(getLhs()))
    return noGradient(*this, g);
  // to lhs where lhs <= rhs, else to rhs
  Value lhsWins = b.create<LessEqualOp>(getLoc(), getLhs(), getRhs());
  return selectedGradients(b, getLoc(), lhsWins, rg[0], typeOf(getLhs()), typeOf(getRhs()), g);
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

LogicalResult SinOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  // g * cos(x)
  g.assign({b.create<MulOp>(getLoc(), rg[0], b.create<CosOp>(getLoc(), getInput()))});
  return success();
}

LogicalResult CosOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  // -g * sin(x)
  Location loc = getLoc();
  g.assign({b.create<NegOp>(loc, b.create<MulOp>(loc, rg[0], b.create<SinOp>(loc, getInput())))});
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
  Location loc = getLoc();
  // A 16-bit GELU's gradient is computed in f32 and rounded once, as
  // PyTorch's opmath does: in bf16 its constants would be rounded
  // (sqrt(2/pi) to 0.796875), a bias the forward's kernel does not have.
  Value x = getInput(), dy = rg[0];
  auto type = cast<RankedTensorType>(x.getType());
  bool narrow = type.getElementType().isBF16() || type.getElementType().isF16();
  if (narrow) {
    auto f32 = type.clone(b.getF32Type());
    x = b.create<CastOp>(loc, f32, x);
    dy = b.create<CastOp>(loc, f32, dy);
  }
  Value derivative;
  if (getApproximate() == "tanh") {
    // y = x (1 + t) / 2, t = tanh(u), u = c (x + a x^3), c = sqrt(2/pi), a = 0.044715:
    // (1 + t) / 2 + x (1 - t^2) u' / 2, u' = c (1 + 3a x^2)
    const double a = 0.044715, c = std::sqrt(2.0 / M_PI);
    auto k = [&](double v) { return scalar(b, loc, x, v); };
    Value x2 = b.create<MulOp>(loc, x, x);
    Value u =
        b.create<MulOp>(loc, x, b.create<AddOp>(loc, k(c), b.create<MulOp>(loc, x2, k(c * a))));
    Value t = b.create<TanhOp>(loc, u);
    Value left = b.create<MulOp>(loc, k(0.5), b.create<AddOp>(loc, k(1.0), t));
    Value sech2 = b.create<SubOp>(loc, k(1.0), b.create<MulOp>(loc, t, t));
    Value du = b.create<AddOp>(loc, k(c), b.create<MulOp>(loc, x2, k(3.0 * a * c)));
    Value right = b.create<MulOp>(loc, b.create<MulOp>(loc, x, k(0.5)),
                                  b.create<MulOp>(loc, sech2, du));
    derivative = b.create<AddOp>(loc, left, right);
  } else {
    // Phi(x) + x phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2, phi(x) = exp(-x^2/2) / sqrt(2 pi)
    Value cdf = b.create<MulOp>(
        loc, scalar(b, loc, x, 0.5),
        b.create<AddOp>(loc, scalar(b, loc, x, 1.0),
                        b.create<ErfOp>(loc, b.create<MulOp>(loc, x, scalar(b, loc, x, M_SQRT1_2)))));
    Value pdf = b.create<MulOp>(
        loc, scalar(b, loc, x, 1.0 / std::sqrt(2.0 * M_PI)),
        b.create<ExpOp>(loc, b.create<MulOp>(loc, b.create<MulOp>(loc, x, x),
                                             scalar(b, loc, x, -0.5))));
    derivative = b.create<AddOp>(loc, cdf, b.create<MulOp>(loc, x, pdf));
  }
  Value grad = b.create<MulOp>(loc, dy, derivative);
  if (narrow)
    grad = b.create<CastOp>(loc, rg[0].getType(), grad);
  g.assign({grad});
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

// Indices: nothing flows back (the values' gradient is their gather's).
LogicalResult TopKOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &g) {
  return noGradient(*this, g);
}

LogicalResult TriluOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  // the same triangle of g
  g.assign({b.create<TriluOp>(getLoc(), rg[0], b.getBoolAttr(getUpper()),
                              b.getI64IntegerAttr(getK()))});
  return success();
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

LogicalResult ReduceMaxOp::buildGradients(OpBuilder &b, ValueRange rg,
                                          SmallVectorImpl<Value> &g) {
  if (!isFloat(getInput()))
    return noGradient(*this, g);
  g.assign({extremumGradient(b, getLoc(), getInput(), getOutput(), rg[0], getAxes())});
  return success();
}

LogicalResult ReduceMinOp::buildGradients(OpBuilder &b, ValueRange rg,
                                          SmallVectorImpl<Value> &g) {
  if (!isFloat(getInput()))
    return noGradient(*this, g);
  g.assign({extremumGradient(b, getLoc(), getInput(), getOutput(), rg[0], getAxes())});
  return success();
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

// Over the normalised dims [axis, rank): xhat = (x - mean) r, r = 1 / sqrt(var + eps)
// (biased var), y = xhat scale + bias. With h = g scale:
// dx = r (h - mean(h) - xhat mean(h xhat)); dscale = sum(g xhat), dbias = sum(g) over the
// dims scale and bias broadcast along. RMSNorm (rms): xhat = x r, r = 1 / sqrt(mean(x^2)
// + eps), dx = r (h - xhat mean(h xhat)), its scale always of the normalised shape.
LogicalResult LayerNormOp::buildGradients(OpBuilder &b, ValueRange rg,
                                          SmallVectorImpl<Value> &g) {
  Location loc = getLoc();
  Value x = getInput(), dy = rg[0];
  int64_t rank = typeOf(x).getRank(), axis = normalized(getAxis(), rank);
  auto xType = typeOf(x);
  if (typeOf(getScale()).getShape() == xType.getShape().drop_front(axis)) {
    // One row kernel for the input's gradient, which also gives each row's
    // mean and rstd (f32); the scale's gradient is then sum(dy * xhat),
    // xhat recomputed in f32 from them and the product rounded once to
    // dy's type (a bf16 sum, which mixed precision widens to f32).
    SmallVector<int64_t> rows(xType.getShape());
    for (int64_t d = axis; d < rank; ++d)
      rows[size_t(d)] = 1;
    Type f32 = b.getF32Type();
    auto statistics = RankedTensorType::get(rows, f32);
    auto backward = b.create<LayerNormBackwardOp>(
        loc, TypeRange{xType, statistics, statistics}, x, getScale(), dy, ValueRange{},
        b.getI64IntegerAttr(axis), getEpsilonAttr(), getRmsAttr());
    auto widened = [&](Value v) -> Value {
      return typeOf(v).getElementType().isF32()
                 ? v
                 : b.create<CastOp>(loc, typeOf(v).clone(f32), v).getResult();
    };
    Value centred =
        getRms() ? widened(x) : b.create<SubOp>(loc, widened(x), backward.getMean()).getResult();
    Value xhat = b.create<MulOp>(loc, centred, backward.getRstd());
    Value product = b.create<MulOp>(loc, widened(dy), xhat);
    if (typeOf(dy).getElementType() != f32)
      product = b.create<CastOp>(loc, typeOf(dy), product);
    g.assign({backward.getGradInput(), sumToShape(b, loc, product, typeOf(getScale()))});
    if (Value bias = getBias())
      g.push_back(sumToShape(b, loc, dy, typeOf(bias)));
    return success();
  }
  if (getRms()) // the verifier holds its scale to the normalised shape
    return emitOpError("an rms layer_norm's scale must have the normalised shape");
  // A scale that broadcasts onto the row: the gradient as graph ops.
  SmallVector<int64_t> axes;
  for (int64_t d = axis; d < rank; ++d)
    axes.push_back(d);
  auto mean = [&](Value v) { return b.create<ReduceMeanOp>(loc, v, axes, true).getResult(); };
  Value centred = b.create<SubOp>(loc, x, mean(x));
  Value var = mean(b.create<MulOp>(loc, centred, centred));
  Value epsilon = scalar(b, loc, x, getEpsilon().convertToDouble());
  Value r = b.create<ReciprocalOp>(loc, b.create<SqrtOp>(loc, b.create<AddOp>(loc, var, epsilon)));
  Value xhat = b.create<MulOp>(loc, centred, r);
  Value h = b.create<MulOp>(loc, dy, getScale());
  Value projection = b.create<MulOp>(loc, xhat, mean(b.create<MulOp>(loc, h, xhat)));
  Value dx = b.create<MulOp>(
      loc, r, b.create<SubOp>(loc, b.create<SubOp>(loc, h, mean(h)), projection));
  g.assign({dx, sumToShape(b, loc, b.create<MulOp>(loc, dy, xhat), typeOf(getScale()))});
  if (Value bias = getBias())
    g.push_back(sumToShape(b, loc, dy, typeOf(bias)));
  return success();
}

// loss = lse - x[label] per row, lse = log(sum(exp(x))): dx = (exp(x - lse) - onehot(label))
// * dloss, in f32 and rounded once to x's type; a row whose label is no class has no
// gradient (its loss is 0). One elementwise kernel once fused. The lse result is for the
// backward only: no gradient flows through it.
LogicalResult CrossEntropyOp::buildGradients(OpBuilder &b, ValueRange rg,
                                             SmallVectorImpl<Value> &g) {
  if (rg[1] || (rg.size() > 2 && rg[2]))
    return emitOpError("has no gradient through its log-sum-exp or its gradient");
  g.assign(getNumOperands(), Value());
  if (!rg[0])
    return success();
  Location loc = getLoc();
  Value x = getLogits(), labels = getLabels();
  auto type = typeOf(x), labelType = typeOf(labels);
  int64_t classes = type.getShape().back();
  Type f32 = b.getF32Type(), index = labelType.getElementType();
  SmallVector<int64_t> columnShape(labelType.getShape());
  columnShape.push_back(1);
  auto column = [&](Value v) -> Value { // [rows...] -> [rows..., 1]
    return b.create<ReshapeOp>(
        loc, RankedTensorType::get(columnShape, typeOf(v).getElementType()), v);
  };
  auto indexConstant = [&](ArrayRef<int64_t> shape, ArrayRef<int64_t> values) -> Value {
    auto t = RankedTensorType::get(shape, index);
    SmallVector<APInt> bits;
    for (int64_t v : values)
      bits.push_back(APInt(index.getIntOrFloatBitWidth(), uint64_t(v), true));
    return b.create<ConstantOp>(loc, DenseElementsAttr::get(t, bits));
  };
  SmallVector<int64_t> ids;
  for (int64_t c = 0; c < classes; ++c)
    ids.push_back(c);
  Value label = column(labels);
  Value hit = b.create<EqualOp>(loc, label, indexConstant({classes}, ids));
  auto asF32 = [&](Value v) -> Value {
    return b.create<CastOp>(loc, typeOf(v).clone(f32), v);
  };
  Value isClass = b.create<AndOp>(
      loc, b.create<GreaterEqualOp>(loc, label, indexConstant({}, {0})),
      b.create<LessOp>(loc, label, indexConstant({}, {classes})));
  Value rowGrad = b.create<MulOp>(loc, column(rg[0]), asF32(isClass));
  Value wide = type.getElementType().isF32() ? x : asF32(x);
  Value p = b.create<ExpOp>(loc, b.create<SubOp>(loc, wide, column(getLse())));
  Value dx = b.create<MulOp>(loc, b.create<SubOp>(loc, p, asF32(hit)), rowGrad);
  g[0] = type.getElementType().isF32() ? dx : b.create<CastOp>(loc, type, dx).getResult();
  return success();
}

// Training normalises with the batch's statistics: dtc-build-training-step replaces
// each batch norm by expandBatchNormForTraining's graph ops before autodiff
// runs, so this (frozen statistics) form is never on a loss path.
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
  auto aType = typeOf(A), dyType = typeOf(dy);
  Value dB;
  if (typeOf(B).getRank() == 2 && aType.getRank() > 2 && !ta) {
    // x[.., M, K] @ W[K, N] (a linear layer): W's gradient sums over every
    // row of x, which is one GEMM over x and g flattened to 2-D rather
    // than a batch of GEMMs summed afterwards.
    int64_t rows = aType.getNumElements() / aType.getShape().back();
    Value A2 = b.create<ReshapeOp>(loc, aType.clone({rows, aType.getShape().back()}), A);
    Value dy2 = b.create<ReshapeOp>(loc, dyType.clone({rows, dyType.getShape().back()}), dy);
    dB = tb ? b.create<MatmulOp>(loc, dy2, A2, true, false)
            : b.create<MatmulOp>(loc, A2, dy2, true, false);
  } else {
    dB = tb ? b.create<MatmulOp>(loc, dy, A, true, ta)
            : b.create<MatmulOp>(loc, A, dy, !ta, false);
  }
  g.assign({sumToShape(b, loc, dA, aType), sumToShape(b, loc, dB, typeOf(B))});
  return success();
}

// dx is a transposed convolution of g with the weights, dw a correlation
// of the input with g (their own ops and kernels), dbias g summed per
// channel. A fused ReLU first masks g where it cut the output.
LogicalResult Conv2DOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  if (getChannelsLast())
    return emitError("the gradient of a channels-last conv2d is not defined (the layout pass "
                     "runs after autodiff)");
  Location loc = getLoc();
  Value dy = rg[0];
  if (getRelu())
    dy = b.create<WhereOp>(loc, b.create<GreaterOp>(loc, getOutput(), scalar(b, loc, dy, 0.0)),
                           dy, scalar(b, loc, dy, 0.0));
  Value dx = b.create<Conv2DBackwardInputOp>(loc, getInput().getType(), dy, getWeight(),
                                             getStridesAttr(), getPadsAttr(),
                                             getDilationsAttr(), getGroupsAttr());
  Value dw = b.create<Conv2DBackwardWeightOp>(loc, getWeight().getType(), getInput(), dy,
                                              getStridesAttr(), getPadsAttr(),
                                              getDilationsAttr(), getGroupsAttr());
  g.assign({dx, dw});
  if (Value bias = getBias())
    g.push_back(b.create<ReduceSumOp>(loc, dy, ArrayRef<int64_t>{0, 2, 3}, false));
  return success();
}

LogicalResult MaxPool2DOp::buildGradients(OpBuilder &b, ValueRange rg,
                                          SmallVectorImpl<Value> &g) {
  if (!isFloat(getInput()))
    return noGradient(*this, g);
  if (getChannelsLast())
    return emitError("the gradient of a channels-last max_pool2d is not defined");
  g.assign({b.create<MaxPool2DBackwardOp>(getLoc(), getInput().getType(), getInput(), rg[0],
                                          getKernelAttr(), getStridesAttr(), getPadsAttr(),
                                          getDilationsAttr(), getCeilModeAttr())});
  return success();
}

LogicalResult AvgPool2DOp::buildGradients(OpBuilder &b, ValueRange rg,
                                          SmallVectorImpl<Value> &g) {
  if (getChannelsLast())
    return emitError("the gradient of a channels-last avg_pool2d is not defined");
  g.assign({b.create<AvgPool2DBackwardOp>(getLoc(), getInput().getType(), rg[0],
                                          getKernelAttr(), getStridesAttr(), getPadsAttr(),
                                          getDilationsAttr(), getCeilModeAttr(),
                                          getCountIncludePadAttr())});
  return success();
}

// d/dx of x cos + rotate_half(x) sin is the backward form; the tables
// (positions' cos and sin) have no gradient: dtc-fuse-rotary takes only
// tables no trained parameter reaches.
LogicalResult RotaryOp::buildGradients(OpBuilder &b, ValueRange rg,
                                       SmallVectorImpl<Value> &g) {
  if (getBackward())
    return notDefined(*this);
  g.assign(3, Value());
  if (rg[0])
    g[0] = b.create<RotaryOp>(getLoc(), rg[0], getCos(), getSin(), b.getUnitAttr());
  return success();
}

// Backward ops are not differentiated again (no second derivatives).
// One op for all three: flash attention's backward recomputes each tile's
// probabilities from lse rather than reading them.
LogicalResult AttentionOp::buildGradients(OpBuilder &b, ValueRange rg,
                                          SmallVectorImpl<Value> &g) {
  if (rg[1])
    return emitOpError("has no gradient through its log-sum-exp result");
  // The bias has none: dtc-fuse-attention takes only biases that no
  // parameter reaches (masks, constants).
  if (!rg[0]) {
    g.assign(getNumOperands(), Value());
    return success();
  }
  // Packed, q, k and v are one value: its gradient is the first operand's,
  // the others have none of their own.
  SmallVector<Type, 3> types{getQ().getType()};
  if (!getPacked())
    types.append({getK().getType(), getV().getType()});
  auto grads = b.create<AttentionBackwardOp>(getLoc(), types, getQ(), getK(), getV(), getOutput(),
                                             getLse(), rg[0], getBias(), getScaleAttr(),
                                             getCausalAttr(), getBshdAttr(), getPackedAttr(),
                                             getInterleavedAttr());
  g.assign(grads.getGrads().begin(), grads.getGrads().end());
  g.resize(3);
  if (getBias())
    g.push_back(Value());
  return success();
}

LogicalResult MatmulBiasOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &) {
  return notDefined(*this); // formed after autodiff
}

LogicalResult MatmulGradOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &) {
  return notDefined(*this); // formed after autodiff
}

LogicalResult MatmulAccOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &) {
  return notDefined(*this); // formed after autodiff
}

LogicalResult MatmulGeluGradOp::buildGradients(OpBuilder &, ValueRange,
                                               SmallVectorImpl<Value> &) {
  return notDefined(*this); // formed after autodiff
}

LogicalResult AttentionBackwardOp::buildGradients(OpBuilder &, ValueRange,
                                                  SmallVectorImpl<Value> &) {
  return notDefined(*this);
}

// y = conv2d_backward_input(x, w) is the adjoint of conv2d(., w): for any
// z, <z, y> = <conv2d(z, w), x>. So dx = conv2d(g, w) and
// dw = conv2d_backward_weight(g, x) (g the input, x the output gradient).
// What makes ConvTranspose trainable.
LogicalResult Conv2DBackwardInputOp::buildGradients(OpBuilder &b, ValueRange rg,
                                                    SmallVectorImpl<Value> &g) {
  Location loc = getLoc();
  Value dx = b.create<Conv2DOp>(loc, getGradOutput().getType(), rg[0], getWeight(),
                                /*bias=*/Value(), getStridesAttr(), getPadsAttr(),
                                getDilationsAttr(), getGroupsAttr(), /*relu=*/nullptr,
                                /*channels_last=*/nullptr);
  Value dw = b.create<Conv2DBackwardWeightOp>(loc, getWeight().getType(), rg[0],
                                              getGradOutput(), getStridesAttr(),
                                              getPadsAttr(), getDilationsAttr(),
                                              getGroupsAttr());
  g.assign({dx, dw});
  return success();
}
LogicalResult Conv2DBackwardWeightOp::buildGradients(OpBuilder &, ValueRange,
                                                     SmallVectorImpl<Value> &) {
  return notDefined(*this);
}
LogicalResult LayerNormBackwardOp::buildGradients(OpBuilder &, ValueRange,
                                                  SmallVectorImpl<Value> &) {
  return notDefined(*this);
}
LogicalResult MaxPool2DBackwardOp::buildGradients(OpBuilder &, ValueRange,
                                                  SmallVectorImpl<Value> &) {
  return notDefined(*this);
}
LogicalResult AvgPool2DBackwardOp::buildGradients(OpBuilder &, ValueRange,
                                                  SmallVectorImpl<Value> &) {
  return notDefined(*this);
}
// dupdates: g read back at the indices (a gather: every update added into
// a position gets that position's gradient). Indices get no gradient.
LogicalResult ScatterAddOp::buildGradients(OpBuilder &b, ValueRange rg,
                                           SmallVectorImpl<Value> &g) {
  g.assign({b.create<GatherOp>(getLoc(), getUpdates().getType(), rg[0], getIndices(),
                               getAxisAttr(), getSkipOutsideAttr()),
            Value()});
  return success();
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

// ddata is zeros with g added at the gathered rows (scatter_add: rows
// sharing an index add up). Indices get no gradient.
LogicalResult GatherOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  if (!isFloat(getData()))
    return noGradient(*this, g);
  g.assign({b.create<ScatterAddOp>(getLoc(), getData().getType(), rg[0], getIndices(),
                                   getAxisAttr(), getSkipOutsideAttr()),
            Value()});
  return success();
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

LogicalResult ConcatOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  if (getInputs().size() == 1) {
    g.assign({rg[0]});
    return success();
  }
  // g cut into the inputs' sizes along axis: one split
  int64_t axis = normalized(getAxis(), typeOf(getOutput()).getRank());
  SmallVector<int64_t> sizes;
  for (Value input : getInputs())
    sizes.push_back(typeOf(input).getDimSize(axis));
  auto split = b.create<SplitOp>(getLoc(), rg[0], axis, sizes);
  g.assign(split.getResults().begin(), split.getResults().end());
  return success();
}

LogicalResult SplitOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  Location loc = getLoc();
  // the results' gradients concatenated along axis, zeros for those without one
  int64_t axis = normalized(getAxis(), typeOf(getInput()).getRank());
  SmallVector<Value> pieces;
  for (auto [result, grad] : llvm::zip(getOutputs(), rg))
    if (typeOf(result).getDimSize(axis) != 0)
      pieces.push_back(grad ? grad : zeros(b, loc, typeOf(result)));
  if (pieces.empty())
    pieces.push_back(zeros(b, loc, typeOf(getInput())));
  g.assign({pieces.size() == 1 ? pieces[0] : b.create<ConcatOp>(loc, pieces, axis).getResult()});
  return success();
}

// Dim by dim, g grows back to the input's size: a negative stride is a
// reversed slice (reversed back by a slice with stride -1) of stride |s|;
// stride s > 1 puts s - 1 zeros after each element ([n, 1] concat zeros
// [n, s-1], reshaped to n*s); then zeros before the offset and after the end.
LogicalResult SliceOp::buildGradients(OpBuilder &b, ValueRange rg, SmallVectorImpl<Value> &g) {
  Location loc = getLoc();
  auto input = typeOf(getInput());
  int64_t rank = input.getRank();
  if (input.getNumElements() == 0 || typeOf(getOutput()).getNumElements() == 0) {
    g.assign({zeros(b, loc, input)});
    return success();
  }
  Value grad = rg[0];
  for (int64_t d = 0; d < rank; ++d) {
    int64_t offset = getOffsets()[d], n = getSizes()[d], stride = getStrides()[d];
    int64_t dim = input.getDimSize(d);
    if (n == 1)
      stride = 1;
    if (stride < 0) {
      auto type = typeOf(grad);
      SmallVector<int64_t> offsets(rank, 0), strides(rank, 1);
      offsets[d] = n - 1;
      strides[d] = -1;
      grad = b.create<SliceOp>(loc, grad, offsets, type.getShape(), strides);
      offset += (n - 1) * stride;
      stride = -stride;
    }
    int64_t length = n;
    if (stride > 1) {
      auto type = typeOf(grad);
      SmallVector<int64_t> split(type.getShape());
      split.insert(split.begin() + d + 1, 1);
      Value column = b.create<ReshapeOp>(loc, RankedTensorType::get(split, type.getElementType()),
                                         grad);
      Value spread = padWithZeros(b, loc, column, d + 1, 0, stride - 1);
      length = std::min(n * stride, dim - offset);
      grad = b.create<ReshapeOp>(loc, withDim(type, d, n * stride), spread);
      if (length < n * stride) {
        SmallVector<int64_t> offsets(rank, 0), strides(rank, 1);
        grad = b.create<SliceOp>(loc, grad, offsets, withDim(type, d, length).getShape(),
                                 strides);
      }
    }
    grad = padWithZeros(b, loc, grad, d, offset, dim - offset - length);
  }
  g.assign({grad});
  return success();
}

LogicalResult FusedOp::buildGradients(OpBuilder &, ValueRange, SmallVectorImpl<Value> &) {
  return emitError("autodiff runs before elementwise fusion; a fused op has no gradient");
}

} // namespace dtc::graph
