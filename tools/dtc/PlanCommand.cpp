//===- PlanCommand.cpp - dtc plan -----------------------------------------===//
#include "tools/dtc/Commands.h"
#include "tools/dtc/OptionParser.h"

#include "cost/Simulator.h"
#include "plan/FormatBytes.h"
#include "plan/PlanLoader.h"
#include "plan/Ranks.h"
#include "plan/PlanPrinter.h"

#include <fmt/format.h>

#include <algorithm>

namespace dtc::cli {

int runPlan(const Args &args) {
  std::string path, output = "-", format = "text";
  bool full = false;
  OptionParser parser("plan", "plan file", path);
  parser.text("-o", output);
  parser.text("--format", format);
  parser.flag("--full", full);
  if (int rc = parser.parse(args))
    return rc;
  if (path.empty())
    return usageError("plan needs a plan file: dtc plan PLAN.dtcp");
  if (format != "text")
    return usageError("plan: --format " + format + " is not supported (text is)");
  plan::Plan plan;
  std::string error;
  if (!plan::loadPlan(path, plan, error))
    return failure(error);
  if (full)
    return writeOutput(output, printPlan(plan));
  // The step simulated on the cluster the plan was compiled for (a plan
  // compiled without one: on cpu-local, as dtc simulate takes it).
  std::vector<std::string> predicted;
  std::optional<cost::Cluster> cluster = plan.cluster().empty()
                                             ? cost::preset("cpu-local", error)
                                             : cost::parseCluster(plan.cluster(), error);
  if (cluster) {
    int64_t ranks = plan::planRanks(plan);
    if (cluster->devicesPerNode > 0)
      cluster->nodes = std::max(cluster->nodes, (ranks + cluster->devicesPerNode - 1) /
                                                    cluster->devicesPerNode);
    cost::Simulation sim = cost::simulate(plan, *cluster, false);
    if (sim.error.empty() && !sim.ranks.empty()) {
      double compute = 0, comm = 0, idle = 0;
      for (const cost::RankTime &t : sim.ranks)
        compute += t.compute, comm += t.communication, idle += t.idle;
      double n = double(sim.ranks.size());
      predicted.push_back(fmt::format(
          "predicted step: {} on {} (per rank: compute {}, communication {}, idle {}; "
          "dtc simulate for throughput and the timeline)",
          plan::formatSeconds(sim.stepSeconds), cluster->name,
          plan::formatSeconds(compute / n), plan::formatSeconds(comm / n),
          plan::formatSeconds(idle / n)));
    }
  }
  return writeOutput(output, summarizePlan(plan, predicted));
}

} // namespace dtc::cli
