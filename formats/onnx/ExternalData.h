//===- ExternalData.h - where a tensor's external bytes are -----*- C++ -*-===//
//
// An ONNX tensor whose data_location is EXTERNAL names a file (`location`,
// relative to the model's folder), a byte `offset` in it and optionally a
// `length`. Everything that reads such a tensor (the importer, the runtime's
// ParameterReader) resolves it here, through one check: the location stays
// inside the model's folder, the numbers parse, the file is a regular file
// and holds the tensor's bytes at the offset.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_FORMATS_ONNX_EXTERNALDATA_H
#define DTC_FORMATS_ONNX_EXTERNALDATA_H

#include "onnx.pb.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace dtc::formats::onnx {

/// A tensor's external data, resolved and checked.
struct ExternalData {
  std::string location; // as the model names it: relative to its folder
  std::string path;     // the file: the model's folder joined with location
  int64_t offset = 0;   // of the tensor's first byte in the file
  int64_t length = 0;   // the tensor's bytes (the model's 'length' if given, checked)
  int64_t fileSize = 0; // when it was checked
};

/// Checks an external data location: not empty, relative, and with no '..'
/// component (and no NUL byte), so that it names a file inside the model's
/// folder. False with `why`.
bool checkExternalLocation(std::string_view location, std::string &why);

/// `location` under `modelDir` ("" or "." for the current folder).
std::string joinModelPath(const std::string &modelDir, const std::string &location);

/// Reads the external_data entries of `tensor` (location, offset, length;
/// other keys are ignored) and checks them: the location with
/// checkExternalLocation, offset and length as non-negative integers, the
/// length (when given) equal to `tensorBytes`, the file a regular file
/// under `modelDir` that holds `tensorBytes` bytes at the offset. False
/// with `error`, starting with `label`.
bool resolveExternalData(const ::onnx::TensorProto &tensor, const std::string &modelDir,
                         int64_t tensorBytes, const std::string &label,
                         ExternalData &data, std::string &error);

/// Reads `size` bytes at byte `at` of the open file `fd` into `out`, going
/// on after short reads; false with `why` when the file fails or ends.
bool readFileAt(int fd, int64_t at, int64_t size, char *out, std::string &why);

/// Reads the bytes `data` describes into `bytes`; false with `error`.
bool readExternalData(const ExternalData &data, const std::string &label,
                      std::string &bytes, std::string &error);

} // namespace dtc::formats::onnx

#endif // DTC_FORMATS_ONNX_EXTERNALDATA_H
