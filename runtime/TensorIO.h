//===- TensorIO.h - tensors in and out of files -----------------*- C++ -*-===//
//
// Tensors come and go as ONNX TensorProto `.pb` files (as the ONNX test
// suites lay them out: input_0.pb, output_0.pb, ...) or NumPy `.npy` files;
// parameters are read from the ONNX model's initializers (inside the model or
// in its external data files), only the slice a rank holds.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_TENSORIO_H
#define DTC_RUNTIME_TENSORIO_H

#include "plan.pb.h"

#include <map>
#include <memory>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace dtc::runtime {

/// A dense row-major tensor owned by the host.
struct HostTensor {
  std::string name;             // from the file (TensorProto.name), may be empty
  plan::TensorType type;
  std::vector<char> bytes;      // little-endian elements
};

/// Writes `pieces` to `tmp`, syncs it to disk and renames it over `path`:
/// a reader (or a crash) never sees half a file. The caller syncs the
/// folder when the new entry itself must survive a crash.
bool writeFileAtomically(const std::string &path, const std::string &tmp,
                         std::initializer_list<std::string_view> pieces, std::string &error);

/// Reads all of a regular file into `data`; false with a message naming it.
bool readWholeFile(const std::string &path, std::string &data, std::string &error);

/// Reads a TensorProto (.pb) or NumPy (.npy, by extension) file.
bool readTensorFile(const std::string &path, HostTensor &tensor, std::string &error);

/// Writes `tensor` as a TensorProto (.pb) or NumPy (.npy, by extension)
/// file, atomically (a temporary file renamed into place).
bool writeTensorFile(const std::string &path, const HostTensor &tensor,
                     std::string &error);

/// Draws a generated model's parameter (source.seeded, an f32 buffer of
/// `type`, the part of the whole tensor that source.slice names) into `out`.
void fillSeeded(const plan::ParameterSource &source, const plan::TensorType &type, void *out);

/// Copies the part of a dense row-major tensor of `dims` that starts at
/// `starts` and spans `sizes` (per dim, inside `dims`) to `out`, dense.
void copySlice(const void *tensor, const std::vector<int64_t> &dims,
               const std::vector<int64_t> &starts, const std::vector<int64_t> &sizes,
               int64_t elementBytes, void *out);

/// The inverse: writes the dense `slice` into the part of `tensor` (dense,
/// row-major, of `dims`) that starts at `starts` and spans `sizes`.
void pasteSlice(const void *slice, const std::vector<int64_t> &dims,
                const std::vector<int64_t> &starts, const std::vector<int64_t> &sizes,
                int64_t elementBytes, void *tensor);

/// Reads parameters from an ONNX model file, opened once and kept for many
/// reads. A source names an initializer; data may live inside the model or
/// in an external file (relative to the model's folder).
class ParameterReader {
public:
  ParameterReader();
  ~ParameterReader(); // both out of line: Model is complete only there
  /// Opens `modelPath`; false with `error` when it cannot be read or parsed.
  bool open(const std::string &modelPath, std::string &error);
  /// Writes the slice `source` names (all of it when source.slice is empty)
  /// of the initializer, converted to nothing: its dtype and the slice's
  /// element count must match `type`, into `out` (type's byte size).
  /// External data is read with pread, only the slice's bytes; several
  /// threads may read at once.
  bool read(const plan::ParameterSource &source, const plan::TensorType &type,
            void *out, std::string &error);
  /// The whole shape of initializer `initializer` (a sharded parameter's
  /// global shape is checked against it); false with `error` when the model
  /// has none of that name.
  bool dims(const std::string &initializer, std::vector<int64_t> &dims,
            std::string &error) const;

private:
  struct Model;
  std::unique_ptr<Model> model_;
};

} // namespace dtc::runtime

#endif // DTC_RUNTIME_TENSORIO_H
