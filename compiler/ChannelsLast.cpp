//===- ChannelsLast.cpp - NHWC convolutions and pools ---------------------===//
//
// Each f32 conv2d and 2-D pool becomes its channels-last form between two
// transposes (NCHW -> NHWC before, back after). Transposes then sink through
// elementwise ops and reductions, and a transpose meeting its inverse
// cancels (TransposeOp's canonicalization), so a chain of convolutions,
// pools and activations keeps its data NHWC and pays for two transposes at
// its ends instead of two layout changes per op. docs/cpu-kernels.md says
// why: oneDNN's fastest convolutions read and write NHWC.
//
//===----------------------------------------------------------------------===//
#include "compiler/CompileNotes.h"
#include "compiler/Passes.h"

#include "dialects/graph/GraphOps.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace dtc {
#define GEN_PASS_DEF_CHANNELSLAST
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

constexpr int64_t kToChannelsLast[] = {0, 2, 3, 1};
constexpr int64_t kFromChannelsLast[] = {0, 3, 1, 2};

/// Whether every use of `value` is by `user`.
bool onlyUsedBy(Value value, Operation *user) {
  return llvm::all_of(value.getUsers(), [&](Operation *u) { return u == user; });
}

/// Rewrites the NCHW conv2d or pool `op` as its channels-last form between
/// transposes.
void convert(Operation *op, StringAttr channelsLast) {
  OpBuilder b(op);
  Location loc = op->getLoc();
  Value input = b.create<graph::TransposeOp>(loc, op->getOperand(0), kToChannelsLast);
  Operation *nhwc = b.clone(*op);
  nhwc->setOperand(0, input);
  nhwc->setAttr(channelsLast, b.getUnitAttr());
  auto type = cast<RankedTensorType>(op->getResult(0).getType());
  nhwc->getResult(0).setType(
      RankedTensorType::get(graph::toChannelsLast(type.getShape()), type.getElementType()));
  Value output = b.create<graph::TransposeOp>(loc, nhwc->getResult(0), kFromChannelsLast);
  op->getResult(0).replaceAllUsesWith(output);
  op->erase();
}

/// op(transpose(x, p), transpose(y, p), scalar...) -> transpose(op(x, y, scalar...), p)
/// for elementwise ops without broadcasting (rank-0 operands aside).
struct SinkThroughElementwise : RewritePattern {
  explicit SinkThroughElementwise(MLIRContext *context)
      : RewritePattern(MatchAnyOpTypeTag(), /*benefit=*/1, context) {}

  LogicalResult matchAndRewrite(Operation *op, PatternRewriter &rewriter) const override {
    if (!op->hasTrait<graph::GraphElementwise>() || isa<graph::BroadcastOp>(op) ||
        op->getNumResults() != 1)
      return failure();
    auto type = cast<RankedTensorType>(op->getResult(0).getType());
    ArrayRef<int64_t> perm;
    SmallVector<Value> operands;
    for (Value operand : op->getOperands()) {
      if (cast<RankedTensorType>(operand.getType()).getRank() == 0) {
        operands.push_back(operand);
        continue;
      }
      auto transpose = operand.getDefiningOp<graph::TransposeOp>();
      if (!transpose || !onlyUsedBy(operand, op) ||
          cast<RankedTensorType>(operand.getType()).getShape() != type.getShape() ||
          (!perm.empty() && transpose.getPerm() != perm))
        return failure();
      perm = transpose.getPerm();
      operands.push_back(transpose.getInput());
    }
    if (perm.empty())
      return failure();
    auto inner = cast<RankedTensorType>(
        llvm::find_if(operands, [](Value v) {
          return cast<RankedTensorType>(v.getType()).getRank() > 0;
        })->getType());
    Operation *sunk = rewriter.clone(*op);
    sunk->setOperands(operands);
    sunk->getResult(0).setType(RankedTensorType::get(inner.getShape(), type.getElementType()));
    rewriter.replaceOpWithNewOp<graph::TransposeOp>(op, sunk->getResult(0), perm);
    return success();
  }
};

/// reduce(transpose(x, p), axes) -> transpose(reduce(x, p[axes]), q), q the
/// order of the kept dims.
template <class ReduceOp> struct SinkThroughReduce : OpRewritePattern<ReduceOp> {
  using OpRewritePattern<ReduceOp>::OpRewritePattern;

  LogicalResult matchAndRewrite(ReduceOp op, PatternRewriter &rewriter) const override {
    auto transpose = op.getInput().template getDefiningOp<graph::TransposeOp>();
    if (!transpose || !onlyUsedBy(op.getInput(), op))
      return failure();
    ArrayRef<int64_t> perm = transpose.getPerm();
    SmallVector<bool> reduced(perm.size(), false);
    for (int64_t axis : op.getAxes())
      reduced[perm[axis]] = true;
    SmallVector<int64_t> axes;
    for (size_t d = 0; d < perm.size(); ++d)
      if (reduced[d])
        axes.push_back(d);
    // Where each input dim of x lands in the inner reduction's result.
    SmallVector<int64_t> position(perm.size(), -1);
    int64_t next = 0;
    for (size_t d = 0; d < perm.size(); ++d)
      if (op.getKeepdims() || !reduced[d])
        position[d] = next++;
    SmallVector<int64_t> outer;
    for (int64_t d : perm)
      if (position[d] >= 0)
        outer.push_back(position[d]);
    auto inner = rewriter.create<ReduceOp>(op.getLoc(), transpose.getInput(), axes,
                                           op.getKeepdims());
    rewriter.replaceOpWithNewOp<graph::TransposeOp>(op, inner.getResult(), outer);
    return success();
  }
};

struct ChannelsLast : impl::ChannelsLastBase<ChannelsLast> {
  void runOnOperation() override {
    MLIRContext *context = &getContext();
    SmallVector<Operation *> ops;
    getOperation().walk([&](Operation *op) {
      if (!isa<graph::Conv2DOp, graph::MaxPool2DOp, graph::AvgPool2DOp>(op) ||
          op->hasAttr("channels_last"))
        return;
      auto type = cast<RankedTensorType>(op->getResult(0).getType());
      if (type.getElementType().isF32())
        ops.push_back(op);
    });
    if (ops.empty())
      return;
    int transposesBefore = 0;
    getOperation().walk([&](graph::TransposeOp) { ++transposesBefore; });
    StringAttr channelsLast = StringAttr::get(context, "channels_last");
    for (Operation *op : ops)
      convert(op, channelsLast);

    RewritePatternSet patterns(context);
    patterns.add<SinkThroughElementwise, SinkThroughReduce<graph::ReduceSumOp>,
                 SinkThroughReduce<graph::ReduceMeanOp>, SinkThroughReduce<graph::ReduceMaxOp>,
                 SinkThroughReduce<graph::ReduceMinOp>>(context);
    graph::TransposeOp::getCanonicalizationPatterns(patterns, context);
    graph::ReshapeOp::getCanonicalizationPatterns(patterns, context);
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
    int transposes = 0;
    getOperation().walk([&](graph::TransposeOp) { ++transposes; });
    addNote(getOperation(), "layout: " + std::to_string(ops.size()) +
                                " convolutions and pools run channels-last (NHWC), at the cost "
                                "of " +
                                std::to_string(transposes - transposesBefore) +
                                " transposes to and from NCHW");
  }
};

} // namespace
} // namespace dtc
