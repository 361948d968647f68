//===- PlanPrinter.cpp ----------------------------------------------------===//
#include "plan/PlanPrinter.h"
#include "plan/PlanLoader.h"
#include "plan/PipelineSchedule.h"

#include "plan/DType.h"
#include "plan/FormatBytes.h"
#include "plan/Ranks.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <fmt/ranges.h>

#include <functional>

namespace dtc::plan {
namespace {

const char *exprName(plan::ExprOp op) {
  switch (op) {
  case plan::ADD: return "add";
  case plan::SUB: return "sub";
  case plan::MUL: return "mul";
  case plan::DIV: return "div";
  case plan::POW: return "pow";
  case plan::MAX: return "max";
  case plan::MIN: return "min";
  case plan::NEG: return "neg";
  case plan::ABS: return "abs";
  case plan::EXP: return "exp";
  case plan::LOG: return "log";
  case plan::SQRT: return "sqrt";
  case plan::RECIPROCAL: return "reciprocal";
  case plan::TANH: return "tanh";
  case plan::ERF: return "erf";
  case plan::RELU: return "relu";
  case plan::SIGMOID: return "sigmoid";
  case plan::GELU: return "gelu";
  case plan::GELU_TANH: return "gelu_tanh";
  case plan::CLIP: return "clip";
  case plan::CAST: return "cast";
  case plan::WHERE: return "where";
  case plan::EQUAL: return "equal";
  case plan::LESS: return "less";
  case plan::LESS_EQUAL: return "less_equal";
  case plan::GREATER: return "greater";
  case plan::GREATER_EQUAL: return "greater_equal";
  case plan::NOT: return "not";
  case plan::AND: return "and";
  case plan::OR: return "or";
  case plan::XOR: return "xor";
  case plan::SIN: return "sin";
  case plan::COS: return "cos";
  default: return "?";
  }
}

std::string ints(const google::protobuf::RepeatedField<int64_t> &values) {
  return fmt::format("[{}]", fmt::join(values.begin(), values.end(), ","));
}

/// The expression as nested calls, add(in0, mul(in1, 0.5)); a computed
/// node read more than once is printed once as a binding, "t2 = ...; ".
std::string formatExpr(const plan::Elementwise &expr) {
  std::vector<int> uses(expr.nodes_size(), 0);
  for (const auto &n : expr.nodes())
    if (n.op() != plan::INPUT)
      for (uint32_t a : n.args())
        ++uses[a];
  auto shared = [&](int i) {
    auto op = expr.nodes(i).op();
    return uses[i] > 1 && op != plan::INPUT && op != plan::CONSTANT;
  };
  std::function<std::string(int, bool)> format = [&](int node, bool top) -> std::string {
    const plan::ExprNode &n = expr.nodes(node);
    if (n.op() == plan::INPUT)
      return fmt::format("in{}", n.args(0));
    if (n.op() == plan::CONSTANT)
      return fmt::format("{:g}", n.value());
    if (!top && shared(node))
      return fmt::format("t{}", node);
    std::vector<std::string> args;
    for (uint32_t a : n.args())
      args.push_back(format(a, false));
    if (n.op() == plan::CLIP)
      args.push_back(fmt::format("{:g}, {:g}", n.value(), n.value2()));
    if (n.op() == plan::CAST)
      return fmt::format("cast<{}>({})", plan::dtypeName(n.dtype()), fmt::join(args, ", "));
    return fmt::format("{}({})", exprName(n.op()), fmt::join(args, ", "));
  };
  // Several outputs: each named tN, listed after the body as (tA, tB).
  std::vector<int> outputs(expr.outputs().begin(), expr.outputs().end());
  for (int output : outputs)
    uses[output] += 2;
  std::string text;
  int last = outputs.empty() ? expr.nodes_size() - 1 : *std::max_element(outputs.begin(),
                                                                          outputs.end());
  for (int i = 0; i < last + int(!outputs.empty()); ++i)
    if (shared(i))
      text += fmt::format("t{} = {}; ", i, format(i, true));
  if (outputs.empty())
    return text + format(last, true);
  std::vector<std::string> names;
  for (int output : outputs)
    names.push_back(format(output, false));
  return text + fmt::format("({})", fmt::join(names, ", "));
}

} // namespace

std::string describeInstruction(const plan::Instruction &inst, const plan::Pipeline *pipeline) {
  switch (inst.op_case()) {
  case plan::Instruction::kMatmul: {
    std::string s = "matmul";
    if (inst.matmul().transpose_lhs()) s += " transpose_lhs";
    if (inst.matmul().transpose_rhs()) s += " transpose_rhs";
    if (inst.matmul().bias()) s += " +bias";
    if (inst.matmul().activation() == plan::ACTIVATION_RELU) s += " relu";
    if (inst.matmul().activation() == plan::ACTIVATION_GELU_TANH) s += " gelu_tanh";
    if (inst.matmul().keep_preactivation()) s += " +preactivation";
    if (inst.matmul().addend()) s += " +addend";
    if (inst.matmul().bias_gradient()) s += " +bias_gradient";
    if (inst.matmul().gelu_gradient()) s += " *gelu_derivative";
    return s;
  }
  case plan::Instruction::kElementwise:
    return "elementwise " + formatExpr(inst.elementwise());
  case plan::Instruction::kSoftmax:
    return fmt::format("{} axis={}", inst.softmax().log() ? "log_softmax" : "softmax",
                       inst.softmax().axis());
  case plan::Instruction::kLayerNorm:
    return fmt::format("{} axis={} eps={:g}", inst.layer_norm().rms() ? "rms_norm" : "layer_norm",
                       inst.layer_norm().axis(), inst.layer_norm().epsilon());
  case plan::Instruction::kLayerNormBackward: {
    const plan::LayerNorm &ln = inst.layer_norm_backward();
    return fmt::format("{} axis={} eps={:g}{}{}",
                       ln.rms() ? "rms_norm_backward" : "layer_norm_backward", ln.axis(),
                       ln.epsilon(), ln.scale_gradient() ? " +scale_gradient" : "",
                       ln.bias_gradient() ? " +bias_gradient" : "");
  }
  case plan::Instruction::kCrossEntropy:
    return inst.cross_entropy().gradient() ? "cross_entropy +gradient" : "cross_entropy";
  case plan::Instruction::kBatchNorm:
    return fmt::format("batch_norm eps={:g}", inst.batch_norm().epsilon());
  case plan::Instruction::kReduce: {
    static const char *kinds[] = {"?", "sum", "mean", "max", "min"};
    int kind = inst.reduce().kind();
    return fmt::format("reduce_{} axes={}", kinds[kind >= 0 && kind <= 4 ? kind : 0],
                       ints(inst.reduce().axes()));
  }
  case plan::Instruction::kGather:
    return fmt::format("gather axis={}{}", inst.gather().axis(),
                       inst.gather().skip_outside() ? " skip_outside" : "");
  case plan::Instruction::kConv2DBackwardInput:
  case plan::Instruction::kConv2DBackwardWeight: {
    bool input = inst.op_case() == plan::Instruction::kConv2DBackwardInput;
    const auto &c = input ? inst.conv2d_backward_input() : inst.conv2d_backward_weight();
    return fmt::format("conv2d_backward_{} strides={} pads={} dilations={} groups={}",
                       input ? "input" : "weight", ints(c.strides()), ints(c.pads()),
                       ints(c.dilations()), c.groups());
  }
  case plan::Instruction::kPool2DBackward: {
    const auto &p = inst.pool2d_backward();
    return fmt::format("{}_pool2d_backward kernel={} strides={} pads={}{}",
                       p.max() ? "max" : "avg", ints(p.kernel()), ints(p.strides()),
                       ints(p.pads()), p.count_include_pad() ? " count_include_pad" : "");
  }
  case plan::Instruction::kScatterAdd:
    return fmt::format("scatter_add axis={}{}", inst.scatter_add().axis(),
                       inst.scatter_add().skip_outside() ? " skip_outside" : "");
  case plan::Instruction::kConv2D: {
    const auto &c = inst.conv2d();
    return fmt::format("conv2d strides={} pads={} dilations={} groups={}{}{}", ints(c.strides()),
                       ints(c.pads()), ints(c.dilations()), c.groups(),
                       c.relu() ? " relu" : "", c.channels_last() ? " nhwc" : "");
  }
  case plan::Instruction::kPool2D: {
    const auto &p = inst.pool2d();
    return fmt::format("{}_pool2d kernel={} strides={} pads={}{}{}", p.max() ? "max" : "avg",
                       ints(p.kernel()), ints(p.strides()), ints(p.pads()),
                       p.count_include_pad() ? " count_include_pad" : "",
                       p.channels_last() ? " nhwc" : "");
  }
  case plan::Instruction::kTranspose:
    return "transpose perm=" + ints(inst.transpose().perm());
  case plan::Instruction::kConcat:
    return fmt::format("concat axis={}", inst.concat().axis());
  case plan::Instruction::kSlice:
    return fmt::format("slice offsets={} strides={}", ints(inst.slice().offsets()),
                       ints(inst.slice().strides()));
  case plan::Instruction::kCopy:
    return "copy";
  case plan::Instruction::kRotary:
    return inst.rotary().backward() ? "rotary backward" : "rotary";
  case plan::Instruction::kAttention:
  case plan::Instruction::kAttentionBackward: {
    bool forward = inst.op_case() == plan::Instruction::kAttention;
    const auto &a = forward ? inst.attention() : inst.attention_backward();
    return fmt::format("{} scale={:.6g}{}{}{}{}", forward ? "attention" : "attention_backward",
                       a.scale(), a.causal() ? " causal" : "", a.bias() ? " bias" : "",
                       a.bshd() ? " bshd" : "",
                       a.packed() ? (a.interleaved() ? " packed interleaved" : " packed") : "");
  }
  case plan::Instruction::kTopK:
    return fmt::format("top_k axis={} k={}{}", inst.top_k().axis(), inst.top_k().k(),
                       inst.top_k().largest() ? "" : " smallest");
  case plan::Instruction::kTrilu:
    return fmt::format("trilu {} k={}", inst.trilu().upper() ? "upper" : "lower",
                       inst.trilu().k());
  case plan::Instruction::kCollective: {
    const auto &c = inst.collective();
    static const char *kinds[] = {"?",          "all_reduce", "all_gather",
                                  "reduce_scatter", "all_to_all", "all_slice"};
    static const char *reductions[] = {"?", "sum", "mean", "max", "min"};
    int kind = c.kind() >= 0 && c.kind() <= 5 ? c.kind() : 0;
    std::string s = fmt::format("{} mesh_axes=[{}]", kinds[kind], fmt::join(c.mesh_axes(), ","));
    if (c.has_coordinates()) // a replicated stage's replicas
      s += fmt::format(" coordinates {}-{}", c.coordinates().first(),
                       c.coordinates().first() + c.coordinates().count() - 1);
    if (c.kind() == plan::ALL_REDUCE || c.kind() == plan::REDUCE_SCATTER)
      s += fmt::format(" {}",
                       reductions[c.reduction() >= 0 && c.reduction() <= 4 ? c.reduction() : 0]);
    if (c.member_axes_size() > 0)
      s += fmt::format(" axes=[{}]", fmt::join(c.member_axes(), ","));
    else if (c.kind() != plan::ALL_REDUCE)
      s += fmt::format(" axis={}", c.axis());
    if (inst.inputs_size() > 1) // a bucket: one message
      s += fmt::format(" bucket of {}", inst.inputs_size());
    if (c.kind() == plan::ALL_TO_ALL)
      s += fmt::format(" concat_axis={}", c.concat_axis());
    if (c.kind() == plan::ALL_SLICE) // keeps its part: nothing sent
      return s + " (local)";
    return s + fmt::format(" ({})", plan::formatBytes(int64_t(inst.cost().bytes())));
  }
  case plan::Instruction::kSend:
  case plan::Instruction::kRecv: {
    const plan::Transfer &t = inst.has_send() ? inst.send() : inst.recv();
    std::string verb = inst.has_send() ? "send to" : "receive from";
    std::string channel =
        t.channel() ? fmt::format(", channel {}", t.channel()) : std::string();
    if (t.has_along() && t.along().replicas() > 1) { // a replicated stage: whose micro-batch
      int64_t stage = pipeline ? plan::stageAtCoordinate(*pipeline, t.along().coordinate()).stage
                               : -1;
      return fmt::format("{} {}the replica that runs the micro-batch (mesh axis {} at {}-{}{})",
                         verb, stage >= 0 ? fmt::format("stage {}: ", stage) : std::string(),
                         t.along().axis(), t.along().coordinate(),
                         t.along().coordinate() + t.along().replicas() - 1, channel);
    }
    if (t.has_along()) { // a pipeline stage: the next or previous one
      int64_t stage = pipeline ? plan::stageAtCoordinate(*pipeline, t.along().coordinate()).stage
                               : t.along().coordinate();
      if (pipeline && stage != t.along().coordinate())
        return fmt::format("{} stage {} (mesh axis {} at {}{})", verb, stage, t.along().axis(),
                           t.along().coordinate(), channel);
      return fmt::format("{} stage {} (mesh axis {}{})", verb, stage, t.along().axis(), channel);
    }
    return fmt::format("{} rank {}", verb, t.peer());
  }
  default:
    return "unknown";
  }
}

std::string axisName(const plan::Plan &plan, uint32_t axis) {
  return axis < uint32_t(plan.mesh().axes_size()) ? plan.mesh().axes(int(axis)).name()
                                                  : fmt::format("axis{}", axis);
}

/// How many parts the mesh axes of `dim` cut it into.
int64_t partsOf(const plan::Plan &plan, const plan::DimSharding &dim) {
  int64_t parts = 1;
  for (uint32_t axis : dim.mesh_axes())
    if (axis < uint32_t(plan.mesh().axes_size()))
      parts *= plan.mesh().axes(int(axis)).size();
  return parts;
}

/// A buffer's type; a split one's as the whole tensor over the mesh axes
/// that split each dim, "f32[1024/tp,4096]", "f32[8/dp,128,768/(dp,tp)]".
std::string bufferType(const plan::Plan &plan, const plan::Buffer &buffer) {
  const plan::TensorType &type = buffer.type();
  if (buffer.sharding_size() == 0)
    return typeToString(type);
  std::vector<std::string> dims;
  for (int d = 0; d < type.shape_size(); ++d) {
    std::vector<std::string> axes;
    if (d < buffer.sharding_size())
      for (uint32_t axis : buffer.sharding(d).mesh_axes())
        axes.push_back(axisName(plan, axis));
    if (axes.empty()) {
      dims.push_back(std::to_string(type.shape(d)));
      continue;
    }
    int64_t whole = type.shape(d) * partsOf(plan, buffer.sharding(d));
    dims.push_back(axes.size() == 1 ? fmt::format("{}/{}", whole, axes[0])
                                    : fmt::format("{}/({})", whole, fmt::join(axes, ",")));
  }
  return fmt::format("{}[{}]", plan::dtypeName(type.dtype()), fmt::join(dims, ","));
}

namespace {

std::string bufferList(const google::protobuf::RepeatedField<uint32_t> &ids) {
  std::vector<std::string> parts;
  for (uint32_t id : ids)
    parts.push_back(fmt::format("%{}", id));
  return fmt::format("{}", fmt::join(parts, ", "));
}

/// Operands by buffer id; a split one with its type, "%3:f32[1024/tp,4096]".
std::string operandList(const plan::Plan &plan, const plan::RankProgram &rank,
                        const google::protobuf::RepeatedField<uint32_t> &ids) {
  std::vector<std::string> parts;
  for (uint32_t id : ids) {
    bool split = id < uint32_t(rank.buffers_size()) && rank.buffers(int(id)).sharding_size();
    parts.push_back(split ? fmt::format("%{}:{}", id, bufferType(plan, rank.buffers(int(id))))
                          : fmt::format("%{}", id));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

/// A graph input's type as the first program's buffer holds it: its split
/// shown when the input is split.
std::string inputType(const plan::Plan &plan, int input) {
  if (plan.ranks_size())
    for (const plan::Buffer &buffer : plan.ranks(0).buffers())
      if (buffer.has_input() && buffer.input() == uint32_t(input) && buffer.sharding_size())
        return bufferType(plan, buffer);
  return typeToString(plan.inputs(input).type());
}

/// "parameters: 12 split (tp), 4 replicated; 1.20 GiB per rank of 4.80
/// GiB": how the program's parameters are split and what a rank holds of
/// them.
std::string parameterSummary(const plan::Plan &plan, const plan::RankProgram &rank) {
  int split = 0, whole = 0;
  int64_t localBytes = 0, wholeBytes = 0;
  std::vector<bool> splitBy(size_t(plan.mesh().axes_size()), false);
  for (const plan::Buffer &buffer : rank.buffers()) {
    if (!buffer.has_parameter())
      continue;
    int64_t bytes = plan::dtypeBytes(buffer.type().dtype()), parts = 1;
    for (int64_t d : buffer.type().shape())
      bytes *= d;
    for (const plan::DimSharding &dim : buffer.sharding()) {
      parts *= partsOf(plan, dim);
      for (uint32_t axis : dim.mesh_axes())
        if (axis < splitBy.size())
          splitBy[axis] = true;
    }
    (parts > 1 ? split : whole) += 1;
    localBytes += bytes;
    wholeBytes += bytes * parts;
  }
  if (split + whole == 0)
    return "none";
  int64_t devices = plan::planRanks(plan);
  if (devices <= 1)
    return fmt::format("{}; {}", whole, plan::formatBytes(localBytes));
  std::vector<std::string> counts, axes;
  for (size_t a = 0; a < splitBy.size(); ++a)
    if (splitBy[a])
      axes.push_back(axisName(plan, uint32_t(a)));
  if (split)
    counts.push_back(fmt::format("{} split ({})", split, fmt::join(axes, ", ")));
  if (whole)
    counts.push_back(fmt::format("{} replicated", whole));
  std::string bytes = plan::formatBytes(localBytes) + " per rank";
  if (split)
    bytes += " of " + plan::formatBytes(wholeBytes);
  return fmt::format("{}; {}", fmt::join(counts, ", "), bytes);
}

/// What the runtime feeds an input of `role`; empty for the model's own.
/// A pipeline stage's stash: its bytes per micro-batch and the copies it
/// keeps ("1.0 MiB per micro-batch, 2 in flight"; groups with different
/// copies, interleaved: "..., 6.0 MiB in flight: 512 KiB x 8, 512 KiB x 4").
std::string stashSummary(const plan::RankProgram &rank) {
  int64_t perMicroBatch = 0, total = 0;
  std::string groups;
  bool alike = true;
  for (const plan::Stash &stash : rank.stashes()) {
    perMicroBatch += stash.bytes();
    total += stash.bytes() * int64_t(stash.slots());
    alike = alike && stash.slots() == rank.stashes(0).slots();
    groups += fmt::format("{}{} x {}", groups.empty() ? "" : ", ", plan::formatBytes(stash.bytes()),
                          stash.slots());
  }
  std::string text = fmt::format("stash {} per micro-batch, ", plan::formatBytes(perMicroBatch));
  if (alike)
    return text + fmt::format("{} in flight", rank.stashes_size() ? rank.stashes(0).slots() : 0);
  return text + fmt::format("{} in flight: {}", plan::formatBytes(total), groups);
}

std::string roleText(plan::InputRole role) {
  switch (role) {
  case plan::LABELS: return "labels, from the data set";
  case plan::LEARNING_RATE: return "learning rate, from the schedule each step";
  case plan::BIAS_CORRECTION1: return "AdamW's first bias correction, each step";
  case plan::BIAS_CORRECTION2: return "AdamW's second bias correction, each step";
  default: return "";
  }
}

} // namespace

/// The lines every view of a plan starts with: format, model, mesh,
/// micro-batches and pipeline stages.
std::string planHeader(const plan::Plan &plan) {
  std::string out;
  auto line = [&](const std::string &text) { out += text + "\n"; };
  line(fmt::format("plan format {}, written by {}", plan.format_version(), plan.producer()));
  line("model: " + plan.model());
  std::vector<std::string> axes;
  for (const auto &axis : plan.mesh().axes())
    axes.push_back(fmt::format("{}={}", axis.name(), axis.size()));
  int64_t ranks = plan::planRanks(plan);
  line(fmt::format("mesh: {} ({} rank{}{})", fmt::join(axes, " x "), ranks, ranks == 1 ? "" : "s",
                   plan.ranks_size() == 1 && ranks > 1 ? ", one program for all" : ""));
  int64_t microBatches = plan.training().micro_batches();
  if (microBatches > 1)
    line(fmt::format("training: {} micro-batches per step (the inputs hold one; gradients "
                     "accumulate, one optimizer update per step)",
                     microBatches));
  const plan::Pipeline &pipeline = plan.training().pipeline();
  bool pipelined = pipeline.stages() > 1;
  if (pipelined && plan::stageCoordinates(pipeline) > int64_t(pipeline.stages())) {
    // Replicated stages: each stage's ranks, and which micro-batches each
    // replica runs.
    int64_t perCopy = ranks / plan::stageCoordinates(pipeline);
    std::vector<std::string> stages;
    for (int64_t s = 0; s < int64_t(pipeline.stages()); ++s) {
      int64_t first = plan::firstStageCoordinate(pipeline, s) * perCopy;
      int64_t replicas = plan::stageReplicas(pipeline, s);
      int64_t last = first + replicas * perCopy - 1;
      stages.push_back(fmt::format(
          "stage {} on {}{}", s,
          first == last ? fmt::format("rank {}", first) : fmt::format("ranks {}-{}", first, last),
          replicas > 1 ? fmt::format(" ({} replicas of {} rank{}, each 1 micro-batch in {})",
                                     replicas, perCopy, perCopy == 1 ? "" : "s", replicas)
                       : std::string()));
    }
    line(fmt::format("pipeline: {} stages, {} schedule (mesh axis {}); {}", pipeline.stages(),
                     plan::scheduleName(pipeline.schedule()), pipeline.axis(),
                     fmt::join(stages, "; ")));
  } else if (pipelined) {
    int64_t perStage = ranks / int64_t(pipeline.stages());
    int64_t v = pipeline.virtual_stages();
    line(fmt::format("pipeline: {} stages, {} schedule{} (mesh axis {}); {}", pipeline.stages(),
                     plan::scheduleName(pipeline.schedule()),
                     v > 1 ? fmt::format(" of {} virtual stages (stage s runs model chunks s, "
                                         "s + {}, ...)",
                                         v, pipeline.stages())
                           : std::string(),
                     pipeline.axis(),
                     perStage == 1 ? std::string("stage s runs on rank s")
                                   : fmt::format("stage s runs on ranks {}s to {}s + {}",
                                                 perStage, perStage, perStage - 1)));
  }
  return out;
}

std::string printPlan(const plan::Plan &plan) {
  std::string out = planHeader(plan);
  auto line = [&](const std::string &text) { out += text + "\n"; };
  int64_t microBatches = plan.training().micro_batches();
  bool pipelined = plan.training().pipeline().stages() > 1;
  line("");
  line("inputs:");
  for (int i = 0; i < plan.inputs_size(); ++i) {
    std::string role = roleText(plan.inputs(i).role());
    line(fmt::format("  {:<24} {}{}", plan.inputs(i).name(), inputType(plan, i),
                     role.empty() ? "" : "  (" + role + ")"));
  }
  line("outputs:");
  for (const auto &t : plan.outputs())
    line(fmt::format("  {:<24} {}", t.name(), typeToString(t.type())));
  line("");
  line("decisions:");
  for (const auto &note : plan.decisions().notes())
    line("  " + note);
  for (const auto &summary : plan.decisions().ranks())
    line(fmt::format("  rank {}: predicted peak memory {} (parameters {})", summary.rank(),
                     plan::formatBytes(summary.peak_memory_bytes()),
                     plan::formatBytes(summary.parameter_bytes())));

  for (int r = 0; r < plan.ranks_size(); ++r) {
    const auto &rank = plan.ranks(r);
    // A pipeline's programs are its stages'; an SPMD plan's, every rank's.
    std::string who = fmt::format(pipelined ? "stage {}" : "rank {}", r);
    line("");
    line(fmt::format("{} parameters: {}", who, parameterSummary(plan, rank)));
    auto printInstruction = [&](int i, const plan::Instruction &inst,
                                const std::string &note = std::string()) {
      std::string outs = bufferList(inst.outputs());
      std::string type =
          inst.outputs_size() ? bufferType(plan, rank.buffers(int(inst.outputs(0)))) : "";
      // "matmul transpose_rhs" -> "matmul(%0, %1) transpose_rhs".
      std::string what = describeInstruction(inst, &plan.training().pipeline());
      size_t space = what.find(' ');
      std::string name = what.substr(0, space);
      std::string attrs = space == std::string::npos ? "" : what.substr(space);
      std::string call = fmt::format("{}({}){}", name, operandList(plan, rank, inst.inputs()),
                                     attrs);
      if (inst.has_collective() && inst.inputs_size() > 1) { // a bucket: a line a member
        line(fmt::format("  {:>4}  {}{}", i, what, note));
        const plan::Collective &c = inst.collective();
        for (int m = 0; m < inst.inputs_size(); ++m) {
          google::protobuf::RepeatedField<uint32_t> in, out;
          in.Add(inst.inputs(m));
          out.Add(inst.outputs(m));
          line(fmt::format("        {} = {}({}){}  : {}", bufferList(out), name,
                           operandList(plan, rank, in),
                           c.member_axes_size() ? fmt::format(" axis={}", c.member_axes(m)) : "",
                           bufferType(plan, rank.buffers(int(inst.outputs(m))))));
        }
      } else if (inst.outputs_size() == 0) { // a send: nothing written here
        line(fmt::format("  {:>4}  {}{}", i, call, note));
      } else {
        line(fmt::format("  {:>4}  {} = {}  : {}{}", i, outs, call, type, note));
      }
    };
    // Once-per-step reductions run early, in the last micro-batch.
    std::map<int, uint32_t> overlappedAfter;
    for (const plan::OverlappedInstruction &o : rank.overlapped())
      overlappedAfter[int(o.instruction())] = o.after();
    if (rank.prologue_size()) {
      line(fmt::format("{} prologue (run once, at load): {} instructions", who,
                       rank.prologue_size()));
      for (int i = 0; i < rank.prologue_size(); ++i)
        printInstruction(i, rank.prologue(i));
    }
    line(fmt::format("{} program: {} instructions, {} buffers, arena {}{}", who,
                     rank.instructions_size(), rank.buffers_size(),
                     plan::formatBytes(rank.arena_bytes()),
                     pipelined ? " (" + stashSummary(rank) + ")" : ""));
    int64_t virtuals = rank.part_ends_size() / 2;
    // GPU launches of several instructions (GpuKernel.batch): first -> last.
    std::map<int, int> launches;
    for (int i = 0; i < rank.instructions_size(); ++i)
      if (int64_t batch = rank.instructions(i).gpu().batch(); batch > 1)
        launches[int(i + 1 - batch)] = i;
    for (int i = 0; i < rank.instructions_size(); ++i) {
      if (virtuals > 1) { // an interleaved stage: a forward and a backward per virtual stage
        for (int64_t k = 0; k < 2 * virtuals; ++k)
          if (uint32_t(i) == (k ? rank.part_ends(int(k) - 1) : 0u) &&
              rank.part_ends(int(k)) > uint32_t(i))
            line(fmt::format("  -- {} of virtual stage {}, per micro-batch ({} a step) --",
                             k < virtuals ? "forward" : "backward", k % virtuals, microBatches));
      } else {
        if (pipelined && i == 0)
          line(fmt::format("  -- forward, per micro-batch ({} a step) --", microBatches));
        if (pipelined && uint32_t(i) == rank.forward_end())
          line(fmt::format("  -- backward, per micro-batch ({} a step) --", microBatches));
      }
      if (!pipelined && microBatches > 1 && i == 0)
        line(fmt::format("  -- once per micro-batch ({} times a step) --", microBatches));
      if ((pipelined || microBatches > 1) && uint32_t(i) == rank.accumulate_end())
        line("  -- once per step, after the last micro-batch --");
      if (auto batch = launches.find(i); batch != launches.end())
        line(fmt::format("  -- on a GPU, {} to {} are one kernel launch --", i, batch->second));
      auto early = overlappedAfter.find(i);
      printInstruction(i, rank.instructions(i),
                       early == overlappedAfter.end()
                           ? std::string()
                           : fmt::format("  (overlapped: in the last micro-batch, right after {})",
                                         early->second));
    }
    line(fmt::format("{} buffers (offset in the arena, type, what it holds):", who));
    for (int b = 0; b < rank.buffers_size(); ++b) {
      const auto &buffer = rank.buffers(b);
      std::string source;
      if (buffer.has_parameter()) {
        const auto &param = buffer.parameter();
        source = "parameter '" + param.initializer() + "'";
        if (param.accumulator())
          source += " (gradient accumulator, zeroed each step)";
        if (!param.cast_of().empty())
          source += " (the bf16 copy of '" + param.cast_of() + "', written with it)";
        if (!param.file().empty())
          source += fmt::format(" from {} at byte {}", param.file(), param.offset());
        if (param.model_shape_size() != 0) {
          TensorType model;
          model.set_dtype(buffer.type().dtype());
          *model.mutable_shape() = param.model_shape();
          source += ", padded from " + typeToString(model);
        }
      }
      else if (buffer.has_constant())
        source = "constant";
      else if (buffer.has_input())
        source = "input '" + plan.inputs(buffer.input()).name() + "'";
      else if (!buffer.name().empty())
        source = "'" + buffer.name() + "'";
      if (buffer.stash() > 0 && int(buffer.stash()) <= rank.stashes_size()) {
        uint32_t slots = rank.stashes(int(buffer.stash()) - 1).slots();
        source += fmt::format(" (stashed: {} {})", slots, slots == 1 ? "copy" : "copies");
      }
      line(fmt::format("  %{:<5} @{:<10} {:<22} {}", b, buffer.offset(),
                       bufferType(plan, buffer), source));
    }
    std::vector<std::string> outputs;
    for (uint32_t id : rank.outputs())
      outputs.push_back(id == kNoBuffer ? "-" : fmt::format("%{}", id)); // another stage's
    line(fmt::format("{} outputs: {}", who, fmt::join(outputs, ", ")));
  }
  return out;
}

} // namespace dtc::plan
