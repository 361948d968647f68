//===- KernelCheck.h - a kernel's result against the CPU backend's -*- C++ -*-===//
//
// What the generated-kernel tests (host JIT, GPU) share: an instruction's
// operands filled with random values (indices in range, some inputs kept
// positive), the CPU backend's result, and the comparison: fp32 within a
// relative error, bf16 within rounding steps, moves and integers exact.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_TESTS_UNIT_KERNELCHECK_H
#define DTC_TESTS_UNIT_KERNELCHECK_H

#include "plan.pb.h"

#include <map>
#include <random>
#include <string>
#include <vector>

namespace dtc::test {

int64_t bytesOf(plan::DType t);
int64_t count(const plan::TensorType &t);

/// An instruction's buffers: their types, random inputs, the CPU
/// backend's outputs (every one: attention's and layer norm's gradient
/// have several).
struct KernelRun {
  std::vector<plan::TensorType> inTypes, outTypes;
  std::vector<std::vector<char>> inputs, expected;
};

/// Fills `run` for instruction `inst` of `program` (inputs listed in
/// `positive` above 0, index inputs in range or, with skip_outside, past
/// it on either side) and runs the CPU backend's kernel; false (a test
/// failure added) when it cannot.
bool runOnCpu(const plan::RankProgram &program, const plan::Instruction &inst,
              const std::vector<int> &positive, std::mt19937 &rng, KernelRun &run,
              std::map<uint32_t, std::vector<char>> *shared = nullptr);

/// A launch batch (GpuKernel.batch) ending at instruction `last` of
/// `program`: each of its instructions run as runOnCpu does (a buffer
/// several read given the same data), `run` holding the batch's operands
/// as its kernel takes them: the members' inputs in order, then their
/// outputs.
bool runBatchOnCpu(const plan::RankProgram &program, int last, std::mt19937 &rng,
                   KernelRun &run);

/// `actual` (output `output` of another implementation) against its
/// run.expected:
/// the worst relative error of fp32 results (0.5 the smallest magnitude
/// divided by); of bf16 results, scaled so that one bf16 rounding step
/// (2^-7 relative) counts as 1e-4; moves, integers and bools 0 when equal,
/// -1 when not; infinity when one is finite and the other not.
double compareOutput(const plan::Instruction &inst, const KernelRun &run,
                     const std::vector<char> &actual, size_t output = 0);

} // namespace dtc::test

#endif // DTC_TESTS_UNIT_KERNELCHECK_H
