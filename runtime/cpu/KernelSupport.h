//===- KernelSupport.h - shared pieces of the CPU kernels -------*- C++ -*-===//
//
// Internal to runtime/cpu: the factory of each kernel family, and the small
// things they all use (shapes as vectors, messages, a kernel made from a
// lambda, the threading grain).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CPU_KERNELSUPPORT_H
#define DTC_RUNTIME_CPU_KERNELSUPPORT_H

#include "runtime/cpu/Kernels.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>
#include <vector>

namespace dtc::runtime::cpu {

using Shape = std::vector<int64_t>;

/// Walks the positions of a row-major index space in order (the first
/// `rank` of `sizes`), keeping their offset sum(position[d] * strides[d]):
/// an add or two a step, where finding each position's offset anew takes
/// a division per dim (which cost more than a short row's own work in the
/// reductions and the elementwise loads that walk rows).
class Odometer {
public:
  /// Starts at position `at` (row-major) of the space; reuses its storage.
  void start(const int64_t *sizes, const int64_t *strides, size_t rank, int64_t at) {
    sizes_ = sizes, strides_ = strides, offset_ = 0;
    counters_.resize(rank);
    for (size_t d = rank; d-- > 0;) {
      counters_[d] = at % sizes[d];
      offset_ += counters_[d] * strides[d];
      at /= sizes[d];
    }
  }
  int64_t offset() const { return offset_; }
  /// The next position.
  void next() {
    for (size_t d = counters_.size(); d-- > 0;) {
      offset_ += strides_[d];
      if (++counters_[d] < sizes_[d])
        return;
      offset_ -= counters_[d] * strides_[d];
      counters_[d] = 0;
    }
  }

private:
  const int64_t *sizes_ = nullptr, *strides_ = nullptr;
  Shape counters_;
  int64_t offset_ = 0;
};

/// The buffer types an instruction is prepared with; most kernels have one
/// output (`output`), attention's have more (`outputs`, `output` the first).
struct KernelTypes {
  const std::vector<plan::TensorType> &inputs;
  const plan::TensorType &output;
  /// Per input, its bytes when they never change (parameters, constants),
  /// else null; kernels may transform such inputs once (weight reorders).
  const std::vector<const void *> &constants;
  const std::vector<plan::TensorType> &outputs;

  const void *constant(size_t input) const {
    return input < constants.size() ? constants[input] : nullptr;
  }
};

/// A kernel family's factory. Messages it leaves in `error` lack the op
/// name; makeKernel prefixes it.
using KernelFactory = std::unique_ptr<Kernel> (*)(const plan::Instruction &,
                                                  const KernelTypes &, std::string &);

// MatMulKernels.cpp: the ops that go through sgemm.
std::unique_ptr<Kernel> makeMatMulKernel(const plan::Instruction &, const KernelTypes &,
                                         std::string &);
// ConvKernel.cpp: oneDNN's convolution, or im2col and sgemm, or direct.
std::unique_ptr<Kernel> makeConv2DKernel(const plan::Instruction &, const KernelTypes &,
                                         std::string &);
// ConvBackwardKernels.cpp: the gradients, im2col's transposed GEMMs.
std::unique_ptr<Kernel> makeAttentionKernel(const plan::Instruction &, const KernelTypes &,
                                            std::string &);
std::unique_ptr<Kernel> makeAttentionBackwardKernel(const plan::Instruction &,
                                                    const KernelTypes &, std::string &);
std::unique_ptr<Kernel> makeConv2DBackwardInputKernel(const plan::Instruction &,
                                                      const KernelTypes &, std::string &);
std::unique_ptr<Kernel> makeConv2DBackwardWeightKernel(const plan::Instruction &,
                                                       const KernelTypes &, std::string &);
// PoolKernel.cpp
std::unique_ptr<Kernel> makePool2DKernel(const plan::Instruction &, const KernelTypes &,
                                         std::string &);
std::unique_ptr<Kernel> makePool2DBackwardKernel(const plan::Instruction &,
                                                 const KernelTypes &, std::string &);
// NormKernels.cpp
std::unique_ptr<Kernel> makeSoftmaxKernel(const plan::Instruction &, const KernelTypes &,
                                          std::string &);
std::unique_ptr<Kernel> makeLayerNormBackwardKernel(const plan::Instruction &,
                                                    const KernelTypes &, std::string &);
std::unique_ptr<Kernel> makeLayerNormKernel(const plan::Instruction &, const KernelTypes &,
                                            std::string &);
std::unique_ptr<Kernel> makeBatchNormKernel(const plan::Instruction &, const KernelTypes &,
                                            std::string &);
std::unique_ptr<Kernel> makeCrossEntropyKernel(const plan::Instruction &, const KernelTypes &,
                                               std::string &);
// RotaryKernel.cpp
std::unique_ptr<Kernel> makeRotaryKernel(const plan::Instruction &, const KernelTypes &,
                                         std::string &);
// ReduceKernel.cpp
std::unique_ptr<Kernel> makeReduceKernel(const plan::Instruction &, const KernelTypes &,
                                         std::string &);
// DataMovementKernels.cpp: byte movers, blind to what the bytes mean.
std::unique_ptr<Kernel> makeGatherKernel(const plan::Instruction &, const KernelTypes &,
                                         std::string &);
std::unique_ptr<Kernel> makeScatterAddKernel(const plan::Instruction &, const KernelTypes &,
                                             std::string &);
std::unique_ptr<Kernel> makeTransposeKernel(const plan::Instruction &, const KernelTypes &,
                                            std::string &);
std::unique_ptr<Kernel> makeConcatKernel(const plan::Instruction &, const KernelTypes &,
                                         std::string &);
std::unique_ptr<Kernel> makeSliceKernel(const plan::Instruction &, const KernelTypes &,
                                        std::string &);
std::unique_ptr<Kernel> makeCopyKernel(const plan::Instruction &, const KernelTypes &,
                                       std::string &);
std::unique_ptr<Kernel> makeTopKKernel(const plan::Instruction &, const KernelTypes &,
                                       std::string &);
std::unique_ptr<Kernel> makeTriluKernel(const plan::Instruction &, const KernelTypes &,
                                        std::string &);

/// Loops shorter than this many elements (or multiply-adds) stay on the
/// calling thread: waking the pool costs more than they do.
constexpr int64_t kSerialWork = 32768;

/// The parallelFor grain for items that each cost `workPerItem` elements.
inline int64_t grainFor(int64_t workPerItem) {
  return workPerItem >= kSerialWork ? 1 : kSerialWork / std::max<int64_t>(workPerItem, 1);
}

/// The output positions o in [0, count) whose input coordinate
/// `start + o * step` (step >= 1) falls inside [0, size): a half-open range.
/// Convolution and pooling windows use it to skip padding without a test
/// per element.
inline std::pair<int64_t, int64_t> windowRange(int64_t start, int64_t step, int64_t size,
                                               int64_t count) {
  auto ceilDiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  int64_t lo = start >= 0 ? 0 : ceilDiv(-start, step);
  int64_t hi = start >= size ? 0 : ceilDiv(size - start, step);
  hi = std::min(hi, count);
  return {std::min(lo, hi), hi};
}

inline Shape shapeOf(const plan::TensorType &type) {
  return Shape(type.shape().begin(), type.shape().end());
}

/// [N,C,H,W] from channels-last [N,H,W,C] (rank 4).
inline Shape fromChannelsLast(const Shape &nhwc) {
  return {nhwc[0], nhwc[3], nhwc[1], nhwc[2]};
}

/// The product of shape[begin, end).
int64_t product(const Shape &shape, size_t begin, size_t end);
inline int64_t product(const Shape &shape) { return product(shape, 0, shape.size()); }

/// "[2,3,4]", as messages show shapes.
std::string shapeString(const Shape &shape);
inline std::string shapeString(const plan::TensorType &type) {
  return shapeString(shapeOf(type));
}

/// Bytes per element; 0 for an invalid dtype.
int64_t elementBytes(plan::DType dtype);

/// Null, with `message` in `error`: `return fail(error, "...")`.
std::nullptr_t fail(std::string &error, std::string message);

/// Whether `dtype` is one of `supported`; if not, says so in `error`.
bool checkDType(plan::DType dtype, std::initializer_list<plan::DType> supported,
                std::string &error);

/// Whether every input has the output's dtype; if not, says which differs.
bool checkSameDType(const KernelTypes &types, std::string &error);

/// Whether the output has input 0's shape (for ops that keep it); if not,
/// says so in `error`.
bool checkSameShape(const KernelTypes &types, std::string &error);

/// Reads an attribute list that must have `count` values, each >= `min`
/// (strides, pads, dilations); `name` is for the message.
bool readAttribute(const google::protobuf::RepeatedField<int64_t> &values, const char *name,
                   int count, int64_t min, std::vector<int64_t> &out, std::string &error);

/// A kernel whose run is `Run`: either (inputs, outputs, pool), which cannot
/// fail, or (inputs, outputs, pool, error) -> bool; `alongside`: it may run
/// beside other kernels (Kernel::runsAlongsideOthers).
template <class Run> class FunctionKernel final : public Kernel {
public:
  FunctionKernel(Run run, bool alongside) : run_(std::move(run)), alongside_(alongside) {}
  bool runsAlongsideOthers() const override { return alongside_; }
  bool run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
           std::string &error) override {
    if constexpr (std::is_invocable_v<Run &, const void *const *, void *const *,
                                      ThreadPool &, std::string &>) {
      return run_(inputs, outputs, pool, error);
    } else {
      run_(inputs, outputs, pool);
      return true;
    }
  }

private:
  Run run_;
  bool alongside_;
};

template <class Run>
std::unique_ptr<Kernel> makeFunctionKernel(Run run, bool alongside = false) {
  return std::make_unique<FunctionKernel<Run>>(std::move(run), alongside);
}

} // namespace dtc::runtime::cpu

#endif // DTC_RUNTIME_CPU_KERNELSUPPORT_H
