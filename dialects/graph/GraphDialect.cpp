//===- GraphDialect.cpp ---------------------------------------------------===//
#include "dialects/graph/GraphDialect.h"
#include "dialects/graph/GraphAttrs.h"
#include "dialects/graph/GraphOps.h"

using namespace dtc::graph;

#include "dialects/graph/GraphDialect.cpp.inc"

void GraphDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/graph/GraphOps.cpp.inc"
      >();
  registerAttributes();
}

mlir::Operation *GraphDialect::materializeConstant(mlir::OpBuilder &builder,
                                                   mlir::Attribute value,
                                                   mlir::Type type,
                                                   mlir::Location loc) {
  auto elements = llvm::dyn_cast<mlir::ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return builder.create<ConstantOp>(loc, type, elements);
}
