//===- ConvGeometry.h - what conv2d's kernels share --------------*- C++ -*-===//
//
// A convolution's geometry, read from its attributes and checked (the CUDA
// backend's cuDNN descriptors read it here too: runtime/cuda/ConvShape.cpp),
// and the im2col matrix our own kernels build from it, which the forward
// (ConvKernel.cpp) multiplies by the weights and the gradients
// (ConvBackwardKernels.cpp) by the output's gradient.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CPU_CONVGEOMETRY_H
#define DTC_RUNTIME_CPU_CONVGEOMETRY_H

#include "runtime/cpu/KernelSupport.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

namespace dtc::runtime::cpu {

/// Conv2D's geometry, checked.
struct ConvGeometry {
  int64_t N = 0, C = 0, H = 0, W = 0; // input
  int64_t M = 0, kH = 0, kW = 0;       // weights [M, C/groups, kH, kW]
  int64_t OH = 0, OW = 0;              // output spatial size
  int64_t strideH = 1, strideW = 1, dilationH = 1, dilationW = 1;
  int64_t padTop = 0, padLeft = 0, padBottom = 0, padRight = 0;
  int64_t groups = 1;
  bool hasBias = false;

  int64_t Cg() const { return C / groups; }
  int64_t Mg() const { return M / groups; }
  int64_t planeIn() const { return H * W; }
  int64_t planeOut() const { return OH * OW; }
  /// Rows of the im2col matrix (its columns are the output pixels).
  int64_t patchSize() const { return Cg() * kH * kW; }
  bool padded() const { return padTop || padLeft || padBottom || padRight; }
  int64_t paddedH() const { return H + padTop + padBottom; }
  int64_t paddedW() const { return W + padLeft + padRight; }
  /// Floats of one image's group copied into its pads (0 without pads).
  int64_t paddedSize() const { return padded() ? Cg() * paddedH() * paddedW() : 0; }
  /// A 1x1 kernel at stride 1 without padding reads the input as is.
  bool readsInputAsIs() const {
    return kH == 1 && kW == 1 && strideH == 1 && strideW == 1 && padTop == 0 &&
           padLeft == 0 && OH == H && OW == W;
  }
};

/// Below this many multiply-adds per image and group, one sgemm is too small
/// for OpenBLAS to thread well: images are split over the pool instead, each
/// thread running im2col and a single-threaded sgemm on its own (see
/// MatMulKernels.cpp).
inline constexpr int64_t kSmallConvWork = int64_t(1) << 22;

/// Copies channels [cBegin, cEnd) of one image's group into the inside of
/// `padded` [Cg, paddedH, paddedW], whose borders stay zero.
void padInput(const ConvGeometry &g, const float *x, float *padded, int64_t cBegin,
              int64_t cEnd);

/// Fills im2col rows [rowBegin, rowEnd) for one image's group from its
/// input, already padded (`in` is [Cg, inH, inW]): row (c, i, j) holds, per
/// output pixel, the input at kernel tap (i, j) of channel c.
void im2col(const ConvGeometry &g, const float *in, int64_t inH, int64_t inW, float *col,
            int64_t rowBegin, int64_t rowEnd);

/// One thread's buffers: the im2col matrix and, with pads, the padded input
/// (zeroed once; padInput rewrites only its inside). Neither when the input
/// serves as the matrix itself.
struct ColumnScratch {
  explicit ColumnScratch(const ConvGeometry &g)
      : inH(g.padded() ? g.paddedH() : g.H), inW(g.padded() ? g.paddedW() : g.W) {
    if (g.readsInputAsIs())
      return;
    int64_t colSize = g.patchSize() * g.planeOut();
    storage.reset(new float[size_t(colSize + g.paddedSize())]);
    col = storage.get();
    if (g.padded()) {
      padded = col + colSize;
      std::fill(padded, padded + g.paddedSize(), 0.0f);
    }
  }
  /// What im2col reads for input `xg`: the padded copy, or `xg` itself.
  const float *source(const float *xg) const { return padded ? padded : xg; }

  std::unique_ptr<float[]> storage;
  float *col = nullptr, *padded = nullptr;
  int64_t inH, inW;
};

/// Reads a convolution's geometry from its attributes and the NCHW shapes
/// of input x, weights w and output y (`yName` says what y is called in
/// messages), and checks they agree.
bool readConvGeometry(const plan::Conv2D &op, const Shape &x, const Shape &w, const Shape &y,
                      bool hasBias, bool channelsLast, const char *yName, ConvGeometry &g,
                      std::string &error);

} // namespace dtc::runtime::cpu

#endif // DTC_RUNTIME_CPU_CONVGEOMETRY_H
