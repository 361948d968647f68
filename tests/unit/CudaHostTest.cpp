//===- CudaHostTest.cpp - the CUDA backend's host-side arithmetic ---------===//
//
// What the CUDA backend decides on the host, checked without a GPU: each
// matrix product's GEMM (GemmShape.h) run by a plain column-major GEMM
// loop against the row-major product it stands for, over transposes,
// batches, folded batches and broadcasts; which PTX a GPU loads; which
// GPU a process takes; each convolution's cuDNN descriptors (ConvShape.h)
// run by a plain loop that reads them as cuDNN does, against the CPU
// backend's kernel, and checked with cuDNN's own output-size rule; and
// that every driver, cuBLASLt, cuDNN and NCCL entry point the backend
// calls exists in the toolkit's libraries (its libcuda stub).
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/CudaDevice.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/ConvShape.h"
#include "runtime/cuda/CublasLtApi.h"
#include "runtime/cuda/CudnnApi.h"
#include "runtime/cuda/DriverApi.h"
#include "runtime/cuda/GemmShape.h"
#include "runtime/cuda/NcclApi.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

using namespace dtc::runtime::cuda;

namespace {

using Shape = std::vector<int64_t>;

int64_t product(const Shape &s, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i)
    n *= s[i];
  return n;
}

/// The row-major product with NumPy batch broadcasting, the plan's meaning.
std::vector<float> reference(const std::vector<float> &lhs, const Shape &ls,
                             const std::vector<float> &rhs, const Shape &rs, const Shape &os,
                             bool tl, bool tr) {
  size_t rank = os.size();
  int64_t m = os[rank - 2], n = os[rank - 1];
  int64_t k = tl ? ls[ls.size() - 2] : ls.back();
  std::vector<float> out(size_t(product(os, 0, rank)));
  int64_t batches = product(os, 0, rank - 2);
  for (int64_t b = 0; b < batches; ++b) {
    // The batch coordinates, each operand's read at 0 where it has size 1.
    int64_t lb = 0, rb = 0, rest = b, lstride = 1, rstride = 1;
    for (int64_t d = int64_t(rank) - 3; d >= 0; --d) {
      int64_t c = rest % os[size_t(d)];
      rest /= os[size_t(d)];
      int64_t ld = d - (int64_t(rank) - int64_t(ls.size())),
              rd = d - (int64_t(rank) - int64_t(rs.size()));
      if (ld >= 0) {
        lb += (ls[size_t(ld)] == 1 ? 0 : c) * lstride;
        lstride *= ls[size_t(ld)];
      }
      if (rd >= 0) {
        rb += (rs[size_t(rd)] == 1 ? 0 : c) * rstride;
        rstride *= rs[size_t(rd)];
      }
    }
    const float *l = lhs.data() + lb * m * k, *r = rhs.data() + rb * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += double(tl ? l[p * m + i] : l[i * k + p]) * double(tr ? r[j * k + p] : r[p * n + j]);
        out[size_t(b * m * n + i * n + j)] = float(s);
      }
  }
  return out;
}

/// A column-major strided-batch GEMM as cuBLAS defines it.
std::vector<float> columnMajorGemm(const GemmShape &g, const std::vector<float> &a,
                                   const std::vector<float> &b, size_t outputSize) {
  std::vector<float> c(outputSize, 0);
  for (int64_t batch = 0; batch < g.batch; ++batch) {
    const float *A = a.data() + batch * g.strideA, *B = b.data() + batch * g.strideB;
    float *C = c.data() + batch * g.strideC;
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < g.k; ++p) {
          float x = g.transA ? A[i * g.lda + p] : A[p * g.lda + i];
          float y = g.transB ? B[p * g.ldb + j] : B[j * g.ldb + p];
          s += double(x) * double(y);
        }
        C[j * g.ldc + i] = float(s);
      }
  }
  return c;
}

struct Product {
  Shape lhs, rhs, out;
  bool tl, tr;
  int64_t batch; // the GEMM's batch count wanted (1: one GEMM, folded or not)
};

TEST(CudaHost, EveryMatrixProductAsOneColumnMajorGemm) {
  std::vector<Product> cases = {
      {{5, 7}, {7, 3}, {5, 3}, false, false, 1},
      {{7, 5}, {7, 3}, {5, 3}, true, false, 1},
      {{5, 7}, {3, 7}, {5, 3}, false, true, 1},
      {{7, 5}, {3, 7}, {5, 3}, true, true, 1},
      {{2, 4, 5, 7}, {7, 3}, {2, 4, 5, 3}, false, false, 1},   // folded into 40 rows
      {{2, 4, 5, 7}, {3, 7}, {2, 4, 5, 3}, false, true, 1},    // a linear layer's weight
      {{2, 4, 7, 5}, {7, 3}, {2, 4, 5, 3}, true, false, 8},    // transposed: no folding
      {{2, 4, 5, 7}, {2, 4, 7, 3}, {2, 4, 5, 3}, false, false, 8}, // attention scores
      {{2, 4, 5, 7}, {2, 4, 3, 7}, {2, 4, 5, 3}, false, true, 8},
      {{5, 7}, {6, 7, 3}, {6, 5, 3}, false, false, 6},          // the left operand broadcast
      {{1, 5, 7}, {6, 7, 3}, {6, 5, 3}, false, false, 6},
  };
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> real(-1, 1);
  for (const Product &p : cases) {
    SCOPED_TRACE(testing::PrintToString(p.lhs) + " x " + testing::PrintToString(p.rhs));
    GemmShape g;
    std::string why;
    ASSERT_TRUE(gemmShapeOf(p.lhs, p.rhs, p.out, p.tl, p.tr, g, why)) << why;
    EXPECT_EQ(g.batch, p.batch);
    std::vector<float> lhs(size_t(product(p.lhs, 0, p.lhs.size()))),
        rhs(size_t(product(p.rhs, 0, p.rhs.size())));
    for (float &v : lhs)
      v = real(rng);
    for (float &v : rhs)
      v = real(rng);
    std::vector<float> want = reference(lhs, p.lhs, rhs, p.rhs, p.out, p.tl, p.tr);
    std::vector<float> got = columnMajorGemm(g, rhs, lhs, want.size()); // A = rhs, B = lhs
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5) << "element " << i;
  }
  // A partial broadcast has no single strided batch: said, and left to the host.
  GemmShape g;
  std::string why;
  EXPECT_FALSE(gemmShapeOf({2, 1, 5, 7}, {1, 3, 7, 4}, {2, 3, 5, 4}, false, false, g, why));
  EXPECT_EQ(why, "batch dims [2, 1] and [1, 3] broadcast partly");
  EXPECT_FALSE(gemmShapeOf({5, 7}, {6, 3}, {5, 3}, false, false, g, why));
  EXPECT_NE(why.find("not a matrix product"), std::string::npos) << why;
}

// cuBLASLt chooses its algorithm for operands 256-byte aligned unless told
// otherwise; a plan's buffers are 64-byte aligned, and a batch entry is
// aligned as its matrix's start and the stride between entries allow.
TEST(CudaHost, AGemmIsChosenForItsOperandsAlignment) {
  EXPECT_EQ(gemmAlignment(0x7f0000000000, 0), 256u);    // an allocation's start
  EXPECT_EQ(gemmAlignment(0x7f0000001000 + 64, 0), 64u); // a plan buffer's
  EXPECT_EQ(gemmAlignment(0x7f0000001000 + 2, 0), 2u);   // a bf16 view's
  EXPECT_EQ(gemmAlignment(0x7f0000001000, 768 * 2), 256u);
  EXPECT_EQ(gemmAlignment(0x7f0000001000, 1000 * 2), 16u); // entries 2000 bytes apart
  EXPECT_EQ(gemmAlignment(0x7f0000001000 + 128, 50257 * 4), 4u);
}

TEST(CudaHost, AGpuLoadsItsOwnPtxOrTheNewestOlder) {
  std::vector<std::string> chips = {"sm_80", "sm_90"};
  EXPECT_EQ(chipFor(9, 0, chips), "sm_90");  // H100, H200
  EXPECT_EQ(chipFor(8, 0, chips), "sm_80");  // A100
  EXPECT_EQ(chipFor(8, 9, chips), "sm_80");  // L4, L40: sm_80's PTX, compiled forward
  EXPECT_EQ(chipFor(10, 0, chips), "sm_90"); // B200
  EXPECT_EQ(chipFor(7, 5, chips), "");       // T4: older than every kernel
}

TEST(CudaHost, EachLocalRankTakesAGpuInTurn) {
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("SLURM_LOCALID");
  EXPECT_EQ(localGpu(4, 6), 2);
  setenv("SLURM_LOCALID", "3", 1);
  EXPECT_EQ(localGpu(2, 0), 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "5", 1); // mpirun's, before Slurm's
  EXPECT_EQ(localGpu(8, 0), 5);
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("SLURM_LOCALID");
}

/// The toolkit's folder (CUDA_HOME, or the one CMake found).
std::string toolkit() {
  const char *home = std::getenv("CUDA_HOME");
  return home && *home ? home : DTC_CUDA_TOOLKIT_ROOT;
}

TEST(CudaHost, EveryDriverEntryPointIsInTheToolkitsLibcuda) {
  // The toolkit's libcuda stub exports the driver's API (its calls fail
  // without a driver): each name DriverApi looks up resolves there.
  std::string stub = toolkit() + "/lib64/stubs/libcuda.so";
  std::string why;
  const DriverApi *api = driverApi(why, stub.c_str());
  ASSERT_NE(api, nullptr) << why;
  EXPECT_NE(api->cuMemAlloc, nullptr);
  EXPECT_NE(api->cuLaunchKernel, nullptr);
  // A library that is not a driver is named with what it lacks.
  EXPECT_EQ(driverApi(why, "libm.so.6"), nullptr);
  EXPECT_NE(why.find("lacks cuInit"), std::string::npos) << why;
  EXPECT_EQ(driverApi(why, "libnot-a-driver.so"), nullptr);
  EXPECT_NE(why.find("cannot be loaded"), std::string::npos) << why;
}

TEST(CudaHost, CublasLtLoadsWithEveryEntryPoint) {
  std::string why;
  const CublasLtApi *api = cublasLtApi(why);
  ASSERT_NE(api, nullptr) << why;
  EXPECT_STREQ(api->cublasLtGetStatusString(CUBLAS_STATUS_SUCCESS), "success");
}

TEST(CudaHost, NcclLoadsWithEveryEntryPoint) {
  std::string why;
  const NcclApi *api = ncclApi(why);
  ASSERT_NE(api, nullptr) << why;
  std::string error;
  EXPECT_FALSE(check(*api, ncclInvalidArgument, "ncclAllReduce", error));
  EXPECT_EQ(error.rfind("ncclAllReduce: ", 0), 0u) << error;
}

/// A convolution as cuDNN reads its descriptors: x and y through their
/// strides, the filter OIHW, cross-correlation with the pads, strides,
/// dilations and groups given. Computes the pass `shape` is: the forward
/// from x and w (bias, relu), the input's gradient from dy and w, or the
/// filter's from x and dy.
void convByDescriptors(const ConvShape &s, const std::vector<float> &a,
                       const std::vector<float> &b, const std::vector<float> &bias,
                       std::vector<float> &out) {
  auto at = [](const Tensor4d &t, int n, int c, int h, int w) {
    return size_t(n * t.strides[0] + c * t.strides[1] + h * t.strides[2] + w * t.strides[3]);
  };
  int N = s.x.dims[0], C = s.x.dims[1], H = s.x.dims[2], W = s.x.dims[3];
  int M = s.y.dims[1], OH = s.y.dims[2], OW = s.y.dims[3];
  int Cg = s.filter[1], KH = s.filter[2], KW = s.filter[3], Mg = M / s.groups;
  std::fill(out.begin(), out.end(), 0.0f);
  for (int n = 0; n < N; ++n)
    for (int m = 0; m < M; ++m)
      for (int oh = 0; oh < OH; ++oh)
        for (int ow = 0; ow < OW; ++ow) {
          double sum = 0;
          for (int c = 0; c < Cg; ++c)
            for (int i = 0; i < KH; ++i)
              for (int j = 0; j < KW; ++j) {
                int h = oh * s.strideH - s.padH + i * s.dilationH;
                int w = ow * s.strideW - s.padW + j * s.dilationW;
                if (h < 0 || h >= H || w < 0 || w >= W)
                  continue;
                int channel = m / Mg * Cg + c;
                size_t xi = at(s.x, n, channel, h, w), yi = at(s.y, n, m, oh, ow);
                size_t wi = size_t(((m * Cg + c) * KH + i) * KW + j);
                switch (s.pass) {
                case ConvPass::Forward: sum += double(a[xi]) * b[wi]; break;
                case ConvPass::BackwardData: out[xi] += a[yi] * b[wi]; break;
                case ConvPass::BackwardFilter: out[wi] += a[xi] * b[yi]; break;
                }
              }
          if (s.pass == ConvPass::Forward) {
            float y = float(sum) + (s.bias ? bias[size_t(m)] : 0.0f);
            out[at(s.y, n, m, oh, ow)] = s.relu ? std::max(0.0f, y) : y;
          }
        }
  (void)C;
}

dtc::plan::TensorType f32(const Shape &shape) {
  dtc::plan::TensorType t;
  t.set_dtype(dtc::plan::F32);
  for (int64_t d : shape)
    t.add_shape(d);
  return t;
}

struct ConvCase {
  const char *name;
  Shape x, w, y; // the forward's, as the plan states them (NHWC where channels-last)
  std::vector<int64_t> strides, pads, dilations;
  int64_t groups = 1;
  bool bias = false, relu = false, channelsLast = false;
};

TEST(CudaHost, EveryConvolutionAsItsCudnnDescriptorsSayAgainstTheCpuBackend) {
  std::vector<ConvCase> cases = {
      {"3x3 same", {2, 3, 8, 8}, {4, 3, 3, 3}, {2, 4, 8, 8}, {1, 1}, {1, 1, 1, 1}, {1, 1}},
      {"strided with bias and relu", {2, 3, 9, 7}, {5, 3, 3, 3}, {2, 5, 4, 3}, {2, 2},
       {0, 0, 0, 0}, {1, 1}, 1, true, true},
      {"grouped and dilated", {1, 4, 9, 9}, {6, 2, 3, 3}, {1, 6, 5, 5}, {1, 1}, {0, 0, 0, 0},
       {2, 2}, 2},
      {"1x1", {3, 8, 5, 5}, {4, 8, 1, 1}, {3, 4, 5, 5}, {1, 1}, {0, 0, 0, 0}, {1, 1}},
      {"channels-last with bias", {2, 6, 6, 3}, {4, 3, 3, 3}, {2, 6, 6, 4}, {1, 1},
       {1, 1, 1, 1}, {1, 1}, 1, true, false, true},
  };
  dtc::runtime::cpu::ThreadPool pool(1);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> value(-1, 1);
  auto random = [&](const Shape &shape) {
    std::vector<float> v(size_t(product(shape, 0, shape.size())));
    for (float &f : v)
      f = value(rng);
    return v;
  };
  int checked = 0;
  for (const ConvCase &c : cases)
    for (ConvPass pass : {ConvPass::Forward, ConvPass::BackwardData, ConvPass::BackwardFilter}) {
      if (pass != ConvPass::Forward && (c.channelsLast || c.relu || c.bias))
        continue; // the plan has no such gradients
      SCOPED_TRACE(std::string(c.name) + " pass " + std::to_string(int(pass)));
      dtc::plan::Instruction inst;
      dtc::plan::Conv2D *op = pass == ConvPass::Forward ? inst.mutable_conv2d()
                              : pass == ConvPass::BackwardData
                                  ? inst.mutable_conv2d_backward_input()
                                  : inst.mutable_conv2d_backward_weight();
      for (int64_t v : c.strides)
        op->add_strides(v);
      for (int64_t v : c.pads)
        op->add_pads(v);
      for (int64_t v : c.dilations)
        op->add_dilations(v);
      op->set_groups(c.groups);
      op->set_relu(c.relu);
      op->set_channels_last(c.channelsLast);
      std::vector<dtc::plan::TensorType> inputs;
      dtc::plan::TensorType output;
      Shape bias{c.w[0]};
      switch (pass) {
      case ConvPass::Forward:
        inputs = {f32(c.x), f32(c.w)};
        if (c.bias)
          inputs.push_back(f32(bias));
        output = f32(c.y);
        break;
      case ConvPass::BackwardData:
        inputs = {f32(c.y), f32(c.w)}, output = f32(c.x);
        break;
      case ConvPass::BackwardFilter:
        inputs = {f32(c.x), f32(c.y)}, output = f32(c.w);
        break;
      }
      ConvShape shape;
      std::string why;
      ASSERT_TRUE(convShapeOf(inst, inputs, output, shape, why)) << why;
      std::vector<std::vector<float>> in;
      for (const dtc::plan::TensorType &t : inputs)
        in.push_back(random(Shape(t.shape().begin(), t.shape().end())));
      std::vector<float> want(size_t(product(Shape(output.shape().begin(), output.shape().end()),
                                             0, size_t(output.shape_size())))),
          got(want.size());
      std::string error;
      auto kernel = dtc::runtime::cpu::makeKernel(inst, inputs, {output}, error);
      ASSERT_TRUE(kernel) << error;
      std::vector<const void *> ins;
      for (const std::vector<float> &v : in)
        ins.push_back(v.data());
      void *outs[] = {want.data()};
      ASSERT_TRUE(kernel->run(ins.data(), outs, pool, error)) << error;
      convByDescriptors(shape, in[0], in[1], c.bias ? in[2] : std::vector<float>(), got);
      for (size_t k = 0; k < want.size(); ++k)
        ASSERT_NEAR(got[k], want[k], 1e-4 * (1 + std::abs(want[k]))) << "element " << k;
      ++checked;
    }
  EXPECT_EQ(checked, 11);
}

TEST(CudaHost, PadsCudnnCannotStateAreRefusedWithWhy) {
  dtc::plan::Instruction inst;
  dtc::plan::Conv2D *op = inst.mutable_conv2d();
  for (int64_t v : {1, 1})
    op->add_strides(v), op->add_dilations(v);
  for (int64_t v : {0, 0, 1, 1}) // ONNX's SAME_UPPER for an even kernel
    op->add_pads(v);
  op->set_groups(1);
  ConvShape shape;
  std::string why;
  EXPECT_FALSE(convShapeOf(inst, {f32({1, 2, 6, 6}), f32({3, 2, 2, 2})}, f32({1, 3, 6, 6}),
                           shape, why));
  EXPECT_NE(why.find("one pad per side pair"), std::string::npos) << why;
  // Shapes that do not agree are named, as the CPU backend names them.
  op->clear_pads();
  for (int64_t v : {0, 0, 0, 0})
    op->add_pads(v);
  EXPECT_FALSE(convShapeOf(inst, {f32({1, 2, 6, 6}), f32({3, 2, 2, 2})}, f32({1, 3, 6, 6}),
                           shape, why));
  EXPECT_NE(why.find("should be [1,3,5,5]"), std::string::npos) << why;
}

TEST(CudaHost, CudnnLoadsAndSizesOutputsAsConvShapeDoes) {
  // cuDNN's descriptors need no GPU: its own output-size rule for the
  // descriptors ConvShape.h states agrees with the plan's shapes.
  std::string why;
  const CudnnApi *dnn = cudnnApi(why);
  ASSERT_NE(dnn, nullptr) << why;
  EXPECT_GE(dnn->cudnnGetVersion(), size_t(90000));
  dtc::plan::Instruction inst;
  dtc::plan::Conv2D *op = inst.mutable_conv2d();
  for (int64_t v : {2, 1})
    op->add_strides(v);
  for (int64_t v : {1, 2})
    op->add_dilations(v);
  for (int64_t v : {1, 2, 1, 2})
    op->add_pads(v);
  op->set_groups(2);
  op->set_channels_last(true);
  ConvShape s;
  ASSERT_TRUE(convShapeOf(inst, {f32({2, 11, 9, 4}), f32({6, 2, 3, 3})}, f32({2, 6, 9, 6}), s,
                          why))
      << why;
  cudnnTensorDescriptor_t x = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  std::string error;
  ASSERT_TRUE(check(*dnn, dnn->cudnnCreateTensorDescriptor(&x), "tensor", error) &&
              check(*dnn,
                    dnn->cudnnSetTensor4dDescriptorEx(x, CUDNN_DATA_FLOAT, s.x.dims[0],
                                                      s.x.dims[1], s.x.dims[2], s.x.dims[3],
                                                      s.x.strides[0], s.x.strides[1],
                                                      s.x.strides[2], s.x.strides[3]),
                    "tensor", error) &&
              check(*dnn, dnn->cudnnCreateFilterDescriptor(&w), "filter", error) &&
              check(*dnn,
                    dnn->cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                    s.filter[0], s.filter[1], s.filter[2],
                                                    s.filter[3]),
                    "filter", error) &&
              check(*dnn, dnn->cudnnCreateConvolutionDescriptor(&conv), "conv", error) &&
              check(*dnn,
                    dnn->cudnnSetConvolution2dDescriptor(conv, s.padH, s.padW, s.strideH,
                                                         s.strideW, s.dilationH, s.dilationW,
                                                         CUDNN_CROSS_CORRELATION,
                                                         CUDNN_DATA_FLOAT),
                    "conv", error) &&
              check(*dnn, dnn->cudnnSetConvolutionGroupCount(conv, s.groups), "groups", error))
      << error;
  int n = 0, c = 0, h = 0, wd = 0;
  ASSERT_TRUE(check(*dnn, dnn->cudnnGetConvolution2dForwardOutputDim(conv, x, w, &n, &c, &h, &wd),
                    "output dims", error))
      << error;
  EXPECT_EQ((std::array<int, 4>{n, c, h, wd}), s.y.dims);
  dnn->cudnnDestroyConvolutionDescriptor(conv);
  dnn->cudnnDestroyFilterDescriptor(w);
  dnn->cudnnDestroyTensorDescriptor(x);
}

} // namespace
