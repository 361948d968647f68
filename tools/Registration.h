//===- Registration.h - dialects and passes every dtc tool knows -*- C++ -*-===//
#ifndef DTC_TOOLS_REGISTRATION_H
#define DTC_TOOLS_REGISTRATION_H

#include "compiler/Passes.h"
#include "compiler/Pipeline.h"
#include "dialects/graph/GraphDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Transforms/Passes.h"

namespace dtc {

/// dtc's dialects, and those of the kernel IR dtc-outline-kernels makes
/// and dtc-kernels-to-ptx lowers (so dtc-opt reads every stage back).
inline void registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<graph::GraphDialect, mlir::func::FuncDialect, mlir::mesh::MeshDialect,
                  mlir::arith::ArithDialect, mlir::math::MathDialect, mlir::memref::MemRefDialect,
                  mlir::scf::SCFDialect, mlir::linalg::LinalgDialect, mlir::gpu::GPUDialect>();
}

/// Upstream passes the pipelines use (canonicalize, cse, ...), dtc's own,
/// and dtc-compile-pipeline (what dtc compile runs).
inline void registerAllPasses() {
  mlir::registerTransformsPasses();
  registerCompilerPasses();
  registerCompilePipeline();
}

} // namespace dtc

#endif // DTC_TOOLS_REGISTRATION_H
