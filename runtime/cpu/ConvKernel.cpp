//===- ConvKernel.cpp - conv2d: oneDNN, im2col and sgemm, or direct -------===//
//
// oneDNN's convolution runs what it accepts, in the blocked layout it
// prefers: the input is reordered into it and the output back out on each
// run, the weights once when they are constant. Depthwise convolutions and
// anything oneDNN declines go through our own kernels.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ConvGeometry.h"
#include "runtime/cpu/Dnnl.h"
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/KernelSupport.h"
#include "runtime/cpu/ThreadPool.h"

#include <cstring>
#include <memory>
#include <vector>

namespace dtc::runtime::cpu {

namespace {

/// Each output plane starts as its channel's bias (sgemm then adds).
void fillBias(const ConvGeometry &g, const float *bias, float *out, int64_t channelBegin,
              int64_t channelEnd) {
  for (int64_t m = channelBegin; m < channelEnd; ++m)
    std::fill(out + m * g.planeOut(), out + (m + 1) * g.planeOut(),
              bias ? bias[m] : 0.0f);
}

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
        ColumnScratch scratch(g_);
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
    ColumnScratch scratch(g_);
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
  /// One image's group (item = n * groups + group): `fillColumns(xg)`
  /// writes its im2col matrix (unless the input serves as is), then bias
  /// and sgemm.
  template <class FillColumns>
  void convolve(const float *x, const float *w, const float *bias, float *y, int64_t item,
                const ColumnScratch &scratch, const FillColumns &fillColumns) const {
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
  if (!readConvGeometry(op, x, w, y, types.inputs.size() == 3, channelsLast, "output", g, error))
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

} // namespace dtc::runtime::cpu
