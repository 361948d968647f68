//===- PlanSummary.cpp ----------------------------------------------------===//
#include "plan/PlanSummary.h"

#include "plan/CastCopies.h"
#include "plan/DType.h"
#include "plan/Replicas.h"
#include "plan/FormatBytes.h"
#include "plan/PipelineSchedule.h"
#include "plan/PlanPrinter.h"
#include "plan/Ranks.h"
#include "plan/ServerTensors.h"
#include "plan/Sharding.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <cstring>
#include <map>
#include <set>

namespace dtc::plan {

namespace {

/// A parameter's name split at its layer index, the first number between
/// dots: "h.12.attn.q.weight" -> {"h", 12, "attn.q.weight"}; index -1 when
/// it has none.
struct LayerName {
  std::string prefix, rest;
  int64_t index = -1;
};
LayerName layerName(const std::string &name) {
  size_t at = 0;
  while (at < name.size()) {
    size_t dot = name.find('.', at);
    size_t end = dot == std::string::npos ? name.size() : dot;
    bool number = end > at && end - at < 10 && dot != std::string::npos && at > 0 &&
                  std::all_of(name.begin() + long(at), name.begin() + long(end),
                              [](char c) { return c >= '0' && c <= '9'; });
    if (number)
      return {name.substr(0, at - 1), name.substr(end + 1), std::stoll(name.substr(at, end - at))};
    if (dot == std::string::npos)
      break;
    at = dot + 1;
  }
  return {"", name, -1};
}

/// "12 k", "1.5 M", "175 B": a count for people.
std::string countText(double n) {
  if (n >= 1e9)
    return fmt::format("{:.3g} B", n / 1e9);
  if (n >= 1e6)
    return fmt::format("{:.3g} M", n / 1e6);
  if (n >= 1e3)
    return fmt::format("{:.3g} k", n / 1e3);
  return fmt::format("{:.0f}", n);
}

/// "0-95", "0-3, 8, 10-11": sorted indices as ranges.
template <typename Int> std::string indexRanges(std::vector<Int> values) {
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  std::vector<std::string> parts;
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1)
      ++j;
    parts.push_back(j == i ? std::to_string(values[i])
                           : fmt::format("{}-{}", values[i], values[j]));
    i = j + 1;
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

bool training(const Plan &plan) {
  return plan.training().updates_size() > 0 || plan.training().pipeline().stages() > 1 ||
         plan.training().has_parameter_servers();
}

/// The rank whose arena is the largest (the compiler's figures).
const RankSummary *largestRank(const Plan &plan) {
  const RankSummary *largest = nullptr;
  for (const RankSummary &r : plan.decisions().ranks())
    if (!largest || r.peak_memory_bytes() > largest->peak_memory_bytes())
      largest = &r;
  return largest;
}

std::string quotedList(const std::vector<std::string> &items) {
  std::vector<std::string> parts;
  for (const std::string &item : items)
    parts.push_back(jsonString(item));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

} // namespace

std::string weightsText(const RankSummary &rank) {
  std::string text = "weights " + formatBytes(rank.weight_bytes());
  if (rank.weight_copy_bytes() > 0)
    text += " (" + formatBytes(rank.weight_copy_bytes()) + " of them bf16 copies)";
  return text;
}

std::string jsonString(const std::string &text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\')
      out += '\\', out += char(c);
    else if (c == '\n')
      out += "\\n";
    else if (c < 0x20)
      out += fmt::format("\\u{:04x}", c);
    else
      out += char(c);
  }
  return out + "\"";
}

PlanSummary summarizePlan(const Plan &plan) {
  PlanSummary summary;
  summary.plan = &plan;
  // Parameters: the model's weights (not optimizer state, accumulators or
  // bf16 copies), each once, with the stages that hold it.
  std::map<std::string, size_t> parameterOf;
  bool pipelined = plan.training().pipeline().stages() > 1;
  for (int r = 0; r < plan.ranks_size(); ++r)
    for (const Buffer &buffer : plan.ranks(r).buffers()) {
      if (!buffer.has_parameter() || buffer.parameter().zeros() || isCastCopy(buffer))
        continue;
      const std::string &name = buffer.parameter().initializer().empty()
                                    ? buffer.name()
                                    : buffer.parameter().initializer();
      auto [it, fresh] = parameterOf.try_emplace(name, summary.parameters.size());
      if (fresh) {
        ParameterSummary p;
        p.name = name;
        p.dtype = buffer.type().dtype();
        p.type = bufferType(plan, buffer);
        p.modelShape.assign(buffer.parameter().model_shape().begin(),
                            buffer.parameter().model_shape().end());
        if (!p.modelShape.empty()) // the model's, before the step padded it
          p.type += fmt::format(" (padded from [{}])", fmt::join(p.modelShape, ","));
        p.frozen = buffer.parameter().frozen();
        for (int d = 0; d < buffer.type().shape_size(); ++d) {
          std::vector<std::string> axes;
          int64_t parts = 1;
          if (d < buffer.sharding_size()) {
            parts = partsOf(plan, buffer.sharding(d));
            for (uint32_t a : buffer.sharding(d).mesh_axes())
              axes.push_back(axisName(plan, a));
          }
          p.shape.push_back(buffer.type().shape(d) * parts);
          p.split.push_back(std::move(axes));
        }
        summary.parameters.push_back(std::move(p));
      }
      std::vector<int> &stages = summary.parameters[it->second].stages;
      if (pipelined && std::find(stages.begin(), stages.end(), r) == stages.end())
        stages.push_back(r);
    }

  // Collectives and transfers a step, per program, by kind and axes; a
  // kind alike on programs in a row is one entry.
  int64_t micro = std::max<int64_t>(1, plan.training().micro_batches());
  for (int r = 0; r < plan.ranks_size(); ++r) {
    const RankProgram &rank = plan.ranks(r);
    struct Counts {
      int64_t count = 0, bytes = 0, messages = 0;
      bool operator==(const Counts &o) const {
        return count == o.count && bytes == o.bytes && messages == o.messages;
      }
    };
    std::map<std::pair<std::string, std::vector<std::string>>, Counts> kinds;
    for (int i = 0; i < rank.instructions_size(); ++i) {
      const Instruction &inst = rank.instructions(i);
      std::string kind;
      std::vector<std::string> axes;
      if (inst.has_collective()) {
        kind = describeInstruction(inst);
        kind = kind.substr(0, kind.find(' '));
        for (uint32_t a : inst.collective().mesh_axes())
          axes.push_back(inst.collective().has_coordinates() ? std::string("the stage's replicas")
                                                             : axisName(plan, a));
      } else if (inst.has_send() || inst.has_recv()) {
        kind = inst.has_send() ? "send" : "receive";
      } else {
        continue;
      }
      // A replicated stage's copies each run their share of the micro-batches.
      int64_t runs = (micro > 1 || pipelined) && uint32_t(i) < rank.accumulate_end()
                         ? micro / (pipelined ? stageReplicas(plan.training().pipeline(), r) : 1)
                         : 1;
      Counts &counts = kinds[{kind, axes}];
      counts.count += runs * std::max(1, inst.inputs_size()); // a bucket's members
      counts.messages += runs;
      counts.bytes += runs * int64_t(inst.cost().bytes());
    }
    for (const auto &[key, counts] : kinds) {
      auto same = std::find_if(summary.communication.begin(), summary.communication.end(),
                               [&](const CommunicationSummary &c) {
                                 return c.programs.back() == r - 1 && c.kind == key.first &&
                                        c.axes == key.second &&
                                        Counts{c.count, c.bytes, c.messages} == counts;
                               });
      if (same != summary.communication.end())
        same->programs.push_back(r);
      else
        summary.communication.push_back(
            {{r}, key.first, key.second, counts.count, counts.bytes, counts.messages});
    }
  }
  return summary;
}

std::string summaryText(const PlanSummary &summary) {
  const Plan &plan = *summary.plan;
  std::string out = planHeader(plan);
  auto line = [&](const std::string &text) { out += text + "\n"; };
  const Training &training_ = plan.training();
  const Pipeline &pipeline = training_.pipeline();
  if (training(plan))
    line(fmt::format("optimizer: {} (learning rate {:g}{}), loss {}, precision {}",
                     training_.optimizer(), training_.learning_rate(),
                     training_.schedule().empty() || training_.schedule() == "constant"
                         ? ""
                         : ", " + training_.schedule(),
                     training_.loss(),
                     training_.precision().empty() ? "fp32" : training_.precision()));

  // The parameters, the layers that repeat collapsed: one row per name
  // within a layer and type, under its layer prefix with the layers it
  // covers ("h.{0-95}: 96 layers"; pipelined, which stage holds which).
  struct Row {
    std::string name, type;
    std::vector<int64_t> layers;
    std::set<int> stages;
  };
  struct Group { // a layer prefix ("h"), or "" for a name without layers
    std::string prefix;
    std::vector<Row> rows;
    std::map<std::pair<std::string, std::string>, size_t> rowOf;
    std::vector<int64_t> layers;
    std::map<int, std::vector<int64_t>> stageLayers;
  };
  std::vector<Group> groups;
  std::map<std::string, size_t> groupOf;
  double values = 0;
  int split = 0, frozen = 0;
  for (const ParameterSummary &p : summary.parameters) {
    double n = 1;
    for (int64_t d : p.shape)
      n *= double(d);
    values += n;
    split += std::any_of(p.split.begin(), p.split.end(), [](const auto &a) { return !a.empty(); });
    frozen += p.frozen;
    LayerName layer = layerName(p.name);
    std::string key = layer.index < 0 ? "\n" + p.name : layer.prefix;
    auto [g, freshGroup] = groupOf.try_emplace(key, groups.size());
    if (freshGroup)
      groups.push_back({layer.index < 0 ? "" : layer.prefix, {}, {}, {}, {}});
    Group &group = groups[g->second];
    std::string type = p.type + (p.frozen ? " frozen" : "");
    auto [it, fresh] = group.rowOf.try_emplace({layer.rest, type}, group.rows.size());
    if (fresh)
      group.rows.push_back({layer.rest, type, {}, {}});
    Row &row = group.rows[it->second];
    row.stages.insert(p.stages.begin(), p.stages.end());
    if (layer.index >= 0) {
      row.layers.push_back(layer.index);
      group.layers.push_back(layer.index);
      for (int stage : p.stages)
        group.stageLayers[stage].push_back(layer.index);
    }
  }
  line("");
  line(fmt::format("parameters: {} tensors, {} values{}{}", summary.parameters.size(),
                   countText(values), split ? fmt::format(", {} split over the mesh", split) : "",
                   frozen ? fmt::format(", {} frozen (not trained)", frozen) : ""));
  size_t width = 0;
  for (const Group &group : groups)
    for (const Row &row : group.rows)
      width = std::max(width, row.name.size() + (group.prefix.empty() ? 0 : 2));
  width = std::min<size_t>(width, 40);
  auto rowLine = [&](const Row &row, const std::string &indent, const std::string &extra) {
    std::string where = extra;
    // Pipelined: the stages holding it, unless every stage does.
    if (!row.stages.empty() && int64_t(row.stages.size()) < int64_t(pipeline.stages()))
      where += (where.empty() ? "" : "; ") +
               fmt::format("stage {}", fmt::join(row.stages, ","));
    std::string text = fmt::format("{}{:<{}} {:<24} {}", indent, row.name,
                                   width + 2 - indent.size(), row.type, where);
    text.erase(text.find_last_not_of(' ') + 1);
    line(text);
  };
  for (const Group &group : groups) {
    if (group.prefix.empty()) {
      for (const Row &row : group.rows)
        rowLine(row, "  ", "");
      continue;
    }
    std::string all = indexRanges(group.layers);
    size_t count = std::set<int64_t>(group.layers.begin(), group.layers.end()).size();
    std::vector<std::string> stages;
    for (const auto &[stage, layers] : group.stageLayers)
      stages.push_back(fmt::format("stage {}: {}", stage, indexRanges(layers)));
    line(fmt::format("  {}.{{{}}}: {} layer{}{}", group.prefix, all, count, count == 1 ? "" : "s",
                     stages.empty() ? "" : fmt::format(" ({})", fmt::join(stages, "; "))));
    for (const Row &row : group.rows) {
      std::string layers = indexRanges(row.layers);
      rowLine(row, "    ", layers == all ? "" : "layers " + layers);
    }
  }

  // Communication: a line per run of programs doing the same.
  line("");
  line("communication per step (count, bytes a rank moves):");
  std::vector<std::pair<std::vector<int>, std::vector<std::string>>> lines;
  for (int r = 0; r < plan.ranks_size(); ++r) {
    std::vector<std::string> parts;
    for (const CommunicationSummary &c : summary.communication)
      if (std::find(c.programs.begin(), c.programs.end(), r) != c.programs.end())
        parts.push_back(fmt::format(
            "{}{} x{}{} ({})", c.kind,
            c.axes.empty() ? "" : fmt::format(" over {}", fmt::join(c.axes, ",")), c.count,
            c.messages < c.count
                ? fmt::format(" in {} {}", c.messages, c.messages == 1 ? "message" : "messages")
                : "",
            formatBytes(c.bytes)));
    std::sort(parts.begin(), parts.end());
    if (!lines.empty() && lines.back().second == parts)
      lines.back().first.push_back(r);
    else
      lines.push_back({{r}, parts});
  }
  const char *what = pipeline.stages() > 1 ? "stage" : "program";
  for (const auto &[programs, parts] : lines) {
    bool servers = plan.training().has_parameter_servers();
    auto server = [](int program) { return program - 1; };
    std::string who =
        plan.ranks_size() == 1 ? "every rank"
        : servers && programs.front() == 0
            ? (programs.size() == 1 ? std::string("workers")
                                    : fmt::format("workers and servers 0-{}",
                                                  server(programs.back())))
        : servers ? (programs.size() == 1 ? fmt::format("server {}", server(programs.front()))
                                          : fmt::format("servers {}-{}", server(programs.front()),
                                                        server(programs.back())))
        : programs.size() == 1
                          ? fmt::format("{} {}", what, programs.front())
                          : fmt::format("{}s {}-{}", what, programs.front(), programs.back());
    line(fmt::format("  {}: {}", who,
                     parts.empty() ? "none" : fmt::format("{}", fmt::join(parts, ", "))));
  }
  // Local SGD and federated averaging: the runtime's average of the
  // replicas, outside the step.
  if (const Training &training = plan.training(); training.has_parameter_servers()) {
    // Parameter servers: the pushes and pulls, outside the programs.
    const ParameterServers &ps = training.parameter_servers();
    std::vector<int64_t> push(ps.servers(), 0), pull(ps.servers(), 0);
    for (const ServerTensor &t : ps.tensors()) {
      push[t.server()] += expectedPushBytes(plan, t);
      pull[t.server()] += pulledBytes(plan, t);
    }
    int64_t workers = meshDevices(plan.mesh());
    size_t busiest = size_t(std::max_element(push.begin(), push.end()) - push.begin());
    int64_t pushed = std::accumulate(push.begin(), push.end(), int64_t(0));
    int64_t pulled = std::accumulate(pull.begin(), pull.end(), int64_t(0));
    line(fmt::format("  parameter servers: each of {} workers pushes its gradients ({}) to {} "
                     "server{} and pulls the weights ({}); the busiest, server {}, receives {} "
                     "x {} a step; {}",
                     workers, formatBytes(pushed), ps.servers(), ps.servers() == 1 ? "" : "s",
                     formatBytes(pulled), busiest, workers, formatBytes(push[busiest]),
                     ps.staleness() == 0
                         ? std::string("synchronous")
                         : fmt::format("asynchronous, staleness {}", ps.staleness())));
  } else if (const Training &training = plan.training(); !training.sync().empty()) {
    int64_t weights = plan.ranks_size() > 0 ? averagedWeightBytes(plan, plan.ranks(0)) : 0;
    std::vector<std::string> axes;
    for (uint32_t a : training.data_axes())
      if (int(a) < plan.mesh().axes_size())
        axes.push_back(plan.mesh().axes(int(a)).name());
    if (training.sync() == "federated")
      line(fmt::format("  federated averaging: the weights all-reduced over {} after each round "
                       "({})",
                       fmt::join(axes, ","), formatBytes(weights)));
    else
      line(fmt::format("  local SGD: the weights all-reduced over {} every {} steps ({}, {} a "
                       "step)",
                       fmt::join(axes, ","), training.average_every(), formatBytes(weights),
                       formatBytes(weights / std::max<int64_t>(1, training.average_every()))));
  }

  // Memory: the compiler's figures, the largest rank's.
  line("");
  if (const RankSummary *largest = largestRank(plan)) {
    int64_t other = largest->peak_memory_bytes() - largest->parameter_bytes() -
                    largest->activation_bytes();
    int64_t loadTime = largest->parameter_bytes() - largest->weight_bytes() -
                       largest->optimizer_state_bytes();
    std::string parts = weightsText(*largest);
    if (largest->optimizer_state_bytes())
      parts += " + optimizer state " + formatBytes(largest->optimizer_state_bytes());
    if (loadTime > 0)
      parts += " + load-time values " + formatBytes(loadTime);
    if (largest->activation_bytes())
      parts += " + activations kept for backward " + formatBytes(largest->activation_bytes());
    parts += std::string(training(plan) ? " + gradients and workspace "
                                        : " + activations and workspace ") +
             formatBytes(std::max<int64_t>(0, other));
    line(fmt::format("memory: peak {} per rank{} = {}", formatBytes(largest->peak_memory_bytes()),
                     plan.decisions().ranks_size() > 1
                         ? fmt::format(" (rank {}, the largest)", largest->rank())
                         : "",
                     parts));
  }
  if (const std::optional<Prediction> &p = summary.predicted)
    line(fmt::format("predicted step: {} on {} (per rank: compute {}, communication {}, idle {}; "
                     "dtc simulate for throughput and the timeline)",
                     formatSeconds(p->stepSeconds), p->cluster, formatSeconds(p->computeSeconds),
                     formatSeconds(p->communicationSeconds), formatSeconds(p->idleSeconds)));
  if (const std::optional<Prediction> &p = summary.predicted; p && p->allReduceStepSeconds > 0)
    line(fmt::format("  with parameter servers; the same gradients all-reduced over the workers "
                     "would take {} a step: {}",
                     formatSeconds(p->allReduceStepSeconds),
                     p->stepSeconds < p->allReduceStepSeconds
                         ? "parameter servers are faster here"
                         : "all-reduce is faster here (parameter servers need more servers' "
                           "links than workers' to win)"));

  line("");
  line("decisions:");
  for (const std::string &note : plan.decisions().notes())
    line("  " + note);
  line("");
  line("(dtc plan --full lists every rank's instructions and buffers; --json all of this for "
       "tools)");
  return out;
}

std::string explainText(const Plan &plan) {
  // The notes that say what was compared and why the plan won, in the
  // compiler's order.
  const char *kinds[] = {"mesh:",           "alternatives", "splits of the largest ops",
                         "pipeline:",       "micro-batches:", "recompute:",
                         "memory: the search", "search:"};
  std::string out = "why this plan (" + plan.model() + "):\n";
  int shown = 0;
  for (const std::string &note : plan.decisions().notes()) {
    std::string text = note;
    // "stage 1: ..." notes repeat a stage's own; the plan's are enough.
    if (!std::any_of(std::begin(kinds), std::end(kinds),
                     [&](const char *k) { return text.rfind(k, 0) == 0; }))
      continue;
    ++shown;
    size_t colon = text.find(": ");
    bool alternatives = text.rfind("alternatives", 0) == 0;
    if ((alternatives || text.rfind("splits of", 0) == 0) && colon != std::string::npos) {
      // One alternative a line (the splits: one op a line).
      const char *separator = alternatives ? "; " : " | ";
      out += "  " + text.substr(0, colon + 1) + "\n";
      std::string rest = text.substr(colon + 2);
      for (size_t at = 0; at <= rest.size();) {
        size_t end = rest.find(separator, at);
        out += "    " + rest.substr(at, end == std::string::npos ? std::string::npos : end - at) +
               "\n";
        if (end == std::string::npos)
          break;
        at = end + std::strlen(separator);
      }
      continue;
    }
    out += "  " + text + "\n";
  }
  if (!shown)
    out += "  nothing was compared: every choice was given (or the plan is for one device)\n";
  return out;
}

std::string summaryJson(const PlanSummary &summary) {
  const Plan &plan = *summary.plan;
  std::vector<std::string> fields;
  auto field = [&](const std::string &key, const std::string &value) {
    fields.push_back(fmt::format("  {}: {}", jsonString(key), value));
  };
  field("schema", jsonString("dtc-plan-summary"));
  field("schema_version", std::to_string(kSummarySchemaVersion));
  field("plan_format", std::to_string(plan.format_version()));
  field("producer", jsonString(plan.producer()));
  field("model", jsonString(plan.model()));
  std::vector<std::string> axes;
  for (const MeshAxis &axis : plan.mesh().axes())
    axes.push_back(fmt::format("{{\"name\": {}, \"size\": {}}}", jsonString(axis.name()), axis.size()));
  field("mesh", fmt::format("[{}]", fmt::join(axes, ", ")));
  field("ranks", std::to_string(planRanks(plan)));
  const Training &t = plan.training();
  if (training(plan)) {
    std::string pipeline = "null";
    if (t.pipeline().stages() > 1)
      pipeline = fmt::format(
          "{{\"stages\": {}, \"schedule\": {}, \"virtual_stages\": {}, \"replicas\": [{}]}}",
          t.pipeline().stages(), jsonString(scheduleName(t.pipeline().schedule())),
          std::max<uint32_t>(1, t.pipeline().virtual_stages()), [&] {
            std::vector<int64_t> replicas;
            for (int64_t s = 0; s < int64_t(t.pipeline().stages()); ++s)
              replicas.push_back(stageReplicas(t.pipeline(), s));
            return fmt::format("{}", fmt::join(replicas, ", "));
          }());
    // Parameter servers: ranks past the mesh's, and what a worker pushes.
    std::string servers = "null";
    if (t.has_parameter_servers()) {
      int64_t pushed = 0;
      for (const ServerTensor &s : t.parameter_servers().tensors())
        pushed += expectedPushBytes(plan, s);
      servers = fmt::format("{{\"servers\": {}, \"staleness\": {}, \"push_bytes\": {}}}",
                            t.parameter_servers().servers(), t.parameter_servers().staleness(),
                            pushed);
    }
    field("training",
          fmt::format("{{\"optimizer\": {}, \"learning_rate\": {:.9g}, \"loss\": {}, "
                      "\"precision\": {}, \"micro_batches\": {}, \"pipeline\": {}, "
                      "\"parameter_servers\": {}}}",
                      jsonString(t.optimizer()), t.learning_rate(), jsonString(t.loss()),
                      jsonString(t.precision().empty() ? "fp32" : t.precision()),
                      std::max<int64_t>(1, t.micro_batches()), pipeline, servers));
  } else {
    field("training", "null");
  }
  std::vector<std::string> parameters;
  for (const ParameterSummary &p : summary.parameters) {
    std::vector<std::string> split;
    for (const std::vector<std::string> &dim : p.split)
      split.push_back(quotedList(dim));
    std::string padded = p.modelShape.empty()
                             ? ""
                             : fmt::format(", \"model_shape\": [{}]", fmt::join(p.modelShape, ", "));
    parameters.push_back(fmt::format(
        "    {{\"name\": {}, \"dtype\": {}, \"shape\": [{}]{}, \"split\": [{}], \"stages\": [{}], "
        "\"frozen\": {}}}",
        jsonString(p.name), jsonString(dtypeName(p.dtype)), fmt::join(p.shape, ", "), padded,
        fmt::join(split, ", "), fmt::join(p.stages, ", "), p.frozen ? "true" : "false"));
  }
  field("parameters", fmt::format("[\n{}\n  ]", fmt::join(parameters, ",\n")));
  std::vector<std::string> communication;
  for (const CommunicationSummary &c : summary.communication)
    communication.push_back(fmt::format(
        "    {{\"programs\": [{}], \"kind\": {}, \"axes\": {}, \"count\": {}, \"messages\": {}, "
        "\"bytes\": {}}}",
        fmt::join(c.programs, ", "), jsonString(c.kind), quotedList(c.axes), c.count, c.messages,
        c.bytes));
  field("communication", fmt::format("[\n{}\n  ]", fmt::join(communication, ",\n")));
  std::vector<std::string> memory;
  for (const RankSummary &r : plan.decisions().ranks())
    memory.push_back(fmt::format(
        "    {{\"rank\": {}, \"peak_bytes\": {}, \"parameter_bytes\": {}, \"weight_bytes\": {}, "
        "\"weight_copy_bytes\": {}, \"optimizer_state_bytes\": {}, \"activation_bytes\": {}}}",
        r.rank(), r.peak_memory_bytes(), r.parameter_bytes(), r.weight_bytes(),
        r.weight_copy_bytes(), r.optimizer_state_bytes(), r.activation_bytes()));
  field("memory", fmt::format("[\n{}\n  ]", fmt::join(memory, ",\n")));
  if (const std::optional<Prediction> &p = summary.predicted)
    field("predicted", fmt::format("{{\"cluster\": {}, \"step_seconds\": {:.9g}, "
                                   "\"compute_seconds\": {:.9g}, \"communication_seconds\": {:.9g}, "
                                   "\"idle_seconds\": {:.9g}}}",
                                   jsonString(p->cluster), p->stepSeconds, p->computeSeconds,
                                   p->communicationSeconds, p->idleSeconds));
  else
    field("predicted", "null");
  std::vector<std::string> notes;
  for (const std::string &note : plan.decisions().notes())
    notes.push_back("    " + jsonString(note));
  field("decisions", fmt::format("[\n{}\n  ]", fmt::join(notes, ",\n")));
  return fmt::format("{{\n{}\n}}\n", fmt::join(fields, ",\n"));
}

} // namespace dtc::plan
