//===- Canonicalization.cpp - rewrites that simplify data movement --------===//
//
// Chains of transposes and reshapes collapse into one (a transpose moving
// past a reshape of leading dims to meet another), and a transpose that
// moves only size-1 dims becomes a reshape (a view, no copy). The layout
// pass (dtc-channels-last) relies on these to cancel the transposes it puts
// around each channels-last op.
//
//===----------------------------------------------------------------------===//
#include "dialects/graph/GraphOps.h"

#include "mlir/IR/PatternMatch.h"

using namespace mlir;

namespace dtc::graph {
namespace {

/// transpose(transpose(x, inner), outer) -> transpose(x, inner[outer[i]]).
struct ComposeTransposes : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp outer, PatternRewriter &rewriter) const override {
    auto inner = outer.getInput().getDefiningOp<TransposeOp>();
    if (!inner)
      return failure();
    SmallVector<int64_t> perm;
    for (int64_t d : outer.getPerm())
      perm.push_back(inner.getPerm()[d]);
    rewriter.replaceOpWithNewOp<TransposeOp>(outer, inner.getInput(), perm);
    return success();
  }
};

/// A transpose that keeps the order of the dims larger than 1 moves no
/// element: a reshape.
struct UnitTransposeToReshape : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp op, PatternRewriter &rewriter) const override {
    ArrayRef<int64_t> shape = op.getInput().getType().getShape();
    int64_t last = -1;
    for (int64_t d : op.getPerm()) {
      if (shape[d] == 1)
        continue;
      if (d < last)
        return failure();
      last = d;
    }
    rewriter.replaceOpWithNewOp<ReshapeOp>(op, op.getType(), op.getInput());
    return success();
  }
};

/// transpose(reshape(transpose(x))) where the reshape only regroups
/// leading dims the outer transpose leaves in place (heads split out of a
/// batch dim, as a grouped-query attention's k is, between k^T and k):
/// the outer transpose moves before the reshape, where it composes with
/// the inner one (and cancels when they are inverses).
struct TransposeBeforeReshape : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp outer, PatternRewriter &rewriter) const override {
    auto reshape = outer.getInput().getDefiningOp<ReshapeOp>();
    if (!reshape || !reshape->hasOneUse() || !reshape.getInput().getDefiningOp<TransposeOp>())
      return failure();
    ArrayRef<int64_t> perm = outer.getPerm();
    int64_t kept = 0; // leading dims the transpose leaves in place
    while (kept < int64_t(perm.size()) && perm[size_t(kept)] == kept)
      ++kept;
    auto from = cast<RankedTensorType>(reshape.getInput().getType());
    ArrayRef<int64_t> to = reshape.getType().getShape();
    int64_t lead = from.getRank() - (int64_t(to.size()) - kept);
    if (kept == 0 || kept == int64_t(perm.size()) || lead < 0 ||
        from.getShape().drop_front(lead) != to.drop_front(kept))
      return failure();
    SmallVector<int64_t> moved;
    for (int64_t d = 0; d < lead; ++d)
      moved.push_back(d);
    for (int64_t d : perm.drop_front(kept))
      moved.push_back(d - kept + lead);
    Value transposed = rewriter.create<TransposeOp>(outer.getLoc(), reshape.getInput(),
                                                    rewriter.getDenseI64ArrayAttr(moved));
    rewriter.replaceOpWithNewOp<ReshapeOp>(outer, outer.getType(), transposed);
    return success();
  }
};

/// reshape(reshape(x)) -> reshape(x).
struct ComposeReshapes : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ReshapeOp outer, PatternRewriter &rewriter) const override {
    auto inner = outer.getInput().getDefiningOp<ReshapeOp>();
    if (!inner)
      return failure();
    rewriter.replaceOpWithNewOp<ReshapeOp>(outer, outer.getType(), inner.getInput());
    return success();
  }
};

} // namespace

void TransposeOp::getCanonicalizationPatterns(RewritePatternSet &patterns, MLIRContext *context) {
  patterns.add<ComposeTransposes, UnitTransposeToReshape, TransposeBeforeReshape>(context);
}

void ReshapeOp::getCanonicalizationPatterns(RewritePatternSet &patterns, MLIRContext *context) {
  patterns.add<ComposeReshapes>(context);
}

} // namespace dtc::graph
