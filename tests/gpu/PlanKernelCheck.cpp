//===- PlanKernelCheck.cpp -------------------------------------------------===//
#include "tests/gpu/PlanKernelCheck.h"

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/cuda/CudaDevice.h"
#include "tests/unit/KernelCheck.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

namespace dtc::test {

void checkPlanKernels(const plan::Plan &plan, const char *what, int minGenerated) {
  std::string error;
  auto device = runtime::cuda::openCudaDevice(0, error);
  ASSERT_TRUE(device) << error;
  ASSERT_TRUE(device->load(plan, error)) << error;
  runtime::cpu::ThreadPool pool(1);
  std::mt19937 rng(5);
  const plan::RankProgram &program = plan.ranks(0);
  int generated = 0, library = 0, staged = 0;
  double worst = 0;
  int batches = 0;
  for (int i = 0; i < program.instructions_size(); ++i) {
    const plan::Instruction &inst = program.instructions(i);
    if (inst.has_collective() || inst.has_send() || inst.has_recv())
      continue; // they need the other ranks (tests/gpu/models.test runs them)
    if (inst.gpu().batched())
      continue; // a later instruction's launch runs it
    SCOPED_TRACE(inst.DebugString().substr(0, 200));
    // A launch batch's kernel runs on all its instructions' operands.
    bool batch = inst.gpu().batch() > 1;
    batches += batch;
    KernelRun run;
    ASSERT_TRUE(batch ? runBatchOnCpu(program, i, rng, run)
                      : runOnCpu(program, inst, {}, rng, run));
    // The operands on the device, one allocation each, 64 bytes in: as
    // aligned as a plan's buffers in dtc run's arena (64 bytes), not as an
    // allocation's start (256, which cuBLASLt assumes unless told).
    constexpr size_t kIn = 64;
    std::vector<const void *> in;
    std::vector<void *> out;
    for (size_t i = 0; i < run.inputs.size(); ++i) {
      char *at = device->allocate(kIn + std::max<size_t>(run.inputs[i].size(), 1), error);
      ASSERT_TRUE(at) << error;
      at += kIn;
      ASSERT_TRUE(device->upload(at, run.inputs[i].data(), run.inputs[i].size(), error)) << error;
      in.push_back(at);
    }
    for (const plan::TensorType &t : run.outTypes) {
      size_t bytes = size_t(count(t) * bytesOf(t.dtype()));
      char *at = device->allocate(kIn + std::max<size_t>(bytes, 1), error);
      ASSERT_TRUE(at) << error;
      at += kIn;
      ASSERT_TRUE(device->zero(at, bytes, error)) << error;
      out.push_back(at);
    }
    auto host =
        batch ? nullptr : runtime::cpu::makeKernel(inst, run.inTypes, run.outTypes, error);
    ASSERT_TRUE(host || batch) << error;
    std::string before = device->hostStagedSummary();
    auto kernel = device->kernelFor(inst, run.inTypes, run.outTypes, std::move(host),
                                     plan::Stream::Compute, error);
    ASSERT_TRUE(kernel) << error;
    bool onHost = device->hostStagedSummary() != before;
    ASSERT_TRUE(kernel->run(in.data(), out.data(), pool, error) && device->synchronize(error))
        << error;
    // Every output (attention's lse, layer norm's statistics).
    double w = 0;
    for (size_t o = 0; o < run.expected.size() && w >= 0; ++o) {
      std::vector<char> actual(run.expected[o].size());
      ASSERT_TRUE(device->download(actual.data(), static_cast<char *>(out[o]), actual.size(),
                                   error))
          << error;
      double each = compareOutput(inst, run, actual, o);
      w = each < 0 ? each : std::max(w, each);
    }
    bool libraryKernel = (inst.has_matmul() || inst.has_conv2d() ||
                          inst.has_conv2d_backward_input() || inst.has_conv2d_backward_weight()) &&
                         !onHost;
    // The flash attention kernels round P and dS to bf16 for the tensor
    // cores, where the CPU's keep them f32: a few rounding steps more.
    bool attention = (inst.has_attention() || inst.has_attention_backward()) && !onHost;
    EXPECT_GE(w, 0) << "the integer, bool or moved results differ";
    EXPECT_LE(w, libraryKernel ? 2e-4 : attention ? 4e-4 : 1e-4);
    worst = std::max(worst, w);
    generated += inst.has_gpu();
    library += libraryKernel;
    staged += onHost;
  }
  std::printf("%s on %s: %d generated kernels (%d of them launch batches), %d cuBLASLt "
              "products and cuDNN convolutions, %d on the host (%s); worst relative error "
              "%.2e\n",
              what, device->name().c_str(), generated, batches, library, staged,
              device->hostStagedSummary().c_str(), worst);
  EXPECT_GE(generated, minGenerated);
}

} // namespace dtc::test
