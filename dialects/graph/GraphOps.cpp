//===- GraphOps.cpp - result-type rules and verifiers of graph ops --------===//
#include "dialects/graph/GraphOps.h"
#include "dialects/graph/ConstantFolding.h"
#include "dialects/graph/ShapeRules.h"

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/IR/OpImplementation.h"

#include <numeric>

using namespace mlir;

namespace dtc::graph {

namespace {

/// The operand's static tensor type, or an error.
FailureOr<RankedTensorType> staticTensor(std::optional<Location> loc, Value v,
                                         StringRef what) {
  auto type = v ? dyn_cast<RankedTensorType>(v.getType()) : RankedTensorType();
  if (!type || !type.hasStaticShape())
    return emitOptionalError(loc, what, " must be a statically shaped tensor");
  return type;
}

LogicalResult push(SmallVectorImpl<Type> &types, ArrayRef<int64_t> shape,
                   Type elementType) {
  types.push_back(RankedTensorType::get(shape, elementType));
  return success();
}

/// Normalises `axis` for a rank-`rank` operand, or reports it.
FailureOr<int64_t> axisIn(std::optional<Location> loc, int64_t axis,
                          int64_t rank, StringRef what = "axis") {
  if (auto a = normalizeAxis(axis, rank))
    return *a;
  return emitOptionalError(loc, what, " ", axis, " out of range for rank-",
                           rank, " input");
}

} // namespace

LogicalResult inferBroadcastType(std::optional<Location> loc,
                                 ValueRange operands, Type elementType,
                                 SmallVectorImpl<Type> &types) {
  Shape shape;
  Type first;
  for (auto [i, v] : llvm::enumerate(operands)) {
    auto type = staticTensor(loc, v, "operand");
    if (failed(type))
      return failure();
    if (i == 0) {
      first = type->getElementType();
      shape.assign(type->getShape().begin(), type->getShape().end());
      continue;
    }
    auto b = broadcastShapes(shape, type->getShape());
    if (!b)
      return emitOptionalError(loc, "shapes ", shapeToString(shape), " and ",
                               shapeToString(type->getShape()),
                               " do not broadcast");
    shape = *b;
  }
  return push(types, shape, elementType ? elementType : first);
}

LogicalResult inferReduceType(std::optional<Location> loc, Value input,
                              DenseI64ArrayAttr axes, bool keepdims,
                              SmallVectorImpl<Type> &types) {
  auto type = staticTensor(loc, input, "input");
  if (failed(type))
    return failure();
  int64_t rank = type->getRank();
  SmallVector<bool> reduced(rank, false);
  for (int64_t a : axes.asArrayRef()) {
    if (a < 0 || a >= rank)
      return emitOptionalError(loc, "reduction axis ", a,
                               " out of range for rank-", rank, " input");
    if (reduced[a])
      return emitOptionalError(loc, "reduction axis ", a, " repeated");
    reduced[a] = true;
  }
  Shape shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced[d])
      shape.push_back(type->getDimSize(d));
    else if (keepdims)
      shape.push_back(1);
  }
  return push(types, shape, type->getElementType());
}

bool reduceTypesCompatible(TypeRange inferred, TypeRange actual) {
  if (inferred.size() != 1 || actual.size() != 1)
    return false;
  if (inferred[0] == actual[0])
    return true;
  auto want = dyn_cast<RankedTensorType>(inferred[0]);
  auto got = dyn_cast<RankedTensorType>(actual[0]);
  return want && got && want.getShape() == got.getShape() && got.getElementType().isF32() &&
         (want.getElementType().isBF16() || want.getElementType().isF16());
}

LogicalResult inferPoolType(std::optional<Location> loc, Value input,
                            DenseI64ArrayAttr kernel, DenseI64ArrayAttr strides,
                            DenseI64ArrayAttr pads, DenseI64ArrayAttr dilations,
                            bool ceilMode, bool channelsLast, SmallVectorImpl<Type> &types) {
  auto type = staticTensor(loc, input, "input");
  if (failed(type))
    return failure();
  if (type->getRank() != 4)
    return emitOptionalError(loc, "2-D pooling needs a rank-4 ",
                             channelsLast ? "NHWC" : "NCHW", " input, got ",
                             shapeToString(type->getShape()));
  SmallVector<int64_t, 4> dims(type->getShape());
  if (channelsLast)
    dims = fromChannelsLast(dims);
  if (!kernel || !strides || !pads || !dilations || kernel.size() != 2 ||
      strides.size() != 2 || pads.size() != 4 || dilations.size() != 2)
    return emitOptionalError(loc, "pooling needs 2 kernel sizes, 2 strides, "
                                  "4 pads and 2 dilations");
  SmallVector<int64_t, 4> shape{dims[0], dims[1]};
  for (int i = 0; i < 2; ++i) {
    auto out = windowOutputSize(dims[2 + i], kernel[i], strides[i],
                                pads[i], pads[i + 2], dilations[i], ceilMode);
    if (!out)
      return emitOptionalError(
          loc, "pooling window (kernel ", kernel[i], ", stride ", strides[i],
          ", dilation ", dilations[i], ", pads ", pads[i], "/", pads[i + 2],
          ") does not fit input size ", dims[2 + i]);
    shape.push_back(*out);
  }
  if (channelsLast)
    shape = toChannelsLast(shape);
  return push(types, shape, type->getElementType());
}

SmallVector<int64_t, 4> toChannelsLast(ArrayRef<int64_t> nchw) {
  return {nchw[0], nchw[2], nchw[3], nchw[1]};
}

SmallVector<int64_t, 4> fromChannelsLast(ArrayRef<int64_t> nhwc) {
  return {nhwc[0], nhwc[3], nhwc[1], nhwc[2]};
}

//===----------------------------------------------------------------------===//
// Per-op rules
//===----------------------------------------------------------------------===//

LogicalResult ConstantOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &types) {
  auto value = adaptor.getValueAttr();
  auto type = value ? dyn_cast<RankedTensorType>(value.getShapedType())
                    : RankedTensorType();
  if (!type)
    return emitOptionalError(loc, "constant value must be a ranked tensor");
  types.push_back(type);
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValueAttr(); }

LogicalResult GeluOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("approximate must be \"none\" or \"tanh\", got \"")
           << getApproximate() << "\"";
  return success();
}

namespace {

/// The body of a graph.fused or graph.bucket: an argument of its input's
/// type for each input, ending in graph.yield of the results' types.
LogicalResult verifyYieldingBody(Operation *op, Block &body, ValueRange inputs,
                                 TypeRange results) {
  if (body.getNumArguments() != inputs.size())
    return op->emitOpError("body has ")
           << body.getNumArguments() << " arguments for " << inputs.size() << " inputs";
  for (auto [arg, input] : llvm::zip(body.getArguments(), inputs))
    if (arg.getType() != input.getType())
      return op->emitOpError("body argument type ")
             << arg.getType() << " differs from its input's " << input.getType();
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return op->emitOpError("body must end in graph.yield");
  if (yield.getValues().getTypes() != results)
    return op->emitOpError("yields ")
           << yield.getValues().getTypes() << " but the results are " << results;
  return success();
}

} // namespace

LogicalResult FusedOp::verify() {
  Block &body = getBody().front();
  if (getOutputs().empty())
    return emitOpError("has no results");
  if (failed(verifyYieldingBody(*this, body, getInputs(), getOutputs().getTypes())))
    return failure();
  auto shape = cast<RankedTensorType>(getOutputs()[0].getType()).getShape();
  for (Value output : getOutputs())
    if (cast<RankedTensorType>(output.getType()).getShape() != shape)
      return emitOpError("results must have one shape (one loop writes them all), got ")
             << getOutputs().getTypes();
  for (Operation &op : body.without_terminator()) {
    bool scalarConstant = false;
    if (auto constant = dyn_cast<ConstantOp>(op))
      if (auto dense = dyn_cast<DenseElementsAttr>(constant.getValue()))
        scalarConstant = dense.isSplat();
    if (!scalarConstant && !op.hasTrait<GraphElementwise>())
      return op.emitOpError("is not elementwise and cannot be in graph.fused");
  }
  return success();
}

std::string bucketMismatch(Operation *a, Operation *b) {
  auto groupOf = [](Operation *op) -> std::optional<std::tuple<StringRef, ArrayRef<int16_t>, int>> {
    if (auto c = dyn_cast<mesh::AllReduceOp>(op))
      return std::tuple(c.getMesh(), c.getMeshAxes(), int(c.getReduction()));
    if (auto c = dyn_cast<mesh::ReduceScatterOp>(op))
      return std::tuple(c.getMesh(), c.getMeshAxes(), int(c.getReduction()));
    if (auto c = dyn_cast<mesh::AllGatherOp>(op))
      return std::tuple(c.getMesh(), c.getMeshAxes(), -1);
    return std::nullopt;
  };
  auto x = groupOf(a), y = groupOf(b);
  if (!y)
    return "'" + b->getName().getStringRef().str() +
           "' is not an all_reduce, all_gather or reduce_scatter";
  if (!x || a->getName() != b->getName())
    return "'" + b->getName().getStringRef().str() + "' after '" +
           a->getName().getStringRef().str() + "': one kind of collective a bucket";
  if (std::get<0>(*x) != std::get<0>(*y) || std::get<1>(*x) != std::get<1>(*y))
    return "another mesh or other mesh axes than the bucket's first collective";
  if (std::get<2>(*x) != std::get<2>(*y))
    return "another reduction than the bucket's first collective";
  if (getElementTypeOrSelf(a->getOperand(0)) != getElementTypeOrSelf(b->getOperand(0)))
    return "another element type than the bucket's first collective";
  return "";
}

LogicalResult BucketOp::verify() {
  Block &body = getBody().front();
  if (getInputs().empty() || getOutputs().size() != getInputs().size())
    return emitOpError("has ") << getInputs().size() << " inputs and "
                               << getOutputs().size() << " results: one of each a member";
  if (failed(verifyYieldingBody(*this, body, getInputs(), getOutputs().getTypes())))
    return failure();
  auto yield = cast<YieldOp>(body.getTerminator());
  Operation *first = nullptr;
  for (auto [i, op] : llvm::enumerate(body.without_terminator())) {
    if (i >= getInputs().size() || op.getNumOperands() != 1 ||
        op.getOperand(0) != body.getArgument(unsigned(i)) ||
        yield.getValues()[i] != op.getResult(0))
      return op.emitOpError("member ") << i << " of graph.bucket must read argument " << i
                                       << " and be yielded as result " << i;
    std::string why = bucketMismatch(first ? first : &op, &op);
    if (!why.empty())
      return op.emitOpError("cannot be in this graph.bucket: ") << why;
    first = first ? first : &op;
  }
  if (body.getOperations().size() != getInputs().size() + 1)
    return emitOpError("has ") << getInputs().size() << " inputs but "
                               << body.getOperations().size() - 1 << " collectives";
  return success();
}

LogicalResult WhereOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  auto x = staticTensor(loc, adaptor.getX(), "x");
  auto y = staticTensor(loc, adaptor.getY(), "y");
  if (failed(x) || failed(y))
    return failure();
  if (x->getElementType() != y->getElementType())
    return emitOptionalError(loc, "x and y element types differ: ",
                             x->getElementType(), " vs ", y->getElementType());
  return inferBroadcastType(loc, {adaptor.getCond(), adaptor.getX(), adaptor.getY()},
                            x->getElementType(), types);
}

LogicalResult TopKOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                       Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto type = staticTensor(loc, adaptor.getInput(), "input");
  if (failed(type))
    return failure();
  int64_t rank = type->getRank(), axis = adaptor.getAxis(), k = adaptor.getK();
  if (axis < 0 || axis >= rank)
    return emitOptionalError(loc, "top_k axis ", axis, " is out of range for rank ", rank);
  if (k < 1 || k > type->getDimSize(axis))
    return emitOptionalError(loc, "top_k k = ", k, " must be in [1, ",
                             type->getDimSize(axis), "]");
  SmallVector<int64_t> shape(type->getShape());
  shape[size_t(axis)] = k;
  types.push_back(RankedTensorType::get(shape, IntegerType::get(context, 64)));
  return success();
}

LogicalResult TriluOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  auto type = staticTensor(loc, adaptor.getInput(), "input");
  if (failed(type))
    return failure();
  if (type->getRank() < 2)
    return emitOptionalError(loc, "trilu needs rank >= 2, got rank ",
                             type->getRank());
  types.push_back(*type);
  return success();
}

namespace {
LogicalResult inferSameTypeAlongAxis(std::optional<Location> loc, Value input,
                                     IntegerAttr axis,
                                     SmallVectorImpl<Type> &types) {
  auto type = staticTensor(loc, input, "input");
  if (failed(type))
    return failure();
  if (failed(axisIn(loc, axis.getInt(), type->getRank())))
    return failure();
  types.push_back(*type);
  return success();
}
} // namespace

LogicalResult SoftmaxOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  return inferSameTypeAlongAxis(loc, adaptor.getInput(), adaptor.getAxisAttr(), types);
}

LogicalResult LogSoftmaxOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  return inferSameTypeAlongAxis(loc, adaptor.getInput(), adaptor.getAxisAttr(), types);
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto type = staticTensor(loc, adaptor.getInput(), "input");
  if (failed(type))
    return failure();
  auto axis = axisIn(loc, adaptor.getAxisAttr().getInt(), type->getRank());
  if (failed(axis))
    return failure();
  // scale and bias must broadcast to the normalised dims [axis, rank);
  // RMSNorm's scale must have their shape, and it has no bias.
  ArrayRef<int64_t> normalized = type->getShape().drop_front(*axis);
  if (adaptor.getRms()) {
    if (adaptor.getBias())
      return emitOptionalError(loc, "an rms layer_norm has no bias");
    auto scale = dyn_cast<RankedTensorType>(adaptor.getScale().getType());
    if (!scale || scale.getShape() != normalized)
      return emitOptionalError(loc, "an rms layer_norm's scale must have the normalised shape ",
                               shapeToString(normalized));
  }
  for (Value v : {adaptor.getScale(), adaptor.getBias()}) {
    if (!v)
      continue;
    auto t = staticTensor(loc, v, "scale/bias");
    if (failed(t))
      return failure();
    auto b = broadcastShapes(normalized, t->getShape());
    if (!b || ArrayRef<int64_t>(*b) != normalized)
      return emitOptionalError(loc, "scale/bias shape ",
                               shapeToString(t->getShape()),
                               " does not broadcast to the normalised shape ",
                               shapeToString(normalized));
  }
  types.push_back(*type);
  return success();
}

LogicalResult BatchNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto type = staticTensor(loc, adaptor.getInput(), "input");
  if (failed(type))
    return failure();
  if (type->getRank() < 2)
    return emitOptionalError(loc, "batch_norm needs rank >= 2 (N, C, ...), got ",
                             shapeToString(type->getShape()));
  int64_t channels = type->getDimSize(1);
  for (Value v : {adaptor.getScale(), adaptor.getBias(), adaptor.getMean(),
                  adaptor.getVariance()}) {
    auto t = staticTensor(loc, v, "scale/bias/mean/variance");
    if (failed(t))
      return failure();
    if (t->getRank() != 1 || t->getDimSize(0) != channels)
      return emitOptionalError(loc, "scale, bias, mean and variance must have "
                                    "shape ",
                               channels, " (the channel count), got ",
                               shapeToString(t->getShape()));
  }
  types.push_back(*type);
  return success();
}

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  auto lhs = staticTensor(loc, adaptor.getLhs(), "lhs");
  auto rhs = staticTensor(loc, adaptor.getRhs(), "rhs");
  if (failed(lhs) || failed(rhs))
    return failure();
  if (lhs->getRank() < 2 || rhs->getRank() < 2)
    return emitOptionalError(loc, "matmul operands need rank >= 2, got ",
                             shapeToString(lhs->getShape()), " and ",
                             shapeToString(rhs->getShape()));
  if (lhs->getElementType() != rhs->getElementType())
    return emitOptionalError(loc, "matmul element types differ: ",
                             lhs->getElementType(), " vs ",
                             rhs->getElementType());
  int64_t lr = lhs->getRank(), rr = rhs->getRank();
  bool tl = adaptor.getTransposeLhs(), tr = adaptor.getTransposeRhs();
  int64_t m = lhs->getDimSize(tl ? lr - 1 : lr - 2);
  int64_t kl = lhs->getDimSize(tl ? lr - 2 : lr - 1);
  int64_t kr = rhs->getDimSize(tr ? rr - 1 : rr - 2);
  int64_t n = rhs->getDimSize(tr ? rr - 2 : rr - 1);
  if (kl != kr)
    return emitOptionalError(loc, "matmul contraction sizes differ: ",
                             shapeToString(lhs->getShape()), " x ",
                             shapeToString(rhs->getShape()), " (", kl, " vs ",
                             kr, ")");
  auto batch = broadcastShapes(lhs->getShape().drop_back(2),
                               rhs->getShape().drop_back(2));
  if (!batch)
    return emitOptionalError(loc, "matmul batch dims do not broadcast: ",
                             shapeToString(lhs->getShape()), " x ",
                             shapeToString(rhs->getShape()));
  batch->push_back(m);
  batch->push_back(n);
  return push(types, *batch, lhs->getElementType());
}

LogicalResult MatmulBiasOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &types) {
  MatmulOp::Adaptor matmul(ValueRange{adaptor.getLhs(), adaptor.getRhs()},
                           adaptor.getAttributes());
  if (failed(MatmulOp::inferReturnTypes(context, loc, matmul, types)))
    return failure();
  if (adaptor.getKeepPreactivation()) // the biased product, before the activation
    types.push_back(types.front());
  return success();
}

LogicalResult MatmulBiasOp::verify() {
  auto out = cast<RankedTensorType>(getOutput().getType());
  auto bias = cast<RankedTensorType>(getBias().getType());
  if (bias.getRank() != 1 || bias.getDimSize(0) != out.getShape().back() ||
      bias.getElementType() != out.getElementType())
    return emitOpError("bias must be [") << out.getShape().back() << "] of "
                                          << out.getElementType() << ", got " << bias;
  StringRef a = getActivation();
  if (a != "none" && a != "relu" && a != "gelu_tanh")
    return emitOpError("activation must be none, relu or gelu_tanh, got '") << a << "'";
  if (getAddend().size() > 1)
    return emitOpError("takes one addend at most, got ") << getAddend().size();
  if (!getAddend().empty() && (getAddend()[0].getType() != out || a != "none"))
    return emitOpError("an addend must have the output's type ")
           << out << " and the product no activation";
  if (getKeepPreactivation() && a != "gelu_tanh")
    return emitOpError("keeps its preactivation only with gelu_tanh, not ") << a;
  return success();
}

LogicalResult MatmulGradOp::verify() {
  auto lhs = cast<RankedTensorType>(getLhs().getType());
  auto rhs = cast<RankedTensorType>(getRhs().getType());
  auto out = cast<RankedTensorType>(getOutput().getType());
  auto sum = cast<RankedTensorType>(getBiasGrad().getType());
  if (lhs.getRank() != 2 || rhs.getRank() != 2 ||
      lhs.getDimSize(0) != rhs.getDimSize(0))
    return emitOpError("multiplies lhs^T rhs of 2-D operands with as many rows, got ")
           << lhs << " and " << rhs;
  if (out.getRank() != 2 || out.getDimSize(0) != lhs.getDimSize(1) ||
      out.getDimSize(1) != rhs.getDimSize(1))
    return emitOpError("output must be [") << lhs.getDimSize(1) << ", " << rhs.getDimSize(1)
                                           << "], got " << out;
  if (sum.getNumElements() != rhs.getDimSize(1) ||
      (sum.getRank() > 0 && sum.getShape().back() != rhs.getDimSize(1)))
    return emitOpError("the rows' sum must hold the rhs's ")
           << rhs.getDimSize(1) << " columns, got " << sum;
  return success();
}

/// A product joined with a third operand laid out as its output (a GELU's
/// input, an addend): the output has the product's shape and `extra` the
/// output's type.
static LogicalResult verifyProductWith(Operation *op, Value lhs, Value rhs, Value extra,
                                       Value output, StringRef what) {
  SmallVector<Type> types;
  MatmulOp::Adaptor matmul(ValueRange{lhs, rhs}, op->getAttrDictionary());
  if (failed(MatmulOp::inferReturnTypes(op->getContext(), op->getLoc(), matmul, types)))
    return failure();
  auto out = cast<RankedTensorType>(output.getType());
  if (cast<RankedTensorType>(types.front()).getShape() != out.getShape() ||
      extra.getType() != out)
    return op->emitOpError("output and ")
           << what << " must have the product's shape, the " << what
           << " the output's type; got " << out << " and " << extra.getType();
  return success();
}

LogicalResult MatmulAccOp::verify() {
  return verifyProductWith(*this, getLhs(), getRhs(), getAddend(), getOutput(), "addend");
}

LogicalResult MatmulGeluGradOp::verify() {
  return verifyProductWith(*this, getLhs(), getRhs(), getGeluInput(), getOutput(), "GELU input");
}

SmallVector<int64_t, 4> headsFirst(ArrayRef<int64_t> shape, bool bshd, bool packed,
                                   bool interleaved) {
  SmallVector<int64_t, 4> dims(shape);
  if (packed && dims.size() >= 4)
    dims.erase(dims.end() - (interleaved ? 2 : 3));
  if (bshd && dims.size() >= 3)
    std::swap(dims[dims.size() - 3], dims[dims.size() - 2]);
  return dims;
}

namespace {
/// Attention's operands: q [..., Sq, D], k [..., Sk, D], v [..., Sk, Dv]
/// (with `bshd`, [..., S, H, D]: checked as [..., H, S, D]), one element
/// type, the same leading dims but that k's and v's heads (their last
/// leading dim) may divide q's (grouped-query attention); the output's type
/// and lse's. `packed`: q, k and v one value [..., S, 3, H, D] ([..., S,
/// H, 3, D] `interleaved`).
LogicalResult attentionTypes(std::optional<Location> loc, Value qv, Value kv, Value vv, bool bshd,
                             bool packed, bool interleaved, SmallVectorImpl<Type> &types) {
  auto qt = staticTensor(loc, qv, "q"), kt = staticTensor(loc, kv, "k"),
       vt = staticTensor(loc, vv, "v");
  if (failed(qt) || failed(kt) || failed(vt))
    return failure();
  if (interleaved && !packed)
    return emitOptionalError(loc, "an interleaved attention is packed");
  if (packed && (!bshd || qv != kv || qv != vv || qt->getRank() < 4 ||
                 qt->getDimSize(qt->getRank() - (interleaved ? 2 : 3)) != 3))
    return emitOptionalError(loc, "a packed attention's q, k and v are one bshd value ",
                             interleaved ? "[..., S, H, 3, D]" : "[..., S, 3, H, D]", ", got ",
                             shapeToString(qt->getShape()), ", ", shapeToString(kt->getShape()),
                             ", ", shapeToString(vt->getShape()));
  int64_t rank = qt->getRank() - (packed ? 1 : 0);
  if (rank < (bshd ? 3 : 2) || kt->getRank() != qt->getRank() || vt->getRank() != qt->getRank())
    return emitOptionalError(loc, "attention's q, k and v need one rank >= ", bshd ? 3 : 2,
                             ", got ", shapeToString(qt->getShape()), ", ",
                             shapeToString(kt->getShape()), ", ", shapeToString(vt->getShape()));
  auto view = [&](RankedTensorType t) {
    return RankedTensorType::get(headsFirst(t.getShape(), bshd, packed, interleaved),
                                 t.getElementType());
  };
  std::optional<RankedTensorType> q = view(*qt), k = view(*kt), v = view(*vt);
  if (k->getElementType() != q->getElementType() || v->getElementType() != q->getElementType())
    return emitOptionalError(loc, "attention's q, k and v element types differ");
  ArrayRef<int64_t> lead = q->getShape().drop_back(2), kvLead = k->getShape().drop_back(2);
  bool fits = kvLead == lead || (!lead.empty() && kvLead.size() == lead.size() &&
                                  kvLead.drop_back() == lead.drop_back() && kvLead.back() > 0 &&
                                  lead.back() % kvLead.back() == 0);
  if (!fits || v->getShape().drop_back(2) != kvLead ||
      k->getShape().back() != q->getShape().back() ||
      v->getDimSize(rank - 2) != k->getDimSize(rank - 2))
    return emitOptionalError(loc, "attention's shapes do not fit q [..., H, Sq, D], k [..., G, "
                             "Sk, D], v [..., G, Sk, Dv] with G dividing H",
                             bshd ? " (bshd: [..., S, H, D])" : "", ": ",
                             shapeToString(qt->getShape()), ", ", shapeToString(kt->getShape()),
                             ", ", shapeToString(vt->getShape()));
  SmallVector<int64_t> shape(q->getShape());
  shape.back() = v->getShape().back();
  types.push_back(RankedTensorType::get(headsFirst(shape, bshd), q->getElementType()));
  shape.pop_back();
  types.push_back(RankedTensorType::get(shape, Float32Type::get(q->getContext())));
  return success();
}
} // namespace

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &types) {
  return attentionTypes(loc, adaptor.getQ(), adaptor.getK(), adaptor.getV(),
                        bool(adaptor.getBshd()), bool(adaptor.getPacked()),
                        bool(adaptor.getInterleaved()), types);
}

namespace {
/// Attention's bias, if any: f32 of q's rank, broadcast to the scores
/// [..., H, Sq, Sk] (each leading dim q's or 1, then Sq or 1, then Sk).
LogicalResult verifyAttentionBias(Operation *op, Value q, Value k, Value bias, bool bshd,
                                  bool packed, bool interleaved) {
  if (!bias)
    return success();
  auto b = cast<RankedTensorType>(bias.getType());
  SmallVector<int64_t, 4> qs =
      headsFirst(cast<RankedTensorType>(q.getType()).getShape(), bshd, packed, interleaved);
  int64_t rank = int64_t(qs.size());
  if (!b.getElementType().isF32() || b.getRank() != rank)
    return op->emitOpError("bias must be f32 of q's rank (") << rank << "), got " << b;
  int64_t sk =
      headsFirst(cast<RankedTensorType>(k.getType()).getShape(), bshd, packed,
                 interleaved)[rank - 2];
  for (int64_t d = 0; d + 1 < rank; ++d)
    if (b.getDimSize(d) != 1 && b.getDimSize(d) != qs[size_t(d)])
      return op->emitOpError("bias ") << b << " does not broadcast to the scores";
  if (b.getDimSize(rank - 1) != sk)
    return op->emitOpError("bias must end in the keys' count ") << sk << ", got " << b;
  return success();
}
} // namespace

LogicalResult AttentionOp::verify() {
  double scale = getScale().convertToDouble();
  if (!(scale > 0) || !std::isfinite(scale))
    return emitOpError("scale must be positive and finite, got ") << scale;
  return verifyAttentionBias(*this, getQ(), getK(), getBias(), getBshd(), getPacked(),
                             getInterleaved());
}

LogicalResult AttentionBackwardOp::verify() {
  SmallVector<Type> forward;
  if (failed(attentionTypes(getLoc(), getQ(), getK(), getV(), getBshd(), getPacked(),
                            getInterleaved(), forward)))
    return failure();
  if (getOutput().getType() != forward[0] || getGradOutput().getType() != forward[0])
    return emitOpError("output and grad_output must be ") << forward[0];
  if (getLse().getType() != forward[1])
    return emitOpError("lse must be ") << forward[1];
  TypeRange grads = getGrads().getTypes();
  if (getPacked() ? grads.size() != 1 || grads[0] != getQ().getType()
                  : grads.size() != 3 || grads[0] != getQ().getType() ||
                        grads[1] != getK().getType() || grads[2] != getV().getType())
    return emitOpError(getPacked() ? "has one result, the packed q, k and v's gradient, of "
                                     "their type"
                                   : "has three results, the gradients of q, k and v, of "
                                     "their types");
  return verifyAttentionBias(*this, getQ(), getK(), getBias(), getBshd(), getPacked(),
                             getInterleaved());
}

LogicalResult RotaryOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                         Adaptor adaptor, SmallVectorImpl<Type> &types) {
  types.push_back(adaptor.getInput().getType());
  return success();
}

// cos and sin broadcast to the input (each dim 1 or the input's, aligned
// from the right, no more dims than it), in f32 or the input's type.
LogicalResult RotaryOp::verify() {
  auto x = cast<RankedTensorType>(getInput().getType());
  if (x.getRank() < 1 || x.getShape().back() % 2)
    return emitOpError("needs an even last dim, got ") << x;
  for (Value table : {getCos(), getSin()}) {
    auto t = cast<RankedTensorType>(table.getType());
    bool fits = t.getRank() <= x.getRank() &&
                (t.getElementType().isF32() || t.getElementType() == x.getElementType());
    for (int64_t d = 1; fits && d <= t.getRank(); ++d) {
      int64_t n = t.getDimSize(t.getRank() - d);
      fits = n == 1 || n == x.getDimSize(x.getRank() - d);
    }
    if (!fits || t.getShape().back() != x.getShape().back())
      return emitOpError("cos and sin must broadcast to ")
             << x << " with its last dim, in f32 or its type; got " << t;
  }
  return success();
}

LogicalResult Conv2DOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  auto x = staticTensor(loc, adaptor.getInput(), "input");
  auto w = staticTensor(loc, adaptor.getWeight(), "weight");
  if (failed(x) || failed(w))
    return failure();
  bool channelsLast = adaptor.getChannelsLast();
  if (x->getRank() != 4 || w->getRank() != 4)
    return emitOptionalError(loc, "conv2d needs rank-4 ", channelsLast ? "NHWC" : "NCHW",
                             " input and OIHW weight, got ",
                             shapeToString(x->getShape()), " and ",
                             shapeToString(w->getShape()));
  SmallVector<int64_t, 4> dims(x->getShape());
  if (channelsLast)
    dims = fromChannelsLast(dims);
  auto strides = adaptor.getStridesAttr(), pads = adaptor.getPadsAttr(),
       dilations = adaptor.getDilationsAttr();
  if (!strides || !pads || !dilations || strides.size() != 2 ||
      pads.size() != 4 || dilations.size() != 2)
    return emitOptionalError(loc, "conv2d needs 2 strides, 4 pads and 2 dilations");
  int64_t groups = adaptor.getGroups();
  int64_t channels = dims[1], filters = w->getDimSize(0);
  if (groups < 1 || channels % groups || filters % groups ||
      w->getDimSize(1) * groups != channels)
    return emitOptionalError(loc, "conv2d: input has ", channels,
                             " channels, weight ", shapeToString(w->getShape()),
                             " with ", groups, " group(s) expects ",
                             w->getDimSize(1) * groups);
  if (Value bias = adaptor.getBias()) {
    auto b = staticTensor(loc, bias, "bias");
    if (failed(b))
      return failure();
    if (b->getRank() != 1 || b->getDimSize(0) != filters)
      return emitOptionalError(loc, "conv2d bias must have shape ", filters,
                               ", got ", shapeToString(b->getShape()));
  }
  SmallVector<int64_t, 4> shape{dims[0], filters};
  for (int i = 0; i < 2; ++i) {
    auto out = windowOutputSize(dims[2 + i], w->getDimSize(2 + i),
                                strides[i], pads[i], pads[i + 2], dilations[i],
                                /*ceilMode=*/false);
    if (!out)
      return emitOptionalError(loc, "conv2d kernel ", shapeToString(w->getShape()),
                               " does not fit input ", shapeToString(x->getShape()),
                               " with these strides/pads/dilations");
    shape.push_back(*out);
  }
  if (channelsLast)
    shape = toChannelsLast(shape);
  return push(types, shape, x->getElementType());
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  auto data = staticTensor(loc, adaptor.getData(), "data");
  auto indices = staticTensor(loc, adaptor.getIndices(), "indices");
  if (failed(data) || failed(indices))
    return failure();
  auto axis = axisIn(loc, adaptor.getAxisAttr().getInt(), data->getRank());
  if (failed(axis))
    return failure();
  Shape shape(data->getShape().take_front(*axis));
  shape.append(indices->getShape().begin(), indices->getShape().end());
  shape.append(data->getShape().begin() + *axis + 1, data->getShape().end());
  return push(types, shape, data->getElementType());
}

LogicalResult ReshapeOp::verify() {
  auto in = getInput().getType(), out = getOutput().getType();
  if (in.getNumElements() != out.getNumElements())
    return emitOpError("cannot reshape ")
           << shapeToString(in.getShape()) << " (" << in.getNumElements()
           << " elements) to " << shapeToString(out.getShape()) << " ("
           << out.getNumElements() << " elements)";
  if (in.getElementType() != out.getElementType())
    return emitOpError("reshape must keep the element type");
  return success();
}

LogicalResult SqueezeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  auto type = staticTensor(loc, adaptor.getInput(), "input");
  if (failed(type))
    return failure();
  int64_t rank = type->getRank();
  SmallVector<bool> drop(rank, false);
  for (int64_t a : adaptor.getAxes()) {
    auto axis = axisIn(loc, a, rank, "squeeze axis");
    if (failed(axis))
      return failure();
    if (type->getDimSize(*axis) != 1)
      return emitOptionalError(loc, "cannot squeeze axis ", a, " of size ",
                               type->getDimSize(*axis), " (shape ",
                               shapeToString(type->getShape()), ")");
    drop[*axis] = true;
  }
  Shape shape;
  for (int64_t d = 0; d < rank; ++d)
    if (!drop[d])
      shape.push_back(type->getDimSize(d));
  return push(types, shape, type->getElementType());
}

LogicalResult UnsqueezeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto type = staticTensor(loc, adaptor.getInput(), "input");
  if (failed(type))
    return failure();
  int64_t rank = type->getRank() + adaptor.getAxes().size();
  SmallVector<bool> inserted(rank, false);
  for (int64_t a : adaptor.getAxes()) {
    auto axis = axisIn(loc, a, rank, "unsqueeze axis");
    if (failed(axis))
      return failure();
    if (inserted[*axis])
      return emitOptionalError(loc, "unsqueeze axis ", a, " repeated");
    inserted[*axis] = true;
  }
  Shape shape;
  auto next = type->getShape().begin();
  for (int64_t d = 0; d < rank; ++d)
    shape.push_back(inserted[d] ? 1 : *next++);
  return push(types, shape, type->getElementType());
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto type = staticTensor(loc, adaptor.getInput(), "input");
  if (failed(type))
    return failure();
  ArrayRef<int64_t> perm = adaptor.getPerm();
  int64_t rank = type->getRank();
  SmallVector<bool> seen(rank, false);
  if ((int64_t)perm.size() != rank)
    return emitOptionalError(loc, "perm has ", perm.size(),
                             " entries for a rank-", rank, " input");
  Shape shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p])
      return emitOptionalError(loc, "perm is not a permutation of 0..",
                               rank - 1);
    seen[p] = true;
    shape.push_back(type->getDimSize(p));
  }
  return push(types, shape, type->getElementType());
}

LogicalResult BroadcastOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto type = staticTensor(loc, adaptor.getInput(), "input");
  if (failed(type))
    return failure();
  ArrayRef<int64_t> target = adaptor.getShape();
  auto shape = broadcastShapes(type->getShape(), target);
  if (!shape || !elementCount(*shape))
    return emitOptionalError(loc, "cannot broadcast ",
                             shapeToString(type->getShape()), " to ",
                             shapeToString(target));
  return push(types, *shape, type->getElementType());
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  if (adaptor.getInputs().empty())
    return emitOptionalError(loc, "concat needs at least one input");
  auto first = staticTensor(loc, adaptor.getInputs()[0], "input");
  if (failed(first))
    return failure();
  auto axis = axisIn(loc, adaptor.getAxisAttr().getInt(), first->getRank());
  if (failed(axis))
    return failure();
  Shape shape(first->getShape());
  shape[*axis] = 0;
  for (Value v : adaptor.getInputs()) {
    auto t = staticTensor(loc, v, "input");
    if (failed(t))
      return failure();
    bool ok = t->getRank() == first->getRank() &&
              t->getElementType() == first->getElementType();
    for (int64_t d = 0; ok && d < t->getRank(); ++d)
      ok = d == *axis || t->getDimSize(d) == first->getDimSize(d);
    if (!ok)
      return emitOptionalError(loc, "cannot concat ",
                               shapeToString(first->getShape()), " and ",
                               shapeToString(t->getShape()), " on axis ",
                               *axis);
    shape[*axis] += t->getDimSize(*axis);
  }
  return push(types, shape, first->getElementType());
}

LogicalResult SplitOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  auto type = staticTensor(loc, adaptor.getInput(), "input");
  if (failed(type))
    return failure();
  auto axis = axisIn(loc, adaptor.getAxisAttr().getInt(), type->getRank());
  if (failed(axis))
    return failure();
  int64_t total = 0;
  for (int64_t s : adaptor.getSizes()) {
    if (s < 0)
      return emitOptionalError(loc, "split size ", s, " is negative");
    total += s;
  }
  if (total != type->getDimSize(*axis))
    return emitOptionalError(loc, "split sizes add up to ", total,
                             " but axis ", *axis, " has size ",
                             type->getDimSize(*axis));
  for (int64_t s : adaptor.getSizes()) {
    Shape shape(type->getShape());
    shape[*axis] = s;
    (void)push(types, shape, type->getElementType());
  }
  return success();
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  auto type = staticTensor(loc, adaptor.getInput(), "input");
  if (failed(type))
    return failure();
  ArrayRef<int64_t> offsets = adaptor.getOffsets(), sizes = adaptor.getSizes(),
                    strides = adaptor.getStrides();
  int64_t rank = type->getRank();
  if ((int64_t)offsets.size() != rank || (int64_t)sizes.size() != rank ||
      (int64_t)strides.size() != rank)
    return emitOptionalError(loc, "slice needs one offset, size and stride per "
                                  "dim of the rank-",
                             rank, " input");
  for (int64_t d = 0; d < rank; ++d) {
    int64_t dim = type->getDimSize(d);
    if (sizes[d] < 0 || strides[d] == 0)
      return emitOptionalError(loc, "slice dim ", d, ": size ", sizes[d],
                               " and stride ", strides[d], " are invalid");
    if (sizes[d] == 0)
      continue;
    if (sizes[d] > dim)
      return emitOptionalError(loc, "slice dim ", d, ": size ", sizes[d],
                               " exceeds the dim's ", dim);
    int64_t last = offsets[d] + (sizes[d] - 1) * strides[d];
    if (offsets[d] < 0 || offsets[d] >= dim || last < 0 || last >= dim)
      return emitOptionalError(loc, "slice dim ", d, " reads outside [0, ",
                               dim, ")");
  }
  return push(types, sizes, type->getElementType());
}

//===----------------------------------------------------------------------===//
// Backward ops: the forward rule, run on the stated result, must give the
// gradient operand's shape.
//===----------------------------------------------------------------------===//

namespace {

/// Checks that `forward` (the forward op's result types, or failure) is
/// the one type `expected`, naming `what` otherwise.
LogicalResult checkForwardShape(Operation *op, LogicalResult inferred,
                                ArrayRef<Type> forward, Type expected, StringRef what) {
  if (failed(inferred))
    return op->emitOpError("the result does not fit the forward op's attributes");
  if (forward.size() == 1 && forward[0] != expected)
    return op->emitOpError("expects ")
           << what << " of type " << forward[0] << " for this result, got " << expected;
  return success();
}

} // namespace

LogicalResult Conv2DBackwardInputOp::verify() {
  SmallVector<Type> forward;
  Conv2DOp::Adaptor adaptor(ValueRange{getOutput(), getWeight()},
                            (*this)->getAttrDictionary());
  return checkForwardShape(*this,
                           Conv2DOp::inferReturnTypes(getContext(), getLoc(), adaptor, forward),
                           forward, getGradOutput().getType(), "grad_output");
}

LogicalResult Conv2DBackwardWeightOp::verify() {
  SmallVector<Type> forward;
  Conv2DOp::Adaptor adaptor(ValueRange{getInput(), getOutput()}, (*this)->getAttrDictionary());
  return checkForwardShape(*this,
                           Conv2DOp::inferReturnTypes(getContext(), getLoc(), adaptor, forward),
                           forward, getGradOutput().getType(), "grad_output");
}

LogicalResult LayerNormBackwardOp::verify() {
  auto input = cast<RankedTensorType>(getInput().getType());
  int64_t axis = int64_t(getAxis());
  if (axis < 0 || axis >= input.getRank())
    return emitOpError("axis ") << axis << " is not a dim of the input (rank "
                                << input.getRank() << ")";
  if (getGradOutput().getType() != input || getGradInput().getType() != input)
    return emitOpError("grad_output and grad_input must have the input's type");
  if (getResidual().size() > 1 || (!getResidual().empty() && getResidual()[0].getType() != input))
    return emitOpError("takes one residual at most, of the input's type");
  auto scale = cast<RankedTensorType>(getScale().getType());
  if (scale.getShape() != input.getShape().drop_front(axis) ||
      scale.getElementType() != input.getElementType())
    return emitOpError("the scale must be ")
           << RankedTensorType::get(input.getShape().drop_front(axis),
                                    input.getElementType())
           << " (the normalised dims), got " << scale;
  SmallVector<int64_t> rows(input.getShape());
  for (int64_t d = axis; d < input.getRank(); ++d)
    rows[size_t(d)] = 1;
  auto statistics = RankedTensorType::get(rows, Float32Type::get(getContext()));
  if (getMean().getType() != statistics || getRstd().getType() != statistics)
    return emitOpError("mean and rstd must be ") << statistics;
  size_t partials = size_t(getScaleGradient()) + size_t(getBiasGradient());
  if (getBiasGradient() && (getRms() || !getScaleGradient()))
    return emitOpError("sums a bias's gradient only beside its scale's, and RMSNorm has no bias");
  if (getPartials().size() != partials)
    return emitOpError("has ") << getPartials().size() << " partial sums, its attributes ask for "
                               << partials;
  if (partials) {
    auto first = cast<RankedTensorType>(getPartials()[0].getType());
    SmallVector<int64_t> shape(input.getShape());
    shape[0] = first.getRank() == input.getRank() ? first.getDimSize(0) : 0;
    for (int64_t d = 1; d < axis; ++d)
      shape[size_t(d)] = 1;
    auto want = RankedTensorType::get(shape, Float32Type::get(getContext()));
    if (axis == 0 || shape[0] < 1)
      return emitOpError("partial sums need rows (axis > 0) and a group or more, got ")
             << first;
    for (Value p : getPartials())
      if (p.getType() != want)
        return emitOpError("partial sums must be ") << want << ", got " << p.getType();
  }
  return success();
}

LogicalResult CrossEntropyOp::verify() {
  auto logits = cast<RankedTensorType>(getLogits().getType());
  auto labels = cast<RankedTensorType>(getLabels().getType());
  if (logits.getRank() < 1 || labels.getShape() != logits.getShape().drop_back())
    return emitOpError("labels ") << labels << " must have the logits' shape without its last "
                                  << "dim (the classes), got logits " << logits;
  auto rows = RankedTensorType::get(labels.getShape(), Float32Type::get(getContext()));
  if (getLoss().getType() != rows || getLse().getType() != rows)
    return emitOpError("loss and lse must be ") << rows;
  if (getGradLogits().size() != size_t(bool(getGradScale())))
    return emitOpError("writes the logits' gradient when, and only when, it has a grad_scale");
  if (getGradScale() &&
      (getGradScale().getType() != rows || getGradLogits()[0].getType() != logits))
    return emitOpError("grad_scale must be ") << rows << " and grad_logits " << logits;
  return success();
}

LogicalResult MaxPool2DBackwardOp::verify() {
  if (getOutput().getType() != getInput().getType())
    return emitOpError("the result must have the input's type");
  SmallVector<Type> forward;
  LogicalResult inferred =
      inferPoolType(getLoc(), getInput(), getKernelAttr(), getStridesAttr(), getPadsAttr(),
                    getDilationsAttr(), getCeilMode(), false, forward);
  return checkForwardShape(*this, inferred, forward, getGradOutput().getType(), "grad_output");
}

LogicalResult AvgPool2DBackwardOp::verify() {
  SmallVector<Type> forward;
  LogicalResult inferred =
      inferPoolType(getLoc(), getOutput(), getKernelAttr(), getStridesAttr(), getPadsAttr(),
                    getDilationsAttr(), getCeilMode(), false, forward);
  return checkForwardShape(*this, inferred, forward, getGradOutput().getType(), "grad_output");
}

LogicalResult ScatterAddOp::verify() {
  SmallVector<Type> forward;
  GatherOp::Adaptor adaptor(ValueRange{getOutput(), getIndices()}, (*this)->getAttrDictionary());
  LogicalResult inferred = GatherOp::inferReturnTypes(getContext(), getLoc(), adaptor, forward);
  // 16-bit float updates may add into f32 (the accumulator kept).
  auto updates = cast<RankedTensorType>(getUpdates().getType());
  if (succeeded(inferred) && forward.size() == 1 && reduceTypesCompatible(updates, forward[0]))
    forward[0] = updates;
  return checkForwardShape(*this, inferred, forward, updates, "updates");
}

} // namespace dtc::graph

#define GET_OP_CLASSES
#include "dialects/graph/GraphOps.cpp.inc"
