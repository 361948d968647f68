//===- GpuKernelsTest.cpp - every GPU kernel against the CPU backend ------===//
//
// On a machine with an NVIDIA GPU: each instruction of GPT training steps
// (fp32 on one device; bf16 split over dp 2 x tp 2) as `dtc run --backend
// cuda` runs it (a generated kernel, cuBLASLt, or the CPU kernel on host
// copies) on random inputs, against the CPU backend's result: fp32 within
// 1e-4 relative, bf16 within one rounding step (two for cuBLASLt's
// products, whose accumulation order differs), moves and integers exact.
// Without a GPU every test reports itself skipped, with the reason.
//
//===----------------------------------------------------------------------===//
#include "compiler/Pipeline.h"
#include "frontends/gpt/GptGenerator.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/cuda/CudaDevice.h"
#include "runtime/cuda/CudaDriver.h"
#include "tests/unit/KernelCheck.h"
#include "tools/Registration.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace {

using namespace dtc;

/// A plan of the generated GPT's training step, compiled for --backend cuda.
plan::Plan gptPlan(const std::string &precision, int64_t dp, int64_t tp) {
  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  registerAllPasses();
  mlir::MLIRContext context(registry);
  std::string error;
  auto config = gpt::parseGptSpec("gpt:layers=2,hidden=64,heads=4,seq=16,vocab=96,batch=4", error);
  EXPECT_TRUE(config) << error;
  mlir::OwningOpRef<mlir::ModuleOp> module = gpt::buildGpt(context, *config);
  CompileOptions options;
  options.training = TrainingOptions{};
  options.training->precision = precision;
  options.training->recompute = "none";
  options.parallel.backend = "cuda";
  options.parallel.dataParallel = dp;
  options.parallel.tensorParallel = tp;
  options.parallel.zero = 0;
  plan::Plan plan;
  EXPECT_TRUE(mlir::succeeded(compileToPlan(*module, plan, options)));
  return plan;
}

/// Runs each instruction of rank 0's program of the GPT step compiled at
/// `precision` over dp x tp on the GPU and on the CPU.
void checkEveryInstruction(const std::string &precision, int64_t dp, int64_t tp,
                           const char *what) {
  std::string why;
  if (runtime::cuda::usableGpus(why) == 0)
    GTEST_SKIP() << "no usable NVIDIA GPU: " << why;
  plan::Plan plan = gptPlan(precision, dp, tp);
  std::string error;
  auto device = runtime::cuda::openCudaDevice(0, error);
  ASSERT_TRUE(device) << error;
  ASSERT_TRUE(device->load(plan, error)) << error;
  runtime::cpu::ThreadPool pool(1);
  std::mt19937 rng(5);
  const plan::RankProgram &program = plan.ranks(0);
  int generated = 0, library = 0, staged = 0;
  double worst = 0;
  for (const plan::Instruction &inst : program.instructions()) {
    if (inst.has_collective() || inst.has_send() || inst.has_recv())
      continue; // they need the other ranks (tests/gpu/models.test runs them)
    SCOPED_TRACE(inst.DebugString().substr(0, 200));
    test::KernelRun run;
    ASSERT_TRUE(test::runOnCpu(program, inst, {}, rng, run));
    // The operands on the device, one allocation each.
    std::vector<const void *> in;
    std::vector<void *> out;
    for (size_t i = 0; i < run.inputs.size(); ++i) {
      char *at = device->allocate(std::max<size_t>(run.inputs[i].size(), 1), error);
      ASSERT_TRUE(at && device->upload(at, run.inputs[i].data(), run.inputs[i].size(), error))
          << error;
      in.push_back(at);
    }
    for (const plan::TensorType &t : run.outTypes) {
      size_t bytes = size_t(test::count(t) * test::bytesOf(t.dtype()));
      char *at = device->allocate(std::max<size_t>(bytes, 1), error);
      ASSERT_TRUE(at && device->zero(at, bytes, error)) << error;
      out.push_back(at);
    }
    auto host = runtime::cpu::makeKernel(inst, run.inTypes, run.outTypes, error);
    ASSERT_TRUE(host) << error;
    std::string before = device->hostStagedSummary();
    auto kernel = device->kernelFor(inst, run.inTypes, run.outTypes, std::move(host),
                                     dtc::plan::Stream::Compute, error);
    ASSERT_TRUE(kernel) << error;
    bool onHost = device->hostStagedSummary() != before;
    ASSERT_TRUE(kernel->run(in.data(), out.data(), pool, error) && device->synchronize(error))
        << error;
    std::vector<char> actual(run.expected.size());
    ASSERT_TRUE(device->download(actual.data(), static_cast<char *>(out[0]), actual.size(), error))
        << error;
    double w = test::compareOutput(inst, run, actual);
    bool gemm = inst.has_matmul() && !onHost;
    EXPECT_GE(w, 0) << "the integer, bool or moved results differ";
    EXPECT_LE(w, gemm ? 2e-4 : 1e-4);
    worst = std::max(worst, w);
    generated += inst.has_gpu();
    library += gemm;
    staged += onHost;
  }
  std::printf("%s on %s: %d generated kernels, %d cuBLASLt products, %d on the host (%s); "
              "worst relative error %.2e\n",
              what, device->name().c_str(), generated, library, staged,
              device->hostStagedSummary().c_str(), worst);
  EXPECT_GT(generated, 20);
}

TEST(Gpu, EveryInstructionOfAnFp32GptTrainingStep) {
  checkEveryInstruction("fp32", 1, 1, "fp32 GPT step");
}

TEST(Gpu, EveryInstructionOfABf16GptStepSplitOverDpAndTp) {
  checkEveryInstruction("bf16", 2, 2, "bf16 dp2 x tp2 GPT step");
}

} // namespace
