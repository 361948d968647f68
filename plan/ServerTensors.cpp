//===- ServerTensors.cpp --------------------------------------------------===//
#include "plan/ServerTensors.h"

#include "plan/DType.h"

namespace dtc::plan {

int64_t rowBytes(const TensorType &type) {
  int64_t bytes = elementCount(type) * dtypeBytes(type.dtype());
  return type.shape_size() && type.shape(0) > 0 ? bytes / type.shape(0) : bytes;
}

namespace {
const TensorType &gradientType(const Plan &plan, const ServerTensor &t) {
  return plan.outputs(int(t.gradient())).type();
}
const TensorType &weightType(const Plan &plan, const ServerTensor &t) {
  return plan.outputs(int(t.weight_output())).type();
}
} // namespace

int64_t pushedOffset(const Plan &plan, const ServerTensor &t) {
  return t.rows() ? t.first_row() * rowBytes(gradientType(plan, t)) : 0;
}

int64_t pushedBytes(const Plan &plan, const ServerTensor &t) {
  const TensorType &type = gradientType(plan, t);
  return t.rows() ? t.rows() * rowBytes(type) : elementCount(type) * dtypeBytes(type.dtype());
}

int64_t expectedPushBytes(const Plan &plan, const ServerTensor &t) {
  int64_t whole = pushedBytes(plan, t);
  int64_t rows = t.sparse_rows() * (rowBytes(gradientType(plan, t)) + int64_t(sizeof(int64_t)));
  return t.sparse_rows() > 0 && 2 * rows < whole ? rows : whole;
}

int64_t pulledOffset(const Plan &plan, const ServerTensor &t) {
  return t.rows() ? t.first_row() * rowBytes(weightType(plan, t)) : 0;
}

int64_t pulledBytes(const Plan &plan, const ServerTensor &t) {
  const TensorType &type = weightType(plan, t);
  return elementCount(type) * dtypeBytes(type.dtype());
}

} // namespace dtc::plan
