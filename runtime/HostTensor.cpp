//===- HostTensor.cpp - a tensor in host memory, its element types --------===//
#include "runtime/HostTensor.h"
#include "plan/DType.h"

#include "formats/onnx/TensorProto.h"

#include <cstring>

using ::onnx::TensorProto;

namespace dtc::runtime {

namespace {

constexpr ElementType kElementTypes[] = {
    {TensorProto::FLOAT, plan::F32, 4, "<f4"},
    {TensorProto::DOUBLE, plan::F64, 8, "<f8"},
    {TensorProto::FLOAT16, plan::F16, 2, "<f2"},
    {TensorProto::BFLOAT16, plan::BF16, 2, nullptr},
    {TensorProto::INT64, plan::I64, 8, "<i8"},
    {TensorProto::INT32, plan::I32, 4, "<i4"},
    {TensorProto::INT16, plan::I16, 2, "<i2"},
    {TensorProto::INT8, plan::I8, 1, "|i1"},
    {TensorProto::UINT8, plan::U8, 1, "|u1"},
    {TensorProto::UINT16, plan::U16, 2, "<u2"},
    {TensorProto::UINT32, plan::U32, 4, "<u4"},
    {TensorProto::UINT64, plan::U64, 8, "<u8"},
    {TensorProto::BOOL, plan::BOOL, 1, "|b1"},
};

} // namespace

const ElementType *elementTypeOfOnnx(int32_t onnxType) {
  for (const ElementType &e : kElementTypes)
    if (e.onnxType == onnxType)
      return &e;
  return nullptr;
}

const ElementType *onnxElementType(const ::onnx::TensorProto &tensor, const std::string &label,
                                   formats::onnx::TensorInfo &info, std::string &error) {
  if (!formats::onnx::describeTensor(tensor, label, info, error))
    return nullptr;
  const ElementType *element = elementTypeOfOnnx(tensor.data_type());
  if (!element)
    error = label + ": " + formats::onnx::dataTypeName(tensor.data_type()) + " is not supported";
  return element;
}

const ElementType *elementTypeOf(plan::DType dtype) {
  for (const ElementType &e : kElementTypes)
    if (e.dtype == dtype)
      return &e;
  return nullptr;
}

/// One-byte types have no byte order, so '<i1', '>i1', '=i1' and '|i1' all
/// name the same dtype.
const ElementType *elementTypeOfNpy(std::string_view descr) {
  for (const ElementType &e : kElementTypes) {
    if (!e.npyDescr)
      continue;
    std::string_view want = e.npyDescr;
    if (descr == want)
      return &e;
    if (e.bytes == 1 && descr.size() == 3 && descr.substr(1) == want.substr(1) &&
        descr[0] != '\0' && std::strchr("<>=|", descr[0]))
      return &e;
  }
  return nullptr;
}

int64_t countElements(const std::vector<int64_t> &dims, const std::string &label,
                      std::string &error) {
  plan::TensorType type;
  for (int64_t d : dims) {
    if (d < 0) {
      error = label + ": negative dim in " + formats::onnx::dimsToString(dims);
      return -1;
    }
    type.add_shape(d);
  }
  int64_t count = elementCount(type);
  if (count < 0)
    error = label + ": dims " + formats::onnx::dimsToString(dims) + " are too large";
  return count;
}

} // namespace dtc::runtime
