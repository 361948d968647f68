//===- TensorConverters.cpp - ONNX shape, data movement and constants -----===//
#include "frontends/onnx/NodeContext.h"
#include "frontends/onnx/TensorData.h"

#include "dialects/graph/ConstantFolding.h"
#include "dialects/graph/GraphOps.h"
#include "dialects/graph/ShapeRules.h"

#include <cmath>
#include <numeric>

using namespace mlir;
using namespace dtc::graph;

namespace dtc::onnx {

namespace {

/// Largest constant the importer will materialise from ConstantOfShape or
/// Range as explicit elements (splats of any size are fine).
constexpr int64_t kMaxGeneratedElements = int64_t(1) << 26;

FailureOr<Value> reshapeTo(NodeContext &ctx, Value x, ArrayRef<int64_t> shape) {
  auto type = cast<RankedTensorType>(x.getType());
  auto count = elementCount(shape);
  if (!count || *count != type.getNumElements())
    return ctx.fail("cannot reshape " + shapeToString(type.getShape()) + " (" +
                    std::to_string(type.getNumElements()) + " elements) to " +
                    shapeToString(shape));
  return ctx.createTyped<ReshapeOp>(type.clone(shape), x);
}

LogicalResult convertReshape(NodeContext &ctx) {
  auto type = ctx.inputType(0);
  auto target = ctx.constantInts(1, "shape");
  if (failed(type) || failed(target))
    return failure();
  bool allowZero = ctx.attrInt("allowzero", 0) != 0;
  SmallVector<int64_t> shape;
  int64_t inferred = -1, known = 1;
  for (auto [i, d] : llvm::enumerate(*target)) {
    if (d == 0 && !allowZero) {
      if ((int64_t)i >= type->getRank())
        return ctx.fail("shape entry " + std::to_string(i) +
                        " is 0 (copy) but the input has rank " +
                        std::to_string(type->getRank()));
      d = type->getDimSize(i);
    }
    if (d == -1) {
      if (inferred >= 0)
        return ctx.fail("shape has more than one -1");
      inferred = i;
      shape.push_back(1);
      continue;
    }
    if (d < 0)
      return ctx.fail("shape entry " + std::to_string(d) + " is invalid");
    shape.push_back(d);
    auto k = elementCount({known, d});
    if (!k)
      return ctx.fail("shape " + shapeToString(*target) + " is too large");
    known = *k;
  }
  if (inferred >= 0) {
    if (known == 0 || type->getNumElements() % known)
      return ctx.fail("cannot reshape " + shapeToString(type->getShape()) +
                      " to " + shapeToString(*target));
    shape[inferred] = type->getNumElements() / known;
  }
  return ctx.result(reshapeTo(ctx, *ctx.input(0), shape));
}

LogicalResult convertFlatten(NodeContext &ctx) {
  auto type = ctx.inputType(0);
  if (failed(type))
    return failure();
  int64_t rank = type->getRank(), axis = ctx.attrInt("axis", 1);
  if (axis < -rank || axis > rank)
    return ctx.fail("axis " + std::to_string(axis) + " out of range for rank-" +
                    std::to_string(rank) + " input");
  if (axis < 0)
    axis += rank;
  ArrayRef<int64_t> dims = type->getShape();
  int64_t outer = std::accumulate(dims.begin(), dims.begin() + axis, int64_t(1),
                                  std::multiplies<int64_t>());
  int64_t inner = std::accumulate(dims.begin() + axis, dims.end(), int64_t(1),
                                  std::multiplies<int64_t>());
  return ctx.result(reshapeTo(ctx, *ctx.input(0), {outer, inner}));
}

LogicalResult convertTranspose(NodeContext &ctx) {
  auto type = ctx.inputType(0);
  if (failed(type))
    return failure();
  SmallVector<int64_t> perm(type->getRank());
  std::iota(perm.rbegin(), perm.rend(), 0);
  if (auto given = ctx.attrInts("perm"))
    perm = *given;
  return ctx.result(ctx.create<TransposeOp>(*ctx.input(0), {ctx.namedI64s("perm", perm)}));
}

LogicalResult convertConcat(NodeContext &ctx) {
  if (!ctx.attribute("axis"))
    return ctx.fail("attribute axis is required");
  SmallVector<Value> inputs;
  for (int i = 0; i < ctx.numInputs(); ++i) {
    auto v = ctx.input(i);
    if (failed(v))
      return failure();
    inputs.push_back(*v);
  }
  if (inputs.empty())
    return ctx.fail("Concat needs at least one input");
  int64_t rank = cast<RankedTensorType>(inputs[0].getType()).getRank();
  auto axis = normalizeAxis(ctx.attrInt("axis", 0), rank);
  if (!axis)
    return ctx.fail("axis " + std::to_string(ctx.attrInt("axis", 0)) +
                    " out of range for rank-" + std::to_string(rank) + " inputs");
  return ctx.result(ctx.create<ConcatOp>(inputs, {ctx.namedI64("axis", *axis)}));
}

/// Pad (axes from opset 18) in constant mode with constant pads: each
/// padded axis becomes a concat of the value, the data and the value again.
/// Negative pads (cropping) and the edge, reflect and wrap modes are not
/// supported.
/// The input position output position `j` of a `mode` pad ("edge",
/// "reflect", "wrap") reads along an axis of `n`, `before` added in front.
int64_t padSource(const std::string &mode, int64_t j, int64_t before, int64_t n) {
  int64_t i = j - before;
  if (mode == "edge" || n == 1)
    return std::min<int64_t>(std::max<int64_t>(i, 0), n - 1);
  if (mode == "wrap")
    return ((i % n) + n) % n;
  int64_t period = 2 * (n - 1); // reflect: the edge itself not repeated
  int64_t r = ((i % period) + period) % period;
  return r < n ? r : period - r;
}

LogicalResult convertPad(NodeContext &ctx) {
  std::string mode = ctx.attrString("mode", "constant");
  if (mode != "constant" && mode != "edge" && mode != "reflect" && mode != "wrap")
    return ctx.fail("mode '" + mode + "' is not supported (constant, edge, reflect, wrap)");
  auto type = ctx.inputType(0);
  if (failed(type))
    return failure();
  int64_t rank = type->getRank();
  auto pads = ctx.constantInts(1, "pads");
  if (failed(pads))
    return failure();
  SmallVector<int64_t> axes;
  if (ctx.hasInput(3)) {
    auto given = ctx.constantInts(3, "axes");
    if (failed(given))
      return failure();
    for (int64_t a : *given) {
      auto axis = normalizeAxis(a, rank);
      if (!axis)
        return ctx.fail("axis " + std::to_string(a) + " out of range for rank " +
                        std::to_string(rank));
      axes.push_back(*axis);
    }
  } else {
    for (int64_t a = 0; a < rank; ++a)
      axes.push_back(a);
  }
  if (pads->size() != 2 * axes.size())
    return ctx.fail("pads has " + std::to_string(pads->size()) + " values, expected " +
                    std::to_string(2 * axes.size()) + " (a start and an end per axis)");
  double value = 0;
  if (ctx.hasInput(2)) {
    auto given = ctx.constantScalar(2, "constant_value");
    if (failed(given))
      return failure();
    value = *given;
  }
  Type element = type->getElementType();
  Attribute fill = isa<FloatType>(element)
                       ? Attribute(FloatAttr::get(element, value))
                       : Attribute(IntegerAttr::get(element, int64_t(value)));
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  Value padded = *x;
  for (auto [i, axis] : llvm::enumerate(axes)) {
    int64_t before = (*pads)[i], after = (*pads)[i + axes.size()];
    if (mode != "constant") {
      // A gather at constant positions: exact, and its gradient adds each
      // padded value's back where it came from. Negative pads crop first
      // (as ONNX's reference does), then the rest pads what is left.
      int64_t n = cast<RankedTensorType>(padded.getType()).getDimSize(axis);
      if (before == 0 && after == 0)
        continue;
      int64_t start = std::max<int64_t>(0, -before);
      int64_t kept = n - start - std::max<int64_t>(0, -after);
      int64_t length = kept + std::max<int64_t>(0, before) + std::max<int64_t>(0, after);
      if (kept < 1 || length < 1)
        return ctx.fail("pads leave nothing along axis " + std::to_string(axis));
      SmallVector<int64_t> index;
      for (int64_t j = 0; j < length; ++j)
        index.push_back(start + padSource(mode, j, std::max<int64_t>(0, before), kept));
      auto indexType = RankedTensorType::get({length}, ctx.builder().getI64Type());
      auto gathered = ctx.create<GatherOp>(
          ValueRange{padded, ctx.constant(DenseElementsAttr::get(indexType, ArrayRef(index)))},
          {ctx.namedI64("axis", int64_t(axis))});
      if (failed(gathered))
        return failure();
      padded = *gathered;
      continue;
    }
    if (before < 0 || after < 0)
      return ctx.fail("negative pads (cropping) are not supported");
    if (before == 0 && after == 0)
      continue;
    auto current = cast<RankedTensorType>(padded.getType());
    SmallVector<Value> parts;
    auto block = [&, axis = axis](int64_t size) {
      SmallVector<int64_t> shape(current.getShape());
      shape[size_t(axis)] = size;
      return ctx.constant(DenseElementsAttr::get(current.clone(shape), fill));
    };
    if (before > 0)
      parts.push_back(block(before));
    parts.push_back(padded);
    if (after > 0)
      parts.push_back(block(after));
    auto joined = ctx.create<ConcatOp>(parts, {ctx.namedI64("axis", int64_t(axis))});
    if (failed(joined))
      return failure();
    padded = *joined;
  }
  ctx.setOutput(0, padded);
  return success();
}

/// CumSum as a log-step prefix sum (Hillis and Steele): ceil(log2 n)
/// rounds, each adding the running sums moved 1, 2, 4, ... places along the
/// axis (zeros moved in). Exact for integers, differentiable through its
/// slices, concats and adds, O(n log n) adds; exclusive moves the result
/// one place more, reverse moves toward the start.
LogicalResult convertCumSum(NodeContext &ctx) {
  auto type = ctx.inputType(0);
  auto x = ctx.input(0);
  auto given = ctx.constantInts(1, "axis");
  if (failed(type) || failed(x) || failed(given))
    return failure();
  int64_t rank = type->getRank();
  if (given->size() != 1)
    return ctx.fail("axis must be a scalar");
  auto axis = normalizeAxis((*given)[0], rank);
  if (!axis)
    return ctx.fail("axis " + std::to_string((*given)[0]) + " out of range for rank " +
                    std::to_string(rank));
  bool exclusive = ctx.attrInt("exclusive", 0) != 0, reverse = ctx.attrInt("reverse", 0) != 0;
  int64_t n = type->getDimSize(*axis);
  Type element = type->getElementType();
  Attribute zero = isa<FloatType>(element) ? Attribute(FloatAttr::get(element, 0.0))
                                           : Attribute(IntegerAttr::get(element, 0));
  auto zeros = [&](int64_t size) {
    SmallVector<int64_t> shape(type->getShape());
    shape[size_t(*axis)] = size;
    return ctx.constant(DenseElementsAttr::get(type->clone(shape), zero));
  };
  // `v` moved `by` places toward the axis's end (reverse: its start).
  auto moved = [&](Value v, int64_t by) -> FailureOr<Value> {
    SmallVector<int64_t> offsets(size_t(rank), 0), sizes(type->getShape()),
        strides(size_t(rank), 1);
    sizes[size_t(*axis)] = n - by;
    if (reverse)
      offsets[size_t(*axis)] = by;
    auto kept = ctx.create<SliceOp>(v, {ctx.namedI64s("offsets", offsets),
                                        ctx.namedI64s("sizes", sizes),
                                        ctx.namedI64s("strides", strides)});
    if (failed(kept))
      return failure();
    SmallVector<Value> parts{zeros(by), *kept};
    if (reverse)
      std::swap(parts[0], parts[1]);
    return ctx.create<ConcatOp>(parts, {ctx.namedI64("axis", *axis)});
  };
  Value sum = *x;
  for (int64_t by = 1; by < n; by *= 2) {
    auto shifted = moved(sum, by);
    if (failed(shifted))
      return failure();
    auto added = ctx.create<AddOp>(ValueRange{sum, *shifted});
    if (failed(added))
      return failure();
    sum = *added;
  }
  if (exclusive && n == 1) {
    sum = zeros(1);
  } else if (exclusive && n > 1) {
    auto shifted = moved(sum, 1);
    if (failed(shifted))
      return failure();
    sum = *shifted;
  }
  ctx.setOutput(0, sum);
  return success();
}

LogicalResult convertSplit(NodeContext &ctx) {
  auto type = ctx.inputType(0);
  if (failed(type))
    return failure();
  auto axis = ctx.axisAttr("axis", 0, type->getRank());
  if (failed(axis))
    return failure();
  int64_t dim = type->getDimSize(*axis);
  SmallVector<int64_t> sizes;
  if (ctx.hasInput(1)) {
    auto given = ctx.constantInts(1, "split");
    if (failed(given))
      return failure();
    sizes = *given;
  } else {
    int64_t pieces = ctx.opset() >= 18 && ctx.attribute("num_outputs")
                         ? ctx.attrInt("num_outputs", 0)
                         : ctx.numOutputs();
    if (pieces < 1)
      return ctx.fail("Split needs a split input, num_outputs or outputs");
    // Opset 18 allows a smaller last piece; before, pieces must be equal.
    int64_t piece = (dim + pieces - 1) / pieces;
    if (ctx.opset() < 18 && dim % pieces)
      return ctx.fail("cannot split size " + std::to_string(dim) + " into " +
                      std::to_string(pieces) + " equal pieces");
    for (int64_t i = 0; i < pieces; ++i)
      sizes.push_back(std::max<int64_t>(0, std::min(piece, dim - i * piece)));
  }
  if ((int64_t)sizes.size() != ctx.numOutputs())
    return ctx.fail("split into " + std::to_string(sizes.size()) +
                    " pieces but the node has " + std::to_string(ctx.numOutputs()) +
                    " outputs");
  auto parts = ctx.createMulti<SplitOp>(
      *ctx.input(0), {ctx.namedI64("axis", *axis), ctx.namedI64s("sizes", sizes)});
  if (failed(parts))
    return failure();
  for (auto [i, v] : llvm::enumerate(*parts))
    ctx.setOutput(i, v);
  return success();
}

LogicalResult convertSlice(NodeContext &ctx) {
  auto type = ctx.inputType(0);
  auto starts = ctx.constantInts(1, "starts");
  auto ends = ctx.constantInts(2, "ends");
  if (failed(type) || failed(starts) || failed(ends))
    return failure();
  int64_t rank = type->getRank();
  SmallVector<int64_t> axes(starts->size()), steps(starts->size(), 1);
  std::iota(axes.begin(), axes.end(), 0);
  if (ctx.hasInput(3)) {
    auto given = ctx.constantInts(3, "axes");
    if (failed(given))
      return failure();
    axes = *given;
  }
  if (ctx.hasInput(4)) {
    auto given = ctx.constantInts(4, "steps");
    if (failed(given))
      return failure();
    steps = *given;
  }
  if (ends->size() != starts->size() || axes.size() != starts->size() ||
      steps.size() != starts->size())
    return ctx.fail("starts, ends, axes and steps must have the same length");
  SmallVector<int64_t> offsets(rank, 0), sizes(type->getShape()), strides(rank, 1);
  SmallVector<bool> seen(rank, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    auto axis = normalizeAxis(axes[i], rank);
    if (!axis || seen[*axis])
      return ctx.fail("slice axis " + std::to_string(axes[i]) +
                      " is out of range or repeated");
    seen[*axis] = true;
    int64_t dim = type->getDimSize(*axis), step = steps[i];
    if (step == 0)
      return ctx.fail("slice step must not be 0");
    // Clamp as the ONNX spec says, in ranges that cannot overflow.
    int64_t start = (*starts)[i], end = (*ends)[i];
    if (start < 0)
      start = start < -dim ? -1 : start + dim;
    if (end < 0)
      end = end < -dim ? -1 : end + dim;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
    } else {
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
    }
    int64_t span = end - start;
    int64_t size = step > 0 ? (span > 0 ? (span + step - 1) / step : 0)
                            : (span < 0 ? (-span + (-step) - 1) / (-step) : 0);
    offsets[*axis] = size ? start : 0;
    sizes[*axis] = size;
    strides[*axis] = size ? step : 1;
  }
  return ctx.result(ctx.create<SliceOp>(*ctx.input(0),
                                            {ctx.namedI64s("offsets", offsets),
                                             ctx.namedI64s("sizes", sizes),
                                             ctx.namedI64s("strides", strides)}));
}

/// Squeeze/Unsqueeze axes: an input since opset 13.
FailureOr<SmallVector<int64_t>> axesInput(NodeContext &ctx, bool required) {
  if (ctx.hasInput(1))
    return ctx.constantInts(1, "axes");
  if (required)
    return ctx.fail("the axes input is required");
  return SmallVector<int64_t>{};
}

/// Normalises axes for a rank-`rank` tensor, sorted, rejecting repeats.
LogicalResult normalizeAxes(NodeContext &ctx, SmallVectorImpl<int64_t> &axes,
                            int64_t rank) {
  for (int64_t &a : axes) {
    auto n = normalizeAxis(a, rank);
    if (!n)
      return ctx.fail("axis " + std::to_string(a) + " out of range for rank " +
                      std::to_string(rank));
    a = *n;
  }
  llvm::sort(axes);
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    return ctx.fail("axes repeat");
  return success();
}

LogicalResult convertSqueeze(NodeContext &ctx) {
  auto type = ctx.inputType(0);
  auto axes = axesInput(ctx, false);
  if (failed(type) || failed(axes) ||
      failed(normalizeAxes(ctx, *axes, type->getRank())))
    return failure();
  if (!ctx.hasInput(1))
    for (int64_t d = 0; d < type->getRank(); ++d)
      if (type->getDimSize(d) == 1)
        axes->push_back(d);
  return ctx.result(ctx.create<SqueezeOp>(*ctx.input(0), {ctx.namedI64s("axes", *axes)}));
}

LogicalResult convertUnsqueeze(NodeContext &ctx) {
  auto type = ctx.inputType(0);
  auto axes = axesInput(ctx, true);
  if (failed(type) || failed(axes) ||
      failed(normalizeAxes(ctx, *axes, type->getRank() + (int64_t)axes->size())))
    return failure();
  return ctx.result(ctx.create<UnsqueezeOp>(*ctx.input(0), {ctx.namedI64s("axes", *axes)}));
}

LogicalResult convertExpand(NodeContext &ctx) {
  auto shape = ctx.constantInts(1, "shape");
  if (failed(shape))
    return failure();
  return ctx.result(ctx.create<BroadcastOp>(*ctx.input(0), {ctx.namedI64s("shape", *shape)}));
}

LogicalResult convertGather(NodeContext &ctx) {
  auto type = ctx.inputType(0);
  auto indices = ctx.input(1);
  if (failed(type) || failed(indices))
    return failure();
  auto axis = ctx.axisAttr("axis", 0, type->getRank());
  if (failed(axis))
    return failure();
  if (auto constant = ctx.constantOrNull(1)) {
    int64_t dim = type->getDimSize(*axis);
    for (const APInt &i : constant.getValues<APInt>())
      if (i.getSExtValue() < -dim || i.getSExtValue() >= dim)
        return ctx.fail("index " + std::to_string(i.getSExtValue()) +
                        " out of range for axis " + std::to_string(*axis) +
                        " of size " + std::to_string(dim));
  }
  return ctx.result(ctx.create<GatherOp>(ValueRange{*ctx.input(0), *indices},
                                             {ctx.namedI64("axis", *axis)}));
}

/// `indices` with each negative one counted from the end of its dim:
/// where(indices < 0, indices + sizes, indices) (`zero` and `sizes` of the
/// indices' type, broadcasting).
FailureOr<Value> fromTheEnd(NodeContext &ctx, Value indices, Value zero, Value sizes) {
  auto negative = ctx.create<LessOp>(ValueRange{indices, zero});
  auto wrapped = ctx.create<AddOp>(ValueRange{indices, sizes});
  if (failed(negative) || failed(wrapped))
    return failure();
  return ctx.create<WhereOp>(ValueRange{*negative, *wrapped, indices});
}

/// GatherND as one Gather: the batch dims and the k indexed dims of `data`
/// flattened into one, and each index tuple made its row there (negative
/// indices counted from the end; its batch position's rows before it). A
/// constant index tensor folds to constant rows; the gradient is Gather's.
LogicalResult convertGatherND(NodeContext &ctx) {
  auto dataType = ctx.inputType(0), indicesType = ctx.inputType(1);
  auto data = ctx.input(0), indices = ctx.input(1);
  if (failed(dataType) || failed(indicesType) || failed(data) || failed(indices))
    return failure();
  int64_t r = dataType->getRank(), q = indicesType->getRank();
  int64_t b = ctx.attrInt("batch_dims", 0);
  int64_t k = q > 0 ? indicesType->getShape().back() : 0;
  if (q < 1 || b < 0 || b >= q || k < 1 || b + k > r)
    return ctx.fail("indices of rank " + std::to_string(q) + " ending in " + std::to_string(k) +
                    " with batch_dims " + std::to_string(b) + " do not index data of rank " +
                    std::to_string(r));
  for (int64_t d = 0; d < b; ++d)
    if (dataType->getDimSize(d) != indicesType->getDimSize(d))
      return ctx.fail("batch dim " + std::to_string(d) + " differs: data's " +
                      std::to_string(dataType->getDimSize(d)) + ", indices' " +
                      std::to_string(indicesType->getDimSize(d)));
  Type index = indicesType->getElementType();
  auto constantOf = [&](ArrayRef<int64_t> shape, ArrayRef<int64_t> values) {
    SmallVector<APInt> ints;
    for (int64_t v : values)
      ints.push_back(APInt(index.getIntOrFloatBitWidth(), uint64_t(v), /*isSigned=*/true));
    return ctx.constant(DenseElementsAttr::get(RankedTensorType::get(shape, index), ints));
  };
  // Each indexed dim's size and stride among the k.
  SmallVector<int64_t> sizes, strides(size_t(k), 1);
  for (int64_t j = 0; j < k; ++j)
    sizes.push_back(dataType->getDimSize(b + j));
  for (int64_t j = k - 2; j >= 0; --j)
    strides[size_t(j)] = strides[size_t(j + 1)] * sizes[size_t(j + 1)];
  int64_t rowsPerBatch = strides[0] * sizes[0];
  auto fail = [](auto v) { return failed(v); };
  auto normal = fromTheEnd(ctx, *indices, constantOf({}, {0}), constantOf({k}, sizes));
  if (fail(normal))
    return failure();
  auto scaled = ctx.create<MulOp>(ValueRange{*normal, constantOf({k}, strides)});
  if (fail(scaled))
    return failure();
  auto rows = ctx.create<ReduceSumOp>(*scaled, {ctx.namedI64s("axes", {q - 1}),
                                                ctx.named("keepdims", ctx.builder().getBoolAttr(false))});
  if (fail(rows))
    return failure();
  Value row = *rows;
  if (b > 0) { // each batch position's rows come after the earlier ones'
    ArrayRef<int64_t> outer = indicesType->getShape().drop_back();
    int64_t inner = 1;
    for (int64_t d = b; d < q - 1; ++d)
      inner *= outer[size_t(d)];
    SmallVector<int64_t> offsets;
    for (int64_t i = 0, n = ShapedType::getNumElements(outer); i < n; ++i)
      offsets.push_back(i / inner * rowsPerBatch);
    auto shifted = ctx.create<AddOp>(ValueRange{row, constantOf(outer, offsets)});
    if (fail(shifted))
      return failure();
    row = *shifted;
  }
  SmallVector<int64_t> flat{rowsPerBatch};
  for (int64_t d = 0; d < b; ++d)
    flat[0] *= dataType->getDimSize(d);
  llvm::append_range(flat, dataType->getShape().drop_front(b + k));
  auto table = ctx.createTyped<ReshapeOp>(dataType->clone(flat), *data);
  if (fail(table))
    return failure();
  return ctx.result(ctx.create<GatherOp>(ValueRange{*table, row}, {ctx.namedI64("axis", 0)}));
}

} // namespace

FailureOr<Value> gatherElements(NodeContext &ctx, Value data, Value indices, int64_t axis) {
  auto dataType = cast<RankedTensorType>(data.getType());
  auto indicesType = cast<RankedTensorType>(indices.getType());
  int64_t rank = dataType.getRank();
  if (indicesType.getRank() != rank)
    return ctx.fail("indices of rank " + std::to_string(indicesType.getRank()) +
                    " for data of rank " + std::to_string(rank) + " (they must be equal)");
  ArrayRef<int64_t> shape = dataType.getShape(), at = indicesType.getShape();
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && at[size_t(d)] > shape[size_t(d)])
      return ctx.fail("indices' dim " + std::to_string(d) + " (" + std::to_string(at[size_t(d)]) +
                      ") is larger than data's (" + std::to_string(shape[size_t(d)]) + ")");
  SmallVector<int64_t> strides(size_t(rank), 1);
  for (int64_t d = rank - 2; d >= 0; --d)
    strides[size_t(d)] = strides[size_t(d + 1)] * shape[size_t(d + 1)];
  Type index = indicesType.getElementType();
  unsigned bits = index.getIntOrFloatBitWidth();
  auto scalarOf = [&](int64_t v) {
    return ctx.constant(DenseElementsAttr::get(RankedTensorType::get({}, index),
                                               APInt(bits, uint64_t(v), true)));
  };
  // The offsets of every coordinate but the axis's, for each index.
  SmallVector<APInt> offsets;
  for (int64_t i = 0, n = ShapedType::getNumElements(at); i < n; ++i) {
    int64_t rest = i, offset = 0;
    for (int64_t d = rank - 1; d >= 0; --d) {
      int64_t c = rest % at[size_t(d)];
      rest /= at[size_t(d)];
      if (d != axis)
        offset += c * strides[size_t(d)];
    }
    offsets.push_back(APInt(bits, uint64_t(offset), true));
  }
  auto normal = fromTheEnd(ctx, indices, scalarOf(0), scalarOf(shape[size_t(axis)]));
  if (failed(normal))
    return failure();
  auto scaled = ctx.create<MulOp>(ValueRange{*normal, scalarOf(strides[size_t(axis)])});
  if (failed(scaled))
    return failure();
  auto flat = ctx.create<AddOp>(
      ValueRange{*scaled, ctx.constant(DenseElementsAttr::get(indicesType, offsets))});
  if (failed(flat))
    return failure();
  auto table =
      ctx.createTyped<ReshapeOp>(dataType.clone({ShapedType::getNumElements(shape)}), data);
  if (failed(table))
    return failure();
  return ctx.create<GatherOp>(ValueRange{*table, *flat}, {ctx.namedI64("axis", 0)});
}

namespace {

/// ScatterND and ScatterElements with indices known at compile time (shape
/// arithmetic's, as exporters write `x[:, 1:] = y`): `targets` holds, per
/// element of `updates` (row-major), the flat position in `data` it goes
/// to. "add" sums the updates in at their positions (scatter_add). The
/// others go in layers: layer k takes each position's k-th update (a gather
/// of the updates by a constant map) where it has one (a where by a
/// constant mask), replacing what is there ("none": only the last layer,
/// the last write winning) or combining with it (mul, max, min). Gradients
/// flow to data and updates through those ops.
LogicalResult scatterAt(NodeContext &ctx, ArrayRef<int64_t> targets) {
  auto dataType = ctx.inputType(0);
  auto data = ctx.input(0), updates = ctx.input(2);
  if (failed(dataType) || failed(data) || failed(updates))
    return failure();
  std::string reduction = ctx.attrString("reduction", "none");
  if (reduction != "none" && reduction != "add" && reduction != "mul" && reduction != "max" &&
      reduction != "min")
    return ctx.fail("unknown reduction '" + reduction + "'");
  int64_t size = dataType->getNumElements();
  auto updatesType = cast<RankedTensorType>(updates->getType());
  if (updatesType.getElementType() != dataType->getElementType())
    return ctx.fail("updates' element type differs from data's");
  if (int64_t(targets.size()) != updatesType.getNumElements())
    return ctx.fail("indices and updates do not match in size");
  OpBuilder &b = ctx.builder();
  Type i64 = b.getI64Type();
  auto flatUpdates = ctx.createTyped<ReshapeOp>(
      RankedTensorType::get({updatesType.getNumElements()}, updatesType.getElementType()),
      *updates);
  if (failed(flatUpdates))
    return failure();
  if (reduction == "add") {
    if (!isa<FloatType>(dataType->getElementType()))
      return ctx.fail("reduction 'add' needs float data");
    SmallVector<APInt> at;
    for (int64_t t : targets)
      at.push_back(APInt(64, uint64_t(t), true));
    Value positions = ctx.constant(DenseElementsAttr::get(
        RankedTensorType::get({int64_t(targets.size())}, i64), at));
    auto added = ctx.createTyped<ScatterAddOp>(
        RankedTensorType::get({size}, dataType->getElementType()),
        ValueRange{*flatUpdates, positions}, {ctx.namedI64("axis", 0)});
    auto shaped = failed(added) ? added : ctx.createTyped<ReshapeOp>(*dataType, *added);
    if (failed(shaped))
      return failure();
    return ctx.result(ctx.create<AddOp>(ValueRange{*data, *shaped}));
  }
  // Each position's updates, in order.
  std::vector<SmallVector<int64_t, 1>> writes(static_cast<size_t>(size));
  for (auto [u, t] : llvm::enumerate(targets))
    writes[size_t(t)].push_back(int64_t(u));
  size_t layers = 0;
  for (const auto &w : writes)
    layers = std::max(layers, w.size());
  bool replace = reduction == "none";
  Value result = *data;
  for (size_t k = replace && layers ? layers - 1 : 0; k < layers; ++k) {
    SmallVector<APInt> source(size_t(size), APInt(64, 0));
    SmallVector<bool> written(size_t(size), false);
    for (int64_t t = 0; t < size; ++t) {
      const auto &w = writes[size_t(t)];
      // Replacing: each position's last write, whichever layer it is in.
      if (replace ? !w.empty() : k < w.size()) {
        source[size_t(t)] = APInt(64, uint64_t(replace ? w.back() : w[k]), true);
        written[size_t(t)] = true;
      }
    }
    Value map =
        ctx.constant(DenseElementsAttr::get(RankedTensorType::get({size}, i64), source));
    Value mask = ctx.constant(DenseElementsAttr::get(
        RankedTensorType::get(dataType->getShape(), b.getI1Type()), ArrayRef<bool>(written)));
    auto gathered =
        ctx.create<GatherOp>(ValueRange{*flatUpdates, map}, {ctx.namedI64("axis", 0)});
    auto value = failed(gathered) ? gathered : ctx.createTyped<ReshapeOp>(*dataType, *gathered);
    if (succeeded(value) && !replace)
      value = reduction == "mul"   ? ctx.create<MulOp>(ValueRange{result, *value})
              : reduction == "max" ? ctx.create<MaxOp>(ValueRange{result, *value})
                                   : ctx.create<MinOp>(ValueRange{result, *value});
    auto merged = failed(value) ? value : ctx.create<WhereOp>(ValueRange{mask, *value, result});
    if (failed(merged))
      return failure();
    result = *merged;
  }
  return ctx.result(result);
}

/// Row-major strides of `shape`.
SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    strides[d - 1] = strides[d] * shape[d];
  return strides;
}

/// ScatterND: indices [..., q] name data's first q coordinates; each
/// names a slice data.shape[q:] that the matching updates slice fills.
LogicalResult convertScatterND(NodeContext &ctx) {
  auto dataType = ctx.inputType(0);
  auto given = ctx.constantInput(1, "indices (computed at run time: not supported)");
  if (failed(dataType) || failed(given))
    return failure();
  ArrayRef<int64_t> shape = dataType->getShape();
  ArrayRef<int64_t> at = given->getType().getShape();
  if (at.empty() || at.back() < 1 || at.back() > int64_t(shape.size()))
    return ctx.fail("indices' last dim must be in [1, " + std::to_string(shape.size()) + "]");
  int64_t q = at.back(), inner = 1;
  for (size_t d = size_t(q); d < shape.size(); ++d)
    inner *= shape[d];
  SmallVector<int64_t> strides = stridesOf(shape), values;
  for (const APInt &v : given->getValues<APInt>())
    values.push_back(v.getSExtValue());
  SmallVector<int64_t> targets;
  for (size_t row = 0; row * size_t(q) < values.size(); ++row) {
    int64_t base = 0;
    for (int64_t d = 0; d < q; ++d) {
      int64_t i = values[row * size_t(q) + size_t(d)], n = shape[size_t(d)];
      if (i < -n || i >= n)
        return ctx.fail("index " + std::to_string(i) + " is out of range for dim " +
                        std::to_string(d) + " of size " + std::to_string(n));
      base += (i < 0 ? i + n : i) * strides[size_t(d)];
    }
    for (int64_t o = 0; o < inner; ++o)
      targets.push_back(base + o);
  }
  return scatterAt(ctx, targets);
}

/// ScatterElements: updates[u] goes to data at u with its `axis`
/// coordinate replaced by indices[u].
LogicalResult convertScatterElements(NodeContext &ctx) {
  auto dataType = ctx.inputType(0);
  auto given = ctx.constantInput(1, "indices (computed at run time: not supported)");
  if (failed(dataType) || failed(given))
    return failure();
  int64_t rank = dataType->getRank();
  auto axis = ctx.axisAttr("axis", 0, rank);
  if (failed(axis))
    return failure();
  ArrayRef<int64_t> shape = dataType->getShape(), at = given->getType().getShape();
  if (int64_t(at.size()) != rank)
    return ctx.fail("indices must have data's rank");
  SmallVector<int64_t> strides = stridesOf(shape), atStrides = stridesOf(at), targets;
  int64_t u = 0;
  for (const APInt &v : given->getValues<APInt>()) {
    int64_t i = v.getSExtValue(), n = shape[size_t(*axis)], target = 0;
    if (i < -n || i >= n)
      return ctx.fail("index " + std::to_string(i) + " is out of range for axis " +
                      std::to_string(*axis) + " of size " + std::to_string(n));
    for (int64_t d = 0; d < rank; ++d) {
      int64_t c = u / atStrides[size_t(d)] % at[size_t(d)];
      if (d != *axis && c >= shape[size_t(d)])
        return ctx.fail("indices' dim " + std::to_string(d) + " is larger than data's");
      target += (d == *axis ? (i < 0 ? i + n : i) : c) * strides[size_t(d)];
    }
    targets.push_back(target);
    ++u;
  }
  return scatterAt(ctx, targets);
}

LogicalResult convertGatherElements(NodeContext &ctx) {
  auto type = ctx.inputType(0);
  auto data = ctx.input(0), indices = ctx.input(1);
  if (failed(type) || failed(data) || failed(indices))
    return failure();
  auto axis = ctx.axisAttr("axis", 0, type->getRank());
  if (failed(axis))
    return failure();
  return ctx.result(gatherElements(ctx, *data, *indices, *axis));
}

/// Reads a node's tensor-valued attribute into a dense constant.
FailureOr<DenseElementsAttr> tensorAttribute(NodeContext &ctx,
                                             const ::onnx::TensorProto &tensor) {
  std::string error;
  auto value = readTensor(*ctx.context(), tensor, ctx.modelDir(), error);
  if (failed(value))
    return ctx.fail(error);
  return value;
}

LogicalResult convertConstant(NodeContext &ctx) {
  Builder &b = ctx.builder();
  if (ctx.node().attribute_size() != 1)
    return ctx.fail("Constant needs exactly one value attribute");
  const auto &attr = *ctx.attribute(ctx.node().attribute(0).name());
  const std::string &name = attr.name();
  DenseElementsAttr value;
  if (name == "value") {
    auto v = tensorAttribute(ctx, attr.t());
    if (failed(v))
      return failure();
    value = *v;
  } else if (name == "value_float") {
    value = DenseElementsAttr::get(RankedTensorType::get({}, b.getF32Type()), attr.f());
  } else if (name == "value_floats") {
    SmallVector<float> v(attr.floats().begin(), attr.floats().end());
    value = DenseElementsAttr::get(
        RankedTensorType::get({(int64_t)v.size()}, b.getF32Type()), ArrayRef<float>(v));
  } else if (name == "value_int") {
    value = DenseElementsAttr::get(RankedTensorType::get({}, b.getI64Type()), attr.i());
  } else if (name == "value_ints") {
    SmallVector<int64_t> v(attr.ints().begin(), attr.ints().end());
    value = DenseElementsAttr::get(
        RankedTensorType::get({(int64_t)v.size()}, b.getI64Type()), ArrayRef<int64_t>(v));
  } else {
    return ctx.fail("Constant attribute '" + name + "' is not supported");
  }
  ctx.setOutput(0, ctx.constant(value));
  return success();
}

LogicalResult convertConstantOfShape(NodeContext &ctx) {
  auto shape = ctx.constantInts(0, "shape");
  if (failed(shape))
    return failure();
  auto count = elementCount(*shape);
  if (!count)
    return ctx.fail("shape " + shapeToString(*shape) + " is invalid");
  Attribute element = ctx.builder().getF32FloatAttr(0.0f);
  Type elementType = ctx.builder().getF32Type();
  if (const auto *attr = ctx.attribute("value")) {
    auto value = tensorAttribute(ctx, attr->t());
    if (failed(value))
      return failure();
    if (value->getNumElements() != 1)
      return ctx.fail("attribute value must hold one element");
    element = *value->getValues<Attribute>().begin();
    elementType = value->getElementType();
  }
  auto type = RankedTensorType::get(*shape, elementType);
  ctx.setOutput(0, ctx.constant(DenseElementsAttr::get(type, element)));
  return success();
}

LogicalResult convertShape(NodeContext &ctx) {
  auto type = ctx.inputType(0);
  if (failed(type))
    return failure();
  int64_t rank = type->getRank();
  auto clampAxis = [&](int64_t v) {
    return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank);
  };
  int64_t start = clampAxis(ctx.attrInt("start", 0));
  int64_t end = clampAxis(ctx.attrInt("end", rank));
  SmallVector<int64_t> dims;
  for (int64_t d = start; d < end; ++d)
    dims.push_back(type->getDimSize(d));
  auto result = RankedTensorType::get({(int64_t)dims.size()}, ctx.builder().getI64Type());
  ctx.setOutput(0, ctx.constant(DenseElementsAttr::get(result, ArrayRef<int64_t>(dims))));
  return success();
}

LogicalResult convertSize(NodeContext &ctx) {
  auto type = ctx.inputType(0);
  if (failed(type))
    return failure();
  auto result = RankedTensorType::get({}, ctx.builder().getI64Type());
  ctx.setOutput(0, ctx.constant(DenseElementsAttr::get(
                       result, ArrayRef<int64_t>{type->getNumElements()})));
  return success();
}

LogicalResult convertIdentity(NodeContext &ctx) {
  return ctx.result(ctx.input(0));
}

LogicalResult convertDropout(NodeContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  if (ctx.hasInput(2)) {
    auto training = ctx.constantScalar(2, "training_mode");
    if (failed(training))
      return failure();
    if (*training != 0.0)
      return ctx.fail("Dropout with training_mode=true is not supported on "
                      "import; dtc imports models for inference");
  }
  ctx.setOutput(0, *x);
  if (ctx.wantsOutput(1)) {
    auto type = cast<RankedTensorType>(x->getType());
    auto maskType = type.clone(ctx.builder().getI1Type());
    ctx.setOutput(1, ctx.constant(DenseElementsAttr::get(maskType, true)));
  }
  return success();
}

LogicalResult convertRange(NodeContext &ctx) {
  auto start = ctx.constantInput(0, "start"), limit = ctx.constantInput(1, "limit"),
       delta = ctx.constantInput(2, "delta");
  if (failed(start) || failed(limit) || failed(delta))
    return failure();
  auto s = readFoldValues(*start), l = readFoldValues(*limit), d = readFoldValues(*delta);
  if (!s || !l || !d || s->type.getNumElements() != 1 ||
      l->type.getNumElements() != 1 || d->type.getNumElements() != 1)
    return ctx.fail("start, limit and delta must be scalars");
  Type element = start->getElementType();
  auto count = [](double from, double to, double step) {
    return std::max<double>(std::ceil((to - from) / step), 0.0);
  };
  double n;
  if (s->isFloat)
    n = count(s->floats[0], l->floats[0], d->floats[0]);
  else
    n = count((double)s->ints[0], (double)l->ints[0], (double)d->ints[0]);
  if ((s->isFloat ? d->floats[0] == 0.0 : d->ints[0] == 0) || !std::isfinite(n) ||
      n > (double)kMaxGeneratedElements)
    return ctx.fail("Range(start, limit, delta) has an invalid or too large length");
  auto type = RankedTensorType::get({(int64_t)n}, element);
  if (s->isFloat) {
    SmallVector<double> values;
    for (int64_t i = 0; i < (int64_t)n; ++i)
      values.push_back(s->floats[0] + i * d->floats[0]);
    ctx.setOutput(0, ctx.constant(makeDense(type, ArrayRef<double>(values))));
  } else {
    SmallVector<int64_t> values;
    for (int64_t i = 0; i < (int64_t)n; ++i)
      values.push_back(s->ints[0] + i * d->ints[0]);
    ctx.setOutput(0, ctx.constant(makeDense(type, ArrayRef<int64_t>(values))));
  }
  return success();
}

LogicalResult convertTrilu(NodeContext &ctx) {
  int64_t k = 0;
  if (ctx.hasInput(1)) {
    auto given = ctx.constantInts(1, "k");
    if (failed(given))
      return failure();
    if (given->size() != 1)
      return ctx.fail("k must be a scalar");
    k = (*given)[0];
  }
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  return ctx.result(ctx.create<TriluOp>(
                            *x, {ctx.named("upper", ctx.builder().getBoolAttr(ctx.attrInt("upper", 1))),
                                 ctx.namedI64("k", k)}));
}

const OpConverter kConverters[] = {
    {"Reshape", 13, convertReshape},
    {"Flatten", 13, convertFlatten},
    {"Transpose", 13, convertTranspose},
    {"Concat", 13, convertConcat},
    {"Pad", 13, convertPad},
    {"Split", 13, convertSplit},
    {"Slice", 13, convertSlice},
    {"Squeeze", 13, convertSqueeze},
    {"Unsqueeze", 13, convertUnsqueeze},
    {"Expand", 13, convertExpand},
    {"Gather", 13, convertGather},
    {"CumSum", 11, convertCumSum},
    {"GatherND", 12, convertGatherND},
    {"GatherElements", 11, convertGatherElements},
    {"ScatterND", 11, convertScatterND},
    {"ScatterElements", 11, convertScatterElements},
    {"Constant", 13, convertConstant},
    {"ConstantOfShape", 13, convertConstantOfShape},
    {"Shape", 13, convertShape},
    {"Size", 13, convertSize},
    {"Identity", 13, convertIdentity},
    {"Dropout", 13, convertDropout, "seed"},
    {"Range", 13, convertRange},
    {"Trilu", 14, convertTrilu},
};

} // namespace

llvm::ArrayRef<OpConverter> tensorConverters() { return kConverters; }

} // namespace dtc::onnx
