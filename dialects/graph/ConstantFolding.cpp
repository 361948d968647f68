//===- ConstantFolding.cpp - folders of graph ops -------------------------===//
#include "dialects/graph/ConstantFolding.h"
#include "dialects/graph/GraphOps.h"
#include "dialects/graph/ShapeRules.h"

#include "llvm/ADT/APFloat.h"

using namespace mlir;

namespace dtc::graph {

namespace {

/// A small static dense constant, or null.
DenseElementsAttr smallDense(Attribute attr) {
  auto dense = dyn_cast_or_null<DenseElementsAttr>(attr);
  if (!dense)
    return {};
  auto type = dyn_cast<RankedTensorType>(dense.getType());
  if (!type || !type.hasStaticShape() || type.getNumElements() > kMaxFoldElements)
    return {};
  return dense;
}

/// Row-major strides of `shape`.
SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t d = (int64_t)shape.size() - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

/// Calls `fn(index)` for every multi-index of `shape` in row-major order.
template <typename Fn>
void forEachIndex(ArrayRef<int64_t> shape, Fn fn) {
  for (int64_t d : shape)
    if (d == 0)
      return;
  SmallVector<int64_t> index(shape.size(), 0);
  while (true) {
    fn(ArrayRef<int64_t>(index));
    int64_t d = (int64_t)shape.size() - 1;
    for (; d >= 0; --d) {
      if (++index[d] < shape[d])
        break;
      index[d] = 0;
    }
    if (d < 0)
      return;
  }
}

/// Builds the result by picking, for each result element, one element of a
/// source constant: the shared shape of gather, slice, concat, broadcast...
OpFoldResult remap(Type resultType, ArrayRef<DenseElementsAttr> sources,
                   function_ref<std::pair<size_t, int64_t>(ArrayRef<int64_t>)> pick) {
  auto type = dyn_cast<RankedTensorType>(resultType);
  if (!type || type.getNumElements() > kMaxFoldElements)
    return {};
  SmallVector<SmallVector<Attribute>> elements;
  for (DenseElementsAttr s : sources)
    elements.emplace_back(s.getValues<Attribute>().begin(),
                          s.getValues<Attribute>().end());
  SmallVector<Attribute> out;
  bool ok = true;
  forEachIndex(type.getShape(), [&](ArrayRef<int64_t> index) {
    auto [source, flat] = pick(index);
    if (source >= elements.size() || flat < 0 ||
        flat >= (int64_t)elements[source].size()) {
      ok = false;
      return;
    }
    out.push_back(elements[source][flat]);
  });
  if (!ok)
    return {};
  return DenseElementsAttr::get(type, out);
}

} // namespace

std::optional<FoldValues> readFoldValues(Attribute attr) {
  DenseElementsAttr dense = smallDense(attr);
  if (!dense)
    return std::nullopt;
  FoldValues v;
  v.type = cast<RankedTensorType>(dense.getType());
  Type element = v.type.getElementType();
  if (isa<FloatType>(element)) {
    v.isFloat = true;
    for (APFloat f : dense.getValues<APFloat>()) {
      bool lost;
      f.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven, &lost);
      v.floats.push_back(f.convertToDouble());
    }
    return v;
  }
  auto intType = dyn_cast<IntegerType>(element);
  if (!intType || intType.getWidth() > 64)
    return std::nullopt;
  bool zext = intType.isUnsigned() || intType.getWidth() == 1;
  for (const APInt &i : dense.getValues<APInt>())
    v.ints.push_back(zext ? (int64_t)i.getZExtValue() : i.getSExtValue());
  return v;
}

DenseElementsAttr makeDense(RankedTensorType type, ArrayRef<int64_t> ints) {
  Type element = type.getElementType();
  if (auto f = dyn_cast<FloatType>(element)) {
    SmallVector<double> floats(ints.begin(), ints.end());
    return makeDense(type, floats);
  }
  unsigned width = element.getIntOrFloatBitWidth();
  SmallVector<APInt> values;
  for (int64_t i : ints)
    values.push_back(width == 1 ? APInt(1, i != 0)
                                : APInt(width, (uint64_t)i, /*isSigned=*/true));
  return DenseElementsAttr::get(type, values);
}

DenseElementsAttr makeDense(RankedTensorType type, ArrayRef<double> floats) {
  Type element = type.getElementType();
  auto f = dyn_cast<FloatType>(element);
  if (!f) {
    SmallVector<int64_t> ints;
    for (double d : floats)
      ints.push_back(element.isInteger(1) ? d != 0.0 : (int64_t)d);
    return makeDense(type, ints);
  }
  SmallVector<APFloat> values;
  for (double d : floats) {
    APFloat a(d);
    bool lost;
    a.convert(f.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
    values.push_back(a);
  }
  return DenseElementsAttr::get(type, values);
}

SmallVector<int64_t> broadcastSourceIndices(ArrayRef<int64_t> result,
                                            ArrayRef<int64_t> operand) {
  SmallVector<int64_t> strides = stridesOf(operand);
  size_t lead = result.size() - operand.size();
  SmallVector<int64_t> indices;
  forEachIndex(result, [&](ArrayRef<int64_t> index) {
    int64_t flat = 0;
    for (size_t d = 0; d < operand.size(); ++d)
      if (operand[d] != 1)
        flat += index[lead + d] * strides[d];
    indices.push_back(flat);
  });
  return indices;
}

//===----------------------------------------------------------------------===//
// Op folders
//===----------------------------------------------------------------------===//

OpFoldResult NegOp::fold(FoldAdaptor adaptor) {
  auto v = readFoldValues(adaptor.getInput());
  if (!v)
    return {};
  for (double &f : v->floats)
    f = -f;
  for (int64_t &i : v->ints)
    i = i == INT64_MIN ? i : -i;
  return v->isFloat ? makeDense(getType(), ArrayRef<double>(v->floats))
                    : makeDense(getType(), ArrayRef<int64_t>(v->ints));
}

namespace {

/// A float elementwise op on a small constant: `fn` on each value.
OpFoldResult foldFloats(RankedTensorType type, Attribute input, double (*fn)(double)) {
  auto v = readFoldValues(input);
  if (!v || !v->isFloat)
    return {};
  for (double &f : v->floats)
    f = fn(f);
  return makeDense(type, ArrayRef<double>(v->floats));
}

} // namespace

// Shape arithmetic on floats that exporters emit (a packaged ViT's
// Pow(1369, 0.5), cast into a Reshape's shape) folds like the integer
// kind.
OpFoldResult SqrtOp::fold(FoldAdaptor adaptor) {
  return foldFloats(getType(), adaptor.getInput(), [](double x) { return std::sqrt(x); });
}

OpFoldResult ExpOp::fold(FoldAdaptor adaptor) {
  return foldFloats(getType(), adaptor.getInput(), [](double x) { return std::exp(x); });
}

// Sinusoidal tables of constant positions fold at import.
OpFoldResult SinOp::fold(FoldAdaptor adaptor) {
  return foldFloats(getType(), adaptor.getInput(), [](double x) { return std::sin(x); });
}

OpFoldResult CosOp::fold(FoldAdaptor adaptor) {
  return foldFloats(getType(), adaptor.getInput(), [](double x) { return std::cos(x); });
}

OpFoldResult LogOp::fold(FoldAdaptor adaptor) {
  return foldFloats(getType(), adaptor.getInput(), [](double x) { return std::log(x); });
}

OpFoldResult ReciprocalOp::fold(FoldAdaptor adaptor) {
  return foldFloats(getType(), adaptor.getInput(), [](double x) { return 1.0 / x; });
}

OpFoldResult AbsOp::fold(FoldAdaptor adaptor) {
  auto v = readFoldValues(adaptor.getInput());
  if (!v)
    return {};
  for (double &f : v->floats)
    f = std::fabs(f);
  for (int64_t &i : v->ints)
    i = i == INT64_MIN ? i : (i < 0 ? -i : i);
  return v->isFloat ? makeDense(getType(), ArrayRef<double>(v->floats))
                    : makeDense(getType(), ArrayRef<int64_t>(v->ints));
}

OpFoldResult NotOp::fold(FoldAdaptor adaptor) {
  auto v = readFoldValues(adaptor.getInput());
  if (!v)
    return {};
  for (int64_t &i : v->ints)
    i = !i;
  return makeDense(getType(), ArrayRef<int64_t>(v->ints));
}

OpFoldResult CastOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  auto v = readFoldValues(adaptor.getInput());
  if (!v)
    return {};
  return v->isFloat ? makeDense(getType(), ArrayRef<double>(v->floats))
                    : makeDense(getType(), ArrayRef<int64_t>(v->ints));
}

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  if (auto dense = smallDense(adaptor.getInput()))
    return dense.reshape(getType());
  return {};
}

OpFoldResult SqueezeOp::fold(FoldAdaptor adaptor) {
  if (auto dense = smallDense(adaptor.getInput()))
    return dense.reshape(getType());
  return {};
}

OpFoldResult UnsqueezeOp::fold(FoldAdaptor adaptor) {
  if (auto dense = smallDense(adaptor.getInput()))
    return dense.reshape(getType());
  return {};
}

OpFoldResult TransposeOp::fold(FoldAdaptor adaptor) {
  ArrayRef<int64_t> perm = getPerm();
  if (llvm::equal(perm, llvm::seq<int64_t>(0, perm.size())))
    return getInput();
  auto dense = smallDense(adaptor.getInput());
  if (!dense)
    return {};
  SmallVector<int64_t> strides = stridesOf(getInput().getType().getShape());
  return remap(getType(), {dense}, [&](ArrayRef<int64_t> index) {
    int64_t flat = 0;
    for (size_t d = 0; d < perm.size(); ++d)
      flat += index[d] * strides[perm[d]];
    return std::pair<size_t, int64_t>(0, flat);
  });
}

OpFoldResult BroadcastOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  auto dense = smallDense(adaptor.getInput());
  if (!dense)
    return {};
  if (dense.isSplat())
    return DenseElementsAttr::get(getType(), dense.getSplatValue<Attribute>());
  auto sources = broadcastSourceIndices(getType().getShape(),
                                        getInput().getType().getShape());
  int64_t next = 0;
  return remap(getType(), {dense}, [&](ArrayRef<int64_t>) {
    return std::pair<size_t, int64_t>(0, sources[next++]);
  });
}

OpFoldResult WhereOp::fold(FoldAdaptor adaptor) {
  auto cond = readFoldValues(adaptor.getCond());
  auto x = smallDense(adaptor.getX()), y = smallDense(adaptor.getY());
  if (!cond || !x || !y)
    return {};
  ArrayRef<int64_t> shape = getType().getShape();
  auto ic = broadcastSourceIndices(shape, cond->type.getShape());
  auto ix = broadcastSourceIndices(shape, getX().getType().getShape());
  auto iy = broadcastSourceIndices(shape, getY().getType().getShape());
  int64_t next = 0;
  return remap(getType(), {x, y}, [&](ArrayRef<int64_t>) {
    int64_t i = next++;
    return cond->ints[ic[i]] ? std::pair<size_t, int64_t>(0, ix[i])
                             : std::pair<size_t, int64_t>(1, iy[i]);
  });
}

OpFoldResult GatherOp::fold(FoldAdaptor adaptor) {
  if (getSkipOutside()) // a block of a split table: left to the kernel
    return {};
  auto data = smallDense(adaptor.getData());
  auto indices = readFoldValues(adaptor.getIndices());
  if (!data || !indices)
    return {};
  ArrayRef<int64_t> dataShape = getData().getType().getShape();
  int64_t rank = dataShape.size();
  int64_t axis = normalizeAxis(getAxis(), rank).value_or(0);
  int64_t indexRank = indices->type.getRank();
  SmallVector<int64_t> strides = stridesOf(dataShape);
  SmallVector<int64_t> indexStrides = stridesOf(indices->type.getShape());
  return remap(getType(), {data}, [&](ArrayRef<int64_t> index) {
    int64_t which = 0;
    for (int64_t d = 0; d < indexRank; ++d)
      which += index[axis + d] * indexStrides[d];
    int64_t at = indices->ints[which];
    if (at < 0)
      at += dataShape[axis];
    if (at < 0 || at >= dataShape[axis])
      return std::pair<size_t, int64_t>(0, -1); // out of range: no fold
    int64_t flat = at * strides[axis];
    for (int64_t d = 0; d < axis; ++d)
      flat += index[d] * strides[d];
    for (int64_t d = axis + 1; d < rank; ++d)
      flat += index[d - 1 + indexRank] * strides[d];
    return std::pair<size_t, int64_t>(0, flat);
  });
}

OpFoldResult ConcatOp::fold(FoldAdaptor adaptor) {
  if (getInputs().size() == 1)
    return getInputs()[0];
  SmallVector<DenseElementsAttr> sources;
  for (Attribute a : adaptor.getInputs()) {
    sources.push_back(smallDense(a));
    if (!sources.back())
      return {};
  }
  int64_t axis = normalizeAxis(getAxis(), getType().getRank()).value_or(0);
  SmallVector<int64_t> starts;
  int64_t start = 0;
  for (Value v : getInputs()) {
    starts.push_back(start);
    start += cast<RankedTensorType>(v.getType()).getDimSize(axis);
  }
  return remap(getType(), sources, [&](ArrayRef<int64_t> index) {
    size_t s = llvm::upper_bound(starts, index[axis]) - starts.begin() - 1;
    auto shape = cast<RankedTensorType>(getInputs()[s].getType()).getShape();
    SmallVector<int64_t> strides = stridesOf(shape);
    int64_t flat = 0;
    for (size_t d = 0; d < index.size(); ++d)
      flat += (d == (size_t)axis ? index[d] - starts[s] : index[d]) * strides[d];
    return std::pair<size_t, int64_t>(s, flat);
  });
}

OpFoldResult SliceOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType() &&
      llvm::all_of(getOffsets(), [](int64_t o) { return o == 0; }) &&
      llvm::all_of(getStrides(), [](int64_t s) { return s == 1; }))
    return getInput();
  auto dense = smallDense(adaptor.getInput());
  if (!dense)
    return {};
  SmallVector<int64_t> strides = stridesOf(getInput().getType().getShape());
  return remap(getType(), {dense}, [&](ArrayRef<int64_t> index) {
    int64_t flat = 0;
    for (size_t d = 0; d < index.size(); ++d)
      flat += (getOffsets()[d] + index[d] * getStrides()[d]) * strides[d];
    return std::pair<size_t, int64_t>(0, flat);
  });
}

} // namespace dtc::graph
