//===- ConvGeometry.cpp - conv2d's geometry and im2col --------------------===//
#include "runtime/cpu/ConvGeometry.h"

#include <cstring>
#include <vector>

namespace dtc::runtime::cpu {

namespace {

/// Copies n floats in fixed 8- and 4-float blocks, which the compiler
/// inlines: im2col copies short runs (one output row each), for which
/// memcpy calls cost more than the copying.
inline void copyRun(float *d, const float *s, int64_t n) {
  if (n >= 8) {
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
      std::memcpy(d + k, s + k, 8 * sizeof(float));
    if (k < n)
      std::memcpy(d + n - 8, s + n - 8, 8 * sizeof(float));
  } else if (n >= 4) {
    std::memcpy(d, s, 4 * sizeof(float));
    std::memcpy(d + n - 4, s + n - 4, 4 * sizeof(float));
  } else {
    for (int64_t k = 0; k < n; ++k)
      d[k] = s[k];
  }
}

} // namespace

void padInput(const ConvGeometry &g, const float *x, float *padded, int64_t cBegin,
              int64_t cEnd) {
  for (int64_t c = cBegin; c < cEnd; ++c)
    for (int64_t h = 0; h < g.H; ++h)
      copyRun(padded + (c * g.paddedH() + g.padTop + h) * g.paddedW() + g.padLeft,
              x + (c * g.H + h) * g.W, g.W);
}

void im2col(const ConvGeometry &g, const float *in, int64_t inH, int64_t inW, float *col,
            int64_t rowBegin, int64_t rowEnd) {
  for (int64_t row = rowBegin; row < rowEnd; ++row) {
    int64_t c = row / (g.kH * g.kW), i = row / g.kW % g.kH, j = row % g.kW;
    const float *tap = in + (c * inH + i * g.dilationH) * inW + j * g.dilationW;
    float *dst = col + row * g.planeOut();
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      const float *src = tap + oh * g.strideH * inW;
      float *d = dst + oh * g.OW;
      if (g.strideW == 1)
        copyRun(d, src, g.OW);
      else
        for (int64_t ow = 0; ow < g.OW; ++ow)
          d[ow] = src[ow * g.strideW];
    }
  }
}

bool readConvGeometry(const plan::Conv2D &op, const Shape &x, const Shape &w, const Shape &y,
                      bool hasBias, bool channelsLast, const char *yName, ConvGeometry &g,
                      std::string &error) {
  if (x.size() != 4 || w.size() != 4) {
    error = std::string("input and weights must be rank 4 (") +
            (channelsLast ? "[N,H,W,C]" : "[N,C,H,W]") + ", [M,C/groups,kH,kW]), got " +
            shapeString(x) + " and " + shapeString(w);
    return false;
  }
  std::vector<int64_t> strides, pads, dilations;
  if (!readAttribute(op.strides(), "strides", 2, 1, strides, error) ||
      !readAttribute(op.pads(), "pads", 4, 0, pads, error) ||
      !readAttribute(op.dilations(), "dilations", 2, 1, dilations, error))
    return false;
  g.N = x[0], g.C = x[1], g.H = x[2], g.W = x[3];
  g.M = w[0], g.kH = w[2], g.kW = w[3];
  g.strideH = strides[0], g.strideW = strides[1];
  g.padTop = pads[0], g.padLeft = pads[1], g.padBottom = pads[2], g.padRight = pads[3];
  g.dilationH = dilations[0], g.dilationW = dilations[1];
  g.groups = op.groups();
  g.hasBias = hasBias;
  if (g.groups < 1 || g.C % g.groups || g.M % g.groups) {
    error = "groups " + std::to_string(g.groups) + " must divide the input's " +
            std::to_string(g.C) + " and the output's " + std::to_string(g.M) + " channels";
    return false;
  }
  if (w[1] != g.Cg()) {
    error = "weights " + shapeString(w) + " should have " + std::to_string(g.Cg()) +
            " input channels per group for input " + shapeString(x) + " and groups " +
            std::to_string(g.groups);
    return false;
  }
  int64_t spanH = g.dilationH * (g.kH - 1) + 1, spanW = g.dilationW * (g.kW - 1) + 1;
  int64_t paddedH = g.H + pads[0] + pads[2], paddedW = g.W + pads[1] + pads[3];
  if (spanH > paddedH || spanW > paddedW) {
    error = "the dilated kernel " + shapeString({spanH, spanW}) +
            " is larger than the padded input " + shapeString({paddedH, paddedW});
    return false;
  }
  g.OH = (paddedH - spanH) / g.strideH + 1;
  g.OW = (paddedW - spanW) / g.strideW + 1;
  if (y != Shape{g.N, g.M, g.OH, g.OW}) {
    error = std::string(yName) + " shape " + shapeString(y) + " should be " +
            shapeString({g.N, g.M, g.OH, g.OW}) + " for input " + shapeString(x) +
            " and weights " + shapeString(w) + (channelsLast ? " (shapes as NCHW)" : "");
    return false;
  }
  return true;
}

} // namespace dtc::runtime::cpu
