//===- TraceCompare.h - a simulated step against a measured one -*- C++ -*-===//
//
// `dtc simulate PLAN --compare-trace RUN.json`: RUN.json is `dtc run
// --trace`'s timeline of the same plan (each instruction once, its median
// time); the simulation is set beside it instruction by instruction and
// summed per op class, so a person sees where the cost model is off and by
// how much (docs/cluster.md: calibrating a cluster file).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COST_TRACECOMPARE_H
#define DTC_COST_TRACECOMPARE_H

#include "cost/Simulator.h"

#include <string>

namespace dtc::cost {

/// The comparison as text, or "" with `error` (not a trace of this plan).
/// `simulation` must carry its events (simulate(..., trace = true)).
std::string compareTraces(const plan::Plan &plan, const Simulation &simulation,
                          const std::string &measuredJson, std::string &error);

} // namespace dtc::cost

#endif // DTC_COST_TRACECOMPARE_H
