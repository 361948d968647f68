//===- Simulator.h - a plan's step, event by event, on a cluster -*- C++ -*-===//
//
// Each rank's program runs on its device: an instruction starts when its
// stream is free and the instructions that wrote its inputs have finished,
// and lasts what the cost model says. Kernels run on the compute stream,
// collectives and transfers on the communication stream (timed on the link
// their mesh group crosses), so their overlap comes out of the timeline
// rather than a formula; a device without such a stream (dtc's CPU runtime)
// runs them inline on the compute stream. Ranks that run the same program
// are simulated once: in an SPMD plan they reach each collective together.
// Ranks whose programs differ (pipeline stages, unequal shares) each get a
// timeline, joined at their collectives: a group's collective starts when
// its last rank reaches it, so waiting (a pipeline's bubbles) comes out of
// the timelines. Every meeting of ranks also waits for the slowest one's
// jitter (Device::jitter), which a timeline without noise cannot show.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COST_SIMULATOR_H
#define DTC_COST_SIMULATOR_H

#include "cost/Cluster.h"

#include <functional>
#include <string>
#include <vector>

namespace dtc::cost {

struct RankTime {
  double compute = 0, communication = 0, idle = 0; // seconds
  double end = 0;                                  // when its last instruction finishes
  int64_t memoryPeakBytes = 0;
  double byClass[kOpClassSlots] = {};              // compute seconds per op class
};

/// One instruction on the timeline.
struct Event {
  int rank = 0, instruction = 0;
  bool communication = false;
  int stream = 0; // 0 compute, 1 collectives, 2 pipeline transfers
  double start = 0, end = 0;
};

struct Simulation {
  double stepSeconds = 0;
  double flops = 0; // all ranks' instructions
  std::vector<RankTime> ranks;
  // Local SGD (Training.sync "local"): one average of the replicas, whose
  // 1/average_every share stepSeconds and each rank's communication hold.
  double averageSeconds = 0;
  // Parameter servers (Training.parameter_servers): a worker's own step,
  // the exchange (ServerExchange.h), the slowest server's update; and what
  // an all-reduce of the same gradients over the workers would take.
  bool parameterServers = false;
  double workerSeconds = 0, pushSeconds = 0, pullSeconds = 0, updateSeconds = 0;
  double allReduceSeconds = 0;
  std::string serverBottleneck;
  std::vector<Event> events; // when asked for
  // Why the plan cannot be simulated (a rank without a program, a
  // collective some rank of its group never reaches); "" when it can.
  std::string error;
};


/// Simulates one step of `plan` (its prologue runs once at load and is not
/// counted). The plan must have no more ranks than the cluster has devices
/// (checked by the caller). Ranks alike (the same program, transfers along
/// mesh axes) share the timeline of the lowest of them, whose events stand
/// for theirs, unless `everyRank` (the same figures, slower).
Simulation simulate(const plan::Plan &plan, const Cluster &cluster, bool keepEvents,
                    bool everyRank = false);

/// The timeline as Chrome trace JSON (chrome://tracing, ui.perfetto.dev):
/// a process per simulated rank, a thread per stream, one slice per
/// instruction, labelled by `name`.
std::string chromeTrace(const plan::Plan &plan, const Simulation &simulation,
                        const std::function<std::string(const plan::Instruction &)> &name);

} // namespace dtc::cost

#endif // DTC_COST_SIMULATOR_H
