//===- TensorSlices.cpp - parts of dense row-major tensors ----------------===//
#include "runtime/TensorSlices.h"

#include <cstring>

namespace dtc::runtime {

namespace {

/// Calls `copy(offset in the tensor, offset in the dense slice, bytes)` for
/// each contiguous run of the part of a tensor that copySlice describes.
template <typename Copy>
void forEachSliceRun(const std::vector<int64_t> &dims, const std::vector<int64_t> &starts,
                     const std::vector<int64_t> &sizes, int64_t elementBytes, Copy copy) {
  for (int64_t size : sizes)
    if (size == 0)
      return;
  int64_t dense = 0;
  forEachRun(dims, starts, sizes, elementBytes, [&](int64_t offset, int64_t length) {
    copy(offset, dense, size_t(length));
    dense += length;
    return true;
  });
}

} // namespace

void copySlice(const void *tensor, const std::vector<int64_t> &dims,
               const std::vector<int64_t> &starts, const std::vector<int64_t> &sizes,
               int64_t elementBytes, void *out) {
  forEachSliceRun(dims, starts, sizes, elementBytes, [&](int64_t at, int64_t to, size_t n) {
    std::memcpy(static_cast<char *>(out) + to, static_cast<const char *>(tensor) + at, n);
  });
}

void pasteSlice(const void *slice, const std::vector<int64_t> &dims,
                const std::vector<int64_t> &starts, const std::vector<int64_t> &sizes,
                int64_t elementBytes, void *tensor) {
  forEachSliceRun(dims, starts, sizes, elementBytes, [&](int64_t at, int64_t from, size_t n) {
    std::memcpy(static_cast<char *>(tensor) + at, static_cast<const char *>(slice) + from, n);
  });
}

} // namespace dtc::runtime
