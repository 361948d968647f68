//===- CudnnApi.cpp - cuDNN's entry points, found at run time -------------===//
#include "runtime/cuda/CudnnApi.h"
#include "runtime/cuda/OpenLibrary.h"

#include <dlfcn.h>

#include <mutex>

namespace dtc::runtime::cuda {
namespace {

struct Loaded {
  CudnnApi api;
  std::string why;
};

Loaded load() {
  Loaded loaded;
  std::string error;
  void *library = openToolkitLibrary({"libcudnn.so.9", "libcudnn.so"}, error);
  if (!library) {
    loaded.why = "cuDNN (libcudnn.so.9) cannot be loaded (" + error +
                 "): install cuDNN 9 beside the CUDA toolkit";
    return loaded;
  }
  loaded.api.library = library;
  std::string missing;
#define DTC_CUDNN_ENTRY(name)                                                                  \
  loaded.api.name = reinterpret_cast<decltype(&::name)>(dlsym(library, #name));                \
  if (!loaded.api.name)                                                                        \
    missing += std::string(missing.empty() ? "" : ", ") + #name;
#include "runtime/cuda/CudnnEntries.def"
  if (!missing.empty())
    loaded.why = "libcudnn lacks " + missing;
  return loaded;
}

} // namespace

const CudnnApi *cudnnApi(std::string &why) {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = load(); });
  why = loaded.why;
  return why.empty() ? &loaded.api : nullptr;
}

bool check(const CudnnApi &api, cudnnStatus_t status, const char *what, std::string &error) {
  if (status == CUDNN_STATUS_SUCCESS)
    return true;
  const char *text = api.cudnnGetErrorString(status);
  error = std::string(what) + ": " + (text ? text : "cudnnStatus " + std::to_string(int(status)));
  return false;
}

} // namespace dtc::runtime::cuda
