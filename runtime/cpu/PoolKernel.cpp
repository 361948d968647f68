//===- PoolKernel.cpp - max and average pooling over 2-D windows ----------===//
//
// Follows onnxruntime (and the ONNX reference): padding never wins a max;
// an average divides by the cells inside the input, or with
// count_include_pad by the cells inside input + pads. A window that ceil_mode
// lets run past the padded input counts only what is inside it.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/KernelSupport.h"
#include "runtime/cpu/ThreadPool.h"

#include <cmath>
#include <limits>

namespace dtc::runtime::cpu {
namespace {

struct PoolGeometry {
  int64_t H = 0, W = 0, OH = 0, OW = 0;
  int64_t kH = 1, kW = 1, strideH = 1, strideW = 1, dilationH = 1, dilationW = 1;
  int64_t padTop = 0, padLeft = 0, padBottom = 0, padRight = 0;
  bool countIncludePad = false;
};

/// The taps [lo, hi) of one window dim that fall inside the input, and how
/// many fall inside input + pads.
struct WindowTaps {
  int64_t lo, hi, padded;
};

WindowTaps windowTaps(int64_t start, int64_t taps, int64_t dilation, int64_t size,
                      int64_t padBefore, int64_t padAfter) {
  auto [lo, hi] = windowRange(start, dilation, size, taps);
  int64_t padded =
      windowRange(start + padBefore, dilation, size + padBefore + padAfter, taps).second;
  return {lo, hi, padded};
}

template <bool Max> float combine(float acc, float v) { return Max ? std::max(acc, v) : acc + v; }

/// One output pixel of any window: taps are clipped to the input, and an
/// average divides by the count the attributes ask for.
template <bool Max>
float poolPixel(const PoolGeometry &g, const float *in, int64_t oh, int64_t ow) {
  int64_t top = oh * g.strideH - g.padTop, left = ow * g.strideW - g.padLeft;
  WindowTaps rows = windowTaps(top, g.kH, g.dilationH, g.H, g.padTop, g.padBottom);
  WindowTaps cols = windowTaps(left, g.kW, g.dilationW, g.W, g.padLeft, g.padRight);
  float acc = Max ? std::numeric_limits<float>::lowest() : 0.0f;
  for (int64_t i = rows.lo; i < rows.hi; ++i) {
    int64_t rowStart = (top + i * g.dilationH) * g.W + left;
    for (int64_t j = cols.lo; j < cols.hi; ++j)
      acc = combine<Max>(acc, in[rowStart + j * g.dilationW]);
  }
  if (Max)
    return acc;
  int64_t count = g.countIncludePad ? rows.padded * cols.padded
                                    : (rows.hi - rows.lo) * (cols.hi - cols.lo);
  return count > 0 ? acc / float(count) : 0.0f;
}

/// Outputs [owLo, owHi) of row oh, whose windows lie wholly inside the
/// input: no clipping, and an average always divides by kH * kW. The 2x2
/// stride-2 window (most CNNs' pooling) gets its own loop, which the
/// compiler vectorises; taps combine in poolPixel's order either way.
template <bool Max>
void poolInteriorRow(const PoolGeometry &g, const float *in, int64_t oh, int64_t owLo,
                     int64_t owHi, float *out) {
  const float *rows = in + (oh * g.strideH - g.padTop) * g.W - g.padLeft;
  float divisor = float(g.kH * g.kW);
  if (g.kH == 2 && g.kW == 2 && g.strideW == 2 && g.dilationH == 1 && g.dilationW == 1) {
    const float *r0 = rows, *r1 = rows + g.W;
    for (int64_t ow = owLo; ow < owHi; ++ow) {
      float acc = combine<Max>(combine<Max>(combine<Max>(r0[2 * ow], r0[2 * ow + 1]),
                                            r1[2 * ow]),
                               r1[2 * ow + 1]);
      out[ow] = Max ? acc : acc / divisor;
    }
    return;
  }
  for (int64_t ow = owLo; ow < owHi; ++ow) {
    const float *window = rows + ow * g.strideW;
    float acc = Max ? std::numeric_limits<float>::lowest() : 0.0f;
    for (int64_t i = 0; i < g.kH; ++i)
      for (int64_t j = 0; j < g.kW; ++j)
        acc = combine<Max>(acc, window[i * g.dilationH * g.W + j * g.dilationW]);
    out[ow] = Max ? acc : acc / divisor;
  }
}

/// The outputs along one dim whose window [o*stride - pad, + span) lies
/// inside [0, size).
std::pair<int64_t, int64_t> interiorRange(int64_t pad, int64_t stride, int64_t span,
                                          int64_t size, int64_t count) {
  if (span > size)
    return {0, 0};
  return windowRange(-pad, stride, size - span + 1, count);
}

template <bool Max> void poolPlane(const PoolGeometry &g, const float *in, float *out) {
  auto [ohLo, ohHi] = interiorRange(g.padTop, g.strideH, g.dilationH * (g.kH - 1) + 1, g.H, g.OH);
  auto [owLo, owHi] = interiorRange(g.padLeft, g.strideW, g.dilationW * (g.kW - 1) + 1, g.W, g.OW);
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    float *row = out + oh * g.OW;
    bool interior = oh >= ohLo && oh < ohHi;
    int64_t lo = interior ? owLo : g.OW, hi = interior ? owHi : g.OW;
    for (int64_t ow = 0; ow < lo; ++ow)
      row[ow] = poolPixel<Max>(g, in, oh, ow);
    if (interior)
      poolInteriorRow<Max>(g, in, oh, lo, hi, row);
    for (int64_t ow = hi; ow < g.OW; ++ow)
      row[ow] = poolPixel<Max>(g, in, oh, ow);
  }
}

/// acc[c] = combine(acc[c], tap[c]) over C channels (restrict: so that it
/// vectorises).
template <bool Max>
inline void combineChannels(float *__restrict acc, const float *__restrict tap, int64_t C) {
  for (int64_t c = 0; c < C; ++c)
    acc[c] = combine<Max>(acc[c], tap[c]);
}

/// out[c] = combine(a[c], b[c], c[c], d[c]) in poolPixel's tap order: a
/// 2x2 window.
template <bool Max>
inline void combine2x2(float *__restrict out, const float *__restrict a,
                       const float *__restrict b, const float *__restrict c,
                       const float *__restrict d, int64_t C, float divisor) {
  for (int64_t k = 0; k < C; ++k) {
    float acc = combine<Max>(combine<Max>(combine<Max>(a[k], b[k]), c[k]), d[k]);
    out[k] = Max ? acc : acc / divisor;
  }
}

/// One output pixel of a channels-last image `in` [H, W, C]: the same
/// taps, in the same order, as poolPixel, each a vector of C channels.
template <bool Max>
void poolPixelNhwc(const PoolGeometry &g, int64_t C, const float *in, int64_t oh, int64_t ow,
                   float *out) {
  int64_t top = oh * g.strideH - g.padTop, left = ow * g.strideW - g.padLeft;
  WindowTaps rows = windowTaps(top, g.kH, g.dilationH, g.H, g.padTop, g.padBottom);
  WindowTaps cols = windowTaps(left, g.kW, g.dilationW, g.W, g.padLeft, g.padRight);
  std::fill(out, out + C, Max ? std::numeric_limits<float>::lowest() : 0.0f);
  for (int64_t i = rows.lo; i < rows.hi; ++i)
    for (int64_t j = cols.lo; j < cols.hi; ++j) {
      combineChannels<Max>(
          out, in + ((top + i * g.dilationH) * g.W + left + j * g.dilationW) * C, C);
    }
  if (Max)
    return;
  int64_t count = g.countIncludePad ? rows.padded * cols.padded
                                    : (rows.hi - rows.lo) * (cols.hi - cols.lo);
  for (int64_t c = 0; c < C; ++c)
    out[c] = count > 0 ? out[c] / float(count) : 0.0f;
}

/// Output row oh of a channels-last image: interior windows without
/// clipping (the taps in poolPixel's order, C channels at a time), the
/// rest through poolPixelNhwc.
template <bool Max>
void poolRowNhwc(const PoolGeometry &g, int64_t C, const float *in, int64_t oh, float *out) {
  auto [ohLo, ohHi] = interiorRange(g.padTop, g.strideH, g.dilationH * (g.kH - 1) + 1, g.H, g.OH);
  auto [owLo, owHi] = interiorRange(g.padLeft, g.strideW, g.dilationW * (g.kW - 1) + 1, g.W, g.OW);
  bool interior = oh >= ohLo && oh < ohHi;
  int64_t lo = interior ? owLo : g.OW, hi = interior ? owHi : g.OW;
  for (int64_t ow = 0; ow < lo; ++ow)
    poolPixelNhwc<Max>(g, C, in, oh, ow, out + ow * C);
  float divisor = float(g.kH * g.kW);
  const float *rows = in + (oh * g.strideH - g.padTop) * g.W * C;
  bool twoByTwo = g.kH == 2 && g.kW == 2 && g.dilationH == 1 && g.dilationW == 1;
  for (int64_t ow = lo; ow < hi; ++ow) {
    const float *window = rows + (ow * g.strideW - g.padLeft) * C;
    float *pixel = out + ow * C;
    if (twoByTwo) {
      combine2x2<Max>(pixel, window, window + C, window + g.W * C, window + (g.W + 1) * C, C,
                      divisor);
      continue;
    }
    for (int64_t c = 0; c < C; ++c)
      pixel[c] = window[c];
    for (int64_t i = 0; i < g.kH; ++i)
      for (int64_t j = i == 0 ? 1 : 0; j < g.kW; ++j)
        combineChannels<Max>(pixel, window + (i * g.dilationH * g.W + j * g.dilationW) * C, C);
    if (!Max)
      for (int64_t c = 0; c < C; ++c)
        pixel[c] /= divisor;
  }
  for (int64_t ow = hi; ow < g.OW; ++ow)
    poolPixelNhwc<Max>(g, C, in, oh, ow, out + ow * C);
}

/// Reads a pooling's geometry from its attributes and the NCHW shapes of
/// its input x and output y (`yName` in messages), and checks they agree.
bool readGeometry(const plan::Pool2D &op, const Shape &x, const Shape &y, bool channelsLast,
                  const char *yName, PoolGeometry &g, std::string &error) {
  if (x.size() != 4) {
    error = std::string("input must be rank 4 ") + (channelsLast ? "[N,H,W,C]" : "[N,C,H,W]") +
            ", got " + shapeString(x);
    return false;
  }
  std::vector<int64_t> kernel, strides, pads, dilations;
  if (!readAttribute(op.kernel(), "kernel", 2, 1, kernel, error) ||
      !readAttribute(op.strides(), "strides", 2, 1, strides, error) ||
      !readAttribute(op.pads(), "pads", 4, 0, pads, error) ||
      !readAttribute(op.dilations(), "dilations", 2, 1, dilations, error))
    return false;
  g.H = x[2], g.W = x[3];
  g.kH = kernel[0], g.kW = kernel[1];
  g.strideH = strides[0], g.strideW = strides[1];
  g.dilationH = dilations[0], g.dilationW = dilations[1];
  g.padTop = pads[0], g.padLeft = pads[1], g.padBottom = pads[2], g.padRight = pads[3];
  g.countIncludePad = op.count_include_pad();

  // The output may have been sized with floor or ceil (ceil_mode).
  Shape lowest{x[0], x[1]}, highest{x[0], x[1]};
  int64_t sizes[] = {g.H, g.W};
  for (int d = 0; d < 2; ++d) {
    int64_t span = dilations[d] * (kernel[d] - 1) + 1;
    int64_t room = sizes[d] + pads[d] + pads[d + 2] - span;
    if (room < 0) {
      error = "the window " + shapeString(kernel) + " (dilations " + shapeString(dilations) +
              ") is larger than the padded input " + shapeString(x);
      return false;
    }
    lowest.push_back(room / strides[d] + 1);
    highest.push_back((room + strides[d] - 1) / strides[d] + 1);
  }
  if (y.size() != 4 || y[0] != x[0] || y[1] != x[1] || y[2] < lowest[2] ||
      y[2] > highest[2] || y[3] < lowest[3] || y[3] > highest[3]) {
    error = std::string(yName) + " shape " + shapeString(y) + " should be " +
            shapeString(lowest) +
            (lowest == highest ? "" : " or, with ceil_mode, " + shapeString(highest)) +
            " for input " + shapeString(x) + (channelsLast ? " (shapes as NCHW)" : "");
    return false;
  }
  g.OH = y[2], g.OW = y[3];
  return true;
}

/// Each output row's and column's window taps, computed once per kernel
/// (per window they cost more than the gradient itself).
struct PlaneTaps {
  std::vector<WindowTaps> rows, cols;
  explicit PlaneTaps(const PoolGeometry &g) {
    for (int64_t oh = 0; oh < g.OH; ++oh)
      rows.push_back(windowTaps(oh * g.strideH - g.padTop, g.kH, g.dilationH, g.H, g.padTop,
                                g.padBottom));
    for (int64_t ow = 0; ow < g.OW; ++ow)
      cols.push_back(windowTaps(ow * g.strideW - g.padLeft, g.kW, g.dilationW, g.W, g.padLeft,
                                g.padRight));
  }
};

/// The common 2x2 stride-2 pool, windows side by side with none clipped:
/// its gradients have loops of their own.
bool sideBySide2x2(const PoolGeometry &g) {
  return g.kH == 2 && g.kW == 2 && g.strideH == 2 && g.strideW == 2 && g.dilationH == 1 &&
         g.dilationW == 1 && g.padTop == 0 && g.padLeft == 0 && 2 * g.OH <= g.H &&
         2 * g.OW <= g.W;
}

/// One output row of the common 2x2 stride-2 max pool's gradient, windows
/// side by side (no overlap, no clipping): each window's gradient goes to
/// the first of its maxima in row-major order, zero to the other three
/// taps. NaN never wins (fmax skips it; it equals nothing). Selects, not
/// branches, and unaliased pointers: the loop vectorises, where the branchy
/// scalar one mispredicts on random data.
void maxPool2x2BackwardRow(const float *__restrict top, const float *__restrict bottom,
                           const float *__restrict dy, float *__restrict dTop,
                           float *__restrict dBottom, int64_t OW) {
  for (int64_t ow = 0; ow < OW; ++ow) {
    int64_t j = 2 * ow;
    float a = top[j], b = top[j + 1], c = bottom[j], d = bottom[j + 1];
    float best = std::fmax(std::fmax(a, b), std::fmax(c, d));
    bool isA = a == best, isB = !isA & (b == best), isC = !(isA | isB) & (c == best),
         isD = !(isA | isB | isC) & (d == best);
    float grad = dy[ow];
    dTop[j] = isA ? grad : 0.0f;
    dTop[j + 1] = isB ? grad : 0.0f;
    dBottom[j] = isC ? grad : 0.0f;
    dBottom[j + 1] = isD ? grad : 0.0f;
  }
}

/// The gradient of one plane of a max pool: each window's gradient goes to
/// the first of its maxima (the tap the forward kept), added where windows
/// overlap. `dx` starts zero.
void maxPoolBackwardPlane(const PoolGeometry &g, const PlaneTaps &taps, const float *x,
                          const float *dy, float *dx) {
  if (sideBySide2x2(g)) {
    // The common 2x2 pool, windows side by side: four taps, no clipping.
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      const float *top = x + 2 * oh * g.W;
      float *dTop = dx + 2 * oh * g.W;
      maxPool2x2BackwardRow(top, top + g.W, dy + oh * g.OW, dTop, dTop + g.W, g.OW);
    }
    return;
  }
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    const WindowTaps &rows = taps.rows[oh];
    int64_t top = oh * g.strideH - g.padTop;
    for (int64_t ow = 0; ow < g.OW; ++ow) {
      const WindowTaps &cols = taps.cols[ow];
      int64_t left = ow * g.strideW - g.padLeft;
      int64_t best = -1;
      float bestValue = 0.0f;
      for (int64_t i = rows.lo; i < rows.hi; ++i)
        for (int64_t j = cols.lo; j < cols.hi; ++j) {
          int64_t at = (top + i * g.dilationH) * g.W + left + j * g.dilationW;
          float v = x[at];
          // NaN never wins, as in the forward. Without branches: the
          // winner is data, and mispredicting it cost more than the window.
          bool take = (v == v) & ((best < 0) | (v > bestValue));
          best = take ? at : best;
          bestValue = take ? v : bestValue;
        }
      if (best >= 0)
        dx[best] += dy[oh * g.OW + ow];
    }
  }
}

/// One output row of the common 2x2 stride-2 average pool's gradient,
/// windows side by side: a quarter of each window's gradient to each tap.
void avgPool2x2BackwardRow(const float *__restrict dy, float *__restrict dTop,
                           float *__restrict dBottom, int64_t OW) {
  for (int64_t ow = 0; ow < OW; ++ow) {
    float share = dy[ow] / 4.0f;
    dTop[2 * ow] = dTop[2 * ow + 1] = dBottom[2 * ow] = dBottom[2 * ow + 1] = share;
  }
}

/// The gradient of one plane of an average pool: each window's gradient,
/// divided by the forward's count, goes to every tap inside the input.
void avgPoolBackwardPlane(const PoolGeometry &g, const PlaneTaps &taps, const float *dy,
                          float *dx) {
  if (sideBySide2x2(g)) {
    // The common 2x2 pool, windows side by side: a quarter to each tap.
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      float *dTop = dx + 2 * oh * g.W;
      avgPool2x2BackwardRow(dy + oh * g.OW, dTop, dTop + g.W, g.OW);
    }
    return;
  }
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    const WindowTaps &rows = taps.rows[oh];
    int64_t top = oh * g.strideH - g.padTop;
    for (int64_t ow = 0; ow < g.OW; ++ow) {
      const WindowTaps &cols = taps.cols[ow];
      int64_t left = ow * g.strideW - g.padLeft;
      int64_t count = g.countIncludePad ? rows.padded * cols.padded
                                        : (rows.hi - rows.lo) * (cols.hi - cols.lo);
      if (count <= 0)
        continue;
      float share = dy[oh * g.OW + ow] / float(count);
      for (int64_t i = rows.lo; i < rows.hi; ++i) {
        float *row = dx + (top + i * g.dilationH) * g.W + left;
        for (int64_t j = cols.lo; j < cols.hi; ++j)
          row[j * g.dilationW] += share;
      }
    }
  }
}

} // namespace

std::unique_ptr<Kernel> makePool2DKernel(const plan::Instruction &inst,
                                         const KernelTypes &types, std::string &error) {
  const plan::Pool2D &op = inst.pool2d();
  if (!checkDType(types.output.dtype(), {plan::F32}, error) ||
      !checkSameDType(types, error))
    return nullptr;
  Shape x = shapeOf(types.inputs[0]), y = shapeOf(types.output);
  bool channelsLast = op.channels_last();
  // Checked as NCHW from here on.
  if (channelsLast && x.size() == 4) {
    x = fromChannelsLast(x);
    y = y.size() == 4 ? fromChannelsLast(y) : y;
  }
  PoolGeometry g;
  if (!readGeometry(op, x, y, channelsLast, "output", g, error))
    return nullptr;

  bool max = op.max();
  if (channelsLast)
    return makeFunctionKernel([g, max, N = x[0], C = x[1]](const void *const *inputs,
                                                           void *const *outputs,
                                                           ThreadPool &pool) {
      const float *in = static_cast<const float *>(inputs[0]);
      float *out = static_cast<float *>(outputs[0]);
      pool.parallelFor(N * g.OH, grainFor(g.OW * C * g.kH * g.kW), [&](int64_t b, int64_t e) {
        for (int64_t row = b; row < e; ++row) {
          const float *image = in + row / g.OH * g.H * g.W * C;
          float *pixels = out + row * g.OW * C;
          max ? poolRowNhwc<true>(g, C, image, row % g.OH, pixels)
              : poolRowNhwc<false>(g, C, image, row % g.OH, pixels);
        }
      });
    });
  return makeFunctionKernel([g, max, planes = x[0] * x[1]](const void *const *inputs,
                                                          void *const *outputs,
                                                          ThreadPool &pool) {
    const float *in = static_cast<const float *>(inputs[0]);
    float *out = static_cast<float *>(outputs[0]);
    pool.parallelFor(planes, grainFor(g.OH * g.OW * g.kH * g.kW), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const float *src = in + p * g.H * g.W;
        float *dst = out + p * g.OH * g.OW;
        max ? poolPlane<true>(g, src, dst) : poolPlane<false>(g, src, dst);
      }
    });
  });
}

std::unique_ptr<Kernel> makePool2DBackwardKernel(const plan::Instruction &inst,
                                                 const KernelTypes &types,
                                                 std::string &error) {
  const plan::Pool2D &op = inst.pool2d_backward();
  if (!checkDType(types.output.dtype(), {plan::F32}, error) || !checkSameDType(types, error))
    return nullptr;
  if (op.channels_last())
    return fail(error, "channels_last is not supported in pooling gradients");
  bool max = op.max();
  if (int(types.inputs.size()) != (max ? 2 : 1))
    return fail(error, max ? "the max pool gradient takes the input and grad_output"
                           : "the average pool gradient takes grad_output alone");
  Shape x = shapeOf(types.output), y = shapeOf(types.inputs.back());
  PoolGeometry g;
  if (!readGeometry(op, x, y, false, "grad_output", g, error))
    return nullptr;
  if (max && shapeOf(types.inputs[0]) != x)
    return fail(error, "input " + shapeString(types.inputs[0]) + " and its gradient " +
                           shapeString(x) + " differ");
  return makeFunctionKernel([g, max, taps = PlaneTaps(g), planes = x[0] * x[1]](
                                const void *const *inputs, void *const *outputs,
                                ThreadPool &pool) {
    const float *dy = static_cast<const float *>(inputs[max ? 1 : 0]);
    const float *in = static_cast<const float *>(inputs[0]);
    float *dx = static_cast<float *>(outputs[0]);
    int64_t plane = g.H * g.W, outPlane = g.OH * g.OW;
    pool.parallelFor(planes, grainFor(outPlane * g.kH * g.kW), [&](int64_t b, int64_t e) {
      std::fill(dx + b * plane, dx + e * plane, 0.0f);
      for (int64_t p = b; p < e; ++p)
        max ? maxPoolBackwardPlane(g, taps, in + p * plane, dy + p * outPlane, dx + p * plane)
            : avgPoolBackwardPlane(g, taps, dy + p * outPlane, dx + p * plane);
    });
  });
}

} // namespace dtc::runtime::cpu
