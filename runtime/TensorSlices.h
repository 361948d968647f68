//===- TensorSlices.h - parts of dense row-major tensors --------*- C++ -*-===//
//
// A slice is a box in a row-major tensor: per dim a start and a size. These
// walk it as runs of contiguous bytes, so copying a shard (or reading one
// from a file) moves as few pieces as the layout allows.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_TENSORSLICES_H
#define DTC_RUNTIME_TENSORSLICES_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dtc::runtime {

/// Calls `run(sourceByteOffset, byteLength)` for each contiguous run of the
/// slice (starts, sizes) of a row-major tensor with `dims`, in row-major
/// order of the slice; stops with false when `run` returns false. The
/// slice must lie inside `dims` and not be empty.
template <typename Run>
bool forEachRun(const std::vector<int64_t> &dims,
                const std::vector<int64_t> &starts,
                const std::vector<int64_t> &sizes, int64_t elementBytes,
                Run run) {
  size_t rank = dims.size();
  // Trailing dims taken whole are contiguous with the last partial one.
  size_t inner = rank;
  while (inner > 0 && starts[inner - 1] == 0 && sizes[inner - 1] == dims[inner - 1])
    --inner;
  // suffix[d]: the element count of dims d.. together (dim d - 1's stride).
  std::vector<int64_t> suffix(rank + 1, 1);
  for (size_t d = rank; d-- > 0;)
    suffix[d] = suffix[d + 1] * dims[d];
  if (inner == 0)
    return run(0, suffix[0] * elementBytes);
  int64_t runBytes = sizes[inner - 1] * suffix[inner] * elementBytes;
  // An odometer over the dims before the run's dim.
  size_t outer = inner - 1;
  std::vector<int64_t> index(starts.begin(), starts.begin() + outer);
  while (true) {
    int64_t offset = starts[outer] * suffix[outer + 1];
    for (size_t d = 0; d < outer; ++d)
      offset += index[d] * suffix[d + 1];
    if (!run(offset * elementBytes, runBytes))
      return false;
    size_t d = outer;
    while (d > 0) {
      --d;
      if (++index[d] < starts[d] + sizes[d])
        break;
      index[d] = starts[d];
      if (d == 0)
        return true;
    }
    if (outer == 0)
      return true;
  }
}

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

/// Spreads the dense tensor of `inner` at the start of `data` into the
/// dense tensor of `outer` there (each dim of `inner` at most outer's), at
/// its origin, with zeros elsewhere: a padded parameter read in place, with
/// no second buffer. `data` holds outer's bytes.
void padInPlace(void *data, const std::vector<int64_t> &inner, const std::vector<int64_t> &outer,
                int64_t elementBytes);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_TENSORSLICES_H
