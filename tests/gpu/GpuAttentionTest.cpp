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
// The checks and their bounds: tests/unit/AttentionChecks.h.
//
// Links no MLIR (in dtc-gpu-plan-tests, which the GPU bundle carries).
// Without a GPU every test reports itself skipped, with the reason.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ThreadPool.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaKernels.h"
#include "tests/unit/AttentionChecks.h"

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

/// Each case in `layout` on both kernels (cuDNN's where it is meant to
/// take the case): AttentionChecks.h's checks; how many ran.
int checkBoth(TestGpu &gpu, Layout layout, unsigned seed) {
  int ran = 0;
  for (Kernels kernels : {Kernels::Flash, Kernels::Cudnn})
    for (const Case &c : cases()) {
      if ((kernels == Kernels::Cudnn && !cudnnTakes(c)) ||
          ((layout == Layout::Packed || layout == Layout::Interleaved) && !packable(c)))
        continue;
      const char *on = kernels == Kernels::Cudnn ? "cuDNN" : "flash kernels";
      const char *in = layout == Layout::HeadsFirst ? ""
                       : layout == Layout::Bshd     ? " bshd"
                       : layout == Layout::Packed   ? " packed"
                                                    : " packed interleaved";
      SCOPED_TRACE(c.name() + in + " on " + on);
      Errors e = checkAttention(
          c, layout, seed,
          [&](const plan::Instruction &inst, const std::vector<plan::TensorType> &inTypes,
              const std::vector<Values> &inputs, const std::vector<plan::TensorType> &outTypes) {
            return runOnGpu(gpu, kernels, inst, inTypes, inputs, outTypes);
          });
      std::printf("attention %s%s on %s: worst relative error out %.2g lse %.2g grad_q %.2g "
                  "grad_k %.2g grad_v %.2g\n",
                  c.name().c_str(), in, on, e.out, e.lse, e.dq, e.dk, e.dv);
      ++ran;
    }
  return ran;
}

TEST_F(GpuAttention, ForwardAndBackwardAgainstADoubleReference) {
  EXPECT_GT(checkBoth(gpu_, Layout::HeadsFirst, 7), 0);
}

// q, k, v and the output as [..., S, H, D] (bshd, the heads their last
// leading dim): the kernels read and write the rows strided; each result,
// moved back, is the reference's.
TEST_F(GpuAttention, HeadsAfterTheSequenceAgainstADoubleReference) {
  EXPECT_GT(checkBoth(gpu_, Layout::Bshd, 9), 0);
}

// q, k and v pieces of one packed [..., S, 3, H, D] buffer (Attention.
// packed), the backward's gradients written into one: each piece, moved
// back, is the reference's.
TEST_F(GpuAttention, PackedPiecesAgainstADoubleReference) {
  EXPECT_GT(checkBoth(gpu_, Layout::Packed, 5), 0);
}

// Packed as [..., S, H, 3, D] (Attention.interleaved, Megatron-LM's
// layout, which tensor-parallel plans of packed projections use).
TEST_F(GpuAttention, InterleavedPiecesAgainstADoubleReference) {
  EXPECT_GT(checkBoth(gpu_, Layout::Interleaved, 3), 0);
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
