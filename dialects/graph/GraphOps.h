//===- GraphOps.h - ops of the dtc graph dialect ----------------*- C++ -*-===//
#ifndef DTC_DIALECTS_GRAPH_GRAPHOPS_H
#define DTC_DIALECTS_GRAPH_GRAPHOPS_H

#include "dialects/graph/GraphDialect.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace dtc::graph {

/// What an op costs per execution (the CostOp interface): multiply-adds
/// count as 2 FLOPs, other arithmetic 1 per element; `bytes` counts every
/// operand read once and every result written once, so that a fused
/// kernel's intermediates cost nothing.
struct OpCost {
  enum Class { Free, Matmul, Conv, Elementwise, Reduce, Norm, DataMovement };
  double flops = 0, bytes = 0;
  Class opClass = Free; // Free: parameters, constants, views (no kernel)
};

} // namespace dtc::graph

#include "dialects/graph/GraphInterfaces.h.inc"

namespace dtc::graph {

/// Marker trait of elementwise ops (Graph_Elementwise in GraphOps.td).
template <typename ConcreteType>
class GraphElementwise : public mlir::OpTrait::TraitBase<ConcreteType, GraphElementwise> {};

// Shape rules shared by op families (defined in GraphOps.cpp). Each pushes
// the result type(s), or emits an error at `loc` and fails.

/// Broadcast of the operands' shapes; the element type is the first
/// operand's, or `elementType` when given.
mlir::LogicalResult inferBroadcastType(std::optional<mlir::Location> loc,
                                       mlir::ValueRange operands,
                                       mlir::Type elementType,
                                       llvm::SmallVectorImpl<mlir::Type> &types);

mlir::LogicalResult inferReduceType(std::optional<mlir::Location> loc,
                                    mlir::Value input,
                                    mlir::DenseI64ArrayAttr axes, bool keepdims,
                                    llvm::SmallVectorImpl<mlir::Type> &types);

mlir::LogicalResult inferPoolType(std::optional<mlir::Location> loc,
                                  mlir::Value input,
                                  mlir::DenseI64ArrayAttr kernel,
                                  mlir::DenseI64ArrayAttr strides,
                                  mlir::DenseI64ArrayAttr pads,
                                  mlir::DenseI64ArrayAttr dilations,
                                  bool ceilMode, bool channelsLast,
                                  llvm::SmallVectorImpl<mlir::Type> &types);

/// NHWC dims from NCHW ones, and back.
llvm::SmallVector<int64_t, 4> toChannelsLast(llvm::ArrayRef<int64_t> nchw);
llvm::SmallVector<int64_t, 4> fromChannelsLast(llvm::ArrayRef<int64_t> nhwc);

} // namespace dtc::graph

#define GET_OP_CLASSES
#include "dialects/graph/GraphOps.h.inc"

namespace dtc::graph {

/// Batch norm as training computes it: normalised with the batch's mean and
/// (biased) variance over every dim but 1, and the running statistics
/// updated as running * momentum + batch * (1 - momentum) (ONNX's rule).
/// Built at `b`'s insertion point from graph ops (which have gradients);
/// `op` itself is left in place.
struct BatchNormTraining {
  mlir::Value output, runningMean, runningVariance;
};
BatchNormTraining expandBatchNormForTraining(mlir::OpBuilder &b, BatchNormOp op);

} // namespace dtc::graph

#endif // DTC_DIALECTS_GRAPH_GRAPHOPS_H
