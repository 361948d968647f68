//===- CudaDeviceUnavailable.cpp - a dtc built without the CUDA toolkit ---===//
//
// Built in place of CudaDevice.cpp when CMake found no CUDA toolkit (its
// headers type the driver's entry points): --backend cuda then says so.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/CudaDevice.h"

namespace dtc::runtime::cuda {

int localGpu(int gpus, int fallback) { return gpus > 0 ? fallback % gpus : 0; }

std::unique_ptr<Device> openCudaDevice(int, std::string &error) {
  error = "this dtc was built without the CUDA toolkit: rebuild it where the toolkit is "
          "installed (nvcc on PATH) to run plans on GPUs";
  return nullptr;
}

} // namespace dtc::runtime::cuda
