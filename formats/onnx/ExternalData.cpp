//===- ExternalData.cpp - where a tensor's external bytes are -------------===//
#include "formats/onnx/ExternalData.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using ::onnx::TensorProto;

namespace dtc::formats::onnx {

namespace {

bool parseCount(const std::string &text, int64_t &value) {
  const char *end = text.data() + text.size();
  auto [next, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && next == end && value >= 0;
}

} // namespace

bool checkExternalLocation(std::string_view location, std::string &why) {
  if (location.empty()) {
    why = "is empty";
    return false;
  }
  if (location.find('\0') != std::string_view::npos) {
    why = "contains a NUL byte";
    return false;
  }
  if (location[0] == '/') {
    why = "is an absolute path";
    return false;
  }
  // Each component, split at '/' (and at '\\', which Windows writers use).
  size_t start = 0;
  while (start <= location.size()) {
    size_t end = location.find_first_of("/\\", start);
    if (end == std::string_view::npos)
      end = location.size();
    if (location.substr(start, end - start) == "..") {
      why = "has a '..' component";
      return false;
    }
    start = end + 1;
  }
  return true;
}

std::string joinModelPath(const std::string &modelDir, const std::string &location) {
  if (modelDir.empty() || modelDir == ".")
    return location;
  return modelDir.back() == '/' ? modelDir + location : modelDir + "/" + location;
}

bool resolveExternalData(const TensorProto &tensor, const std::string &modelDir,
                         int64_t tensorBytes, const std::string &label,
                         ExternalData &data, std::string &error) {
  data = ExternalData();
  int64_t length = -1;
  bool haveLocation = false;
  for (const auto &entry : tensor.external_data()) {
    if (entry.key() == "location") {
      data.location = entry.value();
      haveLocation = true;
    } else if ((entry.key() == "offset" && !parseCount(entry.value(), data.offset)) ||
               (entry.key() == "length" && !parseCount(entry.value(), length))) {
      error = label + ": external data " + entry.key() + " '" + entry.value() +
              "' is not a non-negative integer";
      return false;
    }
  }
  if (!haveLocation || data.location.empty()) {
    error = label + ": external data has no location";
    return false;
  }
  std::string why;
  if (!checkExternalLocation(data.location, why)) {
    error = label + ": external data location '" + data.location + "' " + why +
            "; it must be a relative path inside the model's folder";
    return false;
  }
  if (length >= 0 && length != tensorBytes) {
    error = label + ": external data length " + std::to_string(length) +
            " does not match its shape (" + std::to_string(tensorBytes) + " bytes)";
    return false;
  }
  data.length = tensorBytes;
  data.path = joinModelPath(modelDir, data.location);
  struct stat st;
  if (::stat(data.path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      error = label + ": external data file '" + data.path + "' not found";
    else
      error = label + ": cannot read external data file '" + data.path +
              "': " + std::strerror(errno);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    error = label + ": external data file '" + data.path + "' is not a regular file";
    return false;
  }
  data.fileSize = int64_t(st.st_size);
  if (data.offset > data.fileSize || data.fileSize - data.offset < tensorBytes) {
    error = label + ": external data file '" + data.path + "' is too short (needs " +
            std::to_string(tensorBytes) + " bytes at offset " +
            std::to_string(data.offset) + "): it has " + std::to_string(data.fileSize) +
            " bytes";
    return false;
  }
  return true;
}

bool readFileAt(int fd, int64_t at, int64_t size, char *out, std::string &why) {
  while (size > 0) {
    ssize_t n = ::pread(fd, out, size_t(size), off_t(at));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      why = n < 0 ? std::strerror(errno) : "the file ended early (did it shrink?)";
      return false;
    }
    out += n;
    at += n;
    size -= n;
  }
  return true;
}

bool readExternalData(const ExternalData &data, const std::string &label,
                      std::string &bytes, std::string &error) {
  int fd = ::open(data.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = label + ": cannot open external data file '" + data.path +
            "': " + std::strerror(errno);
    return false;
  }
  bytes.resize(size_t(data.length));
  std::string why;
  bool ok = readFileAt(fd, data.offset, data.length, bytes.data(), why);
  ::close(fd);
  if (!ok)
    error = label + ": cannot read " + std::to_string(data.length) + " bytes at offset " +
            std::to_string(data.offset) + " of '" + data.path + "': " + why;
  return ok;
}

} // namespace dtc::formats::onnx
