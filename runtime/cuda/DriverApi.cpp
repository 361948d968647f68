//===- DriverApi.cpp - the driver API's entry points, found at run time ---===//
#include "runtime/cuda/DriverApi.h"

#include <dlfcn.h>

#include <map>
#include <mutex>

namespace dtc::runtime::cuda {
namespace {

// cuda.h's name for an entry point, macros expanded (cuMemAlloc_v2).
#define DTC_SYMBOL_OF(name) DTC_SYMBOL_TEXT(name)
#define DTC_SYMBOL_TEXT(name) #name

struct Loaded {
  DriverApi api;
  std::string why; // empty when loaded
};

Loaded load(const char *library) {
  Loaded loaded;
  void *driver = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!driver) {
    const char *error = dlerror();
    loaded.why = std::string(library) + " cannot be loaded (" +
                 (error ? error : "not found") + "): no NVIDIA driver on this machine";
    return loaded;
  }
  std::string missing;
#define DTC_DRIVER_ENTRY(name)                                                                 \
  loaded.api.name = reinterpret_cast<decltype(&::name)>(dlsym(driver, DTC_SYMBOL_OF(name)));   \
  if (!loaded.api.name)                                                                        \
    missing += std::string(missing.empty() ? "" : ", ") + DTC_SYMBOL_OF(name);
#include "runtime/cuda/DriverEntries.def"
  if (!missing.empty())
    loaded.why = std::string(library) + " lacks " + missing + " (a driver older than CUDA 12?)";
  return loaded;
}

} // namespace

const DriverApi *driverApi(std::string &why, const char *library) {
  static std::mutex mutex;
  static std::map<std::string, Loaded> libraries; // kept for the process's life
  std::lock_guard<std::mutex> lock(mutex);
  auto it = libraries.find(library);
  if (it == libraries.end())
    it = libraries.emplace(library, load(library)).first;
  why = it->second.why;
  return why.empty() ? &it->second.api : nullptr;
}

bool check(const DriverApi &api, CUresult rc, const char *what, std::string &error) {
  if (rc == CUDA_SUCCESS)
    return true;
  const char *name = nullptr, *text = nullptr;
  api.cuGetErrorName(rc, &name);
  api.cuGetErrorString(rc, &text);
  error = std::string(what) + ": " + (name ? name : "CUresult " + std::to_string(int(rc))) +
          (text ? std::string(" (") + text + ")" : std::string());
  return false;
}

} // namespace dtc::runtime::cuda
