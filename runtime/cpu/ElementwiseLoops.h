//===- ElementwiseLoops.h - one node over a block ---------------*- C++ -*-===//
//
// Internal to the elementwise kernel: a Step is one node of the expression
// as a block evaluates it, and the functions here choose the compiled loops
// a step runs (ElementwiseLoops.cpp: each loop for every compute class and
// instruction set).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CPU_ELEMENTWISELOOPS_H
#define DTC_RUNTIME_CPU_ELEMENTWISELOOPS_H

#include "plan.pb.h"

#include <cstdint>

namespace dtc::runtime::cpu::elementwise {

struct Step;
/// Evaluates one node over `n` elements: `args` are its arguments' blocks.
using StepFn = void (*)(const Step &step, const void *const *args, void *out, int64_t n);
/// Brings int64 values into a narrower integer dtype's range (wraps).
using NarrowFn = void (*)(void *values, int64_t n);
/// Reads `n` elements of an input from element `offset` (or element
/// `offset` n times, when `splat`) into a block of its compute type.
using LoadFn = void (*)(const void *src, int64_t offset, bool splat, void *dst, int64_t n);
/// Writes `n` values of the last node to the output from element `offset`.
using StoreFn = void (*)(const void *src, void *dst, int64_t offset, int64_t n);

enum class StepKind : uint8_t {
  InputInPlace, // same shape as the output and of the compute type: no copy
  InputRepeated, // one row repeated (a bias): tiled once per thread, no copy
  InputLoad,
  Compute,
};

struct Step {
  StepKind kind = StepKind::Compute;
  int node = 0;
  int args[3] = {0, 0, 0};
  int slot = -1; // scratch block holding the result
  StepFn fn = nullptr;
  NarrowFn narrow = nullptr;
  // CONSTANT's value, CLIP's bounds, in the node's compute class.
  double param[2] = {0, 0};
  int64_t intParam[2] = {0, 0};
  // INPUT
  int input = 0;
  LoadFn load = nullptr;
};

/// The loop for node `i` of `expr`, which is not an INPUT.
StepFn stepFnFor(const plan::Elementwise &expr, int i);

/// The wrap into `dtype` after an op whose int64 result may leave its range;
/// for 16-bit floats, the rounding of every node's float result. Null where
/// nothing is needed.
NarrowFn narrowFnFor(plan::ExprOp op, plan::DType dtype);

/// The load of an input of `dtype` into its compute class.
LoadFn loadFnFor(plan::DType dtype);

/// The store of the last node's values into an output of `dtype`.
StoreFn storeFnFor(plan::DType dtype);

} // namespace dtc::runtime::cpu::elementwise

#endif // DTC_RUNTIME_CPU_ELEMENTWISELOOPS_H
