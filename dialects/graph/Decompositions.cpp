//===- Decompositions.cpp - ops spelled out in simpler graph ops -----------===//
#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;

namespace dtc::graph {

BatchNormTraining expandBatchNormForTraining(OpBuilder &b, BatchNormOp op) {
  Location loc = op.getLoc();
  Value x = op.getInput();
  auto type = cast<RankedTensorType>(x.getType());
  Type element = type.getElementType();
  auto scalar = [&](double v) -> Value {
    auto t = RankedTensorType::get({}, element);
    return b.create<ConstantOp>(loc, DenseElementsAttr::get(t, b.getFloatAttr(element, v)));
  };
  SmallVector<int64_t> axes{0};
  for (int64_t d = 2; d < type.getRank(); ++d)
    axes.push_back(d);
  SmallVector<int64_t> channelShape(type.getRank() - 1, 1);
  channelShape[0] = type.getDimSize(1);
  auto reshaped = [&](Value v, ArrayRef<int64_t> shape) -> Value {
    return b.create<ReshapeOp>(loc, cast<RankedTensorType>(v.getType()).clone(shape), v);
  };
  Value mean = b.create<ReduceMeanOp>(loc, x, axes, true);
  Value centred = b.create<SubOp>(loc, x, mean);
  Value variance =
      b.create<ReduceMeanOp>(loc, b.create<MulOp>(loc, centred, centred), axes, true);
  Value invStd = b.create<ReciprocalOp>(
      loc, b.create<SqrtOp>(loc, b.create<AddOp>(loc, variance, scalar(op.getEpsilon().convertToDouble()))));
  Value normalised = b.create<MulOp>(loc, centred, invStd);
  Value y = b.create<AddOp>(
      loc, b.create<MulOp>(loc, normalised, reshaped(op.getScale(), channelShape)),
      reshaped(op.getBias(), channelShape));
  double momentum = op.getMomentum().convertToDouble();
  SmallVector<int64_t> vectorShape{type.getDimSize(1)};
  auto updated = [&](Value running, Value batch) -> Value {
    Value kept = b.create<MulOp>(loc, running, scalar(momentum));
    Value fresh = b.create<MulOp>(loc, reshaped(batch, vectorShape), scalar(1.0 - momentum));
    return b.create<AddOp>(loc, kept, fresh);
  };
  return {y, updated(op.getMean(), mean), updated(op.getVariance(), variance)};
}

} // namespace dtc::graph
