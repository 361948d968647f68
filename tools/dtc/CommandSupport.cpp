//===- CommandSupport.cpp - what every dtc command reports through --------===//
#include "tools/dtc/Commands.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>

namespace dtc::cli {

namespace {
std::string helpCommand = "dtc --help"; // where usage errors point
std::vector<std::string> *heldErrors = nullptr;
} // namespace

void setHelpCommand(const std::string &command) { helpCommand = command; }

void holdErrors(std::vector<std::string> *into) { heldErrors = into; }

namespace {
/// Prints `head` + `rest`, or holds it.
int report(const std::string &head, const std::string &rest) {
  if (heldErrors) {
    heldErrors->push_back(head + rest);
    return 1;
  }
  // After what was printed before it, when both go to one place.
  std::fflush(stdout);
  llvm::outs().flush();
  llvm::errs() << head << rest << "\n";
  return 1;
}
} // namespace

int usageError(const std::string &message) {
  return report("dtc: ", message + "\n(run '" + helpCommand + "' for usage)");
}

int failure(const std::string &message) { return report("error: ", message); }

int writeOutput(const std::string &path, const std::string &bytes) {
  if (path == "-") {
    llvm::outs() << bytes;
    return 0;
  }
  std::string temp = path + ".tmp";
  std::error_code ec;
  {
    llvm::raw_fd_ostream os(temp, ec);
    if (ec)
      return failure("cannot write '" + path + "': " + ec.message());
    os << bytes;
    os.close();
    if (os.has_error())
      return failure("cannot write '" + path + "': " + os.error().message());
  }
  if ((ec = llvm::sys::fs::rename(temp, path)))
    return failure("cannot write '" + path + "': " + ec.message());
  return 0;
}

} // namespace dtc::cli
