//===- TensorProto.cpp - an ONNX TensorProto's contents, checked ----------===//
#include "formats/onnx/TensorProto.h"
#include "formats/onnx/ExternalData.h"

#include <cstring>

using ::onnx::TensorProto;

namespace dtc::formats::onnx {

// Element bytes are stored little-endian in TensorProto; the host order is
// used as is.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the ONNX tensor decoder assumes a little-endian host");

int64_t elementBytes(int32_t dataType) {
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

TypedField typedField(int32_t dataType) {
  switch (dataType) {
  case TensorProto::FLOAT:
    return TypedField::Float;
  case TensorProto::DOUBLE:
    return TypedField::Double;
  case TensorProto::INT64:
    return TypedField::Int64;
  case TensorProto::UINT32:
  case TensorProto::UINT64:
    return TypedField::Uint64;
  default:
    return TypedField::Int32;
  }
}

const char *typedFieldName(TypedField field) {
  switch (field) {
  case TypedField::Float:
    return "float_data";
  case TypedField::Double:
    return "double_data";
  case TypedField::Int32:
    return "int32_data";
  case TypedField::Int64:
    return "int64_data";
  case TypedField::Uint64:
    return "uint64_data";
  }
  return "?";
}

std::string dataTypeName(int32_t dataType) {
  if (TensorProto::DataType_IsValid(dataType))
    return TensorProto::DataType_Name(TensorProto::DataType(dataType));
  return "data type " + std::to_string(dataType);
}

std::string tensorLabel(const TensorProto &tensor) {
  return tensor.name().empty() ? std::string("tensor") : "tensor '" + tensor.name() + "'";
}

bool describeTensor(const TensorProto &t, const std::string &label, TensorInfo &info,
                    std::string &error) {
  if (t.data_type() == TensorProto::STRING) {
    error = label + ": string tensors are not supported";
    return false;
  }
  info.dataType = t.data_type();
  info.elementBytes = elementBytes(t.data_type());
  if (!info.elementBytes) {
    error = label + ": " +
            (TensorProto::DataType_IsValid(t.data_type()) ? "data type " : "") +
            dataTypeName(t.data_type()) + " is not supported";
    return false;
  }
  if (t.has_segment()) {
    error = label + ": segmented tensors are not supported";
    return false;
  }
  int64_t count = 1;
  for (int64_t d : t.dims()) {
    if (d < 0) {
      error = label + ": negative dim in " + dimsToString(t.dims());
      return false;
    }
    if (d != 0 && count > kMaxElements / d) {
      error = label + ": dims " + dimsToString(t.dims()) + " are too large";
      return false;
    }
    count *= d;
  }
  info.count = count;
  info.bytes = count * info.elementBytes;
  return true;
}

namespace {

int64_t typedFieldSize(const TensorProto &t, TypedField field) {
  switch (field) {
  case TypedField::Float:
    return t.float_data_size();
  case TypedField::Double:
    return t.double_data_size();
  case TypedField::Int32:
    return t.int32_data_size();
  case TypedField::Int64:
    return t.int64_data_size();
  case TypedField::Uint64:
    return t.uint64_data_size();
  }
  return 0;
}

/// Appends the low `width` bytes of each value's bits.
template <typename Values, typename ToBits>
void appendValues(const Values &values, int64_t width, ToBits toBits, std::string &out) {
  size_t at = out.size();
  out.resize(at + size_t(values.size()) * size_t(width));
  for (const auto &v : values) {
    uint64_t bits = toBits(v);
    std::memcpy(&out[at], &bits, size_t(width));
    at += size_t(width);
  }
}

} // namespace

bool checkInlineData(const TensorProto &t, const TensorInfo &info, const std::string &label,
                     std::string &error) {
  if (t.has_raw_data()) {
    if (int64_t(t.raw_data().size()) != info.bytes) {
      error = label + ": raw_data holds " + std::to_string(t.raw_data().size()) +
              " bytes but " + dataTypeName(t.data_type()) + " " + dimsToString(t.dims()) +
              " needs " + std::to_string(info.bytes);
      return false;
    }
    return true;
  }
  TypedField field = typedField(t.data_type());
  int64_t have = typedFieldSize(t, field);
  if (have != info.count) {
    error = label + ": " + typedFieldName(field) + " holds " + std::to_string(have) +
            " values but " + dataTypeName(t.data_type()) + " " + dimsToString(t.dims()) +
            " needs " + std::to_string(info.count);
    return false;
  }
  return true;
}

bool inlineBytes(const TensorProto &t, const TensorInfo &info, const std::string &label,
                 std::string &storage, std::string_view &bytes, std::string &error) {
  if (!checkInlineData(t, info, label, error))
    return false;
  if (t.has_raw_data()) {
    bytes = t.raw_data();
    return true;
  }
  storage.clear();
  storage.reserve(size_t(info.bytes));
  int64_t width = info.elementBytes;
  switch (typedField(t.data_type())) {
  case TypedField::Float:
    appendValues(t.float_data(), width, [](float v) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      return uint64_t(bits);
    }, storage);
    break;
  case TypedField::Double:
    appendValues(t.double_data(), width, [](double v) {
      uint64_t bits;
      std::memcpy(&bits, &v, 8);
      return bits;
    }, storage);
    break;
  case TypedField::Int32: // also 8/16-bit ints, bool and halves, in the low bits
    appendValues(t.int32_data(), width, [](int32_t v) { return uint64_t(uint32_t(v)); },
                 storage);
    break;
  case TypedField::Int64:
    appendValues(t.int64_data(), width, [](int64_t v) { return uint64_t(v); }, storage);
    break;
  case TypedField::Uint64:
    appendValues(t.uint64_data(), width, [](uint64_t v) { return v; }, storage);
    break;
  }
  bytes = storage;
  return true;
}

bool readTensorBytes(const TensorProto &t, const TensorInfo &info, const std::string &modelDir,
                     const std::string &label, std::string &bytes, std::string &error) {
  if (isExternal(t)) {
    ExternalData data;
    return resolveExternalData(t, modelDir, info.bytes, label, data, error) &&
           readExternalData(data, label, bytes, error);
  }
  std::string storage;
  std::string_view view;
  if (!inlineBytes(t, info, label, storage, view, error))
    return false;
  if (view.data() == storage.data())
    bytes = std::move(storage);
  else
    bytes.assign(view);
  return true;
}

} // namespace dtc::formats::onnx
