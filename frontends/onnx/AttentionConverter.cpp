//===- AttentionConverter.cpp - ONNX Attention (opset 23) in graph ops -----===//
//
// The fused op as its definition spells it: 3-D inputs split into heads,
// past keys and values concatenated in front, grouped-query heads repeated
// (each KV head for its group of query heads), scores Q K^T * scale,
// softcap, the mask (boolean or additive, padded to the key length) and the
// causal triangle added, softmax, times V, heads merged again. Matmuls,
// softmax and elementwise ops: the sharding search, the gradients and the
// kernels are theirs. docs/onnx-lowerings.md.
//
//===----------------------------------------------------------------------===//
#include "frontends/onnx/NodeContext.h"

#include "dialects/graph/ConstantFolding.h"
#include "dialects/graph/GraphOps.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace dtc::graph;

namespace dtc::onnx {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// [B, S, H*D] -> [B, H, S, D].
FailureOr<Value> splitHeads(NodeContext &ctx, Value v, int64_t heads) {
  auto t = typeOf(v);
  if (heads < 1 || t.getDimSize(2) % heads)
    return ctx.fail("hidden size " + std::to_string(t.getDimSize(2)) +
                    " does not split into " + std::to_string(heads) + " heads");
  auto r = ctx.createTyped<ReshapeOp>(
      t.clone({t.getDimSize(0), t.getDimSize(1), heads, t.getDimSize(2) / heads}), v);
  if (failed(r))
    return failure();
  return ctx.create<TransposeOp>(*r, {ctx.namedI64s("perm", {0, 2, 1, 3})});
}

/// Each of `v`'s heads repeated `times` times in place: [B, H, S, D] ->
/// [B, H * times, S, D] as h0 h0 h1 h1 ... (grouped-query attention).
FailureOr<Value> repeatHeads(NodeContext &ctx, Value v, int64_t times) {
  if (times == 1)
    return v;
  auto t = typeOf(v);
  int64_t b = t.getDimSize(0), h = t.getDimSize(1), s = t.getDimSize(2), d = t.getDimSize(3);
  auto one = ctx.createTyped<ReshapeOp>(t.clone({b, h, 1, s, d}), v);
  if (failed(one))
    return failure();
  auto wide = ctx.create<BroadcastOp>(*one, {ctx.namedI64s("shape", {b, h, times, s, d})});
  if (failed(wide))
    return failure();
  return ctx.createTyped<ReshapeOp>(t.clone({b, h * times, s, d}), *wide);
}

LogicalResult convertAttention(NodeContext &ctx) {
  auto qType = ctx.inputType(0), kType = ctx.inputType(1), vType = ctx.inputType(2);
  if (failed(qType) || failed(kType) || failed(vType))
    return failure();
  int64_t rank = qType->getRank();
  if ((rank != 3 && rank != 4) || kType->getRank() != rank || vType->getRank() != rank)
    return ctx.fail("Q, K and V must all be 3-D or all 4-D");
  if (ctx.wantsOutput(1) != ctx.wantsOutput(2))
    return ctx.fail("present_key and present_value come together");
  Type element = qType->getElementType();
  auto q = ctx.input(0), k = ctx.input(1), v = ctx.input(2);
  if (failed(q) || failed(k) || failed(v))
    return failure();
  Value Q = *q, K = *k, V = *v;
  if (rank == 3) {
    int64_t qHeads = ctx.attrInt("q_num_heads", 0), kvHeads = ctx.attrInt("kv_num_heads", 0);
    if (qHeads < 1 || kvHeads < 1)
      return ctx.fail("3-D inputs need q_num_heads and kv_num_heads");
    auto q4 = splitHeads(ctx, Q, qHeads), k4 = splitHeads(ctx, K, kvHeads),
         v4 = splitHeads(ctx, V, kvHeads);
    if (failed(q4) || failed(k4) || failed(v4))
      return failure();
    Q = *q4, K = *k4, V = *v4;
  }
  // The cache: past keys and values in front of the new ones.
  int64_t past = 0;
  if (ctx.hasInput(4) != ctx.hasInput(5))
    return ctx.fail("past_key and past_value come together");
  if (ctx.hasInput(4)) {
    auto pk = ctx.input(4), pv = ctx.input(5);
    if (failed(pk) || failed(pv))
      return failure();
    past = typeOf(*pk).getDimSize(2);
    auto ck = ctx.create<ConcatOp>(ValueRange{*pk, K}, {ctx.namedI64("axis", 2)});
    auto cv = ctx.create<ConcatOp>(ValueRange{*pv, V}, {ctx.namedI64("axis", 2)});
    if (failed(ck) || failed(cv))
      return failure();
    K = *ck, V = *cv;
  }
  if (ctx.wantsOutput(1)) {
    ctx.setOutput(1, K);
    ctx.setOutput(2, V);
  }
  int64_t batch = typeOf(Q).getDimSize(0), qHeads = typeOf(Q).getDimSize(1),
          kvHeads = typeOf(K).getDimSize(1), qLen = typeOf(Q).getDimSize(2),
          kvLen = typeOf(K).getDimSize(2), headSize = typeOf(Q).getDimSize(3);
  if (qHeads % kvHeads || typeOf(V).getDimSize(1) != kvHeads)
    return ctx.fail(std::to_string(qHeads) + " query heads do not group over " +
                    std::to_string(kvHeads) + " key/value heads");
  auto kRep = repeatHeads(ctx, K, qHeads / kvHeads), vRep = repeatHeads(ctx, V, qHeads / kvHeads);
  if (failed(kRep) || failed(vRep))
    return failure();

  // Scores, scaled and softcapped.
  double scale = ctx.attribute("scale") ? ctx.attrFloat("scale", 1.0f)
                                        : 1.0 / std::sqrt(double(headSize));
  auto qk = ctx.create<MatmulOp>(ValueRange{Q, *kRep},
                                 {ctx.named("transpose_rhs", ctx.builder().getBoolAttr(true))});
  if (failed(qk))
    return failure();
  auto scores = ctx.create<MulOp>(ValueRange{*qk, ctx.scalar(scale, element)});
  if (failed(scores))
    return failure();
  Value s = *scores;
  double softcap = ctx.attrFloat("softcap", 0.0f);
  if (softcap > 0) {
    auto divided = ctx.create<MulOp>(ValueRange{s, ctx.scalar(1.0 / softcap, element)});
    auto tanh = failed(divided) ? divided : ctx.create<TanhOp>(ValueRange{*divided});
    auto capped = failed(tanh) ? tanh : ctx.create<MulOp>(ValueRange{*tanh, ctx.scalar(softcap, element)});
    if (failed(capped))
      return failure();
    s = *capped;
  }
  Value capped = s;

  // The bias: the mask (padded with "masked" to the key length), then the
  // causal triangle (offset by the past).
  const double minusInf = -std::numeric_limits<double>::infinity();
  Value bias;
  auto addToBias = [&](Value term) -> LogicalResult {
    if (!bias) {
      bias = term;
      return success();
    }
    auto sum = ctx.create<AddOp>(ValueRange{bias, term});
    if (failed(sum))
      return failure();
    bias = *sum;
    return success();
  };
  if (ctx.hasInput(3)) {
    auto maskType = ctx.inputType(3);
    auto mask = ctx.input(3);
    if (failed(maskType) || failed(mask))
      return failure();
    Value m = *mask;
    if (maskType->getElementType().isInteger(1)) {
      auto where = ctx.create<WhereOp>(
          ValueRange{m, ctx.scalar(0.0, element), ctx.scalar(minusInf, element)});
      if (failed(where))
        return failure();
      m = *where;
    }
    int64_t given = typeOf(m).getShape().back();
    if (given < kvLen) {
      SmallVector<int64_t> shape(typeOf(m).getShape());
      shape.back() = kvLen - given;
      auto fill = ctx.constant(DenseElementsAttr::get(
          RankedTensorType::get(shape, element),
          ctx.builder().getFloatAttr(element, minusInf)));
      auto padded = ctx.create<ConcatOp>(ValueRange{m, fill},
                                         {ctx.namedI64("axis", typeOf(m).getRank() - 1)});
      if (failed(padded))
        return failure();
      m = *padded;
    } else if (given != kvLen) {
      return ctx.fail("attn_mask's last dim " + std::to_string(given) +
                      " is longer than the key length " + std::to_string(kvLen));
    }
    bias = m;
  }
  if (ctx.attrInt("is_causal", 0)) {
    SmallVector<double> triangle;
    for (int64_t i = 0; i < qLen; ++i)
      for (int64_t j = 0; j < kvLen; ++j)
        triangle.push_back(j - past > i ? minusInf : 0.0);
    Value causal =
        ctx.constant(makeDense(RankedTensorType::get({qLen, kvLen}, element), triangle));
    if (failed(addToBias(causal)))
      return failure();
  }
  // Keys past each sample's length (nonpad_kv_seqlen) are masked too.
  if (ctx.hasInput(6)) {
    auto lengths = ctx.input(6);
    if (failed(lengths))
      return failure();
    SmallVector<int64_t> positions;
    for (int64_t j = 0; j < kvLen; ++j)
      positions.push_back(j);
    auto i64 = ctx.builder().getI64Type();
    Value position = ctx.constant(
        DenseElementsAttr::get(RankedTensorType::get({kvLen}, i64), ArrayRef(positions)));
    auto length = ctx.createTyped<ReshapeOp>(RankedTensorType::get({batch, 1, 1, 1}, i64),
                                             *lengths);
    auto inside = failed(length) ? length : ctx.create<LessOp>(ValueRange{position, *length});
    auto padding = failed(inside) ? inside
                                  : ctx.create<WhereOp>(ValueRange{*inside, ctx.scalar(0.0, element),
                                                                   ctx.scalar(minusInf, element)});
    if (failed(padding))
      return failure();
    if (failed(addToBias(*padding)))
      return failure();
  }
  if (bias) {
    auto added = ctx.create<AddOp>(ValueRange{s, bias});
    if (failed(added))
      return failure();
    s = *added;
  }
  auto probabilities = ctx.create<SoftmaxOp>(ValueRange{s}, {ctx.namedI64("axis", 3)});
  if (failed(probabilities))
    return failure();
  if (ctx.wantsOutput(3)) {
    int64_t mode = ctx.attrInt("qk_matmul_output_mode", 0);
    if (mode < 0 || mode > 3)
      return ctx.fail("qk_matmul_output_mode " + std::to_string(mode) + " is not 0 to 3");
    ctx.setOutput(3, mode == 0 ? *scores : mode == 1 ? capped : mode == 2 ? s : *probabilities);
  }
  auto y = ctx.create<MatmulOp>(ValueRange{*probabilities, *vRep});
  if (failed(y))
    return failure();
  Value out = *y;
  if (rank == 3) {
    auto merged = ctx.create<TransposeOp>(out, {ctx.namedI64s("perm", {0, 2, 1, 3})});
    if (failed(merged))
      return failure();
    auto t = typeOf(*merged);
    auto flat = ctx.createTyped<ReshapeOp>(
        t.clone({batch, qLen, t.getDimSize(2) * t.getDimSize(3)}), *merged);
    if (failed(flat))
      return failure();
    out = *flat;
  }
  ctx.setOutput(0, out);
  return success();
}

const OpConverter kConverters[] = {
    // softmax_precision: the softmax computes in the inputs' type.
    {"Attention", 23, convertAttention, "softmax_precision"},
};

} // namespace

llvm::ArrayRef<OpConverter> attentionConverters() { return kConverters; }

} // namespace dtc::onnx
