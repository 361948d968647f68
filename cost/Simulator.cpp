//===- Simulator.cpp -------------------------------------------------------===//
#include "cost/Simulator.h"

#include "cost/CostModel.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>

namespace dtc::cost {

Simulation simulate(const plan::Plan &plan, const Cluster &cluster, bool keepEvents) {
  Simulation sim;
  for (int r = 0; r < plan.ranks_size(); ++r) {
    const plan::RankProgram &program = plan.ranks(r);
    RankTime time;
    time.memoryPeakBytes = program.arena_bytes();
    // When each buffer's value is ready; inputs and parameters at 0.
    std::vector<double> ready(size_t(program.buffers_size()), 0.0);
    double computeFree = 0;
    for (int i = 0; i < program.instructions_size(); ++i) {
      const plan::Instruction &inst = program.instructions(i);
      double start = computeFree;
      for (uint32_t in : inst.inputs())
        if (in < ready.size())
          start = std::max(start, ready[in]);
      double seconds = instructionSeconds(inst.cost(), cluster.device);
      double end = start + seconds;
      time.idle += start - computeFree;
      time.compute += seconds;
      time.byClass[inst.cost().op_class()] += seconds; // slot 0: free ops, 0 s
      computeFree = end;
      for (uint32_t out : inst.outputs())
        if (out < ready.size())
          ready[out] = end;
      sim.flops += inst.cost().flops();
      if (keepEvents)
        sim.events.push_back({r, i, false, start, end});
    }
    time.end = computeFree;
    sim.stepSeconds = std::max(sim.stepSeconds, time.end);
    sim.ranks.push_back(time);
  }
  // A rank that finishes early waits for the step's end.
  for (RankTime &t : sim.ranks)
    t.idle += sim.stepSeconds - t.end;
  return sim;
}

std::string chromeTrace(const plan::Plan &plan, const Simulation &sim,
                        const std::function<std::string(const plan::Instruction &)> &name) {
  llvm::json::Array events;
  for (int r = 0; r < int(sim.ranks.size()); ++r) {
    events.push_back(llvm::json::Object{{"ph", "M"}, {"pid", r}, {"name", "process_name"},
                                        {"args", llvm::json::Object{{"name", "rank " + std::to_string(r)}}}});
    for (int stream = 0; stream < 2; ++stream)
      events.push_back(llvm::json::Object{
          {"ph", "M"}, {"pid", r}, {"tid", stream}, {"name", "thread_name"},
          {"args", llvm::json::Object{{"name", stream ? "communication" : "compute"}}}});
  }
  for (const Event &e : sim.events) {
    const plan::Instruction &inst = plan.ranks(e.rank).instructions(e.instruction);
    events.push_back(llvm::json::Object{
        {"ph", "X"},
        {"pid", e.rank},
        {"tid", e.communication ? 1 : 0},
        {"name", name(inst)},
        {"ts", e.start * 1e6},
        {"dur", (e.end - e.start) * 1e6},
        {"args", llvm::json::Object{{"instruction", e.instruction},
                                    {"flops", inst.cost().flops()},
                                    {"bytes", inst.cost().bytes()}}}});
  }
  llvm::json::Value root =
      llvm::json::Object{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return llvm::formatv("{0}", root).str();
}

} // namespace dtc::cost
