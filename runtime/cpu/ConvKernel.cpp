//===- ConvKernel.cpp - conv2d: oneDNN, im2col and sgemm, or direct -------===//
//
// oneDNN's convolution runs what it accepts, in the blocked layout it
// prefers: the input is reordered into it and the output back out on each
// run, the weights once when they are constant. Depthwise convolutions and
// anything oneDNN declines go through our own kernels.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Dnnl.h"
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/KernelSupport.h"
#include "runtime/cpu/ThreadPool.h"

#include <cstring>
#include <memory>
#include <vector>

namespace dtc::runtime::cpu {

namespace {

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

/// Copies channels [cBegin, cEnd) of one image's group into the inside of
/// `padded` [Cg, paddedH, paddedW], whose borders stay zero.
void padInput(const ConvGeometry &g, const float *x, float *padded, int64_t cBegin,
              int64_t cEnd) {
  for (int64_t c = cBegin; c < cEnd; ++c)
    for (int64_t h = 0; h < g.H; ++h)
      copyRun(padded + (c * g.paddedH() + g.padTop + h) * g.paddedW() + g.padLeft,
              x + (c * g.H + h) * g.W, g.W);
}

/// Fills im2col rows [rowBegin, rowEnd) for one image's group from its
/// input, already padded (`in` is [Cg, inH, inW]): row (c, i, j) holds, per
/// output pixel, the input at kernel tap (i, j) of channel c.
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

/// Each output plane starts as its channel's bias (sgemm then adds).
void fillBias(const ConvGeometry &g, const float *bias, float *out, int64_t channelBegin,
              int64_t channelEnd) {
  for (int64_t m = channelBegin; m < channelEnd; ++m)
    std::fill(out + m * g.planeOut(), out + (m + 1) * g.planeOut(),
              bias ? bias[m] : 0.0f);
}

/// Below this many multiply-adds per image and group, one sgemm is too small
/// for OpenBLAS to thread well: images are split over the pool instead, each
/// thread running im2col and a single-threaded sgemm on its own (see
/// MatMulKernels.cpp). The test CNN's convs (0.4-1.2 M each) ran 2x faster so.
constexpr int64_t kSmallConvWork = int64_t(1) << 22;

/// The general convolution: per image and group, im2col then one sgemm
/// W_g[Mg, patch] x col[patch, OH*OW]. Small ones split over the pool by
/// image; big ones split im2col over the pool and let OpenBLAS thread the
/// sgemm.
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
    int64_t items = g_.N * g_.groups;
    if (pool.threads() > 1 && items >= pool.threads() && gemm_.work() < kSmallConvWork) {
      SingleThreadedBlas single(pool);
      if (wideRows()) {
        pool.parallelFor(items, 1, [&](int64_t begin, int64_t end) {
          WideScratch scratch(g_);
          for (int64_t item = begin; item < end; ++item)
            convolveWide(x, w, bias, y, item, scratch);
        });
        return true;
      }
      pool.parallelFor(items, 1, [&](int64_t begin, int64_t end) {
        Scratch scratch(g_);
        for (int64_t item = begin; item < end; ++item)
          convolve(x, w, bias, y, item, scratch, [&](const float *xg) {
            if (scratch.padded)
              padInput(g_, xg, scratch.padded, 0, g_.Cg());
            im2col(g_, scratch.source(xg), scratch.inH, scratch.inW, scratch.col, 0,
                   g_.patchSize());
          });
      });
      return true;
    }
    Scratch scratch(g_);
    for (int64_t item = 0; item < items; ++item)
      convolve(x, w, bias, y, item, scratch, [&](const float *xg) {
        if (scratch.padded)
          pool.parallelFor(g_.Cg(), grainFor(g_.planeIn()), [&](int64_t b, int64_t e) {
            padInput(g_, xg, scratch.padded, b, e);
          });
        pool.parallelFor(g_.patchSize(), grainFor(g_.planeOut()), [&](int64_t b, int64_t e) {
          im2col(g_, scratch.source(xg), scratch.inH, scratch.inW, scratch.col, b, e);
        });
      });
    return true;
  }

private:
  /// One thread's buffers: the im2col matrix and, with pads, the padded
  /// input (zeroed once; padInput rewrites only its inside).
  struct Scratch {
    explicit Scratch(const ConvGeometry &g)
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
    const float *source(const float *xg) const { return padded ? padded : xg; }

    std::unique_ptr<float[]> storage;
    float *col = nullptr, *padded = nullptr;
    int64_t inH, inW;
  };

  /// One image's group (item = n * groups + group): `fillColumns(xg)`
  /// writes its im2col matrix (unless the input serves as is), then bias
  /// and sgemm.
  template <class FillColumns>
  void convolve(const float *x, const float *w, const float *bias, float *y, int64_t item,
                const Scratch &scratch, const FillColumns &fillColumns) const {
    int64_t n = item / g_.groups, group = item % g_.groups;
    const float *xg = x + (n * g_.C + group * g_.Cg()) * g_.planeIn();
    float *yg = y + (n * g_.M + group * g_.Mg()) * g_.planeOut();
    const float *patches = xg;
    if (scratch.col) {
      fillColumns(xg);
      patches = scratch.col;
    }
    if (bias)
      fillBias(g_, bias + group * g_.Mg(), yg, 0, g_.Mg());
    gemm_.run(w + group * g_.Mg() * g_.patchSize(), patches, yg, bias ? 1.0f : 0.0f);
  }

  /// At stride 1, im2col can copy whole planes: im2col row (c, i, j) is
  /// the padded input of channel c from tap (i, j) on, read as OH rows of
  /// the padded width inW, of which the last inW - OW columns of each row
  /// are junk. One long copy per row instead of OH short ones, for a GEMM
  /// inW / OW wider and a pass dropping the junk columns (which adds the
  /// bias too).
  bool wideRows() const {
    return g_.strideH == 1 && g_.strideW == 1 && !g_.readsInputAsIs();
  }

  struct WideScratch {
    explicit WideScratch(const ConvGeometry &g)
        : inH(g.paddedH()), inW(g.paddedW()), wideOut(g.OH * inW),
          // The last channel's last taps read up to (kW-1)*dilationW past
          // its plane: zeros.
          paddedSize(g.Cg() * inH * inW + (g.kW - 1) * g.dilationW),
          storage(new float[size_t(paddedSize + (g.patchSize() + g.Mg()) * wideOut)]) {
      padded = storage.get();
      col = padded + paddedSize;
      out = col + g.patchSize() * wideOut;
      std::fill(padded, padded + paddedSize, 0.0f);
    }
    int64_t inH, inW, wideOut, paddedSize;
    std::unique_ptr<float[]> storage;
    float *padded, *col, *out;
  };

  void convolveWide(const float *x, const float *w, const float *bias, float *y, int64_t item,
                    const WideScratch &s) const {
    int64_t n = item / g_.groups, group = item % g_.groups;
    const float *xg = x + (n * g_.C + group * g_.Cg()) * g_.planeIn();
    float *yg = y + (n * g_.M + group * g_.Mg()) * g_.planeOut();
    padInput(g_, xg, s.padded, 0, g_.Cg());
    for (int64_t row = 0; row < g_.patchSize(); ++row) {
      int64_t c = row / (g_.kH * g_.kW), i = row / g_.kW % g_.kH, j = row % g_.kW;
      std::memcpy(s.col + row * s.wideOut,
                  s.padded + (c * s.inH + i * g_.dilationH) * s.inW + j * g_.dilationW,
                  sizeof(float) * s.wideOut);
    }
    Gemm wide = gemm_;
    wide.N = wide.ldb = s.wideOut;
    wide.run(w + group * g_.Mg() * g_.patchSize(), s.col, s.out);
    for (int64_t m = 0; m < g_.Mg(); ++m) {
      float b = bias ? bias[group * g_.Mg() + m] : 0.0f;
      for (int64_t oh = 0; oh < g_.OH; ++oh) {
        const float *src = s.out + m * s.wideOut + oh * s.inW;
        float *dst = yg + (m * g_.OH + oh) * g_.OW;
        for (int64_t ow = 0; ow < g_.OW; ++ow)
          dst[ow] = src[ow] + b;
      }
    }
  }

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

/// A convolution as a oneDNN primitive, with reorders in and out of the
/// layout it chose.
class DnnlConvKernel final : public Kernel {
public:
  /// `weights` is in the primitive's layout when constant (reordered
  /// once), else a handle-less memory in `plainWeights`, reordered on each
  /// run when the primitive chose another layout (training: the weights
  /// change every step, and oneDNN's fast kernels want them blocked).
  DnnlConvKernel(const dnnl::convolution_forward::primitive_desc &pd,
                 const dnnl::memory::desc &plainSrc, const dnnl::memory::desc &plainDst,
                 dnnl::memory weights, bool constantWeights, bool hasBias)
      : primitive_(pd), plainSrc_(plainSrc, dnnlEngine(), DNNL_MEMORY_NONE),
        plainDst_(plainDst, dnnlEngine(), DNNL_MEMORY_NONE), weights_(std::move(weights)),
        constantWeights_(constantWeights), hasBias_(hasBias) {
    if (!constantWeights && pd.weights_desc() != weights_.get_desc()) {
      plainWeights_ = weights_;
      weights_ = dnnl::memory(pd.weights_desc(), dnnlEngine());
      reorderWeights_ = dnnl::reorder(plainWeights_, weights_);
    }
    if (hasBias)
      bias_ = dnnl::memory(pd.bias_desc(), dnnlEngine(), DNNL_MEMORY_NONE);
    if (pd.src_desc() != plainSrc) {
      src_ = dnnl::memory(pd.src_desc(), dnnlEngine());
      reorderIn_ = dnnl::reorder(plainSrc_, src_);
    } else {
      src_ = plainSrc_;
    }
    if (pd.dst_desc() != plainDst) {
      dst_ = dnnl::memory(pd.dst_desc(), dnnlEngine());
      reorderOut_ = dnnl::reorder(dst_, plainDst_);
    } else {
      dst_ = plainDst_;
    }
  }

  bool run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
           std::string &) override {
    plainSrc_.set_data_handle(const_cast<void *>(inputs[0]));
    plainDst_.set_data_handle(outputs[0]);
    if (reorderWeights_) {
      plainWeights_.set_data_handle(const_cast<void *>(inputs[1]));
      executeDnnl(reorderWeights_, {{DNNL_ARG_FROM, plainWeights_}, {DNNL_ARG_TO, weights_}},
                  pool);
    } else if (!constantWeights_) {
      weights_.set_data_handle(const_cast<void *>(inputs[1]));
    }
    if (hasBias_)
      bias_.set_data_handle(const_cast<void *>(inputs[2]));
    if (reorderIn_)
      executeDnnl(reorderIn_, {{DNNL_ARG_FROM, plainSrc_}, {DNNL_ARG_TO, src_}}, pool);
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, weights_}, {DNNL_ARG_DST, dst_}};
    if (hasBias_)
      args[DNNL_ARG_BIAS] = bias_;
    executeDnnl(primitive_, args, pool);
    if (reorderOut_)
      executeDnnl(reorderOut_, {{DNNL_ARG_FROM, dst_}, {DNNL_ARG_TO, plainDst_}}, pool);
    return true;
  }

private:
  dnnl::convolution_forward primitive_;
  dnnl::memory plainSrc_, plainDst_, src_, dst_, weights_, plainWeights_, bias_;
  dnnl::primitive reorderIn_, reorderOut_, reorderWeights_;
  bool constantWeights_, hasBias_;
};

/// Our own convolutions' epilogue: max(0, y) over the output.
class ReluAfter final : public Kernel {
public:
  ReluAfter(std::unique_ptr<Kernel> conv, int64_t elements)
      : conv_(std::move(conv)), elements_(elements) {}

  bool run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
           std::string &error) override {
    if (!conv_->run(inputs, outputs, pool, error))
      return false;
    float *y = static_cast<float *>(outputs[0]);
    pool.parallelFor(elements_, kSerialWork, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        y[i] = std::max(y[i], 0.0f);
    });
    return true;
  }

private:
  std::unique_ptr<Kernel> conv_;
  int64_t elements_;
};

/// An NCHW convolution run on channels-last data: the input is transposed
/// into NCHW scratch, the output written there and transposed back. Only
/// for what oneDNN declines, which runs NHWC itself.
class ChannelsLastAround final : public Kernel {
public:
  ChannelsLastAround(std::unique_ptr<Kernel> nchw, const ConvGeometry &g)
      : nchw_(std::move(nchw)), g_(g), input_(size_t(g.N * g.C * g.planeIn())),
        output_(size_t(g.N * g.M * g.planeOut())) {}

  bool run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
           std::string &error) override {
    const float *x = static_cast<const float *>(inputs[0]);
    float *y = static_cast<float *>(outputs[0]);
    pool.parallelFor(g_.N * g_.C, grainFor(g_.planeIn()), [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const float *src = x + p / g_.C * g_.planeIn() * g_.C + p % g_.C;
        float *dst = input_.data() + p * g_.planeIn();
        for (int64_t i = 0; i < g_.planeIn(); ++i)
          dst[i] = src[i * g_.C];
      }
    });
    const void *nchwInputs[] = {input_.data(), inputs[1], g_.hasBias ? inputs[2] : nullptr};
    void *nchwOutputs[] = {output_.data()};
    if (!nchw_->run(nchwInputs, nchwOutputs, pool, error))
      return false;
    pool.parallelFor(g_.N * g_.planeOut(), grainFor(g_.M), [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        int64_t n = p / g_.planeOut(), pixel = p % g_.planeOut();
        const float *src = output_.data() + n * g_.M * g_.planeOut() + pixel;
        float *dst = y + p * g_.M;
        for (int64_t m = 0; m < g_.M; ++m)
          dst[m] = src[m * g_.planeOut()];
      }
    });
    return true;
  }

private:
  std::unique_ptr<Kernel> nchw_;
  ConvGeometry g_;
  std::vector<float> input_, output_;
};

/// The oneDNN convolution for `g`, or null when oneDNN declines it.
/// Channels-last data is read and written as it is; NCHW data is reordered
/// into and out of the layout oneDNN prefers.
std::unique_ptr<Kernel> makeDnnlConv(const ConvGeometry &g, bool relu, bool channelsLast,
                                     const void *constantWeights) {
  using dnnl::memory;
  using tag = memory::format_tag;
  auto f32 = memory::data_type::f32;
  tag layout = channelsLast ? tag::nhwc : tag::nchw;
  memory::desc plainSrc({g.N, g.C, g.H, g.W}, f32, layout);
  memory::desc plainDst({g.N, g.M, g.OH, g.OW}, f32, layout);
  memory::desc plainWeights =
      g.groups == 1 ? memory::desc({g.M, g.C, g.kH, g.kW}, f32, tag::oihw)
                    : memory::desc({g.groups, g.Mg(), g.Cg(), g.kH, g.kW}, f32, tag::goihw);
  memory::desc bias = g.hasBias ? memory::desc({g.M}, f32, tag::x) : memory::desc();
  try {
    dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        channelsLast ? plainSrc : memory::desc(plainSrc.dims(), f32, tag::any),
        memory::desc(plainWeights.dims(), f32, tag::any), bias,
        channelsLast ? plainDst : memory::desc(plainDst.dims(), f32, tag::any),
        {g.strideH, g.strideW},
        {g.dilationH - 1, g.dilationW - 1}, {g.padTop, g.padLeft}, {g.padBottom, g.padRight});
    dnnl::primitive_attr attr;
    if (relu) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      attr.set_post_ops(ops);
    }
    dnnl::convolution_forward::primitive_desc pd(desc, attr, dnnlEngine());
    return std::make_unique<DnnlConvKernel>(pd, plainSrc, plainDst,
                                            weightsMemory(plainWeights, constantWeights,
                                                          pd.weights_desc()),
                                            constantWeights != nullptr, g.hasBias);
  } catch (const dnnl::error &) {
    return nullptr;
  }
}

/// Reads a convolution's geometry from its attributes and the NCHW shapes
/// of input x, weights w and output y (`yName` says what y is called in
/// messages), and checks they agree.
bool readGeometry(const plan::Conv2D &op, const Shape &x, const Shape &w, const Shape &y,
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

} // namespace

std::unique_ptr<Kernel> makeConv2DKernel(const plan::Instruction &inst,
                                         const KernelTypes &types, std::string &error) {
  const plan::Conv2D &op = inst.conv2d();
  if (!checkDType(types.output.dtype(), {plan::F32}, error) ||
      !checkSameDType(types, error))
    return nullptr;
  Shape x = shapeOf(types.inputs[0]), w = shapeOf(types.inputs[1]),
        y = shapeOf(types.output);
  bool channelsLast = op.channels_last();
  // Checked as NCHW from here on.
  if (channelsLast && x.size() == 4) {
    x = fromChannelsLast(x);
    y = y.size() == 4 ? fromChannelsLast(y) : y;
  }
  ConvGeometry g;
  if (!readGeometry(op, x, w, y, types.inputs.size() == 3, channelsLast, "output", g, error))
    return nullptr;
  if (g.hasBias && shapeOf(types.inputs[2]) != Shape{g.M})
    return fail(error, "bias " + shapeString(types.inputs[2]) + " should be [" +
                           std::to_string(g.M) + "]");
  // Our depthwise kernel beats oneDNN's reorders in and out of NCHW, not
  // its NHWC kernel.
  bool depthwise = g.Cg() == 1 && g.groups > 1;
  if (dnnlAllowed() && (!depthwise || channelsLast) && product(y) > 0 && g.patchSize() > 0)
    if (auto kernel = makeDnnlConv(g, op.relu(), channelsLast, types.constant(1)))
      return kernel;
  std::unique_ptr<Kernel> kernel;
  if (depthwise) {
    kernel = std::make_unique<DepthwiseConvKernel>(g);
  } else {
    if (!fitsBlas({g.Mg(), g.planeOut(), g.patchSize()}))
      return fail(error,
                  "a GEMM dim exceeds OpenBLAS's 32-bit sizes for input " + shapeString(x));
    kernel = std::make_unique<GemmConvKernel>(g);
  }
  if (op.relu())
    kernel = std::make_unique<ReluAfter>(std::move(kernel), product(y));
  if (channelsLast)
    kernel = std::make_unique<ChannelsLastAround>(std::move(kernel), g);
  return kernel;
}

//===----------------------------------------------------------------------===//
// Gradients: the transposed GEMMs of im2col, per image and group.
//   dcol[patch, OH*OW] = W_g^T dY_g, then col2im adds dcol into dX_g;
//   dW_g[Mg, patch]   += dY_g col_g^T over the images.
//===----------------------------------------------------------------------===//

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

/// Scratch of one thread: an im2col matrix and a padded image group
/// (neither when the input serves as the matrix itself).
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
  std::unique_ptr<float[]> storage;
  float *col = nullptr, *padded = nullptr;
  int64_t inH, inW;
};

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
  if (!readGeometry(op, x, w, y, false, false, "grad_output", g, error))
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
