//===- Kernels.cpp - choosing the kernel for an instruction ---------------===//
#include "runtime/cpu/Kernels.h"

#include "runtime/cpu/ElementwiseKernel.h"
#include "runtime/cpu/KernelSupport.h"
#include "runtime/plan/DType.h"

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
  return makeElementwiseKernel(inst.elementwise(), types.inputs, types.output, error);
}

/// What makeKernel knows of each instruction kind: the name messages use,
/// how many inputs it takes, and its factory.
struct OpInfo {
  plan::Instruction::OpCase op;
  const char *name;
  int minInputs, maxInputs;
  KernelFactory make;
};

constexpr int kManyInputs = 1 << 16;

const OpInfo kOps[] = {
    {plan::Instruction::kMatmul, "matmul", 2, 2, makeMatMulKernel},
    {plan::Instruction::kElementwise, "elementwise", 0, kManyInputs, makeElementwise},
    {plan::Instruction::kSoftmax, "softmax", 1, 1, makeSoftmaxKernel},
    {plan::Instruction::kLayerNorm, "layer_norm", 2, 3, makeLayerNormKernel},
    {plan::Instruction::kBatchNorm, "batch_norm", 5, 5, makeBatchNormKernel},
    {plan::Instruction::kReduce, "reduce", 1, 1, makeReduceKernel},
    {plan::Instruction::kGather, "gather", 2, 2, makeGatherKernel},
    {plan::Instruction::kConv2D, "conv2d", 2, 3, makeConv2DKernel},
    {plan::Instruction::kPool2D, "pool2d", 1, 1, makePool2DKernel},
    {plan::Instruction::kTranspose, "transpose", 1, 1, makeTransposeKernel},
    {plan::Instruction::kConcat, "concat", 1, kManyInputs, makeConcatKernel},
    {plan::Instruction::kSlice, "slice", 1, 1, makeSliceKernel},
    {plan::Instruction::kCopy, "copy", 1, 1, makeCopyKernel},
    {plan::Instruction::kTrilu, "trilu", 1, 1, makeTriluKernel},
    {plan::Instruction::kConv2DBackwardInput, "conv2d_backward_input", 2, 2,
     makeConv2DBackwardInputKernel},
    {plan::Instruction::kConv2DBackwardWeight, "conv2d_backward_weight", 2, 2,
     makeConv2DBackwardWeightKernel},
    {plan::Instruction::kPool2DBackward, "pool2d_backward", 1, 2, makePool2DBackwardKernel},
    {plan::Instruction::kScatterAdd, "scatter_add", 2, 2, makeScatterAddKernel},
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
  if (inputs < info->minInputs || inputs > info->maxInputs || outputs != 1)
    return fail(error, std::string(info->name) + ": expected " + arityString(*info) +
                           " inputs and 1 output, got " + std::to_string(inputs) +
                           " inputs and " + std::to_string(outputs) + " outputs");
  for (const std::vector<plan::TensorType> *types : {&inputTypes, &outputTypes})
    for (const plan::TensorType &type : *types)
      for (int64_t d : type.shape())
        if (d < 0)
          return fail(error, std::string(info->name) + ": negative dim in shape " +
                                 shapeString(type));
  KernelTypes types{inputTypes, outputTypes[0], constantInputs};
  std::unique_ptr<Kernel> kernel = info->make(inst, types, error);
  // The elementwise kernel's messages name their own op and node.
  if (!kernel && info->op != plan::Instruction::kElementwise)
    error = std::string(info->name) + ": " + error;
  return kernel;
}

} // namespace dtc::runtime::cpu
