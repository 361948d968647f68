//===- PlanCommand.cpp - dtc plan -----------------------------------------===//
#include "tools/dtc/Commands.h"
#include "tools/dtc/OptionParser.h"

#include "cost/Simulator.h"
#include "plan/PlanLoader.h"
#include "plan/Ranks.h"
#include "plan/PlanPrinter.h"
#include "plan/PlanSummary.h"

#include <algorithm>

namespace dtc::cli {

int runPlan(const Args &args) {
  std::string path, output = "-", format = "text";
  bool full = false, json = false;
  OptionParser parser("plan", "plan file", path);
  parser.text("-o", output);
  parser.text("--format", format);
  parser.flag("--full", full);
  parser.flag("--json", json);
  if (int rc = parser.parse(args))
    return rc;
  if (path.empty())
    return usageError("plan needs a plan file: dtc plan PLAN.dtcp");
  if (format != "text")
    return usageError("plan: --format " + format + " is not supported (text is)");
  if (full && json)
    return usageError("plan takes --full or --json, not both");
  plan::Plan plan;
  std::string error;
  if (!plan::loadPlan(path, plan, error))
    return failure(error);
  if (full)
    return writeOutput(output, printPlan(plan));
  plan::PlanSummary summary = plan::summarizePlan(plan);
  // The step simulated on the cluster the plan was compiled for (a plan
  // compiled without one: on cpu-local, as dtc simulate takes it).
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
      plan::Prediction p;
      p.cluster = cluster->name;
      p.stepSeconds = sim.stepSeconds;
      for (const cost::RankTime &t : sim.ranks) {
        p.computeSeconds += t.compute / double(sim.ranks.size());
        p.communicationSeconds += t.communication / double(sim.ranks.size());
        p.idleSeconds += t.idle / double(sim.ranks.size());
      }
      summary.predicted = p;
    }
  }
  return writeOutput(output, json ? plan::summaryJson(summary) : plan::summaryText(summary));
}

} // namespace dtc::cli
