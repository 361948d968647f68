//===- TensorProto.h - an ONNX TensorProto's contents, checked --*- C++ -*-===//
//
// The one decoder of ONNX TensorProto messages: which data types dtc holds
// and how many bytes each takes, the shape's element count, and the bytes
// themselves from raw_data, a typed field (float_data, int32_data, ...) or
// external data (ExternalData.h). The importer and the runtime both read
// tensors through here; neither decodes a TensorProto itself.
//
// Every size comes from untrusted bytes and is checked before it is used:
// a malformed tensor is a message, never a crash. No MLIR here.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_FORMATS_ONNX_TENSORPROTO_H
#define DTC_FORMATS_ONNX_TENSORPROTO_H

#include "onnx.pb.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace dtc::formats::onnx {

/// The TensorProto field that carries a data type's values when raw_data is
/// not used (8/16-bit ints, bool and halves go in int32_data's low bits).
enum class TypedField { Float, Double, Int32, Int64, Uint64 };

/// Bytes per element as ONNX stores them (BOOL: one byte); 0 for the types
/// dtc does not handle (strings, complex, 4- and 8-bit floats, ...).
int64_t elementBytes(int32_t dataType);

/// The typed field of `dataType` (elementBytes(dataType) != 0).
TypedField typedField(int32_t dataType);
/// "float_data", "int32_data", ...
const char *typedFieldName(TypedField field);

/// "FLOAT", "INT64", ... or "data type 42" for numbers ONNX does not define.
std::string dataTypeName(int32_t dataType);

/// "tensor 'w'" (or "tensor" when it has no name), for messages.
std::string tensorLabel(const ::onnx::TensorProto &tensor);

/// "[2, 3]", for messages.
template <typename Dims> std::string dimsToString(const Dims &dims) {
  std::string s = "[";
  for (auto d : dims) {
    if (s.size() > 1)
      s += ", ";
    s += std::to_string(d);
  }
  return s + "]";
}

/// What a checked tensor holds.
struct TensorInfo {
  int32_t dataType = 0;
  int64_t elementBytes = 0;
  int64_t count = 0; // elements
  int64_t bytes = 0; // count * elementBytes
};

/// The most elements a tensor may have (as plan/DType.h's elementCount).
constexpr int64_t kMaxElements = int64_t(1) << 48;

/// Checks that `tensor` is one dtc can hold (a supported data type, not
/// segmented, dims non-negative and not too many elements) and describes it;
/// false with `error` (starting with `label`) otherwise. Does not look at
/// the data.
bool describeTensor(const ::onnx::TensorProto &tensor, const std::string &label,
                    TensorInfo &info, std::string &error);

inline bool isExternal(const ::onnx::TensorProto &tensor) {
  return tensor.data_location() == ::onnx::TensorProto::EXTERNAL;
}

/// Checks that the data inside `tensor` (raw_data, or else its typed field)
/// holds exactly the elements `info` says, without copying it.
bool checkInlineData(const ::onnx::TensorProto &tensor, const TensorInfo &info,
                     const std::string &label, std::string &error);

/// The data inside `tensor` as little-endian bytes, checked as
/// checkInlineData does: raw_data as it is, or the typed field's values
/// converted into `storage` (which `bytes` then views).
bool inlineBytes(const ::onnx::TensorProto &tensor, const TensorInfo &info,
                 const std::string &label, std::string &storage,
                 std::string_view &bytes, std::string &error);

/// All of the tensor's bytes, from inside it or from its external data file
/// under `modelDir` (resolved and checked by resolveExternalData).
bool readTensorBytes(const ::onnx::TensorProto &tensor, const TensorInfo &info,
                     const std::string &modelDir, const std::string &label,
                     std::string &bytes, std::string &error);

} // namespace dtc::formats::onnx

#endif // DTC_FORMATS_ONNX_TENSORPROTO_H
