//===- Simulator.cpp -------------------------------------------------------===//
#include "cost/Simulator.h"

#include "cost/CostModel.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>

namespace dtc::cost {

namespace {

/// One step of a program on one device: kernels on the compute stream,
/// collectives on the communication stream, each starting when its stream
/// is free and its inputs are ready.
RankTime timeline(const plan::Plan &plan, const plan::RankProgram &program, const Cluster &cluster,
                  int rank, std::vector<Event> *events, double &flops) {
  RankTime time;
  time.memoryPeakBytes = program.arena_bytes();
  // When each buffer's value is ready; inputs and parameters at 0.
  std::vector<double> ready(size_t(program.buffers_size()), 0.0);
  double streamFree[2] = {0, 0};
  for (int i = 0; i < program.instructions_size(); ++i) {
    const plan::Instruction &inst = program.instructions(i);
    // An all-slice moves nothing between ranks: a copy on the compute stream.
    bool comm = inst.has_collective() && inst.collective().kind() != plan::ALL_SLICE;
    double start = streamFree[comm];
    for (uint32_t in : inst.inputs())
      if (in < ready.size())
        start = std::max(start, ready[in]);
    double seconds = comm ? collectiveInstructionSeconds(plan.mesh(), inst, cluster)
                          : instructionSeconds(inst.cost(), cluster.device);
    double end = start + seconds;
    if (comm) {
      time.communication += seconds;
    } else {
      time.idle += start - streamFree[0];
      time.compute += seconds;
      time.byClass[inst.cost().op_class()] += seconds; // slot 0: free ops, 0 s
      flops += inst.cost().flops();
    }
    streamFree[comm] = end;
    for (uint32_t out : inst.outputs())
      if (out < ready.size())
        ready[out] = end;
    if (events)
      events->push_back({rank, i, comm, start, end});
  }
  time.end = std::max(streamFree[0], streamFree[1]);
  time.idle += time.end - streamFree[0]; // compute waiting for the last collectives
  return time;
}

} // namespace

Simulation simulate(const plan::Plan &plan, const Cluster &cluster, bool keepEvents) {
  // Ranks that run the same program have the same timeline (an SPMD plan's
  // collectives join ranks that reach them at the same time), so each
  // program is simulated once: a plan for 1024 devices costs one.
  int64_t devices = plan.program_of_rank_size() ? plan.program_of_rank_size() : plan.ranks_size();
  std::vector<int> timelineOf(size_t(plan.ranks_size()), -1);
  std::vector<RankTime> timelines;
  std::vector<double> programFlops;
  Simulation sim;
  for (int64_t r = 0; r < devices; ++r) {
    int program = plan.program_of_rank_size() ? int(plan.program_of_rank(int(r))) : int(r);
    if (program >= plan.ranks_size())
      continue;
    if (timelineOf[size_t(program)] < 0) {
      timelineOf[size_t(program)] = int(timelines.size());
      double flops = 0;
      timelines.push_back(timeline(plan, plan.ranks(program), cluster, int(r),
                                   keepEvents ? &sim.events : nullptr, flops));
      programFlops.push_back(flops);
    }
    int t = timelineOf[size_t(program)];
    sim.ranks.push_back(timelines[size_t(t)]);
    sim.flops += programFlops[size_t(t)];
    sim.stepSeconds = std::max(sim.stepSeconds, timelines[size_t(t)].end);
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
    int program = plan.program_of_rank_size() ? int(plan.program_of_rank(e.rank)) : e.rank;
    const plan::Instruction &inst = plan.ranks(program).instructions(e.instruction);
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
