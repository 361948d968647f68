//===- TensorData.cpp - ONNX TensorProto contents -------------------------===//
#include "frontends/onnx/TensorData.h"
#include "dialects/graph/ShapeRules.h"

#include "mlir/IR/Builders.h"

#include <cstring>
#include <fstream>
#include <sys/stat.h>

using namespace mlir;
using ::onnx::TensorProto;

namespace dtc::onnx {

namespace {

/// Bytes per element as ONNX stores them (bool: one byte).
int64_t storedElementBytes(int32_t dataType) {
  switch (dataType) {
  case TensorProto::UINT8:
  case TensorProto::INT8:
  case TensorProto::BOOL:
    return 1;
  case TensorProto::UINT16:
  case TensorProto::INT16:
  case TensorProto::FLOAT16:
  case TensorProto::BFLOAT16:
    return 2;
  case TensorProto::FLOAT:
  case TensorProto::INT32:
  case TensorProto::UINT32:
    return 4;
  case TensorProto::INT64:
  case TensorProto::UINT64:
  case TensorProto::DOUBLE:
    return 8;
  default:
    return 0;
  }
}

std::string tensorLabel(const TensorProto &tensor) {
  return tensor.name().empty() ? std::string("tensor")
                               : "tensor '" + tensor.name() + "'";
}

struct ExternalRef {
  std::string path;
  int64_t offset = 0;
  int64_t length = -1;
};

/// The external file reference of a tensor, validated.
FailureOr<ExternalRef> externalRef(const TensorProto &tensor,
                                   const std::string &baseDir,
                                   std::string &error) {
  ExternalRef ref;
  std::string location;
  for (const auto &entry : tensor.external_data()) {
    try {
      if (entry.key() == "location")
        location = entry.value();
      else if (entry.key() == "offset")
        ref.offset = std::stoll(entry.value());
      else if (entry.key() == "length")
        ref.length = std::stoll(entry.value());
    } catch (const std::exception &) {
      error = tensorLabel(tensor) + ": external data " + entry.key() + " '" +
              entry.value() + "' is not a number";
      return failure();
    }
  }
  if (location.empty()) {
    error = tensorLabel(tensor) + ": external data has no location";
    return failure();
  }
  if (location[0] == '/' || location.find("..") != std::string::npos) {
    error = tensorLabel(tensor) + ": external data location '" + location +
            "' must be a relative path inside the model's folder";
    return failure();
  }
  if (ref.offset < 0) {
    error = tensorLabel(tensor) + ": negative external data offset";
    return failure();
  }
  ref.path = baseDir.empty() ? location : baseDir + "/" + location;
  return ref;
}

/// Expected stored byte size, or failure for unknown types / huge shapes.
FailureOr<int64_t> expectedBytes(const TensorProto &tensor, std::string &error) {
  int64_t elementBytes = storedElementBytes(tensor.data_type());
  if (!elementBytes) {
    error = tensorLabel(tensor) + ": data type " +
            dataTypeName(tensor.data_type()) + " is not supported";
    return failure();
  }
  llvm::SmallVector<int64_t> dims(tensor.dims().begin(), tensor.dims().end());
  auto count = graph::elementCount(dims);
  if (!count || *count > (int64_t(1) << 58)) {
    error = tensorLabel(tensor) + ": invalid dims " + graph::shapeToString(dims);
    return failure();
  }
  return *count * elementBytes;
}

/// Number of values in the typed field that holds this tensor's data.
int64_t typedFieldSize(const TensorProto &t) {
  switch (t.data_type()) {
  case TensorProto::FLOAT:
    return t.float_data_size();
  case TensorProto::INT64:
    return t.int64_data_size();
  case TensorProto::DOUBLE:
    return t.double_data_size();
  case TensorProto::UINT32:
  case TensorProto::UINT64:
    return t.uint64_data_size();
  default:
    return t.int32_data_size();
  }
}

/// The tensor's bytes, little-endian, `elementBytes` per element.
FailureOr<std::string> storedBytes(const TensorProto &t,
                                   const std::string &baseDir,
                                   std::string &error) {
  auto expected = expectedBytes(t, error);
  if (failed(expected) || failed(checkTensorData(t, baseDir, error)))
    return failure();
  if (t.data_location() == TensorProto::EXTERNAL) {
    auto ref = externalRef(t, baseDir, error);
    if (failed(ref))
      return failure();
    std::ifstream in(ref->path, std::ios::binary);
    std::string bytes(*expected, '\0');
    in.seekg(ref->offset);
    if (!in.read(bytes.data(), *expected)) {
      error = tensorLabel(t) + ": cannot read " + std::to_string(*expected) +
              " bytes from '" + ref->path + "'";
      return failure();
    }
    return bytes;
  }
  if (t.has_raw_data())
    return t.raw_data();
  int64_t width = storedElementBytes(t.data_type());
  std::string bytes;
  bytes.reserve(*expected);
  auto append = [&](uint64_t bits) {
    for (int64_t b = 0; b < width; ++b)
      bytes.push_back(char((bits >> (8 * b)) & 0xff));
  };
  switch (t.data_type()) {
  case TensorProto::FLOAT:
    for (float f : t.float_data()) {
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      append(bits);
    }
    break;
  case TensorProto::DOUBLE:
    for (double d : t.double_data()) {
      uint64_t bits;
      std::memcpy(&bits, &d, 8);
      append(bits);
    }
    break;
  case TensorProto::INT64:
    for (int64_t i : t.int64_data())
      append(uint64_t(i));
    break;
  case TensorProto::UINT32:
  case TensorProto::UINT64:
    for (uint64_t i : t.uint64_data())
      append(i);
    break;
  default:
    for (int32_t i : t.int32_data())
      append(uint64_t(uint32_t(i)));
    break;
  }
  return bytes;
}

} // namespace

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

std::string dataTypeName(int32_t dataType) {
  if (TensorProto::DataType_IsValid(dataType))
    return TensorProto::DataType_Name(TensorProto::DataType(dataType));
  return "type " + std::to_string(dataType);
}

FailureOr<RankedTensorType> tensorTypeOf(MLIRContext &context,
                                         const TensorProto &tensor,
                                         std::string &error) {
  Type element = elementTypeOf(context, tensor.data_type());
  if (!element) {
    error = tensorLabel(tensor) + ": data type " +
            dataTypeName(tensor.data_type()) + " is not supported";
    return failure();
  }
  if (failed(expectedBytes(tensor, error)))
    return failure();
  llvm::SmallVector<int64_t> dims(tensor.dims().begin(), tensor.dims().end());
  return RankedTensorType::get(dims, element);
}

LogicalResult checkTensorData(const TensorProto &tensor,
                              const std::string &baseDir, std::string &error) {
  auto expected = expectedBytes(tensor, error);
  if (failed(expected))
    return failure();
  if (tensor.data_location() == TensorProto::EXTERNAL) {
    auto ref = externalRef(tensor, baseDir, error);
    if (failed(ref))
      return failure();
    struct stat st;
    if (stat(ref->path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      error = tensorLabel(tensor) + ": external data file '" + ref->path +
              "' not found";
      return failure();
    }
    if (ref->length >= 0 && ref->length != *expected) {
      error = tensorLabel(tensor) + ": external data length " +
              std::to_string(ref->length) + " does not match its shape (" +
              std::to_string(*expected) + " bytes)";
      return failure();
    }
    if (ref->offset > st.st_size || st.st_size - ref->offset < *expected) {
      error = tensorLabel(tensor) + ": external data file '" + ref->path +
              "' is too short (needs " + std::to_string(*expected) +
              " bytes at offset " + std::to_string(ref->offset) + ")";
      return failure();
    }
    return success();
  }
  int64_t have = tensor.has_raw_data()
                     ? (int64_t)tensor.raw_data().size()
                     : typedFieldSize(tensor) * storedElementBytes(tensor.data_type());
  if (have != *expected) {
    error = tensorLabel(tensor) + " holds " + std::to_string(have) +
            " bytes but its shape and type need " + std::to_string(*expected);
    return failure();
  }
  return success();
}

FailureOr<DenseElementsAttr> readTensor(MLIRContext &context,
                                        const TensorProto &tensor,
                                        const std::string &baseDir,
                                        std::string &error) {
  auto type = tensorTypeOf(context, tensor, error);
  if (failed(type))
    return failure();
  auto bytes = storedBytes(tensor, baseDir, error);
  if (failed(bytes))
    return failure();
  if (type->getNumElements() == 0)
    return DenseElementsAttr::get(*type, llvm::ArrayRef<Attribute>{});
  if (type->getElementType().isInteger(1)) {
    llvm::SmallVector<bool> values;
    for (char c : *bytes)
      values.push_back(c != 0);
    return DenseElementsAttr::get(*type, values);
  }
  llvm::ArrayRef<char> raw(bytes->data(), bytes->size());
  bool detectedSplat = false;
  if (!DenseElementsAttr::isValidRawBuffer(*type, raw, detectedSplat)) {
    error = tensorLabel(tensor) + ": stored data does not match its type";
    return failure();
  }
  return DenseElementsAttr::getFromRawBuffer(*type, raw);
}

} // namespace dtc::onnx
