//===- RunCommand.cpp - dtc run -------------------------------------------===//
#include "tools/dtc/Commands.h"
#include "runtime/cuda/CudaDevice.h"
#include "runtime/cuda/CudaDriver.h"
#include "tools/dtc/OptionParser.h"
#include "tools/dtc/RankLauncher.h"
#include "tools/dtc/TrainCommand.h"

#include "plan/FormatBytes.h"
#include "plan/PlanLoader.h"
#include "plan/PlanPrinter.h"
#include "plan/Ranks.h"
#include "plan/Sharding.h"
#include "plan/Streams.h"
#include "runtime/Executor.h"
#include "runtime/TensorCompare.h"
#include "runtime/TensorIO.h"
#include "runtime/comm/MeshGroups.h"
#include "runtime/comm/RankJob.h"
#include "runtime/comm/Watchdog.h"

#include "cost/Simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <dirent.h>
#include <filesystem>
#include <map>
#include <sys/stat.h>

namespace dtc::cli {
namespace {

using runtime::HostTensor;
using plan::typeToString;

bool isFile(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool isDirectory(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

/// Tensor files in `dir` by stem (name without .pb / .npy).
bool listTensorFiles(const std::string &dir, std::map<std::string, std::string> &files,
                     std::string &error) {
  DIR *d = opendir(dir.c_str());
  if (!d) {
    error = "cannot read the input directory '" + dir + "'";
    return false;
  }
  while (dirent *entry = readdir(d)) {
    std::string name = entry->d_name;
    for (const char *ext : {".pb", ".npy"}) {
      size_t n = std::char_traits<char>::length(ext);
      if (name.size() > n && name.compare(name.size() - n, n, ext) == 0) {
        std::string stem = name.substr(0, name.size() - n);
        if (files.count(stem)) {
          error = "both " + stem + ".pb and " + stem + ".npy in '" + dir +
                  "': keep one of them";
          closedir(d);
          return false;
        }
        files[stem] = dir + "/" + name;
      }
    }
  }
  closedir(d);
  return true;
}

/// Reads every graph input from `dir`; false after printing what is wrong.
/// `output_N` files (an ONNX test-data folder's expected outputs) go to
/// `expected`, by output index.
bool readInputs(const plan::Plan &plan, const std::string &dir, runtime::Executor &executor,
                std::map<int, std::string> &expected) {
  std::string error;
  std::map<std::string, std::string> files;
  if (!dir.empty() && !listTensorFiles(dir, files, error))
    return failure(error), false;
  auto inputList = [&] {
    std::vector<std::string> parts;
    for (const auto &in : plan.inputs())
      parts.push_back(in.name() + " " + typeToString(in.type()));
    return fmt::format("{}", fmt::join(parts, ", "));
  };
  std::vector<bool> used(plan.inputs_size(), false);
  std::map<std::string, bool> consumed;
  for (int i = 0; i < plan.inputs_size(); ++i) {
    const plan::Tensor &input = plan.inputs(i);
    std::string positional = "input_" + std::to_string(i), path;
    for (const std::string &stem : {positional, input.name()})
      if (auto it = files.find(stem); it != files.end() && path.empty()) {
        path = it->second;
        consumed[stem] = true;
      }
    if (path.empty()) {
      failure(fmt::format("missing input '{}' ({}): expected {}/{}.pb or .npy, or {}/{}.pb "
                          "or .npy",
                          input.name(), typeToString(input.type()),
                          dir.empty() ? "--inputs DIR" : dir, positional,
                          dir.empty() ? "DIR" : dir, input.name()));
      return false;
    }
    HostTensor tensor;
    if (!runtime::readTensorFile(path, tensor, error))
      return failure(error), false;
    if (!executor.setInput(i, tensor, error))
      return failure(path + ": " + error), false;
  }
  for (int o = 0; o < plan.outputs_size(); ++o)
    if (auto it = files.find("output_" + std::to_string(o));
        it != files.end() && !consumed.count(it->first)) {
      expected[o] = it->second;
      consumed[it->first] = true;
    }
  for (const auto &[stem, path] : files)
    if (!consumed.count(stem)) {
      failure(fmt::format("{}: unknown input '{}'; the model's inputs are: {}", path, stem,
                          inputList()));
      return false;
    }
  return true;
}

/// The instructions that took the most time, then time by op. On several
/// ranks running one program, each instruction's time is the slowest
/// rank's (a collective waits for it); a collective call of every rank of
/// `world` (the mesh's). `everyone`: the job's ranks where they are more (a
/// parameter-server plan's), whose pushes count too.
bool printProfile(const plan::Plan &plan, const runtime::Executor &executor,
                  runtime::Communicator *world, runtime::Communicator *everyone = nullptr) {
  const plan::RankProgram &program = executor.program();
  std::vector<double> seconds = executor.profileSeconds();
  int runs = std::max(1, executor.profiledRuns());
  bool spmd = plan.ranks_size() == 1;
  std::string who = executor.ranks() <= 1 ? ""
                    : spmd ? fmt::format(" (the slowest of {} ranks per instruction)",
                                         executor.ranks())
                           : " of rank 0";
  if (world && spmd) {
    std::string error;
    if (!world->allReduce(seconds.data(), int64_t(seconds.size()), plan::F64,
                          runtime::Reduction::Max, error))
      return failure("profile: " + error), false;
  }
  double total = 0;
  for (double s : seconds)
    total += s;
  if (total <= 0)
    return true;
  std::vector<int> order(seconds.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return seconds[a] != seconds[b] ? seconds[a] > seconds[b] : a < b;
  });
  size_t sideBySide = executor.instructionsSideBySide();
  fmt::print("profile{}: {} runs, {:.3f} ms per run in {} instructions{}\n", who, runs,
             total / runs * 1e3, seconds.size(),
             sideBySide ? fmt::format(" (each timed alone; unprofiled, {} small ones run side "
                                      "by side on the threads)",
                                      sideBySide)
                        : "");
  fmt::print("  {:>5}  {:>9}  {:>6}  {:<18}  {}\n", "inst", "ms/run", "share", "output",
             "op");
  auto shorten = [](std::string text, size_t width) {
    return text.size() <= width ? text : text.substr(0, width - 3) + "...";
  };
  size_t shown = std::min<size_t>(order.size(), 15);
  for (size_t k = 0; k < shown; ++k) {
    int i = order[k];
    const plan::Instruction &inst = program.instructions(i);
    std::string out = inst.outputs_size()
                          ? typeToString(program.buffers(inst.outputs(0)).type())
                          : std::string("-");
    fmt::print("  {:>5}  {:>9.4f}  {:>5.1f}%  {:<18}  {}\n", i, seconds[i] / runs * 1e3,
               100 * seconds[i] / total, out, shorten(describeInstruction(inst), 60));
  }
  if (shown < order.size())
    fmt::print("  ... {} more instructions\n", order.size() - shown);
  std::map<std::string, std::pair<double, int>> byOp;
  for (size_t i = 0; i < seconds.size(); ++i) {
    std::string what = describeInstruction(program.instructions(i));
    auto &entry = byOp[what.substr(0, what.find(' '))];
    entry.first += seconds[i];
    ++entry.second;
  }
  std::vector<std::pair<std::string, std::pair<double, int>>> ops(byOp.begin(), byOp.end());
  std::sort(ops.begin(), ops.end(),
            [](const auto &a, const auto &b) { return a.second.first > b.second.first; });
  fmt::print("  by op:");
  for (const auto &[op, entry] : ops)
    fmt::print(" {} {:.1f}% ({}x);", op, 100 * entry.first / total, entry.second);
  fmt::print("\n");
  // Bytes on the wire, counted at each communicator call (the whole run:
  // the steps, and the runtime's own reductions such as local SGD's
  // averages), per profiled run.
  if (const runtime::MeshGroups *groups = executor.meshGroups()) {
    double bytes = 0;
    std::vector<std::string> parts;
    for (const auto &[operation, t] : groups->traffic()) {
      bytes += t.bytes;
      parts.push_back(fmt::format("{} {} ({:.1f} calls)", operation,
                                  plan::formatBytes(int64_t(t.bytes / runs)),
                                  double(t.calls) / runs));
    }
    if (everyone && everyone != world)
      for (const auto &[operation, t] : everyone->traffic()) {
        bytes += t.bytes;
        parts.push_back(fmt::format("to the parameter servers: {} {} ({:.1f} calls)", operation,
                                    plan::formatBytes(int64_t(t.bytes / runs)),
                                    double(t.calls) / runs));
      }
    fmt::print("  sent by rank {} a run (ring algorithms' bytes): {}{}{}\n",
               world ? world->rank() : 0, plan::formatBytes(int64_t(bytes / runs)),
               parts.empty() ? "" : ": ", fmt::join(parts, ", "));
  }
  return true;
}

/// The measured step as a Chrome trace, in the simulator's format (`dtc
/// simulate --trace`) so the two compare instruction by instruction: each
/// rank's instructions one after another (the executor runs them in order
/// on one thread, collectives included), each lasting its median over the
/// last profiled runs. Ranks send their times to rank 0, which writes the
/// file. A collective call of every rank.
bool writeMeasuredTrace(const plan::Plan &plan, const runtime::Executor &executor,
                        runtime::Communicator *world, const std::string &path) {
  int runs = std::min(executor.profiledRuns(), runtime::Executor::kProfileHistory);
  std::string error;
  auto fail = [&](const std::string &why) { return failure("--trace: " + why), false; };
  if (world && world->rank() != 0) {
    std::vector<double> seconds = executor.profileMedianSeconds();
    int64_t count = int64_t(seconds.size());
    if (!world->send(&count, sizeof count, 0, 0, error) ||
        !world->send(seconds.data(), count * int64_t(sizeof(double)), 0, 1, error))
      return fail(error);
    return true;
  }
  cost::Simulation measured;
  int ranks = world ? world->size() : 1;
  measured.ranks.resize(size_t(ranks));
  for (int r = 0; r < ranks; ++r) {
    std::vector<double> seconds;
    if (r == 0) {
      seconds = executor.profileMedianSeconds();
    } else {
      int64_t count = 0;
      if (!world->recv(&count, sizeof count, r, 0, error))
        return fail(error);
      seconds.assign(size_t(std::max<int64_t>(count, 0)), 0.0);
      if (!world->recv(seconds.data(), count * int64_t(sizeof(double)), r, 1, error))
        return fail(error);
    }
    int program = plan::programIndexOfRank(plan, r);
    if (program >= plan.ranks_size() ||
        int64_t(seconds.size()) != plan.ranks(program).instructions_size())
      return fail(fmt::format("rank {} sent times for {} instructions", r, seconds.size()));
    double at = 0;
    for (size_t i = 0; i < seconds.size(); ++i) {
      const plan::Instruction &inst = plan.ranks(program).instructions(int(i));
      cost::Event e;
      e.rank = r;
      e.instruction = int(i);
      e.communication = plan::communicates(inst);
      e.start = at;
      e.end = at += seconds[i];
      measured.events.push_back(e);
    }
    measured.stepSeconds = std::max(measured.stepSeconds, at);
  }
  auto name = [&plan](const plan::Instruction &inst) {
    return plan::describeInstruction(inst, &plan.training().pipeline());
  };
  if (writeOutput(path, cost::chromeTrace(plan, measured, name)) != 0)
    return false;
  fmt::print("trace of the measured step (each instruction's median over {} runs) written "
             "to {}\n",
             runs, path);
  return true;
}

/// The first weight (a parameter read from the model) that the plan splits
/// over the ranks, or "".
std::string shardedWeight(const plan::Plan &plan) {
  for (const plan::RankProgram &program : plan.ranks())
    for (const plan::Buffer &buffer : program.buffers())
      if (buffer.has_parameter() && !buffer.parameter().zeros() && buffer.sharding_size() != 0)
        return buffer.parameter().initializer();
  return "";
}

/// Whether any rank reads parameters from the model's initializers.
bool readsModel(const plan::Plan &plan) {
  for (const plan::RankProgram &program : plan.ranks())
    for (const plan::Buffer &buffer : program.buffers())
      if (buffer.has_parameter() && !buffer.parameter().zeros() &&
          !buffer.parameter().has_seeded())
        return true;
  return false;
}

struct RunOptions {
  std::string planPath, inputs, outputs, model, outputFormat = "pb";
  int threads = 0, repeat = 0;
  bool profile = false;
  std::string trace; // --trace FILE: the measured step as a Chrome trace
  bool check = false; // --check: outputs against --inputs' output_N files
  bool cuda = false;  // --backend cuda: the instructions run on this process's GPU
  runtime::Tolerance tolerance;
  TrainRunOptions train;
};

/// --check: each output against its expected file; false after printing
/// which differ.
bool checkOutputs(const plan::Plan &plan, const runtime::Executor &executor,
                  const std::map<int, std::string> &expected, const RunOptions &options) {
  std::string error;
  int differ = 0;
  std::string tolerance =
      fmt::format("rtol {:g}, atol {:g}", options.tolerance.rtol, options.tolerance.atol);
  for (const auto &[o, path] : expected) {
    HostTensor want;
    if (!runtime::readTensorFile(path, want, error))
      return failure("--check: " + error), false;
    const plan::Tensor &output = plan.outputs(o);
    std::string what = fmt::format("output {} '{}' {}", o, output.name(),
                                   typeToString(output.type()));
    runtime::Comparison c;
    if (!runtime::compareTensors(executor.output(o), want, options.tolerance, c, error))
      return failure(fmt::format("--check: {}: {} ({})", what, error, path)), false;
    int64_t count = plan::elementCount(output.type());
    if (c.mismatches == 0) {
      fmt::print("check: {}: max abs err {:.3g}, max rel err {:.3g}: ok\n", what, c.maxAbs,
                 c.maxRel);
      continue;
    }
    ++differ;
    fmt::print("check: {}: {} of {} elements differ ({}); the worst at [{}]: got {:g}, "
               "expected {:g} (max abs err {:.3g}, max rel err {:.3g})\n",
               what, c.mismatches, count, tolerance, fmt::join(c.worst, ", "), c.worstGot,
               c.worstWant, c.maxAbs, c.maxRel);
  }
  std::fflush(stdout); // the lines above before the error
  if (differ)
    return failure(fmt::format("--check: {} of {} outputs differ from the expected ones in "
                               "'{}' ({})",
                               differ, expected.size(), options.inputs, tolerance)),
           false;
  fmt::print("check: {} of {} outputs match ({})\n", expected.size(), expected.size(),
             tolerance);
  return true;
}

/// Runs this process's rank of `plan`: rank 0 alone, or the job's rank.
int runRank(const plan::Plan &plan, const RunOptions &options, runtime::RankJob *job) {
  std::string error;
  std::unique_ptr<runtime::Device> device;
  if (options.cuda) {
    std::string why;
    int gpus = runtime::cuda::usableGpus(why);
    if (gpus == 0)
      return failure("--backend cuda: no usable NVIDIA GPU: " + why);
    int rank = job ? job->rank() : 0;
    device = runtime::cuda::openCudaDevice(runtime::cuda::localGpu(gpus, rank), error);
    if (!device)
      return failure("--backend cuda: " + error);
  }
  runtime::Device *gpu = device.get();
  auto executor = runtime::Executor::create(plan, job ? job->rank() : 0, options.model,
                                            options.threads, error,
                                            job ? job->groups() : nullptr, std::move(device));
  if (!executor)
    return failure(options.planPath + ": " + error);
  if (gpu && (!job || job->rank() == 0)) {
    std::string staged = gpu->hostStagedSummary(), kernels = gpu->kernelSummary();
    fmt::print("run: on {}{}{}\n", gpu->name(), kernels.empty() ? std::string() : "; " + kernels,
               staged.empty() ? std::string()
                              : "; on the host for want of a GPU kernel: " + staged);
  }
  bool primary = !job || job->rank() == 0; // writes what the job gives
  // The mesh's ranks (a parameter-server plan's servers run apart).
  runtime::Communicator *world = job ? &job->meshWorld() : nullptr;
  bool measure = options.profile || !options.trace.empty();
  auto report = [&] {
    return (!options.profile ||
            printProfile(plan, *executor, world, job ? &job->world() : nullptr)) &&
           (options.trace.empty() || writeMeasuredTrace(plan, *executor, world, options.trace));
  };
  if (plan.has_training()) {
    TrainRunOptions train = options.train;
    if (!train.checkpoint.empty() && train.checkpointEvery == 0)
      train.checkpointEvery = train.steps;
    train.modelPath = options.model;
    // The device's peak, for each step's share of it: the cluster the plan
    // was compiled for (cpu-local without one), at the precision it computes in.
    std::string clusterError;
    std::optional<cost::Cluster> cluster =
        plan.cluster().empty() ? cost::preset("cpu-local", clusterError)
                               : cost::parseCluster(plan.cluster(), clusterError);
    if (cluster)
      train.peakFlops = cluster->device.peak(plan.training().precision() == "bf16" ? plan::BF16
                                                                                  : plan::F32);
    if (measure)
      executor->enableProfile();
    int status = runTraining(plan, *executor, train, world, job ? &job->world() : nullptr);
    bool server = job && job->rank() >= plan::meshDevices(plan.mesh());
    if (status == 0 && !server && !report())
      return 1;
    return status;
  }
  std::map<int, std::string> expected;
  if (!readInputs(plan, options.inputs, *executor, expected))
    return 1;
  if (options.check && expected.empty())
    return failure(fmt::format("--check: '{}' has no expected outputs (output_0.pb or "
                               "output_0.npy, ...)",
                               options.inputs));
  if (!options.check && !expected.empty() && primary)
    fmt::print("run: '{}' holds expected outputs; --check compares against them\n",
               options.inputs);
  runtime::watchdog::setActivity("the inference run");
  if (!executor->run(error))
    return failure(error);

  if (measure)
    executor->enableProfile();
  if (options.repeat > 0) {
    std::vector<double> ms;
    for (int r = 0; r < options.repeat; ++r) {
      auto start = std::chrono::steady_clock::now();
      if (!executor->run(error))
        return failure(error);
      // A run ends when every rank has finished (pipeline stages finish
      // at different times).
      if (job && !job->world().barrier(error))
        return failure(error);
      ms.push_back(std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - start)
                       .count());
    }
    std::sort(ms.begin(), ms.end());
    double mean = 0;
    for (double m : ms)
      mean += m / ms.size();
    fmt::print("run: {} runs on {} threads{}: median {:.3f} ms, mean {:.3f} ms, min {:.3f} ms\n",
               options.repeat, executor->threads(),
               executor->ranks() > 1 ? fmt::format(" per rank, {} ranks", executor->ranks())
                                     : std::string(),
               ms[ms.size() / 2], mean, ms.front());
  } else if (measure && !executor->run(error)) {
    return failure(error);
  }
  if (measure && !report())
    return 1;

  if (options.check && primary && !checkOutputs(plan, *executor, expected, options))
    return 1;
  if (!options.outputs.empty() && primary) {
    const std::string &outputs = options.outputs;
    if (!isDirectory(outputs) && mkdir(outputs.c_str(), 0777) != 0)
      return failure("cannot create the output directory '" + outputs + "'");
    for (int o = 0; o < plan.outputs_size(); ++o) {
      std::string path = outputs + "/output_" + std::to_string(o) + "." + options.outputFormat;
      if (!runtime::writeTensorFile(path, executor->output(o), error))
        return failure(error);
    }
  }
  if (!executor->deviceError().empty())
    return failure(executor->deviceError());
  return 0;
}

} // namespace

int runRun(const Args &args) {
  RunOptions options;
  std::string &planPath = options.planPath, &inputs = options.inputs,
              &outputs = options.outputs, &model = options.model,
              &outputFormat = options.outputFormat;
  int &threads = options.threads, &repeat = options.repeat;
  bool &profile = options.profile;
  TrainRunOptions &train = options.train;
  int ranks = 0; // -n; 0: not given
  std::string backend = "cpu";
  OptionParser parser("run", "plan", planPath);
  parser.value("--backend", [&](const std::string &v) -> std::string {
    backend = v;
    return v == "cpu" || v == "cuda" ? "" : "--backend takes cpu or cuda, got '" + v + "'";
  });
  parser.value(
      "-n",
      [&](const std::string &v) -> std::string {
        if (std::string problem = nonNegative("-n", ranks)(v); !problem.empty())
          return problem;
        return ranks == 0 ? "-n needs at least 1 rank" : "";
      });
  parser.text("--inputs", inputs);
  parser.text("--outputs", outputs);
  parser.text("--model", model);
  parser.value("--output-format", [&](const std::string &v) -> std::string {
    outputFormat = v;
    return v == "pb" || v == "npy" ? "" : "--output-format is pb or npy, got '" + v + "'";
  });
  parser.value("--threads", nonNegative("--threads", threads));
  parser.value("--repeat", nonNegative("--repeat", repeat));
  parser.flag("--profile", profile);
  parser.flag("--check", options.check);
  for (auto [flag, out] : {std::pair{"--rtol", &options.tolerance.rtol},
                           std::pair{"--atol", &options.tolerance.atol}})
    parser.value(flag, [flag = flag, out = out](const std::string &v) -> std::string {
      char *end = nullptr;
      double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end || !(x >= 0) || std::isinf(x))
        return std::string(flag) + " needs a non-negative number, got '" + v + "'";
      *out = x;
      return "";
    });
  parser.text("--trace", options.trace);
  parser.text("--data", train.data);
  int steps = 0, seed = 0, every = 0;
  parser.value("--steps", [&](const std::string &v) {
    std::string problem = nonNegative("--steps", steps)(v);
    train.steps = steps;
    return problem;
  });
  parser.value("--seed", [&](const std::string &v) {
    std::string problem = nonNegative("--seed", seed)(v);
    train.seed = uint64_t(seed);
    return problem;
  });
  parser.value("--token-bytes", [&](const std::string &v) -> std::string {
    if (std::string problem = nonNegative("--token-bytes", train.tokenBytes)(v);
        !problem.empty())
      return problem;
    return train.tokenBytes == 2 || train.tokenBytes == 4
               ? ""
               : "--token-bytes is 2 (uint16 ids) or 4 (uint32 ids)";
  });
  parser.text("--checkpoint", train.checkpoint);
  parser.value("--checkpoint-every", [&](const std::string &v) {
    std::string problem = nonNegative("--checkpoint-every", every)(v);
    train.checkpointEvery = every;
    return problem;
  });
  parser.text("--export", train.exportPath);
  parser.text("--log-json", train.logJson);
  parser.flag("--resume", train.resume);
  int maxRestarts = 0;
  parser.value("--max-restarts", nonNegative("--max-restarts", maxRestarts));
  double timeout = 600; // as NCCL's default: a checkpoint write of many GB fits
  parser.value("--timeout", [&](const std::string &v) -> std::string {
    char *end = nullptr;
    timeout = std::strtod(v.c_str(), &end);
    return !v.empty() && !*end && timeout >= 0 && std::isfinite(timeout)
               ? ""
               : "--timeout needs seconds (0: wait forever), got '" + v + "'";
  });
  parser.flag("--no-shuffle", [&] { train.shuffle = false; });
  // Federated averaging (a plan compiled with --sync federated).
  parser.value("--rounds", countAtLeast("--rounds", train.rounds, 1), "--rounds needs a number");
  parser.value("--local-epochs", countAtLeast("--local-epochs", train.localEpochs, 1),
               "--local-epochs needs a number");
  parser.value("--clients-per-round", countAtLeast("--clients-per-round", train.clientsPerRound, 1),
               "--clients-per-round needs a number");
  parser.flag("--secure-aggregation", train.secureAggregation);
  parser.value("--lose-update", [&](const std::string &v) -> std::string {
    // CLIENT@ROUND: that client's update of that round is lost (testing a
    // client that drops out).
    size_t at = v.find('@');
    char *end = nullptr;
    long long c = at == std::string::npos ? -1 : std::strtoll(v.c_str(), &end, 10);
    long long r = at == std::string::npos ? -1 : std::strtoll(v.c_str() + at + 1, nullptr, 10);
    if (at == std::string::npos || end != v.c_str() + at || c < 0 || r < 1)
      return "--lose-update takes CLIENT@ROUND (like 2@3), got '" + v + "'";
    train.lostUpdates.insert({c, r});
    return "";
  });
  if (int rc = parser.parse(args))
    return rc;
  // The arguments for the ranks dtc starts: all but -n (and
  // --max-restarts: the ranks do not restart themselves).
  Args forwarded;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "-n" || args[i] == "--max-restarts") {
      ++i;
      continue;
    }
    if (args[i].rfind("-n=", 0) != 0 && args[i].rfind("--max-restarts=", 0) != 0)
      forwarded.push_back(args[i]);
  }
  if (planPath.empty())
    return usageError("run needs a plan: dtc run PLAN.dtcp --inputs DIR --outputs DIR");
  if (!inputs.empty() && !isDirectory(inputs))
    return failure("--inputs '" + inputs + "' is not a directory");

  plan::Plan plan;
  std::string error;
  if (!plan::loadPlan(planPath, plan, error))
    return failure(error);
  if (backend == "cuda") {
    // The plan must be compiled for GPUs (its kernels generated), and the
    // machine have a usable GPU (each rank opens its own: runRank).
    if (plan.backend() != "cuda")
      return failure(planPath + " was compiled for the CPU, so it has no GPU kernels: compile "
                                "it with --backend cuda");
    const plan::Training &training = plan.training();
    if (!training.sync().empty() || training.has_parameter_servers())
      return failure("--backend cuda runs data-, tensor- and pipeline-parallel plans; " +
                     planPath + " synchronizes with --sync " +
                     (training.has_parameter_servers() ? std::string("ps") : training.sync()) +
                     ", which runs on the CPU only (--backend cpu)");
    std::string why;
    if (runtime::cuda::usableGpus(why) == 0)
      return failure("--backend cuda: no usable NVIDIA GPU: " + why);
    options.cuda = true;
  }
  bool generated = plan.model().rfind("gpt:", 0) == 0; // parameters are drawn, not read
  if (model.empty() && !generated && readsModel(plan) && !isFile(plan.model()))
    return failure(planPath + ": the model it was compiled from, '" + plan.model() +
                   "', is not there: pass --model MODEL.onnx");
  if (generated && !train.exportPath.empty())
    return usageError("--export writes the trained weights into the ONNX model the plan was "
                      "compiled from; '" + plan.model() + "' is generated and has none");

  // A parameter-server plan's servers are ranks past the mesh's.
  int64_t devices = plan::meshDevices(plan.mesh()) + plan.training().parameter_servers().servers();
  if (ranks != 0 && ranks != devices)
    return usageError(fmt::format("-n {}, but {} is a plan for {} (mesh {}): give -n {} "
                                  "or leave -n out",
                                  ranks, planPath, plan::rankCount(devices),
                                  fmt::join(plan::meshAxisSizes(plan.mesh()), "x"), devices));
  // Before any rank starts: a usage error once, not once per rank.
  if (options.check && (plan.has_training() || inputs.empty()))
    return usageError(plan.has_training()
                          ? "--check compares an inference plan's outputs; " + planPath +
                                " is a training step"
                          : "--check needs --inputs DIR holding output_N.pb (or .npy) beside "
                            "the inputs");
  if (!plan.has_training() &&
      (!train.data.empty() || train.steps || !train.exportPath.empty()))
    return usageError(planPath + " is an inference plan: --data, --steps and --export need a "
                                 "plan compiled with --train");
  // Weights split over the ranks are gathered for --export, in the same
  // order on every rank: one program for all, or a pipeline's stages (each
  // stage's parameters gathered in turn, runtime/train/ModelExport.cpp).
  if (std::string split = shardedWeight(plan);
      !split.empty() && !train.exportPath.empty() && plan.ranks_size() > 1 &&
      plan.training().pipeline().stages() <= 1)
    return usageError(fmt::format("--export of weights split over ranks that run different "
                                  "programs ('{}' and maybe others) is not supported yet; keep "
                                  "--checkpoint DIR (one file per rank) instead",
                                  split));
  // The trained model's folder exists before training starts, not only
  // when hours of training are to be written into it.
  if (!train.exportPath.empty()) {
    std::error_code ec;
    std::filesystem::path folder = std::filesystem::path(train.exportPath).parent_path();
    if (!folder.empty() && !std::filesystem::is_directory(folder) &&
        !std::filesystem::create_directories(folder, ec))
      return failure(fmt::format("--export {}: cannot create the folder '{}': {}",
                                 train.exportPath, folder.string(), ec.message()));
  }
  if (maxRestarts > 0 && (!plan.has_training() || train.checkpoint.empty()))
    return usageError("--max-restarts restarts a training run from its last checkpoint: it "
                      "needs a training plan and --checkpoint DIR (with --checkpoint-every N)");
  if (maxRestarts > 0 && runtime::MpiSession::launchedByMpi())
    return usageError("--max-restarts is for the dtc that starts the ranks; under mpirun or "
                      "srun, restart the job from outside (with --resume)");
  if (maxRestarts > 0) {
    Args command = {"run"};
    command.insert(command.end(), forwarded.begin(), forwarded.end());
    return runWithRestarts(devices, command, maxRestarts, train.checkpoint);
  }
  if (!runtime::MpiSession::launchedByMpi()) {
    if (devices == 1 && ranks == 0)
      return runRank(plan, options, nullptr); // no MPI for one process
    Args command = {"run"};
    command.insert(command.end(), forwarded.begin(), forwarded.end());
    return relaunchUnderMpirun(devices, command);
  }
  std::unique_ptr<runtime::RankJob> job = runtime::RankJob::join(plan, error);
  if (!job)
    return error.empty() ? 1 : failure(planPath + ": " + error);
  job->quietOtherRanks();
  if (timeout > 0) {
    const char *heartbeats = getenv(runtime::watchdog::kHeartbeatDir);
    runtime::watchdog::start(job->rank(), job->size(), timeout, heartbeats ? heartbeats : "");
  }
  if (threads == 0)
    threads = job->defaultThreads();
  std::string placement = job->bindToCores(threads);
  if (job->rank() == 0)
    fmt::print("{}\n", placement);
  // Each rank's errors go to finish, which prints each once for the job.
  std::vector<std::string> errors;
  holdErrors(&errors);
  int status = runRank(plan, options, job.get());
  holdErrors(nullptr);
  return job->finish(status, errors);
}

} // namespace dtc::cli
