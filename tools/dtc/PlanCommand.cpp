//===- PlanCommand.cpp - dtc plan -----------------------------------------===//
#include "tools/dtc/Commands.h"
#include "tools/dtc/OptionParser.h"

#include "cost/Simulator.h"
#include "plan/PlanLoader.h"
#include "plan/Ranks.h"
#include "plan/PlanPrinter.h"
#include "plan/PlanReport.h"
#include "plan/PlanSummary.h"

#include "llvm/Support/FileSystem.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace dtc::cli {

namespace {

/// The simulated step's events as the page draws them: a lane per rank and
/// stream that has any, the longest spans first up to what a page draws
/// quickly.
plan::Timeline timelineOf(const plan::Plan &plan, const cost::Simulation &sim) {
  constexpr size_t kMostSpans = 30000;
  const char *streams[] = {"compute", "collectives", "pipeline transfers", "overlapped reductions"};
  std::map<std::pair<int, int>, int> laneOf;
  for (const cost::Event &e : sim.events)
    laneOf.try_emplace({e.rank, std::clamp(e.stream, 0, 3)}, 0);
  plan::Timeline timeline;
  for (auto &[key, lane] : laneOf) {
    lane = int(timeline.lanes.size());
    timeline.lanes.push_back(fmt::format("rank {} {}", key.first, streams[key.second]));
  }
  // Spans a lane runs back to back (closer than a 2000th of the step: a
  // pixel's fraction) are one, so a busy lane draws busy; past what a page
  // draws quickly, the shortest are left out.
  double joined = sim.stepSeconds / 2000;
  std::vector<plan::Timeline::Span> spans;
  for (const cost::Event &e : sim.events) {
    int stream = std::clamp(e.stream, 0, 3);
    spans.push_back({laneOf.at({e.rank, stream}), stream == 0 ? 0 : stream == 2 ? 2 : 1,
                     e.start, e.end, ""});
  }
  std::sort(spans.begin(), spans.end(), [](const auto &a, const auto &b) {
    return std::pair(a.lane, a.start) < std::pair(b.lane, b.start);
  });
  for (const plan::Timeline::Span &span : spans)
    if (!timeline.spans.empty() && timeline.spans.back().lane == span.lane &&
        span.start - timeline.spans.back().end <= joined)
      timeline.spans.back().end = std::max(timeline.spans.back().end, span.end);
    else
      timeline.spans.push_back(span);
  if (timeline.spans.size() > kMostSpans) {
    std::nth_element(timeline.spans.begin(), timeline.spans.begin() + kMostSpans,
                     timeline.spans.end(), [](const auto &a, const auto &b) {
                       return a.end - a.start > b.end - b.start;
                     });
    timeline.leftOut = timeline.spans.size() - kMostSpans;
    timeline.spans.resize(kMostSpans);
  }
  return timeline;
}

/// --ptx DIR: every GPU kernel of the plan (dtc compile --backend cuda) as
/// DIR/program<P>-<part><I>-<entry>.<chip>.ptx, for ptxas or reading.
int writePtx(const plan::Plan &plan, const std::string &dir) {
  std::error_code ec = llvm::sys::fs::create_directories(dir);
  if (ec)
    return failure(dir + ": " + ec.message());
  // One file per kernel and chip (the plan holds each kernel once,
  // however many instructions run it).
  int files = 0, kernels = plan.gpu_modules_size(), instructions = 0;
  for (const plan::RankProgram &program : plan.ranks())
    for (const auto *list : {&program.prologue(), &program.instructions()})
      for (const plan::Instruction &inst : *list)
        instructions += inst.has_gpu();
  for (const plan::GpuModule &module : plan.gpu_modules())
    for (const plan::ChipCode &code : module.code()) {
      if (int rc = writeOutput(fmt::format("{}/{}.{}.ptx", dir, module.entry(), code.chip()),
                               code.ptx()))
        return rc;
      ++files;
    }
  if (plan.backend() != "cuda")
    return failure("the plan was compiled for the CPU, so it has no GPU kernels: compile it "
                   "with --backend cuda");
  fmt::print("wrote {} PTX files of {} kernels ({} instructions run them) to {}\n", files,
             kernels, instructions, dir);
  return 0;
}

} // namespace

int runPlan(const Args &args) {
  std::string path, output = "-", format = "text";
  std::string html, ptx;
  bool full = false, json = false, explain = false;
  OptionParser parser("plan", "plan file", path);
  parser.text("-o", output);
  parser.text("--format", format);
  parser.text("--html", html);
  parser.text("--ptx", ptx);
  parser.flag("--full", full);
  parser.flag("--json", json);
  parser.flag("--explain", explain);
  if (int rc = parser.parse(args))
    return rc;
  if (path.empty())
    return usageError("plan needs a plan file: dtc plan PLAN.dtcp");
  if (format != "text")
    return usageError("plan: --format " + format + " is not supported (text is)");
  if (int(full) + int(json) + int(explain) + int(!html.empty()) + int(!ptx.empty()) > 1)
    return usageError("plan takes one of --full, --json, --explain, --html FILE and --ptx DIR");
  plan::Plan plan;
  std::string error;
  if (!plan::loadPlan(path, plan, error))
    return failure(error);
  if (full)
    return writeOutput(output, printPlan(plan));
  if (!ptx.empty())
    return writePtx(plan, ptx);
  if (explain)
    return writeOutput(output, plan::explainText(plan));
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
    cost::Simulation sim = cost::simulate(plan, *cluster, /*trace=*/!html.empty());
    if (sim.error.empty() && !sim.ranks.empty() && std::isfinite(sim.stepSeconds) &&
        sim.stepSeconds > 0) {
      plan::Prediction p;
      p.cluster = cluster->name;
      p.stepSeconds = sim.stepSeconds;
      for (const cost::RankTime &t : sim.ranks) {
        p.computeSeconds += t.compute / double(sim.ranks.size());
        p.communicationSeconds += t.communication / double(sim.ranks.size());
        p.idleSeconds += t.idle / double(sim.ranks.size());
      }
      if (sim.parameterServers)
        p.allReduceStepSeconds = sim.workerSeconds + sim.allReduceSeconds + sim.updateSeconds;
      summary.predicted = p;
    }
    if (!html.empty()) // a plan without costs (one written by hand): no timeline
      return writeOutput(html, plan::reportHtml(summary,
                                                summary.predicted ? timelineOf(plan, sim)
                                                                  : plan::Timeline{},
                                                cluster->device.planMemory()));
  }
  if (!html.empty())
    return failure(path + ": its cluster: " + error);
  return writeOutput(output, json ? plan::summaryJson(summary) : plan::summaryText(summary));
}

} // namespace dtc::cli
