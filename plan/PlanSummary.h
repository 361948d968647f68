//===- PlanSummary.h - what a plan decided, on a screen or for tools -*- C++ -*-===//
//
// `dtc plan` shows a plan at any size by summarising it: the parameters
// (the model's weights) with how each is split and, pipelined, which stage
// holds it; the communication of a step by program and kind; memory per
// rank; the compiler's decisions. summarizePlan gathers that once;
// summaryText collapses the layers that repeat for people (one row per name
// within a layer, "h.{0-95}"), summaryJson writes all of it for tools
// (docs/plan-summary.md: the schema).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLAN_PLANSUMMARY_H
#define DTC_PLAN_PLANSUMMARY_H

#include "plan.pb.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtc::plan {

/// "weights 1.2 GiB" of a rank's memory, with "(311 MiB of them bf16
/// copies)" where the step keeps some: `dtc plan`'s and `dtc simulate`'s.
std::string weightsText(const RankSummary &rank);

/// The JSON schema's version: a tool reading another refuses it.
inline constexpr int kSummarySchemaVersion = 1;

struct ParameterSummary {
  std::string name;                           // the ONNX initializer
  DType dtype = F32;
  std::vector<int64_t> shape;                 // the whole tensor's
  std::vector<int64_t> modelShape;            // the model's, where the step pads it (else empty)
  std::vector<std::vector<std::string>> split; // per dim: the mesh axes cutting it
  std::string type;                           // "f32[1024/tp,4096]"
  std::vector<int> stages;                    // pipelined: the stages holding it
  bool frozen = false;
};

struct CommunicationSummary {
  std::vector<int> programs; // the programs (stages, ranks) doing the same
  std::string kind;          // "all_reduce", "send", ...
  std::vector<std::string> axes;
  int64_t count = 0, bytes = 0; // per step, per rank
  int64_t messages = 0;         // per step, per rank: fewer than `count` where buckets
};

/// The step simulated on a cluster (the caller simulates: this library
/// does not link the cost model).
struct Prediction {
  std::string cluster;
  double stepSeconds = 0, computeSeconds = 0, communicationSeconds = 0, idleSeconds = 0;
  /// Parameter servers: the step were the same gradients all-reduced over
  /// the workers instead (0: not a parameter-server plan).
  double allReduceStepSeconds = 0;
};

struct PlanSummary {
  const Plan *plan = nullptr;
  std::vector<ParameterSummary> parameters; // in the order the programs list them
  std::vector<CommunicationSummary> communication;
  std::optional<Prediction> predicted;
};

PlanSummary summarizePlan(const Plan &plan);

/// For people: header, optimizer, the parameters with repeated layers
/// collapsed, communication, memory, the prediction, the decisions.
std::string summaryText(const PlanSummary &summary);

/// For tools: the same, every parameter listed, as one JSON object.
std::string summaryJson(const PlanSummary &summary);

/// Why the plan is what it is: the compiler's decisions that compared
/// choices (mesh shapes and roles, pipeline stage counts and schedules,
/// micro-batches, recomputation, memory), each alternative on a line.
std::string explainText(const Plan &plan);

/// `text` as a JSON string, quoted and escaped.
std::string jsonString(const std::string &text);

} // namespace dtc::plan

#endif // DTC_PLAN_PLANSUMMARY_H
