//===- NcclApi.cpp - NCCL's entry points, found at run time ---------------===//
#include "runtime/cuda/NcclApi.h"
#include "runtime/cuda/OpenLibrary.h"

#include <dlfcn.h>

#include <mutex>

namespace dtc::runtime::cuda {
namespace {

struct Loaded {
  NcclApi api;
  std::string why;
};

Loaded load() {
  Loaded loaded;
  std::string error;
  void *library = openToolkitLibrary({"libnccl.so.2"}, error);
  if (!library) {
    loaded.why = "NCCL (libnccl.so.2) cannot be loaded (" + error + ")";
    return loaded;
  }
  std::string missing;
#define DTC_NCCL_ENTRY(name)                                                                   \
  loaded.api.name = reinterpret_cast<decltype(&::name)>(dlsym(library, #name));                \
  if (!loaded.api.name)                                                                        \
    missing += std::string(missing.empty() ? "" : ", ") + #name;
#include "runtime/cuda/NcclEntries.def"
  if (!missing.empty())
    loaded.why = "libnccl.so.2 lacks " + missing;
  return loaded;
}

} // namespace

const NcclApi *ncclApi(std::string &why) {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = load(); });
  why = loaded.why;
  return why.empty() ? &loaded.api : nullptr;
}

bool check(const NcclApi &api, ncclResult_t result, const char *what, std::string &error) {
  if (result == ncclSuccess)
    return true;
  const char *text = api.ncclGetErrorString(result);
  error = std::string(what) + ": " + (text ? text : "ncclResult " + std::to_string(int(result)));
  return false;
}

} // namespace dtc::runtime::cuda
