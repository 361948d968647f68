//===- TensorData.cpp - ONNX tensors and types as MLIR ones ---------------===//
#include "frontends/onnx/TensorData.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using ::onnx::TensorProto;
namespace format = dtc::formats::onnx;

namespace dtc::onnx {

Type elementTypeOf(MLIRContext &context, int32_t dataType) {
  Builder b(&context);
  switch (dataType) {
  case TensorProto::FLOAT:
    return b.getF32Type();
  case TensorProto::DOUBLE:
    return b.getF64Type();
  case TensorProto::FLOAT16:
    return b.getF16Type();
  case TensorProto::BFLOAT16:
    return b.getBF16Type();
  case TensorProto::INT64:
    return b.getI64Type();
  case TensorProto::INT32:
    return b.getI32Type();
  case TensorProto::INT16:
    return b.getI16Type();
  case TensorProto::INT8:
    return b.getI8Type();
  case TensorProto::BOOL:
    return b.getI1Type();
  case TensorProto::UINT8:
    return b.getIntegerType(8, /*isSigned=*/false);
  case TensorProto::UINT16:
    return b.getIntegerType(16, false);
  case TensorProto::UINT32:
    return b.getIntegerType(32, false);
  case TensorProto::UINT64:
    return b.getIntegerType(64, false);
  default:
    return {};
  }
}

FailureOr<RankedTensorType> tensorTypeOf(MLIRContext &context, const TensorProto &tensor,
                                         std::string &error) {
  format::TensorInfo info;
  if (!format::describeTensor(tensor, format::tensorLabel(tensor), info, error))
    return failure();
  Type element = elementTypeOf(context, tensor.data_type());
  if (!element) { // every type the decoder takes has an MLIR type
    error = format::tensorLabel(tensor) + ": data type " + dataTypeName(tensor.data_type()) +
            " is not supported";
    return failure();
  }
  llvm::SmallVector<int64_t> dims(tensor.dims().begin(), tensor.dims().end());
  return RankedTensorType::get(dims, element);
}

LogicalResult checkTensorData(const TensorProto &tensor, const std::string &baseDir,
                              std::string &error,
                              std::optional<format::ExternalData> *external) {
  std::string label = format::tensorLabel(tensor);
  format::TensorInfo info;
  if (!format::describeTensor(tensor, label, info, error))
    return failure();
  if (!format::isExternal(tensor))
    return success(format::checkInlineData(tensor, info, label, error));
  format::ExternalData data;
  if (!format::resolveExternalData(tensor, baseDir, info.bytes, label, data, error))
    return failure();
  if (external)
    *external = std::move(data);
  return success();
}

FailureOr<DenseElementsAttr> readTensor(MLIRContext &context, const TensorProto &tensor,
                                        const std::string &baseDir, std::string &error) {
  auto type = tensorTypeOf(context, tensor, error);
  if (failed(type))
    return failure();
  std::string label = format::tensorLabel(tensor), bytes;
  format::TensorInfo info;
  if (!format::describeTensor(tensor, label, info, error) ||
      !format::readTensorBytes(tensor, info, baseDir, label, bytes, error))
    return failure();
  if (type->getNumElements() == 0)
    return DenseElementsAttr::get(*type, llvm::ArrayRef<Attribute>{});
  if (type->getElementType().isInteger(1)) {
    llvm::SmallVector<bool> values;
    for (char c : bytes)
      values.push_back(c != 0);
    return DenseElementsAttr::get(*type, values);
  }
  llvm::ArrayRef<char> raw(bytes.data(), bytes.size());
  bool detectedSplat = false;
  if (!DenseElementsAttr::isValidRawBuffer(*type, raw, detectedSplat)) {
    error = label + ": stored data does not match its type";
    return failure();
  }
  return DenseElementsAttr::getFromRawBuffer(*type, raw);
}

} // namespace dtc::onnx
