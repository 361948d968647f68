//===- KernelTestSupport.h - what the CPU kernel tests share ----*- C++ -*-===//
#ifndef DTC_TESTS_UNIT_KERNELTESTSUPPORT_H
#define DTC_TESTS_UNIT_KERNELTESTSUPPORT_H

#include "plan.pb.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace dtc::kerneltest {

using Shape = std::vector<int64_t>;

inline int64_t count(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

inline plan::TensorType typeOf(plan::DType dtype, const Shape &shape) {
  plan::TensorType type;
  type.set_dtype(dtype);
  for (int64_t d : shape)
    type.add_shape(d);
  return type;
}

/// A tensor as a kernel sees it: a type and row-major bytes.
struct Tensor {
  plan::TensorType type;
  std::vector<char> bytes;
};

template <class T>
Tensor tensor(plan::DType dtype, const Shape &shape, const std::vector<T> &values) {
  EXPECT_EQ(int64_t(values.size()), count(shape));
  Tensor t{typeOf(dtype, shape), std::vector<char>(values.size() * sizeof(T))};
  if (!values.empty())
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

} // namespace dtc::kerneltest

#endif // DTC_TESTS_UNIT_KERNELTESTSUPPORT_H
