//===- TraceCompare.cpp ---------------------------------------------------===//
#include "cost/TraceCompare.h"

#include "plan/FormatBytes.h"
#include "plan/PlanPrinter.h"
#include "plan/Ranks.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace dtc::cost {

namespace {

/// Seconds per (rank, instruction): one run's, the mean over its runs.
using PerInstruction = std::map<std::pair<int64_t, int64_t>, std::pair<double, int>>;

std::string ratio(double simulated, double measured) {
  return measured > 0 ? llvm::formatv("{0:F2}", simulated / measured).str() : "-";
}

} // namespace

std::string compareTraces(const plan::Plan &plan, const Simulation &simulation,
                          const std::string &measuredJson, std::string &error) {
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(measuredJson);
  if (!parsed) {
    error = "not a JSON trace: " + llvm::toString(parsed.takeError());
    return "";
  }
  const llvm::json::Object *root = parsed->getAsObject();
  const llvm::json::Array *events = root ? root->getArray("traceEvents") : nullptr;
  if (!events) {
    error = "no traceEvents (write it with dtc run --trace)";
    return "";
  }
  PerInstruction measured, simulated;
  for (const llvm::json::Value &v : *events) {
    const llvm::json::Object *e = v.getAsObject();
    if (!e || e->getString("ph") != "X")
      continue;
    std::optional<int64_t> rank = e->getInteger("pid");
    std::optional<double> dur = e->getNumber("dur");
    const llvm::json::Object *args = e->getObject("args");
    std::optional<int64_t> inst = args ? args->getInteger("instruction") : std::nullopt;
    if (!rank || !dur || !inst) {
      error = "an event without pid, dur or args.instruction (write it with dtc run --trace)";
      return "";
    }
    int program = plan::programIndexOfRank(plan, *rank);
    if (*rank < 0 || *rank >= plan::planRanks(plan) || program >= plan.ranks_size() ||
        *inst < 0 || *inst >= plan.ranks(program).instructions_size()) {
      error = llvm::formatv("rank {0}, instruction {1}: not in this plan (a trace of another "
                            "plan?)",
                            *rank, *inst)
                  .str();
      return "";
    }
    // The trace names each instruction as `dtc plan` does: another plan's
    // differs somewhere.
    const plan::Instruction &planned = plan.ranks(program).instructions(int(*inst));
    if (std::optional<llvm::StringRef> name = e->getString("name");
        !name || *name != plan::describeInstruction(planned)) {
      error = llvm::formatv("rank {0}, instruction {1}: '{2}' in the trace, '{3}' in the plan "
                            "(a trace of another plan?)",
                            *rank, *inst, name.value_or(""),
                            plan::describeInstruction(planned))
                  .str();
      return "";
    }
    auto &[seconds, runs] = measured[{*rank, *inst}];
    seconds += *dur * 1e-6;
    ++runs;
  }
  if (measured.empty()) {
    error = "no events";
    return "";
  }
  for (const Event &e : simulation.events) {
    auto &[seconds, runs] = simulated[{e.rank, e.instruction}];
    seconds += e.end - e.start;
    ++runs;
  }
  // Per op class, over the instructions both have.
  struct Sums {
    double measured = 0, simulated = 0;
    int instructions = 0;
  };
  std::map<std::string, Sums> classes;
  Sums all;
  struct Apart {
    double measured, simulated;
    int64_t rank, instruction;
  };
  std::vector<Apart> apart;
  int repeated = 0; // instructions a step runs more than once
  for (const auto &[key, m] : measured) {
    auto s = simulated.find(key);
    if (s == simulated.end())
      continue;
    // Per step: a micro-batched step runs its per-micro-batch
    // instructions once a micro-batch (the simulation's runs of it); the
    // measured trace gives each instruction's time once.
    double runsPerStep = s->second.second;
    double mine = m.first / m.second * runsPerStep, model = s->second.first;
    if (runsPerStep > 1)
      ++repeated;
    int program = plan::programIndexOfRank(plan, key.first);
    const plan::Instruction &inst = plan.ranks(program).instructions(int(key.second));
    Sums &c = classes[opClassName(inst.cost().op_class())];
    for (Sums *sum : {&c, &all}) {
      sum->measured += mine;
      sum->simulated += model;
      ++sum->instructions;
    }
    apart.push_back({mine, model, key.first, key.second});
  }
  if (!all.instructions) {
    error = "no instruction of the trace is in the simulation";
    return "";
  }
  std::set<int64_t> ranks;
  for (const auto &[key, m] : measured)
    ranks.insert(key.first);
  std::string out =
      llvm::formatv("compared with the measured trace ({0} instructions, {1}on {2} rank{3}; "
                    "times per step):\n",
                    all.instructions,
                    repeated ? llvm::formatv("{0} of them once per micro-batch, ", repeated).str()
                             : std::string(),
                    ranks.size(), ranks.size() == 1 ? "" : "s")
          .str();
  out += llvm::formatv("  {0,-16} {1,12} {2,12} {3,20}\n", "op class", "measured", "simulated",
                       "simulated/measured")
             .str();
  std::vector<std::pair<double, std::string>> order;
  for (const auto &[name, c] : classes)
    order.push_back({-c.measured, name});
  std::sort(order.begin(), order.end());
  auto row = [&](const std::string &name, const Sums &c) {
    out += llvm::formatv("  {0,-16} {1,12} {2,12} {3,20}\n", name, plan::formatSeconds(c.measured),
                         plan::formatSeconds(c.simulated), ratio(c.simulated, c.measured))
               .str();
  };
  for (const auto &[negative, name] : order)
    row(name, classes[name]);
  row("all", all);
  // The instructions the model misses most, by the time it gets wrong.
  std::sort(apart.begin(), apart.end(), [](const Apart &a, const Apart &b) {
    return std::abs(a.simulated - a.measured) > std::abs(b.simulated - b.measured);
  });
  out += "  furthest apart (simulated - measured):\n";
  for (size_t i = 0; i < apart.size() && i < 5; ++i) {
    const Apart &a = apart[i];
    const plan::Instruction &inst =
        plan.ranks(plan::programIndexOfRank(plan, a.rank)).instructions(int(a.instruction));
    std::string what = plan::describeInstruction(inst);
    if (what.size() > 60)
      what = what.substr(0, 57) + "...";
    out += llvm::formatv("    rank {0} instruction {1} ({2}): measured {3}, simulated {4} ({5})\n",
                         a.rank, a.instruction, what, plan::formatSeconds(a.measured),
                         plan::formatSeconds(a.simulated), ratio(a.simulated, a.measured))
               .str();
  }
  return out;
}

} // namespace dtc::cost
