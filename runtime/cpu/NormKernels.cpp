//===- NormKernels.cpp - softmax, layer_norm, batch_norm ------------------===//
//
// Sums are accumulated in double: they are cheap next to the exp and the
// loads, and keep long rows within the tolerance of a double reference.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/KernelSupport.h"
#include "runtime/cpu/ThreadPool.h"

#include <cmath>
#include <limits>

namespace dtc::runtime::cpu {
namespace {

//===----------------------------------------------------------------------===//
// softmax
//===----------------------------------------------------------------------===//

/// Softmax over a contiguous row of n values (the axis is the last dim).
template <class T> void softmaxRow(const T *x, T *y, int64_t n, bool log) {
  T max = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < n; ++i)
    max = std::max(max, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    T e = std::exp(x[i] - max);
    if (!log)
      y[i] = e;
    sum += e;
  }
  if (log) {
    // (x - max) - log(sum), not x - (max + log(sum)): with a large max the
    // sum of the two would round away log(sum)'s low digits.
    T logSum = T(std::log(sum));
    for (int64_t i = 0; i < n; ++i)
      y[i] = (x[i] - max) - logSum;
  } else {
    T scale = T(1.0 / sum);
    for (int64_t i = 0; i < n; ++i)
      y[i] *= scale;
  }
}

/// Columns processed together when the axis is not the last dim: each step
/// along the axis then reads a short contiguous run instead of one value.
constexpr int64_t kSoftmaxColumns = 64;

/// Softmax down `width` (<= kSoftmaxColumns) adjacent columns of an [n,
/// inner] block: element (i, c) is at x[i * inner + c].
template <class T>
void softmaxColumns(const T *x, T *y, int64_t n, int64_t inner, int64_t width, bool log) {
  T max[kSoftmaxColumns];
  double sum[kSoftmaxColumns];
  std::fill(max, max + width, -std::numeric_limits<T>::infinity());
  std::fill(sum, sum + width, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < width; ++c)
      max[c] = std::max(max[c], x[i * inner + c]);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < width; ++c) {
      T e = std::exp(x[i * inner + c] - max[c]);
      if (!log)
        y[i * inner + c] = e;
      sum[c] += e;
    }
  T post[kSoftmaxColumns]; // log(sum) to subtract, or 1/sum to scale by
  for (int64_t c = 0; c < width; ++c)
    post[c] = log ? T(std::log(sum[c])) : T(1.0 / sum[c]);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < width; ++c) {
      T &out = y[i * inner + c];
      out = log ? (x[i * inner + c] - max[c]) - post[c] : out * post[c];
    }
}

template <class T>
std::unique_ptr<Kernel> softmaxKernel(int64_t outer, int64_t n, int64_t inner, bool log) {
  return makeFunctionKernel([=](const void *const *inputs, void *const *outputs,
                                ThreadPool &pool) {
    const T *x = static_cast<const T *>(inputs[0]);
    T *y = static_cast<T *>(outputs[0]);
    if (inner == 1) {
      pool.parallelFor(outer, grainFor(n), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r)
          softmaxRow(x + r * n, y + r * n, n, log);
      });
      return;
    }
    int64_t blocks = (inner + kSoftmaxColumns - 1) / kSoftmaxColumns;
    pool.parallelFor(outer * blocks, grainFor(n * kSoftmaxColumns), [&](int64_t b, int64_t e) {
      for (int64_t item = b; item < e; ++item) {
        int64_t o = item / blocks, c0 = item % blocks * kSoftmaxColumns;
        int64_t offset = o * n * inner + c0;
        softmaxColumns(x + offset, y + offset, n, inner,
                       std::min(kSoftmaxColumns, inner - c0), log);
      }
    });
  });
}

//===----------------------------------------------------------------------===//
// layer_norm
//===----------------------------------------------------------------------===//

/// Normalises one row of n values: two passes (mean, then the centred
/// squares), so large means do not cancel the variance away.
void layerNormRow(const float *x, const float *scale, const float *bias, float *y, int64_t n,
                  double epsilon) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += x[i];
  double mean = sum / double(n);
  double squares = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = x[i] - mean;
    squares += d * d;
  }
  // The mean as a float plus a float correction: x - high is exact when x
  // is near the mean (where it matters), so a large mean costs no digits.
  float high = float(mean), low = float(mean - double(high));
  float inverse = float(1.0 / std::sqrt(squares / double(n) + epsilon));
  for (int64_t i = 0; i < n; ++i)
    y[i] = ((x[i] - high) - low) * inverse * scale[i] + (bias ? bias[i] : 0.0f);
}

} // namespace

std::unique_ptr<Kernel> makeSoftmaxKernel(const plan::Instruction &inst,
                                          const KernelTypes &types, std::string &error) {
  const plan::Softmax &op = inst.softmax();
  if (!checkDType(types.output.dtype(), {plan::F32, plan::F64}, error) ||
      !checkSameDType(types, error))
    return nullptr;
  Shape x = shapeOf(types.inputs[0]);
  if (!checkSameShape(types, error))
    return nullptr;
  if (op.axis() < 0 || op.axis() >= int64_t(x.size()))
    return fail(error, "axis " + std::to_string(op.axis()) + " out of range for shape " +
                           shapeString(x));
  size_t axis = size_t(op.axis());
  int64_t outer = product(x, 0, axis), n = x[axis], inner = product(x, axis + 1, x.size());
  if (types.output.dtype() == plan::F64)
    return softmaxKernel<double>(outer, n, inner, op.log());
  return softmaxKernel<float>(outer, n, inner, op.log());
}

std::unique_ptr<Kernel> makeLayerNormKernel(const plan::Instruction &inst,
                                            const KernelTypes &types, std::string &error) {
  const plan::LayerNorm &op = inst.layer_norm();
  if (!checkDType(types.output.dtype(), {plan::F32}, error) ||
      !checkSameDType(types, error))
    return nullptr;
  Shape x = shapeOf(types.inputs[0]);
  if (!checkSameShape(types, error))
    return nullptr;
  if (op.axis() < 0 || op.axis() >= int64_t(x.size()))
    return fail(error, "axis " + std::to_string(op.axis()) + " out of range for shape " +
                           shapeString(x));
  size_t axis = size_t(op.axis());
  Shape normalised(x.begin() + axis, x.end());
  int64_t rows = product(x, 0, axis), n = product(normalised);
  const char *names[] = {"input", "scale", "bias"};
  for (size_t i = 1; i < types.inputs.size(); ++i)
    if (product(shapeOf(types.inputs[i])) != n)
      return fail(error, std::string(names[i]) + " " + shapeString(types.inputs[i]) +
                             " should have the normalised shape " + shapeString(normalised) +
                             " of input " + shapeString(x));
  bool hasBias = types.inputs.size() == 3;
  double epsilon = op.epsilon();
  return makeFunctionKernel([=](const void *const *inputs, void *const *outputs,
                                ThreadPool &pool) {
    const float *x = static_cast<const float *>(inputs[0]);
    const float *scale = static_cast<const float *>(inputs[1]);
    const float *bias = hasBias ? static_cast<const float *>(inputs[2]) : nullptr;
    float *y = static_cast<float *>(outputs[0]);
    if (n == 0)
      return;
    pool.parallelFor(rows, grainFor(n), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        layerNormRow(x + r * n, scale, bias, y + r * n, n, epsilon);
    });
  });
}

std::unique_ptr<Kernel> makeBatchNormKernel(const plan::Instruction &inst,
                                            const KernelTypes &types, std::string &error) {
  if (!checkDType(types.output.dtype(), {plan::F32}, error) ||
      !checkSameDType(types, error))
    return nullptr;
  Shape x = shapeOf(types.inputs[0]);
  if (!checkSameShape(types, error))
    return nullptr;
  if (x.size() < 2)
    return fail(error, "input must be [N,C,...], got " + shapeString(x));
  const char *names[] = {"input", "scale", "bias", "mean", "var"};
  for (size_t i = 1; i < 5; ++i)
    if (shapeOf(types.inputs[i]) != Shape{x[1]})
      return fail(error, std::string(names[i]) + " " + shapeString(types.inputs[i]) +
                             " should be [" + std::to_string(x[1]) + "], the channels of input " +
                             shapeString(x));
  int64_t channels = x[1], planes = x[0] * channels, plane = product(x, 2, x.size());
  double epsilon = inst.batch_norm().epsilon();
  return makeFunctionKernel([=](const void *const *inputs, void *const *outputs,
                                ThreadPool &pool) {
    const float *x = static_cast<const float *>(inputs[0]);
    const float *scale = static_cast<const float *>(inputs[1]);
    const float *bias = static_cast<const float *>(inputs[2]);
    const float *mean = static_cast<const float *>(inputs[3]);
    const float *var = static_cast<const float *>(inputs[4]);
    float *y = static_cast<float *>(outputs[0]);
    std::vector<float> factor(static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c)
      factor[c] = float(scale[c] / std::sqrt(double(var[c]) + epsilon));
    pool.parallelFor(planes, grainFor(plane), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        int64_t c = p % channels;
        // (x - mean) first: folding mean into the bias would cancel badly
        // when x is close to a large mean.
        float m = mean[c], f = factor[c], shift = bias[c];
        for (int64_t i = p * plane, end = i + plane; i < end; ++i)
          y[i] = (x[i] - m) * f + shift;
      }
    });
  });
}

} // namespace dtc::runtime::cpu
