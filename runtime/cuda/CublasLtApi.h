//===- CublasLtApi.h - cuBLASLt's entry points, found at run time -*- C++ -*-===//
//
// cuBLASLt (the toolkit's libcublasLt.so.13) is opened with dlopen, like
// the driver: a machine that runs dtc on CPUs needs no CUDA libraries.
// Typed by cublasLt.h.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CUDA_CUBLASLTAPI_H
#define DTC_RUNTIME_CUDA_CUBLASLTAPI_H

#include <cublasLt.h>

#include <string>

namespace dtc::runtime::cuda {

struct CublasLtApi {
#define DTC_CUBLASLT_ENTRY(name) decltype(&::name) name = nullptr;
#include "runtime/cuda/CublasLtEntries.def"
};

/// cuBLASLt's entry points, opened once (libcublasLt.so.13, .12, or the
/// unversioned name); null with `why` when none loads.
const CublasLtApi *cublasLtApi(std::string &why);

/// Whether `status` is CUBLAS_STATUS_SUCCESS; else false with `error` =
/// "`what`: cuBLASLt's description".
bool check(const CublasLtApi &api, cublasStatus_t status, const char *what, std::string &error);

} // namespace dtc::runtime::cuda

#endif // DTC_RUNTIME_CUDA_CUBLASLTAPI_H
