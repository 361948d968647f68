//===- OpenLibrary.cpp - a CUDA library opened at run time ----------------===//
#include "runtime/cuda/OpenLibrary.h"

#include <dlfcn.h>

#include <cstdlib>

namespace dtc::runtime::cuda {

void *openToolkitLibrary(const std::vector<std::string> &names, std::string &error) {
  std::vector<std::string> folders = {""};
  std::vector<std::string> roots;
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *home = std::getenv(var); home && *home)
      roots.push_back(home);
  roots.push_back("/usr/local/cuda");
  for (const std::string &root : roots) {
    folders.push_back(root + "/lib64/");
    folders.push_back(root + "/lib/");
  }
  for (const std::string &folder : folders)
    for (const std::string &name : names)
      if (void *library = dlopen((folder + name).c_str(), RTLD_NOW | RTLD_LOCAL))
        return library;
  // The loader's message for the first name on its own paths.
  dlopen(names.front().c_str(), RTLD_NOW | RTLD_LOCAL);
  const char *message = dlerror();
  error = message ? message : names.front() + ": not found";
  return nullptr;
}

} // namespace dtc::runtime::cuda
