//===- NcclApi.h - NCCL's entry points, found at run time -------*- C++ -*-===//
//
// NCCL (libnccl.so.2) carries collectives between GPUs. Opened with dlopen
// like the driver and cuBLASLt, typed by nccl.h.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CUDA_NCCLAPI_H
#define DTC_RUNTIME_CUDA_NCCLAPI_H

#include <nccl.h>

#include <string>

namespace dtc::runtime::cuda {

struct NcclApi {
#define DTC_NCCL_ENTRY(name) decltype(&::name) name = nullptr;
#include "runtime/cuda/NcclEntries.def"
};

/// NCCL's entry points, opened once; null with `why` when it does not load.
const NcclApi *ncclApi(std::string &why);

/// Whether `result` is ncclSuccess; else false with `error` = "`what`: NCCL's description".
bool check(const NcclApi &api, ncclResult_t result, const char *what, std::string &error);

} // namespace dtc::runtime::cuda

#endif // DTC_RUNTIME_CUDA_NCCLAPI_H
