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

/// The lines every view of a plan starts with: format, model, mesh,
/// micro-batches and pipeline stages.
std::string planHeader(const plan::Plan &plan);

/// A buffer's type; a split one's as the whole tensor over the mesh axes
/// that split each dim, "f32[1024/tp,4096]", "f32[8/dp,128,768/(dp,tp)]".
std::string bufferType(const plan::Plan &plan, const plan::Buffer &buffer);

/// Mesh axis `axis`'s name ("axis3" past the mesh's axes).
std::string axisName(const plan::Plan &plan, uint32_t axis);

/// How many parts the mesh axes of `dim` cut it into.
int64_t partsOf(const plan::Plan &plan, const plan::DimSharding &dim);

/// An instruction's op and attributes, e.g. "matmul transpose_rhs".
/// `pipeline`: a transfer's peer named by its stage (a replicated stage's
/// coordinates are not stage numbers).
std::string describeInstruction(const plan::Instruction &inst,
                                const plan::Pipeline *pipeline = nullptr);

} // namespace dtc::plan

#endif // DTC_PLAN_PLANPRINTER_H
