//===- NormKernels.cpp - softmax, cross_entropy, layer_norm, batch_norm ---===//
//
// Sums are accumulated in float lanes (so that the loops vectorise) and
// folded into a double every kSumBlock values: long rows stay within the
// tolerance of a double reference. The double softmax keeps std::exp.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/FastMath.h"
#include "runtime/cpu/KernelSupport.h"
#include "runtime/cpu/ThreadPool.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace dtc::runtime::cpu {
namespace {

//===----------------------------------------------------------------------===//
// Vectorisable float loops, compiled for the baseline (SSE2) and, picked at
// run time, for AVX2 and AVX-512: the build targets any x86-64.
//===----------------------------------------------------------------------===//

#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
#define DTC_X86_DISPATCH 1
#define DTC_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define DTC_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")))
#define DTC_X86_ONLY(...) __VA_ARGS__
#else
#define DTC_X86_ONLY(...) nullptr, nullptr
#endif

/// The widest of three builds of one function that this CPU runs.
template <class Fn> Fn pickForCpu(Fn baseline, Fn avx2, Fn avx512) {
#ifdef DTC_X86_DISPATCH
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return avx2;
#endif
  (void)avx2, (void)avx512;
  return baseline;
}

/// Partial sums and maxima are kept in this many lanes (an AVX-512 vector).
constexpr int64_t kLanes = 16;
/// Float partial sums are folded into a double every this many values.
constexpr int64_t kSumBlock = 1024;

/// The sum of term(i) over [0, n), in float lanes that vectorise, folded
/// into a double every kSumBlock terms.
template <class Term>
[[gnu::always_inline]] inline double blockedSum(int64_t n, const Term &term) {
  double sum = 0;
  for (int64_t b = 0; b < n; b += kSumBlock) {
    int64_t end = std::min(n, b + kSumBlock), whole = b + (end - b) / kLanes * kLanes;
    float lanes[kLanes] = {};
    for (int64_t i = b; i < whole; i += kLanes)
      for (int64_t l = 0; l < kLanes; ++l)
        lanes[l] += term(i + l);
    for (int64_t i = whole; i < end; ++i)
      sum += term(i);
    // Pairwise, in doubles: added one by one, the lanes made a chain of 16
    // dependent adds a row, longer than a short row's own work.
    double folded[kLanes];
    for (int64_t l = 0; l < kLanes; ++l)
      folded[l] = lanes[l];
    for (int64_t width = kLanes / 2; width > 0; width /= 2)
      for (int64_t l = 0; l < width; ++l)
        folded[l] += folded[l + width];
    sum += folded[0];
  }
  return sum;
}


//===----------------------------------------------------------------------===//
// softmax
//===----------------------------------------------------------------------===//

/// The last pass of a softmax row, given its max and sum of exps (y holds
/// the exps unless `log`).
template <class T>
[[gnu::always_inline]] inline void finishSoftmaxRow(const T *x, T *y, int64_t n, T max,
                                                    double sum, bool log) {
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
  finishSoftmaxRow(x, y, n, max, sum, log);
}

/// A float row's max, in lanes (so that the loop vectorises), the tail
/// apart.
[[gnu::always_inline]] inline float rowMaxVector(const float *x, int64_t n) {
  float lanes[kLanes];
  std::fill(lanes, lanes + kLanes, -std::numeric_limits<float>::infinity());
  int64_t whole = n / kLanes * kLanes;
  for (int64_t i = 0; i < whole; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l)
      lanes[l] = x[i + l] > lanes[l] ? x[i + l] : lanes[l];
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = whole; i < n; ++i)
    max = std::max(max, x[i]);
  for (int64_t l = 0; l < kLanes; ++l)
    max = std::max(max, lanes[l]);
  return max;
}

/// The float row, written so that every loop vectorises: lane-wise partial
/// max and sums (folded into a double every kSumBlock values, so long rows
/// keep their digits) and a polynomial exp.
[[gnu::always_inline]] inline void softmaxRowVector(const float *x, float *y, int64_t n,
                                                    bool log) {
  float max = rowMaxVector(x, n);
  double sum = blockedSum(n, [&](int64_t i) {
    float e = fastExpFlushed(x[i] - max);
    if (!log)
      y[i] = e;
    return e;
  });
  finishSoftmaxRow(x, y, n, max, sum, log);
}

/// Rows up to this long go a tile at a time (softmaxShortRowsVector).
constexpr int64_t kShortRow = 256;

/// Short rows, a tile of them at a time: their exps are computed over the
/// tile as one array, so that they vectorise across rows, and each row's
/// sum goes to eight double lanes. Row by row, a row's max, sum and the
/// fold of its float lanes into a double took longer than its exps (which
/// went one at a time), many times the cost per element of long rows.
[[gnu::always_inline]] inline void softmaxShortRowsVector(const float *x, float *y,
                                                          int64_t rows, int64_t n, bool log) {
  constexpr int64_t kTile = 1024, kSumLanes = 8;
  float e[kTile], max[kTile];
  int64_t perTile = std::max<int64_t>(1, kTile / n);
  for (int64_t r0 = 0; r0 < rows; r0 += perTile) {
    int64_t count = std::min(perTile, rows - r0);
    const float *xs = x + r0 * n;
    float *ys = y + r0 * n;
    for (int64_t r = 0; r < count; ++r) {
      // In eight lanes, the tail apart: one chain of maxes held the loop back.
      const float *row = xs + r * n;
      float lanes[kSumLanes], m = -std::numeric_limits<float>::infinity();
      std::fill(lanes, lanes + kSumLanes, m);
      int64_t whole = n / kSumLanes * kSumLanes;
      for (int64_t i = 0; i < whole; i += kSumLanes)
        for (int64_t l = 0; l < kSumLanes; ++l)
          lanes[l] = row[i + l] > lanes[l] ? row[i + l] : lanes[l];
      for (int64_t i = whole; i < n; ++i)
        m = row[i] > m ? row[i] : m;
      for (int64_t l = 0; l < kSumLanes; ++l)
        m = lanes[l] > m ? lanes[l] : m;
      max[r] = m;
      for (int64_t i = 0; i < n; ++i)
        e[r * n + i] = xs[r * n + i] - m;
    }
    for (int64_t i = 0; i < count * n; ++i)
      e[i] = fastExpFlushed(e[i]);
    for (int64_t r = 0; r < count; ++r) {
      const float *row = e + r * n;
      double lanes[kSumLanes] = {};
      int64_t whole = n / kSumLanes * kSumLanes;
      for (int64_t i = 0; i < whole; i += kSumLanes)
        for (int64_t l = 0; l < kSumLanes; ++l)
          lanes[l] += row[i + l];
      double tail = 0; // apart: scalar stores into `lanes` would stall its vector load
      for (int64_t i = whole; i < n; ++i)
        tail += row[i];
      double sum = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) +
                   ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7])) + tail;
      if (log) {
        float logSum = std::log(float(sum)); // logf: exact enough here, and faster
        for (int64_t i = 0; i < n; ++i)
          ys[r * n + i] = (xs[r * n + i] - max[r]) - logSum;
      } else {
        float scale = float(1.0 / sum);
        for (int64_t i = 0; i < n; ++i)
          ys[r * n + i] = row[i] * scale;
      }
    }
  }
}

/// `rows` float rows of n values each.
[[gnu::always_inline]] inline void softmaxRowsVector(const float *x, float *y, int64_t rows,
                                                     int64_t n, bool log) {
  if (n <= kShortRow)
    return softmaxShortRowsVector(x, y, rows, n, log);
  for (int64_t r = 0; r < rows; ++r)
    softmaxRowVector(x + r * n, y + r * n, n, log);
}

using FloatRowsFn = void (*)(const float *, float *, int64_t, int64_t, bool);

void softmaxRowsBaseline(const float *x, float *y, int64_t rows, int64_t n, bool log) {
  softmaxRowsVector(x, y, rows, n, log);
}
#ifdef DTC_X86_DISPATCH
DTC_TARGET_AVX2 void softmaxRowsAvx2(const float *x, float *y, int64_t rows, int64_t n,
                                     bool log) {
  softmaxRowsVector(x, y, rows, n, log);
}
DTC_TARGET_AVX512 void softmaxRowsAvx512(const float *x, float *y, int64_t rows, int64_t n,
                                         bool log) {
  softmaxRowsVector(x, y, rows, n, log);
}
#endif

FloatRowsFn softmaxRowsFloat() {
  return pickForCpu(softmaxRowsBaseline, DTC_X86_ONLY(softmaxRowsAvx2, softmaxRowsAvx512));
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
  FloatRowsFn floatRows = softmaxRowsFloat();
  return makeFunctionKernel([=](const void *const *inputs, void *const *outputs,
                                ThreadPool &pool) {
    const T *x = static_cast<const T *>(inputs[0]);
    T *y = static_cast<T *>(outputs[0]);
    if (inner == 1) {
      pool.parallelFor(outer, grainFor(n), [&](int64_t b, int64_t e) {
        if constexpr (std::is_same_v<T, float>)
          floatRows(x + b * n, y + b * n, e - b, n, log);
        else
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
  }, /*alongside=*/true); // rows apart, no state
}

//===----------------------------------------------------------------------===//
// layer_norm
//===----------------------------------------------------------------------===//

/// Normalises one row of n values: two passes (mean, then the centred
/// squares), so large means do not cancel the variance away.
[[gnu::always_inline]] inline void layerNormRowVector(const float *x, const float *scale,
                                                      const float *bias, float *y, int64_t n,
                                                      double epsilon) {
  // Summed relative to x[0], so that float lanes lose no digits to a large
  // mean (x - shift is exact for x within a factor 2 of shift).
  float shift = x[0];
  double mean = double(shift) + blockedSum(n, [&](int64_t i) { return x[i] - shift; }) / double(n);
  // The mean as a float plus a float correction: x - high is exact when x
  // is near the mean (where it matters), so a large mean costs no digits.
  float high = float(mean), low = float(mean - double(high));
  double squares = blockedSum(n, [&](int64_t i) {
    float d = (x[i] - high) - low;
    return d * d;
  });
  float inverse = float(1.0 / std::sqrt(squares / double(n) + epsilon));
  if (bias)
    for (int64_t i = 0; i < n; ++i)
      y[i] = ((x[i] - high) - low) * inverse * scale[i] + bias[i];
  else
    for (int64_t i = 0; i < n; ++i)
      y[i] = ((x[i] - high) - low) * inverse * scale[i];
}

constexpr int64_t kShortSumLanes = 8;

/// Folds eight float lanes (by halves) and a tail into a double.
[[gnu::always_inline]] inline double foldLanes(float *lanes, double tail) {
  for (int64_t width = kShortSumLanes / 2; width > 0; width /= 2)
    for (int64_t l = 0; l < width; ++l)
      lanes[l] += lanes[l + width];
  return double(lanes[0]) + tail;
}

/// Short rows (up to kShortRow), a tile of rows at a time: each pass (the
/// means, the centred squares, the outputs) runs over the tile's rows, whose
/// chains (a sum, its fold, a division, a square root) are independent, so
/// that the core overlaps them. Sums in eight float lanes (a short row's
/// few values per lane lose no digits that matter), the tail apart (a
/// scalar store into the lanes would stall their vector load), the lanes
/// folded by halves (folded as (0 + 4) + (1 + 5) ..., the compiler loaded
/// the rows two floats at a time to match). Row by row, the chains ran one
/// after another.
[[gnu::always_inline]] inline void layerNormShortRowsVector(const float *x, const float *scale,
                                                            const float *bias, float *y,
                                                            int64_t rows, int64_t n,
                                                            double epsilon) {
  constexpr int64_t kTile = 32;
  int64_t whole = n / kShortSumLanes * kShortSumLanes;
  double perValue = 1.0 / double(n);
  float high[kTile], low[kTile], inverse[kTile];
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    int64_t count = std::min(kTile, rows - r0);
    const float *xs = x + r0 * n;
    float *ys = y + r0 * n;
    for (int64_t r = 0; r < count; ++r) {
      const float *row = xs + r * n;
      float shift = row[0]; // as layerNormRowVector: a large mean costs no digits
      float lanes[kShortSumLanes] = {};
      for (int64_t i = 0; i < whole; i += kShortSumLanes)
        for (int64_t l = 0; l < kShortSumLanes; ++l)
          lanes[l] += row[i + l] - shift;
      double tail = 0;
      for (int64_t i = whole; i < n; ++i)
        tail += row[i] - shift;
      double mean = double(shift) + foldLanes(lanes, tail) * perValue;
      high[r] = float(mean);
      low[r] = float(mean - double(high[r]));
    }
    for (int64_t r = 0; r < count; ++r) {
      const float *row = xs + r * n;
      float h = high[r], lo = low[r];
      float lanes[kShortSumLanes] = {};
      for (int64_t i = 0; i < whole; i += kShortSumLanes)
        for (int64_t l = 0; l < kShortSumLanes; ++l) {
          float d = (row[i + l] - h) - lo;
          lanes[l] += d * d;
        }
      double tail = 0;
      for (int64_t i = whole; i < n; ++i) {
        float d = (row[i] - h) - lo;
        tail += d * d;
      }
      inverse[r] = float(1.0 / std::sqrt(foldLanes(lanes, tail) * perValue + epsilon));
    }
    for (int64_t r = 0; r < count; ++r) {
      const float *row = xs + r * n;
      float *out = ys + r * n, h = high[r], lo = low[r], v = inverse[r];
      if (bias)
        for (int64_t i = 0; i < n; ++i)
          out[i] = ((row[i] - h) - lo) * v * scale[i] + bias[i];
      else
        for (int64_t i = 0; i < n; ++i)
          out[i] = ((row[i] - h) - lo) * v * scale[i];
    }
  }
}

/// RMSNorm's row: x / sqrt(mean(x^2) + eps) * scale (no centring, so no
/// shift to guard).
[[gnu::always_inline]] inline void rmsNormRowVector(const float *x, const float *scale, float *y,
                                                    int64_t n, double epsilon) {
  double squares = blockedSum(n, [&](int64_t i) { return x[i] * x[i]; });
  float inverse = float(1.0 / std::sqrt(squares / double(n) + epsilon));
  for (int64_t i = 0; i < n; ++i)
    y[i] = x[i] * inverse * scale[i];
}

/// `rows` rows of n values each (RMSNorm's with `rms`).
[[gnu::always_inline]] inline void layerNormRowsVector(const float *x, const float *scale,
                                                       const float *bias, float *y, int64_t rows,
                                                       int64_t n, double epsilon, bool rms) {
  if (rms) {
    for (int64_t r = 0; r < rows; ++r)
      rmsNormRowVector(x + r * n, scale, y + r * n, n, epsilon);
    return;
  }
  if (n <= kShortRow)
    return layerNormShortRowsVector(x, scale, bias, y, rows, n, epsilon);
  for (int64_t r = 0; r < rows; ++r)
    layerNormRowVector(x + r * n, scale, bias, y + r * n, n, epsilon);
}

using LayerNormRowsFn = void (*)(const float *, const float *, const float *, float *, int64_t,
                                 int64_t, double, bool);

void layerNormRowsBaseline(const float *x, const float *scale, const float *bias, float *y,
                           int64_t rows, int64_t n, double epsilon, bool rms) {
  layerNormRowsVector(x, scale, bias, y, rows, n, epsilon, rms);
}
#ifdef DTC_X86_DISPATCH
DTC_TARGET_AVX2 void layerNormRowsAvx2(const float *x, const float *scale, const float *bias,
                                       float *y, int64_t rows, int64_t n, double epsilon,
                                       bool rms) {
  layerNormRowsVector(x, scale, bias, y, rows, n, epsilon, rms);
}
DTC_TARGET_AVX512 void layerNormRowsAvx512(const float *x, const float *scale,
                                           const float *bias, float *y, int64_t rows, int64_t n,
                                           double epsilon, bool rms) {
  layerNormRowsVector(x, scale, bias, y, rows, n, epsilon, rms);
}
#endif

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
  bool hasBias = types.inputs.size() == 3, rms = op.rms();
  if (rms && hasBias)
    return fail(error, "an rms layer_norm takes no bias");
  double epsilon = op.epsilon();
  LayerNormRowsFn layerNormRows = pickForCpu(
      layerNormRowsBaseline, DTC_X86_ONLY(layerNormRowsAvx2, layerNormRowsAvx512));
  return makeFunctionKernel([=](const void *const *inputs, void *const *outputs,
                                ThreadPool &pool) {
    const float *x = static_cast<const float *>(inputs[0]);
    const float *scale = static_cast<const float *>(inputs[1]);
    const float *bias = hasBias ? static_cast<const float *>(inputs[2]) : nullptr;
    float *y = static_cast<float *>(outputs[0]);
    if (n == 0)
      return;
    pool.parallelFor(rows, grainFor(n), [&](int64_t b, int64_t e) {
      layerNormRows(x + b * n, scale, bias, y + b * n, e - b, n, epsilon, rms);
    });
  }, /*alongside=*/true); // rows apart, no state
}

namespace {

/// The gradient of one row's layer norm, and the row's mean and rstd: the
/// statistics as the forward's (layerNormRowVector), then
/// dx = rstd * (h - mean(h) - xhat * mean(h * xhat)) with h = dy * scale,
/// the sums in double, plus `residual` (null: none). RMSNorm's (rms): the
/// mean and mean(h) are 0. dy * xhat is added to `scaleSums` and dy to
/// `biasSums` (each null: not summed), in f32.
void layerNormBackwardRow(const float *x, const float *scale, const float *dy,
                          const float *residual, float *dx, float &meanOut, float &rstdOut,
                          int64_t n, double epsilon, bool rms, float *scaleSums,
                          float *biasSums) {
  float high = 0, low = 0;
  if (!rms) {
    float shift = x[0];
    double mean =
        double(shift) + blockedSum(n, [&](int64_t i) { return x[i] - shift; }) / double(n);
    high = float(mean);
    low = float(mean - double(high));
  }
  auto centred = [&](int64_t i) { return (x[i] - high) - low; };
  double squares = blockedSum(n, [&](int64_t i) { return centred(i) * centred(i); });
  float inverse = float(1.0 / std::sqrt(squares / double(n) + epsilon));
  float meanH =
      rms ? 0.f
          : float(blockedSum(n, [&](int64_t i) { return dy[i] * scale[i]; }) / double(n));
  float meanHX = float(blockedSum(n, [&](int64_t i) {
                         return dy[i] * scale[i] * (centred(i) * inverse);
                       }) /
                       double(n));
  for (int64_t i = 0; i < n; ++i)
    dx[i] = inverse * ((dy[i] * scale[i] - meanH) - centred(i) * inverse * meanHX);
  if (residual)
    for (int64_t i = 0; i < n; ++i)
      dx[i] += residual[i];
  if (scaleSums)
    for (int64_t i = 0; i < n; ++i)
      scaleSums[i] += dy[i] * (centred(i) * inverse);
  if (biasSums)
    for (int64_t i = 0; i < n; ++i)
      biasSums[i] += dy[i];
  meanOut = high;
  rstdOut = inverse;
}

} // namespace

std::unique_ptr<Kernel> makeLayerNormBackwardKernel(const plan::Instruction &inst,
                                                    const KernelTypes &types,
                                                    std::string &error) {
  const plan::LayerNorm &op = inst.layer_norm_backward();
  const int sums = op.scale_gradient() + op.bias_gradient();
  if (op.bias_gradient() && (!op.scale_gradient() || op.rms()))
    return fail(error, "a bias's gradient is summed only beside its scale's, and RMSNorm has "
                       "no bias");
  for (const auto *list : {&types.inputs, &types.outputs})
    for (const plan::TensorType &type : *list)
      if (!checkDType(type.dtype(), {plan::F32}, error))
        return nullptr;
  Shape x = shapeOf(types.inputs[0]);
  if (op.axis() < 0 || op.axis() >= int64_t(x.size()))
    return fail(error, "axis " + std::to_string(op.axis()) + " out of range for shape " +
                           shapeString(x));
  size_t axis = size_t(op.axis());
  Shape normalised(x.begin() + axis, x.end()), rowShape = x;
  std::fill(rowShape.begin() + axis, rowShape.end(), 1);
  int64_t rows = product(x, 0, axis), n = product(normalised);
  if (shapeOf(types.inputs[2]) != x || shapeOf(types.outputs[0]) != x)
    return fail(error, "grad_output " + shapeString(types.inputs[2]) + " and grad_input " +
                           shapeString(types.outputs[0]) + " should be the input's shape " +
                           shapeString(x));
  bool residual = op.residual();
  if (types.inputs.size() != size_t(3 + residual) ||
      (residual && shapeOf(types.inputs[3]) != x))
    return fail(error, residual ? "the residual should be a 4th input of the input's shape " +
                                      shapeString(x)
                                : std::string("an input past grad_output is not a residual"));
  if (shapeOf(types.inputs[1]) != normalised)
    return fail(error, "scale " + shapeString(types.inputs[1]) +
                           " should have the normalised shape " + shapeString(normalised));
  for (size_t o = 1; o < 3; ++o)
    if (shapeOf(types.outputs[o]) != rowShape)
      return fail(error, std::string(o == 1 ? "mean " : "rstd ") + shapeString(types.outputs[o]) +
                             " should be " + shapeString(rowShape));
  // The weights' partial sums: [G, 1..., normalised], a row per group of
  // ceil(rows / G) rows.
  int64_t groups = 1;
  if (sums) {
    if (axis == 0)
      return fail(error, "partial sums need rows: the normalised dims start at 0");
    Shape want = shapeOf(types.outputs[3]);
    groups = want.empty() ? 0 : want[0];
    Shape expected = x;
    expected[0] = groups;
    std::fill(expected.begin() + 1, expected.begin() + std::ptrdiff_t(axis), 1);
    for (size_t o = 3; o < types.outputs.size(); ++o)
      if (groups < 1 || shapeOf(types.outputs[o]) != expected)
        return fail(error, "partial sums " + shapeString(types.outputs[o]) +
                               " should be [groups, 1..., normalised dims] of input " +
                               shapeString(x) + " normalised from dim " +
                               std::to_string(axis));
  }
  int64_t perGroup = sums ? (rows + groups - 1) / groups : 1;
  double epsilon = op.epsilon();
  bool rms = op.rms();
  return makeFunctionKernel([=](const void *const *inputs, void *const *outputs,
                                ThreadPool &pool) {
    const float *x = static_cast<const float *>(inputs[0]);
    const float *scale = static_cast<const float *>(inputs[1]);
    const float *dy = static_cast<const float *>(inputs[2]);
    const float *res = residual ? static_cast<const float *>(inputs[3]) : nullptr;
    float *dx = static_cast<float *>(outputs[0]);
    float *mean = static_cast<float *>(outputs[1]);
    float *rstd = static_cast<float *>(outputs[2]);
    float *scaleSums = sums > 0 ? static_cast<float *>(outputs[3]) : nullptr;
    float *biasSums = sums > 1 ? static_cast<float *>(outputs[4]) : nullptr;
    for (float *partial : {scaleSums, biasSums})
      if (partial)
        std::fill(partial, partial + groups * n, 0.f);
    if (n == 0)
      return;
    // A group's rows in order, its sums its own (as a GPU block's).
    int64_t units = sums ? groups : rows;
    pool.parallelFor(units, grainFor(4 * n * perGroup), [&](int64_t b, int64_t e) {
      for (int64_t u = b; u < e; ++u) {
        int64_t first = u * perGroup, last = std::min(rows, first + perGroup);
        float *scaleRow = scaleSums ? scaleSums + u * n : nullptr;
        float *biasRow = biasSums ? biasSums + u * n : nullptr;
        for (int64_t r = first; r < last; ++r)
          layerNormBackwardRow(x + r * n, scale, dy + r * n, res ? res + r * n : nullptr,
                               dx + r * n, mean[r], rstd[r], n, epsilon, rms, scaleRow,
                               biasRow);
      }
    });
  }, /*alongside=*/true); // rows apart, no state
}

//===----------------------------------------------------------------------===//
// cross_entropy
//===----------------------------------------------------------------------===//

namespace {

/// A row's log-sum-exp: its max (rowMaxVector) plus the log of the sum of
/// exp(x - max).
[[gnu::always_inline]] inline float logSumExpVector(const float *x, int64_t n) {
  float max = rowMaxVector(x, n);
  double sum = blockedSum(n, [&](int64_t i) { return fastExpFlushed(x[i] - max); });
  return max + float(std::log(sum));
}

/// A row's share of the logits' gradient, (exp(x - lse) - onehot(label)) *
/// factor: the expression the elementwise kernel evaluates for autodiff's
/// graph ops, compiled for the same instruction sets, so that the fused
/// loss gradient rounds as the unfused one did.
[[gnu::always_inline]] inline void lossGradientRowVector(const float *x, float lse,
                                                        int64_t label, float factor,
                                                        float *out, int64_t n) {
  for (int64_t k = 0; k < n; ++k)
    out[k] = (fastExp(x[k] - lse) - (k == label ? 1.f : 0.f)) * factor;
}

using LossGradientRowFn = void (*)(const float *, float, int64_t, float, float *, int64_t);
void lossGradientRowBaseline(const float *x, float lse, int64_t label, float factor, float *out,
                             int64_t n) {
  lossGradientRowVector(x, lse, label, factor, out, n);
}
#ifdef DTC_X86_DISPATCH
DTC_TARGET_AVX2 void lossGradientRowAvx2(const float *x, float lse, int64_t label, float factor,
                                         float *out, int64_t n) {
  lossGradientRowVector(x, lse, label, factor, out, n);
}
DTC_TARGET_AVX512 void lossGradientRowAvx512(const float *x, float lse, int64_t label,
                                             float factor, float *out, int64_t n) {
  lossGradientRowVector(x, lse, label, factor, out, n);
}
#endif

using LogSumExpFn = float (*)(const float *, int64_t);
float logSumExpBaseline(const float *x, int64_t n) { return logSumExpVector(x, n); }
#ifdef DTC_X86_DISPATCH
DTC_TARGET_AVX2 float logSumExpAvx2(const float *x, int64_t n) { return logSumExpVector(x, n); }
DTC_TARGET_AVX512 float logSumExpAvx512(const float *x, int64_t n) {
  return logSumExpVector(x, n);
}
#endif

} // namespace

std::unique_ptr<Kernel> makeCrossEntropyKernel(const plan::Instruction &inst,
                                               const KernelTypes &types, std::string &error) {
  if (!checkDType(types.inputs[0].dtype(), {plan::F32}, error) ||
      !checkDType(types.inputs[1].dtype(), {plan::I64, plan::I32}, error))
    return nullptr;
  Shape x = shapeOf(types.inputs[0]);
  if (x.empty())
    return fail(error, "logits must have a dim of classes, got a scalar");
  Shape rowShape(x.begin(), x.end() - 1);
  if (shapeOf(types.inputs[1]) != rowShape)
    return fail(error, "labels " + shapeString(types.inputs[1]) + " should be " +
                           shapeString(rowShape) + " (the logits' " + shapeString(x) +
                           " without the classes)");
  const bool gradient = inst.cross_entropy().gradient();
  for (size_t o = 0; o < 2; ++o)
    if (!checkDType(types.outputs[o].dtype(), {plan::F32}, error))
      return nullptr;
    else if (shapeOf(types.outputs[o]) != rowShape)
      return fail(error, "loss and lse should be " + shapeString(rowShape) + ", got " +
                             shapeString(types.outputs[o]));
  if (gradient) {
    if (!checkDType(types.inputs[2].dtype(), {plan::F32}, error) ||
        !checkDType(types.outputs[2].dtype(), {plan::F32}, error))
      return nullptr;
    if (shapeOf(types.inputs[2]) != rowShape || shapeOf(types.outputs[2]) != x)
      return fail(error, "the gradient's factors " + shapeString(types.inputs[2]) +
                             " should be " + shapeString(rowShape) + " and the gradient " +
                             shapeString(types.outputs[2]) + " the logits' " + shapeString(x));
  }
  int64_t n = x.back(), rows = product(rowShape);
  bool wide = types.inputs[1].dtype() == plan::I64;
  LogSumExpFn logSumExp =
      pickForCpu(logSumExpBaseline, DTC_X86_ONLY(logSumExpAvx2, logSumExpAvx512));
  LossGradientRowFn gradientRow = pickForCpu(
      lossGradientRowBaseline, DTC_X86_ONLY(lossGradientRowAvx2, lossGradientRowAvx512));
  return makeFunctionKernel([=](const void *const *inputs, void *const *outputs,
                                ThreadPool &pool) {
    const float *logits = static_cast<const float *>(inputs[0]);
    const float *factor = gradient ? static_cast<const float *>(inputs[2]) : nullptr;
    float *loss = static_cast<float *>(outputs[0]), *lse = static_cast<float *>(outputs[1]);
    float *grad = gradient ? static_cast<float *>(outputs[2]) : nullptr;
    if (n == 0)
      return;
    pool.parallelFor(rows, grainFor(gradient ? 3 * n : n), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const float *row = logits + r * n;
        int64_t label = wide ? static_cast<const int64_t *>(inputs[1])[r]
                             : static_cast<const int32_t *>(inputs[1])[r];
        lse[r] = logSumExp(row, n);
        loss[r] = label >= 0 && label < n ? lse[r] - row[label] : 0.0f;
        if (grad)
          gradientRow(row, lse[r], label, factor[r], grad + r * n, n);
      }
    });
  }, /*alongside=*/true); // rows apart, no state
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
  }, /*alongside=*/true); // rows apart, no state
}

} // namespace dtc::runtime::cpu
