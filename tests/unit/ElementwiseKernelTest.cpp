// The fused elementwise kernel against plain loops written here (maths in
// double), with one and two threads: every ExprOp, broadcasting, fused DAGs,
// every dtype class, blocks and threads on big tensors; and the messages
// makeElementwiseKernel gives for expressions it cannot run.
#include "runtime/cpu/BFloat16.h"
#include "runtime/cpu/ElementwiseKernel.h"
#include "runtime/cpu/ThreadPool.h"
#include "tests/unit/KernelTestSupport.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

using namespace dtc;
using namespace dtc::runtime::cpu;
using namespace dtc::kerneltest;

namespace {


//===----------------------------------------------------------------------===//
// Harness
//===----------------------------------------------------------------------===//


/// An expression built node by node; each call returns the node's index.
struct Expr {
  plan::Elementwise proto;

  int add(plan::ExprOp op, plan::DType dtype, std::vector<int> args, double value = 0,
          double value2 = 0) {
    plan::ExprNode *node = proto.add_nodes();
    node->set_op(op);
    node->set_dtype(dtype);
    for (int a : args)
      node->add_args(uint32_t(a));
    node->set_value(value);
    node->set_value2(value2);
    return proto.nodes_size() - 1;
  }
  int input(int index, plan::DType dtype) { return add(plan::INPUT, dtype, {index}); }
  int constant(double value, plan::DType dtype) { return add(plan::CONSTANT, dtype, {}, value); }
};


using kerneltest::randomFloats;

/// Inputs in [-3, 3], the range the tests use unless they ask for another.
std::vector<float> randomFloats(int64_t n, uint32_t seed) {
  return kerneltest::randomFloats(n, seed, -3.f, 3.f);
}

/// Runs `expr` with `threads` threads; fails the test if it cannot be made.
template <class Out>
std::vector<Out> run(const Expr &expr, const std::vector<Tensor> &inputs,
                     const plan::TensorType &outType, int threads) {
  std::vector<plan::TensorType> types;
  std::vector<const void *> pointers;
  for (const Tensor &t : inputs) {
    types.push_back(t.type);
    pointers.push_back(t.bytes.data());
  }
  std::string error;
  std::unique_ptr<Kernel> kernel = makeElementwiseKernel(expr.proto, types, {outType}, error);
  EXPECT_TRUE(kernel) << error;
  if (!kernel)
    return {};
  int64_t n = count(Shape(outType.shape().begin(), outType.shape().end()));
  // Guard bytes after the output catch writes past its end.
  std::vector<Out> out(size_t(n) + 16, Out(77));
  void *outputs[] = {out.data()};
  ThreadPool pool(threads);
  EXPECT_TRUE(kernel->run(pointers.data(), outputs, pool, error)) << error;
  for (size_t i = size_t(n); i < out.size(); ++i)
    EXPECT_EQ(out[i], Out(77)) << "wrote past the output's end";
  out.resize(size_t(n));
  return out;
}

/// The flat index into `in` (NumPy broadcast) of output element `flat`.
int64_t broadcastIndex(const Shape &out, const Shape &in, int64_t flat) {
  int64_t index = 0, stride = 1;
  for (size_t k = 0; k < out.size(); ++k) {
    size_t d = out.size() - 1 - k;
    int64_t coord = flat % out[d];
    flat /= out[d];
    if (k < in.size()) {
      size_t e = in.size() - 1 - k;
      if (in[e] != 1)
        index += coord * stride;
      stride *= in[e];
    }
  }
  return index;
}

::testing::AssertionResult near(double got, double want, double rtol = 1e-5, double atol = 1e-6) {
  if (std::isnan(want) ? std::isnan(got)
                       : (got == want || std::fabs(got - want) <= rtol * std::fabs(want) + atol))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << got << ", want " << want;
}

/// Calls f() with the kernels' loops compiled for each instruction set (as
/// far as this CPU has them).
void forEachIsa(const std::function<void()> &f) {
  for (VectorIsa isa : {VectorIsa::Baseline, VectorIsa::Avx2, VectorIsa::Avx512}) {
    SCOPED_TRACE("loops for instruction set " + std::to_string(int(isa)));
    limitElementwiseIsa(isa);
    f();
  }
}

/// Runs with one and two threads, each instruction set, and checks element
/// i against `want(i)`.
template <class Out>
void expectOutput(const Expr &expr, const std::vector<Tensor> &inputs,
                  const plan::TensorType &outType, const std::function<double(int64_t)> &want,
                  double rtol = 1e-5, double atol = 1e-6) {
  forEachIsa([&] {
    for (int threads : {1, 2}) {
      std::vector<Out> got = run<Out>(expr, inputs, outType, threads);
      int failures = 0;
      for (size_t i = 0; i < got.size() && failures < 10; ++i) {
        auto ok = near(double(got[i]), want(int64_t(i)), rtol, atol);
        if (!ok)
          ++failures;
        EXPECT_TRUE(ok) << "element " << i << " with " << threads << " threads";
      }
    }
  });
}

/// Exact comparison, for integer and bool outputs.
template <class Out>
void expectExactly(const Expr &expr, const std::vector<Tensor> &inputs,
                   const plan::TensorType &outType, const std::vector<Out> &want) {
  forEachIsa([&] {
    for (int threads : {1, 2})
      EXPECT_EQ(run<Out>(expr, inputs, outType, threads), want) << threads << " threads";
  });
}

//===----------------------------------------------------------------------===//
// Every op, in f32 and f64
//===----------------------------------------------------------------------===//

struct UnaryCase {
  plan::ExprOp op;
  std::function<double(double)> reference;
  float lo, hi;
  double value = 0, value2 = 0;
};

const double kSqrtHalf = 0.7071067811865476;
const double kPi = 3.141592653589793;

std::vector<UnaryCase> unaryCases() {
  return {
      {plan::NEG, [](double x) { return -x; }, -5, 5},
      {plan::ABS, [](double x) { return std::fabs(x); }, -5, 5},
      {plan::EXP, [](double x) { return std::exp(x); }, -20, 20},
      {plan::LOG, [](double x) { return std::log(x); }, 1e-3f, 100},
      {plan::SQRT, [](double x) { return std::sqrt(x); }, 0, 100},
      {plan::RECIPROCAL, [](double x) { return 1 / x; }, 0.1f, 10},
      {plan::TANH, [](double x) { return std::tanh(x); }, -6, 6},
      {plan::ERF, [](double x) { return std::erf(x); }, -5, 5},
      {plan::RELU, [](double x) { return x < 0 ? 0 : x; }, -5, 5},
      {plan::SIGMOID, [](double x) { return 1 / (1 + std::exp(-x)); }, -20, 20},
      {plan::GELU, [](double x) { return 0.5 * x * (1 + std::erf(x * kSqrtHalf)); }, -6, 6},
      {plan::GELU_TANH,
       [](double x) {
         return 0.5 * x * (1 + std::tanh(std::sqrt(2 / kPi) * (x + 0.044715 * x * x * x)));
       },
       -6, 6},
      {plan::CLIP, [](double x) { return std::min(std::max(x, -1.5), 2.0); }, -5, 5, -1.5, 2.0},
  };
}

struct BinaryCase {
  plan::ExprOp op;
  std::function<double(double, double)> reference;
};

std::vector<BinaryCase> binaryCases() {
  return {
      {plan::ADD, [](double a, double b) { return a + b; }},
      {plan::SUB, [](double a, double b) { return a - b; }},
      {plan::MUL, [](double a, double b) { return a * b; }},
      {plan::DIV, [](double a, double b) { return a / b; }},
      {plan::POW, [](double a, double b) { return std::pow(std::fabs(a), b); }},
      {plan::MAX, [](double a, double b) { return std::max(a, b); }},
      {plan::MIN, [](double a, double b) { return std::min(a, b); }},
  };
}

template <class T> plan::DType floatDType() {
  return std::is_same_v<T, float> ? plan::F32 : plan::F64;
}

template <class T> std::vector<T> asType(const std::vector<float> &v) {
  return std::vector<T>(v.begin(), v.end());
}

template <class T> void checkUnaryOps() {
  const plan::DType dt = floatDType<T>();
  for (const UnaryCase &c : unaryCases()) {
    SCOPED_TRACE(plan::ExprOp_Name(c.op));
    std::vector<float> x = randomFloats(3001, 7, c.lo, c.hi);
    Expr e;
    e.add(c.op, dt, {e.input(0, dt)}, c.value, c.value2);
    expectOutput<T>(e, {tensor(dt, {3001}, asType<T>(x))}, typeOf(dt, {3001}),
                    [&](int64_t i) { return c.reference(x[size_t(i)]); });
  }
}

template <class T> void checkBinaryOps() {
  const plan::DType dt = floatDType<T>();
  const Shape shape = {37, 29};
  std::vector<float> a = randomFloats(count(shape), 1), b = randomFloats(count(shape), 2);
  for (const BinaryCase &c : binaryCases()) {
    SCOPED_TRACE(plan::ExprOp_Name(c.op));
    Expr e;
    int x = e.input(0, dt), y = e.input(1, dt);
    if (c.op == plan::POW) // a positive base
      x = e.add(plan::ABS, dt, {x});
    e.add(c.op, dt, {x, y});
    expectOutput<T>(e, {tensor(dt, shape, asType<T>(a)), tensor(dt, shape, asType<T>(b))},
                    typeOf(dt, shape),
                    [&](int64_t i) { return c.reference(a[size_t(i)], b[size_t(i)]); });
  }
}

TEST(ElementwiseKernel, UnaryOpsF32) { checkUnaryOps<float>(); }
TEST(ElementwiseKernel, UnaryOpsF64) { checkUnaryOps<double>(); }
TEST(ElementwiseKernel, BinaryOpsF32) { checkBinaryOps<float>(); }
TEST(ElementwiseKernel, BinaryOpsF64) { checkBinaryOps<double>(); }

TEST(ElementwiseKernel, Comparisons) {
  const std::vector<plan::ExprOp> ops = {plan::EQUAL, plan::LESS, plan::LESS_EQUAL,
                                         plan::GREATER, plan::GREATER_EQUAL};
  const std::vector<float> a = {1, 2, 3, NAN, -0.f, 5}, b = {1, 3, 2, 1, 0.f, NAN};
  auto compare = [](plan::ExprOp op, double x, double y) {
    switch (op) {
    case plan::EQUAL: return x == y;
    case plan::LESS: return x < y;
    case plan::LESS_EQUAL: return x <= y;
    case plan::GREATER: return x > y;
    default: return x >= y;
    }
  };
  for (plan::ExprOp op : ops) {
    SCOPED_TRACE(plan::ExprOp_Name(op));
    Expr e;
    e.add(op, plan::BOOL, {e.input(0, plan::F32), e.input(1, plan::F32)});
    std::vector<uint8_t> want;
    for (size_t i = 0; i < a.size(); ++i)
      want.push_back(compare(op, a[i], b[i]));
    expectExactly<uint8_t>(e, {tensor(plan::F32, {6}, a), tensor(plan::F32, {6}, b)},
                           typeOf(plan::BOOL, {6}), want);
  }
}

TEST(ElementwiseKernel, MaxMinPropagateNaN) {
  const std::vector<float> a = {NAN, 1, 2, NAN}, b = {1, NAN, 1, NAN};
  for (plan::ExprOp op : {plan::MAX, plan::MIN}) {
    Expr e;
    e.add(op, plan::F32, {e.input(0, plan::F32), e.input(1, plan::F32)});
    std::vector<float> got = run<float>(e, {tensor(plan::F32, {4}, a), tensor(plan::F32, {4}, b)},
                                        typeOf(plan::F32, {4}), 1);
    ASSERT_EQ(got.size(), 4u);
    EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[1]) && std::isnan(got[3]));
    EXPECT_EQ(got[2], op == plan::MAX ? 2.f : 1.f);
  }
}

// Kernels run with subnormals flushed to zero (ThreadPool.cpp), as results
// and as operands: a trained model's tiny gradients and moments made the
// MLP's step 3x slower through microcode assists. 1e-30 * 1e-10 would be a
// subnormal 1e-40; 1e-40 (subnormal) * 1e30 would be 1e-10.
TEST(ElementwiseKernel, FlushesSubnormalsToZero) {
  Expr e;
  e.add(plan::MUL, plan::F32, {e.input(0, plan::F32), e.input(1, plan::F32)});
  const int64_t n = 1000;
  auto filled = [&](float v) { return tensor(plan::F32, {n}, std::vector<float>(n, v)); };
  for (auto [a, b] : {std::pair{1e-30f, 1e-10f}, std::pair{1e-40f, 1e30f}})
    forEachIsa([&, a = a, b = b] {
      for (int threads : {1, 2})
        for (float y : run<float>(e, {filled(a), filled(b)}, typeOf(plan::F32, {n}), threads))
          ASSERT_EQ(y, 0.0f) << a << " * " << b << " with " << threads << " threads";
    });
}

// The float class computes exp, tanh, erf and the GELUs itself (vectorised);
// here they meet std:: over a dense range and the special values.
TEST(ElementwiseKernel, FloatMathAcrossItsRange) {
  std::vector<float> x;
  for (int i = -400000; i <= 400000; ++i)
    x.push_back(float(i) * 2.5e-4f); // [-100, 100]
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.f, -0.f, inf, -inf, 1e-30f, -1e-30f, 1e-40f, 88.72f, 88.73f, -87.3f, -103.f,
                  -104.f, 0.625f, -0.625f, 0.9f * 1.41421356f, -0.9f * 1.41421356f, 3.4e38f,
                  -3.4e38f})
    x.push_back(v);
  struct Case {
    plan::ExprOp op;
    double (*reference)(double);
    // Below it, results need not be within 1e-5: GeluTanh of x < -9 (below
    // 1e-18) carries the rounding of its float argument to exp, ~70 ulp;
    // kernels flush subnormals to zero (ThreadPool.cpp), so a result a few
    // times the smallest normal float (1.2e-38) whose factor was subnormal
    // (GELU of x near -13: x times erfc's 1e-38) comes out 0.
    double atol = 1e-36;
  };
  const Case cases[] = {
      {plan::EXP, [](double v) { return std::exp(v); }},
      {plan::TANH, [](double v) { return std::tanh(v); }},
      {plan::ERF, [](double v) { return std::erf(v); }},
      {plan::SIGMOID, [](double v) { return 1 / (1 + std::exp(-v)); }},
      {plan::GELU,
       [](double v) {
         return std::isinf(v) ? std::max(v, 0.) : 0.5 * v * std::erfc(-v * kSqrtHalf);
       }},
      // 0.5 v (1 + tanh(y)) as v / (1 + e^(-2y)), which keeps the small
      // results of negative v that 1 + tanh(y) loses in double too.
      {plan::GELU_TANH,
       [](double v) {
         if (std::isinf(v))
           return std::max(v, 0.);
         return v / (1 + std::exp(-2 * std::sqrt(2 / kPi) * (v + 0.044715 * v * v * v)));
       },
       1e-18},
  };
  const int64_t n = int64_t(x.size());
  for (const Case &c : cases) {
    SCOPED_TRACE(plan::ExprOp_Name(c.op));
    Expr e;
    e.add(c.op, plan::F32, {e.input(0, plan::F32)});
    // The float result of the exact value: under/overflow as float does.
    expectOutput<float>(
        e, {tensor(plan::F32, {n}, x)}, typeOf(plan::F32, {n}),
        [&](int64_t i) { return double(float(c.reference(double(x[size_t(i)])))); }, 1e-5,
        c.atol);
  }
}

//===----------------------------------------------------------------------===//
// Broadcasting
//===----------------------------------------------------------------------===//

/// a + 2 b (b scaled so a mix-up of the two shows), in f32.
void checkBroadcastAdd(const Shape &aShape, const Shape &bShape, const Shape &outShape) {
  SCOPED_TRACE(::testing::PrintToString(aShape) + " + " + ::testing::PrintToString(bShape));
  std::vector<float> a = randomFloats(count(aShape), 3), b = randomFloats(count(bShape), 4);
  Expr e;
  int twoB = e.add(plan::MUL, plan::F32, {e.input(1, plan::F32), e.constant(2, plan::F32)});
  e.add(plan::ADD, plan::F32, {e.input(0, plan::F32), twoB});
  expectOutput<float>(e, {tensor(plan::F32, aShape, a), tensor(plan::F32, bShape, b)},
                      typeOf(plan::F32, outShape), [&](int64_t i) {
                        return double(a[size_t(broadcastIndex(outShape, aShape, i))]) +
                               2.0 * b[size_t(broadcastIndex(outShape, bShape, i))];
                      });
}

TEST(ElementwiseKernel, Broadcasting) {
  checkBroadcastAdd({3, 1, 5}, {4, 1}, {3, 4, 5});
  checkBroadcastAdd({}, {2, 3}, {2, 3});          // rank-0 input
  checkBroadcastAdd({4, 3}, {}, {4, 3});
  checkBroadcastAdd({}, {}, {});                  // rank-0 output
  checkBroadcastAdd({1, 1, 6}, {6}, {1, 1, 6});   // size-1 leading dims
  checkBroadcastAdd({1, 6}, {1, 1, 1}, {1, 1, 6});
  checkBroadcastAdd({2, 3, 4, 5}, {3, 1, 1}, {2, 3, 4, 5}); // a channel bias
  checkBroadcastAdd({2, 3, 4, 5}, {1, 3, 1, 5}, {2, 3, 4, 5});
  checkBroadcastAdd({2, 1, 4, 1}, {1, 3, 1, 5}, {2, 3, 4, 5}); // both broadcast
  checkBroadcastAdd({7, 1}, {1, 9}, {7, 9});
  checkBroadcastAdd({0, 3}, {3}, {0, 3});         // no elements
  checkBroadcastAdd({0, 3}, {1, 1}, {0, 3});
}

// Broadcasting where a block spans many short rows (inner dim 3) and a long
// row is split across blocks, with threads.
TEST(ElementwiseKernel, BroadcastAcrossBlocks) {
  checkBroadcastAdd({40001, 3}, {3}, {40001, 3});
  checkBroadcastAdd({3, 40001}, {3, 1}, {3, 40001});
  checkBroadcastAdd({64, 128, 33}, {128, 1}, {64, 128, 33});
  checkBroadcastAdd({2, 300, 700}, {300, 700}, {2, 300, 700});
}

//===----------------------------------------------------------------------===//
// Fused expressions
//===----------------------------------------------------------------------===//

TEST(ElementwiseKernel, GeluWrittenOut) {
  // 0.5 x (1 + erf(x / sqrt 2)) over a [2, 3000] x and a [3000] bias, as
  // exported by PyTorch: x + bias is used twice.
  const Shape shape = {2, 3000};
  std::vector<float> x = randomFloats(6000, 5, -5, 5), bias = randomFloats(3000, 6);
  Expr e;
  int h = e.add(plan::ADD, plan::F32, {e.input(0, plan::F32), e.input(1, plan::F32)});
  int scaled = e.add(plan::DIV, plan::F32, {h, e.constant(1.4142135623730951, plan::F32)});
  int erf = e.add(plan::ERF, plan::F32, {scaled});
  int onePlus = e.add(plan::ADD, plan::F32, {erf, e.constant(1, plan::F32)});
  int times = e.add(plan::MUL, plan::F32, {h, onePlus});
  e.add(plan::MUL, plan::F32, {times, e.constant(0.5, plan::F32)});
  expectOutput<float>(
      e, {tensor(plan::F32, shape, x), tensor(plan::F32, {3000}, bias)}, typeOf(plan::F32, shape),
      [&](int64_t i) {
        double v = double(x[size_t(i)]) + bias[size_t(i % 3000)];
        return 0.5 * v * (1 + std::erf(v * kSqrtHalf));
      },
      1e-5, 1e-5); // 1 + erf(...) loses digits for negative v, as it would in float anywhere
}

TEST(ElementwiseKernel, SharedAndDeadNodes) {
  // s = a + b; y = s * s - relu(s) / c + clip(sqrt(|a|), 0.5, 1); plus a
  // node nobody reads, and a POW by a constant 2 and 3.
  const Shape shape = {5, 7};
  std::vector<float> a = randomFloats(35, 7), b = randomFloats(35, 8),
                     c = randomFloats(35, 9, 1, 2);
  Expr e;
  int ia = e.input(0, plan::F32), ib = e.input(1, plan::F32), ic = e.input(2, plan::F32);
  int s = e.add(plan::ADD, plan::F32, {ia, ib});
  e.add(plan::EXP, plan::F32, {ib}); // dead
  int sq = e.add(plan::MUL, plan::F32, {s, s});
  int quot = e.add(plan::DIV, plan::F32, {e.add(plan::RELU, plan::F32, {s}), ic});
  int clip = e.add(plan::CLIP, plan::F32,
                   {e.add(plan::SQRT, plan::F32, {e.add(plan::ABS, plan::F32, {ia})})}, 0.5, 1);
  int sum = e.add(plan::ADD, plan::F32, {e.add(plan::SUB, plan::F32, {sq, quot}), clip});
  int pow2 = e.add(plan::POW, plan::F32, {s, e.constant(2, plan::F32)});
  int pow3 = e.add(plan::POW, plan::F32, {ib, e.constant(3, plan::F32)});
  e.add(plan::ADD, plan::F32, {sum, e.add(plan::SUB, plan::F32, {pow2, pow3})});
  expectOutput<float>(
      e, {tensor(plan::F32, shape, a), tensor(plan::F32, shape, b), tensor(plan::F32, shape, c)},
      typeOf(plan::F32, shape), [&](int64_t i) {
        double x = a[size_t(i)], y = b[size_t(i)], z = c[size_t(i)], v = x + y;
        return v * v - std::max(v, 0.0) / z +
               std::min(std::max(std::sqrt(std::fabs(x)), 0.5), 1.0) + v * v - y * y * y;
      });
}

TEST(ElementwiseKernel, ConstantOnlyAndInputOnly) {
  // A node of constants alone is one value for the whole output.
  Expr e;
  e.add(plan::EXP, plan::F32, {e.add(plan::NEG, plan::F32, {e.constant(1, plan::F32)})});
  expectOutput<float>(e, {}, typeOf(plan::F32, {3, 3000}),
                      [](int64_t) { return std::exp(-1.0); });
  // The output is an input, converted on the way.
  Expr copy;
  copy.input(0, plan::I32);
  std::vector<int32_t> x = {1, -2, 3, 2147483647};
  expectExactly<int32_t>(copy, {tensor(plan::I32, {4}, x)}, typeOf(plan::I32, {4}), x);
  // A one-element input broadcast to a large output.
  Expr splat;
  splat.add(plan::ADD, plan::I32, {splat.input(0, plan::I32), splat.constant(1, plan::I32)});
  expectExactly<int32_t>(splat, {tensor(plan::I32, {1, 1}, std::vector<int32_t>{41})},
                         typeOf(plan::I32, {5000, 7}), std::vector<int32_t>(35000, 42));
}

//===----------------------------------------------------------------------===//
// Integer and bool dtypes
//===----------------------------------------------------------------------===//

TEST(ElementwiseKernel, IntegerDivisionTruncatesAndSurvivesZero) {
  const int64_t min = std::numeric_limits<int64_t>::min();
  std::vector<int64_t> a = {-7, 7, -7, 7, 5, min, 3, 0}, b = {2, -2, -2, 2, 0, -1, 0, 0};
  Expr e;
  e.add(plan::DIV, plan::I64, {e.input(0, plan::I64), e.input(1, plan::I64)});
  expectExactly<int64_t>(e, {tensor(plan::I64, {8}, a), tensor(plan::I64, {8}, b)},
                         typeOf(plan::I64, {8}), {-3, -3, 3, 3, 0, min, 0, 0});
}

TEST(ElementwiseKernel, IntegerArithmetic) {
  std::vector<int64_t> a = {3, 2, -1, -1, 5, -9, 0, 7}, b = {4, -1, -3, 4, 0, 2, 3, 1};
  struct Case {
    plan::ExprOp op;
    std::vector<int64_t> want;
  };
  const Case cases[] = {
      {plan::ADD, {7, 1, -4, 3, 5, -7, 3, 8}},
      {plan::SUB, {-1, 3, 2, -5, 5, -11, -3, 6}},
      {plan::MUL, {12, -2, 3, -4, 0, -18, 0, 7}},
      {plan::POW, {81, 0, -1, 1, 1, 81, 0, 7}},
      {plan::MAX, {4, 2, -1, 4, 5, 2, 3, 7}},
      {plan::MIN, {3, -1, -3, -1, 0, -9, 0, 1}},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(plan::ExprOp_Name(c.op));
    Expr e;
    e.add(c.op, plan::I64, {e.input(0, plan::I64), e.input(1, plan::I64)});
    expectExactly<int64_t>(e, {tensor(plan::I64, {8}, a), tensor(plan::I64, {8}, b)},
                           typeOf(plan::I64, {8}), c.want);
  }
  // Unary ops and CLIP on i32.
  std::vector<int32_t> x = {-5, 0, 3, 100, -2147483647};
  Expr e;
  int in = e.input(0, plan::I32);
  int neg = e.add(plan::NEG, plan::I32, {in});
  int abs = e.add(plan::ABS, plan::I32, {in});
  int relu = e.add(plan::RELU, plan::I32, {in});
  int clip = e.add(plan::CLIP, plan::I32, {in}, -3, 1e30); // the bound saturates
  // neg * 1000000 + abs * 10000 + relu * 100 + clip
  int k6 = e.constant(1000000, plan::I32), k4 = e.constant(10000, plan::I32),
      k2 = e.constant(100, plan::I32);
  int sum = e.add(plan::ADD, plan::I32,
                  {e.add(plan::MUL, plan::I32, {neg, k6}), e.add(plan::MUL, plan::I32, {abs, k4})});
  sum = e.add(plan::ADD, plan::I32, {sum, e.add(plan::MUL, plan::I32, {relu, k2})});
  e.add(plan::ADD, plan::I32, {sum, clip});
  std::vector<int32_t> want;
  for (int32_t v : x) {
    int64_t r = -int64_t(v) * 1000000 + int64_t(std::abs(v)) * 10000 +
                int64_t(std::max(v, 0)) * 100 + std::max(v, -3);
    want.push_back(int32_t(uint32_t(uint64_t(r)))); // i32 arithmetic wraps
  }
  expectExactly<int32_t>(e, {tensor(plan::I32, {5}, x)}, typeOf(plan::I32, {5}), want);
}

TEST(ElementwiseKernel, NarrowIntegersWrapBetweenNodes) {
  // (a + b) / 2 in i8: 100 + 100 wraps to -56 before the division, as it
  // would in a chain of i8 ops; u8 250 + 10 wraps to 4.
  Expr e;
  int sum = e.add(plan::ADD, plan::I8, {e.input(0, plan::I8), e.input(1, plan::I8)});
  e.add(plan::DIV, plan::I8, {sum, e.constant(2, plan::I8)});
  expectExactly<int8_t>(e,
                        {tensor(plan::I8, {3}, std::vector<int8_t>{100, -100, 3}),
                         tensor(plan::I8, {3}, std::vector<int8_t>{100, -100, 4})},
                        typeOf(plan::I8, {3}), {-28, 28, 3});
  Expr u;
  int s = u.add(plan::ADD, plan::U8, {u.input(0, plan::U8), u.constant(10, plan::U8)});
  u.add(plan::LESS, plan::BOOL, {s, u.constant(100, plan::U8)});
  expectExactly<uint8_t>(u, {tensor(plan::U8, {2}, std::vector<uint8_t>{250, 50})},
                         typeOf(plan::BOOL, {2}), {1, 1});
}

TEST(ElementwiseKernel, EveryIntegerDType) {
  // x + 1 and x > 1, loaded, computed and stored in each integer dtype.
  auto check = [](plan::DType dtype, auto zero) {
    using T = decltype(zero);
    SCOPED_TRACE(plan::DType_Name(dtype));
    std::vector<T> x = {T(0), T(1), T(2), std::numeric_limits<T>::max()};
    Expr e;
    e.add(plan::ADD, dtype, {e.input(0, dtype), e.constant(1, dtype)});
    std::vector<T> plus;
    for (T v : x)
      plus.push_back(T(v + 1));
    expectExactly<T>(e, {tensor(dtype, {4}, x)}, typeOf(dtype, {4}), plus);
    Expr g;
    g.add(plan::GREATER, plan::BOOL, {g.input(0, dtype), g.constant(1, dtype)});
    expectExactly<uint8_t>(g, {tensor(dtype, {4}, x)}, typeOf(plan::BOOL, {4}), {0, 0, 1, 1});
  };
  check(plan::I64, int64_t());
  check(plan::I32, int32_t());
  check(plan::I16, int16_t());
  check(plan::I8, int8_t());
  check(plan::U8, uint8_t());
  check(plan::U16, uint16_t());
  check(plan::U32, uint32_t());
  check(plan::U64, uint64_t());
}

TEST(ElementwiseKernel, U64BeyondInt64) {
  // Values past 2^63 divide, compare and convert as unsigned.
  const uint64_t big = 18446744073709551614u; // 2^64 - 2
  Expr e;
  int x = e.input(0, plan::U64);
  int half = e.add(plan::DIV, plan::U64, {x, e.constant(2, plan::U64)});
  int greater = e.add(plan::GREATER, plan::BOOL, {x, e.constant(1, plan::U64)});
  int fromFloat = e.add(plan::CAST, plan::U64, {e.input(1, plan::F64)});
  int sum = e.add(plan::ADD, plan::U64, {half, fromFloat});
  e.add(plan::WHERE, plan::U64, {greater, sum, e.constant(7, plan::U64)});
  expectExactly<uint64_t>(e,
                          {tensor(plan::U64, {3}, std::vector<uint64_t>{big, 1, 3}),
                           tensor(plan::F64, {3}, std::vector<double>{1e19, 2.9, 2.9})},
                          typeOf(plan::U64, {3}),
                          {big / 2 + 10000000000000000000u, 7, 3});
  Expr toFloat;
  toFloat.add(plan::CAST, plan::F64, {toFloat.input(0, plan::U64)});
  expectExactly<double>(toFloat, {tensor(plan::U64, {1}, std::vector<uint64_t>{big})},
                        typeOf(plan::F64, {1}), {double(big)});
}

TEST(ElementwiseKernel, BoolLogic) {
  // Bool bytes other than 1 read as true.
  std::vector<uint8_t> a = {0, 0, 1, 2}, b = {0, 1, 0, 1};
  struct Case {
    plan::ExprOp op;
    std::vector<uint8_t> want;
  };
  const Case cases[] = {
      {plan::AND, {0, 0, 0, 1}},
      {plan::OR, {0, 1, 1, 1}},
      {plan::XOR, {0, 1, 1, 0}},
      {plan::EQUAL, {1, 0, 0, 1}},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(plan::ExprOp_Name(c.op));
    Expr e;
    e.add(c.op, plan::BOOL, {e.input(0, plan::BOOL), e.input(1, plan::BOOL)});
    expectExactly<uint8_t>(e, {tensor(plan::BOOL, {4}, a), tensor(plan::BOOL, {4}, b)},
                           typeOf(plan::BOOL, {4}), c.want);
  }
  Expr e;
  e.add(plan::NOT, plan::BOOL, {e.input(0, plan::BOOL)});
  expectExactly<uint8_t>(e, {tensor(plan::BOOL, {4}, a)}, typeOf(plan::BOOL, {4}), {1, 1, 0, 0});
}

TEST(ElementwiseKernel, Casts) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {2.7f, -2.7f, 0.f, -0.5f, 1e10f, nan};
  Expr toI32;
  toI32.add(plan::CAST, plan::I32, {toI32.input(0, plan::F32)});
  std::vector<int32_t> i32 = run<int32_t>(toI32, {tensor(plan::F32, {6}, x)},
                                          typeOf(plan::I32, {6}), 1);
  ASSERT_EQ(i32.size(), 6u);
  EXPECT_EQ(std::vector<int32_t>(i32.begin(), i32.begin() + 4),
            (std::vector<int32_t>{2, -2, 0, 0}));
  // 1e10 and NaN have no i32 value; only that they do not crash matters.

  Expr toBool;
  toBool.add(plan::CAST, plan::BOOL, {toBool.input(0, plan::F32)});
  expectExactly<uint8_t>(toBool, {tensor(plan::F32, {6}, x)}, typeOf(plan::BOOL, {6}),
                         {1, 1, 0, 1, 1, 1});

  // bool -> f32, i64 -> f64 -> f32, u8 -> i64
  Expr chain;
  int f = chain.add(plan::CAST, plan::F32, {chain.input(0, plan::BOOL)});
  int d = chain.add(plan::CAST, plan::F64, {chain.input(1, plan::I64)});
  int df = chain.add(plan::CAST, plan::F32, {d});
  int u = chain.add(plan::CAST, plan::F32,
                    {chain.add(plan::CAST, plan::I64, {chain.input(2, plan::U8)})});
  chain.add(plan::ADD, plan::F32, {chain.add(plan::ADD, plan::F32, {f, df}), u});
  expectExactly<float>(chain,
                       {tensor(plan::BOOL, {3}, std::vector<uint8_t>{1, 0, 1}),
                        tensor(plan::I64, {3}, std::vector<int64_t>{-5, 1 << 20, 7}),
                        tensor(plan::U8, {3}, std::vector<uint8_t>{255, 0, 1})},
                       typeOf(plan::F32, {3}), {251.f, float(1 << 20), 9.f});

  // f64 -> i16 truncates, then wraps as i16.
  Expr toI16;
  toI16.add(plan::CAST, plan::I16, {toI16.input(0, plan::F64)});
  expectExactly<int16_t>(toI16, {tensor(plan::F64, {3}, std::vector<double>{-3.9, 32767.5, 40000})},
                         typeOf(plan::I16, {3}), {-3, 32767, int16_t(40000 - 65536)});
}

TEST(ElementwiseKernel, WhereOnI64) {
  // where(a < b, a, b * 10) over broadcast i64 inputs and a bool condition
  // input: where(c, that, -1).
  const Shape shape = {3, 4};
  std::vector<int64_t> a = {1, 5, -3, 8, 0, 2, 9, -1, 4, 4, 7, 3}, b = {2, 5, 0, 1};
  std::vector<uint8_t> c = {1, 0, 1};
  Expr e;
  int ia = e.input(0, plan::I64), ib = e.input(1, plan::I64);
  int less = e.add(plan::LESS, plan::BOOL, {ia, ib});
  int tenB = e.add(plan::MUL, plan::I64, {ib, e.constant(10, plan::I64)});
  int inner = e.add(plan::WHERE, plan::I64, {less, ia, tenB});
  e.add(plan::WHERE, plan::I64, {e.input(2, plan::BOOL), inner, e.constant(-1, plan::I64)});
  std::vector<int64_t> want;
  for (int64_t i = 0; i < 12; ++i) {
    int64_t x = a[size_t(i)], y = b[size_t(i % 4)];
    want.push_back(c[size_t(i / 4)] ? (x < y ? x : y * 10) : -1);
  }
  expectExactly<int64_t>(e,
                         {tensor(plan::I64, shape, a), tensor(plan::I64, {4}, b),
                          tensor(plan::BOOL, {3, 1}, c)},
                         typeOf(plan::I64, shape), want);
}

//===----------------------------------------------------------------------===//
// Big tensors: many blocks, both threads
//===----------------------------------------------------------------------===//

TEST(ElementwiseKernel, BigFusedExpression) {
  // sigmoid(x) * tanh(y + bias) with x in f32 and y in f64 cast down, over
  // 1000003 elements: not a multiple of any block, and enough for threads.
  const Shape shape = {1000003};
  std::vector<float> x = randomFloats(1000003, 10);
  std::vector<double> y(1000003);
  for (size_t i = 0; i < y.size(); ++i)
    y[i] = std::sin(double(i));
  Expr e;
  int sig = e.add(plan::SIGMOID, plan::F32, {e.input(0, plan::F32)});
  int yf = e.add(plan::CAST, plan::F32, {e.input(1, plan::F64)});
  int t = e.add(plan::TANH, plan::F32, {e.add(plan::ADD, plan::F32, {yf, e.input(2, plan::F32)})});
  e.add(plan::MUL, plan::F32, {sig, t});
  std::vector<float> bias = {0.25f};
  std::vector<Tensor> inputs = {tensor(plan::F32, shape, x), tensor(plan::F64, shape, y),
                                tensor(plan::F32, {}, bias)};
  expectOutput<float>(e, inputs, typeOf(plan::F32, shape), [&](int64_t i) {
    double v = x[size_t(i)];
    return 1 / (1 + std::exp(-v)) * std::tanh(double(float(y[size_t(i)])) + 0.25);
  });
  // Threads split the work but not the results.
  EXPECT_EQ(run<float>(e, inputs, typeOf(plan::F32, shape), 1),
            run<float>(e, inputs, typeOf(plan::F32, shape), 2));
}

TEST(ElementwiseKernel, OutputMayShareTheInputsBytes) {
  // Buffer assignment may give the output an input's bytes; the result must
  // be as if it had not.
  const int64_t n = 200001;
  std::vector<float> x = randomFloats(n, 11), bias = randomFloats(1, 12);
  std::vector<float> buffer = x;
  Expr e;
  e.add(plan::MUL, plan::F32,
        {e.add(plan::ADD, plan::F32, {e.input(0, plan::F32), e.input(1, plan::F32)}),
         e.input(0, plan::F32)});
  std::string error;
  std::vector<plan::TensorType> types = {typeOf(plan::F32, {n}), typeOf(plan::F32, {1})};
  auto kernel = makeElementwiseKernel(e.proto, types, {typeOf(plan::F32, {n})}, error);
  ASSERT_TRUE(kernel) << error;
  const void *inputs[] = {buffer.data(), bias.data()};
  void *outputs[] = {buffer.data()};
  ThreadPool pool(2);
  ASSERT_TRUE(kernel->run(inputs, outputs, pool, error)) << error;
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(buffer[size_t(i)], (x[size_t(i)] + bias[0]) * x[size_t(i)]) << i;

  // Shifted by an element, the output overwrites input elements that later
  // blocks read; and the bias lies in the output's bytes.
  std::vector<float> shifted(size_t(n) + 1);
  std::copy(x.begin(), x.end(), shifted.begin());
  shifted[size_t(n)] = bias[0];
  const void *overlapping[] = {shifted.data(), shifted.data() + n};
  void *shiftedOutput[] = {shifted.data() + 1};
  ASSERT_TRUE(kernel->run(overlapping, shiftedOutput, pool, error)) << error;
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(shifted[size_t(i) + 1], (x[size_t(i)] + bias[0]) * x[size_t(i)]) << i;
}

// AdamW's update as one pass (dtc-fuse-elementwise joins it so): the new
// moments and parameter, each written over the value it replaces, as
// buffer assignment places them, the parameter read after the moments'
// nodes are computed.
TEST(ElementwiseKernel, SeveralOutputsOverTheirInputs) {
  const int64_t n = 200001;
  std::vector<float> m0 = randomFloats(n, 21), g = randomFloats(n, 22), p0 = randomFloats(n, 23);
  std::vector<float> v0 = kerneltest::randomFloats(n, 24, 0.f, 2.f), lr = {0.01f};
  Expr e;
  const plan::DType f = plan::F32;
  int m = e.input(0, f), grad = e.input(1, f), v = e.input(2, f), rate = e.input(3, f),
      p = e.input(4, f);
  int m1 = e.add(plan::ADD, f,
                 {e.add(plan::MUL, f, {m, e.constant(0.9, f)}),
                  e.add(plan::MUL, f, {grad, e.constant(0.1, f)})});
  int v1 = e.add(plan::ADD, f,
                 {e.add(plan::MUL, f, {v, e.constant(0.999, f)}),
                  e.add(plan::MUL, f,
                        {e.add(plan::MUL, f, {grad, grad}), e.constant(0.001, f)})});
  int step = e.add(plan::DIV, f,
                   {e.add(plan::MUL, f, {m1, rate}),
                    e.add(plan::ADD, f, {e.add(plan::SQRT, f, {v1}), e.constant(1e-8, f)})});
  int p1 = e.add(plan::SUB, f, {p, step});
  for (int node : {m1, v1, p1})
    e.proto.add_outputs(uint32_t(node));
  std::vector<plan::TensorType> in = {typeOf(f, {n}), typeOf(f, {n}), typeOf(f, {n}),
                                      typeOf(f, {1}), typeOf(f, {n})};
  std::vector<plan::TensorType> out(3, typeOf(f, {n}));
  // Over their inputs, and into buffers of their own (computed there,
  // the moments read from there by the later nodes).
  forEachIsa([&] {
    for (auto [threads, over] : {std::pair{1, true}, {2, true}, {2, false}}) {
      std::string error;
      auto kernel = makeElementwiseKernel(e.proto, in, out, error);
      ASSERT_TRUE(kernel) << error;
      std::vector<float> ma = m0, va = v0, pa = p0, mo(m0.size()), vo(m0.size()),
                         po(m0.size());
      std::vector<float> &mb = over ? ma : mo, &vb = over ? va : vo, &pb = over ? pa : po;
      const void *inputs[] = {ma.data(), g.data(), va.data(), lr.data(), pa.data()};
      void *outputs[] = {mb.data(), vb.data(), pb.data()};
      ThreadPool pool(threads);
      ASSERT_TRUE(kernel->run(inputs, outputs, pool, error)) << error;
      for (int64_t i = 0; i < n; ++i) {
        size_t k = size_t(i);
        float wantM = m0[k] * 0.9f + g[k] * 0.1f;
        float wantV = v0[k] * 0.999f + g[k] * g[k] * 0.001f;
        float wantP = p0[k] - wantM * lr[0] / (std::sqrt(wantV) + 1e-8f);
        ASSERT_TRUE(near(mb[k], wantM)) << "m, element " << i;
        ASSERT_TRUE(near(vb[k], wantV)) << "v, element " << i;
        ASSERT_TRUE(near(pb[k], wantP, 1e-5, 1e-5)) << "p, element " << i;
      }
    }
  });
}

// An output other nodes read is rounded before they read it (a bf16 sum
// and its f32 double); a uniform node and one node twice are outputs too.
TEST(ElementwiseKernel, SeveralOutputsOfEveryKind) {
  const int64_t n = 3000;
  std::vector<float> x = randomFloats(n, 31), y = randomFloats(n, 32);
  Expr e;
  int sum = e.add(plan::ADD, plan::BF16,
                  {e.add(plan::CAST, plan::BF16, {e.input(0, plan::F32)}),
                   e.add(plan::CAST, plan::BF16, {e.input(1, plan::F32)})});
  int twice = e.add(plan::MUL, plan::F32,
                    {e.add(plan::CAST, plan::F32, {sum}), e.constant(2, plan::F32)});
  int three = e.constant(3, plan::F32);
  for (int node : {sum, twice, three, twice})
    e.proto.add_outputs(uint32_t(node));
  std::vector<plan::TensorType> in = {typeOf(plan::F32, {n}), typeOf(plan::F32, {n})};
  std::vector<plan::TensorType> out = {typeOf(plan::BF16, {n}), typeOf(plan::F32, {n}),
                                       typeOf(plan::F32, {n}), typeOf(plan::F32, {n})};
  std::string error;
  auto kernel = makeElementwiseKernel(e.proto, in, out, error);
  ASSERT_TRUE(kernel) << error;
  const size_t elements = static_cast<size_t>(n);
  std::vector<uint16_t> sums(elements);
  std::vector<float> twices(elements), threes(elements), again(elements);
  const void *inputs[] = {x.data(), y.data()};
  void *outputs[] = {sums.data(), twices.data(), threes.data(), again.data()};
  ThreadPool pool(2);
  ASSERT_TRUE(kernel->run(inputs, outputs, pool, error)) << error;
  for (int64_t i = 0; i < n; ++i) {
    size_t k = size_t(i);
    BFloat16 want(float(BFloat16(x[k])) + float(BFloat16(y[k])));
    ASSERT_EQ(sums[k], want.bits) << i;
    ASSERT_EQ(twices[k], float(want) * 2) << i;
    ASSERT_EQ(again[k], twices[k]) << i;
    ASSERT_EQ(threes[k], 3.f) << i;
  }
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

std::string errorOf(const Expr &expr, const std::vector<plan::TensorType> &inputs,
                    const plan::TensorType &output) {
  std::string error;
  auto kernel = makeElementwiseKernel(expr.proto, inputs, {output}, error);
  EXPECT_FALSE(kernel);
  EXPECT_FALSE(error.empty());
  return error;
}

Expr addOf(plan::DType dtype) {
  Expr e;
  e.add(plan::ADD, dtype, {e.input(0, dtype), e.input(1, dtype)});
  return e;
}

TEST(ElementwiseKernelErrors, ShapesThatDoNotBroadcast) {
  auto f32 = [](const Shape &s) { return typeOf(plan::F32, s); };
  EXPECT_NE(errorOf(addOf(plan::F32), {f32({3, 4}), f32({4})}, f32({3, 5}))
                .find("elementwise input 0: [3,4] does not broadcast to the output shape [3,5]"),
            std::string::npos);
  EXPECT_NE(errorOf(addOf(plan::F32), {f32({2, 3, 4}), f32({4})}, f32({3, 4})).find("broadcast"),
            std::string::npos);
  EXPECT_NE(errorOf(addOf(plan::F32), {f32({3, 4}), f32({2, 1})}, f32({3, 4})).find("input 1"),
            std::string::npos);
}

TEST(ElementwiseKernelErrors, SeveralOutputs) {
  auto f32 = [](const Shape &s) { return typeOf(plan::F32, s); };
  Expr e = addOf(plan::F32);
  e.proto.add_outputs(0);
  e.proto.add_outputs(2);
  std::string error;
  auto make = [&](const Expr &expr, std::vector<plan::TensorType> outs) {
    error.clear();
    EXPECT_FALSE(makeElementwiseKernel(expr.proto, {f32({4}), f32({4})}, outs, error));
    return error;
  };
  EXPECT_NE(make(e, {f32({4})}).find("the expression has 2 outputs but the instruction 1"),
            std::string::npos);
  EXPECT_NE(make(e, {f32({4}), f32({2, 4})})
                .find("elementwise output 1: [2,4] is not the shape of output 0, [4]"),
            std::string::npos)
      << error;
  EXPECT_NE(make(e, {f32({4}), typeOf(plan::F64, {4})})
                .find("the node is f32 but output 1 is f64"),
            std::string::npos)
      << error;
  Expr past = addOf(plan::F32);
  past.proto.add_outputs(2);
  past.proto.add_outputs(7);
  EXPECT_NE(make(past, {f32({4}), f32({4})}).find("output 1: node 7 is past the last node"),
            std::string::npos)
      << error;
}

TEST(ElementwiseKernelErrors, BadArguments) {
  auto f32 = typeOf(plan::F32, {4});
  Expr later;
  later.add(plan::NEG, plan::F32, {1});
  later.input(0, plan::F32);
  EXPECT_NE(errorOf(later, {f32}, f32).find("not an earlier node"), std::string::npos);

  Expr missing;
  missing.input(2, plan::F32);
  EXPECT_NE(errorOf(missing, {f32}, f32).find("reads input 2 but the instruction has 1 inputs"),
            std::string::npos);

  Expr arity;
  arity.add(plan::ADD, plan::F32, {arity.input(0, plan::F32)});
  EXPECT_NE(errorOf(arity, {f32}, f32).find("node 1 (Add): expected 2 arguments, got 1"),
            std::string::npos);

  Expr unknown;
  unknown.add(plan::ExprOp(99), plan::F32, {unknown.input(0, plan::F32)});
  EXPECT_NE(errorOf(unknown, {f32}, f32).find("unknown op"), std::string::npos);

  EXPECT_NE(errorOf(Expr(), {f32}, f32).find("no nodes"), std::string::npos);
}

TEST(ElementwiseKernelErrors, DTypeMismatches) {
  auto of = [](plan::DType d) { return typeOf(d, {4}); };
  // An i64 argument to an f32 Add.
  Expr mixed;
  mixed.add(plan::ADD, plan::F32, {mixed.input(0, plan::F32), mixed.input(1, plan::I64)});
  EXPECT_NE(errorOf(mixed, {of(plan::F32), of(plan::I64)}, of(plan::F32))
                .find("node 2 (Add): argument 1 (node 1) is i64, expected f32"),
            std::string::npos);
  // The INPUT node's dtype is not the input's.
  EXPECT_NE(errorOf(addOf(plan::F32), {of(plan::F32), of(plan::F64)}, of(plan::F32))
                .find("node 1 (Input): the node is f32 but input 1 is f64"),
            std::string::npos);
  // The last node is not the output's dtype.
  EXPECT_NE(errorOf(addOf(plan::F32), {of(plan::F32), of(plan::F32)}, of(plan::F64))
                .find("the last node is f32 but the output is f64"),
            std::string::npos);
  // Exp of an integer, Add of bools, a comparison that is not bool, a
  // Where whose condition is not bool, And of f32.
  Expr expInt;
  expInt.add(plan::EXP, plan::I64, {expInt.input(0, plan::I64)});
  EXPECT_NE(errorOf(expInt, {of(plan::I64)}, of(plan::I64)).find("needs f32 or f64, got i64"),
            std::string::npos);
  EXPECT_NE(errorOf(addOf(plan::BOOL), {of(plan::BOOL), of(plan::BOOL)}, of(plan::BOOL))
                .find("needs a numeric dtype"),
            std::string::npos);
  Expr less;
  less.add(plan::LESS, plan::F32, {less.input(0, plan::F32), less.input(0, plan::F32)});
  EXPECT_NE(errorOf(less, {of(plan::F32)}, of(plan::F32)).find("produces bool"),
            std::string::npos);
  Expr where;
  int x = where.input(0, plan::F32);
  where.add(plan::WHERE, plan::F32, {x, x, x});
  EXPECT_NE(errorOf(where, {of(plan::F32)}, of(plan::F32))
                .find("the condition (argument 0) must be bool, got f32"),
            std::string::npos);
  Expr logic;
  int y = logic.input(0, plan::F32);
  logic.add(plan::AND, plan::BOOL, {y, y});
  EXPECT_NE(errorOf(logic, {of(plan::F32)}, of(plan::BOOL)).find("is f32, expected bool"),
            std::string::npos);
}

// 16-bit floats are stored as such, computed in float and rounded after
// every node, as a kernel of that type would.
TEST(ElementwiseKernel, HalfPrecisionComputesInFloatAndRounds) {
  const int64_t n = 1000;
  std::vector<float> a = randomFloats(n, 3), b = randomFloats(n, 4);
  std::vector<_Float16> ah, bh;
  for (int64_t i = 0; i < n; ++i) {
    ah.push_back(_Float16(a[i]));
    bh.push_back(_Float16(b[i]));
  }
  Expr e;
  int sum = e.add(plan::ADD, plan::F16, {e.input(0, plan::F16), e.input(1, plan::F16)});
  e.add(plan::MUL, plan::F16, {sum, e.constant(0.1, plan::F16)});
  Expr roundTrip;
  roundTrip.add(plan::CAST, plan::F32,
                {roundTrip.add(plan::CAST, plan::BF16, {roundTrip.input(0, plan::F32)})});
  Expr toBf16;
  toBf16.add(plan::CAST, plan::BF16, {toBf16.input(0, plan::F32)});
  for (int threads : {1, 2}) {
    std::vector<_Float16> half = run<_Float16>(e, {tensor(plan::F16, {n}, ah), tensor(plan::F16, {n}, bh)},
                                               typeOf(plan::F16, {n}), threads);
    std::vector<float> trip = run<float>(roundTrip, {tensor(plan::F32, {n}, a)},
                                         typeOf(plan::F32, {n}), threads);
    std::vector<uint16_t> bits = run<uint16_t>(toBf16, {tensor(plan::F32, {n}, a)},
                                               typeOf(plan::BF16, {n}), threads);
    ASSERT_EQ(half.size(), size_t(n));
    for (int64_t i = 0; i < n; ++i) {
      float rounded = float(_Float16(float(ah[i]) + float(bh[i])));
      EXPECT_EQ(float(half[i]), float(_Float16(rounded * float(_Float16(0.1f))))) << i;
      EXPECT_EQ(trip[i], float(BFloat16(a[i]))) << i;
      EXPECT_EQ(bits[i], BFloat16(a[i]).bits) << i;
    }
  }
}

//===----------------------------------------------------------------------===//
// Timing (run with --gtest_also_run_disabled_tests): ns per output element.
//===----------------------------------------------------------------------===//

TEST(ElementwiseKernel, DISABLED_Timing) {
  // x and y: [rows, 1024]; bias: [1024].
  auto timeCase = [](const char *name, const Expr &expr, int64_t rows, int reps) {
    const Shape shape = {rows, 1024};
    const int64_t n = count(shape);
    std::vector<Tensor> inputs = {tensor(plan::F32, shape, randomFloats(n, 1)),
                                  tensor(plan::F32, shape, randomFloats(n, 2)),
                                  tensor(plan::F32, {1024}, randomFloats(1024, 3))};
    std::vector<plan::TensorType> types;
    std::vector<const void *> pointers;
    for (const Tensor &t : inputs) {
      types.push_back(t.type);
      pointers.push_back(t.bytes.data());
    }
    std::vector<float> out(static_cast<size_t>(n));
    void *outputs[] = {out.data()};
    std::string error;
    auto kernel = makeElementwiseKernel(expr.proto, types, {typeOf(plan::F32, shape)}, error);
    ASSERT_TRUE(kernel) << error;
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      double best = 1e9;
      for (int rep = 0; rep < reps; ++rep) {
        auto start = std::chrono::steady_clock::now();
        kernel->run(pointers.data(), outputs, pool, error);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                            start).count());
      }
      std::printf("%-44s %d thread(s): %9.1f us, %.3f ns/element\n", name, threads, best * 1e6,
                  best * 1e9 / double(n));
    }
  };
  Expr bias;
  bias.add(plan::ADD, plan::F32, {bias.input(0, plan::F32), bias.input(2, plan::F32)});
  Expr gelu;
  gelu.add(plan::GELU, plan::F32, {gelu.input(0, plan::F32)});
  Expr written; // 0.5 h (1 + erf(h / sqrt 2)), h = x + bias
  int h = written.add(plan::ADD, plan::F32,
                      {written.input(0, plan::F32), written.input(2, plan::F32)});
  int scaled = written.add(plan::MUL, plan::F32, {h, written.constant(kSqrtHalf, plan::F32)});
  int onePlus = written.add(plan::ADD, plan::F32,
                            {written.add(plan::ERF, plan::F32, {scaled}),
                             written.constant(1, plan::F32)});
  written.add(plan::MUL, plan::F32,
              {written.add(plan::MUL, plan::F32, {h, onePlus}), written.constant(0.5, plan::F32)});
  timeCase("add [128,1024] + [128,1024]", addOf(plan::F32), 128, 200);
  timeCase("bias add [128,1024] + [1024]", bias, 128, 200);
  timeCase("gelu [128,1024]", gelu, 128, 200);
  timeCase("bias + gelu written out [128,1024] (7 nodes)", written, 128, 200);
  timeCase("add [65536,1024] + [65536,1024] (DRAM)", addOf(plan::F32), 65536, 5);
}

} // namespace
