//===- GraphDialect.td - the graph dialect ---------------------*- tablegen -*-===//
#ifndef DTC_GRAPH_DIALECT
#define DTC_GRAPH_DIALECT

include "mlir/IR/OpBase.td"

def Graph_Dialect : Dialect {
  let name = "graph";
  let cppNamespace = "::dtc::graph";
  let summary = "Static-shaped tensor ops for distributed training plans";
  // Attributes live in the attribute dictionary so that result types can be
  // inferred from (operands, attributes) alone, before an op exists: the ONNX
  // importer checks every node this way and reports errors instead of
  // building an invalid op.
  let usePropertiesForAttributes = 0;
  let hasConstantMaterializer = 1;
  // #graph.sharding and #graph.split (GraphAttrs.td).
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
}

#endif // DTC_GRAPH_DIALECT
