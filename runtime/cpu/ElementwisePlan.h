//===- ElementwisePlan.h - a fused expression prepared for its buffers -*- C++ -*-===//
//
// Internal to the elementwise kernel. planElementwise (ElementwisePlan.cpp)
// checks an expression against its buffer types and prepares it: the
// merged output dims, how a block reads each input, and the steps a block
// runs, each with its compiled loop. ElementwiseKernel.cpp runs the result.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CPU_ELEMENTWISEPLAN_H
#define DTC_RUNTIME_CPU_ELEMENTWISEPLAN_H

#include "runtime/cpu/ElementwiseLoops.h"
#include "runtime/cpu/ElementwiseTypes.h"

#include "plan.pb.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dtc::runtime::cpu::elementwise {

/// Output elements per block: the scratch of a dozen live nodes (8 bytes
/// each) stays within L2, and per-block overhead is small against it.
inline constexpr int64_t kBlock = 1024;

/// How a block reads one instruction input.
struct InputAccess {
  plan::DType dtype;
  int64_t bytes;       // per element
  Compute compute;
  bool full = false;   // same shape as the output: element i is output element i
  std::vector<int64_t> strides; // per merged output dim; 0 where it broadcasts
};

/// Bytes per element of the input once loaded.
inline int64_t computeBytes(const InputAccess &in) { return in.compute == Compute::F32 ? 4 : 8; }

/// How a block writes one output.
struct OutputAccess {
  int node = 0;          // the expression node it takes
  int64_t bytes = 0;     // per element
  bool storeInPlace = false; // the node's loop may write the output directly
  StoreFn store = nullptr;
};

/// What planElementwise prepares and the kernel runs.
struct ElementwisePlan {
  std::vector<int64_t> dims_;        // merged output dims, inner last; at least one
  int64_t total_ = 0;
  std::vector<InputAccess> inputs_;
  std::vector<OutputAccess> outputs_; // all of one shape
  std::vector<Step> uniformSteps_;   // the same for every block: once per thread
  std::vector<Step> blockSteps_;
  int nodes_ = 0;
  int slots_ = 0;
  int64_t grain_ = 1;
};

/// Checks `expr` against the buffer types (inputs broadcast to the outputs'
/// shape, NumPy rules) and prepares it; null, with `error` saying what is
/// wrong, when the expression or a type is not supported.
std::unique_ptr<ElementwisePlan> planElementwise(const plan::Elementwise &expr,
                                                 const std::vector<plan::TensorType> &inputTypes,
                                                 const std::vector<plan::TensorType> &outputTypes,
                                                 std::string &error);

} // namespace dtc::runtime::cpu::elementwise

#endif // DTC_RUNTIME_CPU_ELEMENTWISEPLAN_H
