//===- ConvKernel.cpp - conv2d: im2col and OpenBLAS sgemm, or direct -----===//
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/KernelSupport.h"
#include "runtime/cpu/ThreadPool.h"

#include <cstring>

namespace dtc::runtime::cpu {

namespace {

/// Conv2D's geometry, checked.
struct ConvGeometry {
  int64_t N = 0, C = 0, H = 0, W = 0; // input
  int64_t M = 0, kH = 0, kW = 0;       // weights [M, C/groups, kH, kW]
  int64_t OH = 0, OW = 0;              // output spatial size
  int64_t strideH = 1, strideW = 1, padTop = 0, padLeft = 0, dilationH = 1, dilationW = 1;
  int64_t groups = 1;
  bool hasBias = false;

  int64_t Cg() const { return C / groups; }
  int64_t Mg() const { return M / groups; }
  int64_t planeIn() const { return H * W; }
  int64_t planeOut() const { return OH * OW; }
  /// Rows of the im2col matrix (its columns are the output pixels).
  int64_t patchSize() const { return Cg() * kH * kW; }
  /// A 1x1 kernel at stride 1 without padding reads the input as is.
  bool readsInputAsIs() const {
    return kH == 1 && kW == 1 && strideH == 1 && strideW == 1 && padTop == 0 &&
           padLeft == 0 && OH == H && OW == W;
  }
};

/// Fills im2col rows [rowBegin, rowEnd) for one image's group: row
/// (c, i, j) holds, per output pixel, the input at kernel tap (i, j) of
/// channel c, or 0 in padding.
void im2col(const ConvGeometry &g, const float *x, float *col, int64_t rowBegin,
            int64_t rowEnd) {
  for (int64_t row = rowBegin; row < rowEnd; ++row) {
    int64_t c = row / (g.kH * g.kW), i = row / g.kW % g.kH, j = row % g.kW;
    const float *plane = x + c * g.planeIn();
    float *dst = col + row * g.planeOut();
    int64_t colStart = j * g.dilationW - g.padLeft;
    auto [owLo, owHi] = windowRange(colStart, g.strideW, g.W, g.OW);
    auto [ohLo, ohHi] = windowRange(i * g.dilationH - g.padTop, g.strideH, g.H, g.OH);
    std::fill(dst, dst + ohLo * g.OW, 0.0f);
    for (int64_t oh = ohLo; oh < ohHi; ++oh) {
      const float *src = plane + (oh * g.strideH + i * g.dilationH - g.padTop) * g.W;
      float *d = dst + oh * g.OW;
      std::fill(d, d + owLo, 0.0f);
      for (int64_t ow = owLo; ow < owHi; ++ow)
        d[ow] = src[colStart + ow * g.strideW];
      std::fill(d + owHi, d + g.OW, 0.0f);
    }
    std::fill(dst + ohHi * g.OW, dst + g.planeOut(), 0.0f);
  }
}

/// Each output plane starts as its channel's bias (sgemm then adds).
void fillBias(const ConvGeometry &g, const float *bias, float *out, int64_t channelBegin,
              int64_t channelEnd) {
  for (int64_t m = channelBegin; m < channelEnd; ++m)
    std::fill(out + m * g.planeOut(), out + (m + 1) * g.planeOut(),
              bias ? bias[m] : 0.0f);
}

/// The general convolution: per image and group, im2col (split over the
/// pool) then one sgemm W_g[Mg, patch] x col[patch, OH*OW] (threaded by
/// OpenBLAS).
class GemmConvKernel final : public Kernel {
public:
  explicit GemmConvKernel(const ConvGeometry &g) : g_(g) {
    gemm_.M = g.Mg();
    gemm_.N = g.planeOut();
    gemm_.K = g.patchSize();
    gemm_.lda = gemm_.K;
    gemm_.ldb = gemm_.N;
  }

  bool run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
           std::string &) override {
    const float *x = static_cast<const float *>(inputs[0]);
    const float *w = static_cast<const float *>(inputs[1]);
    const float *bias = g_.hasBias ? static_cast<const float *>(inputs[2]) : nullptr;
    float *y = static_cast<float *>(outputs[0]);
    std::vector<float> col;
    if (!g_.readsInputAsIs())
      col.resize(size_t(g_.patchSize() * g_.planeOut()));
    for (int64_t n = 0; n < g_.N; ++n) {
      for (int64_t group = 0; group < g_.groups; ++group) {
        const float *xg = x + (n * g_.C + group * g_.Cg()) * g_.planeIn();
        float *yg = y + (n * g_.M + group * g_.Mg()) * g_.planeOut();
        const float *patches = xg;
        if (!col.empty()) {
          pool.parallelFor(g_.patchSize(), grainFor(g_.planeOut()),
                           [&](int64_t b, int64_t e) { im2col(g_, xg, col.data(), b, e); });
          patches = col.data();
        }
        if (bias)
          fillBias(g_, bias + group * g_.Mg(), yg, 0, g_.Mg());
        gemm_.run(w + group * g_.Mg() * g_.patchSize(), patches, yg, bias ? 1.0f : 0.0f);
      }
    }
    return true;
  }

private:
  ConvGeometry g_;
  Gemm gemm_;
};

/// One input channel per group (depthwise): each output plane is a small
/// stencil over one input plane, far cheaper directly than as N*groups tiny
/// GEMMs. Planes are split over the pool.
class DepthwiseConvKernel final : public Kernel {
public:
  explicit DepthwiseConvKernel(const ConvGeometry &g) : g_(g) {}

  bool run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
           std::string &) override {
    const float *x = static_cast<const float *>(inputs[0]);
    const float *w = static_cast<const float *>(inputs[1]);
    const float *bias = g_.hasBias ? static_cast<const float *>(inputs[2]) : nullptr;
    float *y = static_cast<float *>(outputs[0]);
    int64_t planes = g_.N * g_.M;
    pool.parallelFor(planes, grainFor(g_.planeOut() * g_.kH * g_.kW),
                     [&](int64_t begin, int64_t end) {
                       for (int64_t p = begin; p < end; ++p)
                         plane(x, w, bias, y, p / g_.M, p % g_.M);
                     });
    return true;
  }

private:
  void plane(const float *x, const float *w, const float *bias, float *y, int64_t n,
             int64_t m) const {
    const float *in = x + (n * g_.C + m / g_.Mg()) * g_.planeIn();
    const float *taps = w + m * g_.kH * g_.kW;
    float *out = y + (n * g_.M + m) * g_.planeOut();
    std::fill(out, out + g_.planeOut(), bias ? bias[m] : 0.0f);
    for (int64_t i = 0; i < g_.kH; ++i) {
      auto [ohLo, ohHi] = windowRange(i * g_.dilationH - g_.padTop, g_.strideH, g_.H, g_.OH);
      for (int64_t j = 0; j < g_.kW; ++j) {
        float tap = taps[i * g_.kW + j];
        int64_t colStart = j * g_.dilationW - g_.padLeft;
        auto [owLo, owHi] = windowRange(colStart, g_.strideW, g_.W, g_.OW);
        for (int64_t oh = ohLo; oh < ohHi; ++oh) {
          const float *src = in + (oh * g_.strideH + i * g_.dilationH - g_.padTop) * g_.W;
          float *dst = out + oh * g_.OW;
          for (int64_t ow = owLo; ow < owHi; ++ow)
            dst[ow] += tap * src[colStart + ow * g_.strideW];
        }
      }
    }
  }

  ConvGeometry g_;
};

} // namespace

std::unique_ptr<Kernel> makeConv2DKernel(const plan::Instruction &inst,
                                         const KernelTypes &types, std::string &error) {
  const plan::Conv2D &op = inst.conv2d();
  if (!checkDType(types.output.dtype(), {plan::F32}, error) ||
      !checkSameDType(types, error))
    return nullptr;
  Shape x = shapeOf(types.inputs[0]), w = shapeOf(types.inputs[1]),
        y = shapeOf(types.output);
  if (x.size() != 4 || w.size() != 4)
    return fail(error, "input and weights must be rank 4 ([N,C,H,W], [M,C/groups,kH,kW]), got " +
                           shapeString(x) + " and " + shapeString(w));
  std::vector<int64_t> strides, pads, dilations;
  if (!readAttribute(op.strides(), "strides", 2, 1, strides, error) ||
      !readAttribute(op.pads(), "pads", 4, 0, pads, error) ||
      !readAttribute(op.dilations(), "dilations", 2, 1, dilations, error))
    return nullptr;
  ConvGeometry g;
  g.N = x[0], g.C = x[1], g.H = x[2], g.W = x[3];
  g.M = w[0], g.kH = w[2], g.kW = w[3];
  g.strideH = strides[0], g.strideW = strides[1];
  g.padTop = pads[0], g.padLeft = pads[1];
  g.dilationH = dilations[0], g.dilationW = dilations[1];
  g.groups = op.groups();
  g.hasBias = types.inputs.size() == 3;
  if (g.groups < 1 || g.C % g.groups || g.M % g.groups)
    return fail(error, "groups " + std::to_string(g.groups) + " must divide the input's " +
                           std::to_string(g.C) + " and the output's " + std::to_string(g.M) +
                           " channels");
  if (w[1] != g.Cg())
    return fail(error, "weights " + shapeString(w) + " should have " + std::to_string(g.Cg()) +
                           " input channels per group for input " + shapeString(x) +
                           " and groups " + std::to_string(g.groups));
  if (g.hasBias && shapeOf(types.inputs[2]) != Shape{g.M})
    return fail(error, "bias " + shapeString(types.inputs[2]) + " should be [" +
                           std::to_string(g.M) + "]");
  int64_t spanH = g.dilationH * (g.kH - 1) + 1, spanW = g.dilationW * (g.kW - 1) + 1;
  int64_t paddedH = g.H + pads[0] + pads[2], paddedW = g.W + pads[1] + pads[3];
  if (spanH > paddedH || spanW > paddedW)
    return fail(error, "the dilated kernel " + shapeString({spanH, spanW}) +
                           " is larger than the padded input " +
                           shapeString({paddedH, paddedW}));
  g.OH = (paddedH - spanH) / g.strideH + 1;
  g.OW = (paddedW - spanW) / g.strideW + 1;
  if (y != Shape{g.N, g.M, g.OH, g.OW})
    return fail(error, "output shape " + shapeString(y) + " should be " +
                           shapeString({g.N, g.M, g.OH, g.OW}) + " for input " +
                           shapeString(x) + " and weights " + shapeString(w));
  if (!fitsBlas({g.Mg(), g.planeOut(), g.patchSize()}))
    return fail(error, "a GEMM dim exceeds OpenBLAS's 32-bit sizes for input " + shapeString(x));
  if (g.Cg() == 1 && g.groups > 1)
    return std::make_unique<DepthwiseConvKernel>(g);
  return std::make_unique<GemmConvKernel>(g);
}

} // namespace dtc::runtime::cpu
