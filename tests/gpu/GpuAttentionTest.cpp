//===- GpuAttentionTest.cpp - the attention kernels against a reference ---===//
//
// On a machine with an NVIDIA GPU: attention and attention_backward
// through makeAttentionKernel on random inputs, on each of its kernels
// (dtc's flash kernels, kernels/FlashAttention.cu, on every case; cuDNN's
// fused attention on the bf16 cases it is meant to take, where a refusal
// fails the test), against a plain double-precision reference written here
// from the plan's definition. Shapes cover f32 and bf16, causal and not,
// Sq == Sk and Sq != Sk (with rows that see no key), head dims 32 to 128
// and odd ones, lengths that are not multiples of the tiles.
//
// Bounds, relative to each output's largest magnitude: f32 1e-4 (the
// kernels use FMA and the accurate expf/logf, no TF32). bf16 2e-2: the
// inputs are the same bf16 values in both, but the kernels round P and dS
// to bf16 (8 significant bits, a relative 2^-9 = 2e-3 each; cuDNN does
// the same) before their
// tensor-core products and round each output to bf16 (another 2e-3);
// summed over a row these errors partly cancel, so a few times 2e-3 is
// expected and 2e-2 leaves room without hiding a wrong mask or tile (which
// is off by O(1)). lse is f32 in both: its scores are f32 sums of exact
// bf16 products, so 1e-4 (f32) and 1e-3 (bf16) of max(1, |lse|).
//
// Links no MLIR (in dtc-gpu-plan-tests, which the GPU bundle carries).
// Without a GPU every test reports itself skipped, with the reason.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ThreadPool.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaKernels.h"
#include "tests/unit/AttentionReference.h"

#include "plan/DType.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <limits>
#include <random>

namespace {

using namespace dtc;
using namespace dtc::runtime::cuda;
using namespace dtc::attentiontest;

/// GPU 0's primary context, a stream and a workspace, as CudaDevice
/// gives its kernels.
class TestGpu {
public:
  ~TestGpu() {
    if (!api_)
      return;
    if (context.cudnnHandle)
      context.cudnn->cudnnDestroy(context.cudnnHandle);
    for (CUdeviceptr p : allocations_)
      api_->cuMemFree(p);
    if (context.stream)
      api_->cuStreamDestroy(context.stream);
    if (retained_)
      api_->cuDevicePrimaryCtxRelease(device_);
  }

  bool open(std::string &error) {
    if (!(api_ = driverApi(error)))
      return false;
    context.driver = api_;
    CUcontext primary = nullptr;
    if (!check(*api_, api_->cuInit(0), "cuInit", error) ||
        !check(*api_, api_->cuDeviceGet(&device_, 0), "cuDeviceGet", error) ||
        !check(*api_, api_->cuDevicePrimaryCtxRetain(&primary, device_), "retain", error))
      return false;
    retained_ = true;
    context.workspaceBytes = size_t(32) << 20;
    int major = 0, minor = 0;
    if (!check(*api_, api_->cuCtxSetCurrent(primary), "cuCtxSetCurrent", error) ||
        !check(*api_, api_->cuStreamCreate(&context.stream, CU_STREAM_NON_BLOCKING),
               "cuStreamCreate", error) ||
        !(context.workspace = allocate(context.workspaceBytes, error)) ||
        !check(*api_,
               api_->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                          device_),
               "compute capability", error) ||
        !check(*api_,
               api_->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                          device_),
               "compute capability", error))
      return false;
    context.sm = major * 10 + minor;
    // cuDNN, as the device opens it: its absence is the test's failure.
    return (context.cudnn = cudnnApi(error)) &&
           check(*context.cudnn, context.cudnn->cudnnCreate(&context.cudnnHandle), "cudnnCreate",
                 error);
  }

  CUdeviceptr allocate(size_t bytes, std::string &error) {
    CUdeviceptr p = 0;
    if (!check(*api_, api_->cuMemAlloc(&p, bytes ? bytes : 1), "cuMemAlloc", error))
      return 0;
    allocations_.push_back(p);
    return p;
  }

  bool upload(CUdeviceptr to, const std::vector<char> &bytes, std::string &error) {
    return check(*api_, api_->cuMemcpyHtoDAsync(to, bytes.data(), bytes.size(), context.stream),
                 "upload", error) &&
           check(*api_, api_->cuStreamSynchronize(context.stream), "upload", error);
  }

  bool download(std::vector<char> &bytes, CUdeviceptr from, std::string &error) {
    return check(*api_,
                 api_->cuMemcpyDtoHAsync(bytes.data(), from, bytes.size(), context.stream),
                 "download", error) &&
           check(*api_, api_->cuStreamSynchronize(context.stream), "running the kernel", error);
  }

  CudaContext context;

private:
  const DriverApi *api_ = nullptr;
  CUdevice device_ = 0;
  bool retained_ = false;
  std::vector<CUdeviceptr> allocations_;
};

using Kernels = CudaContext::AttentionKernels;

/// Runs `inst` on the GPU over `inputs` on `kernels`; the outputs' values.
std::vector<Values> runOnGpu(TestGpu &gpu, Kernels kernels, const plan::Instruction &inst,
                             const std::vector<plan::TensorType> &inTypes,
                             const std::vector<Values> &inputs,
                             const std::vector<plan::TensorType> &outTypes) {
  std::string error;
  CudaContext context = gpu.context;
  context.attentionKernels = kernels;
  AttentionChoice choice;
  std::unique_ptr<runtime::cpu::Kernel> kernel =
      makeAttentionKernel(context, inst, inTypes, outTypes, choice, error);
  EXPECT_NE(kernel, nullptr) << error;
  EXPECT_EQ(choice.cudnn, kernels == Kernels::Cudnn) << choice.cudnnWhy;
  if (!kernel)
    return {};
  std::vector<const void *> in;
  std::vector<void *> out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    CUdeviceptr p = gpu.allocate(size_t(plan::byteSize(inTypes[i])), error);
    EXPECT_TRUE(p && gpu.upload(p, bytesOf(inputs[i], inTypes[i].dtype()), error)) << error;
    in.push_back(reinterpret_cast<const void *>(uintptr_t(p)));
  }
  std::vector<CUdeviceptr> outPointers;
  for (const plan::TensorType &t : outTypes) {
    // Outputs start as NaN bytes, so a row the kernel misses shows.
    CUdeviceptr p = gpu.allocate(size_t(plan::byteSize(t)), error);
    EXPECT_TRUE(p && gpu.upload(p, std::vector<char>(size_t(plan::byteSize(t)), char(0xff)),
                                error))
        << error;
    outPointers.push_back(p);
    out.push_back(reinterpret_cast<void *>(uintptr_t(p)));
  }
  runtime::cpu::ThreadPool pool(1);
  EXPECT_TRUE(kernel->run(in.data(), out.data(), pool, error)) << error;
  std::vector<Values> results;
  for (size_t o = 0; o < outTypes.size(); ++o) {
    std::vector<char> bytes(size_t(plan::byteSize(outTypes[o])));
    EXPECT_TRUE(gpu.download(bytes, outPointers[o], error)) << error;
    results.push_back(valuesOf(bytes, outTypes[o].dtype()));
  }
  return results;
}

class GpuAttention : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (usableGpus(why) == 0)
      GTEST_SKIP() << "no usable NVIDIA GPU: " << why;
    ASSERT_TRUE(gpu_.open(why)) << why;
  }
  TestGpu gpu_;
};

/// Whether cuDNN's fused attention is meant to take `c` (CudnnAttention.h).
/// (Its bottom-right causal mask, Sq != Sk, takes no bias.)
bool cudnnTakes(const Case &c) {
  return c.dtype == plan::BF16 && c.d % 8 == 0 && c.dv % 8 == 0 && !(c.causal && c.sq > c.sk) &&
         !(c.causal && c.sq != c.sk && !c.bias.empty());
}

TEST_F(GpuAttention, ForwardAndBackwardAgainstADoubleReference) {
  for (Kernels kernels : {Kernels::Flash, Kernels::Cudnn})
    for (const Case &c : cases()) {
      if (kernels == Kernels::Cudnn && !cudnnTakes(c))
        continue;
      std::mt19937 rng(7);
      SCOPED_TRACE(c.name() + (kernels == Kernels::Cudnn ? " on cuDNN" : " on flash kernels"));
      bool bf16 = c.dtype == plan::BF16;
      double bound = bf16 ? 2e-2 : 1e-4, lseBound = bf16 ? 1e-3 : 1e-4;
      Problem p(c, rng);
      std::vector<Values> got =
          runOnGpu(gpu_, kernels, p.forward, p.forwardInputs(), p.forwardValues(),
                   {p.outType, p.lseType});
      ASSERT_EQ(got.size(), 2u);
      Reference r = forwardReference(c, p.scale, p.q, p.k, p.v, p.bias);
      std::string where;
      double outError = worstError(got[0], r.out, 0.0, where);
      EXPECT_LE(outError, bound) << "out, " << where;
      double lseError = worstError(got[1], r.lse, 1.0, where);
      EXPECT_LE(lseError, lseBound) << "lse, " << where;

      p.fromReference(c, r);
      std::vector<Values> grads = runOnGpu(gpu_, kernels, p.backward, p.backwardInputs(),
                                           p.backwardValues(), p.qkv);
      ASSERT_EQ(grads.size(), 3u);
      backwardReference(c, p.scale, p.q, p.k, p.v, p.out, p.lse, p.dout, r, p.bias);
      double dqError = worstError(grads[0], r.dq, 0.0, where);
      EXPECT_LE(dqError, bound) << "grad_q, " << where;
      std::string whereK, whereV;
      double dkError = worstError(grads[1], r.dk, 0.0, whereK);
      EXPECT_LE(dkError, bound) << "grad_k, " << whereK;
      double dvError = worstError(grads[2], r.dv, 0.0, whereV);
      EXPECT_LE(dvError, bound) << "grad_v, " << whereV;
      std::printf("attention %s on %s: worst relative error out %.2g lse %.2g grad_q %.2g "
                  "grad_k %.2g grad_v %.2g\n",
                  c.name().c_str(), kernels == Kernels::Cudnn ? "cuDNN" : "flash kernels",
                  outError, lseError, dqError, dkError, dvError);
    }
}

// q, k, v and the output as [..., S, H, D] (bshd, the heads their last
// leading dim): the kernels read and write the rows strided; each result,
// moved back, is the reference's.
TEST_F(GpuAttention, HeadsAfterTheSequenceAgainstADoubleReference) {
  for (Kernels kernels : {Kernels::Flash, Kernels::Cudnn})
    for (const Case &c : cases()) {
      if (kernels == Kernels::Cudnn && !cudnnTakes(c))
        continue;
      std::mt19937 rng(9);
      SCOPED_TRACE(c.name() + " bshd" +
                   (kernels == Kernels::Cudnn ? " on cuDNN" : " on flash kernels"));
      double bound = c.dtype == plan::BF16 ? 2e-2 : 1e-4;
      Problem p(c, rng);
      BshdProblem t(p, c);
      const int64_t h = t.heads;
      std::vector<Values> got = runOnGpu(gpu_, kernels, t.forward, t.forwardInputs(),
                                         t.forwardValues(), {t.outType, t.lseType});
      ASSERT_EQ(got.size(), 2u);
      Reference r = forwardReference(c, p.scale, p.q, p.k, p.v, p.bias);
      std::string where;
      EXPECT_LE(worstError(swapHeads(got[0], h, c.sq, c.dv, true), r.out, 0.0, where), bound)
          << "out, " << where;
      EXPECT_LE(worstError(got[1], r.lse, 1.0, where), c.dtype == plan::BF16 ? 1e-3 : 1e-4)
          << "lse, " << where;
      p.fromReference(c, r);
      t.withOutOf(p, c);
      std::vector<Values> grads = runOnGpu(gpu_, kernels, t.backward, t.backwardInputs(),
                                           t.backwardValues(), t.qkv);
      ASSERT_EQ(grads.size(), 3u);
      backwardReference(c, p.scale, p.q, p.k, p.v, p.out, p.lse, p.dout, r, p.bias);
      EXPECT_LE(worstError(swapHeads(grads[0], h, c.sq, c.d, true), r.dq, 0.0, where), bound)
          << "grad_q, " << where;
      EXPECT_LE(worstError(swapHeads(grads[1], h, c.sk, c.d, true), r.dk, 0.0, where), bound)
          << "grad_k, " << where;
      EXPECT_LE(worstError(swapHeads(grads[2], h, c.sk, c.dv, true), r.dv, 0.0, where), bound)
          << "grad_v, " << where;
    }
}

// q, k and v pieces of one packed [..., S, 3, H, D] buffer (Attention.
// packed), the backward's gradients written into one: each piece, moved
// back, is the reference's.
TEST_F(GpuAttention, PackedPiecesAgainstADoubleReference) {
  int run = 0;
  for (Kernels kernels : {Kernels::Flash, Kernels::Cudnn})
    for (const Case &c : cases()) {
      if ((kernels == Kernels::Cudnn && !cudnnTakes(c)) || c.sq != c.sk || c.d != c.dv)
        continue;
      std::mt19937 rng(5);
      SCOPED_TRACE(c.name() + " packed" +
                   (kernels == Kernels::Cudnn ? " on cuDNN" : " on flash kernels"));
      double bound = c.dtype == plan::BF16 ? 2e-2 : 1e-4;
      Problem p(c, rng);
      BshdProblem t(p, c);
      PackedProblem k(t, c);
      const int64_t h = t.heads;
      std::vector<Values> got = runOnGpu(gpu_, kernels, k.forward, k.forwardInputs(),
                                         k.forwardValues(), {k.outType, k.lseType});
      ASSERT_EQ(got.size(), 2u);
      Reference r = forwardReference(c, p.scale, p.q, p.k, p.v, p.bias);
      std::string where;
      EXPECT_LE(worstError(swapHeads(got[0], h, c.sq, c.dv, true), r.out, 0.0, where), bound)
          << "out, " << where;
      EXPECT_LE(worstError(got[1], r.lse, 1.0, where), c.dtype == plan::BF16 ? 1e-3 : 1e-4)
          << "lse, " << where;
      p.fromReference(c, r);
      k.withOutOf(p, c);
      std::vector<Values> grads = runOnGpu(gpu_, kernels, k.backward, k.backwardInputs(),
                                           k.backwardValues(), {k.packedType});
      ASSERT_EQ(grads.size(), 1u);
      backwardReference(c, p.scale, p.q, p.k, p.v, p.out, p.lse, p.dout, r, p.bias);
      const std::vector<double> *want[] = {&r.dq, &r.dk, &r.dv};
      for (int piece = 0; piece < 3; ++piece) {
        Values x = swapHeads(pieceOf(grads[0], piece, k.width), h, c.sq, c.d, true);
        EXPECT_LE(worstError(x, *want[piece], 0.0, where), bound)
            << "gradient " << piece << ", " << where;
      }
      ++run;
    }
  EXPECT_GT(run, 0);
}

TEST_F(GpuAttention, WhatTheKernelsDoNotCoverIsRefusedWithWhy) {
  plan::Instruction inst;
  inst.mutable_attention()->set_scale(0.1);
  Case c{{2}, 16, 16, 160, 64, false, plan::F32};
  std::string why;
  AttentionChoice choice;
  EXPECT_EQ(makeAttentionKernel(gpu_.context, inst,
                                {c.type({16, 160}, plan::F32), c.type({16, 160}, plan::F32),
                                 c.type({16, 64}, plan::F32)},
                                {c.type({16, 64}, plan::F32), c.type({16}, plan::F32)}, choice,
                                why),
            nullptr);
  EXPECT_NE(why.find("at most 128"), std::string::npos) << why;
  // The backward's Delta must fit the workspace.
  plan::Instruction backward;
  backward.mutable_attention_backward()->set_scale(0.1);
  CudaContext small = gpu_.context;
  small.workspaceBytes = 1024;
  Case b{{4}, 512, 512, 64, 64, false, plan::F32};
  plan::TensorType t = b.type({512, 64}, plan::F32), l = b.type({512}, plan::F32);
  EXPECT_EQ(makeAttentionKernel(small, backward, {t, t, t, t, l, t}, {t, t, t}, choice, why),
            nullptr);
  EXPECT_NE(why.find("scratch"), std::string::npos) << why;
  // f32 is not cuDNN's: required, it is refused with why.
  small.attentionKernels = Kernels::Cudnn;
  small.workspaceBytes = gpu_.context.workspaceBytes;
  EXPECT_EQ(makeAttentionKernel(small, backward, {t, t, t, t, l, t}, {t, t, t}, choice, why),
            nullptr);
  EXPECT_NE(why.find("bf16"), std::string::npos) << why;
}

} // namespace
