//===- GraphAttrs.td - how values and ops are split over a mesh -*- tablegen -*-===//
//
// The contract between dtc-sharding-search and dtc-spmd-partition (and plan
// emission): typed, so that a malformed split is an error where it is
// parsed or built, not a wrong program later.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_GRAPH_ATTRS
#define DTC_GRAPH_ATTRS

include "mlir/IR/AttrTypeBase.td"
include "GraphDialect.td"

// A list of entries (dims or factors), each the mesh axes that cut it, in
// the order the parts are numbered (row-major over the listed axes). An axis
// cuts at most one entry.
class Graph_MeshAxesListAttr<string name, string attrMnemonic, string entry>
    : AttrDef<Graph_Dialect, name> {
  let mnemonic = attrMnemonic;
  let parameters = (ins
    ArrayRefParameter<"::mlir::DenseI64ArrayAttr", "per " # entry # ", the mesh axes that cut it">:$entries
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def Graph_ShardingAttr : Graph_MeshAxesListAttr<"Sharding", "sharding", "dim"> {
  let summary = "How a value is split over the device mesh";
  let description = [{
    Per dim of the value, the mesh axes that cut it: `#graph.sharding<[], [0, 1]>`
    keeps dim 0 whole and cuts dim 1 into (size of axis 0) x (size of axis 1)
    parts, numbered row-major over axes 0 then 1. The value in the IR is the
    part one rank holds. dtc-sharding-search writes it (`dtc.sharding`) on
    @main's arguments and on parameters, dtc-spmd-partition on every value
    it splits; plan emission turns it into the buffer's sharding.
  }];
}

def Graph_SplitAttr : Graph_MeshAxesListAttr<"Split", "split", "factor"> {
  let summary = "How an op's sharding-rule factors are split over the device mesh";
  let description = [{
    Per factor of the op's sharding rule (graph::ShardableOp), the mesh axes
    that split it: on a matmul [m, k] x [k, n], `#graph.split<[0], [], [1]>`
    splits m over axis 0 and n over axis 1. dtc-sharding-search writes it
    (`dtc.split`); dtc-spmd-partition rebuilds the op on local shapes from it.
  }];
}

#endif // DTC_GRAPH_ATTRS
