//===- Registration.h - dialects and passes every dtc tool knows -*- C++ -*-===//
#ifndef DTC_TOOLS_REGISTRATION_H
#define DTC_TOOLS_REGISTRATION_H

#include "compiler/Passes.h"
#include "compiler/Pipeline.h"
#include "dialects/graph/GraphDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Transforms/Passes.h"

namespace dtc {

inline void registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<graph::GraphDialect, mlir::func::FuncDialect, mlir::mesh::MeshDialect>();
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
