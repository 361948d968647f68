//===- ConvShape.cpp -------------------------------------------------------===//
#include "runtime/cuda/ConvShape.h"

#include "runtime/cpu/ConvGeometry.h"

#include <limits>

namespace dtc::runtime::cuda {
namespace {

/// NCHW dims with the strides of a tensor stored NCHW or NHWC.
Tensor4d tensorOf(int64_t n, int64_t c, int64_t h, int64_t w, bool channelsLast) {
  Tensor4d t;
  t.dims = {int(n), int(c), int(h), int(w)};
  t.strides = channelsLast ? std::array<int, 4>{int(h * w * c), 1, int(w * c), int(c)}
                           : std::array<int, 4>{int(c * h * w), int(h * w), int(w), 1};
  return t;
}

} // namespace

bool convShapeOf(const plan::Instruction &inst, const std::vector<plan::TensorType> &inputs,
                 const plan::TensorType &output, ConvShape &shape, std::string &why) {
  const plan::Conv2D *op = inst.has_conv2d()                  ? &inst.conv2d()
                           : inst.has_conv2d_backward_input() ? &inst.conv2d_backward_input()
                           : inst.has_conv2d_backward_weight() ? &inst.conv2d_backward_weight()
                                                               : nullptr;
  if (!op || inputs.size() < 2) {
    why = "not a convolution";
    return false;
  }
  shape.pass = inst.has_conv2d()                  ? ConvPass::Forward
               : inst.has_conv2d_backward_input() ? ConvPass::BackwardData
                                                  : ConvPass::BackwardFilter;
  bool channelsLast = op->channels_last();
  if (shape.pass != ConvPass::Forward && (channelsLast || op->relu())) {
    why = "a convolution's gradient is not channels-last or fused with relu";
    return false;
  }
  cpu::Shape in0 = cpu::shapeOf(inputs[0]), in1 = cpu::shapeOf(inputs[1]),
             out = cpu::shapeOf(output);
  // The forward's input, weights and output, as NCHW.
  cpu::Shape x, w, y;
  switch (shape.pass) {
  case ConvPass::Forward:
    x = in0, w = in1, y = out;
    if (channelsLast && x.size() == 4 && y.size() == 4)
      x = cpu::fromChannelsLast(x), y = cpu::fromChannelsLast(y);
    break;
  case ConvPass::BackwardData: // grad_output, weights -> grad input
    x = out, w = in1, y = in0;
    break;
  case ConvPass::BackwardFilter: // input, grad_output -> grad weights
    x = in0, w = out, y = in1;
    break;
  }
  cpu::ConvGeometry g;
  bool bias = shape.pass == ConvPass::Forward && inputs.size() == 3;
  if (!cpu::readConvGeometry(*op, x, w, y, bias, channelsLast, "output", g, why))
    return false;
  if (g.padTop != g.padBottom || g.padLeft != g.padRight) {
    why = "cuDNN takes one pad per side pair, not pads " + std::to_string(g.padTop) + "," +
          std::to_string(g.padLeft) + "," + std::to_string(g.padBottom) + "," +
          std::to_string(g.padRight);
    return false;
  }
  for (int64_t n : {g.N * g.C * g.H * g.W, g.N * g.M * g.OH * g.OW, g.M * g.Cg() * g.kH * g.kW})
    if (n > std::numeric_limits<int>::max()) {
      why = "a tensor of more than 2^31 elements";
      return false;
    }
  shape.x = tensorOf(g.N, g.C, g.H, g.W, channelsLast);
  shape.y = tensorOf(g.N, g.M, g.OH, g.OW, channelsLast);
  shape.filter = {int(g.M), int(g.Cg()), int(g.kH), int(g.kW)};
  shape.padH = int(g.padTop), shape.padW = int(g.padLeft);
  shape.strideH = int(g.strideH), shape.strideW = int(g.strideW);
  shape.dilationH = int(g.dilationH), shape.dilationW = int(g.dilationW);
  shape.groups = int(g.groups);
  shape.bias = bias;
  shape.relu = shape.pass == ConvPass::Forward && op->relu();
  return true;
}

} // namespace dtc::runtime::cuda
