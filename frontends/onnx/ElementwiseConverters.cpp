//===- ElementwiseConverters.cpp - ONNX elementwise ops -------------------===//
#include "frontends/onnx/NodeContext.h"
#include "frontends/onnx/TensorData.h"

#include "dialects/graph/GraphOps.h"

#include <limits>

using namespace mlir;
using namespace dtc::graph;

namespace dtc::onnx {

namespace {

template <typename OpTy>
LogicalResult convertUnary(NodeContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  return ctx.result(ctx.create<OpTy>(*x));
}

template <typename OpTy>
LogicalResult convertBinary(NodeContext &ctx) {
  auto a = ctx.input(0), b = ctx.input(1);
  if (failed(a) || failed(b))
    return failure();
  return ctx.result(ctx.create<OpTy>(ValueRange{*a, *b}));
}

/// Pow allows an exponent of another type. A float exponent of an integer
/// base is applied in the exponent's type and the result cast back
/// (4 ^ 0.5 = 2); otherwise the exponent is cast to the base's type.
LogicalResult convertPow(NodeContext &ctx) {
  auto base = ctx.input(0), exponent = ctx.input(1);
  if (failed(base) || failed(exponent))
    return failure();
  auto baseType = cast<RankedTensorType>(base->getType());
  auto exponentType = cast<RankedTensorType>(exponent->getType());
  Type baseElement = baseType.getElementType();
  Type exponentElement = exponentType.getElementType();
  bool widenBase = !isa<FloatType>(baseElement) && isa<FloatType>(exponentElement);
  if (widenBase)
    base = ctx.createTyped<CastOp>(baseType.clone(exponentElement), *base);
  else if (exponentElement != baseElement)
    exponent = ctx.createTyped<CastOp>(exponentType.clone(baseElement), *exponent);
  if (failed(base) || failed(exponent))
    return failure();
  auto y = ctx.create<PowOp>(ValueRange{*base, *exponent});
  if (succeeded(y) && widenBase)
    y = ctx.createTyped<CastOp>(cast<RankedTensorType>(y->getType()).clone(baseElement), *y);
  return ctx.result(y);
}

/// Max and Min take one or more inputs, folded pairwise.
template <typename OpTy>
LogicalResult convertVariadic(NodeContext &ctx) {
  auto acc = ctx.input(0);
  if (failed(acc))
    return failure();
  for (int i = 1; i < ctx.numInputs(); ++i) {
    auto next = ctx.input(i);
    if (failed(next))
      return failure();
    acc = ctx.create<OpTy>(ValueRange{*acc, *next});
    if (failed(acc))
      return failure();
  }
  ctx.setOutput(0, *acc);
  return success();
}

LogicalResult convertGelu(NodeContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  std::string approximate = ctx.attrString("approximate", "none");
  if (approximate != "none" && approximate != "tanh")
    return ctx.fail("attribute approximate must be 'none' or 'tanh', got '" +
                    approximate + "'");
  return ctx.result(ctx.create<GeluOp>(
      *x, {ctx.named("approximate", ctx.builder().getStringAttr(approximate))}));
}

LogicalResult convertClip(NodeContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  // Bounds are inputs since opset 11: y = min(max(x, lo), hi). Constant
  // bounds become clip attributes, runtime ones max/min ops, in that order.
  Value y = *x;
  auto isConstantBound = [&](int i) {
    auto c = ctx.hasInput(i) ? ctx.constantOrNull(i) : DenseElementsAttr();
    return !ctx.hasInput(i) || (c && c.getNumElements() == 1);
  };
  if (isConstantBound(1) && isConstantBound(2)) {
    SmallVector<NamedAttribute> attrs;
    for (auto [index, name] : {std::pair<int, StringRef>{1, "min"}, {2, "max"}}) {
      if (!ctx.hasInput(index))
        continue;
      auto value = ctx.constantScalar(index, name);
      if (failed(value))
        return failure();
      attrs.push_back(ctx.named(name, ctx.builder().getF64FloatAttr(*value)));
    }
    auto clipped = attrs.empty() ? FailureOr<Value>(y) : ctx.create<ClipOp>(y, attrs);
    if (failed(clipped))
      return failure();
    ctx.setOutput(0, *clipped);
    return success();
  }
  for (auto [index, name] : {std::pair<int, StringRef>{1, "min"}, {2, "max"}}) {
    if (!ctx.hasInput(index))
      continue;
    auto bound = ctx.input(index);
    if (failed(bound))
      return failure();
    FailureOr<Value> limited = failure();
    if (auto c = ctx.constantOrNull(index); c && c.getNumElements() == 1) {
      auto value = ctx.constantScalar(index, name);
      if (failed(value))
        return failure();
      limited = ctx.create<ClipOp>(
          y, {ctx.named(name, ctx.builder().getF64FloatAttr(*value))});
    } else {
      limited = index == 1 ? ctx.create<MaxOp>(ValueRange{y, *bound})
                           : ctx.create<MinOp>(ValueRange{y, *bound});
    }
    if (failed(limited))
      return failure();
    y = *limited;
  }
  ctx.setOutput(0, y);
  return success();
}

LogicalResult convertCast(NodeContext &ctx) {
  auto type = ctx.inputType(0);
  auto x = ctx.input(0);
  if (failed(type) || failed(x))
    return failure();
  int64_t to = ctx.attrInt("to", 0);
  Type element = elementTypeOf(*ctx.context(), (int32_t)to);
  if (!element)
    return ctx.fail("cast to " + dataTypeName((int32_t)to) + " is not supported");
  return ctx.result(ctx.createTyped<CastOp>(type->clone(element), *x));
}

LogicalResult convertCastLike(NodeContext &ctx) {
  auto type = ctx.inputType(0), like = ctx.inputType(1);
  if (failed(type) || failed(like))
    return failure();
  return ctx.result(ctx.createTyped<CastOp>(type->clone(like->getElementType()), *ctx.input(0)));
}

LogicalResult convertWhere(NodeContext &ctx) {
  auto c = ctx.input(0), a = ctx.input(1), b = ctx.input(2);
  if (failed(c) || failed(a) || failed(b))
    return failure();
  return ctx.result(ctx.create<WhereOp>(ValueRange{*c, *a, *b}));
}

/// IsNaN(x): x != x, which only NaN is (transformers' attention masks a
/// softmax's NaNs with Where(IsNaN(...))).
LogicalResult convertIsNaN(NodeContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  auto same = ctx.create<EqualOp>(ValueRange{*x, *x});
  if (failed(same))
    return failure();
  return ctx.result(ctx.create<NotOp>(*same));
}

/// IsInf(x): x == +inf or x == -inf, as detect_positive and
/// detect_negative ask (neither: false everywhere, as x < x is).
LogicalResult convertIsInf(NodeContext &ctx) {
  auto type = ctx.inputType(0);
  auto x = ctx.input(0);
  if (failed(type) || failed(x))
    return failure();
  Type element = type->getElementType();
  if (!isa<FloatType>(element))
    return ctx.fail("IsInf needs a float input");
  bool positive = ctx.attrInt("detect_positive", 1) != 0;
  bool negative = ctx.attrInt("detect_negative", 1) != 0;
  auto equalTo = [&](double bound) {
    return ctx.create<EqualOp>(ValueRange{*x, ctx.scalar(bound, element)});
  };
  double inf = std::numeric_limits<double>::infinity();
  if (positive && negative) {
    auto above = equalTo(inf), below = equalTo(-inf);
    if (failed(above) || failed(below))
      return failure();
    return ctx.result(ctx.create<OrOp>(ValueRange{*above, *below}));
  }
  if (positive || negative)
    return ctx.result(equalTo(positive ? inf : -inf));
  return ctx.result(ctx.create<LessOp>(ValueRange{*x, *x}));
}

/// Mod(a, b): a - trunc(a / b) * b, the remainder with a's sign (fmod=1,
/// C's fmod; floats must ask for it), moved by b where its sign differs
/// from b's (fmod=0, Python's %). Floats compute in f64, where the
/// quotient of two f32 values is never rounded onto the wrong integer, and
/// the truncation is a cast to i64 and back.
LogicalResult convertMod(NodeContext &ctx) {
  auto type = ctx.inputType(0);
  auto a = ctx.input(0), b = ctx.input(1);
  if (failed(type) || failed(a) || failed(b))
    return failure();
  Type element = type->getElementType();
  bool fmod = ctx.attrInt("fmod", 0) != 0, isFloat = isa<FloatType>(element);
  if (isFloat && !fmod)
    return ctx.fail("Mod of floats needs fmod=1 (ONNX leaves fmod=0 to integers)");
  // Constants (shape arithmetic): computed here, exactly.
  if (auto ca = ctx.constantOrNull(0), cb = ctx.constantOrNull(1);
      ca && cb && ca.getType() == cb.getType()) {
    if (isFloat) {
      SmallVector<APFloat> out;
      for (auto [p, q] : llvm::zip(ca.getValues<APFloat>(), cb.getValues<APFloat>())) {
        APFloat r = p;
        r.mod(q); // C's fmod: exact, a's sign
        out.push_back(r);
      }
      return ctx.result(ctx.constant(DenseElementsAttr::get(ca.getType(), out)));
    }
    bool isUnsigned = element.isUnsignedInteger();
    SmallVector<APInt> out;
    for (auto [p, q] : llvm::zip(ca.getValues<APInt>(), cb.getValues<APInt>())) {
      if (q.isZero())
        return ctx.fail("Mod by zero");
      APInt r = isUnsigned ? p.urem(q) : p.srem(q);
      if (!isUnsigned && !fmod && !r.isZero() && r.isNegative() != q.isNegative())
        r += q;
      out.push_back(r);
    }
    return ctx.result(ctx.constant(DenseElementsAttr::get(ca.getType(), out)));
  }
  OpBuilder &builder = ctx.builder();
  Type wide = isFloat ? Type(builder.getF64Type()) : element;
  auto castTo = [&](Value v, Type to) -> FailureOr<Value> {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getElementType() == to)
      return v;
    return ctx.createTyped<CastOp>(t.clone(to), v);
  };
  auto x = castTo(*a, wide), y = castTo(*b, wide);
  if (failed(x) || failed(y))
    return failure();
  auto quotient = ctx.create<DivOp>(ValueRange{*x, *y});
  if (failed(quotient))
    return failure();
  Value whole = *quotient;
  if (isFloat) { // toward zero: through i64 (integer division already is)
    auto truncated = castTo(*quotient, builder.getI64Type());
    if (failed(truncated))
      return failure();
    auto back = castTo(*truncated, wide);
    if (failed(back))
      return failure();
    whole = *back;
  }
  auto product = ctx.create<MulOp>(ValueRange{whole, *y});
  if (failed(product))
    return failure();
  auto remainder = ctx.create<SubOp>(ValueRange{*x, *product});
  if (failed(remainder))
    return failure();
  Value r = *remainder;
  if (!fmod) { // Python's: where r != 0 and its sign differs from b's, r + b
    Value zero = ctx.scalar(0, wide);
    auto rNegative = ctx.create<LessOp>(ValueRange{r, zero});
    auto bNegative = ctx.create<LessOp>(ValueRange{*y, zero});
    auto isZero = ctx.create<EqualOp>(ValueRange{r, zero});
    if (failed(rNegative) || failed(bNegative) || failed(isZero))
      return failure();
    auto differ = ctx.create<XorOp>(ValueRange{*rNegative, *bNegative});
    auto nonzero = ctx.create<NotOp>(*isZero);
    if (failed(differ) || failed(nonzero))
      return failure();
    auto move = ctx.create<AndOp>(ValueRange{*differ, *nonzero});
    auto moved = ctx.create<AddOp>(ValueRange{r, *y});
    if (failed(move) || failed(moved))
      return failure();
    auto chosen = ctx.create<WhereOp>(ValueRange{*move, *moved, r});
    if (failed(chosen))
      return failure();
    r = *chosen;
  }
  return ctx.result(castTo(r, element));
}

const OpConverter kConverters[] = {
    {"Mod", 13, convertMod},
    {"Add", 13, convertBinary<AddOp>},
    {"Sub", 13, convertBinary<SubOp>},
    {"Mul", 13, convertBinary<MulOp>},
    {"Div", 13, convertBinary<DivOp>},
    {"Pow", 13, convertPow},
    {"Equal", 13, convertBinary<EqualOp>},
    {"Less", 13, convertBinary<LessOp>},
    {"LessOrEqual", 13, convertBinary<LessEqualOp>},
    {"Greater", 13, convertBinary<GreaterOp>},
    {"GreaterOrEqual", 13, convertBinary<GreaterEqualOp>},
    {"And", 13, convertBinary<AndOp>},
    {"Or", 13, convertBinary<OrOp>},
    {"Xor", 13, convertBinary<XorOp>},
    {"Max", 13, convertVariadic<MaxOp>},
    {"Min", 13, convertVariadic<MinOp>},
    {"Neg", 13, convertUnary<NegOp>},
    {"Abs", 13, convertUnary<AbsOp>},
    {"Exp", 13, convertUnary<ExpOp>},
    {"Log", 13, convertUnary<LogOp>},
    {"Sqrt", 13, convertUnary<SqrtOp>},
    {"Reciprocal", 13, convertUnary<ReciprocalOp>},
    {"Tanh", 13, convertUnary<TanhOp>},
    {"Erf", 13, convertUnary<ErfOp>},
    {"Sin", 7, convertUnary<SinOp>},
    {"Cos", 7, convertUnary<CosOp>},
    {"Relu", 13, convertUnary<ReluOp>},
    {"Sigmoid", 13, convertUnary<SigmoidOp>},
    {"Not", 13, convertUnary<NotOp>},
    {"IsNaN", 9, convertIsNaN},
    {"IsInf", 10, convertIsInf},
    {"Gelu", 20, convertGelu},
    {"Clip", 13, convertClip},
    {"Cast", 13, convertCast, "saturate round_mode"},
    {"CastLike", 15, convertCastLike, "saturate round_mode"},
    {"Where", 13, convertWhere},
};

} // namespace

llvm::ArrayRef<OpConverter> elementwiseConverters() { return kConverters; }

} // namespace dtc::onnx
