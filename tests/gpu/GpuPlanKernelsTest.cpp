//===- GpuPlanKernelsTest.cpp - plan files' GPU kernels against the CPU ---===//
//
// dtc-gpu-plan-tests: PlanKernelCheck.h on each plan file named in
// $DTC_GPU_PLANS (comma-separated; compiled with --backend cuda), for a
// GPU machine without dtc's build: it links no MLIR, and
// scripts/gpu_bundle.sh carries it with the plans. Skipped, with the
// reason, without a GPU or without plans.
//
//===----------------------------------------------------------------------===//
#include "plan/PlanLoader.h"
#include "runtime/cuda/CudaDriver.h"
#include "tests/gpu/PlanKernelCheck.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>

TEST(GpuPlans, EveryInstructionOfEachPlan) {
  const char *list = std::getenv("DTC_GPU_PLANS");
  if (!list || !*list)
    GTEST_SKIP() << "no plans: set DTC_GPU_PLANS to plan files compiled with --backend cuda";
  std::string why;
  if (dtc::runtime::cuda::usableGpus(why) == 0)
    GTEST_SKIP() << "no usable NVIDIA GPU: " << why;
  std::stringstream names(list);
  for (std::string path; std::getline(names, path, ',');) {
    SCOPED_TRACE(path);
    dtc::plan::Plan plan;
    std::string error;
    ASSERT_TRUE(dtc::plan::loadPlan(path, plan, error)) << error;
    dtc::test::checkPlanKernels(plan, path.c_str(), 1);
  }
}
