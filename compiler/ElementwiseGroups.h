//===- ElementwiseGroups.h - which elementwise ops share a kernel -*- C++ -*-===//
//
// dtc-fuse-elementwise outlines these groups into graph.fused kernels; the
// sharding search prices elementwise ops by the same groups (what a kernel
// keeps in registers costs no memory traffic, and a group launches once).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "mlir/IR/Block.h"
#include "llvm/ADT/SmallVector.h"

namespace dtc {

/// Whether `op` (may be null) is a graph elementwise op.
bool isElementwise(mlir::Operation *op);

/// The elementwise ops of `block` in kernels, each group in block order (its
/// last op the root, where its kernel runs): a root and the producers that
/// only the group reads; then groups joined into their consumers' where one
/// kernel can read the inputs once and write both groups' results (an
/// optimizer's moments and the parameter they update).
llvm::SmallVector<llvm::SmallVector<mlir::Operation *>> elementwiseGroups(mlir::Block &block);

} // namespace dtc
