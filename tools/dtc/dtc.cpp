//===- dtc.cpp - the dtc command line -------------------------------------===//
//
// dtc COMMAND [options]; see `dtc --help`. Errors are printed for people and
// exit with status 1; nothing here aborts on user input.
//
//===----------------------------------------------------------------------===//
#include "frontends/onnx/OnnxImporter.h"
#include "tools/Registration.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <string>
#include <vector>

namespace {

constexpr const char *kUsage = R"(dtc: compile ONNX models into distributed training plans

usage: dtc COMMAND [options]

commands:
  import MODEL.onnx [-o OUT.mlir] [--shape NAME=DIMS]... [--freeze NAME=FILE.pb]...
        Import an ONNX model into dtc's graph dialect and print it as MLIR.
        --shape NAME=DIMS binds a graph input's shape (input_ids=2x128) or a
        symbolic dim (batch=2); repeat it as needed.
        --freeze NAME=FILE.pb makes graph input NAME a constant with the
        value in an ONNX TensorProto file (for shapes fed as inputs).
        --debug-locations prints each op's ONNX node name.
        --list-ops prints the supported ONNX op types; --list-opsets prints
        the supported default-domain opset range.

  dtc --help | --version
)";

int usageError(const std::string &message) {
  llvm::errs() << "dtc: " << message << "\n(run 'dtc --help' for usage)\n";
  return 1;
}

/// Writes `text` to `path` atomically (a temporary file renamed into place),
/// or to stdout for "-".
int writeOutput(const std::string &path, const std::string &text) {
  if (path == "-") {
    llvm::outs() << text;
    return 0;
  }
  std::string temp = path + ".tmp";
  std::error_code ec;
  {
    llvm::raw_fd_ostream os(temp, ec);
    if (ec)
      return usageError("cannot write '" + path + "': " + ec.message());
    os << text;
    os.close();
    if (os.has_error())
      return usageError("cannot write '" + path + "': " + os.error().message());
  }
  if ((ec = llvm::sys::fs::rename(temp, path)))
    return usageError("cannot write '" + path + "': " + ec.message());
  return 0;
}

int runImport(const std::vector<std::string> &args) {
  std::string model, output = "-";
  bool debugLocations = false;
  dtc::onnx::ImportOptions options;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &arg = args[i];
    auto value = [&](const char *flag) -> const std::string * {
      if (i + 1 >= args.size())
        return nullptr;
      return &args[++i];
    };
    if (arg == "--list-ops") {
      for (const auto &op : dtc::onnx::supportedOnnxOps())
        llvm::outs() << op << "\n";
      return 0;
    }
    if (arg == "--list-opsets") {
      llvm::outs() << dtc::onnx::kMinOpset << " " << dtc::onnx::kMaxOpset << "\n";
      return 0;
    }
    if (arg == "-o" || arg == "--output") {
      const std::string *v = value("-o");
      if (!v)
        return usageError(arg + " needs a file name");
      output = *v;
    } else if (arg == "--shape" || arg.rfind("--shape=", 0) == 0) {
      std::string text = arg == "--shape" ? "" : arg.substr(8);
      if (arg == "--shape") {
        const std::string *v = value("--shape");
        if (!v)
          return usageError("--shape needs NAME=DIMS, e.g. --shape batch=2");
        text = *v;
      }
      std::string error;
      if (!dtc::onnx::parseShapeOption(text, options, error))
        return usageError(error);
    } else if (arg == "--freeze") {
      const std::string *v = value("--freeze");
      size_t eq = v ? v->find('=') : std::string::npos;
      if (!v || eq == std::string::npos || eq == 0 || eq + 1 == v->size())
        return usageError("--freeze needs NAME=FILE.pb, e.g. --freeze shape=shape.pb");
      options.frozenInputs[v->substr(0, eq)] = v->substr(eq + 1);
    } else if (arg == "--debug-locations") {
      debugLocations = true;
    } else if (!arg.empty() && arg[0] == '-' && arg != "-") {
      return usageError("import: unknown option '" + arg + "'");
    } else if (model.empty()) {
      model = arg;
    } else {
      return usageError("import takes one model, got '" + model + "' and '" +
                        arg + "'");
    }
  }
  if (model.empty())
    return usageError("import needs a model: dtc import MODEL.onnx");

  mlir::DialectRegistry registry;
  dtc::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  std::string error;
  auto module = dtc::onnx::importOnnxFile(context, model, options, error);
  if (!module) {
    llvm::errs() << "error: " << error << "\n";
    return 1;
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  mlir::OpPrintingFlags flags;
  flags.elideLargeElementsAttrs(1 << 20);
  if (debugLocations)
    flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/false);
  module->print(os, flags);
  os << "\n";
  return writeOutput(output, text);
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty())
    return usageError("no command given");
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "--help" || command == "-h" || command == "help") {
    llvm::outs() << kUsage;
    return 0;
  }
  if (command == "--version") {
    llvm::outs() << "dtc 0.1.0 (LLVM/MLIR " << LLVM_VERSION_STRING << ")\n";
    return 0;
  }
  if (command == "import")
    return runImport(args);
  return usageError("unknown command '" + command + "'");
}
