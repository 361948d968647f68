//===- GraphOps.h - ops of the dtc graph dialect ----------------*- C++ -*-===//
#ifndef DTC_DIALECTS_GRAPH_GRAPHOPS_H
#define DTC_DIALECTS_GRAPH_GRAPHOPS_H

#include "dialects/graph/GraphAttrs.h"
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

/// How an op's dims may be split over a device mesh, einsum style. The op
/// has factors (`matmul: [b,m,k] x [k,n] -> [b,m,n]`); each operand and
/// result dim is made of factors, major first (a reshape's merged dim has
/// two; a broadcast size-1 dim none). Splitting a factor over mesh axes
/// splits every dim it leads, in equal contiguous blocks; a factor may be
/// split only where it leads its dim (or follows factors of size 1).
/// A factor in no result is a reduction: splitting it leaves each device a
/// partial result, combined with `combine` (an all-reduce or reduce-scatter).
/// A `whole` factor must not be split (a softmax's axis, a window's
/// spatial dims). Cross-entropy's classes combine as no one collective
/// does (LogSumExp: the parts' log-sum-exps and picked logits; the SPMD
/// partitioner writes it out, Megatron's vocabulary-parallel loss).
struct ShardingRule {
  enum class Combine { Sum, Mean, Max, Min, LogSumExp }; // Mean: the average of the parts
  struct Factor {
    int64_t size = 1;
    bool reduction = false;
    bool whole = false;
    Combine combine = Combine::Sum;
  };
  using Dims = llvm::SmallVector<llvm::SmallVector<int, 2>, 4>; // per dim: factor ids
  llvm::SmallVector<Factor, 6> factors;
  llvm::SmallVector<Dims, 3> operands, results;

  /// A new factor of `size`; returns its id.
  int add(int64_t size, bool reduction = false, bool whole = false,
          Combine combine = Combine::Sum) {
    factors.push_back({size, reduction, whole, combine});
    return int(factors.size()) - 1;
  }
};

} // namespace dtc::graph

#include "dialects/graph/GraphInterfaces.h.inc"

namespace dtc::graph {

/// Why the mesh collective `b` cannot share a graph.bucket with `a`
/// (empty when it can): a bucket is one message, so its members are of one
/// kind (all_reduce, all_gather or reduce_scatter), on one mesh, over the
/// same axes with the same reduction, in one element type.
std::string bucketMismatch(mlir::Operation *a, mlir::Operation *b);

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
/// A reduction's (or a matmul's) result: the inferred type, or its shape in
/// f32 where the input is a 16-bit float (the accumulator kept).
bool reduceTypesCompatible(mlir::TypeRange inferred, mlir::TypeRange actual);

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

/// An attention operand's dims as [..., H, S, D] whatever its layout: with
/// `bshd`, [..., S, H, D] with its last two but one swapped (and back:
/// the swap is its own inverse). A `packed` q, k or v, [..., S, 3, H, D]
/// ([..., S, H, 3, D] `interleaved`), is one piece's [..., H, S, D].
llvm::SmallVector<int64_t, 4> headsFirst(llvm::ArrayRef<int64_t> shape, bool bshd,
                                         bool packed = false, bool interleaved = false);

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
