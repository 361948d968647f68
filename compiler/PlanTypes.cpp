//===- PlanTypes.cpp ------------------------------------------------------===//
#include "compiler/PlanTypes.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;

namespace dtc {

plan::DType dtypeOf(Type type) {
  if (type.isF32()) return plan::F32;
  if (type.isF64()) return plan::F64;
  if (type.isF16()) return plan::F16;
  if (type.isBF16()) return plan::BF16;
  if (auto integer = dyn_cast<IntegerType>(type)) {
    bool u = integer.isUnsigned();
    switch (integer.getWidth()) {
    case 1: return plan::BOOL;
    case 8: return u ? plan::U8 : plan::I8;
    case 16: return u ? plan::U16 : plan::I16;
    case 32: return u ? plan::U32 : plan::I32;
    case 64: return u ? plan::U64 : plan::I64;
    }
  }
  return plan::DTYPE_INVALID;
}

void setType(Type type, plan::TensorType &out) {
  auto tensor = cast<RankedTensorType>(type);
  out.set_dtype(dtypeOf(tensor.getElementType()));
  for (int64_t d : tensor.getShape())
    out.add_shape(d);
}

plan::Cost planCost(const graph::OpCost &cost, Value computed) {
  static const plan::OpClass kClasses[] = {
      plan::OP_CLASS_INVALID, plan::OP_MATMUL, plan::OP_CONV, plan::OP_ELEMENTWISE,
      plan::OP_REDUCE, plan::OP_NORM, plan::OP_DATA_MOVEMENT};
  plan::Cost c;
  c.set_flops(cost.flops);
  c.set_bytes(cost.bytes);
  c.set_op_class(kClasses[cost.opClass]);
  c.set_dtype(dtypeOf(cast<ShapedType>(computed.getType()).getElementType()));
  return c;
}

Value computedValue(Operation *op) {
  for (Value operand : op->getOperands())
    if (auto shaped = dyn_cast<ShapedType>(operand.getType());
        shaped && isa<FloatType>(shaped.getElementType()))
      return operand;
  return op->getResult(0);
}

} // namespace dtc
