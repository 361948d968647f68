//===- FuseConv.cpp - batch norms and ReLUs into convolutions -------------===//
#include "compiler/BufferLiveness.h"
#include "compiler/CompileNotes.h"
#include "compiler/Passes.h"

#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

namespace dtc {
#define GEN_PASS_DEF_FUSECONV
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

/// The conv2d that produced `value`, when nothing else reads it.
graph::Conv2DOp soleConvProducer(Value value) {
  auto conv = value.getDefiningOp<graph::Conv2DOp>();
  return conv && conv->hasOneUse() ? conv : graph::Conv2DOp();
}

/// conv -> batch_norm as one conv2d with folded weight and bias; null when
/// the pattern does not apply.
graph::Conv2DOp foldBatchNorm(graph::BatchNormOp norm) {
  graph::Conv2DOp conv = soleConvProducer(norm.getInput());
  if (!conv || conv.getRelu() || !isPersistentValue(conv.getWeight()) ||
      (conv.getBias() && !isPersistentValue(conv.getBias())))
    return {};
  for (Value v : {norm.getScale(), norm.getBias(), norm.getMean(), norm.getVariance()})
    if (!isPersistentValue(v))
      return {};
  auto weightType = cast<RankedTensorType>(conv.getWeight().getType());
  auto channelType = cast<RankedTensorType>(norm.getScale().getType());
  Type element = channelType.getElementType();
  if (weightType.getElementType() != element)
    return {};

  OpBuilder b(norm);
  Location loc = norm.getLoc();
  auto scalar = [&](double v) -> Value {
    auto type = RankedTensorType::get({}, element);
    return b.create<graph::ConstantOp>(loc, DenseElementsAttr::get(type, b.getFloatAttr(element, v)));
  };
  // s = scale / sqrt(variance + epsilon)
  Value s = b.create<graph::DivOp>(
      loc, norm.getScale(),
      b.create<graph::SqrtOp>(
          loc, b.create<graph::AddOp>(loc, norm.getVariance(),
                                      scalar(norm.getEpsilon().convertToDouble()))));
  // weight * s over the output channels
  auto column = RankedTensorType::get({channelType.getDimSize(0), 1, 1, 1}, element);
  Value weight = b.create<graph::MulOp>(loc, conv.getWeight(),
                                        b.create<graph::ReshapeOp>(loc, column, s));
  // (bias - mean) * s + beta
  Value centred = conv.getBias()
                      ? Value(b.create<graph::SubOp>(loc, conv.getBias(), norm.getMean()))
                      : Value(b.create<graph::NegOp>(loc, norm.getMean()));
  Value bias = b.create<graph::AddOp>(loc, b.create<graph::MulOp>(loc, centred, s),
                                      norm.getBias());
  auto fused = b.create<graph::Conv2DOp>(
      conv.getLoc(), conv.getInput(), weight, bias, conv.getStridesAttr(), conv.getPadsAttr(),
      conv.getDilationsAttr(), conv.getGroupsAttr(), /*relu=*/nullptr,
      conv.getChannelsLastAttr());
  norm.getOutput().replaceAllUsesWith(fused.getOutput());
  norm->erase();
  conv->erase();
  return fused;
}

struct FuseConv : impl::FuseConvBase<FuseConv> {
  void runOnOperation() override {
    SmallVector<graph::BatchNormOp> norms;
    getOperation().walk([&](graph::BatchNormOp norm) { norms.push_back(norm); });
    int foldedNorms = 0, foldedRelus = 0;
    for (graph::BatchNormOp norm : norms)
      foldedNorms += bool(foldBatchNorm(norm));

    SmallVector<graph::ReluOp> relus;
    getOperation().walk([&](graph::ReluOp relu) { relus.push_back(relu); });
    for (graph::ReluOp relu : relus) {
      graph::Conv2DOp conv = soleConvProducer(relu.getInput());
      if (!conv || conv.getRelu())
        continue;
      conv.setRelu(true);
      relu.getOutput().replaceAllUsesWith(conv.getOutput());
      relu->erase();
      ++foldedRelus;
    }
    if (!norms.empty() || foldedRelus)
      addNote(getOperation(), "convolutions: " + std::to_string(foldedNorms) + " of " +
                                  std::to_string(norms.size()) +
                                  " batch norms folded into their convolution's weights, " +
                                  std::to_string(foldedRelus) + " of " +
                                  std::to_string(relus.size()) +
                                  " ReLUs applied in a convolution's epilogue");
  }
};

} // namespace
} // namespace dtc
