//===- PlanPrinter.h - a plan as text for people ----------------*- C++ -*-===//
#ifndef DTC_TOOLS_DTC_PLANPRINTER_H
#define DTC_TOOLS_DTC_PLANPRINTER_H

#include "plan.pb.h"

#include <string>

namespace dtc {

/// The plan as text: header, inputs and outputs, the decisions, and each
/// rank's program and buffers.
std::string printPlan(const plan::Plan &plan);

/// "12.3 MiB".
std::string formatBytes(int64_t bytes);

} // namespace dtc

#endif // DTC_TOOLS_DTC_PLANPRINTER_H
