//===- ImportCommands.cpp - dtc import and dtc compile --------------------===//
#include "tools/dtc/Commands.h"

#include "compiler/Pipeline.h"
#include "dialects/graph/AttrNames.h"
#include "frontends/gpt/GptGenerator.h"
#include "frontends/onnx/OnnxImporter.h"
#include "plan/FormatBytes.h"
#include "tools/Registration.h"

#include <fmt/format.h>

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <functional>

namespace dtc::cli {
namespace {

/// The options import and compile share.
struct ModelOptions {
  std::string model, output;
  onnx::ImportOptions import;
};

/// Parses args[i] if it is a --shape or --freeze option (consuming its
/// value). Returns 1 if it was one, 0 if not, -1 after printing an error.
int parseModelOption(const Args &args, size_t &i, ModelOptions &options) {
  bool missing = false;
  if (auto v = flagValue(args, i, "--shape", missing)) {
    std::string error;
    if (!onnx::parseShapeOption(*v, options.import, error))
      return usageError(error), -1;
    return 1;
  }
  if (missing)
    return usageError("--shape needs NAME=DIMS, e.g. --shape batch=2"), -1;
  if (auto v = flagValue(args, i, "--freeze", missing)) {
    size_t eq = v->find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == v->size())
      return usageError("--freeze needs NAME=FILE.pb, e.g. --freeze shape=shape.pb"), -1;
    options.import.frozenInputs[v->substr(0, eq)] = v->substr(eq + 1);
    return 1;
  }
  if (missing)
    return usageError("--freeze needs NAME=FILE.pb, e.g. --freeze shape=shape.pb"), -1;
  if (auto v = flagValue(args, i, "-o", missing)) {
    options.output = *v;
    return 1;
  }
  if (missing || (args[i] == "--output" && i + 1 >= args.size()))
    return usageError("-o needs a file name"), -1;
  if (auto v = flagValue(args, i, "--output", missing)) {
    options.output = *v;
    return 1;
  }
  return 0;
}

mlir::DialectRegistry dialectRegistry() {
  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  return registry;
}

/// Takes a positional argument as the model; -1 after an error.
int takeModel(const std::string &command, const std::string &arg, ModelOptions &options) {
  if (!arg.empty() && arg[0] == '-' && arg != "-")
    return usageError(command + ": unknown option '" + arg + "'"), -1;
  if (!options.model.empty())
    return usageError(command + " takes one model, got '" + options.model + "' and '" + arg +
                      "'"),
           -1;
  options.model = arg;
  return 0;
}

/// The model as the graph dialect: an ONNX file, or a generated GPT
/// ("gpt:layers=...") built without weights.
mlir::OwningOpRef<mlir::ModuleOp> loadModel(mlir::MLIRContext &context,
                                            const ModelOptions &options, std::string &error) {
  if (llvm::StringRef(options.model).starts_with(gpt::kGptSpecPrefix)) {
    std::optional<gpt::GptConfig> config = gpt::parseGptSpec(options.model, error);
    if (!config)
      return nullptr;
    return gpt::buildGpt(context, *config);
  }
  return onnx::importOnnxFile(context, options.model, options.import, error);
}

bool isGenerated(const std::string &model) {
  return llvm::StringRef(model).starts_with(gpt::kGptSpecPrefix);
}

} // namespace

int runImport(const Args &args) {
  ModelOptions options;
  options.output = "-";
  bool debugLocations = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &arg = args[i];
    if (arg == "--list-ops") {
      for (const auto &op : onnx::supportedOnnxOps())
        llvm::outs() << op << "\n";
      return 0;
    }
    if (arg == "--list-opsets") {
      llvm::outs() << onnx::kMinOpset << " " << onnx::kMaxOpset << "\n";
      return 0;
    }
    if (arg == "--debug-locations") {
      debugLocations = true;
      continue;
    }
    int parsed = parseModelOption(args, i, options);
    if (parsed < 0 || (parsed == 0 && takeModel("import", arg, options) < 0))
      return 1;
  }
  if (options.model.empty())
    return usageError("import needs a model: dtc import MODEL.onnx");

  mlir::MLIRContext context(dialectRegistry());
  std::string error;
  auto module = loadModel(context, options, error);
  if (!module)
    return failure(error);
  std::string text;
  llvm::raw_string_ostream os(text);
  mlir::OpPrintingFlags flags;
  flags.elideLargeElementsAttrs(1 << 20);
  if (debugLocations)
    flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/false);
  module->print(os, flags);
  os << "\n";
  return writeOutput(options.output, text);
}

/// Parses args[i] if it is one of compile's training options: 1 if it
/// was, 0 if not, -1 after a usage error.
int parseTrainingOption(const Args &args, size_t &i, bool &train, TrainingOptions &t) {
  if (args[i] == "--train") {
    train = true;
    return 1;
  }
  bool missing = false;
  auto number = [&](const char *flag, double &out) -> int {
    auto v = flagValue(args, i, flag, missing);
    if (!v)
      return missing ? usageError(std::string(flag) + " needs a number"), -1 : 0;
    char *end = nullptr;
    out = std::strtod(v->c_str(), &end);
    if (v->empty() || *end || !std::isfinite(out))
      return usageError(std::string(flag) + " needs a number, got '" + *v + "'"), -1;
    return 1;
  };
  auto integer = [&](const char *flag, int64_t &out) -> int {
    double value = 0;
    int parsed = number(flag, value);
    if (parsed == 1 && value != std::floor(value))
      return usageError(std::string(flag) + " needs an integer"), -1;
    if (parsed == 1)
      out = int64_t(value);
    return parsed;
  };
  auto word = [&](const char *flag, std::string &out) -> int {
    auto v = flagValue(args, i, flag, missing);
    if (!v)
      return missing ? usageError(std::string(flag) + " needs a value"), -1 : 0;
    out = *v;
    return 1;
  };
  int64_t ignore = 0;
  // Tried in turn until one matches (each may advance i).
  const std::function<int()> parsers[] = {
      [&] { return word("--loss", t.loss); },
      [&] { return word("--optimizer", t.optimizer); },
      [&] { return word("--schedule", t.schedule); },
      [&] { return word("--precision", t.precision); },
      [&] { return number("--lr", t.learningRate); },
      [&] { return number("--momentum", t.momentum); },
      [&] { return number("--beta1", t.beta1); },
      [&] { return number("--beta2", t.beta2); },
      [&] { return number("--weight-decay", t.weightDecay); },
      [&] { return number("--clip-norm", t.clipNorm); },
      [&] { return integer("--warmup", t.warmupSteps); },
      [&] { return integer("--total-steps", t.totalSteps); },
      [&] {
        int parsed = integer("--ignore-index", ignore);
        if (parsed == 1)
          t.ignoreIndex = ignore;
        return parsed;
      },
  };
  for (const auto &parse : parsers)
    if (int parsed = parse())
      return parsed;
  return 0;
}

/// --preset / --cluster as given to compile.
struct ClusterChoice {
  std::string preset, file;
};

/// Parses args[i] if it is one of compile's options of how to split the
/// work: 1 if it was, 0 if not, -1 after a usage error.
int parseParallelOption(const Args &args, size_t &i, ParallelOptions &p, ClusterChoice &cluster) {
  bool missing = false;
  auto count = [&](const char *flag, int64_t &out, int64_t least) -> int {
    auto v = flagValue(args, i, flag, missing);
    if (!v)
      return missing ? usageError(std::string(flag) + " needs a number"), -1 : 0;
    char *end = nullptr;
    out = std::strtoll(v->c_str(), &end, 10);
    if (v->empty() || *end || out < least)
      return usageError(fmt::format("{} needs a whole number of at least {}, got '{}'", flag,
                                    least, *v)),
             -1;
    return 1;
  };
  int64_t zero = 0, devices = 0;
  if (int parsed = count("--dp", p.dataParallel, 1))
    return parsed;
  if (int parsed = count("--tp", p.tensorParallel, 1))
    return parsed;
  if (int parsed = count("--zero", zero, 0)) {
    if (parsed == 1 && zero > 3)
      return usageError(fmt::format("--zero takes a stage 0, 1, 2 or 3, got {}", zero)), -1;
    p.zero = int(zero);
    return parsed;
  }
  if (int parsed = count("--devices", devices, 1)) {
    if (parsed == 1)
      p.mesh = {devices};
    return parsed;
  }
  if (auto v = flagValue(args, i, "--mesh", missing)) {
    p.mesh.clear();
    llvm::SmallVector<llvm::StringRef> sizes;
    llvm::StringRef(*v).split(sizes, 'x');
    for (llvm::StringRef size : sizes) {
      int64_t n = 0;
      if (size.getAsInteger(10, n) || n < 1)
        return usageError("--mesh needs sizes like 2x4, got '" + *v + "'"), -1;
      p.mesh.push_back(n);
    }
    return 1;
  }
  if (auto v = flagValue(args, i, "--memory-limit", missing)) {
    std::optional<double> bytes = plan::parseByteSize(*v);
    if (!bytes || *bytes <= 0)
      return usageError("--memory-limit needs a size like 40GiB or 512MiB, got '" + *v + "'"), -1;
    p.memoryLimit = *bytes;
    return 1;
  }
  if (auto v = flagValue(args, i, "--preset", missing)) {
    cluster.preset = *v;
    return 1;
  }
  if (auto v = flagValue(args, i, "--cluster", missing)) {
    cluster.file = *v;
    return 1;
  }
  return missing ? usageError(args[i] + " needs a value"), -1 : 0;
}

/// Checks the pins against the mesh and loads the cluster the search
/// costs plans on; 0 or an exit code.
int finishParallelOptions(ParallelOptions &p, const ClusterChoice &choice) {
  if (!choice.file.empty() && !choice.preset.empty())
    return usageError("compile takes --cluster or --preset, not both");
  std::string error;
  std::optional<cost::Cluster> cluster =
      choice.file.empty() ? cost::preset(choice.preset.empty() ? "cpu-local" : choice.preset, error)
                          : cost::loadCluster(choice.file, error);
  if (!cluster)
    return choice.file.empty() ? usageError(error) : failure(error);
  p.cluster = *cluster;
  int64_t pinned = std::max<int64_t>(1, p.dataParallel) * std::max<int64_t>(1, p.tensorParallel);
  int64_t devices = 1;
  for (int64_t n : p.mesh)
    devices *= n;
  if (!p.mesh.empty() && devices % pinned != 0)
    return usageError(fmt::format("--dp and --tp pin {} devices, which do not divide the mesh's {}",
                                  pinned, devices));
  if (p.zero > 0 && p.dataParallel <= 1)
    return usageError(fmt::format("--zero {} shards optimizer state over data-parallel ranks: "
                                  "give --dp N (N > 1) as well",
                                  p.zero));
  return 0;
}

int runCompile(const Args &args) {
  ModelOptions options;
  bool train = false;
  TrainingOptions training;
  ParallelOptions parallel;
  ClusterChoice cluster;
  for (size_t i = 0; i < args.size(); ++i) {
    int parsed = parseParallelOption(args, i, parallel, cluster);
    if (parsed < 0)
      return 1;
    if (parsed == 1)
      continue;
    parsed = parseTrainingOption(args, i, train, training);
    if (parsed < 0)
      return 1;
    if (parsed == 1)
      continue;
    parsed = parseModelOption(args, i, options);
    if (parsed < 0 || (parsed == 0 && takeModel("compile", args[i], options) < 0))
      return 1;
  }
  if (train) {
    if (std::string problem = checkTrainingOptions(training); !problem.empty())
      return usageError(problem);
  }
  if (options.model.empty())
    return usageError("compile needs a model: dtc compile MODEL.onnx -o PLAN.dtcp");
  if (int rc = finishParallelOptions(parallel, cluster))
    return rc;
  if (options.output.empty())
    return usageError("compile needs an output: -o PLAN.dtcp");

  mlir::MLIRContext context(dialectRegistry());
  std::string error;
  auto module = loadModel(context, options, error);
  if (!module)
    return failure(error);

  // The plan names the model by absolute path so that `dtc run` finds the
  // parameters from any directory.
  if (!isGenerated(options.model)) {
    llvm::SmallString<256> modelPath(options.model);
    llvm::sys::fs::make_absolute(modelPath);
    llvm::sys::path::remove_dots(modelPath, /*remove_dot_dot=*/true);
    (*module)->setAttr(dtc::attr::kSource, mlir::StringAttr::get(&context, modelPath.str()));
  }

  CompileOptions compile;
  if (train)
    compile.training = training;
  compile.parallel = parallel;
  plan::Plan plan;
  if (mlir::failed(compileToPlan(*module, plan, compile)))
    return 1; // the diagnostics are printed
  std::string bytes;
  plan.SerializeToString(&bytes);
  if (int rc = writeOutput(options.output, bytes))
    return rc;
  if (options.output != "-") {
    const auto &summary = plan.decisions().ranks(0);
    llvm::outs() << "compiled " << options.model << " -> " << options.output << ": "
                 << plan.ranks(0).instructions_size() << " instructions, peak memory "
                 << plan::formatBytes(summary.peak_memory_bytes()) << " (parameters "
                 << plan::formatBytes(summary.parameter_bytes()) << ")\n";
    for (const auto &note : plan.decisions().notes())
      llvm::outs() << "  " << note << "\n";
  }
  return 0;
}

} // namespace dtc::cli
