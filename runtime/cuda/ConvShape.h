//===- ConvShape.h - a plan's convolution as cuDNN describes it -*- C++ -*-===//
//
// cuDNN's descriptor API takes a convolution as 4-D tensors with explicit
// strides (so NCHW and the plan's channels-last NHWC are the same call),
// filters [M, C/groups, kH, kW], one pad per spatial dim, strides,
// dilations and a group count. ConvShapeOf reads a conv2d (or one of its
// gradients) from the plan as the CPU backend does (cpu::readConvGeometry)
// and states it so; what cuDNN's descriptors cannot say (pads that differ
// between the two sides of a dim) is refused with why, and the CPU kernel
// runs it. Plain arithmetic, no CUDA: tested on any machine, and against
// cuDNN's own output-size rule where the library is there (CudaHostTest).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CUDA_CONVSHAPE_H
#define DTC_RUNTIME_CUDA_CONVSHAPE_H

#include "plan.pb.h"

#include <array>
#include <cstdint>
#include <string>

namespace dtc::runtime::cuda {

/// Which of a convolution's three computations an instruction is.
enum class ConvPass { Forward, BackwardData, BackwardFilter };

/// A 4-D tensor as cudnnSetTensor4dDescriptorEx takes it: N, C, H, W and
/// each one's stride in elements.
struct Tensor4d {
  std::array<int, 4> dims{}, strides{};
};

struct ConvShape {
  ConvPass pass = ConvPass::Forward;
  Tensor4d x, y;                  // the input and the output (of the forward)
  std::array<int, 4> filter{};    // M, C/groups, kH, kW (always OIHW)
  int padH = 0, padW = 0, strideH = 1, strideW = 1, dilationH = 1, dilationW = 1;
  int groups = 1;
  bool bias = false, relu = false; // forward only: a bias [M] added, then max(0, .)
};

/// The cuDNN form of `inst` (conv2d, conv2d_backward_input or
/// conv2d_backward_weight) on operands of `inputs`' types producing
/// `output`; false with `why` when cuDNN's descriptors cannot state it or
/// the shapes do not agree.
bool convShapeOf(const plan::Instruction &inst, const std::vector<plan::TensorType> &inputs,
                 const plan::TensorType &output, ConvShape &shape, std::string &why);

} // namespace dtc::runtime::cuda

#endif // DTC_RUNTIME_CUDA_CONVSHAPE_H
