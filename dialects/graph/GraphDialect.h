//===- GraphDialect.h - the dtc graph dialect -------------------*- C++ -*-===//
#ifndef DTC_DIALECTS_GRAPH_GRAPHDIALECT_H
#define DTC_DIALECTS_GRAPH_GRAPHDIALECT_H

#include "mlir/IR/Dialect.h"

#include "dialects/graph/GraphDialect.h.inc"

#endif // DTC_DIALECTS_GRAPH_GRAPHDIALECT_H
