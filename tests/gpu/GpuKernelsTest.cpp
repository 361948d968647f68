//===- GpuKernelsTest.cpp - every GPU kernel against the CPU backend ------===//
//
// On a machine with an NVIDIA GPU: each instruction of GPT training steps
// (fp32 on one device; bf16 split over dp 2 x tp 2), compiled here in the
// process, against the CPU backend (PlanKernelCheck.h). Without a GPU every
// test reports itself skipped, with the reason.
//
//===----------------------------------------------------------------------===//
#include "compiler/Pipeline.h"
#include "frontends/gpt/GptGenerator.h"
#include "runtime/cuda/CudaDriver.h"
#include "tests/gpu/PlanKernelCheck.h"
#include "tools/Registration.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>


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

/// Checks each instruction of rank 0's program of the GPT step compiled at
/// `precision` over dp x tp on the GPU against the CPU.
void checkEveryInstruction(const std::string &precision, int64_t dp, int64_t tp,
                           const char *what) {
  std::string why;
  if (runtime::cuda::usableGpus(why) == 0)
    GTEST_SKIP() << "no usable NVIDIA GPU: " << why;
  test::checkPlanKernels(gptPlan(precision, dp, tp), what, 21);
}

TEST(Gpu, EveryInstructionOfAnFp32GptTrainingStep) {
  checkEveryInstruction("fp32", 1, 1, "fp32 GPT step");
}

TEST(Gpu, EveryInstructionOfABf16GptStepSplitOverDpAndTp) {
  checkEveryInstruction("bf16", 2, 2, "bf16 dp2 x tp2 GPT step");
}

} // namespace
