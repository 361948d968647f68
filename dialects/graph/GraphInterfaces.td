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

#endif // DTC_GRAPH_INTERFACES
