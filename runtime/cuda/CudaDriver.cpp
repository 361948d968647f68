//===- CudaDriver.cpp - the NVIDIA driver, found at run time --------------===//
#include "runtime/cuda/CudaDriver.h"

#include <dlfcn.h>

#include <cstdlib>

namespace dtc::runtime::cuda {
namespace {

// The driver API's few entry points used here (cuda.h's signatures: a
// CUresult is an int, 0 CUDA_SUCCESS).
using CuInit = int (*)(unsigned);
using CuDeviceGetCount = int (*)(int *);
using CuGetErrorString = int (*)(int, const char **);

std::string errorText(CuGetErrorString describe, int code) {
  const char *text = nullptr;
  if (describe && describe(code, &text) == 0 && text)
    return text;
  return "CUresult " + std::to_string(code);
}

} // namespace

int usableGpus(std::string &why) {
  void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!driver) {
    const char *error = dlerror();
    why = "the NVIDIA driver's libcuda.so.1 cannot be loaded (" +
          std::string(error ? error : "not found") + "): no NVIDIA driver on this machine";
    return 0;
  }
  auto init = reinterpret_cast<CuInit>(dlsym(driver, "cuInit"));
  auto countDevices = reinterpret_cast<CuDeviceGetCount>(dlsym(driver, "cuDeviceGetCount"));
  auto describe = reinterpret_cast<CuGetErrorString>(dlsym(driver, "cuGetErrorString"));
  if (!init || !countDevices) {
    why = "libcuda.so.1 lacks cuInit or cuDeviceGetCount (not an NVIDIA driver?)";
    return 0;
  }
  if (int rc = init(0); rc != 0) {
    why = "cuInit failed: " + errorText(describe, rc);
    return 0;
  }
  int count = 0;
  if (int rc = countDevices(&count); rc != 0) {
    why = "cuDeviceGetCount failed: " + errorText(describe, rc);
    return 0;
  }
  if (count == 0)
    why = "the NVIDIA driver sees no GPU";
  return count;
}

std::string chipFor(int major, int minor, const std::vector<std::string> &chips) {
  int own = major * 10 + minor, best = -1;
  std::string chosen;
  for (const std::string &chip : chips) {
    if (chip.rfind("sm_", 0) != 0)
      continue;
    int arch = std::atoi(chip.c_str() + 3);
    if (arch <= own && arch > best) {
      best = arch;
      chosen = chip;
    }
  }
  return chosen;
}

} // namespace dtc::runtime::cuda
