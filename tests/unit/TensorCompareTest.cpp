//===- TensorCompareTest.cpp - dtc run --check's comparison ---------------===//
#include "runtime/TensorCompare.h"
#include "runtime/cpu/BFloat16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

using namespace dtc;
using namespace dtc::runtime;

namespace {

template <class T>
HostTensor tensor(plan::DType dtype, std::vector<int64_t> shape, const std::vector<T> &values) {
  HostTensor t;
  t.type.set_dtype(dtype);
  for (int64_t d : shape)
    t.type.add_shape(d);
  t.bytes.resize(values.size() * sizeof(T));
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

TEST(TensorCompare, WithinToleranceAsAllclose) {
  auto want = tensor<float>(plan::F32, {2, 2}, {1.0f, -2.0f, 0.0f, 100.0f});
  auto got = tensor<float>(plan::F32, {2, 2}, {1.0005f, -2.0f, 5e-6f, 100.09f});
  Comparison c;
  std::string error;
  ASSERT_TRUE(compareTensors(got, want, {}, c, error)) << error;
  EXPECT_EQ(c.mismatches, 0);
  EXPECT_NEAR(c.maxAbs, 0.09, 1e-4);
  // 100.09 is outside rtol 1e-4 (allowed 0.01 + 1e-5).
  ASSERT_TRUE(compareTensors(got, want, {1e-4, 1e-5}, c, error));
  EXPECT_EQ(c.mismatches, 2); // 1.0005 too
  EXPECT_EQ(c.worst, (std::vector<int64_t>{1, 1}));
  EXPECT_FLOAT_EQ(float(c.worstGot), 100.09f);
  EXPECT_FLOAT_EQ(float(c.worstWant), 100.0f);
}

TEST(TensorCompare, NanMatchesNanOnlyAndInfinitiesExactly) {
  float nan = std::nanf(""), inf = INFINITY;
  auto want = tensor<float>(plan::F32, {4}, {nan, inf, -inf, 1.0f});
  Comparison c;
  std::string error;
  ASSERT_TRUE(compareTensors(want, want, {}, c, error));
  EXPECT_EQ(c.mismatches, 0);
  auto got = tensor<float>(plan::F32, {4}, {1.0f, inf, inf, nan});
  ASSERT_TRUE(compareTensors(got, want, {}, c, error));
  EXPECT_EQ(c.mismatches, 3);
  EXPECT_TRUE(std::isinf(c.maxAbs));
}

TEST(TensorCompare, IntegersExactlyAndHalvesConverted) {
  auto want = tensor<int64_t>(plan::I64, {3}, {1, 2, 3});
  auto got = tensor<int64_t>(plan::I64, {3}, {1, 2, 4});
  Comparison c;
  std::string error;
  ASSERT_TRUE(compareTensors(got, want, {1.0, 1.0}, c, error)); // tolerance ignored
  EXPECT_EQ(c.mismatches, 1);
  EXPECT_EQ(c.worst, (std::vector<int64_t>{2}));

  using cpu::BFloat16;
  auto bf = tensor<BFloat16>(plan::BF16, {2}, {BFloat16(1.5f), BFloat16(-3.0f)});
  auto bfOff = tensor<BFloat16>(plan::BF16, {2}, {BFloat16(1.5f), BFloat16(-3.5f)});
  ASSERT_TRUE(compareTensors(bfOff, bf, {}, c, error));
  EXPECT_EQ(c.mismatches, 1);
  EXPECT_DOUBLE_EQ(c.worstGot, -3.5);
  EXPECT_DOUBLE_EQ(c.worstWant, -3.0);
}

TEST(TensorCompare, AnotherShapeOrDtypeIsAnError) {
  auto want = tensor<float>(plan::F32, {2, 2}, {1, 2, 3, 4});
  auto got = tensor<float>(plan::F32, {4}, {1, 2, 3, 4});
  Comparison c;
  std::string error;
  EXPECT_FALSE(compareTensors(got, want, {}, c, error));
  EXPECT_EQ(error, "the expected output is f32 [2,2], the plan's f32 [4]");
  auto ints = tensor<int32_t>(plan::I32, {2, 2}, {1, 2, 3, 4});
  EXPECT_FALSE(compareTensors(ints, want, {}, c, error));
  EXPECT_EQ(error, "the expected output is f32 [2,2], the plan's i32 [2,2]");
}

} // namespace
