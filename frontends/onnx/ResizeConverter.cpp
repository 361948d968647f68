//===- ResizeConverter.cpp - ONNX Resize as gathers and weights ------------===//
//
// Resize with constant scales or sizes is separable: along each axis whose
// size changes, every output position reads one (nearest), two (linear) or
// four (cubic) input positions (more when antialiased downscaling
// stretches the kernel) with weights that depend only on the shapes. So
// each axis becomes constant-index gathers along it and, for linear and
// cubic, a weighted sum: exact, any rank, and trainable through gather's
// gradient; tf_crop_and_resize's positions outside the input take
// extrapolation_value. docs/onnx-lowerings.md.
//
//===----------------------------------------------------------------------===//
#include "frontends/onnx/NodeContext.h"

#include "dialects/graph/ConstantFolding.h"
#include "dialects/graph/GraphOps.h"

#include <cmath>

using namespace mlir;
using namespace dtc::graph;

namespace dtc::onnx {
namespace {

/// The input coordinate output position `x` reads along an axis of `in`
/// positions resized to `out` by `scale` (ONNX's
/// coordinate_transformation_mode).
FailureOr<double> sourceCoordinate(NodeContext &ctx, const std::string &mode, double x,
                                   int64_t in, int64_t out, double scale, double roiStart,
                                   double roiEnd) {
  if (mode == "tf_crop_and_resize") { // the resized length unrounded, as ONNX's
    double length = double(in) * scale, span = (roiEnd - roiStart) * double(in - 1);
    return roiStart * double(in - 1) + (length == 1 ? span / 2 : x * span / (length - 1));
  }
  if (mode == "half_pixel")
    return (x + 0.5) / scale - 0.5;
  if (mode == "pytorch_half_pixel")
    return out > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
  if (mode == "align_corners") // the resized length unrounded (in * scale), as ONNX's
    return out == 1 ? 0.0 : x * double(in - 1) / (double(in) * scale - 1);
  if (mode == "asymmetric")
    return x / scale;
  if (mode == "half_pixel_symmetric") {
    double adjustment = double(out) / (scale * double(in));
    double offset = double(in) / 2 * (1 - adjustment);
    return offset + (x + 0.5) / scale - 0.5;
  }
  return ctx.fail("coordinate_transformation_mode '" + mode + "' is not supported");
}

/// One tap along an axis: the input position each output position reads
/// and its weight.
struct Tap {
  SmallVector<int64_t> index;
  SmallVector<double> weight;
};

/// The cubic convolution kernel's weight at distance `d` (Keys, with `a`).
double cubic(double d, double a) {
  d = std::fabs(d);
  if (d <= 1)
    return ((a + 2) * d - (a + 3)) * d * d + 1;
  if (d < 2)
    return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
  return 0;
}

/// The taps of one axis, and the output positions whose source lies
/// outside the input (tf_crop_and_resize: those take extrapolation_value).
struct AxisTaps {
  SmallVector<Tap> taps;
  SmallVector<bool> outside;
};

/// Antialiased downscaling (ONNX's antialias, scale < 1): the linear or
/// cubic kernel stretched by 1 / scale over as many input positions as it
/// covers, its weights normalised to sum to 1. Positions b + first + k for
/// k < count, b the input position just left of x (x itself less one when
/// x is whole), the weights of `ratio` = x - b in (0, 1].
struct Stretched {
  int64_t first = 0, count = 0;
  SmallVector<double> weights;
};
Stretched stretchedKernel(bool linear, double ratio, double scale, double a) {
  Stretched k;
  k.first = linear ? int64_t(std::floor(-1 / scale)) + 1 : int64_t(std::floor(-2 / scale)) + 1;
  k.count = 2 - 2 * k.first;
  double sum = 0;
  for (int64_t i = 0; i < k.count; ++i) {
    double d = std::fabs(scale * (double(k.first + i) - ratio));
    double w = linear ? std::max(0.0, 1 - d) : cubic(d, a);
    k.weights.push_back(w);
    sum += w;
  }
  for (double &w : k.weights)
    w /= sum;
  return k;
}

/// The taps of one axis.
FailureOr<AxisTaps> tapsOf(NodeContext &ctx, const std::string &mode,
                           const std::string &coordinates, int64_t in, int64_t out, double scale,
                           bool antialias, double roiStart, double roiEnd) {
  std::string nearest = ctx.attrString("nearest_mode", "round_prefer_floor");
  double a = ctx.attrFloat("cubic_coeff_a", -0.75f);
  bool excludeOutside = ctx.attrInt("exclude_outside", 0) != 0;
  bool stretched = antialias && scale < 1 && mode != "nearest";
  int64_t taps = mode == "nearest" ? 1 : mode == "linear" ? 2 : 4;
  if (stretched)
    taps = stretchedKernel(mode == "linear", 0.5, scale, a).count;
  AxisTaps result;
  result.taps.resize(size_t(taps));
  auto clamp = [&](int64_t i) { return std::min<int64_t>(std::max<int64_t>(i, 0), in - 1); };
  for (int64_t o = 0; o < out; ++o) {
    auto x = sourceCoordinate(ctx, coordinates, double(o), in, out, scale, roiStart, roiEnd);
    if (failed(x))
      return failure();
    result.outside.push_back(coordinates == "tf_crop_and_resize" &&
                             (*x < 0 || *x > double(in - 1)));
    if (stretched) {
      double b = std::ceil(*x) - 1;
      Stretched k = stretchedKernel(mode == "linear", *x - b, scale, a);
      double sum = 0;
      for (int64_t t = 0; t < taps; ++t) {
        int64_t i = int64_t(b) + k.first + t;
        if (excludeOutside && (i < 0 || i >= in))
          k.weights[size_t(t)] = 0;
        sum += k.weights[size_t(t)];
      }
      for (int64_t t = 0; t < taps; ++t) {
        result.taps[size_t(t)].index.push_back(clamp(int64_t(b) + k.first + t));
        result.taps[size_t(t)].weight.push_back(excludeOutside && sum > 0
                                                    ? k.weights[size_t(t)] / sum
                                                    : k.weights[size_t(t)]);
      }
      continue;
    }
    if (mode == "nearest") {
      double floor = std::floor(*x), frac = *x - floor;
      int64_t i;
      if (nearest == "floor")
        i = int64_t(floor);
      else if (nearest == "ceil")
        i = int64_t(std::ceil(*x));
      else if (nearest == "round_prefer_floor")
        i = int64_t(frac == 0.5 ? floor : std::round(*x));
      else if (nearest == "round_prefer_ceil")
        i = int64_t(frac == 0.5 ? floor + 1 : std::round(*x));
      else
        return ctx.fail("nearest_mode '" + nearest + "' is not supported");
      result.taps[0].index.push_back(clamp(i));
      result.taps[0].weight.push_back(1);
      continue;
    }
    // Past the ends the edge value repeats (the reference pads with it).
    double base = std::floor(*x), ratio = *x - base;
    if (mode == "linear") {
      result.taps[0].index.push_back(clamp(int64_t(base)));
      result.taps[0].weight.push_back(1 - ratio);
      result.taps[1].index.push_back(clamp(int64_t(base) + 1));
      result.taps[1].weight.push_back(ratio);
      continue;
    }
    double sum = 0, weights[4];
    for (int t = 0; t < 4; ++t) {
      int64_t i = int64_t(base) - 1 + t;
      weights[t] = excludeOutside && (i < 0 || i >= in) ? 0 : cubic(ratio - (t - 1), a);
      sum += weights[t];
    }
    for (int t = 0; t < 4; ++t) {
      result.taps[size_t(t)].index.push_back(clamp(int64_t(base) - 1 + t));
      result.taps[size_t(t)].weight.push_back(excludeOutside ? weights[t] / sum : weights[t]);
    }
  }
  return result;
}

/// `x` resized along `axis` to `out` positions; tf_crop_and_resize's
/// positions outside the input take `extrapolation`.
FailureOr<Value> resizeAxis(NodeContext &ctx, Value x, int64_t axis, int64_t out, double scale,
                            const std::string &mode, const std::string &coordinates,
                            bool antialias, double roiStart, double roiEnd,
                            double extrapolation) {
  auto type = cast<RankedTensorType>(x.getType());
  int64_t in = type.getDimSize(axis);
  auto axisTaps =
      tapsOf(ctx, mode, coordinates, in, out, scale, antialias, roiStart, roiEnd);
  if (failed(axisTaps))
    return failure();
  const SmallVector<Tap> *taps = &axisTaps->taps;
  // The weights broadcast along the axis: shape 1 everywhere else.
  SmallVector<int64_t> weightShape(type.getRank(), 1);
  weightShape[axis] = out;
  auto indexType = RankedTensorType::get({out}, ctx.builder().getI64Type());
  Value sum;
  for (const Tap &tap : *taps) {
    auto gathered = ctx.create<GatherOp>(
        ValueRange{x, ctx.constant(DenseElementsAttr::get(indexType, ArrayRef(tap.index)))},
        {ctx.namedI64("axis", axis)});
    if (failed(gathered))
      return failure();
    Value term = *gathered;
    if (mode != "nearest") {
      auto weightType = RankedTensorType::get(weightShape, type.getElementType());
      auto weighted = ctx.create<MulOp>(
          ValueRange{term, ctx.constant(makeDense(weightType, ArrayRef(tap.weight)))});
      if (failed(weighted))
        return failure();
      term = *weighted;
    }
    if (!sum) {
      sum = term;
      continue;
    }
    auto added = ctx.create<AddOp>(ValueRange{sum, term});
    if (failed(added))
      return failure();
    sum = *added;
  }
  // Outside the input: sum x 0 + extrapolation_value there (sum x 1 + 0
  // elsewhere), weights broadcast along the axis.
  if (llvm::is_contained(axisTaps->outside, true)) {
    auto weightType = RankedTensorType::get(weightShape, type.getElementType());
    SmallVector<double> keep, fill;
    for (bool outside : axisTaps->outside) {
      keep.push_back(outside ? 0 : 1);
      fill.push_back(outside ? extrapolation : 0);
    }
    auto kept = ctx.create<MulOp>(ValueRange{sum, ctx.constant(makeDense(weightType, ArrayRef(keep)))});
    if (failed(kept))
      return failure();
    auto filled =
        ctx.create<AddOp>(ValueRange{*kept, ctx.constant(makeDense(weightType, ArrayRef(fill)))});
    if (failed(filled))
      return failure();
    sum = *filled;
  }
  return sum;
}

LogicalResult convertResize(NodeContext &ctx) {
  auto type = ctx.inputType(0);
  if (failed(type))
    return failure();
  int64_t rank = type->getRank();
  std::string mode = ctx.attrString("mode", "nearest");
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    return ctx.fail("mode '" + mode + "' is not supported (nearest, linear, cubic)");
  if (mode != "nearest" && !isa<FloatType>(type->getElementType()))
    return ctx.fail(mode + " interpolation needs a float input");
  std::string coordinates = ctx.attrString("coordinate_transformation_mode", "half_pixel");
  std::string policy = ctx.attrString("keep_aspect_ratio_policy", "stretch");
  if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller")
    return ctx.fail("unknown keep_aspect_ratio_policy '" + policy + "'");
  // The axes the scales or sizes name (all by default).
  SmallVector<int64_t> axes;
  if (auto given = ctx.attrInts("axes")) {
    for (int64_t a : *given) {
      if (a < -rank || a >= rank)
        return ctx.fail("axis " + std::to_string(a) + " is out of range for rank " +
                        std::to_string(rank));
      axes.push_back(a < 0 ? a + rank : a);
    }
  } else {
    for (int64_t a = 0; a < rank; ++a)
      axes.push_back(a);
  }
  // scales (input 2) or sizes (input 3); opset 10 had scales as input 1.
  int scalesInput = ctx.opset() < 11 ? 1 : 2, sizesInput = 3;
  SmallVector<double> scales;
  SmallVector<int64_t> sizes;
  if (ctx.hasInput(sizesInput)) {
    auto given = ctx.constantInts(sizesInput, "sizes");
    if (failed(given))
      return failure();
    sizes.assign(given->begin(), given->end());
  } else if (ctx.hasInput(scalesInput)) {
    auto given = ctx.constantInput(scalesInput, "scales");
    if (failed(given))
      return failure();
    for (const APFloat &v : given->getValues<APFloat>())
      scales.push_back(v.convertToDouble());
  }
  if ((sizes.empty() && scales.empty()) ||
      (sizes.empty() ? scales.size() : sizes.size()) != axes.size())
    return ctx.fail("needs scales or sizes with one entry per axis (" +
                    std::to_string(axes.size()) + ")");
  // not_larger / not_smaller: one scale for every axis, the sizes' smallest
  // or largest ratio, and the sizes rounded from it (half up).
  if (!sizes.empty() && policy != "stretch") {
    double common = policy == "not_larger" ? INFINITY : 0;
    for (size_t i = 0; i < axes.size(); ++i) {
      double ratio = double(sizes[i]) / double(type->getDimSize(axes[i]));
      common = policy == "not_larger" ? std::min(common, ratio) : std::max(common, ratio);
    }
    scales.clear();
    for (size_t i = 0; i < axes.size(); ++i) {
      scales.push_back(common);
      sizes[i] = int64_t(std::floor(common * double(type->getDimSize(axes[i])) + 0.5));
    }
  }
  bool antialias = ctx.attrInt("antialias", 0) != 0;
  // Read here too, for a Resize that changes no axis (a ViT's position
  // table resized to the size it has): tapsOf reads them per axis.
  (void)ctx.attrString("nearest_mode", "round_prefer_floor");
  (void)ctx.attrFloat("cubic_coeff_a", -0.75f);
  (void)ctx.attrInt("exclude_outside", 0);
  // tf_crop_and_resize: the region of interest (input 1), starts then ends,
  // one of each per axis resized, in the input's normalised coordinates.
  SmallVector<double> roi;
  if (coordinates == "tf_crop_and_resize") {
    if (!ctx.hasInput(1))
      return ctx.fail("coordinate_transformation_mode 'tf_crop_and_resize' needs the roi input");
    auto given = ctx.constantInput(1, "roi");
    if (failed(given))
      return failure();
    for (const APFloat &v : given->getValues<APFloat>())
      roi.push_back(v.convertToDouble());
    if (roi.size() != 2 * axes.size())
      return ctx.fail("roi needs " + std::to_string(2 * axes.size()) +
                      " values (a start and an end per axis), not " +
                      std::to_string(roi.size()));
  }
  double extrapolation = ctx.attrFloat("extrapolation_value", 0.0f);
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  Value result = *x;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t in = type->getDimSize(axes[i]);
    double scale = !scales.empty() ? scales[i] : double(sizes[i]) / double(in);
    int64_t out = sizes.empty() ? int64_t(std::floor(double(in) * scale)) : sizes[i];
    if (!(scale > 0) || out < 1)
      return ctx.fail("scale " + std::to_string(scale) + " along axis " +
                      std::to_string(axes[i]) + " leaves no output");
    double roiStart = roi.empty() ? 0 : roi[i], roiEnd = roi.empty() ? 1 : roi[axes.size() + i];
    if (out == in && scale == 1.0 && (roi.empty() || (roiStart == 0 && roiEnd == 1)))
      continue;
    auto resized = resizeAxis(ctx, result, axes[i], out, scale, mode, coordinates, antialias,
                              roiStart, roiEnd, extrapolation);
    if (failed(resized))
      return failure();
    result = *resized;
  }
  return ctx.result(result);
}

const OpConverter kConverters[] = {
    {"Resize", 10, convertResize},
};

} // namespace

llvm::ArrayRef<OpConverter> resizeConverters() { return kConverters; }

} // namespace dtc::onnx
