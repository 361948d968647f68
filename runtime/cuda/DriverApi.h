//===- DriverApi.h - the driver API's entry points, found at run time -*- C++ -*-===//
//
// The CUDA driver (libcuda.so.1) comes with the NVIDIA driver, not with
// the toolkit, so it is opened with dlopen: dtc starts and runs plans on
// the CPU on machines without one. DriverApi holds the entry points the
// CUDA backend calls, typed by cuda.h (the toolkit's header, needed to
// build); cuda.h's versioned names (cuMemAlloc is cuMemAlloc_v2) are the
// symbols looked up.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CUDA_DRIVERAPI_H
#define DTC_RUNTIME_CUDA_DRIVERAPI_H

#include <cuda.h>

#include <string>

namespace dtc::runtime::cuda {

struct DriverApi {
#define DTC_DRIVER_ENTRY(name) decltype(&::name) name = nullptr;
#include "runtime/cuda/DriverEntries.def"
};

/// The driver's entry points, opened once from `library` (libcuda.so.1 by
/// default); null with `why` saying what is missing.
const DriverApi *driverApi(std::string &why, const char *library = "libcuda.so.1");

/// Whether `rc` is CUDA_SUCCESS; else false with `error` = "`what`: the
/// driver's name and description of the error".
bool check(const DriverApi &api, CUresult rc, const char *what, std::string &error);

} // namespace dtc::runtime::cuda

#endif // DTC_RUNTIME_CUDA_DRIVERAPI_H
