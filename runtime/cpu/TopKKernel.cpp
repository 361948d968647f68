//===- TopKKernel.cpp - indices of the k largest along an axis ------------===//
//
// Each line along the axis (outer x inner of them) is ordered by a partial
// sort of its n indices, the extreme first, and its first k are written.
// The order is a strict weak one even with NaN (above every number), and
// equal values go by the lower index, so the result is ONNX TopK's and does
// not depend on the thread count.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/KernelSupport.h"
#include "runtime/cpu/ThreadPool.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

namespace dtc::runtime::cpu {
namespace {

/// a above b: NaN above every number.
template <class T> bool above(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a))
      return !std::isnan(b);
    if (std::isnan(b))
      return false;
  }
  return a > b;
}

template <class T>
std::unique_ptr<Kernel> topK(int64_t outer, int64_t n, int64_t inner, int64_t k, bool largest) {
  return makeFunctionKernel([=](const void *const *inputs, void *const *outputs,
                                ThreadPool &pool) {
    const T *x = static_cast<const T *>(inputs[0]);
    int64_t *y = static_cast<int64_t *>(outputs[0]);
    pool.parallelFor(outer * inner, grainFor(n * 8), [&](int64_t b, int64_t e) {
      std::vector<int64_t> order(static_cast<size_t>(n));
      for (int64_t line = b; line < e; ++line) {
        int64_t o = line / inner, i = line % inner;
        const T *row = x + o * n * inner + i;
        std::iota(order.begin(), order.end(), 0);
        auto first = [&](int64_t p, int64_t q) {
          T a = row[p * inner], c = row[q * inner];
          if (largest ? above(a, c) : above(c, a))
            return true;
          if (largest ? above(c, a) : above(a, c))
            return false;
          return p < q;
        };
        std::partial_sort(order.begin(), order.begin() + k, order.end(), first);
        int64_t *out = y + o * k * inner + i;
        for (int64_t j = 0; j < k; ++j)
          out[j * inner] = order[size_t(j)];
      }
    });
  });
}

} // namespace

std::unique_ptr<Kernel> makeTopKKernel(const plan::Instruction &inst, const KernelTypes &types,
                                       std::string &error) {
  const plan::TopK &op = inst.top_k();
  plan::DType dtype = types.inputs[0].dtype();
  if (!checkDType(dtype, {plan::F32, plan::F64, plan::I32, plan::I64, plan::U64}, error))
    return nullptr;
  if (types.output.dtype() != plan::I64)
    return fail(error, "output must be i64 indices");
  Shape x = shapeOf(types.inputs[0]);
  int64_t axis = op.axis(), k = op.k();
  if (axis < 0 || axis >= int64_t(x.size()))
    return fail(error, "axis " + std::to_string(axis) + " is out of range for " +
                           shapeString(x));
  int64_t n = x[size_t(axis)];
  if (k < 1 || k > n)
    return fail(error, "k = " + std::to_string(k) + " must be in [1, " + std::to_string(n) + "]");
  Shape expected = x;
  expected[size_t(axis)] = k;
  if (shapeOf(types.output) != expected)
    return fail(error, "output shape " + shapeString(types.output) + " should be " +
                           shapeString(expected));
  int64_t outer = product(x, 0, size_t(axis)), inner = product(x, size_t(axis) + 1, x.size());
  switch (dtype) {
  case plan::F32: return topK<float>(outer, n, inner, k, op.largest());
  case plan::F64: return topK<double>(outer, n, inner, k, op.largest());
  case plan::I32: return topK<int32_t>(outer, n, inner, k, op.largest());
  case plan::I64: return topK<int64_t>(outer, n, inner, k, op.largest());
  default: return topK<uint64_t>(outer, n, inner, k, op.largest());
  }
}

} // namespace dtc::runtime::cpu
