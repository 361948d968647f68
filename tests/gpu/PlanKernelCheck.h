//===- PlanKernelCheck.h - a plan's every GPU kernel against the CPU -*- C++ -*-===//
//
// What the GPU tests share: each instruction of a plan's first program as
// `dtc run --backend cuda` runs it (a generated kernel, cuBLASLt, cuDNN,
// or the CPU kernel on host copies) on random inputs, against the CPU
// backend's result: fp32 within 1e-4 relative (2e-4 for the libraries'
// products and convolutions, whose accumulation order differs), bf16
// within one rounding step (two for the libraries'), moves and integers
// exact. Links no MLIR: dtc-gpu-plan-tests runs it on plan files, on a GPU
// machine without dtc's build (scripts/gpu_bundle.sh).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_TESTS_GPU_PLANKERNELCHECK_H
#define DTC_TESTS_GPU_PLANKERNELCHECK_H

#include "plan.pb.h"

namespace dtc::test {

/// Checks every instruction of `plan`'s first program on GPU 0 (gtest
/// failures), prints a line naming `what` with the counts and the worst
/// error; expects at least `minGenerated` generated kernels. The caller
/// skips when there is no GPU.
void checkPlanKernels(const plan::Plan &plan, const char *what, int minGenerated);

} // namespace dtc::test

#endif // DTC_TESTS_GPU_PLANKERNELCHECK_H
