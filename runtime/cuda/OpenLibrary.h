//===- OpenLibrary.h - a CUDA library opened at run time --------*- C++ -*-===//
//
// cuBLASLt and NCCL come with the CUDA toolkit, whose installer does not
// always register its folders with the loader: they are looked for on the
// loader's paths, then in the toolkit's own folders.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CUDA_OPENLIBRARY_H
#define DTC_RUNTIME_CUDA_OPENLIBRARY_H

#include <string>
#include <vector>

namespace dtc::runtime::cuda {

/// dlopen of the first of `names` found on the loader's paths, then under
/// $CUDA_HOME, $CUDA_PATH and /usr/local/cuda (lib64, lib); null with
/// `error` (the loader's last message) when none is.
void *openToolkitLibrary(const std::vector<std::string> &names, std::string &error);

} // namespace dtc::runtime::cuda

#endif // DTC_RUNTIME_CUDA_OPENLIBRARY_H
