//===- PlanPrinter.h - a plan as text for people ----------------*- C++ -*-===//
#ifndef DTC_PLAN_PLANPRINTER_H
#define DTC_PLAN_PLANPRINTER_H

#include "plan/FormatBytes.h"

#include "plan.pb.h"

#include <string>

namespace dtc::plan {

/// The plan as text: header, inputs and outputs, the decisions, and each
/// rank's program and buffers.
std::string printPlan(const plan::Plan &plan);

/// An instruction's op and attributes, e.g. "matmul transpose_rhs".
std::string describeInstruction(const plan::Instruction &inst);

} // namespace dtc::plan

#endif // DTC_PLAN_PLANPRINTER_H
