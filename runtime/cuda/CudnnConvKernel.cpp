//===- CudnnConvKernel.cpp - a convolution through cuDNN ------------------===//
//
// conv2d and its two gradients on cuDNN's descriptor API: the descriptors
// from ConvShape.h made once, the algorithm cuDNN's heuristics rank first
// among those that fit the device's workspace (shared with cuBLASLt: both
// run on the compute stream, one at a time), then at each run one call on
// the compute stream; the forward adds its bias (cudnnAddTensor) and
// applies its relu (cudnnActivationForward) in place after it.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/ConvShape.h"
#include "runtime/cuda/CudaKernels.h"

namespace dtc::runtime::cuda {
namespace {

class CudnnConvKernel final : public cpu::Kernel {
public:
  explicit CudnnConvKernel(const CudaContext &context) : context_(context) {}
  ~CudnnConvKernel() override {
    const CudnnApi &dnn = *context_.cudnn;
    for (cudnnTensorDescriptor_t t : {x_, y_, bias_})
      if (t)
        dnn.cudnnDestroyTensorDescriptor(t);
    if (filter_)
      dnn.cudnnDestroyFilterDescriptor(filter_);
    if (conv_)
      dnn.cudnnDestroyConvolutionDescriptor(conv_);
    if (relu_)
      dnn.cudnnDestroyActivationDescriptor(relu_);
  }

  bool prepare(const ConvShape &s, cudnnDataType_t type, std::string &why) {
    const CudnnApi &dnn = *context_.cudnn;
    shape_ = s;
    auto tensor = [&](cudnnTensorDescriptor_t &d, const Tensor4d &t) {
      return check(dnn, dnn.cudnnCreateTensorDescriptor(&d), "cudnnCreateTensorDescriptor",
                   why) &&
             check(dnn,
                   dnn.cudnnSetTensor4dDescriptorEx(d, type, t.dims[0], t.dims[1], t.dims[2],
                                                    t.dims[3], t.strides[0], t.strides[1],
                                                    t.strides[2], t.strides[3]),
                   "cudnnSetTensor4dDescriptorEx", why);
    };
    // fp32 keeps fp32's digits (no TF32 tensor cores); bf16 takes them.
    cudnnMathType_t math = type == CUDNN_DATA_FLOAT ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
    if (!tensor(x_, s.x) || !tensor(y_, s.y) ||
        !check(dnn, dnn.cudnnCreateFilterDescriptor(&filter_), "cudnnCreateFilterDescriptor",
               why) ||
        !check(dnn,
               dnn.cudnnSetFilter4dDescriptor(filter_, type, CUDNN_TENSOR_NCHW, s.filter[0],
                                              s.filter[1], s.filter[2], s.filter[3]),
               "cudnnSetFilter4dDescriptor", why) ||
        !check(dnn, dnn.cudnnCreateConvolutionDescriptor(&conv_),
               "cudnnCreateConvolutionDescriptor", why) ||
        !check(dnn,
               dnn.cudnnSetConvolution2dDescriptor(conv_, s.padH, s.padW, s.strideH, s.strideW,
                                                   s.dilationH, s.dilationW,
                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
               "cudnnSetConvolution2dDescriptor", why) ||
        !check(dnn, dnn.cudnnSetConvolutionGroupCount(conv_, s.groups),
               "cudnnSetConvolutionGroupCount", why) ||
        !check(dnn, dnn.cudnnSetConvolutionMathType(conv_, math), "cudnnSetConvolutionMathType",
               why))
      return false;
    if (s.bias && !tensor(bias_, Tensor4d{{1, s.filter[0], 1, 1}, {s.filter[0], 1, 1, 1}}))
      return false;
    if (s.relu &&
        (!check(dnn, dnn.cudnnCreateActivationDescriptor(&relu_),
                "cudnnCreateActivationDescriptor", why) ||
         !check(dnn,
                dnn.cudnnSetActivationDescriptor(relu_, CUDNN_ACTIVATION_RELU,
                                                 CUDNN_NOT_PROPAGATE_NAN, 0.0),
                "cudnnSetActivationDescriptor", why)))
      return false;
    if (type == CUDNN_DATA_BFLOAT16 && (s.bias || s.relu) && !tryEpilogue(s.filter[0], why))
      return false;
    return chooseAlgorithm(why);
  }

  /// The bias add and ReLU (cuDNN's legacy cudnnAddTensor and
  /// cudnnActivationForward) tried once in bf16 on `channels` values in
  /// the workspace: a cuDNN that refuses them here leaves the convolution
  /// to the host, where a refusal at run time would stop the run.
  bool tryEpilogue(int channels, std::string &why) {
    const CudnnApi &dnn = *context_.cudnn;
    size_t bytes = size_t(channels) * 2;
    if (!context_.workspace || 2 * bytes > context_.workspaceBytes) {
      why = "no workspace to try cuDNN's bf16 bias and ReLU in";
      return false;
    }
    cudnnTensorDescriptor_t probe = nullptr;
    char *at = reinterpret_cast<char *>(uintptr_t(context_.workspace));
    float one = 1, zero = 0;
    cudnnHandle_t h = context_.cudnnHandle;
    bool ok =
        check(dnn, dnn.cudnnCreateTensorDescriptor(&probe), "cudnnCreateTensorDescriptor",
              why) &&
        check(dnn,
              dnn.cudnnSetTensor4dDescriptorEx(probe, CUDNN_DATA_BFLOAT16, 1, channels, 1, 1,
                                               channels, 1, 1, 1),
              "cudnnSetTensor4dDescriptorEx", why) &&
        check(dnn, dnn.cudnnSetStream(h, context_.stream), "cudnnSetStream", why) &&
        (!bias_ || check(dnn, dnn.cudnnAddTensor(h, &one, probe, at, &one, probe, at + bytes),
                         "cudnnAddTensor (bf16 bias)", why)) &&
        (!relu_ || check(dnn,
                         dnn.cudnnActivationForward(h, relu_, &one, probe, at + bytes, &zero,
                                                    probe, at + bytes),
                         "cudnnActivationForward (bf16 relu)", why));
    if (probe)
      dnn.cudnnDestroyTensorDescriptor(probe);
    return ok;
  }

  bool run(const void *const *inputs, void *const *outputs, cpu::ThreadPool &,
           std::string &error) override {
    const CudnnApi &dnn = *context_.cudnn;
    float one = 1, zero = 0;
    void *workspace = reinterpret_cast<void *>(uintptr_t(context_.workspace));
    size_t bytes = context_.workspaceBytes;
    cudnnHandle_t h = context_.cudnnHandle;
    if (!check(dnn, dnn.cudnnSetStream(h, context_.stream), "cudnnSetStream", error))
      return false;
    switch (shape_.pass) {
    case ConvPass::Forward:
      return check(dnn,
                   dnn.cudnnConvolutionForward(h, &one, x_, inputs[0], filter_, inputs[1], conv_,
                                               forward_, workspace, bytes, &zero, y_,
                                               outputs[0]),
                   "cudnnConvolutionForward", error) &&
             (!shape_.bias ||
              check(dnn, dnn.cudnnAddTensor(h, &one, bias_, inputs[2], &one, y_, outputs[0]),
                    "cudnnAddTensor (the bias)", error)) &&
             (!shape_.relu ||
              check(dnn,
                    dnn.cudnnActivationForward(h, relu_, &one, y_, outputs[0], &zero, y_,
                                               outputs[0]),
                    "cudnnActivationForward (relu)", error));
    case ConvPass::BackwardData: // grad_output, weights -> grad input
      return check(dnn,
                   dnn.cudnnConvolutionBackwardData(h, &one, filter_, inputs[1], y_, inputs[0],
                                                    conv_, backwardData_, workspace, bytes,
                                                    &zero, x_, outputs[0]),
                   "cudnnConvolutionBackwardData", error);
    case ConvPass::BackwardFilter: // input, grad_output -> grad weights
      return check(dnn,
                   dnn.cudnnConvolutionBackwardFilter(h, &one, x_, inputs[0], y_, inputs[1],
                                                      conv_, backwardFilter_, workspace, bytes,
                                                      &zero, filter_, outputs[0]),
                   "cudnnConvolutionBackwardFilter", error);
    }
    return false;
  }

private:
  /// cuDNN's heuristics' ranking (no run needed): the first that works
  /// within the workspace.
  template <typename Perf, typename Algo>
  bool pick(const Perf *perf, int count, Algo &algo, const char *what, std::string &why) {
    for (int k = 0; k < count; ++k)
      if (perf[k].status == CUDNN_STATUS_SUCCESS && perf[k].memory <= context_.workspaceBytes) {
        algo = perf[k].algo;
        return true;
      }
    why = std::string("cuDNN has no ") + what + " algorithm within the " +
          std::to_string(context_.workspaceBytes >> 20) + " MiB workspace";
    return false;
  }

  bool chooseAlgorithm(std::string &why) {
    const CudnnApi &dnn = *context_.cudnn;
    cudnnHandle_t h = context_.cudnnHandle;
    int count = 0;
    switch (shape_.pass) {
    case ConvPass::Forward: {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      return check(dnn,
                   dnn.cudnnGetConvolutionForwardAlgorithm_v7(
                       h, x_, filter_, conv_, y_, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf),
                   "cudnnGetConvolutionForwardAlgorithm_v7", why) &&
             pick(perf, count, forward_, "forward", why);
    }
    case ConvPass::BackwardData: {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      return check(dnn,
                   dnn.cudnnGetConvolutionBackwardDataAlgorithm_v7(
                       h, filter_, y_, conv_, x_, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count,
                       perf),
                   "cudnnGetConvolutionBackwardDataAlgorithm_v7", why) &&
             pick(perf, count, backwardData_, "backward-data", why);
    }
    case ConvPass::BackwardFilter: {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      return check(dnn,
                   dnn.cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                       h, x_, y_, conv_, filter_, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count,
                       perf),
                   "cudnnGetConvolutionBackwardFilterAlgorithm_v7", why) &&
             pick(perf, count, backwardFilter_, "backward-filter", why);
    }
    }
    return false;
  }

  const CudaContext &context_;
  ConvShape shape_;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr, bias_ = nullptr;
  cudnnFilterDescriptor_t filter_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnActivationDescriptor_t relu_ = nullptr;
  cudnnConvolutionFwdAlgo_t forward_{};
  cudnnConvolutionBwdDataAlgo_t backwardData_{};
  cudnnConvolutionBwdFilterAlgo_t backwardFilter_{};
};

} // namespace

std::unique_ptr<cpu::Kernel> makeConvKernel(const CudaContext &context,
                                            const plan::Instruction &inst,
                                            const std::vector<plan::TensorType> &inputs,
                                            const plan::TensorType &output, std::string &why) {
  if (!context.cudnn) {
    why = "cuDNN is not loaded";
    return nullptr;
  }
  plan::DType dtype = output.dtype();
  for (const plan::TensorType &t : inputs)
    if (t.dtype() != dtype || (dtype != plan::F32 && dtype != plan::BF16)) {
      why = "cuDNN runs fp32 and bf16 convolutions here, not " + plan::DType_Name(t.dtype());
      return nullptr;
    }
  ConvShape shape;
  if (!convShapeOf(inst, inputs, output, shape, why))
    return nullptr;
  auto kernel = std::make_unique<CudnnConvKernel>(context);
  if (!kernel->prepare(shape, dtype == plan::F32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_BFLOAT16, why))
    return nullptr;
  return kernel;
}

} // namespace dtc::runtime::cuda
