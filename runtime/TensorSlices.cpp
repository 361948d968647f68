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

void padInPlace(void *data, const std::vector<int64_t> &inner, const std::vector<int64_t> &outer,
                int64_t elementBytes) {
  char *bytes = static_cast<char *>(data);
  size_t rank = outer.size();
  int64_t outerBytes = elementBytes;
  for (int64_t d : outer)
    outerBytes *= d;
  for (int64_t d : inner)
    if (d == 0) {
      std::memset(bytes, 0, size_t(outerBytes));
      return;
    }
  // Rows: from the last dim that differs on, contiguous in both layouts.
  size_t k = rank;
  while (k > 0 && inner[k - 1] == outer[k - 1])
    --k;
  if (k == 0)
    return; // the same shape
  --k;
  int64_t rowBytes = elementBytes, rows = 1;
  for (size_t d = k; d < rank; ++d)
    rowBytes *= inner[d];
  for (size_t d = 0; d < k; ++d)
    rows *= inner[d];
  // outerStride[d]: the bytes of one step along dim d in `outer`.
  std::vector<int64_t> outerStride(rank + 1, elementBytes);
  for (size_t d = rank; d-- > 0;)
    outerStride[d] = outerStride[d + 1] * outer[d];
  // Last row first: each row moves to where it lies in `outer` (never
  // before where it was), so no row still to move is overwritten; the gap
  // after it, up to the row moved before, is padding.
  int64_t end = outerBytes;
  for (int64_t r = rows; r-- > 0;) {
    int64_t to = 0, rest = r;
    for (size_t d = k; d-- > 0;) {
      to += (rest % inner[d]) * outerStride[d + 1];
      rest /= inner[d];
    }
    std::memmove(bytes + to, bytes + r * rowBytes, size_t(rowBytes));
    std::memset(bytes + to + rowBytes, 0, size_t(end - to - rowBytes));
    end = to;
  }
}

} // namespace dtc::runtime
