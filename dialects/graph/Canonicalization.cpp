//===- Canonicalization.cpp - rewrites that simplify data movement --------===//
//
// Chains of transposes and reshapes collapse into one, and a transpose that
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
  patterns.add<ComposeTransposes, UnitTransposeToReshape>(context);
}

void ReshapeOp::getCanonicalizationPatterns(RewritePatternSet &patterns, MLIRContext *context) {
  patterns.add<ComposeReshapes>(context);
}

} // namespace dtc::graph
