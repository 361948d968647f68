//===- Registration.h - dialects and passes every dtc tool knows -*- C++ -*-===//
#ifndef DTC_TOOLS_REGISTRATION_H
#define DTC_TOOLS_REGISTRATION_H

#include "compiler/Passes.h"
#include "dialects/graph/GraphDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Transforms/Passes.h"

namespace dtc {

inline void registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<graph::GraphDialect, mlir::func::FuncDialect, mlir::mesh::MeshDialect>();
}

/// Upstream passes the pipelines use (canonicalize, cse, ...) and dtc's own.
inline void registerAllPasses() {
  mlir::registerTransformsPasses();
  registerCompilerPasses();
}

} // namespace dtc

#endif // DTC_TOOLS_REGISTRATION_H
