//===- PlanPrinter.h - a plan as text for people ----------------*- C++ -*-===//
#ifndef DTC_PLAN_PLANPRINTER_H
#define DTC_PLAN_PLANPRINTER_H

#include "plan/FormatBytes.h"

#include "plan.pb.h"

#include <string>
#include <vector>

namespace dtc::plan {

/// The plan as text: header, inputs and outputs, the decisions, and each
/// rank's program and buffers.
std::string printPlan(const plan::Plan &plan);

/// The plan on a screen or two: header, training, the parameters with
/// repeated layers collapsed and their splits, communication per step by
/// kind, memory per rank, `predicted` (lines the caller adds: a
/// simulation's step time), and the compiler's decisions.
std::string summarizePlan(const plan::Plan &plan, const std::vector<std::string> &predicted = {});

/// An instruction's op and attributes, e.g. "matmul transpose_rhs".
std::string describeInstruction(const plan::Instruction &inst);

} // namespace dtc::plan

#endif // DTC_PLAN_PLANPRINTER_H
