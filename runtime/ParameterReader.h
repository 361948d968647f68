//===- ParameterReader.h - parameters from the ONNX model -------*- C++ -*-===//
//
// Parameters are read from the ONNX model's initializers (inside the model
// or in its external data files), only the slice a rank holds. The model is
// decoded and its external data checked by formats/onnx, as the importer
// does.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_PARAMETERREADER_H
#define DTC_RUNTIME_PARAMETERREADER_H

#include "plan.pb.h"

#include <memory>
#include <string>
#include <vector>

namespace dtc::runtime {

/// The initializer a parameter's bytes come from: its own, or for an untied
/// copy (ParameterSource.copy_of) the one it copies.
inline const std::string &sourceInitializer(const plan::ParameterSource &source) {
  return source.copy_of().empty() ? source.initializer() : source.copy_of();
}

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
  /// threads may read at once. A padded parameter (source.model_shape, which
  /// the initializer's dims must equal) is sliced in the padded whole, of
  /// `type`'s rank: what lies in the model is read, the rest is zeros.
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

#endif // DTC_RUNTIME_PARAMETERREADER_H
