//===- ImportCommands.cpp - dtc import and dtc compile --------------------===//
#include "tools/dtc/Commands.h"
#include "tools/dtc/OptionParser.h"

#include "compiler/Diagnostics.h"
#include "compiler/Pipeline.h"
#include "dialects/graph/AttrNames.h"
#include "frontends/gpt/GptGenerator.h"
#include "frontends/onnx/OnnxImporter.h"
#include "plan/FormatBytes.h"
#include "plan/PipelineSchedule.h"
#include "tools/Registration.h"

#include <fmt/format.h>

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <functional>
#include <limits>

namespace dtc::cli {
namespace {

/// Positive counts separated by `separator` ("2x4", "1,2") into `out`;
/// false on anything else.
bool parseCounts(const std::string &text, char separator, std::vector<int64_t> &out) {
  out.clear();
  llvm::SmallVector<llvm::StringRef> parts;
  llvm::StringRef(text).split(parts, separator);
  for (llvm::StringRef part : parts) {
    int64_t n = 0;
    if (part.getAsInteger(10, n) || n < 1)
      return false;
    out.push_back(n);
  }
  return true;
}

/// The options import and compile share.
struct ModelOptions {
  std::string model, output;
  onnx::ImportOptions import;
};

/// --shape, --freeze and -o, which import and compile share.
void addModelOptions(OptionParser &parser, ModelOptions &options) {
  parser.value(
      "--shape",
      [&options](const std::string &v) {
        std::string error;
        onnx::parseShapeOption(v, options.import, error);
        return error;
      },
      "--shape needs NAME=DIMS, e.g. --shape batch=2");
  parser.value(
      "--freeze",
      [&options](const std::string &v) -> std::string {
        size_t eq = v.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
          return "--freeze needs NAME=FILE.pb, e.g. --freeze shape=shape.pb";
        options.import.frozenInputs[v.substr(0, eq)] = v.substr(eq + 1);
        return "";
      },
      "--freeze needs NAME=FILE.pb, e.g. --freeze shape=shape.pb");
  for (auto [flag, list] : {std::pair{"--trainable", &options.import.trainable.trainable},
                            std::pair{"--frozen", &options.import.trainable.frozen}})
    parser.value(
        flag,
        [list = list](const std::string &v) {
          list->push_back(v);
          return std::string();
        },
        std::string(flag) + " needs a pattern on weight names, e.g. " + flag + " 'encoder.*'");
  parser.text("-o", options.output, "-o needs a file name");
  parser.text("--output", options.output, "-o needs a file name");
}

mlir::DialectRegistry dialectRegistry() {
  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  return registry;
}

/// The model as the graph dialect: an ONNX file, or a generated GPT
/// ("gpt:layers=...") built without weights.
mlir::OwningOpRef<mlir::ModuleOp> loadModel(mlir::MLIRContext &context,
                                            const ModelOptions &options, std::string &error) {
  if (llvm::StringRef(options.model).starts_with(gpt::kGptSpecPrefix)) {
    std::optional<gpt::GptConfig> config = gpt::parseGptSpec(options.model, error);
    if (!config)
      return nullptr;
    if (int64_t n = options.import.microBatches; n > 1) { // built for one micro-batch
      if (config->batch % n != 0) {
        error = fmt::format("--micro-batches {} does not divide the batch of {}", n,
                            config->batch);
        return nullptr;
      }
      config->batch /= n;
    }
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
  bool debugLocations = false, listOps = false, listOpsets = false;
  OptionParser parser("import", "model", options.model);
  parser.flag("--list-ops", [&] { listOps = true; }, /*stops=*/true);
  parser.flag("--list-opsets", [&] { listOpsets = true; }, /*stops=*/true);
  parser.flag("--debug-locations", debugLocations);
  addModelOptions(parser, options);
  if (int rc = parser.parse(args))
    return rc;
  if (listOps) {
    for (const auto &op : onnx::supportedOnnxOps())
      llvm::outs() << op << "\n";
    return 0;
  }
  if (listOpsets) {
    llvm::outs() << onnx::kMinOpset << " " << onnx::kMaxOpset << "\n";
    return 0;
  }
  if (options.model.empty())
    return usageError("import needs a model: dtc import MODEL.onnx");

  mlir::MLIRContext context(dialectRegistry());
  DiagnosticPrinter printer(&context);
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

/// compile's training options (--train and what it trains with).
void addTrainingOptions(OptionParser &parser, bool &train, TrainingOptions &t) {
  parser.flag("--train", train);
  parser.flag("--skip-nonfinite", t.skipNonFinite);
  for (auto [name, out] : {std::pair{"--loss", &t.loss}, std::pair{"--optimizer", &t.optimizer},
                           std::pair{"--lr-schedule", &t.schedule},
                           std::pair{"--precision", &t.precision},
                           std::pair{"--recompute", &t.recompute},
                           std::pair{"--train-output", &t.trainOutput}})
    parser.text(name, *out);
  for (auto [name, out] :
       {std::pair{"--lr", &t.learningRate}, std::pair{"--momentum", &t.momentum},
        std::pair{"--beta1", &t.beta1}, std::pair{"--beta2", &t.beta2},
        std::pair{"--weight-decay", &t.weightDecay}, std::pair{"--clip-norm", &t.clipNorm}})
    parser.value(name, realNumber(name, *out), std::string(name) + " needs a number");
  for (auto [name, out] :
       {std::pair{"--warmup", &t.warmupSteps}, std::pair{"--total-steps", &t.totalSteps},
        std::pair{"--micro-batches", &t.microBatches}, std::pair{"--pad-classes", &t.padClasses}})
    parser.value(name, integerNumber(name, *out), std::string(name) + " needs a number");
  parser.value(
      "--ignore-index",
      [&t](const std::string &v) {
        int64_t ignore = 0;
        std::string problem = integerNumber("--ignore-index", ignore)(v);
        if (problem.empty())
          t.ignoreIndex = ignore;
        return problem;
      },
      "--ignore-index needs a number");
}

/// What compile's parallel flags say beyond ParallelOptions: --preset /
/// --cluster as given, and whether --servers and --average-every were
/// (--sync auto compares only what the user allowed).
struct ParallelFlags {
  std::string preset, file;
  bool serversGiven = false, averageEveryGiven = false;
};

/// compile's options of how to split the work.
void addParallelOptions(OptionParser &parser, ParallelOptions &p, ParallelFlags &flags,
                        int64_t &zero, int64_t &devices) {
  parser.value("--dp", countAtLeast("--dp", p.dataParallel, 1), "--dp needs a number");
  parser.flag("--no-sequence-parallel", [&p] { p.sequenceParallel = false; });
  parser.value("--compress-gradients", [&](const std::string &v) -> std::string {
    p.compressGradients = v;
    if (v == "bf16" || v == "f16" || v == "powersgd" || v == "auto")
      return "";
    if (v.rfind("powersgd:", 0) == 0) {
      char *end = nullptr;
      long r = std::strtol(v.c_str() + 9, &end, 10);
      if (end != v.c_str() + 9 && !*end && r >= 1 && r <= 64)
        return "";
      return "--compress-gradients powersgd:R takes a rank R from 1 to 64, got '" + v + "'";
    }
    return "--compress-gradients takes bf16, f16, powersgd, powersgd:R or auto, got '" + v +
           "'";
  });
  parser.value("--backend", [&](const std::string &v) -> std::string {
    if (v != "cpu" && v != "cuda")
      return "--backend takes cpu or cuda, got '" + v + "'";
    p.backend = v;
    return "";
  });
  parser.value("--sync", [&](const std::string &v) -> std::string {
    if (v != "allreduce" && v != "local" && v != "federated" && v != "ps" && v != "auto")
      return "--sync takes allreduce, local, federated, ps or auto, got '" + v + "'";
    p.sync = v == "allreduce" ? "" : v;
    return "";
  });
  parser.value(
      "--average-every",
      [&](const std::string &v) {
        flags.averageEveryGiven = true;
        return countAtLeast("--average-every", p.averageEvery, 1)(v);
      },
      "--average-every needs a number of steps");
  parser.value(
      "--servers",
      [&](const std::string &v) {
        flags.serversGiven = true;
        return countAtLeast("--servers", p.servers, 1)(v);
      },
      "--servers needs a number of server ranks");
  parser.value("--staleness", countAtLeast("--staleness", p.staleness, 0),
               "--staleness needs a number of steps");
  parser.value("--tp", countAtLeast("--tp", p.tensorParallel, 1), "--tp needs a number");
  // --pp 0 (as an unset --pp with --devices and --train): searched.
  parser.value("--pp", countAtLeast("--pp", p.pipelineStages, 0), "--pp needs a number");
  parser.value(
      "--stage-cuts",
      [&](const std::string &v) -> std::string {
        if (v != "costs" && v != "flops")
          return "--stage-cuts takes costs or flops, got '" + v + "'";
        p.stageCutsByFlops = v == "flops";
        return "";
      },
      "--stage-cuts needs costs or flops");
  parser.value("--virtual-stages", countAtLeast("--virtual-stages", p.virtualStages, 2),
               "--virtual-stages needs a number");
  parser.value(
      "--stage-replicas",
      [&p](const std::string &v) -> std::string {
        return parseCounts(v, ',', p.stageReplicas)
                   ? ""
                   : "--stage-replicas needs a count per stage like 1,2, got '" + v + "'";
      },
      "--stage-replicas needs a count per stage");
  parser.value(
      "--zero",
      [&](const std::string &v) -> std::string {
        if (std::string problem = countAtLeast("--zero", zero, 0)(v); !problem.empty())
          return problem;
        if (zero > 3)
          return fmt::format("--zero takes a stage 0, 1, 2 or 3, got {}", zero);
        p.zero = int(zero);
        return "";
      },
      "--zero needs a number");
  parser.value(
      "--devices",
      [&](const std::string &v) -> std::string {
        if (std::string problem = countAtLeast("--devices", devices, 1)(v); !problem.empty())
          return problem;
        p.mesh = {devices};
        p.searchMeshShape = true;
        return "";
      },
      "--devices needs a number");
  parser.value("--mesh", [&p](const std::string &v) -> std::string {
    p.searchMeshShape = false;
    return parseCounts(v, 'x', p.mesh) ? "" : "--mesh needs sizes like 2x4, got '" + v + "'";
  });
  parser.value("--memory-limit", [&p](const std::string &v) -> std::string {
    std::optional<double> bytes = plan::parseByteSize(v);
    if (!bytes || *bytes <= 0)
      return "--memory-limit needs a size like 40GiB or 512MiB, got '" + v + "'";
    p.memoryLimit = *bytes;
    return "";
  });
  parser.value("--bucket", [&p](const std::string &v) -> std::string {
    std::optional<double> bytes = plan::parseByteSize(v);
    if (!bytes || *bytes < 0 || *bytes > 1e15)
      return "--bucket needs a size like 25MiB (0: each collective on its own), got '" + v +
             "'";
    p.bucketBytes = int64_t(*bytes);
    return "";
  });
  parser.text("--preset", flags.preset);
  parser.text("--cluster", flags.file);
}

/// Checks the pins against the mesh and loads the cluster the search
/// costs plans on; 0 or an exit code.
int finishParallelOptions(ParallelOptions &p, const ParallelFlags &flags) {
  if (!flags.file.empty() && !flags.preset.empty())
    return usageError("compile takes --cluster or --preset, not both");
  std::string error;
  std::optional<cost::Cluster> cluster =
      flags.file.empty() ? cost::preset(flags.preset.empty() ? "cpu-local" : flags.preset, error)
                          : cost::loadCluster(flags.file, error);
  if (!cluster)
    return flags.file.empty() ? usageError(error) : failure(error);
  p.cluster = *cluster;
  // --devices and --mesh count every device; a pipeline's stages each get
  // the same share of them.
  if (!p.stageReplicas.empty() && int64_t(p.stageReplicas.size()) != p.pipelineStages)
    return usageError(fmt::format("--stage-replicas gives {} counts: it needs --pp {} (one "
                                  "count per stage)",
                                  p.stageReplicas.size(), p.stageReplicas.size()));
  if (int64_t stages = p.pipelineStages; stages > 1 && !p.mesh.empty()) {
    int64_t all = 1;
    for (int64_t n : p.mesh)
      all *= n;
    // Replicated stages: each replica a copy of the stage mesh.
    int64_t copies = 0;
    for (int64_t r : p.stageReplicas)
      copies += r;
    if (copies > 0 && all % copies != 0)
      return usageError(fmt::format("--stage-replicas {}: {} copies of the stage mesh do not "
                                    "divide the {} devices",
                                    fmt::join(p.stageReplicas, ","), copies, all));
    if (copies > 0)
      stages = copies;
    if (all % stages != 0)
      return usageError(fmt::format("--pp {} stages do not divide the {} devices", stages, all));
    if (p.searchMeshShape)
      p.mesh = {all / stages};
    else if (p.mesh.front() % stages == 0)
      p.mesh.front() /= stages;
    else
      return usageError(fmt::format("--pp {} must divide --mesh's first axis ({})", stages,
                                    p.mesh.front()));
    if (p.mesh.size() > 1 && p.mesh.front() == 1)
      p.mesh.erase(p.mesh.begin());
  }
  int64_t pinned = std::max<int64_t>(1, p.dataParallel) * std::max<int64_t>(1, p.tensorParallel);
  int64_t devices = 1;
  for (int64_t n : p.mesh)
    devices *= n;
  if (!p.mesh.empty() && devices % pinned != 0)
    return usageError(fmt::format("--dp and --tp pin {} devices, which do not divide the mesh's {}",
                                  pinned, devices));
  if (p.sync == "auto") {
    // The all-reduce and what the user allowed (compileToPlan): a mode
    // that cannot take the other flags fails there and is left out.
    if (p.dataParallel <= 1)
      return usageError("--sync auto compares ways of synchronising data-parallel ranks: give "
                        "--dp N (N > 1) as well");
    if (!flags.serversGiven)
      p.servers = 0;
    if (!flags.averageEveryGiven)
      p.averageEvery = 0;
  } else if (!p.sync.empty()) {
    std::string sync = "--sync " + p.sync;
    if (p.dataParallel <= 1)
      return usageError(sync + (p.sync == "ps" ? " makes each data-parallel rank a worker"
                                               : " keeps a replica on each data-parallel rank") +
                        ": give --dp N (N > 1) as well");
    if (p.sync == "ps" && p.tensorParallel > 1)
      return usageError("--sync ps with --tp is not built yet: a worker splits only the batch");
    if (p.zero > 0)
      return usageError(fmt::format("{} {}; --zero {} splits them over the data-parallel "
                                    "ranks: use --zero 0",
                                    sync,
                                    p.sync == "ps" ? "keeps whole weights on the workers and "
                                                     "the optimizer state on the servers"
                                                   : "averages whole replicas",
                                    p.zero));
    p.zero = 0;
    if (p.pipelineStages > 1 || p.pipelineStages == 0)
      return usageError(sync + " with pipeline stages is not built yet: use --pp 1");
    if (!p.compressGradients.empty())
      return usageError("--compress-gradients compresses the gradients' all-reduce, which " +
                        sync + " leaves out");
  }
  if (p.sync != "ps" && p.sync != "auto" && (p.servers != 1 || p.staleness != 0))
    return usageError("--servers and --staleness are for parameter servers: give --sync ps");
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
  parallel.pipelineStages = -1; // not given
  parallel.virtualStages = 0;   // not given
  constexpr int64_t kNotGiven = std::numeric_limits<int64_t>::min();
  training.microBatches = kNotGiven;
  ParallelFlags flags;
  bool scheduleGiven = false, fuseAttention = true;
  int64_t zero = 0, devices = 0;
  OptionParser parser("compile", "model", options.model);
  addParallelOptions(parser, parallel, flags, zero, devices);
  addTrainingOptions(parser, train, training);
  // --schedule names a pipeline schedule or (as --lr-schedule) the learning
  // rate's: their names differ.
  parser.value(
      "--schedule",
      [&](const std::string &v) -> std::string {
        (plan::scheduleNamed(v) ? parallel.pipelineSchedule : training.schedule) = v;
        scheduleGiven = scheduleGiven || plan::scheduleNamed(v);
        return "";
      },
      "--schedule needs a name");
  parser.value("--attention", [&](const std::string &v) -> std::string {
    if (v != "fused" && v != "unfused")
      return "--attention takes fused or unfused, got '" + v + "'";
    fuseAttention = v == "fused";
    return "";
  });
  addModelOptions(parser, options);
  if (int rc = parser.parse(args))
    return rc;
  bool microBatchesGiven = training.microBatches != kNotGiven;
  if (!microBatchesGiven)
    training.microBatches = 1;
  // A training step on --devices N searches its pipeline stages too,
  // unless --pp pins them.
  if (parallel.pipelineStages == -1)
    parallel.pipelineStages = train && parallel.searchMeshShape ? 0 : 1;
  if (parallel.pipelineStages == 0 && !(train && parallel.searchMeshShape))
    return usageError("--pp 0 searches the pipeline stages: it needs --train and --devices N");
  // --virtual-stages V asks for the interleaved schedule, which has 2
  // without it.
  if (parallel.virtualStages > 0 && parallel.pipelineSchedule != "interleaved") {
    if (scheduleGiven)
      return usageError("--virtual-stages splits each stage's layers for the interleaved "
                        "schedule: use --schedule interleaved, not " +
                        parallel.pipelineSchedule);
    parallel.pipelineSchedule = "interleaved";
  }
  // Searched stages with no schedule given: the schedule is searched too
  // (1F1B, or interleaved when faster).
  parallel.searchSchedule =
      parallel.pipelineStages == 0 && !scheduleGiven && parallel.virtualStages == 0;
  if (parallel.pipelineSchedule == "interleaved" && parallel.virtualStages == 0)
    parallel.virtualStages = 2;
  parallel.virtualStages = std::max<int64_t>(1, parallel.virtualStages);
  if (parallel.virtualStages > plan::kMaxVirtualStages)
    return usageError(fmt::format("--virtual-stages {}: at most {}", parallel.virtualStages,
                                  plan::kMaxVirtualStages));
  if (parallel.pipelineSchedule == "interleaved" && parallel.pipelineStages == 1)
    return usageError("--schedule interleaved runs pipeline stages: it needs --pp N (2 or "
                      "more) or --devices N");
  if (!parallel.sync.empty() && !train)
    return usageError("--sync " + parallel.sync + " is how training ranks combine their "
                      "work: it needs --train");
  if (train) {
    if (std::string problem = checkTrainingOptions(training); !problem.empty())
      return usageError(problem);
    options.import.microBatches = training.microBatches;
  } else if (training.microBatches != 1) {
    return usageError("--micro-batches accumulates gradients: it needs --train");
  } else if (parallel.pipelineStages > 1) {
    return usageError("--pp cuts a training step into pipeline stages: it needs --train");
  } else if (training.recompute != "auto") {
    return usageError("--recompute trades the backward's memory for compute: it needs --train");
  } else if (training.precision != "fp32" && training.precision != "bf16") {
    return usageError("--precision must be fp32 or bf16, got '" + training.precision + "'");
  }
  if (options.model.empty())
    return usageError("compile needs a model: dtc compile MODEL.onnx -o PLAN.dtcp");
  if (int rc = finishParallelOptions(parallel, flags))
    return rc;
  if (options.output.empty())
    return usageError("compile needs an output: -o PLAN.dtcp");

  mlir::MLIRContext context(dialectRegistry());
  DiagnosticPrinter printer(&context);
  // The plan names the model by absolute path so that `dtc run` finds the
  // parameters from any directory.
  auto load = [&context](const ModelOptions &options,
                         std::string &error) -> mlir::OwningOpRef<mlir::ModuleOp> {
    auto module = loadModel(context, options, error);
    if (module && !isGenerated(options.model)) {
      llvm::SmallString<256> modelPath(options.model);
      llvm::sys::fs::make_absolute(modelPath);
      llvm::sys::path::remove_dots(modelPath, /*remove_dot_dot=*/true);
      (*module)->setAttr(dtc::attr::kSource, mlir::StringAttr::get(&context, modelPath.str()));
    }
    return module;
  };
  std::string error;
  auto module = load(options, error);
  if (!module)
    return failure(error);

  CompileOptions compile;
  if (train)
    compile.training = training;
  else
    compile.precision = training.precision; // an inference plan computing in bf16
  compile.parallel = parallel;
  compile.fuseAttention = fuseAttention;
  // No --micro-batches for a pipeline: its count is chosen, the model
  // imported again for it (each micro-batch's samples its input shapes).
  if (train && !microBatchesGiven && parallel.pipelineStages != 1)
    compile.modelAt = [&, options](int64_t microBatches, std::string &refused)
        -> mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> {
      ModelOptions withCount = options;
      withCount.import.microBatches = microBatches;
      // It imported whole: what fails now is a shape the export fixed.
      auto rebuilt = load(withCount, refused);
      if (!rebuilt)
        return mlir::failure();
      // Messages name the model as the user gave it (a generated GPT's
      // spec with its whole batch, not the micro-batch's).
      auto main = rebuilt->lookupSymbol<mlir::func::FuncOp>("main");
      auto given = module->lookupSymbol<mlir::func::FuncOp>("main");
      if (main && given)
        main->setLoc(given->getLoc());
      return rebuilt;
    };
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
