//===- Kernels.cpp - choosing the kernel for an instruction ---------------===//
#include "runtime/cpu/Kernels.h"

#include "runtime/cpu/BFloat16.h"
#include "runtime/cpu/ElementwiseKernel.h"
#include "runtime/cpu/KernelSupport.h"
#include "plan/DType.h"
#include "runtime/cpu/ThreadPool.h"

namespace dtc::runtime::cpu {

int64_t product(const Shape &shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i)
    n *= shape[i];
  return n;
}

std::string shapeString(const Shape &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t elementBytes(plan::DType dtype) { return dtypeBytes(dtype); }

std::nullptr_t fail(std::string &error, std::string message) {
  error = std::move(message);
  return nullptr;
}

bool checkDType(plan::DType dtype, std::initializer_list<plan::DType> supported,
                std::string &error) {
  for (plan::DType d : supported)
    if (d == dtype)
      return true;
  error = "dtype " + plan::DType_Name(dtype) + " is not supported by the CPU backend";
  return false;
}

bool checkSameDType(const KernelTypes &types, std::string &error) {
  plan::DType want = types.output.dtype();
  for (size_t i = 0; i < types.inputs.size(); ++i)
    if (types.inputs[i].dtype() != want) {
      error = "input " + std::to_string(i) + " has dtype " +
              plan::DType_Name(types.inputs[i].dtype()) + " but the output has " +
              plan::DType_Name(want);
      return false;
    }
  return true;
}

bool checkSameShape(const KernelTypes &types, std::string &error) {
  if (shapeOf(types.output) == shapeOf(types.inputs[0]))
    return true;
  error = "output shape " + shapeString(types.output) + " differs from the input's " +
          shapeString(types.inputs[0]);
  return false;
}

bool readAttribute(const google::protobuf::RepeatedField<int64_t> &values, const char *name,
                   int count, int64_t min, std::vector<int64_t> &out, std::string &error) {
  if (values.size() != count) {
    error = std::string(name) + " must have " + std::to_string(count) + " values, got " +
            std::to_string(values.size());
    return false;
  }
  out.assign(values.begin(), values.end());
  for (int64_t v : out)
    if (v < min) {
      error = std::string(name) + " must be >= " + std::to_string(min) + ", got " +
              shapeString(out);
      return false;
    }
  return true;
}

namespace {

std::unique_ptr<Kernel> makeElementwise(const plan::Instruction &inst,
                                        const KernelTypes &types, std::string &error) {
  return makeElementwiseKernel(inst.elementwise(), types.inputs, types.outputs, error);
}

/// What makeKernel knows of each instruction kind: the name messages use,
/// how many inputs it takes, its factory, and how many outputs it makes.
struct OpInfo {
  plan::Instruction::OpCase op;
  const char *name;
  int minInputs, maxInputs;
  KernelFactory make;
  int outputs = 1;
};

constexpr int kManyInputs = 1 << 16;

const OpInfo kOps[] = {
    {plan::Instruction::kMatmul, "matmul", 2, 4, makeMatMulKernel},
    {plan::Instruction::kElementwise, "elementwise", 0, kManyInputs, makeElementwise},
    {plan::Instruction::kSoftmax, "softmax", 1, 1, makeSoftmaxKernel},
    {plan::Instruction::kLayerNorm, "layer_norm", 2, 3, makeLayerNormKernel},
    {plan::Instruction::kLayerNormBackward, "layer_norm_backward", 3, 4,
     makeLayerNormBackwardKernel, 3},
    {plan::Instruction::kBatchNorm, "batch_norm", 5, 5, makeBatchNormKernel},
    {plan::Instruction::kCrossEntropy, "cross_entropy", 2, 3, makeCrossEntropyKernel, 2},
    {plan::Instruction::kReduce, "reduce", 1, 1, makeReduceKernel},
    {plan::Instruction::kGather, "gather", 2, 2, makeGatherKernel},
    {plan::Instruction::kConv2D, "conv2d", 2, 3, makeConv2DKernel},
    {plan::Instruction::kPool2D, "pool2d", 1, 1, makePool2DKernel},
    {plan::Instruction::kTranspose, "transpose", 1, 1, makeTransposeKernel},
    {plan::Instruction::kConcat, "concat", 1, kManyInputs, makeConcatKernel},
    {plan::Instruction::kSlice, "slice", 1, 1, makeSliceKernel},
    {plan::Instruction::kCopy, "copy", 1, 1, makeCopyKernel},
    {plan::Instruction::kTrilu, "trilu", 1, 1, makeTriluKernel},
    {plan::Instruction::kTopK, "top_k", 1, 1, makeTopKKernel},
    {plan::Instruction::kConv2DBackwardInput, "conv2d_backward_input", 2, 2,
     makeConv2DBackwardInputKernel},
    {plan::Instruction::kConv2DBackwardWeight, "conv2d_backward_weight", 2, 2,
     makeConv2DBackwardWeightKernel},
    {plan::Instruction::kPool2DBackward, "pool2d_backward", 1, 2, makePool2DBackwardKernel},
    {plan::Instruction::kScatterAdd, "scatter_add", 2, 2, makeScatterAddKernel},
    {plan::Instruction::kRotary, "rotary", 3, 3, makeRotaryKernel},
    {plan::Instruction::kAttention, "attention", 3, 4, makeAttentionKernel, 2},
    {plan::Instruction::kAttentionBackward, "attention_backward", 6, 7,
     makeAttentionBackwardKernel, 3},
};

bool isHalf(plan::DType dtype) { return dtype == plan::F16 || dtype == plan::BF16; }

/// Whether an instruction kind only moves bytes (and so takes 16-bit
/// floats as they are).
bool movesBytes(plan::Instruction::OpCase op) {
  switch (op) {
  case plan::Instruction::kGather: case plan::Instruction::kTranspose:
  case plan::Instruction::kConcat: case plan::Instruction::kSlice:
  case plan::Instruction::kCopy: case plan::Instruction::kTrilu:
  // Attention's kernels widen 16-bit floats themselves, a tile at a time.
  case plan::Instruction::kAttention: case plan::Instruction::kAttentionBackward:
    return true;
  default:
    return false;
  }
}

template <class Half> void widen(const void *from, float *to, int64_t begin, int64_t end) {
  const Half *in = static_cast<const Half *>(from);
  for (int64_t i = begin; i < end; ++i)
    to[i] = float(in[i]);
}

template <class Half> void narrow(const float *from, void *to, int64_t begin, int64_t end) {
  Half *out = static_cast<Half *>(to);
  for (int64_t i = begin; i < end; ++i)
    out[i] = Half(from[i]);
}

/// A kernel on 16-bit floats (f16, bf16) run by its f32 kernel: the 16-bit
/// inputs widened into float scratch, each 16-bit output rounded back (to
/// nearest even). Correct, not fast: the float kernel rounds once at the
/// end, which is what a 16-bit kernel accumulating in f32 does.
class InFloat final : public Kernel {
public:
  InFloat(std::unique_ptr<Kernel> inner, const std::vector<plan::TensorType> &inputs,
          const std::vector<plan::TensorType> &outputs)
      : inner_(std::move(inner)) {
    for (const plan::TensorType &type : inputs) {
      inputs_.push_back(type.dtype());
      scratch_.emplace_back(isHalf(type.dtype()) ? size_t(product(shapeOf(type))) : 0);
    }
    for (const plan::TensorType &type : outputs) {
      outputs_.push_back(type.dtype());
      outScratch_.emplace_back(isHalf(type.dtype()) ? size_t(product(shapeOf(type))) : 0);
    }
  }

  bool run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
           std::string &error) override {
    std::vector<const void *> in(inputs, inputs + inputs_.size());
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (!isHalf(inputs_[i]))
        continue;
      float *to = scratch_[i].data();
      bool bf16 = inputs_[i] == plan::BF16;
      pool.parallelFor(int64_t(scratch_[i].size()), kSerialWork, [&](int64_t b, int64_t e) {
        bf16 ? widen<BFloat16>(inputs[i], to, b, e) : widen<_Float16>(inputs[i], to, b, e);
      });
      in[i] = to;
    }
    std::vector<void *> out(outputs, outputs + outputs_.size());
    for (size_t o = 0; o < outputs_.size(); ++o)
      if (isHalf(outputs_[o]))
        out[o] = outScratch_[o].data();
    if (!inner_->run(in.data(), out.data(), pool, error))
      return false;
    for (size_t o = 0; o < outputs_.size(); ++o) {
      if (!isHalf(outputs_[o]))
        continue;
      const float *from = outScratch_[o].data();
      bool bf16 = outputs_[o] == plan::BF16;
      pool.parallelFor(int64_t(outScratch_[o].size()), kSerialWork, [&](int64_t b, int64_t e) {
        bf16 ? narrow<BFloat16>(from, outputs[o], b, e) : narrow<_Float16>(from, outputs[o], b, e);
      });
    }
    return true;
  }
  bool runsAlongsideOthers() const override { return inner_->runsAlongsideOthers(); }

private:
  std::unique_ptr<Kernel> inner_;
  std::vector<plan::DType> inputs_, outputs_;
  std::vector<std::vector<float>> scratch_, outScratch_;
};

std::string arityString(const OpInfo &info) {
  if (info.minInputs == info.maxInputs)
    return std::to_string(info.minInputs);
  if (info.maxInputs == kManyInputs)
    return std::to_string(info.minInputs) + " or more";
  return std::to_string(info.minInputs) + " to " + std::to_string(info.maxInputs);
}

} // namespace

std::unique_ptr<Kernel> makeKernel(const plan::Instruction &inst,
                                   const std::vector<plan::TensorType> &inputTypes,
                                   const std::vector<plan::TensorType> &outputTypes,
                                   std::string &error,
                                   const std::vector<const void *> &constantInputs) {
  const OpInfo *info = nullptr;
  for (const OpInfo &candidate : kOps)
    if (candidate.op == inst.op_case())
      info = &candidate;
  if (!info)
    return fail(error, "the instruction has no operation this runtime knows (was the plan "
                       "written by a newer dtc?)");
  int inputs = int(inputTypes.size()), outputs = int(outputTypes.size());
  // A matmul keeping its preactivation writes it too, one summing its rhs's
  // rows the sum; an elementwise
  // expression may name several outputs.
  int wantOutputs = info->outputs + (inst.op_case() == plan::Instruction::kMatmul &&
                                     (inst.matmul().keep_preactivation() ||
                                      inst.matmul().bias_gradient()));
  if (inst.op_case() == plan::Instruction::kElementwise)
    wantOutputs = std::max(1, inst.elementwise().outputs_size());
  if (inst.op_case() == plan::Instruction::kCrossEntropy) // and the logits' gradient
    wantOutputs += inst.cross_entropy().gradient();
  if (inst.op_case() == plan::Instruction::kAttentionBackward &&
      inst.attention_backward().packed()) // the packed q, k and v's gradient
    wantOutputs = 1;
  if (inst.op_case() == plan::Instruction::kLayerNormBackward) // and weights' partial sums
    wantOutputs += inst.layer_norm_backward().scale_gradient() +
                   inst.layer_norm_backward().bias_gradient();
  if (inputs < info->minInputs || inputs > info->maxInputs || outputs != wantOutputs)
    return fail(error, std::string(info->name) + ": expected " + arityString(*info) +
                           " inputs and " + std::to_string(wantOutputs) +
                           (wantOutputs == 1 ? " output" : " outputs") + ", got " +
                           std::to_string(inputs) + " inputs and " + std::to_string(outputs) +
                           " outputs");
  for (const std::vector<plan::TensorType> *types : {&inputTypes, &outputTypes})
    for (const plan::TensorType &type : *types)
      for (int64_t d : type.shape())
        if (d < 0)
          return fail(error, std::string(info->name) + ": negative dim in shape " +
                                 shapeString(type));
  // Compute kernels run 16-bit floats through their f32 versions.
  bool half = false;
  if (!movesBytes(info->op) && info->op != plan::Instruction::kElementwise)
    for (const std::vector<plan::TensorType> *types : {&inputTypes, &outputTypes})
      for (const plan::TensorType &type : *types)
        half = half || isHalf(type.dtype());
  std::unique_ptr<Kernel> kernel;
  if (half) {
    std::vector<plan::TensorType> floatInputs = inputTypes;
    std::vector<const void *> constants = constantInputs;
    constants.resize(inputTypes.size(), nullptr);
    for (size_t i = 0; i < floatInputs.size(); ++i)
      if (isHalf(floatInputs[i].dtype())) {
        floatInputs[i].set_dtype(plan::F32);
        constants[i] = nullptr; // the kernel sees the widened copy, which changes
      }
    std::vector<plan::TensorType> floatOutputs = outputTypes;
    for (plan::TensorType &output : floatOutputs)
      if (isHalf(output.dtype()))
        output.set_dtype(plan::F32);
    KernelTypes types{floatInputs, floatOutputs[0], constants, floatOutputs};
    kernel = info->make(inst, types, error);
    if (kernel)
      kernel = std::make_unique<InFloat>(std::move(kernel), inputTypes, outputTypes);
  } else {
    KernelTypes types{inputTypes, outputTypes[0], constantInputs, outputTypes};
    kernel = info->make(inst, types, error);
  }
  // The elementwise kernel's messages name their own op and node.
  if (!kernel && info->op != plan::Instruction::kElementwise)
    error = std::string(info->name) + ": " + error;
  return kernel;
}

} // namespace dtc::runtime::cpu
