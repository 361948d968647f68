//===- RotaryConverter.cpp - ONNX RotaryEmbedding (opset 23) in graph ops -===//
//
// Rotary position embeddings as the op's definition spells them: the input
// as [batch, sequence, heads, head size] (a 3-D input split into
// `num_heads`, a 4-D one [batch, heads, sequence, head size] transposed),
// the first `rotary_embedding_dim` of each head rotated pairwise by the
// cos and sin caches (gathered at `position_ids` when given), the pairs
// either the two halves or (`interleaved`) the even and odd elements, the
// rest of the head passed through. Slices, a gather and elementwise ops:
// their gradients, sharding rules and kernels are theirs.
// docs/onnx-lowerings.md.
//
//===----------------------------------------------------------------------===//
#include "frontends/onnx/NodeContext.h"

#include "dialects/graph/GraphOps.h"

using namespace mlir;
using namespace dtc::graph;

namespace dtc::onnx {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// `v`'s elements [first, first + count * step) in steps of `step` along
/// its last dim.
FailureOr<Value> lastDimSlice(NodeContext &ctx, Value v, int64_t first, int64_t count,
                              int64_t step = 1) {
  auto t = typeOf(v);
  int64_t rank = t.getRank();
  SmallVector<int64_t> offsets(size_t(rank), 0), sizes(t.getShape()), strides(size_t(rank), 1);
  offsets.back() = first;
  sizes.back() = count;
  strides.back() = step;
  return ctx.create<SliceOp>(v, {ctx.namedI64s("offsets", offsets), ctx.namedI64s("sizes", sizes),
                                 ctx.namedI64s("strides", strides)});
}

LogicalResult convertRotaryEmbedding(NodeContext &ctx) {
  auto xType = ctx.inputType(0), cosType = ctx.inputType(1), sinType = ctx.inputType(2);
  if (failed(xType) || failed(cosType) || failed(sinType))
    return failure();
  int64_t rank = xType->getRank();
  if (rank != 3 && rank != 4)
    return ctx.fail("the input must be 3-D [batch, sequence, hidden] or 4-D [batch, heads, "
                    "sequence, head size], got rank " +
                    std::to_string(rank));
  auto x = ctx.input(0), cos = ctx.input(1), sin = ctx.input(2);
  if (failed(x) || failed(cos) || failed(sin))
    return failure();
  int64_t batch = xType->getDimSize(0);
  Value X = *x;
  // [batch, sequence, heads, head size].
  if (rank == 4) {
    auto t = ctx.create<TransposeOp>(X, {ctx.namedI64s("perm", {0, 2, 1, 3})});
    if (failed(t))
      return failure();
    X = *t;
  } else {
    int64_t heads = ctx.attrInt("num_heads", 0), hidden = xType->getDimSize(2);
    if (heads < 1 || hidden % heads)
      return ctx.fail("a 3-D input needs num_heads dividing its hidden size " +
                      std::to_string(hidden) + ", got " + std::to_string(heads));
    auto r = ctx.createTyped<ReshapeOp>(
        xType->clone({batch, xType->getDimSize(1), heads, hidden / heads}), X);
    if (failed(r))
      return failure();
    X = *r;
  }
  auto t4 = typeOf(X);
  int64_t sequence = t4.getDimSize(1), headSize = t4.getDimSize(3);
  int64_t rotated = ctx.attrInt("rotary_embedding_dim", 0);
  if (rotated == 0)
    rotated = headSize;
  if (rotated < 2 || rotated > headSize || rotated % 2)
    return ctx.fail("rotary_embedding_dim " + std::to_string(rotated) +
                    " must be even and at most the head size " + std::to_string(headSize));
  int64_t half = rotated / 2;

  // The caches at each position: [batch, sequence, half], then a heads dim.
  Value C = *cos, S = *sin;
  if (ctx.hasInput(3)) {
    auto positions = ctx.input(3);
    if (failed(positions))
      return failure();
    auto c = ctx.create<GatherOp>(ValueRange{C, *positions}, {ctx.namedI64("axis", 0)});
    auto s = ctx.create<GatherOp>(ValueRange{S, *positions}, {ctx.namedI64("axis", 0)});
    if (failed(c) || failed(s))
      return failure();
    C = *c, S = *s;
  }
  if (typeOf(C).getRank() != 3 || typeOf(C).getDimSize(0) != batch ||
      typeOf(C).getDimSize(1) != sequence || typeOf(C).getDimSize(2) < half ||
      typeOf(S) != typeOf(C))
    return ctx.fail("cos_cache and sin_cache must give [batch " + std::to_string(batch) +
                    ", sequence " + std::to_string(sequence) + ", at least " +
                    std::to_string(half) + "] values (gathered at position_ids when given)");
  auto cosHalf = lastDimSlice(ctx, C, 0, half), sinHalf = lastDimSlice(ctx, S, 0, half);
  if (failed(cosHalf) || failed(sinHalf))
    return failure();
  auto c4 = ctx.create<UnsqueezeOp>(*cosHalf, {ctx.namedI64s("axes", {2})});
  auto s4 = ctx.create<UnsqueezeOp>(*sinHalf, {ctx.namedI64s("axes", {2})});
  if (failed(c4) || failed(s4))
    return failure();

  // The pairs rotated: halves, or even and odd elements.
  bool interleaved = ctx.attrInt("interleaved", 0) != 0;
  auto x1 = interleaved ? lastDimSlice(ctx, X, 0, half, 2) : lastDimSlice(ctx, X, 0, half);
  auto x2 = interleaved ? lastDimSlice(ctx, X, 1, half, 2) : lastDimSlice(ctx, X, half, half);
  if (failed(x1) || failed(x2))
    return failure();
  auto product = [&](Value a, Value b) { return ctx.create<MulOp>(ValueRange{a, b}); };
  auto cx1 = product(*c4, *x1), sx2 = product(*s4, *x2), sx1 = product(*s4, *x1),
       cx2 = product(*c4, *x2);
  if (failed(cx1) || failed(sx2) || failed(sx1) || failed(cx2))
    return failure();
  auto real = ctx.create<SubOp>(ValueRange{*cx1, *sx2});
  auto imag = ctx.create<AddOp>(ValueRange{*sx1, *cx2});
  if (failed(real) || failed(imag))
    return failure();
  FailureOr<Value> joined = failure();
  if (interleaved) { // (real, imag) pairs back in place of (even, odd)
    auto r5 = ctx.create<UnsqueezeOp>(*real, {ctx.namedI64s("axes", {4})});
    auto i5 = ctx.create<UnsqueezeOp>(*imag, {ctx.namedI64s("axes", {4})});
    if (failed(r5) || failed(i5))
      return failure();
    auto pairs = ctx.create<ConcatOp>(ValueRange{*r5, *i5}, {ctx.namedI64("axis", 4)});
    if (failed(pairs))
      return failure();
    joined = ctx.createTyped<ReshapeOp>(t4.clone({batch, sequence, t4.getDimSize(2), rotated}),
                                        *pairs);
  } else {
    joined = ctx.create<ConcatOp>(ValueRange{*real, *imag}, {ctx.namedI64("axis", 3)});
  }
  if (failed(joined))
    return failure();
  Value out = *joined;
  if (rotated < headSize) { // the rest of each head as it was
    auto rest = lastDimSlice(ctx, X, rotated, headSize - rotated);
    auto whole = failed(rest) ? rest
                              : ctx.create<ConcatOp>(ValueRange{out, *rest},
                                                     {ctx.namedI64("axis", 3)});
    if (failed(whole))
      return failure();
    out = *whole;
  }
  auto back = rank == 4 ? ctx.create<TransposeOp>(out, {ctx.namedI64s("perm", {0, 2, 1, 3})})
                        : ctx.createTyped<ReshapeOp>(*xType, out);
  return ctx.result(back);
}

const OpConverter kConverters[] = {
    {"RotaryEmbedding", 23, convertRotaryEmbedding},
};

} // namespace

llvm::ArrayRef<OpConverter> rotaryConverters() { return kConverters; }

} // namespace dtc::onnx
