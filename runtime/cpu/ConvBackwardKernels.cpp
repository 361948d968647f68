//===- ConvBackwardKernels.cpp - conv2d's input and weight gradients ------===//
//
// The transposed GEMMs of im2col, per image and group:
//   dcol[patch, OH*OW] = W_g^T dY_g, then col2im adds dcol into dX_g;
//   dW_g[Mg, patch]   += dY_g col_g^T over the images.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ConvGeometry.h"
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/KernelSupport.h"
#include "runtime/cpu/ThreadPool.h"

#include <cstring>
#include <memory>
#include <vector>

namespace dtc::runtime::cpu {

namespace {

/// Adds im2col rows [c*kH*kW, (c+1)*kH*kW) of channels [cBegin, cEnd)
/// back into `in` [Cg, inH, inW] (padded), the inverse walk of im2col.
void col2im(const ConvGeometry &g, const float *col, float *in, int64_t inH, int64_t inW,
            int64_t cBegin, int64_t cEnd) {
  for (int64_t c = cBegin; c < cEnd; ++c)
    for (int64_t i = 0; i < g.kH; ++i)
      for (int64_t j = 0; j < g.kW; ++j) {
        const float *src = col + ((c * g.kH + i) * g.kW + j) * g.planeOut();
        float *tap = in + (c * inH + i * g.dilationH) * inW + j * g.dilationW;
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          float *dst = tap + oh * g.strideH * inW;
          const float *row = src + oh * g.OW;
          if (g.strideW == 1)
            for (int64_t ow = 0; ow < g.OW; ++ow)
              dst[ow] += row[ow];
          else
            for (int64_t ow = 0; ow < g.OW; ++ow)
              dst[ow * g.strideW] += row[ow];
        }
      }
}

/// Runs `perItem(item, scratch)` for the images x groups: split over the
/// pool with single-threaded BLAS when each is small, else one at a time
/// (BLAS and `perItem` thread inside).
template <class PerItem>
void forEachItem(const ConvGeometry &g, int64_t work, ThreadPool &pool, bool inner,
                 const PerItem &perItem) {
  int64_t items = g.N * g.groups;
  if (pool.threads() > 1 && items >= pool.threads() && work < kSmallConvWork) {
    SingleThreadedBlas single(pool);
    pool.parallelFor(items, 1, [&](int64_t begin, int64_t end) {
      ColumnScratch scratch(g);
      for (int64_t item = begin; item < end; ++item)
        perItem(item, scratch, false);
    });
    return;
  }
  ColumnScratch scratch(g);
  for (int64_t item = 0; item < items; ++item)
    perItem(item, scratch, inner);
}

class ConvBackwardInputKernel final : public Kernel {
public:
  explicit ConvBackwardInputKernel(const ConvGeometry &g) : g_(g) {
    gemm_.transA = true;
    gemm_.M = g.patchSize();
    gemm_.N = g.planeOut();
    gemm_.K = g.Mg();
    gemm_.lda = g.patchSize();
    gemm_.ldb = g.planeOut();
  }

  bool run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
           std::string &) override {
    const float *dy = static_cast<const float *>(inputs[0]);
    const float *w = static_cast<const float *>(inputs[1]);
    float *dx = static_cast<float *>(outputs[0]);
    forEachItem(g_, gemm_.work(), pool, true,
                [&](int64_t item, ColumnScratch &s, bool threaded) {
                  int64_t n = item / g_.groups, group = item % g_.groups;
                  const float *wg = w + group * g_.Mg() * g_.patchSize();
                  const float *dyg = dy + (n * g_.M + group * g_.Mg()) * g_.planeOut();
                  float *dxg = dx + (n * g_.C + group * g_.Cg()) * g_.planeIn();
                  if (!s.col) { // 1x1, stride 1, no pads: dcol is dX itself
                    gemm_.run(wg, dyg, dxg);
                    return;
                  }
                  gemm_.run(wg, dyg, s.col);
                  float *target = s.padded ? s.padded : dxg;
                  int64_t planes = g_.Cg() * s.inH * s.inW;
                  std::fill(target, target + planes, 0.0f);
                  auto channels = [&](int64_t b, int64_t e) {
                    col2im(g_, s.col, target, s.inH, s.inW, b, e);
                    if (s.padded)
                      for (int64_t c = b; c < e; ++c)
                        for (int64_t h = 0; h < g_.H; ++h)
                          std::memcpy(dxg + (c * g_.H + h) * g_.W,
                                      s.padded + (c * s.inH + g_.padTop + h) * s.inW +
                                          g_.padLeft,
                                      sizeof(float) * g_.W);
                  };
                  if (threaded)
                    pool.parallelFor(g_.Cg(), grainFor(g_.kH * g_.kW * g_.planeOut()),
                                     channels);
                  else
                    channels(0, g_.Cg());
                });
    return true;
  }

private:
  ConvGeometry g_;
  Gemm gemm_;
};

class ConvBackwardWeightKernel final : public Kernel {
public:
  explicit ConvBackwardWeightKernel(const ConvGeometry &g) : g_(g) {
    gemm_.transB = true;
    gemm_.M = g.Mg();
    gemm_.N = g.patchSize();
    gemm_.K = g.planeOut();
    gemm_.lda = g.planeOut();
    gemm_.ldb = g.planeOut();
  }

  bool run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
           std::string &) override {
    const float *x = static_cast<const float *>(inputs[0]);
    const float *dy = static_cast<const float *>(inputs[1]);
    float *dw = static_cast<float *>(outputs[0]);
    int64_t size = g_.M * g_.patchSize();
    // Small convolutions: each thread sums its images into its own
    // copy of dW, and the copies are added at the end.
    int64_t threads = std::min<int64_t>(pool.threads(), g_.N);
    if (threads > 1 && gemm_.work() < kSmallConvWork) {
      std::vector<float> partial(size_t(size * (threads - 1)), 0.0f);
      std::fill(dw, dw + size, 0.0f);
      SingleThreadedBlas single(pool);
      pool.parallelFor(threads, 1, [&](int64_t begin, int64_t end) {
        ColumnScratch scratch(g_);
        for (int64_t t = begin; t < end; ++t) {
          float *target = t == 0 ? dw : partial.data() + (t - 1) * size;
          for (int64_t n = t; n < g_.N; n += threads)
            for (int64_t group = 0; group < g_.groups; ++group)
              accumulate(x, dy, target, n, group, scratch, nullptr);
        }
      });
      for (int64_t t = 1; t < threads; ++t) {
        const float *p = partial.data() + (t - 1) * size;
        for (int64_t i = 0; i < size; ++i)
          dw[i] += p[i];
      }
      return true;
    }
    std::fill(dw, dw + size, 0.0f);
    ColumnScratch scratch(g_);
    for (int64_t n = 0; n < g_.N; ++n)
      for (int64_t group = 0; group < g_.groups; ++group)
        accumulate(x, dy, dw, n, group, scratch, &pool);
    return true;
  }

private:
  /// dW_g += dY_g col_g^T for image n; `pool`, when given, threads im2col.
  void accumulate(const float *x, const float *dy, float *dw, int64_t n, int64_t group,
                  const ColumnScratch &s, ThreadPool *pool) const {
    const float *xg = x + (n * g_.C + group * g_.Cg()) * g_.planeIn();
    const float *dyg = dy + (n * g_.M + group * g_.Mg()) * g_.planeOut();
    const float *cols = xg;
    if (s.col) {
      if (s.padded)
        padInput(g_, xg, s.padded, 0, g_.Cg());
      if (pool)
        pool->parallelFor(g_.patchSize(), grainFor(g_.planeOut()), [&](int64_t b, int64_t e) {
          im2col(g_, s.padded ? s.padded : xg, s.inH, s.inW, s.col, b, e);
        });
      else
        im2col(g_, s.padded ? s.padded : xg, s.inH, s.inW, s.col, 0, g_.patchSize());
      cols = s.col;
    }
    gemm_.run(dyg, cols, dw + group * g_.Mg() * g_.patchSize(), 1.0f);
  }

  ConvGeometry g_;
  Gemm gemm_;
};

/// The geometry of a gradient instruction, read from the forward op's
/// NCHW shapes (input, weights, output).
bool readGradientGeometry(const plan::Conv2D &op, const KernelTypes &types, const Shape &x,
                          const Shape &w, const Shape &y, ConvGeometry &g,
                          std::string &error) {
  if (!checkDType(types.output.dtype(), {plan::F32}, error) || !checkSameDType(types, error))
    return false;
  if (op.relu() || op.channels_last()) {
    error = "relu and channels_last are not supported in convolution gradients";
    return false;
  }
  if (!readConvGeometry(op, x, w, y, false, false, "grad_output", g, error))
    return false;
  if (!fitsBlas({g.M, g.patchSize(), g.planeOut()})) {
    error = "a GEMM dim exceeds OpenBLAS's 32-bit sizes for input " + shapeString(x);
    return false;
  }
  return true;
}

} // namespace

std::unique_ptr<Kernel> makeConv2DBackwardInputKernel(const plan::Instruction &inst,
                                                      const KernelTypes &types,
                                                      std::string &error) {
  ConvGeometry g;
  if (!readGradientGeometry(inst.conv2d_backward_input(), types, shapeOf(types.output),
                            shapeOf(types.inputs[1]), shapeOf(types.inputs[0]), g, error))
    return nullptr;
  return std::make_unique<ConvBackwardInputKernel>(g);
}

std::unique_ptr<Kernel> makeConv2DBackwardWeightKernel(const plan::Instruction &inst,
                                                       const KernelTypes &types,
                                                       std::string &error) {
  ConvGeometry g;
  if (!readGradientGeometry(inst.conv2d_backward_weight(), types, shapeOf(types.inputs[0]),
                            shapeOf(types.output), shapeOf(types.inputs[1]), g, error))
    return nullptr;
  return std::make_unique<ConvBackwardWeightKernel>(g);
}

} // namespace dtc::runtime::cpu
