//===- FusionMatches.h - what fusion passes take, for the search -*- C++ -*-===//
//
// The sharding search prices ops before the fusion passes run
// (SearchFusion.cpp). Where a pass's match is more than a shape, the search
// asks the pass's own matcher, declared here, so that it prices exactly
// what will fuse.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_FUSIONMATCHES_H
#define DTC_COMPILER_FUSIONMATCHES_H

#include "dialects/graph/GraphOps.h"

#include <optional>

namespace dtc {

/// A tanh GELU's gradient after the matmul that makes its output gradient,
/// as dtc-fuse-matmul-bias joins them (graph.matmul_gelu_grad, cuBLASLt's
/// DGELU): the ops the join takes (the matmul not among them), the value
/// it replaces, the GELU's input the epilogue reads, and a view between
/// the product and the expression (null if none).
struct GeluGradientJoin {
  llvm::SmallVector<mlir::Operation *> inside;
  mlir::Value root, input;
  graph::ReshapeOp through;
};
std::optional<GeluGradientJoin> matchGeluGradient(graph::MatmulOp m);

/// The logits' gradient autodiff wrote after `ce` from its lse, as
/// dtc-fuse-loss-gradient has the row kernel write it: its last value (of
/// the logits' type; null when there is none), the row factor in `factor`,
/// the ops it is made of in `ops` (in the order made).
mlir::Value lossGradient(graph::CrossEntropyOp ce, mlir::Value &factor,
                         llvm::SmallVectorImpl<mlir::Operation *> &ops);

} // namespace dtc

#endif // DTC_COMPILER_FUSIONMATCHES_H
