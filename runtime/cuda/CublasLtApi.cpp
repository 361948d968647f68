//===- CublasLtApi.cpp - cuBLASLt's entry points, found at run time -------===//
#include "runtime/cuda/CublasLtApi.h"
#include "runtime/cuda/OpenLibrary.h"

#include <dlfcn.h>

#include <mutex>

namespace dtc::runtime::cuda {
namespace {

struct Loaded {
  CublasLtApi api;
  std::string why;
};

Loaded load() {
  Loaded loaded;
  std::string error;
  void *library = openToolkitLibrary({"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"},
                                     error);
  if (!library) {
    loaded.why = "cuBLASLt (libcublasLt.so.13) cannot be loaded (" + error +
                 "): install the CUDA toolkit's libraries";
    return loaded;
  }
  std::string missing;
#define DTC_CUBLASLT_ENTRY(name)                                                               \
  loaded.api.name = reinterpret_cast<decltype(&::name)>(dlsym(library, #name));                \
  if (!loaded.api.name)                                                                        \
    missing += std::string(missing.empty() ? "" : ", ") + #name;
#include "runtime/cuda/CublasLtEntries.def"
  if (!missing.empty())
    loaded.why = "libcublasLt lacks " + missing;
  return loaded;
}

} // namespace

const CublasLtApi *cublasLtApi(std::string &why) {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = load(); });
  why = loaded.why;
  return why.empty() ? &loaded.api : nullptr;
}

bool check(const CublasLtApi &api, cublasStatus_t status, const char *what, std::string &error) {
  if (status == CUBLAS_STATUS_SUCCESS)
    return true;
  const char *text = api.cublasLtGetStatusString(status);
  error = std::string(what) + ": " + (text ? text : "cublasStatus " + std::to_string(int(status)));
  return false;
}

} // namespace dtc::runtime::cuda
