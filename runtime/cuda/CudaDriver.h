//===- CudaDriver.h - the NVIDIA driver, found at run time ------*- C++ -*-===//
//
// The CUDA backend reaches the GPU through the driver API (libcuda.so.1,
// installed with the NVIDIA driver, not with the toolkit), opened with
// dlopen so that dtc starts and runs plans on the CPU on a machine without
// one. This is the only place that knows where the driver comes from.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CUDA_CUDADRIVER_H
#define DTC_RUNTIME_CUDA_CUDADRIVER_H

#include <string>
#include <vector>

namespace dtc::runtime::cuda {

/// The usable GPUs: their count (>= 1), or 0 with `why` saying what is
/// missing (no driver library, cuInit's error, no device).
int usableGpus(std::string &why);

/// The PTX chip ("sm_90") to load on a GPU of compute capability
/// `major`.`minor` among `chips`: its own or the newest older one (the
/// driver compiles PTX forward); "" when all are newer.
std::string chipFor(int major, int minor, const std::vector<std::string> &chips);

} // namespace dtc::runtime::cuda

#endif // DTC_RUNTIME_CUDA_CUDADRIVER_H
