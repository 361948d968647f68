//===- GraphInterfaces.td - interfaces of graph ops ------------*- tablegen -*-===//
#ifndef DTC_GRAPH_INTERFACES
#define DTC_GRAPH_INTERFACES

include "mlir/IR/OpBase.td"

// Every graph op defines its own gradient (dialects/graph/Gradients.cpp):
// the reverse-mode autodiff pass (compiler/Autodiff.cpp) only walks the
// graph backwards and asks each op.
def Graph_DifferentiableOpInterface : OpInterface<"DifferentiableOp"> {
  let cppNamespace = "::dtc::graph";
  let methods = [
    InterfaceMethod<[{
        Builds, at the builder's insertion point, the gradients of the
        operands from those of the results (`resultGrads`, one per result;
        a null value means zero). Sets `operandGrads` to one value per
        operand, null where no gradient flows (integer operands, indices,
        masks). Fails with an error on the op when its gradient is not
        defined.
      }], "::mlir::LogicalResult", "buildGradients",
      (ins "::mlir::OpBuilder &":$builder, "::mlir::ValueRange":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
  ];
}

// Every graph op states what it costs (dialects/graph/Costs.cpp): the
// FLOPs it does and the bytes it reads and writes, and its class, which
// picks a device's achievable efficiency. The plan carries it per
// instruction; dtc simulate and the sharding search time it on a cluster.
def Graph_CostOpInterface : OpInterface<"CostOp"> {
  let cppNamespace = "::dtc::graph";
  let methods = [
    InterfaceMethod<[{
        FLOPs, bytes read and written, and op class of one execution, on
        the op's own (local) shapes.
      }], "::dtc::graph::OpCost", "cost", (ins)>,
  ];
}

// Every graph op states how its dims may be split over a device mesh
// (dialects/graph/ShardingRules.cpp): einsum-like factors, from which its
// strategies and the collectives between shardings follow (ShardingRule in
// GraphOps.h). The sharding search and the SPMD partitioner only ask.
def Graph_ShardingOpInterface : OpInterface<"ShardableOp"> {
  let cppNamespace = "::dtc::graph";
  let methods = [
    InterfaceMethod<[{
        The op's factors and, per operand and result dim, the factors that
        make it up.
      }], "::dtc::graph::ShardingRule", "shardingRule", (ins)>,
  ];
}

#endif // DTC_GRAPH_INTERFACES
