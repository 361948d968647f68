//===- TensorIO.cpp - tensors in and out of files -------------------------===//
//
// Everything here reads untrusted bytes: every size is checked before it is
// used, so a truncated or foreign file is a message, never a crash.
//
//===----------------------------------------------------------------------===//
#include "runtime/TensorIO.h"
#include "runtime/NpyFile.h"
#include "plan/DType.h"

#include "formats/onnx/TensorProto.h"

#include <string_view>
#include <unistd.h>
#include <vector>

using ::onnx::TensorProto;
namespace format = dtc::formats::onnx;

namespace dtc::runtime {

namespace {

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.substr(s.size() - suffix.size()) == suffix;
}

enum class FileKind { TensorProto, Npy, Unknown };

FileKind fileKind(const std::string &path) {
  if (endsWith(path, ".pb"))
    return FileKind::TensorProto;
  if (endsWith(path, ".npy"))
    return FileKind::Npy;
  return FileKind::Unknown;
}

std::string unknownKindError(const std::string &path) {
  return path + ": unknown tensor file type; expected a .pb (ONNX TensorProto) "
                "or .npy (NumPy) file";
}

bool readTensorProto(const std::string &path, const std::string &data,
                     HostTensor &tensor, std::string &error) {
  TensorProto t;
  if (!t.ParseFromString(data)) {
    error = path + ": not an ONNX TensorProto (truncated or corrupt)";
    return false;
  }
  std::string label =
      t.name().empty() ? path : path + ": tensor '" + t.name() + "'";
  if (t.data_type() == TensorProto::UNDEFINED) {
    error = label + ": no data type (truncated, or not a TensorProto?)";
    return false;
  }
  format::TensorInfo info;
  const ElementType *element = onnxElementType(t, label, info, error);
  if (!element)
    return false;
  if (format::isExternal(t)) {
    error = label + ": data is in an external file; only tensors with their "
                    "data inside the .pb file can be read";
    return false;
  }
  std::string storage;
  std::string_view bytes;
  if (!format::inlineBytes(t, info, label, storage, bytes, error))
    return false;
  tensor.name = t.name();
  tensor.type.Clear();
  tensor.type.set_dtype(element->dtype);
  for (int64_t d : t.dims())
    tensor.type.add_shape(d);
  tensor.bytes.assign(bytes.begin(), bytes.end());
  return true;
}

/// Checks that `tensor` is writable: a known dtype and as many bytes as its
/// type needs.
bool checkHostTensor(const std::string &path, const HostTensor &tensor,
                     const ElementType *&element, std::string &error) {
  element = elementTypeOf(tensor.type.dtype());
  if (!element) {
    error = "cannot write " + path + ": " + std::string(dtypeName(tensor.type.dtype())) +
            " is not a tensor element type";
    return false;
  }
  std::vector<int64_t> dims(tensor.type.shape().begin(), tensor.type.shape().end());
  int64_t count = countElements(dims, "cannot write " + path, error);
  if (count < 0)
    return false;
  if (int64_t(tensor.bytes.size()) != count * element->bytes) {
    error = "cannot write " + path + ": the tensor holds " +
            std::to_string(tensor.bytes.size()) + " bytes but " +
            std::string(dtypeName(element->dtype)) + " " + format::dimsToString(dims) +
            " needs " + std::to_string(count * element->bytes);
    return false;
  }
  return true;
}

} // namespace

bool readTensorFile(const std::string &path, HostTensor &tensor,
                    std::string &error) {
  FileKind kind = fileKind(path);
  if (kind == FileKind::Unknown) {
    error = unknownKindError(path);
    return false;
  }
  std::string data;
  if (!readWholeFile(path, data, error))
    return false;
  return kind == FileKind::TensorProto ? readTensorProto(path, data, tensor, error)
                                       : readNpy(path, data, tensor, error);
}

bool writeTensorFile(const std::string &path, const HostTensor &tensor,
                     std::string &error) {
  FileKind kind = fileKind(path);
  if (kind == FileKind::Unknown) {
    error = unknownKindError(path);
    return false;
  }
  const ElementType *element;
  if (!checkHostTensor(path, tensor, element, error))
    return false;
  std::string_view bytes(tensor.bytes.data(), tensor.bytes.size());
  if (kind == FileKind::Npy) {
    if (!element->npyDescr) {
      error = "cannot write " + path + ": NumPy has no " +
              std::string(dtypeName(element->dtype)) + " dtype; write a .pb file instead";
      return false;
    }
    std::string header = npyHeader(element->npyDescr, tensor.type);
    return writeFileAtomically(path, path + ".tmp." + std::to_string(::getpid()), {header, bytes},
                               error);
  }
  TensorProto t;
  if (!tensor.name.empty())
    t.set_name(tensor.name);
  for (int64_t d : tensor.type.shape())
    t.add_dims(d);
  t.set_data_type(element->onnxType);
  t.set_raw_data(bytes.data(), bytes.size());
  std::string serialized;
  if (!t.SerializeToString(&serialized)) {
    error = "cannot write " + path + ": the tensor is too large for a "
                                    "TensorProto (2 GB); use .npy";
    return false;
  }
  return writeFileAtomically(path, path + ".tmp." + std::to_string(::getpid()), {serialized},
                             error);
}

} // namespace dtc::runtime
