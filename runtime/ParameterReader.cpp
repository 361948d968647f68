//===- ParameterReader.cpp - parameters from the ONNX model ---------------===//
//
// The model's bytes are untrusted: the initializer is decoded and its
// external data resolved by formats/onnx (one path check: a location inside
// the model's folder, a file long enough), then only the plan's slice of it
// is read.
//
//===----------------------------------------------------------------------===//
#include "runtime/ParameterReader.h"
#include "runtime/Files.h"
#include "runtime/HostTensor.h"
#include "runtime/TensorSlices.h"
#include "plan/DType.h"

#include "formats/onnx/ExternalData.h"
#include "formats/onnx/TensorProto.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <string_view>
#include <unistd.h>
#include <unordered_map>

using ::onnx::TensorProto;
namespace format = dtc::formats::onnx;

namespace dtc::runtime {

using format::dimsToString;

namespace {

/// A padded parameter's part (ParameterSource.model_shape): the slice is in
/// the plan's padded whole; clipped to the model's shape, which the
/// initializer must have, it is what the model holds (`starts`, `sizes`,
/// possibly empty), and `padded` the buffer's shape it is spread into.
bool clipToModel(const plan::ParameterSource &source, const plan::TensorType &type,
                 const std::vector<int64_t> &dims, const std::string &label,
                 std::vector<int64_t> &starts, std::vector<int64_t> &sizes,
                 std::vector<int64_t> &padded, std::string &error) {
  std::vector<int64_t> model(source.model_shape().begin(), source.model_shape().end());
  if (dims != model) {
    error = label + " is " + dimsToString(dims) + " but the plan pads it from " +
            dimsToString(model) + "; recompile the plan for this model";
    return false;
  }
  padded.assign(type.shape().begin(), type.shape().end());
  if (padded.size() != model.size() ||
      (source.slice_size() != 0 && size_t(source.slice_size()) != model.size())) {
    error = label + " " + dimsToString(dims) + ": the plan's buffer " + dimsToString(padded) +
            (source.slice_size() != 0
                 ? " (sliced in " + std::to_string(source.slice_size()) + " dims)"
                 : std::string()) +
            " is not of the padded parameter's rank";
    return false;
  }
  for (size_t d = 0; d < model.size(); ++d) {
    int64_t start = source.slice_size() ? source.slice(int(d)).start() : 0;
    int64_t size = source.slice_size() ? source.slice(int(d)).size() : padded[d];
    if (start < 0 || size != padded[d]) {
      error = label + " padded from " + dimsToString(model) + ": slice [" +
              std::to_string(start) + ", +" + std::to_string(size) + ") of dim " +
              std::to_string(d) + " is not a part of the plan's buffer " + dimsToString(padded);
      return false;
    }
    starts.push_back(std::min(start, model[d]));
    sizes.push_back(std::min(start + size, model[d]) - starts.back());
  }
  return true;
}

} // namespace

struct ParameterReader::Model {
  std::string path;
  std::string dir; // the model's folder, "" for the current one
  ::onnx::ModelProto proto;
  std::unordered_map<std::string, const TensorProto *> initializers;

  std::mutex filesMutex; // read() may run on several threads
  std::unordered_map<std::string, int> files; // open external data files

  ~Model() {
    for (auto &entry : files)
      ::close(entry.second);
  }

  /// The open descriptor of `filePath` (opened once, kept).
  bool openFile(const std::string &filePath, int &fd, std::string &error) {
    std::lock_guard<std::mutex> lock(filesMutex);
    auto it = files.find(filePath);
    if (it != files.end()) {
      fd = it->second;
      return true;
    }
    fd = ::open(filePath.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      error = "cannot open " + filePath + ": " + std::strerror(errno);
      return false;
    }
    files.emplace(filePath, fd);
    return true;
  }
};

ParameterReader::ParameterReader() = default;
ParameterReader::~ParameterReader() = default;

bool ParameterReader::open(const std::string &modelPath, std::string &error) {
  auto model = std::make_unique<Model>();
  model->path = modelPath;
  size_t slash = modelPath.find_last_of('/');
  if (slash != std::string::npos)
    model->dir = modelPath.substr(0, slash == 0 ? 1 : slash);
  std::string data;
  if (!readWholeFile(modelPath, data, error))
    return false;
  if (!model->proto.ParseFromString(data)) {
    error = modelPath + ": not an ONNX model (cannot parse a ModelProto)";
    if (data.size() > (size_t(1) << 31))
      error += "; models over 2 GB must keep their initializers in external "
               "data files";
    return false;
  }
  if (!model->proto.has_graph()) {
    error = modelPath + ": not an ONNX model (it has no graph)";
    return false;
  }
  for (const TensorProto &t : model->proto.graph().initializer()) {
    if (!model->initializers.emplace(t.name(), &t).second) {
      error = modelPath + ": two initializers are named '" + t.name() + "'";
      return false;
    }
  }
  model_ = std::move(model);
  return true;
}

bool ParameterReader::dims(const std::string &initializer, std::vector<int64_t> &dims,
                           std::string &error) const {
  if (!model_) {
    error = "cannot read initializer '" + initializer + "': no model is open";
    return false;
  }
  auto found = model_->initializers.find(initializer);
  if (found == model_->initializers.end()) {
    error = model_->path + ": no initializer named '" + initializer +
            "' (the plan needs it; was it compiled from this model?)";
    return false;
  }
  dims.assign(found->second->dims().begin(), found->second->dims().end());
  return true;
}

bool ParameterReader::read(const plan::ParameterSource &source,
                           const plan::TensorType &type, void *out,
                           std::string &error) {
  if (!model_) {
    error = "cannot read initializer '" + source.initializer() +
            "': no model is open";
    return false;
  }
  Model &model = *model_;
  const std::string &name = sourceInitializer(source);
  auto found = model.initializers.find(name);
  if (found == model.initializers.end()) {
    error = model.path + ": no initializer named '" + name +
            "' (the plan needs it; was it compiled from this model?)";
    return false;
  }
  const TensorProto &t = *found->second;
  std::string label = model.path + ": initializer '" + t.name() + "'";
  format::TensorInfo info;
  const ElementType *element = onnxElementType(t, label, info, error);
  if (!element)
    return false;
  if (element->dtype != type.dtype()) {
    error = label + " is " + format::dataTypeName(t.data_type()) +
            " but the plan reads it as " + dtypeName(type.dtype());
    return false;
  }

  // The slice, checked against the initializer's dims; a padded
  // parameter's is clipped to them, and spread into the buffer once read.
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end()), starts, sizes, padded;
  if (source.model_shape_size() != 0) {
    if (!clipToModel(source, type, dims, label, starts, sizes, padded, error))
      return false;
  } else if (source.slice_size() == 0) {
    starts.assign(dims.size(), 0);
    sizes = dims;
  } else {
    if (size_t(source.slice_size()) != dims.size()) {
      error = label + " has rank " + std::to_string(dims.size()) +
              " but the plan slices " + std::to_string(source.slice_size()) +
              " dims";
      return false;
    }
    for (size_t d = 0; d < dims.size(); ++d) {
      int64_t start = source.slice(int(d)).start(), size = source.slice(int(d)).size();
      if (start < 0 || size < 0 || start > dims[d] || size > dims[d] - start) {
        error = label + " " + dimsToString(dims) + ": slice [" +
                std::to_string(start) + ", " + std::to_string(start + size) +
                ") of dim " + std::to_string(d) + " is out of bounds";
        return false;
      }
      starts.push_back(start);
      sizes.push_back(size);
    }
  }
  int64_t sliceCount = 1;
  for (int64_t s : sizes)
    sliceCount *= s; // bounded by the initializer's checked count
  int64_t wantCount = elementCount(type);
  if (padded.empty() && sliceCount != wantCount) {
    error = label + ": the slice " + dimsToString(sizes) + " has " +
            std::to_string(sliceCount) + " elements but the plan's buffer " +
            dimsToString(type.shape()) + " holds " + std::to_string(wantCount);
    return false;
  }

  bool external = format::isExternal(t);
  format::ExternalData ref;
  if (external && !format::resolveExternalData(t, model.dir, info.bytes, label, ref, error))
    return false;
  // The compiler recorded where the bytes were; a model rewritten since
  // would give a rank other bytes than the plan was made for.
  if (!source.file().empty() &&
      (!external || source.file() != ref.location || source.offset() != ref.offset)) {
    error = label + ": the plan reads it from " + source.file() + " at offset " +
            std::to_string(source.offset()) + " but the model has it " +
            (external ? "in " + ref.location + " at offset " +
                            std::to_string(ref.offset)
                      : std::string("inside the model")) +
            "; recompile the plan for this model";
    return false;
  }
  if (sliceCount == 0) {
    if (!padded.empty()) // a part of the padding alone
      std::memset(out, 0, size_t(wantCount * info.elementBytes));
    return true;
  }

  char *dst = static_cast<char *>(out);
  if (!external) {
    std::string storage;
    std::string_view bytes;
    if (!format::inlineBytes(t, info, label, storage, bytes, error))
      return false;
    forEachRun(dims, starts, sizes, info.elementBytes, [&](int64_t offset, int64_t length) {
      std::memcpy(dst, bytes.data() + offset, size_t(length));
      dst += length;
      return true;
    });
    if (!padded.empty())
      padInPlace(out, sizes, padded, info.elementBytes);
    return true;
  }

  int fd;
  if (!model.openFile(ref.path, fd, error)) {
    error = label + ": " + error;
    return false;
  }
  bool read = forEachRun(dims, starts, sizes, info.elementBytes,
                         [&](int64_t offset, int64_t length) {
                           std::string why;
                           if (!format::readFileAt(fd, ref.offset + offset, length, dst, why)) {
                             error = label + ": cannot read " + ref.path + ": " + why;
                             return false;
                           }
                           dst += length;
                           return true;
                         });
  if (read && !padded.empty())
    padInPlace(out, sizes, padded, info.elementBytes);
  return read;
}

} // namespace dtc::runtime
