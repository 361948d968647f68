//===- CublasLtApi.cpp - cuBLASLt's entry points, found at run time -------===//
#include "runtime/cuda/CublasLtApi.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include <mutex>

namespace dtc::runtime::cuda {
namespace {

struct Loaded {
  CublasLtApi api;
  std::string why;
};

Loaded load() {
  Loaded loaded;
  // The loader's paths first, then the toolkit's own folder (its
  // installer does not always register it).
  std::vector<std::string> folders = {""};
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *home = std::getenv(var); home && *home)
      folders.push_back(std::string(home) + "/lib64/");
  folders.push_back("/usr/local/cuda/lib64/");
  void *library = nullptr;
  for (const std::string &folder : folders)
    for (const char *name : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"})
      if (!library)
        library = dlopen((folder + name).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char *error = dlerror();
    loaded.why = "cuBLASLt (libcublasLt.so.13) cannot be loaded (" +
                 std::string(error ? error : "not found") +
                 "): install the CUDA toolkit's libraries or put them on LD_LIBRARY_PATH";
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
