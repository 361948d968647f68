//===- CudnnApi.h - cuDNN's entry points, found at run time -----*- C++ -*-===//
//
// cuDNN (libcudnn.so.9, beside the CUDA toolkit) is opened with dlopen,
// like cuBLASLt: a machine that runs dtc on CPUs needs no CUDA libraries.
// Typed by cudnn.h. The convolutions use cuDNN's descriptor API
// (cudnnConvolutionForward and its gradients), which cuDNN 9 still
// ships beside its graph API.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CUDA_CUDNNAPI_H
#define DTC_RUNTIME_CUDA_CUDNNAPI_H

#include <cudnn.h>

#include <string>

namespace dtc::runtime::cuda {

struct CudnnApi {
#define DTC_CUDNN_ENTRY(name) decltype(&::name) name = nullptr;
#include "runtime/cuda/CudnnEntries.def"
  void *library = nullptr; // dlopen's handle, which cudnn-frontend resolves its calls in
};

/// cuDNN's entry points, opened once (libcudnn.so.9, or the unversioned
/// name); null with `why` when none loads.
const CudnnApi *cudnnApi(std::string &why);

/// Whether `status` is CUDNN_STATUS_SUCCESS; else false with `error` =
/// "`what`: cuDNN's description".
bool check(const CudnnApi &api, cudnnStatus_t status, const char *what, std::string &error);

} // namespace dtc::runtime::cuda

#endif // DTC_RUNTIME_CUDA_CUDNNAPI_H
