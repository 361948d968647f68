//===- GraphAttrs.h - #graph.sharding and #graph.split ----------*- C++ -*-===//
#ifndef DTC_DIALECTS_GRAPH_GRAPHATTRS_H
#define DTC_DIALECTS_GRAPH_GRAPHATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"

#define GET_ATTRDEF_CLASSES
#include "dialects/graph/GraphAttrs.h.inc"

#endif // DTC_DIALECTS_GRAPH_GRAPHATTRS_H
