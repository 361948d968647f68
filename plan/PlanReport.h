//===- PlanReport.h - a plan as one self-contained web page ----*- C++ -*-===//
//
// `dtc plan --html FILE`: the summary (PlanSummary.h), a memory bar per
// rank against the device's capacity, the simulated step's timeline per
// rank and stream, the parameters in a table a filter narrows, the
// communication and the decisions. One file: its data, script and styles
// inline, nothing fetched, so it opens anywhere (docs/plan-summary.md).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLAN_PLANREPORT_H
#define DTC_PLAN_PLANREPORT_H

#include "plan/PlanSummary.h"

#include <string>
#include <vector>

namespace dtc::plan {

/// The simulated step (the caller simulates: this library does not link
/// the cost model): a lane per rank and stream, its spans.
struct Timeline {
  struct Span {
    int lane = 0;
    int kind = 0; // 0 compute, 1 collective, 2 pipeline transfer
    double start = 0, end = 0;
    std::string name;
  };
  std::vector<std::string> lanes;
  std::vector<Span> spans;
  size_t leftOut = 0; // the shortest spans, beyond what a page draws
};

/// The page. `capacityBytes`: the memory a rank may use (0: unknown).
std::string reportHtml(const PlanSummary &summary, const Timeline &timeline,
                       double capacityBytes);

} // namespace dtc::plan

#endif // DTC_PLAN_PLANREPORT_H
