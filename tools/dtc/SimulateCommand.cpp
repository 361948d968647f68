//===- SimulateCommand.cpp - dtc simulate ----------------------------------===//
#include "tools/dtc/Commands.h"
#include "tools/dtc/OptionParser.h"

#include "cost/Simulator.h"
#include "cost/TraceCompare.h"
#include "plan/PlanLoader.h"
#include "plan/DType.h"
#include "plan/FormatBytes.h"
#include "plan/PipelineSchedule.h"
#include "plan/Ranks.h"
#include "plan/PlanPrinter.h"
#include "plan/PlanSummary.h"

#include <map>
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iterator>

namespace dtc::cli {
namespace {

std::string seconds(double s) { return plan::formatSeconds(s); }

/// "12.3 GFLOP/s", "1.5 k/s".
std::string rate(double perSecond, const char *unit) {
  const char *prefixes[] = {"", " k", " M", " G", " T", " P"};
  int i = 0;
  while (perSecond >= 1000 && i < 5) {
    perSecond /= 1000;
    ++i;
  }
  return fmt::format("{:.3g}{}{}", perSecond, prefixes[i], unit);
}

/// What the largest rank's memory holds, from the compiler's summary.
void printMemoryBreakdown(const plan::Plan &plan, int64_t peak) {
  const plan::RankSummary *largest = nullptr;
  for (const plan::RankSummary &r : plan.decisions().ranks())
    if (r.peak_memory_bytes() == peak)
      largest = &r;
  if (!largest || largest->weight_bytes() + largest->optimizer_state_bytes() == 0)
    return;
  const plan::RankSummary &r = *largest;
  int64_t loadTime = r.parameter_bytes() - r.weight_bytes() - r.optimizer_state_bytes();
  int64_t transient = r.peak_memory_bytes() - r.parameter_bytes();
  std::string line = "= " + plan::weightsText(r);
  if (r.optimizer_state_bytes())
    line += " + optimizer state " + plan::formatBytes(r.optimizer_state_bytes());
  if (loadTime > 0)
    line += " + load-time values " + plan::formatBytes(loadTime);
  if (plan.has_training())
    line += " + activations kept for backward " + plan::formatBytes(r.activation_bytes()) +
            " + gradients and workspace " +
            plan::formatBytes(std::max<int64_t>(0, transient - r.activation_bytes()));
  else
    line += " + activations and workspace " + plan::formatBytes(transient);
  fmt::print("                {}\n", line);
}

} // namespace

int runSimulate(const Args &args) {
  std::string path, clusterFile, presetName, trace;
  int64_t nodes = 0;
  OptionParser parser("simulate", "plan", path);
  parser.text("--cluster", clusterFile);
  parser.text("--preset", presetName);
  parser.text("--trace", trace);
  std::string compare;
  parser.text("--compare-trace", compare);
  bool everyRank = false, blocking = false;
  parser.flag("--every-rank", everyRank);
  parser.flag("--no-communication-stream", blocking);
  parser.value("--nodes", countAtLeast("--nodes", nodes, 1), "--nodes needs a number");
  if (int rc = parser.parse(args))
    return rc;
  if (path.empty())
    return usageError("simulate needs a plan: dtc simulate PLAN.dtcp [--preset NAME | --cluster FILE]");
  if (!clusterFile.empty() && !presetName.empty())
    return usageError("simulate takes --cluster or --preset, not both");
  std::string error;
  plan::Plan plan;
  if (!plan::loadPlan(path, plan, error))
    return failure(error);
  int64_t planRanks = plan::planRanks(plan);
  // Without --preset or --cluster: the cluster the plan was compiled for,
  // with as many of its nodes as the plan's ranks need.
  bool recorded = clusterFile.empty() && presetName.empty() && !plan.cluster().empty();
  std::optional<cost::Cluster> cluster =
      recorded              ? cost::parseCluster(plan.cluster(), error)
      : clusterFile.empty() ? cost::preset(presetName.empty() ? "cpu-local" : presetName, error)
                            : cost::loadCluster(clusterFile, error);
  if (!cluster)
    return recorded ? failure(path + ": its recorded cluster: " + error)
           : clusterFile.empty() ? usageError(error)
                                 : failure(error);
  if (recorded && nodes == 0 && cluster->devicesPerNode > 0)
    cluster->nodes = std::max(cluster->nodes, (planRanks + cluster->devicesPerNode - 1) /
                                                  cluster->devicesPerNode);
  if (nodes > 0) // the same machines, as many as the plan needs
    cluster->nodes = nodes;
  // A runtime that waits for each collective and transfer on its compute
  // stream (Megatron-LM's of 2021, dtc's on CPUs): nothing overlaps them.
  if (blocking)
    cluster->device.communicationStream = false;
  if (planRanks > cluster->devices())
    return failure(fmt::format("{}: the plan has {} ranks but cluster '{}' has {} devices ({} "
                               "nodes of {}; --nodes N simulates more)",
                               path, planRanks, cluster->name, cluster->devices(),
                               cluster->nodes, cluster->devicesPerNode));

  bool costed = false;
  for (const plan::RankProgram &program : plan.ranks())
    for (const plan::Instruction &inst : program.instructions())
      costed = costed || inst.cost().op_class() != plan::OP_CLASS_INVALID;
  if (!costed && plan.ranks_size() > 0 && plan.ranks(0).instructions_size() > 0)
    return failure(path + ": the plan carries no instruction costs (written by an older dtc?): "
                          "compile it again");
  // A measured trace has every rank's instructions: simulate each rank.
  cost::Simulation sim = cost::simulate(plan, *cluster, !trace.empty() || !compare.empty(),
                                        everyRank || !compare.empty());
  if (!sim.error.empty())
    return failure(path + ": " + sim.error);
  const cost::Device &device = cluster->device;
  fmt::print("simulated {} on {} ({}, {} of {} devices{})\n", path, cluster->name, device.kind,
             planRanks, cluster->devices(),
             blocking ? "; communication blocks the compute stream" : "");
  double compute = 0, comm = 0, idle = 0;
  int64_t peak = 0;
  for (const cost::RankTime &t : sim.ranks) {
    compute += t.compute;
    comm += t.communication;
    idle += t.idle;
    peak = std::max(peak, t.memoryPeakBytes);
  }
  double ranks = double(std::max<size_t>(sim.ranks.size(), 1));
  fmt::print("  step time     {} (per rank on average: compute {}, communication {}, idle {})\n",
             seconds(sim.stepSeconds), seconds(compute / ranks), seconds(comm / ranks),
             seconds(idle / ranks));
  if (sim.averageSeconds > 0)
    fmt::print("  local SGD     the replicas' average takes {} every {} steps: {} a step, in "
               "the step time\n",
               seconds(sim.averageSeconds), plan.training().average_every(),
               seconds(sim.averageSeconds / double(plan.training().average_every())));
  if (sim.parameterServers) {
    bool async = plan.training().parameter_servers().staleness() > 0;
    double exchange = sim.pushSeconds + sim.pullSeconds;
    double synchronous = sim.workerSeconds + exchange + sim.updateSeconds;
    double allReduce = sim.workerSeconds + sim.allReduceSeconds + sim.updateSeconds;
    fmt::print("  parameter servers  a worker's step {}, pushes {}, the servers' update {}, "
               "pulls {}{} (the busiest: {})\n",
               seconds(sim.workerSeconds), seconds(sim.pushSeconds), seconds(sim.updateSeconds),
               seconds(sim.pullSeconds),
               async ? fmt::format("; asynchronous: {} a step", seconds(sim.stepSeconds)) : "",
               sim.serverBottleneck);
    fmt::print("  against all-reduce  the same gradients all-reduced over the workers take {} "
               "instead of {}: a step of {}, parameter servers {} ({})\n",
               seconds(sim.allReduceSeconds), seconds(exchange), seconds(allReduce),
               seconds(async ? sim.stepSeconds : synchronous),
               (async ? sim.stepSeconds : synchronous) < allReduce
                   ? "parameter servers faster"
                   : "all-reduce faster");
  }
  if (plan.ranks_size() > 1 && !sim.ranks.empty()) {
    // Ranks with programs of their own (pipeline stages) wait unequally:
    // the least and the most idle rank.
    auto [least, most] = std::minmax_element(
        sim.ranks.begin(), sim.ranks.end(),
        [](const cost::RankTime &a, const cost::RankTime &b) { return a.idle < b.idle; });
    fmt::print("  idle per rank from {} (rank {}) to {} (rank {}): waiting for other ranks "
               "at collectives and transfers, or for the step's end\n",
               seconds(least->idle), least - sim.ranks.begin(), seconds(most->idle),
               most - sim.ranks.begin());
  }
  if (const plan::Pipeline &pipeline = plan.training().pipeline();
      pipeline.stages() > 1 && sim.stepSeconds > 0) {
    // The bubble: the share of the step a stage waits, on average over
    // ranks; an even pipeline's is (p - 1) / (m + p - 1), with v virtual
    // stages (p - 1) / v / (m + (p - 1) / v).
    double p = double(pipeline.stages());
    double m = double(std::max<int64_t>(1, plan.training().micro_batches()));
    double v = double(std::max<uint32_t>(1, pipeline.virtual_stages()));
    fmt::print("  pipeline      {} stages, {} schedule{}, {} micro-batches: bubble {:.1f}% of the "
               "step (an even pipeline's: {:.1f}%)\n",
               pipeline.stages(), plan::scheduleName(pipeline.schedule()),
               v > 1 ? fmt::format(" of {} virtual stages", int64_t(v)) : std::string(),
               int64_t(m), 100 * idle / ranks / sim.stepSeconds,
               100 * (p - 1) / v / (m + (p - 1) / v));
  }
  if (plan.inputs_size() > 0 && plan.inputs(0).type().shape_size() > 0 && sim.stepSeconds > 0) {
    const plan::TensorType &first = plan.inputs(0).type();
    int64_t microBatches = std::max<int64_t>(1, plan.training().micro_batches());
    int64_t batch = first.shape(0) * microBatches; // a micro-batched step's inputs hold one
    double samples = double(batch);
    std::string line = rate(samples / sim.stepSeconds, " samples/s");
    bool tokens = first.shape_size() == 2 && (first.dtype() == plan::I64 || first.dtype() == plan::I32);
    if (tokens)
      line += ", " + rate(samples * double(first.shape(1)) / sim.stepSeconds, " tokens/s");
    fmt::print("  throughput    {} (batch {} from input '{}'{})\n", line, batch,
               plan.inputs(0).name(),
               microBatches > 1 ? fmt::format(", {} micro-batches of {}", microBatches,
                                              first.shape(0))
                                : "");
  }
  if (sim.stepSeconds > 0) {
    // Against the peak of the type most FLOPs are computed in (MFU): a
    // bf16 training step's or inference plan's matmuls.
    std::map<plan::DType, double> flopsIn;
    for (const plan::RankProgram &rank : plan.ranks())
      for (const plan::Instruction &inst : rank.instructions())
        flopsIn[inst.cost().dtype()] += inst.cost().flops();
    bool bf16 = flopsIn[plan::BF16] > flopsIn[plan::F32];
    plan::DType type = bf16 ? plan::BF16 : plan::F32;
    double perDevice = sim.flops / ranks / sim.stepSeconds;
    fmt::print("  model FLOP/s  {} per device ({:.1f}% of its {} peak {})\n",
               rate(perDevice, "FLOP/s"), 100 * perDevice / device.peak(type),
               bf16 ? "bf16" : "f32", rate(device.peak(type), "FLOP/s"));
  }
  std::string reserved = device.memoryReserved > 0
                             ? fmt::format(", {} of it kept by the runtime",
                                           plan::formatBytes(int64_t(device.memoryReserved)))
                             : "";
  fmt::print("  memory peak   {} per rank (device capacity {}{}: {})\n", plan::formatBytes(peak),
             plan::formatBytes(int64_t(device.memoryCapacity)), reserved,
             double(peak) <= device.planMemory() ? "fits" : "DOES NOT FIT");
  printMemoryBreakdown(plan, peak);
  if (compute > 0) {
    std::string classes;
    for (int k = cost::kFirstOpClass; k < cost::kOpClassSlots; ++k) {
      double s = 0;
      for (const cost::RankTime &t : sim.ranks)
        s += t.byClass[k];
      if (s > 0)
        classes += fmt::format("{}{} {:.0f}%", classes.empty() ? "" : ", ",
                               cost::opClassName(plan::OpClass(k)), 100 * s / compute);
    }
    fmt::print("  compute by op class: {}\n", classes);
  }
  if (!trace.empty()) {
    if (int status = writeOutput(trace, cost::chromeTrace(plan, sim, [](const plan::Instruction &inst) {
      return describeInstruction(inst);
    })))
      return status;
    fmt::print("  trace written to {} (open in ui.perfetto.dev or chrome://tracing)\n", trace);
  }
  if (!compare.empty()) {
    std::ifstream in(compare, std::ios::binary);
    if (!in)
      return failure(compare + ": cannot read the trace");
    std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string text = cost::compareTraces(plan, sim, json, error);
    if (text.empty())
      return failure(compare + ": " + error);
    fmt::print("{}", text);
  }
  return 0;
}

} // namespace dtc::cli
