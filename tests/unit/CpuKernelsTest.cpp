// Every CPU kernel (but elementwise, tested on its own) against a plain
// reference loop written here in double, with one and two threads; and the
// messages makeKernel gives for plans it cannot run.
#include "runtime/cpu/BFloat16.h"
#include "runtime/cpu/Dnnl.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "tests/unit/KernelTestSupport.h"

#include <cblas.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

using namespace dtc;
using namespace dtc::runtime::cpu;
using namespace dtc::kerneltest;

namespace {


//===----------------------------------------------------------------------===//
// Harness
//===----------------------------------------------------------------------===//


Shape shapeOf(const plan::TensorType &type) { return Shape(type.shape().begin(), type.shape().end()); }

/// Bytes per element of the dtypes these tests use.
int64_t elementSize(plan::DType dtype) {
  switch (dtype) {
  case plan::F64:
  case plan::I64:
    return 8;
  case plan::F32:
  case plan::I32:
    return 4;
  case plan::I16:
  case plan::F16:
  case plan::BF16:
    return 2;
  default:
    return 1;
  }
}


template <class T> std::vector<T> values(const Tensor &t) {
  std::vector<T> v(t.bytes.size() / sizeof(T));
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

Tensor randomF32(const Shape &shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  return tensor(plan::F32, shape, randomFloats(count(shape), seed, lo, hi));
}

/// `t` (f32) as `dtype`: itself, or each value rounded to bf16.
Tensor inDType(const Tensor &t, plan::DType dtype) {
  if (dtype == plan::F32)
    return t;
  std::vector<BFloat16> narrow;
  for (float v : values<float>(t))
    narrow.push_back(BFloat16(v));
  return tensor(dtype, Shape(t.type.shape().begin(), t.type.shape().end()), narrow);
}

/// Consecutive integers 0, 1, 2, ... as T: data movement keeps them exact.
template <class T> Tensor iota(plan::DType dtype, const Shape &shape) {
  std::vector<T> v(static_cast<size_t>(count(shape)));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = T(i);
  return tensor(dtype, shape, v);
}

/// Prepares `inst` and runs it on a pool of `threads`. Returns the output;
/// `runError` gets run()'s message when it fails (the test fails if it
/// fails unexpectedly).
/// `constant[i]`: input i is given to makeKernel as constant (the kernel
/// may prepare it once, as it does for parameters).
Tensor runKernel(const plan::Instruction &inst, const std::vector<Tensor> &inputs,
                 const plan::TensorType &outputType, int threads,
                 std::string *runError = nullptr, const std::vector<bool> &constant = {}) {
  std::vector<plan::TensorType> inTypes;
  std::vector<const void *> in, constants;
  for (size_t i = 0; i < inputs.size(); ++i) {
    inTypes.push_back(inputs[i].type);
    in.push_back(inputs[i].bytes.data());
    constants.push_back(i < constant.size() && constant[i] ? in.back() : nullptr);
  }
  std::string error;
  auto kernel = makeKernel(inst, inTypes, {outputType}, error, constants);
  Tensor out{outputType, {}};
  EXPECT_TRUE(kernel) << error;
  if (!kernel)
    return out;
  int64_t bytes = count(shapeOf(outputType)) * elementSize(outputType.dtype());
  // Garbage in the output, so a kernel that skips an element is caught.
  out.bytes.assign(size_t(bytes), char(0x7f));
  ThreadPool pool(threads);
  void *outPtr = out.bytes.data();
  bool ok = kernel->run(in.data(), &outPtr, pool, error);
  if (runError)
    *runError = ok ? "" : error;
  else
    EXPECT_TRUE(ok) << error;
  return out;
}

/// Turns oneDNN off for a scope: kernels take their own paths.
struct WithoutDnnl {
  explicit WithoutDnnl(bool off) { setDnnlAllowed(!off); }
  ~WithoutDnnl() { setDnnlAllowed(true); }
};

/// Runs with 1 and 2 threads, with oneDNN and without (each kernel's own
/// paths); each output element within rel 1e-4 / abs 1e-5 of the double
/// reference (NaN and infinities must match exactly).
template <class T = float>
void expectClose(const plan::Instruction &inst, const std::vector<Tensor> &inputs,
                 const Shape &outShape, const std::vector<double> &expected,
                 const std::vector<bool> &constant = {}) {
  plan::DType dtype = sizeof(T) == 8 ? plan::F64 : plan::F32;
  ASSERT_EQ(int64_t(expected.size()), count(outShape));
  for (int run = 0; run < 4; ++run) {
    int threads = 1 + run % 2;
    WithoutDnnl scope(run >= 2);
    SCOPED_TRACE("threads " + std::to_string(threads) + (run >= 2 ? ", without oneDNN" : ""));
    std::vector<T> actual =
        values<T>(runKernel(inst, inputs, typeOf(dtype, outShape), threads, nullptr, constant));
    ASSERT_EQ(actual.size(), expected.size());
    int reported = 0;
    for (size_t i = 0; i < actual.size() && reported < 5; ++i) {
      double a = actual[i], e = expected[i];
      bool same = std::isnan(e) ? std::isnan(a)
                  : std::isinf(e) ? a == e
                                  : std::fabs(a - e) <= 1e-5 + 1e-4 * std::fabs(e);
      if (!same) {
        ADD_FAILURE() << "element " << i << ": got " << a << ", expected " << e;
        ++reported;
      }
    }
  }
}

/// Runs with 1 and 2 threads; the output bytes must equal `expected`'s.
void expectExact(const plan::Instruction &inst, const std::vector<Tensor> &inputs,
                 const Tensor &expected) {
  for (int run = 0; run < 4; ++run) {
    int threads = 1 + run % 2;
    WithoutDnnl scope(run >= 2);
    SCOPED_TRACE("threads " + std::to_string(threads) + (run >= 2 ? ", without oneDNN" : ""));
    Tensor actual = runKernel(inst, inputs, expected.type, threads);
    EXPECT_TRUE(actual.bytes == expected.bytes);
  }
}

/// makeKernel's message for an instruction it must refuse.
std::string prepareError(const plan::Instruction &inst, const std::vector<plan::TensorType> &inputs,
                         const plan::TensorType &output) {
  std::string error;
  auto kernel = makeKernel(inst, inputs, {output}, error);
  EXPECT_FALSE(kernel);
  return error;
}

/// Row-major multi-index of flat position `flat` in `shape`.
Shape unflatten(int64_t flat, const Shape &shape) {
  Shape index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

int64_t flatten(const Shape &index, const Shape &shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    flat = flat * shape[d] + index[d];
  return flat;
}

//===----------------------------------------------------------------------===//
// matmul
//===----------------------------------------------------------------------===//

plan::Instruction matmulInst(bool transposeLhs = false, bool transposeRhs = false) {
  plan::Instruction inst;
  inst.mutable_matmul()->set_transpose_lhs(transposeLhs);
  inst.mutable_matmul()->set_transpose_rhs(transposeRhs);
  return inst;
}

/// The reference matmul; sets `outShape`.
std::vector<double> refMatMul(const Tensor &lhs, const Tensor &rhs, bool ta, bool tb,
                              Shape &outShape) {
  Shape as = shapeOf(lhs.type), bs = shapeOf(rhs.type);
  std::vector<float> a = values<float>(lhs), b = values<float>(rhs);
  size_t ar = as.size(), br = bs.size(), rank = std::max(ar, br);
  int64_t M = ta ? as[ar - 1] : as[ar - 2], K = ta ? as[ar - 2] : as[ar - 1];
  int64_t N = tb ? bs[br - 2] : bs[br - 1];
  // Batch shapes right-aligned, padded with 1s.
  Shape aBatch(rank - 2, 1), bBatch(rank - 2, 1), batch(rank - 2);
  for (size_t i = 0; i < ar - 2; ++i)
    aBatch[rank - ar + i] = as[i];
  for (size_t i = 0; i < br - 2; ++i)
    bBatch[rank - br + i] = bs[i];
  for (size_t i = 0; i < rank - 2; ++i)
    batch[i] = std::max(aBatch[i], bBatch[i]);
  outShape = batch;
  outShape.push_back(M);
  outShape.push_back(N);
  std::vector<double> out;
  for (int64_t bi = 0; bi < count(batch); ++bi) {
    Shape index = unflatten(bi, batch), ai = index, bj = index;
    for (size_t i = 0; i < index.size(); ++i) {
      ai[i] = aBatch[i] == 1 ? 0 : index[i];
      bj[i] = bBatch[i] == 1 ? 0 : index[i];
    }
    int64_t aBase = flatten(ai, aBatch) * M * K, bBase = flatten(bj, bBatch) * K * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double sum = 0;
        for (int64_t k = 0; k < K; ++k)
          sum += double(a[aBase + (ta ? k * M + m : m * K + k)]) *
                 b[bBase + (tb ? n * K + k : k * N + n)];
        out.push_back(sum);
      }
  }
  return out;
}

void checkMatMul(const Shape &lhsShape, const Shape &rhsShape, bool ta = false, bool tb = false) {
  SCOPED_TRACE("matmul " + ::testing::PrintToString(lhsShape) + " x " +
               ::testing::PrintToString(rhsShape) + (ta ? " ta" : "") + (tb ? " tb" : ""));
  Tensor lhs = randomF32(lhsShape, 1), rhs = randomF32(rhsShape, 2);
  Shape outShape;
  std::vector<double> expected = refMatMul(lhs, rhs, ta, tb, outShape);
  expectClose(matmulInst(ta, tb), {lhs, rhs}, outShape, expected);
  SCOPED_TRACE("rhs constant (reordered once)");
  expectClose(matmulInst(ta, tb), {lhs, rhs}, outShape, expected, {false, true});
}

TEST(MatMulKernel, Plain) { checkMatMul({3, 4}, {4, 5}); }

TEST(MatMulKernel, Transposes) {
  checkMatMul({4, 3}, {4, 5}, true, false);
  checkMatMul({3, 4}, {5, 4}, false, true);
  checkMatMul({4, 3}, {5, 4}, true, true);
  checkMatMul({2, 4, 3}, {4, 5}, true, false); // a batched lhs that cannot fold
  checkMatMul({2, 3, 4}, {2, 5, 4}, false, true);
}

TEST(MatMulKernel, RhsWithoutBatchIsOneGemm) {
  checkMatMul({2, 3, 7, 4}, {4, 5});
  // Batch dims of size 1 on the rhs (found by the plan fuzzer: oneDNN's
  // operand was described with the rhs's full rank).
  checkMatMul({2, 3, 4}, {1, 4, 5});
  checkMatMul({2, 3, 4}, {1, 1, 5, 4}, false, true);
}

TEST(MatMulKernel, BatchBroadcast) {
  checkMatMul({2, 1, 3, 4}, {5, 4, 6});
  checkMatMul({3, 4}, {2, 4, 6});
  checkMatMul({2, 1, 3, 4}, {1, 3, 4, 2});
}

TEST(MatMulKernel, AttentionBatchesSplitOverThePool) {
  checkMatMul({2, 4, 32, 16}, {2, 4, 32, 16}, false, true); // q k^T
  checkMatMul({2, 4, 32, 32}, {2, 4, 32, 16});              // p v
}

// A linear layer's epilogue (MatMul.bias, .activation): the bias along the
// columns, then ReLU or tanh GELU, on oneDNN's post-ops and on the loop
// after sgemm; a folded batch and a batch of GEMMs.
TEST(MatMulKernel, BiasAndActivationEpilogues) {
  struct Case {
    Shape lhs, rhs;
    bool tb;
  };
  for (const Case &c : {Case{{2, 3, 4}, {4, 5}, false}, Case{{2, 3, 4}, {2, 5, 4}, true}})
    for (plan::Activation activation :
         {plan::ACTIVATION_NONE, plan::ACTIVATION_RELU, plan::ACTIVATION_GELU_TANH}) {
      SCOPED_TRACE(plan::Activation_Name(activation) + " " +
                   ::testing::PrintToString(c.lhs) + " x " + ::testing::PrintToString(c.rhs));
      Tensor lhs = randomF32(c.lhs, 1, -2.0f, 2.0f), rhs = randomF32(c.rhs, 2);
      int64_t n = c.tb ? c.rhs[c.rhs.size() - 2] : c.rhs.back();
      Tensor bias = randomF32({n}, 3);
      Shape outShape;
      std::vector<double> expected = refMatMul(lhs, rhs, false, c.tb, outShape);
      std::vector<float> b = values<float>(bias);
      for (size_t i = 0; i < expected.size(); ++i) {
        double x = expected[i] + b[i % size_t(n)];
        if (activation == plan::ACTIVATION_RELU)
          x = std::max(x, 0.0);
        if (activation == plan::ACTIVATION_GELU_TANH)
          x = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        expected[i] = x;
      }
      plan::Instruction inst = matmulInst(false, c.tb);
      inst.mutable_matmul()->set_bias(true);
      inst.mutable_matmul()->set_activation(activation);
      expectClose(inst, {lhs, rhs, bias}, outShape, expected);
      expectClose(inst, {lhs, rhs, bias}, outShape, expected, {false, true, true});
    }
  // The bias must be [N], and be given exactly when MatMul.bias says so.
  plan::Instruction inst = matmulInst();
  inst.mutable_matmul()->set_bias(true);
  EXPECT_EQ(prepareError(inst, {typeOf(plan::F32, {3, 4}), typeOf(plan::F32, {4, 5}),
                                typeOf(plan::F32, {4})},
                         typeOf(plan::F32, {3, 5})),
            "matmul: the bias is [4], not [5] (the product's columns)");
  EXPECT_EQ(prepareError(inst, {typeOf(plan::F32, {3, 4}), typeOf(plan::F32, {4, 5})},
                         typeOf(plan::F32, {3, 5})),
            "matmul: a matmul with a bias takes 3 inputs");
}

// A residual connection's sum written by the GEMM (MatMul.addend): the
// (biased) product plus a last input like the output, on oneDNN and on
// sgemm, a folded batch and a batch of GEMMs, with a bias and without (a
// sum of products: a layer's input gradient); refused with an activation,
// or an addend not like the output.
TEST(MatMulKernel, AddendJoinsTheProduct) {
  struct Case {
    Shape lhs, rhs;
    bool tb;
  };
  for (const Case &c : {Case{{2, 3, 4}, {4, 5}, false}, Case{{2, 3, 4}, {2, 5, 4}, true}})
    for (bool withoutDnnl : {false, true})
      for (bool biased : {true, false}) {
        SCOPED_TRACE(::testing::PrintToString(c.lhs) + " x " + ::testing::PrintToString(c.rhs) +
                     (withoutDnnl ? " without oneDNN" : "") + (biased ? ", biased" : ""));
        WithoutDnnl scope(withoutDnnl);
        Tensor lhs = randomF32(c.lhs, 71, -2.0f, 2.0f), rhs = randomF32(c.rhs, 72);
        int64_t n = c.tb ? c.rhs[c.rhs.size() - 2] : c.rhs.back();
        Tensor bias = randomF32({n}, 73);
        Shape outShape;
        std::vector<double> expected = refMatMul(lhs, rhs, false, c.tb, outShape);
        Tensor addend = randomF32(outShape, 74);
        std::vector<float> b = values<float>(bias), r = values<float>(addend);
        for (size_t i = 0; i < expected.size(); ++i)
          expected[i] += (biased ? b[i % size_t(n)] : 0.0f) + r[i];
        plan::Instruction inst = matmulInst(false, c.tb);
        inst.mutable_matmul()->set_bias(biased);
        inst.mutable_matmul()->set_addend(true);
        if (biased)
          expectClose(inst, {lhs, rhs, bias, addend}, outShape, expected);
        else
          expectClose(inst, {lhs, rhs, addend}, outShape, expected);
      }
  plan::Instruction inst = matmulInst();
  inst.mutable_matmul()->set_bias(true);
  inst.mutable_matmul()->set_addend(true);
  std::vector<plan::TensorType> in = {typeOf(plan::F32, {3, 4}), typeOf(plan::F32, {4, 5}),
                                      typeOf(plan::F32, {5}), typeOf(plan::F32, {3, 5})};
  EXPECT_EQ(prepareError(inst, {in[0], in[1], in[2], typeOf(plan::F32, {1, 5})},
                         typeOf(plan::F32, {3, 5})),
            "matmul: the addend must be a last input like the output");
  inst.mutable_matmul()->set_activation(plan::ACTIVATION_RELU);
  EXPECT_EQ(prepareError(inst, in, typeOf(plan::F32, {3, 5})),
            "matmul: only a matmul without an activation or epilogue output takes an addend");
}

/// A tanh GELU keeping its input (training's MLP): the first output is the
/// GELU of the biased product, the second the biased product itself; with
/// oneDNN and without, in f32 and in bf16 (each output rounded once).
TEST(MatMulKernel, GeluKeepingItsPreactivation) {
  const int64_t M = 6, K = 8, N = 5;
  Tensor a = randomF32({M, K}, 61, -2.0f, 2.0f), w = randomF32({K, N}, 62),
         bias = randomF32({N}, 63);
  std::vector<float> av = values<float>(a), wv = values<float>(w), bv = values<float>(bias);
  plan::Instruction inst = matmulInst();
  inst.mutable_matmul()->set_bias(true);
  inst.mutable_matmul()->set_activation(plan::ACTIVATION_GELU_TANH);
  inst.mutable_matmul()->set_keep_preactivation(true);
  for (plan::DType dtype : {plan::F32, plan::BF16})
    for (bool withoutDnnl : {false, true}) {
      SCOPED_TRACE(std::string(dtype == plan::BF16 ? "bf16" : "f32") +
                   (withoutDnnl ? " without oneDNN" : ""));
      WithoutDnnl scope(withoutDnnl);
      auto round = [&](float x) { return dtype == plan::BF16 ? float(BFloat16(x)) : x; };
      std::vector<float> ar, wr;
      std::vector<BFloat16> ah, wh;
      for (float v : av)
        ar.push_back(round(v)), ah.push_back(BFloat16(v));
      for (float v : wv)
        wr.push_back(round(v)), wh.push_back(BFloat16(v));
      std::vector<Tensor> inputs =
          dtype == plan::F32
              ? std::vector<Tensor>{a, w, bias}
              : std::vector<Tensor>{tensor(dtype, {M, K}, ah), tensor(dtype, {K, N}, wh),
                                    bias};
      std::vector<plan::TensorType> inTypes;
      std::vector<const void *> in;
      for (const Tensor &t : inputs)
        inTypes.push_back(t.type), in.push_back(t.bytes.data());
      plan::TensorType outType = typeOf(dtype, {M, N});
      std::string error;
      if (dtype == plan::BF16) { // the bias is in the product's dtype
        std::vector<BFloat16> bh;
        for (float v : bv)
          bh.push_back(BFloat16(v));
        inputs[2] = tensor(dtype, {N}, bh);
        inTypes[2] = inputs[2].type, in[2] = inputs[2].bytes.data();
      }
      auto kernel = makeKernel(inst, inTypes, {outType, outType}, error);
      ASSERT_TRUE(kernel) << error;
      size_t bytes = size_t(M * N * elementSize(dtype));
      std::vector<char> y(bytes, char(0x7f)), pre(bytes, char(0x7f));
      void *out[] = {y.data(), pre.data()};
      ThreadPool pool(2);
      ASSERT_TRUE(kernel->run(in.data(), out, pool, error)) << error;
      Tensor yt{outType, y}, pt{outType, pre};
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double x = round(bv[size_t(j)]);
          for (int64_t k = 0; k < K; ++k)
            x += double(ar[size_t(i * K + k)]) * double(wr[size_t(k * N + j)]);
          double g = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
          double tol = dtype == plan::BF16 ? 1.0 / 128 : 1e-5;
          float gotPre = dtype == plan::BF16 ? float(values<BFloat16>(pt)[size_t(i * N + j)])
                                             : values<float>(pt)[size_t(i * N + j)];
          float gotY = dtype == plan::BF16 ? float(values<BFloat16>(yt)[size_t(i * N + j)])
                                           : values<float>(yt)[size_t(i * N + j)];
          EXPECT_NEAR(gotPre, x, 1e-5 + tol * std::fabs(x)) << "preactivation " << i << "," << j;
          EXPECT_NEAR(gotY, g, 1e-5 + tol * std::fabs(g) + tol * std::fabs(x))
              << "gelu " << i << "," << j;
        }
    }
  // Only a tanh GELU keeps it, as a second output like the first.
  plan::Instruction relu = inst;
  relu.mutable_matmul()->set_activation(plan::ACTIVATION_RELU);
  std::string error;
  plan::TensorType t = typeOf(plan::F32, {M, N});
  EXPECT_EQ(makeKernel(relu, {a.type, w.type, bias.type}, {t, t}, error), nullptr);
  EXPECT_EQ(error, "matmul: only a matmul with a bias and a tanh GELU keeps its preactivation");
  EXPECT_EQ(makeKernel(inst, {a.type, w.type, bias.type}, {t}, error), nullptr);
  EXPECT_EQ(error, "matmul: expected 2 to 4 inputs and 2 outputs, got 3 inputs and 1 outputs");
}

/// A weight gradient x^T dy writing dy's rows' sum (a bias's gradient) as
/// its second output (MatMul.bias_gradient), with oneDNN and without, the
/// operands in f32 and in bf16 (the product and the sum in f32, as mixed
/// precision has them); refused with a bias or without transpose_lhs.
TEST(MatMulKernel, BiasGradientSumsTheRhsRows) {
  const int64_t M = 37, K = 6, N = 5; // x [M, K], dy [M, N]: dW [K, N], db [1, N]
  Tensor x = randomF32({M, K}, 81, -2.0f, 2.0f), dy = randomF32({M, N}, 82);
  std::vector<float> xv = values<float>(x), dyv = values<float>(dy);
  plan::Instruction inst = matmulInst(true, false);
  inst.mutable_matmul()->set_bias_gradient(true);
  for (plan::DType dtype : {plan::F32, plan::BF16})
    for (bool withoutDnnl : {false, true}) {
      SCOPED_TRACE(std::string(dtype == plan::BF16 ? "bf16" : "f32") +
                   (withoutDnnl ? " without oneDNN" : ""));
      WithoutDnnl scope(withoutDnnl);
      auto round = [&](float v) { return dtype == plan::BF16 ? float(BFloat16(v)) : v; };
      Tensor xin = inDType(x, dtype), dyin = inDType(dy, dtype);
      plan::TensorType dwType = typeOf(plan::F32, {K, N}), dbType = typeOf(plan::F32, {1, N});
      std::string error;
      auto kernel = makeKernel(inst, {xin.type, dyin.type}, {dwType, dbType}, error);
      ASSERT_TRUE(kernel) << error;
      std::vector<float> dw(size_t(K * N), 7.0f), db(size_t(N), 7.0f);
      const void *in[] = {xin.bytes.data(), dyin.bytes.data()};
      void *out[] = {dw.data(), db.data()};
      ThreadPool pool(2);
      ASSERT_TRUE(kernel->run(in, out, pool, error)) << error;
      for (int64_t j = 0; j < N; ++j) {
        double sum = 0;
        for (int64_t r = 0; r < M; ++r)
          sum += round(dyv[size_t(r * N + j)]);
        EXPECT_NEAR(db[size_t(j)], sum, 1e-5 * (1 + std::fabs(sum))) << "bias gradient " << j;
        for (int64_t i = 0; i < K; ++i) {
          double p = 0;
          for (int64_t r = 0; r < M; ++r)
            p += double(round(xv[size_t(r * K + i)])) * double(round(dyv[size_t(r * N + j)]));
          EXPECT_NEAR(dw[size_t(i * N + j)], p, 1e-4 * (1 + std::fabs(p))) << i << "," << j;
        }
      }
    }
  std::string error;
  plan::TensorType dw = typeOf(plan::F32, {K, N}), db = typeOf(plan::F32, {N});
  plan::Instruction plain = matmulInst();
  plain.mutable_matmul()->set_bias_gradient(true);
  EXPECT_EQ(makeKernel(plain, {typeOf(plan::F32, {K, M}), dy.type}, {dw, db}, error), nullptr);
  EXPECT_EQ(error, "matmul: only a plain x^T dy product sums its rhs's rows");
  EXPECT_EQ(makeKernel(inst, {x.type, dy.type}, {dw, typeOf(plan::F32, {K})}, error), nullptr);
  EXPECT_EQ(error, "matmul: the rows' sum needs 2-D operands and a second output of the rhs's "
                   "columns");
}

/// A product times tanh GELU's derivative at a third input
/// (MatMul.gelu_gradient: dy W^T, the GELU's input gradient), with oneDNN
/// and without, in f32 and in bf16 (rounded once); refused with a bias or
/// a GELU input of another shape.
TEST(MatMulKernel, GeluGradientMultipliesTheProduct) {
  const int64_t M = 7, K = 5, N = 9; // dy [M, K], W [N, K]: dx [M, N]
  Tensor dy = randomF32({M, K}, 91), w = randomF32({N, K}, 92), x = randomF32({M, N}, 93, -3, 3);
  std::vector<float> dyv = values<float>(dy), wv = values<float>(w), xv = values<float>(x);
  plan::Instruction inst = matmulInst(false, true);
  inst.mutable_matmul()->set_gelu_gradient(true);
  for (plan::DType dtype : {plan::F32, plan::BF16})
    for (bool withoutDnnl : {false, true}) {
      SCOPED_TRACE(std::string(dtype == plan::BF16 ? "bf16" : "f32") +
                   (withoutDnnl ? " without oneDNN" : ""));
      WithoutDnnl scope(withoutDnnl);
      auto round = [&](float v) { return dtype == plan::BF16 ? float(BFloat16(v)) : v; };
      Tensor a = inDType(dy, dtype), b = inDType(w, dtype), c = inDType(x, dtype);
      plan::TensorType outType = typeOf(dtype, {M, N});
      std::string error;
      auto kernel = makeKernel(inst, {a.type, b.type, c.type}, {outType}, error);
      ASSERT_TRUE(kernel) << error;
      std::vector<char> out(size_t(M * N * elementSize(dtype)), char(0x7f));
      const void *in[] = {a.bytes.data(), b.bytes.data(), c.bytes.data()};
      void *outs[] = {out.data()};
      ThreadPool pool(2);
      ASSERT_TRUE(kernel->run(in, outs, pool, error)) << error;
      Tensor got{outType, out};
      const double k = std::sqrt(2 / M_PI), a3 = 0.044715;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double p = 0;
          for (int64_t l = 0; l < K; ++l)
            p += double(round(dyv[size_t(i * K + l)])) * double(round(wv[size_t(j * K + l)]));
          double v = round(xv[size_t(i * N + j)]), t = std::tanh(k * (v + a3 * v * v * v));
          double want = p * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * a3 * v * v));
          double tol = dtype == plan::BF16 ? 1.0 / 128 : 1e-5;
          float have = dtype == plan::BF16 ? float(values<BFloat16>(got)[size_t(i * N + j)])
                                           : values<float>(got)[size_t(i * N + j)];
          EXPECT_NEAR(have, want, 1e-5 + tol * (std::fabs(want) + std::fabs(p))) << i << "," << j;
        }
    }
  std::string error;
  plan::Instruction biased = inst;
  biased.mutable_matmul()->set_bias(true);
  plan::TensorType out = typeOf(plan::F32, {M, N});
  EXPECT_EQ(makeKernel(biased, {dy.type, w.type, typeOf(plan::F32, {N})}, {out}, error), nullptr);
  EXPECT_EQ(error, "matmul: only a plain product is multiplied by a GELU's derivative");
  EXPECT_EQ(makeKernel(inst, {dy.type, w.type, typeOf(plan::F32, {N})}, {out}, error), nullptr);
  EXPECT_EQ(error, "matmul: the GELU's input must be a third input of the output's shape");
}

TEST(MatMulKernel, EmptyContractionIsZero) { checkMatMul({3, 0}, {0, 4}); }

TEST(MatMulKernel, Big) { checkMatMul({256, 512}, {512, 384}); }

//===----------------------------------------------------------------------===//
// conv2d
//===----------------------------------------------------------------------===//

struct ConvParams {
  Shape x, w;
  Shape strides{1, 1}, pads{0, 0, 0, 0}, dilations{1, 1};
  int64_t groups = 1;
  bool bias = true;
  bool relu = false;
  bool constantWeights = false; // prepared once, as parameters are
};

/// NCHW values as NHWC.
template <class T> std::vector<T> toNhwc(const std::vector<T> &v, const Shape &nchw) {
  int64_t N = nchw[0], C = nchw[1], HW = nchw[2] * nchw[3];
  std::vector<T> out(v.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < HW; ++i)
        out[size_t((n * HW + i) * C + c)] = v[size_t((n * C + c) * HW + i)];
  return out;
}

Tensor toNhwc(const Tensor &x) {
  Shape s = shapeOf(x.type);
  return tensor(plan::F32, {s[0], s[2], s[3], s[1]}, toNhwc(values<float>(x), s));
}

void fillConv(plan::Conv2D &op, const ConvParams &p) {
  for (int64_t s : p.strides)
    op.add_strides(s);
  for (int64_t s : p.pads)
    op.add_pads(s);
  for (int64_t s : p.dilations)
    op.add_dilations(s);
  op.set_groups(p.groups);
}

/// Convolutions are checked NCHW and channels-last.
void checkConv(const ConvParams &p) {
  SCOPED_TRACE("conv x " + ::testing::PrintToString(p.x) + " w " +
               ::testing::PrintToString(p.w) + " groups " + std::to_string(p.groups));
  int64_t N = p.x[0], C = p.x[1], H = p.x[2], W = p.x[3], M = p.w[0], kH = p.w[2],
          kW = p.w[3], G = p.groups, Cg = C / G, Mg = M / G;
  int64_t OH = (H + p.pads[0] + p.pads[2] - p.dilations[0] * (kH - 1) - 1) / p.strides[0] + 1;
  int64_t OW = (W + p.pads[1] + p.pads[3] - p.dilations[1] * (kW - 1) - 1) / p.strides[1] + 1;
  Tensor x = randomF32(p.x, 3), w = randomF32(p.w, 4), b = randomF32({M}, 5);
  std::vector<float> xv = values<float>(x), wv = values<float>(w), bv = values<float>(b);
  std::vector<double> expected;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double sum = p.bias ? bv[m] : 0.0;
          int64_t g = m / Mg;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t i = 0; i < kH; ++i)
              for (int64_t j = 0; j < kW; ++j) {
                int64_t h = oh * p.strides[0] - p.pads[0] + i * p.dilations[0];
                int64_t ww = ow * p.strides[1] - p.pads[1] + j * p.dilations[1];
                if (h < 0 || h >= H || ww < 0 || ww >= W)
                  continue;
                sum += double(xv[((n * C + g * Cg + c) * H + h) * W + ww]) *
                       wv[((m * Cg + c) * kH + i) * kW + j];
              }
          expected.push_back(p.relu ? std::max(sum, 0.0) : sum);
        }
  plan::Instruction inst;
  plan::Conv2D *op = inst.mutable_conv2d();
  fillConv(*op, p);
  op->set_relu(p.relu);
  std::vector<Tensor> inputs{x, w};
  if (p.bias)
    inputs.push_back(b);
  expectClose(inst, inputs, {N, M, OH, OW}, expected, {false, p.constantWeights});
  SCOPED_TRACE("channels last");
  op->set_channels_last(true);
  inputs[0] = toNhwc(x);
  expectClose(inst, inputs, {N, OH, OW, M}, toNhwc(expected, {N, M, OH, OW}),
              {false, p.constantWeights});
}

TEST(Conv2DKernel, Padding) {
  checkConv({{2, 4, 7, 7}, {6, 4, 3, 3}, {1, 1}, {1, 1, 1, 1}});
  checkConv({{1, 3, 6, 5}, {2, 3, 3, 2}, {1, 1}, {2, 0, 1, 3}, {1, 1}, 1, false});
}

TEST(Conv2DKernel, Stride2) {
  checkConv({{2, 3, 9, 8}, {4, 3, 3, 3}, {2, 2}, {1, 0, 2, 1}});
  checkConv({{1, 2, 8, 8}, {3, 2, 1, 1}, {2, 2}, {0, 0, 0, 0}}); // 1x1 but strided
}

TEST(Conv2DKernel, Dilation2) {
  checkConv({{1, 3, 9, 9}, {4, 3, 3, 3}, {1, 1}, {2, 2, 2, 2}, {2, 2}});
  checkConv({{1, 2, 10, 9}, {2, 2, 2, 3}, {2, 1}, {0, 1, 0, 1}, {3, 2}, 1, false});
}

TEST(Conv2DKernel, Groups2) { checkConv({{2, 4, 6, 6}, {6, 2, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2}); }

TEST(Conv2DKernel, Depthwise) {
  checkConv({{2, 4, 7, 7}, {4, 1, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 4});
  checkConv({{1, 3, 8, 7}, {6, 1, 3, 3}, {2, 2}, {1, 0, 1, 2}, {1, 1}, 3, false}); // multiplier 2
  checkConv({{1, 2, 9, 9}, {2, 1, 3, 3}, {1, 1}, {2, 2, 2, 2}, {2, 2}, 2});
}

TEST(Conv2DKernel, OneByOneSkipsIm2col) {
  checkConv({{2, 4, 5, 6}, {5, 4, 1, 1}});
  checkConv({{2, 4, 5, 6}, {6, 2, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 2, false});
}

TEST(Conv2DKernel, ReluEpilogue) {
  ConvParams p{{2, 4, 7, 7}, {6, 4, 3, 3}, {1, 1}, {1, 1, 1, 1}};
  p.relu = true;
  checkConv(p);
  p.constantWeights = true; // weights reordered once
  checkConv(p);
  ConvParams depthwise{{2, 4, 7, 7}, {4, 1, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 4};
  depthwise.relu = true; // our own kernel, then max(0, y)
  checkConv(depthwise);
}

TEST(Conv2DKernel, ConstantWeights) {
  ConvParams p{{2, 5, 9, 8}, {7, 5, 3, 3}, {2, 1}, {1, 0, 2, 1}};
  p.constantWeights = true;
  checkConv(p);
  ConvParams grouped{{2, 4, 6, 6}, {6, 2, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2};
  grouped.constantWeights = true;
  checkConv(grouped);
}

TEST(Conv2DKernel, ImagesSplitOverThePool) {
  // Enough images for each thread to take its own: stride 1 copies whole
  // padded planes (with and without pads, dilated), stride 2 does not.
  checkConv({{5, 3, 10, 12}, {4, 3, 3, 3}, {1, 1}, {1, 1, 1, 1}});
  checkConv({{3, 2, 8, 9}, {3, 2, 2, 3}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, false});
  checkConv({{3, 2, 9, 9}, {3, 2, 3, 3}, {1, 1}, {2, 1, 0, 2}, {2, 2}});
  checkConv({{3, 4, 9, 8}, {6, 2, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 2});
}

TEST(Conv2DKernel, Big) {
  checkConv({{1, 16, 32, 32}, {32, 16, 3, 3}, {1, 1}, {1, 1, 1, 1}});
  checkConv({{2, 32, 24, 24}, {32, 1, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 32});
}

//===----------------------------------------------------------------------===//
// conv2d gradients: against the forward's loops run backwards in double
//===----------------------------------------------------------------------===//

/// dX and dW of a convolution (no bias) with output gradient dy, by
/// walking the forward's loops and adding each product's share.
void checkConvGradients(const ConvParams &p) {
  SCOPED_TRACE("conv gradients x " + ::testing::PrintToString(p.x) + " w " +
               ::testing::PrintToString(p.w) + " groups " + std::to_string(p.groups));
  int64_t N = p.x[0], C = p.x[1], H = p.x[2], W = p.x[3], M = p.w[0], kH = p.w[2],
          kW = p.w[3], G = p.groups, Cg = C / G, Mg = M / G;
  int64_t OH = (H + p.pads[0] + p.pads[2] - p.dilations[0] * (kH - 1) - 1) / p.strides[0] + 1;
  int64_t OW = (W + p.pads[1] + p.pads[3] - p.dilations[1] * (kW - 1) - 1) / p.strides[1] + 1;
  Tensor x = randomF32(p.x, 31), w = randomF32(p.w, 32), dy = randomF32({N, M, OH, OW}, 33);
  std::vector<float> xv = values<float>(x), wv = values<float>(w), dyv = values<float>(dy);
  std::vector<double> dx(xv.size(), 0.0), dw(wv.size(), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double g = dyv[((n * M + m) * OH + oh) * OW + ow];
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t i = 0; i < kH; ++i)
              for (int64_t j = 0; j < kW; ++j) {
                int64_t h = oh * p.strides[0] - p.pads[0] + i * p.dilations[0];
                int64_t ww = ow * p.strides[1] - p.pads[1] + j * p.dilations[1];
                if (h < 0 || h >= H || ww < 0 || ww >= W)
                  continue;
                size_t xi = ((n * C + m / Mg * Cg + c) * H + h) * W + ww;
                size_t wi = ((m * Cg + c) * kH + i) * kW + j;
                dx[xi] += g * wv[wi];
                dw[wi] += g * xv[xi];
              }
        }
  plan::Instruction input, weight;
  fillConv(*input.mutable_conv2d_backward_input(), p);
  fillConv(*weight.mutable_conv2d_backward_weight(), p);
  {
    SCOPED_TRACE("input gradient");
    expectClose(input, {dy, w}, p.x, dx);
  }
  SCOPED_TRACE("weight gradient");
  expectClose(weight, {x, dy}, p.w, dw);
}

TEST(Conv2DGradientKernels, PaddingStrideDilation) {
  checkConvGradients({{2, 3, 7, 7}, {4, 3, 3, 3}, {1, 1}, {1, 1, 1, 1}});
  checkConvGradients({{1, 2, 9, 8}, {3, 2, 3, 2}, {2, 3}, {1, 0, 2, 1}});
  checkConvGradients({{2, 2, 8, 8}, {2, 2, 3, 3}, {1, 1}, {2, 2, 2, 2}, {2, 2}});
}

TEST(Conv2DGradientKernels, GroupsDepthwiseAndOneByOne) {
  checkConvGradients({{2, 4, 5, 5}, {6, 2, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2});
  checkConvGradients({{3, 3, 6, 5}, {3, 1, 2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 3});
  checkConvGradients({{2, 5, 4, 3}, {7, 5, 1, 1}});
}

TEST(Conv2DGradientKernels, BigRunsOneImageAtATime) {
  // Past kSmallConvWork: BLAS and col2im/im2col thread inside each image.
  checkConvGradients({{1, 64, 16, 16}, {64, 64, 3, 3}, {1, 1}, {1, 1, 1, 1}});
}

TEST(Conv2DGradientKernels, ShapeErrorsNameTheGradient) {
  plan::Instruction inst;
  auto *op = inst.mutable_conv2d_backward_input();
  op->add_strides(1), op->add_strides(1);
  for (int i = 0; i < 4; ++i)
    op->add_pads(0);
  op->add_dilations(1), op->add_dilations(1);
  op->set_groups(1);
  std::string error = prepareError(inst, {typeOf(plan::F32, {1, 4, 3, 3}), typeOf(plan::F32, {4, 2, 3, 3})},
                                   typeOf(plan::F32, {1, 2, 6, 6}));
  EXPECT_NE(error.find("conv2d_backward_input: grad_output shape [1,4,3,3] should be [1,4,4,4]"),
            std::string::npos)
      << error;
}

//===----------------------------------------------------------------------===//
// pool2d
//===----------------------------------------------------------------------===//

struct PoolParams {
  Shape x, out; // out: [OH, OW]
  Shape kernel, strides{1, 1}, pads{0, 0, 0, 0}, dilations{1, 1};
  bool max = true, countIncludePad = false;
};

void fillPool(plan::Pool2D &op, const PoolParams &p) {
  op.set_max(p.max);
  op.set_count_include_pad(p.countIncludePad);
  for (int64_t s : p.kernel)
    op.add_kernel(s);
  for (int64_t s : p.strides)
    op.add_strides(s);
  for (int64_t s : p.pads)
    op.add_pads(s);
  for (int64_t s : p.dilations)
    op.add_dilations(s);
}

/// The ONNX reference's way: a window's cells past input + pads do not
/// exist; pad cells count for an average only with count_include_pad.
/// NCHW and channels-last.
void checkPool(const PoolParams &p) {
  SCOPED_TRACE(std::string(p.max ? "max" : "avg") + " pool x " + ::testing::PrintToString(p.x) +
               " -> " + ::testing::PrintToString(p.out) +
               (p.countIncludePad ? " count_include_pad" : ""));
  int64_t N = p.x[0], C = p.x[1], H = p.x[2], W = p.x[3], OH = p.out[0], OW = p.out[1];
  Tensor x = randomF32(p.x, 6);
  std::vector<float> xv = values<float>(x);
  std::vector<double> expected;
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double sum = 0, max = -std::numeric_limits<double>::infinity();
        int cells = 0, inside = 0;
        for (int64_t i = 0; i < p.kernel[0]; ++i)
          for (int64_t j = 0; j < p.kernel[1]; ++j) {
            int64_t hp = oh * p.strides[0] + i * p.dilations[0]; // in padded coordinates
            int64_t wp = ow * p.strides[1] + j * p.dilations[1];
            if (hp >= H + p.pads[0] + p.pads[2] || wp >= W + p.pads[1] + p.pads[3])
              continue;
            ++cells;
            int64_t h = hp - p.pads[0], w = wp - p.pads[1];
            if (h < 0 || h >= H || w < 0 || w >= W)
              continue;
            ++inside;
            double v = xv[(nc * H + h) * W + w];
            sum += v;
            max = std::max(max, v);
          }
        int divisor = p.countIncludePad ? cells : inside;
        expected.push_back(p.max ? max : sum / divisor);
      }
  plan::Instruction inst;
  plan::Pool2D *op = inst.mutable_pool2d();
  fillPool(*op, p);
  expectClose(inst, {x}, {N, C, OH, OW}, expected);
  SCOPED_TRACE("channels last");
  op->set_channels_last(true);
  expectClose(inst, {toNhwc(x)}, {N, OH, OW, C}, toNhwc(expected, {N, C, OH, OW}));
}

/// Pool gradients against loops over the windows (first maximum wins);
/// `ties` rounds the input to -1, 0 and 1, so that most windows hold their
/// maximum more than once (as after a ReLU).
void checkPoolGradient(const PoolParams &p, bool ties = false) {
  SCOPED_TRACE(std::string(p.max ? "max" : "avg") + " pool gradient x " +
               ::testing::PrintToString(p.x) + " -> " + ::testing::PrintToString(p.out) +
               (p.countIncludePad ? " count_include_pad" : ""));
  int64_t N = p.x[0], C = p.x[1], H = p.x[2], W = p.x[3], OH = p.out[0], OW = p.out[1];
  Tensor x = randomF32(p.x, 41), dy = randomF32({N, C, OH, OW}, 42);
  std::vector<float> xv = values<float>(x), dyv = values<float>(dy);
  if (ties) {
    for (float &v : xv)
      v = std::round(v);
    x = tensor(plan::F32, p.x, xv);
  }
  std::vector<double> dx(xv.size(), 0.0);
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        std::vector<int64_t> inside;
        int cells = 0;
        for (int64_t i = 0; i < p.kernel[0]; ++i)
          for (int64_t j = 0; j < p.kernel[1]; ++j) {
            int64_t hp = oh * p.strides[0] + i * p.dilations[0];
            int64_t wp = ow * p.strides[1] + j * p.dilations[1];
            if (hp >= H + p.pads[0] + p.pads[2] || wp >= W + p.pads[1] + p.pads[3])
              continue;
            ++cells;
            int64_t h = hp - p.pads[0], w = wp - p.pads[1];
            if (h >= 0 && h < H && w >= 0 && w < W)
              inside.push_back((nc * H + h) * W + w);
          }
        double g = dyv[(nc * OH + oh) * OW + ow];
        if (p.max) {
          int64_t best = inside[0];
          for (int64_t at : inside)
            if (xv[at] > xv[best])
              best = at;
          dx[best] += g;
        } else {
          for (int64_t at : inside)
            dx[at] += g / (p.countIncludePad ? cells : int(inside.size()));
        }
      }
  plan::Instruction inst;
  fillPool(*inst.mutable_pool2d_backward(), p);
  std::vector<Tensor> inputs{dy};
  if (p.max)
    inputs.insert(inputs.begin(), x);
  expectClose(inst, inputs, p.x, dx);
}

TEST(Pool2DGradientKernel, WindowsPadsCeilModeDilation) {
  for (bool max : {true, false}) {
    checkPoolGradient({{2, 17, 8, 8}, {4, 4}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, max});
    checkPoolGradient({{1, 3, 7, 6}, {4, 3}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, max});
    checkPoolGradient({{1, 2, 5, 7}, {3, 3}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 2}, max});
    // 2x2 windows side by side (the max pool's own loop), a row and a
    // column of the input left out.
    checkPoolGradient({{2, 3, 7, 9}, {3, 4}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, max});
  }
  // Ties: the first maximum in row-major order takes the gradient, in the
  // 2x2 loop and in the general one.
  checkPoolGradient({{2, 3, 8, 10}, {4, 5}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, true}, true);
  checkPoolGradient({{1, 3, 7, 6}, {4, 3}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, true}, true);
  checkPoolGradient({{1, 2, 6, 6}, {4, 4}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, false, true});
  checkPoolGradient({{1, 2, 5, 5}, {5, 5}, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, true});
}

TEST(Pool2DGradientKernel, NaNNeverTakesTheMaxGradient) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor dy = tensor(plan::F32, {1, 1, 1, 2}, std::vector<float>{5, 7});
  // 2x2 windows side by side: [NaN 1; 3 NaN] gives 3 the gradient, a
  // window of NaNs gives nobody.
  plan::Instruction sideBySide;
  fillPool(*sideBySide.mutable_pool2d_backward(),
           {{1, 1, 2, 4}, {1, 2}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, true});
  Tensor x =
      tensor(plan::F32, {1, 1, 2, 4}, std::vector<float>{nan, 1, nan, nan, 3, nan, nan, nan});
  expectClose(sideBySide, {x, dy}, {1, 1, 2, 4}, {0, 0, 0, 0, 5, 0, 0, 0});
  // Overlapping windows (the general loop): [NaN 2; 1 NaN] and [2 2; NaN 0]
  // both give the first 2.
  plan::Instruction overlapping;
  fillPool(*overlapping.mutable_pool2d_backward(),
           {{1, 1, 2, 3}, {1, 2}, {2, 2}, {1, 1}, {0, 0, 0, 0}, {1, 1}, true});
  x = tensor(plan::F32, {1, 1, 2, 3}, std::vector<float>{nan, 2, 2, 1, nan, 0});
  expectClose(overlapping, {x, dy}, {1, 1, 2, 3}, {0, 12, 0, 0, 0, 0});
}

TEST(Pool2DKernel, MaxAndAverage) {
  for (bool max : {true, false}) {
    checkPool({{2, 17, 8, 8}, {4, 4}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, max});
    checkPool({{2, 3, 6, 6}, {5, 5}, {2, 2}, {1, 1}, {0, 0, 0, 0}, {1, 1}, max});
    checkPool({{1, 2, 8, 7}, {3, 3}, {3, 3}, {2, 2}, {0, 0, 0, 0}, {1, 1}, max});
  }
}

TEST(Pool2DKernel, PadsAndCountIncludePad) {
  checkPool({{2, 3, 7, 7}, {4, 4}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, true});
  for (bool include : {false, true}) {
    checkPool({{2, 3, 7, 7}, {4, 4}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, false, include});
    checkPool({{1, 2, 5, 6}, {5, 6}, {3, 2}, {1, 1}, {2, 0, 0, 1}, {1, 1}, false, include});
  }
}

TEST(Pool2DKernel, CeilModeWindowsRunPastThePaddedInput) {
  // H=6, k=3, s=2, pads 1: floor gives 3 rows, ceil 4; the last window
  // starts at padded row 6 and has only rows 6 and 7 of the padded input.
  for (bool include : {false, true})
    checkPool({{1, 2, 6, 6}, {4, 4}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, false, include});
  checkPool({{1, 2, 6, 6}, {4, 4}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, true});
  checkPool({{1, 2, 6, 5}, {3, 2}, {3, 3}, {2, 2}, {0, 0, 0, 0}, {1, 1}, false, true});
}

TEST(Pool2DKernel, Dilation) {
  checkPool({{1, 2, 9, 9}, {7, 7}, {3, 3}, {1, 1}, {1, 1, 1, 1}, {2, 2}, true});
  checkPool({{1, 2, 9, 9}, {7, 7}, {3, 3}, {1, 1}, {1, 1, 1, 1}, {2, 2}, false, true});
  checkPool({{1, 2, 9, 10}, {3, 4}, {2, 3}, {3, 2}, {1, 0, 1, 2}, {2, 2}, false, false});
}

TEST(Pool2DKernel, TwoByTwoStride2) {
  // The vectorised interior loop, next to clipped windows: ceil_mode's last
  // row and column, and pads.
  for (bool max : {true, false}) {
    checkPool({{2, 3, 8, 8}, {4, 4}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, max});
    checkPool({{1, 2, 7, 9}, {4, 5}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, max});
    checkPool({{1, 2, 7, 9}, {4, 5}, {2, 2}, {2, 2}, {1, 1, 0, 0}, {1, 1}, max, true});
  }
}

TEST(Pool2DKernel, Big) {
  checkPool({{2, 32, 32, 32}, {16, 16}, {3, 3}, {2, 2}, {1, 1, 0, 0}, {1, 1}, true});
  checkPool({{2, 32, 32, 32}, {16, 16}, {3, 3}, {2, 2}, {1, 1, 0, 0}, {1, 1}, false});
}

//===----------------------------------------------------------------------===//
// softmax, layer_norm, batch_norm
//===----------------------------------------------------------------------===//

template <class T = float> void checkSoftmax(const Shape &shape, int64_t axis, bool log) {
  SCOPED_TRACE((log ? "log_softmax " : "softmax ") + ::testing::PrintToString(shape) +
               " axis " + std::to_string(axis));
  std::vector<float> xf = randomFloats(count(shape), 7, -4.0f, 4.0f);
  std::vector<T> xv(xf.begin(), xf.end());
  Tensor x = tensor(sizeof(T) == 8 ? plan::F64 : plan::F32, shape, xv);
  int64_t outer = 1, n = shape[size_t(axis)], inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= shape[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < shape.size(); ++d)
    inner *= shape[d];
  std::vector<double> expected(xv.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < inner; ++c) {
      auto at = [&](int64_t i) { return (o * n + i) * inner + c; };
      double max = -INFINITY, sum = 0;
      for (int64_t i = 0; i < n; ++i)
        max = std::max(max, double(xv[at(i)]));
      for (int64_t i = 0; i < n; ++i)
        sum += std::exp(xv[at(i)] - max);
      for (int64_t i = 0; i < n; ++i)
        expected[at(i)] = log ? xv[at(i)] - max - std::log(sum) : std::exp(xv[at(i)] - max) / sum;
    }
  plan::Instruction inst;
  inst.mutable_softmax()->set_axis(axis);
  inst.mutable_softmax()->set_log(log);
  expectClose<T>(inst, {x}, shape, expected);
}

TEST(SoftmaxKernel, LastAxis) {
  for (bool log : {false, true}) {
    checkSoftmax({4, 5, 6}, 2, log);
    checkSoftmax({128, 600}, 1, log);
    // Short rows go a tile of rows at a time: tiles of 102 rows of 10 (the
    // last partial), rows with a tail past eight lanes, four rows of 256.
    checkSoftmax({300, 10}, 1, log);
    checkSoftmax({7, 33}, 1, log);
    checkSoftmax({9, 256}, 1, log);
  }
}

TEST(SoftmaxKernel, MiddleAndFirstAxis) {
  for (bool log : {false, true}) {
    checkSoftmax({4, 5, 6}, 1, log);
    checkSoftmax({4, 5, 6}, 0, log);
    checkSoftmax({8, 300, 70}, 1, log); // two column blocks, the second partial
  }
}

// The float rows use a polynomial exp: a causal mask (-inf, or a large
// negative fill) must give exact zeros, and a wide range must keep its
// small probabilities.
TEST(SoftmaxKernel, MaskedAndWideRows) {
  Shape shape{2, 37};
  std::vector<float> xv(74);
  for (int64_t i = 0; i < 37; ++i) {
    xv[i] = i < 20 ? float(i) * 0.5f : -INFINITY;
    xv[37 + i] = i % 3 == 0 ? -1e9f : float(i) * -2.5f; // e^-90 at the far end
  }
  std::vector<double> expected(74);
  for (int64_t r = 0; r < 2; ++r) {
    double max = -INFINITY, sum = 0;
    for (int64_t i = 0; i < 37; ++i)
      max = std::max(max, double(xv[r * 37 + i]));
    for (int64_t i = 0; i < 37; ++i)
      sum += std::exp(double(xv[r * 37 + i]) - max);
    for (int64_t i = 0; i < 37; ++i)
      expected[r * 37 + i] = std::exp(double(xv[r * 37 + i]) - max) / sum;
  }
  plan::Instruction inst;
  inst.mutable_softmax()->set_axis(1);
  expectClose<float>(inst, {tensor(plan::F32, shape, xv)}, shape, expected);
}

TEST(SoftmaxKernel, Double) {
  checkSoftmax<double>({3, 7}, 1, false);
  checkSoftmax<double>({3, 7, 2}, 1, true);
}

/// layer_norm against a double reference; RMSNorm's (rms: no centring)
/// too.
void checkLayerNorm(const Shape &shape, int64_t axis, bool bias, float offset = 0.0f,
                    bool rms = false) {
  SCOPED_TRACE(std::string(rms ? "rms_norm " : "layer_norm ") +
               ::testing::PrintToString(shape) + " axis " + std::to_string(axis) +
               (bias ? " with bias" : ""));
  Tensor x = randomF32(shape, 8, offset - 1.0f, offset + 1.0f);
  Shape normalised(shape.begin() + axis, shape.end());
  Tensor scale = randomF32(normalised, 9), b = randomF32(normalised, 10);
  std::vector<float> xv = values<float>(x), sv = values<float>(scale), bv = values<float>(b);
  int64_t n = count(normalised), rows = count(shape) / n;
  std::vector<double> expected;
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n && !rms; ++i)
      mean += xv[r * n + i];
    mean /= n;
    for (int64_t i = 0; i < n; ++i)
      var += (xv[r * n + i] - mean) * (xv[r * n + i] - mean);
    var /= n;
    for (int64_t i = 0; i < n; ++i)
      expected.push_back((xv[r * n + i] - mean) / std::sqrt(var + 1e-5) * sv[i] + (bias ? bv[i] : 0));
  }
  plan::Instruction inst;
  inst.mutable_layer_norm()->set_axis(axis);
  inst.mutable_layer_norm()->set_epsilon(1e-5);
  inst.mutable_layer_norm()->set_rms(rms);
  std::vector<Tensor> inputs{x, scale};
  if (bias)
    inputs.push_back(b);
  expectClose(inst, inputs, shape, expected);
}

TEST(LayerNormKernel, WithAndWithoutBias) {
  for (bool bias : {true, false}) {
    checkLayerNorm({3, 4, 5}, 2, bias);
    checkLayerNorm({3, 4, 5}, 1, bias);
  }
}

TEST(LayerNormKernel, LargeMeanAndBig) {
  checkLayerNorm({16, 64}, 1, true, 1000.0f);
  checkLayerNorm({256, 768}, 1, true);
}

// Rows up to 256 go a tile of 32 rows at a time, eight lanes and a tail:
// 70 rows (two whole tiles and a partial one), rows with a tail (9, 33),
// of exactly the lanes (8), the longest short row (256) and the first long
// one (257), with and without bias, one with a large mean.
TEST(LayerNormKernel, ShortRowsInTiles) {
  for (bool bias : {true, false})
    for (int64_t n : {1, 8, 9, 33, 256, 257})
      checkLayerNorm({70, n}, 1, bias);
  checkLayerNorm({2, 35, 64}, 2, true, 1000.0f);
}

// RMSNorm: short and long rows, one far from 0 (where centring would
// differ most), and no bias allowed.
TEST(LayerNormKernel, Rms) {
  for (int64_t n : {1, 9, 257})
    checkLayerNorm({5, n}, 1, false, 0.0f, true);
  checkLayerNorm({3, 4, 5}, 1, false, 0.0f, true);
  checkLayerNorm({16, 64}, 1, false, 10.0f, true);
  plan::Instruction inst;
  inst.mutable_layer_norm()->set_axis(1);
  inst.mutable_layer_norm()->set_rms(true);
  plan::TensorType row = typeOf(plan::F32, {8});
  std::string error;
  EXPECT_FALSE(makeKernel(inst, {typeOf(plan::F32, {2, 8}), row, row},
                          {typeOf(plan::F32, {2, 8})}, error));
  EXPECT_NE(error.find("no bias"), std::string::npos) << error;
}

/// layer_norm_backward: the input's gradient of sum(dy * layer_norm(x)),
/// and each row's mean and rstd, against double references: the gradient
/// by central differences of that sum (so the formula is checked, not
/// restated), the statistics directly.
void checkLayerNormBackward(const Shape &shape, int64_t axis, float offset = 0.0f,
                            bool rms = false) {
  SCOPED_TRACE(std::string(rms ? "rms_norm_backward " : "layer_norm_backward ") +
               ::testing::PrintToString(shape) + " axis " + std::to_string(axis));
  Tensor x = randomF32(shape, 21, offset - 1.0f, offset + 1.0f);
  Shape normalised(shape.begin() + axis, shape.end()), rowShape = shape;
  std::fill(rowShape.begin() + axis, rowShape.end(), 1);
  Tensor scale = randomF32(normalised, 22), dy = randomF32(shape, 23);
  std::vector<float> xv = values<float>(x), sv = values<float>(scale), gv = values<float>(dy);
  int64_t n = count(normalised), rows = count(shape) / n;
  const double epsilon = 1e-5;
  // sum(dy * y) over row r, y the layer norm of `row` (scale applied).
  auto loss = [&](int64_t r, const std::vector<double> &row) {
    double mean = 0, var = 0, total = 0;
    for (double v : row)
      mean += rms ? 0 : v;
    mean /= double(n);
    for (double v : row)
      var += (v - mean) * (v - mean);
    var /= double(n);
    for (int64_t i = 0; i < n; ++i)
      total += gv[size_t(r * n + i)] * (row[size_t(i)] - mean) / std::sqrt(var + epsilon) *
               sv[size_t(i)];
    return total;
  };
  std::vector<double> dx, means, rstds;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> row(xv.begin() + r * n, xv.begin() + (r + 1) * n);
    double mean = 0, var = 0;
    for (double v : row)
      mean += rms ? 0 : v;
    mean /= double(n);
    for (double v : row)
      var += (v - mean) * (v - mean);
    means.push_back(mean);
    rstds.push_back(1.0 / std::sqrt(var / double(n) + epsilon));
    for (int64_t i = 0; i < n; ++i) {
      double h = 1e-3 * std::max(1.0, std::fabs(row[size_t(i)]));
      std::vector<double> up = row, down = row;
      up[size_t(i)] += h;
      down[size_t(i)] -= h;
      dx.push_back((loss(r, up) - loss(r, down)) / (2 * h));
    }
  }
  plan::Instruction inst;
  inst.mutable_layer_norm_backward()->set_axis(axis);
  inst.mutable_layer_norm_backward()->set_epsilon(epsilon);
  inst.mutable_layer_norm_backward()->set_rms(rms);
  std::vector<plan::TensorType> inTypes{x.type, scale.type, dy.type};
  std::vector<plan::TensorType> outTypes{typeOf(plan::F32, shape), typeOf(plan::F32, rowShape),
                                         typeOf(plan::F32, rowShape)};
  std::string error;
  auto kernel = makeKernel(inst, inTypes, outTypes, error);
  ASSERT_TRUE(kernel) << error;
  for (int threads : {1, 2}) {
    std::vector<float> gotDx(dx.size(), 7.0f), gotMean(size_t(rows), 7.0f),
        gotRstd(size_t(rows), 7.0f);
    const void *in[] = {x.bytes.data(), scale.bytes.data(), dy.bytes.data()};
    void *out[] = {gotDx.data(), gotMean.data(), gotRstd.data()};
    ThreadPool pool(threads);
    ASSERT_TRUE(kernel->run(in, out, pool, error)) << error;
    int reported = 0;
    // Central differences of a sum of n terms: agree to about 1e-6 of the
    // terms' size, hence an absolute bound too.
    for (size_t i = 0; i < dx.size() && reported < 5; ++i)
      if (!(std::fabs(gotDx[i] - dx[i]) <= 2e-4 + 1e-3 * std::fabs(dx[i]))) {
        ADD_FAILURE() << "grad_input " << i << ": got " << gotDx[i] << ", expected " << dx[i];
        ++reported;
      }
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_NEAR(gotMean[size_t(r)], means[size_t(r)], 1e-5 + 1e-6 * std::fabs(means[size_t(r)]));
      EXPECT_NEAR(gotRstd[size_t(r)], rstds[size_t(r)], 1e-4 * rstds[size_t(r)]);
    }
  }
  // Bad input: a scale that is not the row's shape.
  std::vector<plan::TensorType> badScale{x.type, typeOf(plan::F32, {n + 1}), dy.type};
  EXPECT_FALSE(makeKernel(inst, badScale, outTypes, error));
  EXPECT_NE(error.find("should have the normalised shape"), std::string::npos) << error;
}

TEST(LayerNormKernel, Backward) {
  checkLayerNormBackward({3, 4, 5}, 2);
  checkLayerNormBackward({3, 4, 5}, 1);
  checkLayerNormBackward({16, 96}, 1, 100.0f);
  checkLayerNormBackward({3, 4, 5}, 2, 0.0f, true);
  checkLayerNormBackward({16, 96}, 1, 3.0f, true);
}

// The weights' gradients summed per group of rows (LayerNorm.scale_gradient,
// bias_gradient): 21 rows in 4 groups of 6 (the last of 3), each group's
// sums of dy * xhat and of dy against double references; grad_input and
// the statistics as without the sums, bit for bit; RMSNorm's scale alone;
// bad partial shapes and a bias without its scale refused.
TEST(LayerNormKernel, BackwardSumsTheWeightsGradientsPerGroup) {
  for (bool rms : {false, true}) {
    SCOPED_TRACE(rms ? "rms" : "layer norm");
    const Shape shape{3, 7, 40}, rowShape{3, 7, 1}, partialShape{4, 1, 40};
    const int64_t n = 40, rows = 21, groups = 4, perGroup = 6;
    Tensor x = randomF32(shape, 91, -2.0f, 2.0f), scale = randomF32({40}, 92),
           dy = randomF32(shape, 93);
    std::vector<float> xv = values<float>(x), gv = values<float>(dy);
    std::vector<double> scaleSums(size_t(groups * n)), biasSums(size_t(groups * n));
    for (int64_t r = 0; r < rows; ++r) {
      double mean = 0, var = 0;
      for (int64_t i = 0; i < n; ++i)
        mean += rms ? 0 : xv[size_t(r * n + i)];
      mean /= double(n);
      for (int64_t i = 0; i < n; ++i)
        var += (xv[size_t(r * n + i)] - mean) * (xv[size_t(r * n + i)] - mean);
      double rstd = 1.0 / std::sqrt(var / double(n) + 1e-5);
      for (int64_t i = 0; i < n; ++i) {
        size_t at = size_t(r / perGroup * n + i);
        double g = gv[size_t(r * n + i)];
        scaleSums[at] += g * (xv[size_t(r * n + i)] - mean) * rstd;
        biasSums[at] += g;
      }
    }
    plan::Instruction plainInst, inst;
    plainInst.mutable_layer_norm_backward()->set_axis(2);
    plainInst.mutable_layer_norm_backward()->set_epsilon(1e-5);
    plainInst.mutable_layer_norm_backward()->set_rms(rms);
    inst = plainInst;
    inst.mutable_layer_norm_backward()->set_scale_gradient(true);
    inst.mutable_layer_norm_backward()->set_bias_gradient(!rms);
    std::vector<plan::TensorType> inTypes{x.type, scale.type, dy.type};
    std::vector<plan::TensorType> plainTypes{typeOf(plan::F32, shape),
                                             typeOf(plan::F32, rowShape),
                                             typeOf(plan::F32, rowShape)};
    std::vector<plan::TensorType> outTypes = plainTypes;
    outTypes.insert(outTypes.end(), rms ? 1 : 2, typeOf(plan::F32, partialShape));
    std::string error;
    auto plain = makeKernel(plainInst, inTypes, plainTypes, error);
    ASSERT_TRUE(plain) << error;
    auto kernel = makeKernel(inst, inTypes, outTypes, error);
    ASSERT_TRUE(kernel) << error;
    const void *in[] = {x.bytes.data(), scale.bytes.data(), dy.bytes.data()};
    std::vector<float> dx0(rows * n, 0.f), mean0(rows, 0.f), rstd0(rows, 0.f);
    void *out0[] = {dx0.data(), mean0.data(), rstd0.data()};
    ThreadPool one(1);
    ASSERT_TRUE(plain->run(in, out0, one, error)) << error;
    for (int threads : {1, 2}) {
      std::vector<float> dx(dx0.size()), mean(mean0.size()), rstd(rstd0.size()),
          gotScale(size_t(groups * n), 7.0f), gotBias(size_t(groups * n), 7.0f);
      void *out[] = {dx.data(), mean.data(), rstd.data(), gotScale.data(), gotBias.data()};
      ThreadPool pool(threads);
      ASSERT_TRUE(kernel->run(in, out, pool, error)) << error;
      EXPECT_EQ(dx, dx0);
      EXPECT_EQ(mean, mean0);
      EXPECT_EQ(rstd, rstd0);
      for (size_t i = 0; i < scaleSums.size(); ++i) {
        ASSERT_NEAR(gotScale[i], scaleSums[i], 1e-5 * (1 + std::fabs(scaleSums[i]))) << i;
        if (!rms)
          ASSERT_NEAR(gotBias[i], biasSums[i], 1e-5 * (1 + std::fabs(biasSums[i]))) << i;
      }
      if (rms) // no bias's sums: the buffer is left as it was
        EXPECT_EQ(gotBias, std::vector<float>(gotBias.size(), 7.0f));
    }
  }
  plan::Instruction inst;
  inst.mutable_layer_norm_backward()->set_axis(1);
  inst.mutable_layer_norm_backward()->set_scale_gradient(true);
  plan::TensorType rows = typeOf(plan::F32, {8, 16}), stats = typeOf(plan::F32, {8, 1});
  std::string error;
  EXPECT_FALSE(makeKernel(inst, {rows, typeOf(plan::F32, {16}), rows},
                          {rows, stats, stats, typeOf(plan::F32, {2, 15})}, error));
  EXPECT_NE(error.find("partial sums [2,15] should be [groups, 1..., normalised dims]"),
            std::string::npos)
      << error;
  inst.mutable_layer_norm_backward()->set_scale_gradient(false);
  inst.mutable_layer_norm_backward()->set_bias_gradient(true);
  EXPECT_FALSE(makeKernel(inst, {rows, typeOf(plan::F32, {16}), rows},
                          {rows, stats, stats, typeOf(plan::F32, {2, 16})}, error));
  EXPECT_NE(error.find("only beside its scale's"), std::string::npos) << error;
}

// A residual (LayerNorm.residual): grad_input is the gradient without one
// plus the residual, the statistics the same; refused when it is not a
// fourth input of the input's shape.
TEST(LayerNormKernel, BackwardAddsTheResidual) {
  const Shape shape{6, 40}, rowShape{6, 1};
  Tensor x = randomF32(shape, 81, -2.0f, 2.0f), scale = randomF32({40}, 82),
         dy = randomF32(shape, 83), residual = randomF32(shape, 84);
  plan::Instruction inst;
  inst.mutable_layer_norm_backward()->set_axis(1);
  inst.mutable_layer_norm_backward()->set_epsilon(1e-5);
  std::vector<plan::TensorType> outTypes{typeOf(plan::F32, shape), typeOf(plan::F32, rowShape),
                                         typeOf(plan::F32, rowShape)};
  std::string error;
  auto plain = makeKernel(inst, {x.type, scale.type, dy.type}, outTypes, error);
  ASSERT_TRUE(plain) << error;
  plan::Instruction withResidual = inst;
  withResidual.mutable_layer_norm_backward()->set_residual(true);
  auto joined =
      makeKernel(withResidual, {x.type, scale.type, dy.type, residual.type}, outTypes, error);
  ASSERT_TRUE(joined) << error;
  const size_t n = 6 * 40;
  std::vector<float> dx(n), mean(6), rstd(6), dx2(n), mean2(6), rstd2(6);
  ThreadPool pool(2);
  const void *in[] = {x.bytes.data(), scale.bytes.data(), dy.bytes.data(),
                      residual.bytes.data()};
  void *out[] = {dx.data(), mean.data(), rstd.data()};
  void *out2[] = {dx2.data(), mean2.data(), rstd2.data()};
  ASSERT_TRUE(plain->run(in, out, pool, error)) << error;
  ASSERT_TRUE(joined->run(in, out2, pool, error)) << error;
  std::vector<float> r = values<float>(residual);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(dx2[i], dx[i] + r[i]) << i;
  EXPECT_EQ(mean2, mean);
  EXPECT_EQ(rstd2, rstd);
  EXPECT_FALSE(makeKernel(withResidual, {x.type, scale.type, dy.type, scale.type}, outTypes,
                          error));
  EXPECT_NE(error.find("the residual should be a 4th input of the input's shape [6,40]"),
            std::string::npos)
      << error;
}

/// cross_entropy against a double reference: each row's log-sum-exp and
/// lse - logits[label], 0 for labels that are no class (-100, classes).
template <class Label> void checkCrossEntropy(const Shape &shape, plan::DType labelType) {
  SCOPED_TRACE("cross_entropy " + ::testing::PrintToString(shape));
  Tensor logits = randomF32(shape, 31, -8.0f, 8.0f);
  std::vector<float> xv = values<float>(logits);
  int64_t n = shape.back(), rows = count(shape) / n;
  Shape rowShape(shape.begin(), shape.end() - 1);
  std::vector<Label> labels;
  std::vector<double> loss, lse;
  for (int64_t r = 0; r < rows; ++r) {
    Label label = r % 5 == 3 ? Label(-100) : r % 5 == 4 ? Label(n) : Label((r * 7919) % n);
    labels.push_back(label);
    double max = -INFINITY, sum = 0;
    for (int64_t i = 0; i < n; ++i)
      max = std::max(max, double(xv[size_t(r * n + i)]));
    for (int64_t i = 0; i < n; ++i)
      sum += std::exp(double(xv[size_t(r * n + i)]) - max);
    lse.push_back(max + std::log(sum));
    loss.push_back(label >= 0 && label < n ? lse.back() - xv[size_t(r * n + label)] : 0.0);
  }
  Tensor labelTensor = tensor(labelType, rowShape, labels);
  plan::Instruction inst;
  inst.mutable_cross_entropy();
  std::vector<plan::TensorType> outTypes{typeOf(plan::F32, rowShape),
                                         typeOf(plan::F32, rowShape)};
  std::string error;
  auto kernel = makeKernel(inst, {logits.type, labelTensor.type}, outTypes, error);
  ASSERT_TRUE(kernel) << error;
  for (int threads : {1, 2}) {
    std::vector<float> gotLoss(size_t(rows), 7.0f), gotLse(size_t(rows), 7.0f);
    const void *in[] = {logits.bytes.data(), labelTensor.bytes.data()};
    void *out[] = {gotLoss.data(), gotLse.data()};
    ThreadPool pool(threads);
    ASSERT_TRUE(kernel->run(in, out, pool, error)) << error;
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_NEAR(gotLse[size_t(r)], lse[size_t(r)], 1e-5 * std::fabs(lse[size_t(r)]) + 1e-6)
          << "row " << r;
      EXPECT_NEAR(gotLoss[size_t(r)], loss[size_t(r)], 2e-5 * std::fabs(lse[size_t(r)]) + 1e-6)
          << "row " << r;
      if (r % 5 >= 3)
        EXPECT_EQ(gotLoss[size_t(r)], 0.0f) << "row " << r << " (no class)";
    }
  }
  // Bad input: labels that are not the logits' rows.
  EXPECT_FALSE(makeKernel(inst, {logits.type, typeOf(labelType, {rows + 1})}, outTypes, error));
  EXPECT_NE(error.find("without the classes"), std::string::npos) << error;

  // With the gradient (CrossEntropy.gradient): (softmax - onehot) * factor
  // per row against doubles, a label that is no class hitting none; loss
  // and lse as without it, bit for bit.
  Tensor factor = randomF32(rowShape, 32, -2.0f, 2.0f);
  std::vector<float> fv = values<float>(factor);
  plan::Instruction withGradient = inst;
  withGradient.mutable_cross_entropy()->set_gradient(true);
  std::vector<plan::TensorType> gradTypes = outTypes;
  gradTypes.push_back(typeOf(plan::F32, shape));
  auto fused = makeKernel(withGradient, {logits.type, labelTensor.type, factor.type}, gradTypes,
                          error);
  ASSERT_TRUE(fused) << error;
  std::vector<float> loss0(rows, 0.f), lse0(rows, 0.f);
  {
    const void *in[] = {logits.bytes.data(), labelTensor.bytes.data()};
    void *out[] = {loss0.data(), lse0.data()};
    ThreadPool pool(1);
    ASSERT_TRUE(kernel->run(in, out, pool, error)) << error;
  }
  std::vector<float> gotLoss(rows, 0.f), gotLse(rows, 0.f), grad(rows * n, 7.0f);
  const void *in[] = {logits.bytes.data(), labelTensor.bytes.data(), factor.bytes.data()};
  void *out[] = {gotLoss.data(), gotLse.data(), grad.data()};
  ThreadPool pool(2);
  ASSERT_TRUE(fused->run(in, out, pool, error)) << error;
  EXPECT_EQ(gotLoss, loss0);
  EXPECT_EQ(gotLse, lse0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) {
      double p = std::exp(double(xv[size_t(r * n + i)]) - lse[size_t(r)]);
      double want = (p - (i == int64_t(labels[size_t(r)]) ? 1.0 : 0.0)) * fv[size_t(r)];
      ASSERT_NEAR(grad[size_t(r * n + i)], want, 1e-5 * (1 + std::fabs(want)))
          << "row " << r << " class " << i;
    }
  EXPECT_FALSE(makeKernel(withGradient, {logits.type, labelTensor.type, logits.type}, gradTypes,
                          error));
  EXPECT_NE(error.find("the gradient's factors"), std::string::npos) << error;
}

TEST(CrossEntropyKernel, AgainstDouble) {
  checkCrossEntropy<int64_t>({10, 7}, plan::I64);
  checkCrossEntropy<int32_t>({2, 5, 33}, plan::I32);
  checkCrossEntropy<int64_t>({6, 3000}, plan::I64); // long rows: blocked sums
}

void checkBatchNorm(const Shape &shape) {
  SCOPED_TRACE("batch_norm " + ::testing::PrintToString(shape));
  int64_t C = shape[1], plane = count(shape) / shape[0] / C;
  Tensor x = randomF32(shape, 11), scale = randomF32({C}, 12), bias = randomF32({C}, 13),
         mean = randomF32({C}, 14), var = randomF32({C}, 15, 0.1f, 2.0f);
  std::vector<float> xv = values<float>(x), sv = values<float>(scale), bv = values<float>(bias),
                     mv = values<float>(mean), vv = values<float>(var);
  std::vector<double> expected;
  for (int64_t i = 0; i < count(shape); ++i) {
    int64_t c = i / plane % C;
    expected.push_back((xv[i] - mv[c]) / std::sqrt(vv[c] + 1e-3) * sv[c] + bv[c]);
  }
  plan::Instruction inst;
  inst.mutable_batch_norm()->set_epsilon(1e-3);
  expectClose(inst, {x, scale, bias, mean, var}, shape, expected);
}

TEST(BatchNormKernel, Shapes) {
  checkBatchNorm({2, 3, 4, 5});
  checkBatchNorm({4, 3});
  checkBatchNorm({2, 3, 7});
  checkBatchNorm({4, 16, 32, 32});
}

//===----------------------------------------------------------------------===//
// reduce
//===----------------------------------------------------------------------===//

/// The reference reduction over `axes`; out-of-place doubles, each output
/// folding the inputs whose index matches it outside the axes.
std::vector<double> refReduce(const std::vector<double> &x, const Shape &shape, const Shape &axes,
                              plan::ReduceKind kind, Shape &outShape) {
  outShape = shape;
  for (int64_t a : axes)
    outShape[size_t(a)] = 1;
  double init = kind == plan::REDUCE_MAX   ? -INFINITY
                : kind == plan::REDUCE_MIN ? INFINITY
                                           : 0.0;
  std::vector<double> out(static_cast<size_t>(count(outShape)), init);
  for (int64_t i = 0; i < count(shape); ++i) {
    Shape index = unflatten(i, shape);
    for (int64_t a : axes)
      index[size_t(a)] = 0;
    double &o = out[size_t(flatten(index, outShape))];
    o = kind == plan::REDUCE_MAX ? std::max(o, x[i]) : kind == plan::REDUCE_MIN ? std::min(o, x[i]) : o + x[i];
  }
  if (kind == plan::REDUCE_MEAN)
    for (double &o : out)
      o /= double(count(shape) / count(outShape));
  return out;
}

plan::Instruction reduceInst(plan::ReduceKind kind, const Shape &axes) {
  plan::Instruction inst;
  inst.mutable_reduce()->set_kind(kind);
  for (int64_t a : axes)
    inst.mutable_reduce()->add_axes(a);
  return inst;
}

const plan::ReduceKind kAllReduceKinds[] = {plan::REDUCE_SUM, plan::REDUCE_MEAN, plan::REDUCE_MAX,
                                            plan::REDUCE_MIN};

void checkReduce(const Shape &shape, const Shape &axes) {
  Tensor x = randomF32(shape, 16);
  std::vector<float> xf = values<float>(x);
  std::vector<double> xd(xf.begin(), xf.end());
  for (plan::ReduceKind kind : kAllReduceKinds) {
    SCOPED_TRACE(plan::ReduceKind_Name(kind) + " " + ::testing::PrintToString(shape) + " axes " +
                 ::testing::PrintToString(axes));
    Shape outShape;
    std::vector<double> expected = refReduce(xd, shape, axes, kind, outShape);
    expectClose(reduceInst(kind, axes), {x}, outShape, expected);
  }
}

TEST(ReduceKernel, AxesPatterns) {
  for (Shape axes : std::vector<Shape>{{0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {0, 1, 2}})
    checkReduce({4, 5, 6}, axes);
  checkReduce({3, 1, 4, 1, 5}, {1, 3});   // only size-1 dims: a copy
  checkReduce({3, 1, 4, 1, 5}, {0, 3, 4}); // size-1 dims between
  checkReduce({2, 3, 4, 5}, {1, 3});
}

TEST(ReduceKernel, Big) {
  checkReduce({300, 200}, {1});
  checkReduce({300, 200}, {0});
  checkReduce({64, 300, 8}, {1});
  // Two kept dims walked by the odometer from where each thread starts,
  // rows of 9 (a tail past the lanes) and of 32.
  checkReduce({40, 7, 50, 9}, {1, 3});
  checkReduce({2048, 32}, {1});
  // One row of kept columns (a bias's gradient): narrower blocks of
  // columns for two threads, the last one partial.
  checkReduce({512, 200}, {0});
  checkReduce({8, 64, 100}, {0, 1});
}

/// TopK's indices by a stable sort of each line written here (NaN above
/// every number, equal values by the lower index).
std::vector<int64_t> refTopK(const std::vector<float> &x, const Shape &shape, int64_t axis,
                             int64_t k, bool largest) {
  int64_t n = shape[size_t(axis)], outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= shape[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < shape.size(); ++d)
    inner *= shape[d];
  std::vector<int64_t> out(size_t(outer * k * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      std::vector<int64_t> order(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      // (is NaN, value): NaN above every number, infinities included.
      auto key = [&](int64_t j) {
        float v = x[size_t((o * n + j) * inner + i)];
        return std::make_pair(std::isnan(v) ? 1 : 0, std::isnan(v) ? 0.0f : v);
      };
      std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        if (key(a) != key(b))
          return largest ? key(a) > key(b) : key(a) < key(b);
        return a < b;
      });
      for (int64_t j = 0; j < k; ++j)
        out[size_t((o * k + j) * inner + i)] = order[size_t(j)];
    }
  return out;
}

TEST(TopKKernel, LinesAlongAnyAxisWithTiesAndNaN) {
  // Few distinct values (ties everywhere), a NaN and infinities.
  Shape shape{3, 70, 5};
  std::vector<float> x(size_t(3 * 70 * 5));
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = float(int64_t(i * 7919 % 13) - 6);
  x[17] = NAN;
  x[40] = INFINITY;
  x[41] = -INFINITY;
  for (int64_t axis : {0, 1, 2})
    for (bool largest : {true, false}) {
      int64_t k = axis == 1 ? 67 : 2;
      SCOPED_TRACE("axis " + std::to_string(axis) + (largest ? " largest" : " smallest"));
      plan::Instruction inst;
      inst.mutable_top_k()->set_axis(axis);
      inst.mutable_top_k()->set_k(k);
      inst.mutable_top_k()->set_largest(largest);
      Shape out = shape;
      out[size_t(axis)] = k;
      expectExact(inst, {tensor(plan::F32, shape, x)},
                  tensor(plan::I64, out, refTopK(x, shape, axis, k, largest)));
    }
}

TEST(ReduceKernel, EmptyReduction) {
  Tensor x = tensor<float>(plan::F32, {3, 0, 2}, {});
  std::vector<double> want[] = {std::vector<double>(6, 0.0), std::vector<double>(6, NAN),
                                std::vector<double>(6, -INFINITY),
                                std::vector<double>(6, INFINITY)};
  for (int k = 0; k < 4; ++k)
    expectClose(reduceInst(kAllReduceKinds[k], {1}), {x}, {3, 1, 2}, want[k]);
}

TEST(ReduceKernel, Int64) {
  Shape shape{5, 7, 3};
  std::vector<int64_t> xv(105);
  for (size_t i = 0; i < xv.size(); ++i)
    xv[i] = int64_t(i * 7919 % 201) - 100;
  std::vector<double> xd(xv.begin(), xv.end());
  for (plan::ReduceKind kind : {plan::REDUCE_SUM, plan::REDUCE_MAX, plan::REDUCE_MIN})
    for (Shape axes : std::vector<Shape>{{1}, {0, 2}}) {
      SCOPED_TRACE(plan::ReduceKind_Name(kind));
      Shape outShape;
      std::vector<double> expected = refReduce(xd, shape, axes, kind, outShape);
      expectExact(reduceInst(kind, axes), {tensor(plan::I64, shape, xv)},
                  tensor(plan::I64, outShape, std::vector<int64_t>(expected.begin(), expected.end())));
    }
}

//===----------------------------------------------------------------------===//
// gather, transpose, concat, slice, copy, trilu
//===----------------------------------------------------------------------===//

plan::Instruction gatherInst(int64_t axis) {
  plan::Instruction inst;
  inst.mutable_gather()->set_axis(axis);
  return inst;
}

/// The reference gather over T elements of `data`.
template <class T, class Index>
Tensor refGather(const Tensor &data, const Shape &indexShape, const std::vector<Index> &indices,
                 int64_t axis) {
  Shape ds = shapeOf(data.type);
  std::vector<T> dv = values<T>(data), out;
  int64_t outer = 1, inner = 1, dim = ds[size_t(axis)];
  for (int64_t d = 0; d < axis; ++d)
    outer *= ds[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < ds.size(); ++d)
    inner *= ds[d];
  for (int64_t o = 0; o < outer; ++o)
    for (Index index : indices)
      for (int64_t i = 0; i < inner; ++i)
        out.push_back(dv[(o * dim + (index < 0 ? index + dim : index)) * inner + i]);
  Shape outShape(ds.begin(), ds.begin() + axis);
  outShape.insert(outShape.end(), indexShape.begin(), indexShape.end());
  outShape.insert(outShape.end(), ds.begin() + axis + 1, ds.end());
  return tensor(data.type.dtype(), outShape, out);
}

TEST(GatherKernel, Axis0NegativeIndices) {
  Tensor data = randomF32({5, 4}, 17);
  std::vector<int64_t> indices{0, 4, -1, 2, -5, 1};
  expectExact(gatherInst(0), {data, tensor(plan::I64, {2, 3}, indices)},
              refGather<float>(data, {2, 3}, indices, 0));
}

TEST(GatherKernel, Axis1Int32Indices) {
  Tensor data = iota<int64_t>(plan::I64, {2, 5, 3});
  std::vector<int32_t> indices{-4, 0, 3, 4};
  expectExact(gatherInst(1), {data, tensor(plan::I32, {4}, indices)},
              refGather<int64_t>(data, {4}, indices, 1));
  std::vector<int32_t> scalar{2}; // a scalar index drops the axis
  expectExact(gatherInst(1), {data, tensor(plan::I32, {}, scalar)},
              refGather<int64_t>(data, {}, scalar, 1));
}

TEST(GatherKernel, BigEmbedding) {
  Tensor table = randomF32({1000, 64}, 18);
  std::vector<int64_t> ids(2000);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = int64_t(i * 37 % 1000);
  expectExact(gatherInst(0), {table, tensor(plan::I64, {2, 1000}, ids)},
              refGather<float>(table, {2, 1000}, ids, 0));
}

/// scatter_add against loops: rows sharing an index add up.
void checkScatterAdd(const Shape &dataShape, const Shape &indexShape,
                     const std::vector<int64_t> &indices, int64_t axis, bool skipOutside = false) {
  int64_t outer = 1, inner = 1, dim = dataShape[size_t(axis)];
  for (int64_t d = 0; d < axis; ++d)
    outer *= dataShape[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < dataShape.size(); ++d)
    inner *= dataShape[d];
  Shape updatesShape(dataShape.begin(), dataShape.begin() + axis);
  updatesShape.insert(updatesShape.end(), indexShape.begin(), indexShape.end());
  updatesShape.insert(updatesShape.end(), dataShape.begin() + axis + 1, dataShape.end());
  Tensor updates = randomF32(updatesShape, 19);
  std::vector<float> uv = values<float>(updates);
  std::vector<double> expected(size_t(count(dataShape)), 0.0);
  int64_t k = int64_t(indices.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < k; ++i)
      for (int64_t c = 0; c < inner; ++c) {
        int64_t row = indices[size_t(i)] < 0 ? indices[size_t(i)] + dim : indices[size_t(i)];
        if (skipOutside && (indices[size_t(i)] < 0 || indices[size_t(i)] >= dim))
          continue;
        expected[size_t((o * dim + row) * inner + c)] += uv[size_t((o * k + i) * inner + c)];
      }
  plan::Instruction inst;
  inst.mutable_scatter_add()->set_axis(axis);
  inst.mutable_scatter_add()->set_skip_outside(skipOutside);
  expectClose(inst, {updates, tensor(plan::I64, indexShape, indices)}, dataShape, expected);
}

TEST(ScatterAddKernel, RepeatedAndNegativeIndices) {
  checkScatterAdd({5, 3}, {2, 3}, {0, 2, 4, 2, -1, 1}, 0);
  checkScatterAdd({2, 5, 3}, {4}, {4, 0, 4, -5}, 1);
  std::vector<int64_t> ids(3000);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = int64_t(i * 37 % 500);
  checkScatterAdd({500, 64}, {3000}, ids, 0); // an embedding's gradient, threaded by columns
}

TEST(ScatterAddKernel, OutOfRangeIndexFailsTheRun) {
  plan::Instruction inst;
  inst.mutable_scatter_add()->set_axis(0);
  std::string error;
  runKernel(inst, {randomF32({2, 3}, 1), tensor(plan::I64, {2}, std::vector<int64_t>{1, 4})},
            typeOf(plan::F32, {4, 3}), 1, &error);
  EXPECT_NE(error.find("scatter_add: index 4 (element 1 of the indices) is out of range"),
            std::string::npos)
      << error;
}

TEST(GatherKernel, OutOfRangeIndexFailsTheRun) {
  Tensor data = randomF32({5, 4}, 19);
  for (int64_t bad : {5, -6}) {
    std::string error;
    runKernel(gatherInst(0), {data, tensor<int64_t>(plan::I64, {3}, {1, bad, 0})},
              typeOf(plan::F32, {3, 4}), 1, &error);
    EXPECT_NE(error.find("index " + std::to_string(bad)), std::string::npos) << error;
    EXPECT_NE(error.find("size 5"), std::string::npos) << error;
    EXPECT_NE(error.find("-5 to 4"), std::string::npos) << error;
  }
}

/// skip_outside (a block of a table split along the axis): indices outside
/// [0, dim) take zeros, negative ones too (no wrap), and fail nothing.
TEST(GatherKernel, SkipOutsideTakesZerosForOtherBlocksRows) {
  plan::Instruction inst = gatherInst(0);
  inst.mutable_gather()->set_skip_outside(true);
  // Row r of [5, 2] is {10r + 1, 10r + 2}; -3 would wrap to row 2.
  Tensor data = tensor<float>(plan::F32, {5, 2}, {1, 2, 11, 12, 21, 22, 31, 32, 41, 42});
  std::vector<int64_t> ids{-1, 0, 4, 5, -3, 2};
  expectExact(inst, {data, tensor(plan::I64, {2, 3}, ids)},
              tensor<float>(plan::F32, {2, 3, 2}, {0, 0, 1, 2, 41, 42, 0, 0, 0, 0, 21, 22}));
  // A middle axis of 3 rows, i32 indices: [o][r][c] = 100 + 6o + 2r + c.
  inst.mutable_gather()->set_axis(1);
  std::vector<int64_t> wide(12);
  for (size_t k = 0; k < wide.size(); ++k)
    wide[k] = 100 + int64_t(k);
  std::vector<int32_t> ids32{3, -1, 1, 2};
  expectExact(inst, {tensor(plan::I64, {2, 3, 2}, wide), tensor(plan::I32, {4}, ids32)},
              tensor<int64_t>(plan::I64, {2, 4, 2},
                              {0, 0, 0, 0, 102, 103, 104, 105, 0, 0, 0, 0, 108, 109, 110, 111}));
  // Without it, as before: -3 is row 2, 5 fails the run.
  expectExact(gatherInst(0), {data, tensor<int64_t>(plan::I64, {1}, {-3})},
              tensor<float>(plan::F32, {1, 2}, {21, 22}));
  std::string error;
  runKernel(gatherInst(0), {data, tensor(plan::I64, {2, 3}, ids)}, typeOf(plan::F32, {2, 3, 2}),
            1, &error);
  EXPECT_NE(error.find("gather: index 5 (element 3 of the indices) is out of range"),
            std::string::npos)
      << error;
}

/// skip_outside: updates at indices outside [0, dim) are dropped, none
/// wraps and none fails the run.
TEST(ScatterAddKernel, SkipOutsideDropsOtherBlocksUpdates) {
  plan::Instruction inst;
  inst.mutable_scatter_add()->set_axis(0);
  inst.mutable_scatter_add()->set_skip_outside(true);
  // Into [5, 2]: update k is {2k + 1, 2k + 2}; -3 would wrap to row 2.
  Tensor updates = tensor<float>(plan::F32, {6, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  std::vector<int64_t> ids{-1, 0, 4, 5, -3, 4};
  expectClose(inst, {updates, tensor(plan::I64, {6}, ids)}, {5, 2},
              {3, 4, 0, 0, 0, 0, 0, 0, 5 + 11, 6 + 12});
  // A middle axis of 3 rows, i32 indices.
  inst.mutable_scatter_add()->set_axis(1);
  Tensor middle = tensor<float>(plan::F32, {2, 4, 1}, {1, 2, 3, 4, 5, 6, 7, 8});
  std::vector<int32_t> ids32{2, -1, 3, 2};
  expectClose(inst, {middle, tensor(plan::I32, {4}, ids32)}, {2, 3, 1},
              {0, 0, 1 + 4, 0, 0, 5 + 8});
  // Without it, as before: -3 adds into row 2, 5 fails the run.
  plan::Instruction plain;
  plain.mutable_scatter_add()->set_axis(0);
  Tensor one = tensor<float>(plan::F32, {1, 2}, {7, 8});
  expectClose(plain, {one, tensor<int64_t>(plan::I64, {1}, {-3})}, {5, 2},
              {0, 0, 0, 0, 7, 8, 0, 0, 0, 0});
  std::string error;
  runKernel(plain, {updates, tensor(plan::I64, {6}, ids)}, typeOf(plan::F32, {5, 2}), 1, &error);
  EXPECT_NE(error.find("scatter_add: index 5 (element 3 of the indices) is out of range"),
            std::string::npos)
      << error;
}

/// A big block (threaded by columns) against loops: ids over four blocks'
/// rows shifted to the second's, [-500, 1500) over 500.
TEST(ScatterAddKernel, SkipOutsideBigEmbeddingBlock) {
  std::vector<int64_t> ids(3000);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = int64_t(i * 37 % 2000) - 500;
  checkScatterAdd({500, 64}, {3000}, ids, 0, /*skipOutside=*/true);
}

plan::Instruction transposeInst(const Shape &perm) {
  plan::Instruction inst;
  for (int64_t p : perm)
    inst.mutable_transpose()->add_perm(p);
  return inst;
}

/// The reference transpose of T elements.
template <class T> Tensor refTranspose(const Tensor &x, const Shape &perm) {
  Shape xs = shapeOf(x.type), ys;
  for (int64_t p : perm)
    ys.push_back(xs[size_t(p)]);
  std::vector<T> xv = values<T>(x), out;
  for (int64_t i = 0; i < count(ys); ++i) {
    Shape yi = unflatten(i, ys), xi(xs.size());
    for (size_t d = 0; d < perm.size(); ++d)
      xi[size_t(perm[d])] = yi[d];
    out.push_back(xv[size_t(flatten(xi, xs))]);
  }
  return tensor(x.type.dtype(), ys, out);
}

TEST(TransposeKernel, Permutations) {
  Tensor x = randomF32({2, 3, 4, 5}, 20);
  for (Shape perm : std::vector<Shape>{{0, 2, 1, 3}, {3, 2, 1, 0}, {1, 0, 2, 3}, {0, 1, 3, 2},
                                       {0, 1, 2, 3}, {2, 0, 3, 1},
                                       // NCHW <-> NHWC
                                       {0, 2, 3, 1}, {0, 3, 1, 2}}) {
    SCOPED_TRACE(::testing::PrintToString(perm));
    expectExact(transposeInst(perm), {x}, refTranspose<float>(x, perm));
  }
}

TEST(TransposeKernel, ElementSizes) {
  Tensor x64 = iota<int64_t>(plan::I64, {3, 4, 5});
  expectExact(transposeInst({2, 0, 1}), {x64}, refTranspose<int64_t>(x64, {2, 0, 1}));
  Tensor x16 = iota<int16_t>(plan::I16, {3, 4, 5});
  expectExact(transposeInst({1, 2, 0}), {x16}, refTranspose<int16_t>(x16, {1, 2, 0}));
  Tensor x8 = iota<uint8_t>(plan::U8, {6, 7});
  expectExact(transposeInst({1, 0}), {x8}, refTranspose<uint8_t>(x8, {1, 0}));
}

TEST(TransposeKernel, BigAttentionPermutation) {
  Tensor x = randomF32({4, 64, 8, 32}, 21);
  expectExact(transposeInst({0, 2, 1, 3}), {x}, refTranspose<float>(x, {0, 2, 1, 3}));
  expectExact(transposeInst({0, 2, 3, 1}), {x}, refTranspose<float>(x, {0, 2, 3, 1}));
}

TEST(ConcatKernel, Axes) {
  Tensor a = iota<float>(plan::F32, {2, 1, 3}), b = randomF32({2, 4, 3}, 22),
         c = randomF32({2, 2, 3}, 23);
  std::vector<float> av = values<float>(a), bv = values<float>(b), cv = values<float>(c), out;
  for (int64_t o = 0; o < 2; ++o) {
    out.insert(out.end(), av.begin() + o * 3, av.begin() + (o + 1) * 3);
    out.insert(out.end(), bv.begin() + o * 12, bv.begin() + (o + 1) * 12);
    out.insert(out.end(), cv.begin() + o * 6, cv.begin() + (o + 1) * 6);
  }
  plan::Instruction inst;
  inst.mutable_concat()->set_axis(1);
  expectExact(inst, {a, b, c}, tensor(plan::F32, {2, 7, 3}, out));

  Tensor d = iota<int64_t>(plan::I64, {2, 3}), e = iota<int64_t>(plan::I64, {1, 3});
  inst.mutable_concat()->set_axis(0);
  expectExact(inst, {d, e}, tensor<int64_t>(plan::I64, {3, 3}, {0, 1, 2, 3, 4, 5, 0, 1, 2}));
}

plan::Instruction sliceInst(const Shape &offsets, const Shape &strides) {
  plan::Instruction inst;
  for (int64_t o : offsets)
    inst.mutable_slice()->add_offsets(o);
  for (int64_t s : strides)
    inst.mutable_slice()->add_strides(s);
  return inst;
}

/// The reference slice of T elements.
template <class T>
Tensor refSlice(const Tensor &x, const Shape &offsets, const Shape &strides, const Shape &outShape) {
  Shape xs = shapeOf(x.type);
  std::vector<T> xv = values<T>(x), out;
  for (int64_t i = 0; i < count(outShape); ++i) {
    Shape index = unflatten(i, outShape);
    for (size_t d = 0; d < index.size(); ++d)
      index[d] = offsets[d] + index[d] * strides[d];
    out.push_back(xv[size_t(flatten(index, xs))]);
  }
  return tensor(x.type.dtype(), outShape, out);
}

TEST(SliceKernel, StridesIncludingNegative) {
  Tensor x = iota<float>(plan::F32, {5, 6});
  struct Case {
    Shape offsets, strides, out;
  } cases[] = {{{4, 1}, {-1, 2}, {3, 3}}, // rows 4,3,2; columns 1,3,5
               {{1, 5}, {1, -1}, {3, 6}}, // whole rows, reversed
               {{0, 2}, {2, 1}, {3, 3}},  // contiguous runs
               {{4, 5}, {-2, -3}, {3, 2}}};
  for (const Case &c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.offsets) + " " + ::testing::PrintToString(c.strides));
    expectExact(sliceInst(c.offsets, c.strides), {x}, refSlice<float>(x, c.offsets, c.strides, c.out));
  }
  Tensor y = iota<int64_t>(plan::I64, {3, 4, 5});
  expectExact(sliceInst({2, 0, 4}, {-1, 1, -2}), {y},
              refSlice<int64_t>(y, {2, 0, 4}, {-1, 1, -2}, {3, 4, 3}));
}

TEST(CopyKernel, Reshape) {
  Tensor x = iota<int8_t>(plan::I8, {2, 3, 4});
  Tensor y = x;
  y.type = typeOf(plan::I8, {6, 4});
  plan::Instruction inst;
  inst.mutable_copy();
  expectExact(inst, {x}, y);
  Tensor big = randomF32({512, 300}, 24), flat = big;
  flat.type = typeOf(plan::F32, {153600});
  expectExact(inst, {big}, flat);
}

/// The reference trilu of T elements.
template <class T> Tensor refTrilu(const Tensor &x, bool upper, int64_t k) {
  Shape xs = shapeOf(x.type);
  std::vector<T> v = values<T>(x);
  int64_t rows = xs[xs.size() - 2], cols = xs.back();
  for (int64_t e = 0; e < count(xs); ++e) {
    int64_t i = e / cols % rows, j = e % cols;
    if (upper ? j - i < k : j - i > k)
      v[size_t(e)] = T(0);
  }
  return tensor(x.type.dtype(), xs, v);
}

TEST(TriluKernel, UpperLowerDiagonals) {
  Tensor x = randomF32({2, 4, 5}, 25, 1.0f, 2.0f);
  Tensor xi = iota<int64_t>(plan::I64, {3, 6, 4});
  for (bool upper : {true, false})
    for (int64_t k : {-1, 0, 1, 7, -7}) {
      SCOPED_TRACE((upper ? "upper k " : "lower k ") + std::to_string(k));
      plan::Instruction inst;
      inst.mutable_trilu()->set_upper(upper);
      inst.mutable_trilu()->set_k(k);
      expectExact(inst, {x}, refTrilu<float>(x, upper, k));
      expectExact(inst, {xi}, refTrilu<int64_t>(xi, upper, k));
    }
}

TEST(DataMovementKernels, EmptyTensors) {
  Tensor empty = tensor<float>(plan::F32, {0, 3}, {});
  expectExact(transposeInst({1, 0}), {empty}, tensor<float>(plan::F32, {3, 0}, {}));
  Tensor x = iota<float>(plan::F32, {2, 2});
  plan::Instruction concat;
  concat.mutable_concat()->set_axis(1);
  expectExact(concat, {x, tensor<float>(plan::F32, {2, 0}, {})}, x);
  expectExact(gatherInst(0), {x, tensor<int64_t>(plan::I64, {0}, {})},
              tensor<float>(plan::F32, {0, 2}, {}));
}

//===----------------------------------------------------------------------===//
// makeKernel's refusals
//===----------------------------------------------------------------------===//

void expectMentions(const std::string &error, std::initializer_list<const char *> phrases) {
  for (const char *phrase : phrases)
    EXPECT_NE(error.find(phrase), std::string::npos) << "'" << phrase << "' not in: " << error;
}

TEST(MakeKernel, MatMulShapeMismatch) {
  expectMentions(prepareError(matmulInst(), {typeOf(plan::F32, {2, 3, 4}), typeOf(plan::F32, {5, 6})},
                              typeOf(plan::F32, {2, 3, 6})),
                 {"matmul: contraction sizes differ", "lhs [2,3,4]", "rhs [5,6]"});
  expectMentions(prepareError(matmulInst(), {typeOf(plan::F32, {2, 3, 4}), typeOf(plan::F32, {3, 4, 5})},
                              typeOf(plan::F32, {3, 3, 5})),
                 {"batch dims do not broadcast"});
  expectMentions(prepareError(matmulInst(), {typeOf(plan::F32, {3, 4}), typeOf(plan::F32, {4, 5})},
                              typeOf(plan::F32, {3, 6})),
                 {"output shape [3,6] should be [3,5]"});
}

TEST(MakeKernel, UnsupportedDType) {
  expectMentions(prepareError(matmulInst(), {typeOf(plan::I64, {3, 4}), typeOf(plan::I64, {4, 5})},
                              typeOf(plan::I64, {3, 5})),
                 {"matmul: dtype I64 is not supported by the CPU backend"});
  expectMentions(prepareError(reduceInst(plan::REDUCE_MEAN, {0}), {typeOf(plan::I64, {3})},
                              typeOf(plan::I64, {1})),
                 {"reduce: dtype I64 is not supported"});
  plan::Instruction softmax;
  softmax.mutable_softmax()->set_axis(0);
  expectMentions(prepareError(softmax, {typeOf(plan::I32, {3})}, typeOf(plan::I32, {3})),
                 {"softmax: dtype I32 is not supported"});
}

TEST(MakeKernel, ArityAndUnknownOp) {
  expectMentions(prepareError(matmulInst(), {typeOf(plan::F32, {3, 4})}, typeOf(plan::F32, {3, 4})),
                 {"matmul: expected 2 to 4 inputs and 1 output, got 1 inputs"});
  expectMentions(prepareError(plan::Instruction(), {typeOf(plan::F32, {3})}, typeOf(plan::F32, {3})),
                 {"no operation this runtime knows"});
}

TEST(MakeKernel, OtherShapeErrors) {
  plan::Instruction conv;
  conv.mutable_conv2d()->add_strides(1);
  expectMentions(prepareError(conv, {typeOf(plan::F32, {1, 2, 5, 5}), typeOf(plan::F32, {3, 2, 3, 3})},
                              typeOf(plan::F32, {1, 3, 3, 3})),
                 {"conv2d: strides must have 2 values, got 1"});
  conv.mutable_conv2d()->add_strides(1);
  for (int i = 0; i < 4; ++i)
    conv.mutable_conv2d()->add_pads(0);
  conv.mutable_conv2d()->add_dilations(1);
  conv.mutable_conv2d()->add_dilations(1);
  conv.mutable_conv2d()->set_groups(1);
  expectMentions(prepareError(conv, {typeOf(plan::F32, {1, 2, 5, 5}), typeOf(plan::F32, {3, 2, 3, 3})},
                              typeOf(plan::F32, {1, 3, 5, 5})),
                 {"conv2d: output shape [1,3,5,5] should be [1,3,3,3]"});
  expectMentions(prepareError(transposeInst({0, 0}), {typeOf(plan::F32, {2, 3})}, typeOf(plan::F32, {2, 2})),
                 {"transpose: perm [0,0] is not a permutation"});
  expectMentions(prepareError(sliceInst({0, 1}, {1, 2}), {typeOf(plan::F32, {2, 4})}, typeOf(plan::F32, {2, 3})),
                 {"slice: dim 1", "leave the input's size 4"});
  expectMentions(prepareError(gatherInst(0), {typeOf(plan::F32, {5, 4}), typeOf(plan::F32, {2})},
                              typeOf(plan::F32, {2, 4})),
                 {"gather: indices of dtype F32 are not supported"});
  plan::Instruction concat;
  concat.mutable_concat()->set_axis(1);
  expectMentions(prepareError(concat, {typeOf(plan::F32, {2, 3}), typeOf(plan::F32, {3, 3})},
                              typeOf(plan::F32, {2, 6})),
                 {"concat: input [3,3] should match the output [2,6] except along axis 1"});
}

//===----------------------------------------------------------------------===//
// Timing (run with --gtest_also_run_disabled_tests): the kernel's matmul
// against a direct cblas_sgemm of the same product.
//===----------------------------------------------------------------------===//

TEST(MatMulKernel, DISABLED_TimingAgainstDirectSgemm) {
  constexpr int M = 128, K = 256, N = 1024, reps = 200;
  Tensor x = randomF32({1, M, K}, 26), w = randomF32({K, N}, 27);
  std::vector<float> y(size_t(M) * N);
  std::string error;
  auto kernel = makeKernel(matmulInst(), {x.type, w.type}, {typeOf(plan::F32, {1, M, N})}, error);
  ASSERT_TRUE(kernel) << error;
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    const void *in[] = {x.bytes.data(), w.bytes.data()};
    void *out[] = {y.data()};
    auto runKernelOnce = [&] { kernel->run(in, out, pool, error); };
    auto runSgemmOnce = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f,
                  reinterpret_cast<const float *>(x.bytes.data()), K,
                  reinterpret_cast<const float *>(w.bytes.data()), N, 0.0f, y.data(), N);
    };
    // Interleaved, and the median of each: the machine may be shared.
    std::vector<double> kernelTimes, sgemmTimes;
    auto time = [](auto &&body) {
      auto start = std::chrono::steady_clock::now();
      body();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    runKernelOnce();
    runSgemmOnce();
    for (int r = 0; r < reps; ++r) {
      kernelTimes.push_back(time(runKernelOnce));
      sgemmTimes.push_back(time(runSgemmOnce));
    }
    auto median = [](std::vector<double> &v) {
      std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
      return v[v.size() / 2];
    };
    double viaKernel = median(kernelTimes), direct = median(sgemmTimes);
    double gflops = 2.0 * M * N * K / 1e9;
    std::printf("[1,%d,%d]x[%d,%d], %d thread(s): kernel %.1f us (%.1f GFLOP/s), direct sgemm "
                "%.1f us (%.1f GFLOP/s); the kernel runs at %.1f%% of direct\n",
                M, K, K, N, threads, viaKernel * 1e6, gflops / viaKernel, direct * 1e6,
                gflops / direct, 100.0 * direct / viaKernel);
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// 16-bit floats
//===----------------------------------------------------------------------===//

uint16_t bf16Bits(float f) { return BFloat16(f).bits; }

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(bf16Bits(1.0f), 0x3f80);
  EXPECT_EQ(bf16Bits(1.00390625f), 0x3f80);     // halfway, to the even 0x3f80
  EXPECT_EQ(bf16Bits(1.01171875f), 0x3f82);     // halfway, to the even 0x3f82
  EXPECT_EQ(bf16Bits(1.0040f), 0x3f81);         // past halfway: up
  EXPECT_EQ(bf16Bits(-2.5f), 0xc020);
  EXPECT_EQ(bf16Bits(std::numeric_limits<float>::max()), 0x7f80); // rounds to infinity
  EXPECT_EQ(bf16Bits(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(bf16Bits(-std::numeric_limits<float>::quiet_NaN()), 0x7fc0);
  EXPECT_EQ(float(BFloat16(3.0f)), 3.0f);
}

/// A kernel on bf16 or f16 operands runs through its f32 version: the
/// product of the 16-bit values, accumulated in float, rounded once.
template <class Half> void checkHalfMatMul(plan::DType dtype) {
  const int64_t M = 7, K = 33, N = 5;
  Tensor a = randomF32({M, K}, 51), b = randomF32({K, N}, 52);
  std::vector<float> av = values<float>(a), bv = values<float>(b);
  std::vector<Half> ah, bh;
  for (float v : av)
    ah.push_back(Half(v));
  for (float v : bv)
    bh.push_back(Half(v));
  plan::Instruction inst = matmulInst();
  for (int threads : {1, 2}) {
    Tensor out = runKernel(inst, {tensor(dtype, {M, K}, ah), tensor(dtype, {K, N}, bh)},
                           typeOf(dtype, {M, N}), threads);
    std::vector<Half> got = values<Half>(out);
    ASSERT_EQ(got.size(), size_t(M * N));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < K; ++k)
          sum += double(float(ah[i * K + k])) * double(float(bh[k * N + j]));
        // One rounding to 16 bits (bf16: 8 significant bits) after float accumulation.
        double ulp = dtype == plan::BF16 ? 1.0 / 128 : 1.0 / 1024;
        EXPECT_NEAR(float(got[i * N + j]), sum, 1e-5 + ulp * std::fabs(sum))
            << "element " << i << "," << j << " threads " << threads;
      }
  }
}

TEST(HalfKernels, MatMulBf16AndF16) {
  checkHalfMatMul<BFloat16>(plan::BF16);
  checkHalfMatMul<_Float16>(plan::F16);
}

namespace {

// x cos + rotate_half(x) sin in double, the tables broadcast from
// [1, S, 1, D] (cos) and [S, 1, D] (sin) onto x [B, S, H, D];
// `backward`: x cos - rotate_half(x sin).
std::vector<double> rotaryReference(const std::vector<float> &x, const std::vector<float> &c,
                                    const std::vector<float> &s, int64_t b, int64_t seq,
                                    int64_t heads, int64_t d, bool backward) {
  std::vector<double> out(x.size());
  int64_t h = d / 2;
  for (int64_t n = 0; n < b; ++n)
    for (int64_t t = 0; t < seq; ++t)
      for (int64_t k = 0; k < heads; ++k)
        for (int64_t i = 0; i < d; ++i) {
          int64_t row = ((n * seq + t) * heads + k) * d, j = i < h ? i + h : i - h;
          double sign = i < h ? -1 : 1, xi = x[size_t(row + i)], xj = x[size_t(row + j)];
          double ci = c[size_t(t * d + i)];
          double r = backward ? -sign * xj * double(s[size_t(t * d + j)])
                              : sign * xj * double(s[size_t(t * d + i)]);
          out[size_t(row + i)] = xi * ci + r;
        }
  return out;
}

TEST(RotaryKernel, AgainstADoubleReferenceWithBroadcastTables) {
  const int64_t b = 2, seq = 5, heads = 3, d = 8;
  Tensor x = randomF32({b, seq, heads, d}, 1), cos = randomF32({1, seq, 1, d}, 2),
         sin = randomF32({seq, 1, d}, 3);
  for (bool backward : {false, true}) {
    SCOPED_TRACE(backward ? "backward" : "forward");
    plan::Instruction inst;
    inst.mutable_rotary()->set_backward(backward);
    expectClose(inst, {x, cos, sin}, {b, seq, heads, d},
                rotaryReference(values<float>(x), values<float>(cos), values<float>(sin), b, seq,
                                heads, d, backward));
  }
}

// The backward is the forward's adjoint: <R x, y> = <x, R^T y> for any x
// and y (what autodiff relies on).
TEST(RotaryKernel, TheBackwardIsTheForwardsAdjoint) {
  const int64_t b = 1, seq = 4, heads = 2, d = 6;
  Tensor x = randomF32({b, seq, heads, d}, 4), y = randomF32({b, seq, heads, d}, 5),
         cos = randomF32({1, seq, 1, d}, 6), sin = randomF32({seq, 1, d}, 7);
  plan::Instruction forward, backward;
  forward.mutable_rotary();
  backward.mutable_rotary()->set_backward(true);
  std::vector<float> rx = values<float>(runKernel(forward, {x, cos, sin}, x.type, 1)),
                     ry = values<float>(runKernel(backward, {y, cos, sin}, x.type, 1));
  std::vector<float> xs = values<float>(x), ys = values<float>(y);
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < xs.size(); ++i)
    lhs += double(rx[i]) * ys[i], rhs += double(xs[i]) * ry[i];
  EXPECT_NEAR(lhs, rhs, 1e-5 * (std::abs(lhs) + 1));
}

TEST(RotaryKernel, RefusesWhatDoesNotFit) {
  plan::Instruction inst;
  inst.mutable_rotary();
  std::string error;
  auto odd = typeOf(plan::F32, {2, 5}), table = typeOf(plan::F32, {2, 5});
  EXPECT_EQ(makeKernel(inst, {odd, table, table}, {odd}, error), nullptr);
  EXPECT_EQ(error, "rotary: x must be a float tensor with an even last dim, got [2,5]");
  auto x = typeOf(plan::F32, {2, 3, 4}), wide = typeOf(plan::F32, {4, 4});
  EXPECT_EQ(makeKernel(inst, {x, wide, wide}, {x}, error), nullptr);
  EXPECT_EQ(error, "rotary: cos [4,4] does not broadcast to x [2,3,4] with its last dim");
}

} // namespace
