//===- NNConverters.cpp - ONNX linear algebra, conv, pooling, norms -------===//
#include "frontends/onnx/NodeContext.h"
#include "frontends/onnx/TensorData.h"

#include "dialects/graph/GraphOps.h"
#include "dialects/graph/ShapeRules.h"

#include <numeric>

using namespace mlir;
using namespace dtc::graph;

namespace dtc::onnx {

namespace {

/// Axes [from, rank).
SmallVector<int64_t> trailingAxes(int64_t from, int64_t rank) {
  SmallVector<int64_t> axes(rank - from);
  std::iota(axes.begin(), axes.end(), from);
  return axes;
}

LogicalResult convertMatMul(NodeContext &ctx) {
  auto a = ctx.input(0), b = ctx.input(1);
  if (failed(a) || failed(b))
    return failure();
  // ONNX promotes 1-D operands to matrices and drops the added dim after.
  int64_t ra = cast<RankedTensorType>(a->getType()).getRank();
  int64_t rb = cast<RankedTensorType>(b->getType()).getRank();
  if (ra == 0 || rb == 0)
    return ctx.fail("MatMul operands must not be scalars");
  Value lhs = *a, rhs = *b;
  if (ra == 1) {
    auto v = ctx.create<UnsqueezeOp>(lhs, {ctx.namedI64s("axes", {0})});
    if (failed(v))
      return failure();
    lhs = *v;
  }
  if (rb == 1) {
    auto v = ctx.create<UnsqueezeOp>(rhs, {ctx.namedI64s("axes", {1})});
    if (failed(v))
      return failure();
    rhs = *v;
  }
  auto y = ctx.create<MatmulOp>(ValueRange{lhs, rhs});
  if (failed(y))
    return failure();
  int64_t r = cast<RankedTensorType>(y->getType()).getRank();
  SmallVector<int64_t> drop;
  if (ra == 1)
    drop.push_back(r - 2);
  if (rb == 1)
    drop.push_back(r - 1);
  if (!drop.empty())
    y = ctx.create<SqueezeOp>(*y, {ctx.namedI64s("axes", drop)});
  return ctx.result(y);
}

LogicalResult convertGemm(NodeContext &ctx) {
  auto a = ctx.input(0), b = ctx.input(1);
  if (failed(a) || failed(b))
    return failure();
  auto y = ctx.create<MatmulOp>(
      ValueRange{*a, *b},
      {ctx.named("transpose_lhs", ctx.builder().getBoolAttr(ctx.attrInt("transA", 0))),
       ctx.named("transpose_rhs", ctx.builder().getBoolAttr(ctx.attrInt("transB", 0)))});
  if (failed(y))
    return failure();
  Type element = cast<RankedTensorType>(y->getType()).getElementType();
  double alpha = ctx.attrFloat("alpha", 1.0f), beta = ctx.attrFloat("beta", 1.0f);
  if (alpha != 1.0)
    y = ctx.create<MulOp>(ValueRange{*y, ctx.scalar(alpha, element)});
  if (succeeded(y) && ctx.hasInput(2) && beta != 0.0) {
    auto c = ctx.input(2);
    if (failed(c))
      return failure();
    Value bias = *c;
    if (beta != 1.0) {
      auto scaled = ctx.create<MulOp>(ValueRange{bias, ctx.scalar(beta, element)});
      if (failed(scaled))
        return failure();
      bias = *scaled;
    }
    y = ctx.create<AddOp>(ValueRange{*y, bias});
  }
  return ctx.result(y);
}

/// Input 0's type and its `axis` attribute (default -1, the last), made
/// non-negative: what softmax and the normalizations read first.
FailureOr<std::pair<RankedTensorType, int64_t>> typeAndAxis(NodeContext &ctx) {
  auto type = ctx.inputType(0);
  if (failed(type))
    return failure();
  auto axis = ctx.axisAttr("axis", -1, type->getRank());
  if (failed(axis))
    return failure();
  return std::make_pair(*type, *axis);
}

template <typename OpTy>
LogicalResult convertSoftmax(NodeContext &ctx) {
  auto typed = typeAndAxis(ctx);
  if (failed(typed))
    return failure();
  auto [type, axis] = *typed;
  return ctx.result(ctx.create<OpTy>(*ctx.input(0), {ctx.namedI64("axis", axis)}));
}

template <typename OpTy>
FailureOr<Value> reduce(NodeContext &ctx, Value x, ArrayRef<int64_t> axes,
                        bool keepdims) {
  return ctx.create<OpTy>(x, {ctx.namedI64s("axes", axes),
                              ctx.named("keepdims", ctx.builder().getBoolAttr(keepdims))});
}

/// A normalization's statistics over `axes` (kept), in graph ops: the
/// mean, x less it, and sqrt(variance + epsilon).
struct Moments {
  Value mean, centered, root;
};

FailureOr<Moments> moments(NodeContext &ctx, Value x, ArrayRef<int64_t> axes, double epsilon) {
  auto mean = reduce<ReduceMeanOp>(ctx, x, axes, true);
  if (failed(mean))
    return failure();
  auto centered = ctx.create<SubOp>(ValueRange{x, *mean});
  if (failed(centered))
    return failure();
  auto squared = ctx.create<MulOp>(ValueRange{*centered, *centered});
  if (failed(squared))
    return failure();
  auto variance = reduce<ReduceMeanOp>(ctx, *squared, axes, true);
  if (failed(variance))
    return failure();
  Type element = cast<RankedTensorType>(x.getType()).getElementType();
  auto shifted = ctx.create<AddOp>(ValueRange{*variance, ctx.scalar(epsilon, element)});
  if (failed(shifted))
    return failure();
  auto root = ctx.create<SqrtOp>(*shifted);
  if (failed(root))
    return failure();
  return Moments{*mean, *centered, *root};
}

LogicalResult convertLayerNorm(NodeContext &ctx) {
  auto typed = typeAndAxis(ctx);
  if (failed(typed))
    return failure();
  auto [type, axis] = *typed;
  SmallVector<Value> operands{*ctx.input(0)};
  for (int i = 1; i < 3; ++i) {
    if (!ctx.hasInput(i))
      continue;
    auto v = ctx.input(i);
    if (failed(v))
      return failure();
    operands.push_back(*v);
  }
  if (operands.size() < 2)
    return ctx.fail("LayerNormalization needs a Scale input");
  double epsilon = ctx.attrFloat("epsilon", 1e-5f);
  if (failed(ctx.result(ctx.create<LayerNormOp>(
                                operands, {ctx.namedI64("axis", axis),
                                           ctx.named("epsilon", ctx.builder().getF64FloatAttr(epsilon))}))))
    return failure();
  if (!ctx.wantsOutput(1) && !ctx.wantsOutput(2))
    return success();
  // Mean and InvStdDev, when asked for, are spelled out in graph ops.
  auto stats = moments(ctx, operands[0], trailingAxes(axis, type.getRank()), epsilon);
  if (failed(stats))
    return failure();
  auto inverse = ctx.create<ReciprocalOp>(stats->root);
  if (failed(inverse))
    return failure();
  Type stash = elementTypeOf(*ctx.context(), (int32_t)ctx.attrInt("stash_type", 1));
  for (auto [i, v] : llvm::enumerate(SmallVector<Value>{stats->mean, *inverse})) {
    Value out = v;
    auto vt = cast<RankedTensorType>(v.getType());
    if (stash && stash != vt.getElementType()) {
      auto c = ctx.createTyped<CastOp>(vt.clone(stash), v);
      if (failed(c))
        return failure();
      out = *c;
    }
    ctx.setOutput(i + 1, out);
  }
  return success();
}

/// RMSNormalization (opset 23), and onnxruntime's SimplifiedLayerNormalization
/// that T5 and Llama exports carry: x / sqrt(mean(x^2 over the axes from
/// `axis` on) + epsilon) x scale, spelled out in graph ops, the statistics
/// in f32 (stash_type 1) for a bf16 or f16 input: the form PyTorch exports
/// write too, which the compiler's dtc-fuse-rms-norm makes one rms
/// layer_norm. SimplifiedLayerNormalization's second output is 1 / that root.
LogicalResult convertRmsNorm(NodeContext &ctx) {
  auto typed = typeAndAxis(ctx);
  if (failed(typed))
    return failure();
  auto [type, axis] = *typed;
  auto input = ctx.input(0);
  if (failed(input))
    return failure();
  if (!ctx.hasInput(1))
    return ctx.fail("needs a scale input");
  auto scale = ctx.input(1);
  if (failed(scale))
    return failure();
  Type element = type.getElementType();
  Type stash = elementTypeOf(*ctx.context(), (int32_t)ctx.attrInt("stash_type", 1));
  if (!stash || !isa<FloatType>(stash))
    return ctx.fail("stash_type must be a float type");
  Value x = *input;
  if (stash != element) {
    auto widened = ctx.createTyped<CastOp>(type.clone(stash), x);
    if (failed(widened))
      return failure();
    x = *widened;
  }
  double epsilon = ctx.attrFloat("epsilon", 1e-5f);
  auto squared = ctx.create<MulOp>(ValueRange{x, x});
  if (failed(squared))
    return failure();
  auto meanSquare = reduce<ReduceMeanOp>(ctx, *squared, trailingAxes(axis, type.getRank()), true);
  if (failed(meanSquare))
    return failure();
  auto shifted = ctx.create<AddOp>(ValueRange{*meanSquare, ctx.scalar(epsilon, stash)});
  if (failed(shifted))
    return failure();
  auto root = ctx.create<SqrtOp>(*shifted);
  if (failed(root))
    return failure();
  auto inverse = ctx.create<ReciprocalOp>(*root);
  if (failed(inverse))
    return failure();
  auto normalized = ctx.create<MulOp>(ValueRange{x, *inverse});
  if (failed(normalized))
    return failure();
  Value y = *normalized;
  if (stash != element) {
    auto narrowed = ctx.createTyped<CastOp>(type, y);
    if (failed(narrowed))
      return failure();
    y = *narrowed;
  }
  if (failed(ctx.result(ctx.create<MulOp>(ValueRange{y, *scale}))))
    return failure();
  if (ctx.wantsOutput(1))
    ctx.setOutput(1, *inverse);
  return success();
}

/// InstanceNormalization and GroupNormalization (opset 21): each sample's
/// channels standardized in `groups` groups (InstanceNormalization: one per
/// channel) over the group's channels and the spatial dims, then scaled and
/// shifted per channel; in graph ops.
LogicalResult convertGroupedNorm(NodeContext &ctx, bool instance) {
  auto type = ctx.inputType(0);
  if (failed(type))
    return failure();
  if (type->getRank() < 2)
    return ctx.fail("needs an input of rank 2 or more ([N, C, ...])");
  int64_t n = type->getDimSize(0), c = type->getDimSize(1), spatial = 1;
  for (int64_t d = 2; d < type->getRank(); ++d)
    spatial *= type->getDimSize(d);
  int64_t groups = instance ? c : ctx.attrInt("num_groups", 0);
  if (groups <= 0 || c % groups != 0)
    return ctx.fail("num_groups " + std::to_string(groups) + " must divide the " +
                    std::to_string(c) + " channels");
  if (!ctx.hasInput(1) || !ctx.hasInput(2))
    return ctx.fail("needs scale and bias inputs");
  auto x = ctx.input(0), scale = ctx.input(1), bias = ctx.input(2);
  if (failed(x) || failed(scale) || failed(bias))
    return failure();
  for (Value v : {*scale, *bias})
    if (cast<RankedTensorType>(v.getType()).getNumElements() != c)
      return ctx.fail("scale and bias need one value per channel (" + std::to_string(c) +
                      ")");
  auto grouped = ctx.createTyped<ReshapeOp>(type->clone({n, groups, c / groups * spatial}), *x);
  if (failed(grouped))
    return failure();
  auto stats = moments(ctx, *grouped, {2}, ctx.attrFloat("epsilon", 1e-5f));
  if (failed(stats))
    return failure();
  auto standardized = ctx.create<DivOp>(ValueRange{stats->centered, stats->root});
  if (failed(standardized))
    return failure();
  auto back = ctx.createTyped<ReshapeOp>(*type, *standardized);
  if (failed(back))
    return failure();
  // Per channel: [C, 1, ...] against [N, C, ...].
  SmallVector<int64_t> perChannel(size_t(type->getRank() - 1), 1);
  perChannel[0] = c;
  auto channelwise = [&](Value v) {
    auto t = cast<RankedTensorType>(v.getType());
    return ctx.createTyped<ReshapeOp>(t.clone(perChannel), v);
  };
  auto s = channelwise(*scale), b = channelwise(*bias);
  if (failed(s) || failed(b))
    return failure();
  auto scaled = ctx.create<MulOp>(ValueRange{*back, *s});
  if (failed(scaled))
    return failure();
  return ctx.result(ctx.create<AddOp>(ValueRange{*scaled, *b}));
}

LogicalResult convertBatchNorm(NodeContext &ctx) {
  SmallVector<Value> operands;
  for (int i = 0; i < 5; ++i) {
    auto v = ctx.input(i);
    if (failed(v))
      return failure();
    operands.push_back(*v);
  }
  OpBuilder &b = ctx.builder();
  SmallVector<NamedAttribute> attrs{
      ctx.named("epsilon", b.getF64FloatAttr(ctx.attrFloat("epsilon", 1e-5f)))};
  if (ctx.attribute("momentum"))
    attrs.push_back(ctx.named("momentum", b.getF64FloatAttr(ctx.attrFloat("momentum", 0.9f))));
  auto norm = ctx.create<BatchNormOp>(operands, attrs);
  if (failed(norm) || !ctx.attrInt("training_mode", 0))
    return ctx.result(norm);
  // Training mode normalises with the batch statistics and updates the
  // running ones: spelled out in graph ops.
  auto op = norm->getDefiningOp<BatchNormOp>();
  BatchNormTraining parts = expandBatchNormForTraining(b, op);
  op.erase();
  ctx.setOutput(0, parts.output);
  if (ctx.wantsOutput(1))
    ctx.setOutput(1, parts.runningMean);
  if (ctx.wantsOutput(2))
    ctx.setOutput(2, parts.runningVariance);
  return success();
}

/// The 2-D window attributes of a Conv or pool node: kernel, strides, pads
/// (begin..., end...), dilations, resolving auto_pad. `spatial` holds the
/// input's spatial sizes (1 or 2 of them; 1-D is lifted to 2-D by callers).
struct Window {
  SmallVector<int64_t> kernel, strides, pads, dilations;
};

FailureOr<Window> windowOf(NodeContext &ctx, ArrayRef<int64_t> spatial,
                           ArrayRef<int64_t> kernel) {
  size_t n = spatial.size();
  Window w;
  w.kernel.assign(kernel.begin(), kernel.end());
  w.strides = ctx.attrInts("strides").value_or(SmallVector<int64_t>(n, 1));
  w.dilations = ctx.attrInts("dilations").value_or(SmallVector<int64_t>(n, 1));
  w.pads = ctx.attrInts("pads").value_or(SmallVector<int64_t>(2 * n, 0));
  if (w.strides.size() != n || w.dilations.size() != n || w.pads.size() != 2 * n)
    return ctx.fail("strides, dilations and pads must have " + std::to_string(n) +
                    ", " + std::to_string(n) + " and " + std::to_string(2 * n) +
                    " entries for a " + std::to_string(n) + "-D window");
  for (size_t i = 0; i < n; ++i)
    if (w.strides[i] < 1 || w.dilations[i] < 1 || w.kernel[i] < 1 ||
        w.pads[i] < 0 || w.pads[i + n] < 0)
      return ctx.fail("kernel, strides and dilations must be positive and pads "
                      "non-negative");
  std::string autoPad = ctx.attrString("auto_pad", "NOTSET");
  if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    for (size_t i = 0; i < n; ++i) {
      int64_t out = (spatial[i] + w.strides[i] - 1) / w.strides[i];
      int64_t span = (w.kernel[i] - 1) * w.dilations[i] + 1;
      int64_t total = std::max<int64_t>(0, (out - 1) * w.strides[i] + span - spatial[i]);
      int64_t small = total / 2, large = total - small;
      w.pads[i] = autoPad == "SAME_UPPER" ? small : large;
      w.pads[i + n] = autoPad == "SAME_UPPER" ? large : small;
    }
  } else if (autoPad == "VALID") {
    std::fill(w.pads.begin(), w.pads.end(), 0);
  } else if (autoPad != "NOTSET") {
    return ctx.fail("unknown auto_pad '" + autoPad + "'");
  }
  if (n == 1) {
    // Lift to 2-D with a unit first spatial dim.
    w.kernel.insert(w.kernel.begin(), 1);
    w.strides.insert(w.strides.begin(), 1);
    w.dilations.insert(w.dilations.begin(), 1);
    w.pads = {0, w.pads[0], 0, w.pads[1]};
  }
  return w;
}

/// Lifts a rank-3 (1-D spatial) value to rank 4; rank-4 values pass.
FailureOr<Value> liftTo2D(NodeContext &ctx, Value v) {
  if (cast<RankedTensorType>(v.getType()).getRank() == 4)
    return v;
  return ctx.create<UnsqueezeOp>(v, {ctx.namedI64s("axes", {2})});
}

FailureOr<Value> lowerFrom2D(NodeContext &ctx, Value v, int64_t rank) {
  if (rank == 4)
    return v;
  return ctx.create<SqueezeOp>(v, {ctx.namedI64s("axes", {2})});
}

LogicalResult checkSpatialRank(NodeContext &ctx, RankedTensorType type) {
  if (type.getRank() == 3 || type.getRank() == 4)
    return success();
  return ctx.fail("only 1-D and 2-D windows are supported (input rank 3 or 4), "
                  "got input " + shapeToString(type.getShape()));
}

/// A convolution's (or transposed convolution's) input and weight types,
/// checked: the input 3-D or 4-D, the weight of its rank, kernel_shape (when
/// given) the weight's spatial dims.
struct ConvOperands {
  RankedTensorType x, w;
  ArrayRef<int64_t> kernel;
};
FailureOr<ConvOperands> convOperands(NodeContext &ctx) {
  auto xType = ctx.inputType(0), wType = ctx.inputType(1);
  if (failed(xType) || failed(wType) || failed(checkSpatialRank(ctx, *xType)))
    return failure();
  if (wType->getRank() != xType->getRank())
    return ctx.fail("weight " + shapeToString(wType->getShape()) +
                    " must have the input's rank " + std::to_string(xType->getRank()));
  ArrayRef<int64_t> kernel = wType->getShape().drop_front(2);
  if (auto declared = ctx.attrInts("kernel_shape"); declared && ArrayRef<int64_t>(*declared) != kernel)
    return ctx.fail("kernel_shape " + shapeToString(*declared) +
                    " does not match the weight " + shapeToString(wType->getShape()));
  return ConvOperands{*xType, *wType, kernel};
}

LogicalResult convertConv(NodeContext &ctx) {
  auto checked = convOperands(ctx);
  if (failed(checked))
    return failure();
  RankedTensorType *xType = &checked->x;
  ArrayRef<int64_t> kernel = checked->kernel;
  auto window = windowOf(ctx, xType->getShape().drop_front(2), kernel);
  if (failed(window))
    return failure();
  auto x = liftTo2D(ctx, *ctx.input(0)), w = liftTo2D(ctx, *ctx.input(1));
  if (failed(x) || failed(w))
    return failure();
  SmallVector<Value> operands{*x, *w};
  if (ctx.hasInput(2)) {
    auto b = ctx.input(2);
    if (failed(b))
      return failure();
    operands.push_back(*b);
  }
  auto y = ctx.create<Conv2DOp>(operands, {ctx.namedI64s("strides", window->strides),
                                           ctx.namedI64s("pads", window->pads),
                                           ctx.namedI64s("dilations", window->dilations),
                                           ctx.namedI64("groups", ctx.attrInt("group", 1))});
  if (failed(y))
    return failure();
  return ctx.result(lowerFrom2D(ctx, *y, xType->getRank()));
}

/// ConvTranspose is the gradient of a convolution with respect to its input,
/// which graph.conv2d_backward_input computes: the transposed convolution's
/// weight (C_in, C_out / group, kH, kW) is the forward convolution's OIHW
/// weight, and its output the forward's input.
LogicalResult convertConvTranspose(NodeContext &ctx) {
  auto operands = convOperands(ctx);
  if (failed(operands))
    return failure();
  RankedTensorType *xType = &operands->x, *wType = &operands->w;
  int64_t groups = ctx.attrInt("group", 1);
  if (groups < 1 || xType->getDimSize(1) != wType->getDimSize(0) ||
      xType->getDimSize(1) % groups)
    return ctx.fail("input channels " + std::to_string(xType->getDimSize(1)) +
                    " must equal the weight's dim 0 (" + std::to_string(wType->getDimSize(0)) +
                    ") and divide into " + std::to_string(groups) + " groups");
  ArrayRef<int64_t> in = xType->getShape().drop_front(2), kernel = operands->kernel;
  size_t n = in.size();
  auto strides = ctx.attrInts("strides").value_or(SmallVector<int64_t>(n, 1));
  auto dilations = ctx.attrInts("dilations").value_or(SmallVector<int64_t>(n, 1));
  auto outputPadding = ctx.attrInts("output_padding").value_or(SmallVector<int64_t>(n, 0));
  auto pads = ctx.attrInts("pads").value_or(SmallVector<int64_t>(2 * n, 0));
  auto outputShape = ctx.attrInts("output_shape");
  if (strides.size() != n || dilations.size() != n || outputPadding.size() != n ||
      pads.size() != 2 * n || (outputShape && outputShape->size() != n))
    return ctx.fail("strides, dilations, output_padding and output_shape must have " +
                    std::to_string(n) + " entries and pads " + std::to_string(2 * n));
  std::string autoPad = ctx.attrString("auto_pad", "NOTSET");
  if (autoPad != "NOTSET" && autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER" &&
      autoPad != "VALID")
    return ctx.fail("unknown auto_pad '" + autoPad + "'");
  SmallVector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (strides[i] < 1 || dilations[i] < 1 || outputPadding[i] < 0 ||
        outputPadding[i] >= std::max(strides[i], dilations[i]))
      return ctx.fail("strides and dilations must be positive and output_padding below "
                      "the larger of them");
    int64_t full = strides[i] * (in[i] - 1) + outputPadding[i] + (kernel[i] - 1) * dilations[i] + 1;
    if (outputShape || autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      // The padding that gives the asked-for size (ONNX's rule).
      // A negative total (an output_shape past the full size) pads the end
      // negatively: rows added there, as output_padding adds them.
      int64_t want = outputShape ? (*outputShape)[i] : in[i] * strides[i];
      int64_t total = full - want;
      int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2); // floor
      bool upper = autoPad == "SAME_UPPER";
      pads[i] = upper ? half : total - half;
      pads[i + n] = upper ? total - half : half;
    } else if (autoPad == "VALID") {
      pads[i] = pads[i + n] = 0;
    }
    out[i] = full - pads[i] - pads[i + n];
    if (pads[i + n] < 0 && pads[i + n] > -strides[i])
      pads[i + n] = 0; // the extra rows are the result type's, as output_padding's
    if (pads[i] < 0 || pads[i + n] < 0)
      return ctx.fail("pads must be non-negative (output_shape at most " +
                      std::to_string(full + strides[i] - 1) + " along spatial dim " +
                      std::to_string(i) + ")");
    if (out[i] < 1)
      return ctx.fail("the output would be empty along spatial dim " + std::to_string(i));
  }
  if (n == 1) { // lifted to 2-D with a unit first spatial dim
    strides.insert(strides.begin(), 1);
    dilations.insert(dilations.begin(), 1);
    pads = {0, pads[0], 0, pads[1]};
    out.insert(out.begin(), 1);
  }
  auto x = liftTo2D(ctx, *ctx.input(0)), w = liftTo2D(ctx, *ctx.input(1));
  if (failed(x) || failed(w))
    return failure();
  int64_t channels = wType->getDimSize(1) * groups;
  auto type = RankedTensorType::get({xType->getDimSize(0), channels, out[0], out[1]},
                                    xType->getElementType());
  auto y = ctx.createTyped<Conv2DBackwardInputOp>(
      type, ValueRange{*x, *w},
      {ctx.namedI64s("strides", strides), ctx.namedI64s("pads", pads),
       ctx.namedI64s("dilations", dilations), ctx.namedI64("groups", groups)});
  if (failed(y))
    return failure();
  Value result = *y;
  if (ctx.hasInput(2)) {
    auto b = ctx.input(2);
    if (failed(b))
      return failure();
    auto column = ctx.createTyped<ReshapeOp>(
        RankedTensorType::get({1, channels, 1, 1}, xType->getElementType()), *b);
    if (failed(column))
      return failure();
    auto biased = ctx.create<AddOp>(ValueRange{result, *column});
    if (failed(biased))
      return failure();
    result = *biased;
  }
  return ctx.result(lowerFrom2D(ctx, result, xType->getRank()));
}

/// A 3-D window's pooling as two 2-D ones: over (H, W) for every depth
/// slice (the input as [N, C*D, H, W]), then over D (as [N, C, D, OH*OW]
/// with a (kd, 1) window). Exact for both: a box's maximum is the maximum
/// over depth of the slices' maxima, and its average, whose divisor (the
/// positions counted, padding or not) is the product of each axis's, the
/// average over depth of the slices' averages.
/// A 2-D pooling's attributes: its window, and the node's ceil_mode (and
/// count_include_pad for an average).
SmallVector<NamedAttribute> poolAttributes(NodeContext &ctx, bool isAverage,
                                           ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
                                           ArrayRef<int64_t> pads, ArrayRef<int64_t> dilations) {
  SmallVector<NamedAttribute> attrs{
      ctx.namedI64s("kernel", kernel), ctx.namedI64s("strides", strides),
      ctx.namedI64s("pads", pads), ctx.namedI64s("dilations", dilations),
      ctx.named("ceil_mode", ctx.builder().getBoolAttr(ctx.attrInt("ceil_mode", 0)))};
  if (isAverage)
    attrs.push_back(ctx.named("count_include_pad",
                              ctx.builder().getBoolAttr(ctx.attrInt("count_include_pad", 0))));
  return attrs;
}

template <typename OpTy, bool isAverage>
LogicalResult convertPool3D(NodeContext &ctx, RankedTensorType xType, const Window &w) {
  ArrayRef<int64_t> shape = xType.getShape();
  Type element = xType.getElementType();
  int64_t n = shape[0], c = shape[1], d = shape[2];
  auto slices = ctx.createTyped<ReshapeOp>(
      RankedTensorType::get({n, c * d, shape[3], shape[4]}, element), *ctx.input(0));
  if (failed(slices))
    return failure();
  auto planes = ctx.create<OpTy>(
      *slices, poolAttributes(ctx, isAverage, {w.kernel[1], w.kernel[2]},
                              {w.strides[1], w.strides[2]},
                              {w.pads[1], w.pads[2], w.pads[4], w.pads[5]},
                              {w.dilations[1], w.dilations[2]}));
  if (failed(planes))
    return failure();
  auto planeType = cast<RankedTensorType>(planes->getType());
  int64_t oh = planeType.getDimSize(2), ow = planeType.getDimSize(3);
  auto columns =
      ctx.createTyped<ReshapeOp>(RankedTensorType::get({n, c, d, oh * ow}, element), *planes);
  if (failed(columns))
    return failure();
  auto depth = ctx.create<OpTy>(
      *columns, poolAttributes(ctx, isAverage, {w.kernel[0], 1}, {w.strides[0], 1},
                               {w.pads[0], 0, w.pads[3], 0}, {w.dilations[0], 1}));
  if (failed(depth))
    return failure();
  int64_t od = cast<RankedTensorType>(depth->getType()).getDimSize(2);
  return ctx.result(
      ctx.createTyped<ReshapeOp>(RankedTensorType::get({n, c, od, oh, ow}, element), *depth));
}

template <typename OpTy, bool isAverage>
LogicalResult convertPool(NodeContext &ctx) {
  auto xType = ctx.inputType(0);
  if (failed(xType) ||
      (xType->getRank() != 5 && failed(checkSpatialRank(ctx, *xType))))
    return failure();
  auto kernel = ctx.attrInts("kernel_shape");
  if (!kernel)
    return ctx.fail("attribute kernel_shape is required");
  if ((int64_t)kernel->size() != xType->getRank() - 2)
    return ctx.fail("kernel_shape has " + std::to_string(kernel->size()) +
                    " entries for a rank-" + std::to_string(xType->getRank()) + " input");
  auto window = windowOf(ctx, xType->getShape().drop_front(2), *kernel);
  if (failed(window))
    return failure();
  if (xType->getRank() == 5)
    return convertPool3D<OpTy, isAverage>(ctx, *xType, *window);
  auto x = liftTo2D(ctx, *ctx.input(0));
  if (failed(x))
    return failure();
  auto y = ctx.create<OpTy>(*x, poolAttributes(ctx, isAverage, window->kernel, window->strides,
                                               window->pads, window->dilations));
  if (failed(y))
    return failure();
  return ctx.result(lowerFrom2D(ctx, *y, xType->getRank()));
}

template <typename OpTy>
LogicalResult convertGlobalPool(NodeContext &ctx) {
  auto type = ctx.inputType(0);
  if (failed(type))
    return failure();
  if (type->getRank() < 3)
    return ctx.fail("global pooling needs rank >= 3 (N, C, spatial...), got " +
                    shapeToString(type->getShape()));
  return ctx.result(reduce<OpTy>(ctx, *ctx.input(0),
                                     trailingAxes(2, type->getRank()), true));
}

/// A ReduceX node's axes (normalised, sorted) and keepdims; no axes with
/// noop_with_empty_axes set means none: the op's elementwise parts alone.
/// `axesInputSince` is the opset from which axes is an input rather than an
/// attribute.
struct ReduceArgs {
  SmallVector<int64_t> axes;
  bool keepdims = true;
  bool none = false;
};

FailureOr<ReduceArgs> reduceArgs(NodeContext &ctx, int axesInputSince) {
  auto type = ctx.inputType(0);
  if (failed(type))
    return failure();
  ReduceArgs args;
  if (ctx.opset() >= axesInputSince) {
    if (ctx.hasInput(1)) {
      auto given = ctx.constantInts(1, "axes");
      if (failed(given))
        return failure();
      args.axes.assign(given->begin(), given->end());
    }
  } else if (auto given = ctx.attrInts("axes")) {
    args.axes.assign(given->begin(), given->end());
  }
  int64_t rank = type->getRank();
  bool noopWithEmptyAxes = ctx.attrInt("noop_with_empty_axes", 0) != 0;
  args.keepdims = ctx.attrInt("keepdims", 1) != 0;
  if (args.axes.empty()) {
    args.none = noopWithEmptyAxes;
    if (!args.none)
      args.axes = trailingAxes(0, rank);
    return args;
  }
  for (int64_t &a : args.axes) {
    auto n = normalizeAxis(a, rank);
    if (!n)
      return ctx.fail("reduction axis " + std::to_string(a) + " out of range for rank-" +
                      std::to_string(rank) + " input");
    a = *n;
  }
  llvm::sort(args.axes);
  if (std::adjacent_find(args.axes.begin(), args.axes.end()) != args.axes.end())
    return ctx.fail("reduction axes repeat");
  return args;
}

template <typename OpTy, int axesInputSince>
LogicalResult convertReduce(NodeContext &ctx) {
  auto args = reduceArgs(ctx, axesInputSince);
  if (failed(args))
    return failure();
  if (args->none) {
    ctx.setOutput(0, *ctx.input(0));
    return success();
  }
  return ctx.result(reduce<OpTy>(ctx, *ctx.input(0), args->axes, args->keepdims));
}

/// The reductions ONNX defines as a sum between elementwise steps:
/// ReduceL1 sum(|x|), ReduceL2 sqrt(sum(x^2)), ReduceSumSquare sum(x^2),
/// ReduceLogSum log(sum(x)), and ReduceLogSumExp log(sum(exp(x - m))) + m
/// with m the maximum (as onnx's reference computes it: no overflow). With
/// no axes and noop_with_empty_axes, the steps without the sum (numpy's
/// sum over no axes, which the reference uses).
enum class SumKind { L1, L2, SumSquare, LogSum, LogSumExp };

template <SumKind kind>
LogicalResult convertSumReduction(NodeContext &ctx) {
  auto args = reduceArgs(ctx, 18);
  if (failed(args))
    return failure();
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  auto sum = [&](Value v, bool keep) -> FailureOr<Value> {
    if (args->none)
      return v;
    return reduce<ReduceSumOp>(ctx, v, args->axes, keep);
  };
  FailureOr<Value> result = failure();
  switch (kind) {
  case SumKind::L1: {
    auto magnitude = ctx.create<AbsOp>(ValueRange{*x});
    if (failed(magnitude))
      return failure();
    result = sum(*magnitude, args->keepdims);
    break;
  }
  case SumKind::L2:
  case SumKind::SumSquare: {
    auto squared = ctx.create<MulOp>(ValueRange{*x, *x});
    if (failed(squared))
      return failure();
    result = sum(*squared, args->keepdims);
    if (succeeded(result) && kind == SumKind::L2)
      result = ctx.create<SqrtOp>(ValueRange{*result});
    break;
  }
  case SumKind::LogSum:
    result = sum(*x, args->keepdims);
    if (succeeded(result))
      result = ctx.create<LogOp>(ValueRange{*result});
    break;
  case SumKind::LogSumExp: {
    if (args->none) {
      result = *x; // log(exp(x))
      break;
    }
    auto peak = reduce<ReduceMaxOp>(ctx, *x, args->axes, true);
    if (failed(peak))
      return failure();
    auto shifted = ctx.create<SubOp>(ValueRange{*x, *peak});
    if (failed(shifted))
      return failure();
    auto exps = ctx.create<ExpOp>(ValueRange{*shifted});
    if (failed(exps))
      return failure();
    auto total = sum(*exps, args->keepdims);
    if (failed(total))
      return failure();
    auto logs = ctx.create<LogOp>(ValueRange{*total});
    if (failed(logs))
      return failure();
    auto kept = args->keepdims ? peak : reduce<ReduceMaxOp>(ctx, *x, args->axes, false);
    if (failed(kept))
      return failure();
    result = ctx.create<AddOp>(ValueRange{*logs, *kept});
    break;
  }
  }
  return ctx.result(result);
}

/// NegativeLogLikelihoodLoss of log-probabilities `input` [N, C, d...] at
/// class ids `target` [N, d...]: -input[n, target, d...], times
/// weight[target] when the node gives weights (input 2), 0 where target is ignore_index (which is
/// never gathered: 0 stands in for it); reduced by none, sum or mean (over
/// the weights of the targets not ignored, or their count).
FailureOr<Value> nllLoss(NodeContext &ctx, Value input, Value target) {
  std::optional<Value> weight; // the node's input 2, in both losses
  if (ctx.hasInput(2)) {
    auto given = ctx.input(2);
    if (failed(given))
      return failure();
    weight = *given;
  }
  auto type = cast<RankedTensorType>(input.getType());
  auto targetType = cast<RankedTensorType>(target.getType());
  if (type.getRank() < 2 || targetType.getRank() != type.getRank() - 1)
    return ctx.fail("input of rank " + std::to_string(type.getRank()) + " and target of rank " +
                    std::to_string(targetType.getRank()) +
                    ": the input is [N, C, d...] and the target [N, d...]");
  std::string reduction = ctx.attrString("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    return ctx.fail("reduction must be none, sum or mean, got '" + reduction + "'");
  Type element = type.getElementType(), index = targetType.getElementType();
  auto scalarIndex = [&](int64_t v) {
    return ctx.constant(DenseElementsAttr::get(
        RankedTensorType::get({}, index), APInt(index.getIntOrFloatBitWidth(), uint64_t(v), true)));
  };
  Value safe = target;
  std::optional<Value> kept; // 1 where the target counts, in the input's type
  if (const auto *ignore = ctx.attribute("ignore_index")) {
    auto ignored = ctx.create<EqualOp>(ValueRange{target, scalarIndex(ignore->i())});
    if (failed(ignored))
      return failure();
    auto replaced = ctx.create<WhereOp>(ValueRange{*ignored, scalarIndex(0), target});
    auto counted = ctx.create<NotOp>(*ignored);
    if (failed(replaced) || failed(counted))
      return failure();
    safe = *replaced;
    auto mask = ctx.createTyped<CastOp>(targetType.clone(element), *counted);
    if (failed(mask))
      return failure();
    kept = *mask;
  }
  auto column = ctx.create<UnsqueezeOp>(safe, {ctx.namedI64s("axes", {1})});
  if (failed(column))
    return failure();
  auto picked = gatherElements(ctx, input, *column, 1);
  if (failed(picked))
    return failure();
  auto squeezed = ctx.create<SqueezeOp>(*picked, {ctx.namedI64s("axes", {1})});
  if (failed(squeezed))
    return failure();
  auto negated = ctx.create<NegOp>(*squeezed);
  if (failed(negated))
    return failure();
  Value loss = *negated;
  std::optional<Value> weights = kept;
  if (weight) {
    auto perTarget = ctx.create<GatherOp>(ValueRange{*weight, safe}, {ctx.namedI64("axis", 0)});
    if (failed(perTarget))
      return failure();
    weights = *perTarget;
    if (kept) {
      auto masked = ctx.create<MulOp>(ValueRange{*weights, *kept});
      if (failed(masked))
        return failure();
      weights = *masked;
    }
  }
  if (weights) {
    auto weighted = ctx.create<MulOp>(ValueRange{loss, *weights});
    if (failed(weighted))
      return failure();
    loss = *weighted;
  }
  if (reduction == "none")
    return loss;
  SmallVector<int64_t> all;
  for (int64_t d = 0; d < targetType.getRank(); ++d)
    all.push_back(d);
  auto sumOf = [&](Value v) {
    return ctx.create<ReduceSumOp>(v, {ctx.namedI64s("axes", all),
                                       ctx.named("keepdims", ctx.builder().getBoolAttr(false))});
  };
  auto total = sumOf(loss);
  if (failed(total) || reduction == "sum")
    return total;
  if (!weights)
    return ctx.create<ReduceMeanOp>(loss, {ctx.namedI64s("axes", all),
                                           ctx.named("keepdims", ctx.builder().getBoolAttr(false))});
  auto denominator = sumOf(*weights);
  if (failed(denominator))
    return failure();
  return ctx.create<DivOp>(ValueRange{*total, *denominator});
}

LogicalResult convertNegativeLogLikelihoodLoss(NodeContext &ctx) {
  auto input = ctx.input(0), target = ctx.input(1);
  if (failed(input) || failed(target))
    return failure();
  return ctx.result(nllLoss(ctx, *input, *target));
}

/// SoftmaxCrossEntropyLoss: NegativeLogLikelihoodLoss of the scores'
/// log-softmax over the classes (dim 1), which is its second output.
LogicalResult convertSoftmaxCrossEntropyLoss(NodeContext &ctx) {
  auto scores = ctx.input(0), labels = ctx.input(1);
  if (failed(scores) || failed(labels))
    return failure();
  auto logProb = ctx.create<LogSoftmaxOp>(*scores, {ctx.namedI64("axis", 1)});
  if (failed(logProb))
    return failure();
  if (ctx.wantsOutput(1))
    ctx.setOutput(1, *logProb);
  return ctx.result(nllLoss(ctx, *logProb, *labels));
}

/// ArgMax / ArgMin along an axis: the first (or, select_last_index, the
/// last) position whose value equals the axis's max (min): where(x == m,
/// position, past the end) reduced by min (or where(x == m, position, -1)
/// by max). Integer results; nothing to differentiate.
template <typename ExtremeOp>
LogicalResult convertArgExtreme(NodeContext &ctx) {
  auto type = ctx.inputType(0);
  auto x = ctx.input(0);
  if (failed(type) || failed(x))
    return failure();
  int64_t rank = type->getRank();
  auto axis = ctx.axisAttr("axis", 0, rank);
  if (failed(axis))
    return failure();
  bool keepdims = ctx.attrInt("keepdims", 1) != 0, last = ctx.attrInt("select_last_index", 0) != 0;
  OpBuilder &b = ctx.builder();
  auto extreme = ctx.create<ExtremeOp>(*x, {ctx.namedI64s("axes", {*axis}),
                                            ctx.named("keepdims", b.getBoolAttr(true))});
  if (failed(extreme))
    return failure();
  auto at = ctx.create<EqualOp>(ValueRange{*x, *extreme});
  if (failed(at))
    return failure();
  int64_t n = type->getDimSize(*axis);
  SmallVector<int64_t> positionShape(size_t(rank), 1);
  positionShape[size_t(*axis)] = n;
  SmallVector<APInt> positions;
  for (int64_t i = 0; i < n; ++i)
    positions.push_back(APInt(64, uint64_t(i), true));
  Type i64 = b.getI64Type();
  Value position =
      ctx.constant(DenseElementsAttr::get(RankedTensorType::get(positionShape, i64), positions));
  auto broadcast = ctx.create<BroadcastOp>(position, {ctx.namedI64s("shape", type->getShape())});
  if (failed(broadcast))
    return failure();
  Value outside = ctx.constant(DenseElementsAttr::get(
      RankedTensorType::get({}, i64), APInt(64, uint64_t(last ? -1 : n), true)));
  auto candidates = ctx.create<WhereOp>(ValueRange{*at, *broadcast, outside});
  if (failed(candidates))
    return failure();
  NamedAttribute axes = ctx.namedI64s("axes", {*axis});
  NamedAttribute keep = ctx.named("keepdims", b.getBoolAttr(keepdims));
  return ctx.result(last ? ctx.create<ReduceMaxOp>(*candidates, {axes, keep})
                         : ctx.create<ReduceMinOp>(*candidates, {axes, keep}));
}

/// TopK: graph.top_k's indices (a sort of each line), then the values
/// gathered at them, so that their gradient is GatherElements'. K = 0
/// gives empty outputs.
LogicalResult convertTopK(NodeContext &ctx) {
  auto type = ctx.inputType(0);
  auto x = ctx.input(0);
  auto kGiven = ctx.constantInts(1, "K");
  if (failed(type) || failed(x) || failed(kGiven))
    return failure();
  int64_t rank = type->getRank();
  auto axis = ctx.axisAttr("axis", -1, rank);
  if (failed(axis))
    return failure();
  int64_t n = type->getDimSize(*axis);
  if (kGiven->size() != 1 || (*kGiven)[0] < 0 || (*kGiven)[0] > n)
    return ctx.fail("K must be one number in [0, " + std::to_string(n) + "]");
  int64_t k = (*kGiven)[0];
  if (k == 0)
    return ctx.fail("K = 0 (empty outputs) is not supported");
  bool largest = ctx.attrInt("largest", 1) != 0;
  OpBuilder &b = ctx.builder();
  auto indices = ctx.create<TopKOp>(*x, {ctx.namedI64("axis", *axis), ctx.namedI64("k", k),
                                         ctx.named("largest", b.getBoolAttr(largest))});
  if (failed(indices))
    return failure();
  auto values = gatherElements(ctx, *x, *indices, *axis);
  if (failed(values))
    return failure();
  ctx.setOutput(0, *values);
  ctx.setOutput(1, *indices);
  return success();
}

const OpConverter kConverters[] = {
    {"MatMul", 13, convertMatMul},
    {"Gemm", 13, convertGemm},
    {"Softmax", 13, convertSoftmax<SoftmaxOp>},
    {"LogSoftmax", 13, convertSoftmax<LogSoftmaxOp>},
    {"LayerNormalization", 17, convertLayerNorm, "stash_type"},
    {"RMSNormalization", 23, convertRmsNorm},
    {"InstanceNormalization", 13, [](NodeContext &ctx) { return convertGroupedNorm(ctx, true); }},
    {"GroupNormalization", 21, [](NodeContext &ctx) { return convertGroupedNorm(ctx, false); },
     "stash_type"},
    {"SimplifiedLayerNormalization", 13, convertRmsNorm},
    {"BatchNormalization", 13, convertBatchNorm},
    {"Conv", 13, convertConv},
    {"ConvTranspose", 11, convertConvTranspose},
    {"MaxPool", 13, convertPool<MaxPool2DOp, false>, "storage_order"},
    {"AveragePool", 13, convertPool<AvgPool2DOp, true>},
    {"GlobalAveragePool", 13, convertGlobalPool<ReduceMeanOp>},
    {"GlobalMaxPool", 13, convertGlobalPool<ReduceMaxOp>},
    {"ReduceSum", 13, convertReduce<ReduceSumOp, 13>},
    {"ReduceMean", 13, convertReduce<ReduceMeanOp, 18>},
    {"ReduceMax", 13, convertReduce<ReduceMaxOp, 18>},
    {"ReduceMin", 13, convertReduce<ReduceMinOp, 18>},
    {"ReduceL1", 13, convertSumReduction<SumKind::L1>},
    {"ReduceL2", 13, convertSumReduction<SumKind::L2>},
    {"ReduceSumSquare", 13, convertSumReduction<SumKind::SumSquare>},
    {"ReduceLogSum", 13, convertSumReduction<SumKind::LogSum>},
    {"ReduceLogSumExp", 13, convertSumReduction<SumKind::LogSumExp>},
    {"NegativeLogLikelihoodLoss", 13, convertNegativeLogLikelihoodLoss},
    {"SoftmaxCrossEntropyLoss", 13, convertSoftmaxCrossEntropyLoss},
    {"ArgMax", 11, convertArgExtreme<ReduceMaxOp>},
    {"ArgMin", 11, convertArgExtreme<ReduceMinOp>},
    // sorted=0 lets any order do: the rounds give the sorted one.
    {"TopK", 11, convertTopK, "sorted"},
};

} // namespace

llvm::ArrayRef<OpConverter> nnConverters() { return kConverters; }

} // namespace dtc::onnx
