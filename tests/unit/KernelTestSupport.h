//===- KernelTestSupport.h - what the CPU kernel tests share ----*- C++ -*-===//
#ifndef DTC_TESTS_UNIT_KERNELTESTSUPPORT_H
#define DTC_TESTS_UNIT_KERNELTESTSUPPORT_H

#include "plan.pb.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
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

/// n floats uniform in [lo, hi), the same for the same seed.
inline std::vector<float> randomFloats(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float &x : v)
    x = dist(rng);
  return v;
}

} // namespace dtc::kerneltest

#endif // DTC_TESTS_UNIT_KERNELTESTSUPPORT_H
