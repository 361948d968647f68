//===- PlanLoader.cpp -----------------------------------------------------===//
#include "plan/PlanLoader.h"

#include "plan/Sharding.h"
#include "plan/Ranks.h"

#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sys/stat.h>

namespace dtc::plan {

using plan::Buffer;
using plan::Instruction;
using plan::Plan;
using plan::TensorType;

namespace {

bool sameType(const TensorType &a, const TensorType &b) {
  return a.dtype() == b.dtype() &&
         std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(),
                    b.shape().end());
}

/// Whether `part` is one of the equal parts of `whole` cut `parts[d]` ways
/// along each dim d.
bool isPartOf(const TensorType &part, const TensorType &whole, const std::vector<int64_t> &parts) {
  if (part.dtype() != whole.dtype() || part.shape_size() != whole.shape_size())
    return false;
  for (int d = 0; d < part.shape_size(); ++d)
    if (whole.shape(d) % parts[size_t(d)] != 0 ||
        whole.shape(d) / parts[size_t(d)] != part.shape(d))
      return false;
  return true;
}

template <typename Dims> std::string shapeString(const Dims &dims) {
  std::string s = "[";
  for (int64_t d : dims)
    s += (s.size() > 1 ? "," : "") + std::to_string(d);
  return s + "]";
}

std::string axesString(const MeshAxes &axes) {
  std::string s = "{";
  for (int i = 0; i < axes.size(); ++i)
    s += (i ? "," : "") + std::to_string(axes[i]);
  return s + "}";
}

std::string typeString(const TensorType &type) {
  return std::string(dtypeName(type.dtype())) + shapeString(type.shape());
}

/// How many inputs and outputs an instruction kind takes; -1 for "one or
/// more".
struct Arity {
  int minInputs, maxInputs, outputs;
};

Arity arityOf(const Instruction &inst) {
  switch (inst.op_case()) {
  case Instruction::kMatmul:
    return {2, 2, 1};
  case Instruction::kElementwise:
    return {0, 1 << 16, 1}; // no inputs: an expression of constants
  case Instruction::kLayerNorm:
    return {2, 3, 1};
  case Instruction::kBatchNorm:
    return {5, 5, 1};
  case Instruction::kGather:
    return {2, 2, 1};
  case Instruction::kConv2D:
    return {2, 3, 1};
  case Instruction::kConcat:
    return {1, 1 << 16, 1};
  case Instruction::kConv2DBackwardInput:
  case Instruction::kConv2DBackwardWeight:
  case Instruction::kScatterAdd:
    return {2, 2, 1};
  case Instruction::kPool2DBackward:
    return {1, 2, 1};
  case Instruction::kSend:
    return {1, 1, 0};
  case Instruction::kRecv:
    return {0, 0, 1};
  default:
    return {1, 1, 1};
  }
}

class PlanValidator {
public:
  explicit PlanValidator(const Plan &plan) : plan_(plan) {}

  bool run(std::string &error) {
    bool ok = checkHeader() && checkTensors();
    for (int r = 0; ok && r < plan_.ranks_size(); ++r)
      ok = checkRank(r) && checkUpdates(r);
    ok = ok && checkTransfers();
    if (!ok)
      error = error_;
    return ok;
  }

private:
  bool fail(const std::string &message) {
    error_ = message;
    return false;
  }

  /// Sends and receives pair up: the n-th tensor rank a sends to rank b is
  /// the n-th b receives from a, of the same type, and no rank sends to
  /// itself. (A mismatch would leave a rank waiting forever.)
  bool checkTransfers() {
    bool any = false;
    for (const plan::RankProgram &program : plan_.ranks())
      for (const Instruction &inst : program.instructions())
        any = any || inst.has_send() || inst.has_recv();
    if (!any)
      return true;
    int64_t devices = meshDevices(plan_.mesh());
    // (from, to) -> the types sent, and the types received.
    std::map<std::pair<int64_t, int64_t>, std::vector<const TensorType *>> sent, received;
    for (int64_t r = 0; r < devices; ++r) {
      const plan::RankProgram &program = plan_.ranks(programIndexOfRank(plan_, r));
      for (const Instruction &inst : program.instructions()) {
        if (inst.has_send()) {
          int64_t peer = transferPeer(inst.send(), axisSizes_, r);
          if (peer == r)
            return fail("rank " + std::to_string(r) + " sends to itself");
          sent[{r, peer}].push_back(&program.buffers(int(inst.inputs(0))).type());
        } else if (inst.has_recv()) {
          int64_t peer = transferPeer(inst.recv(), axisSizes_, r);
          if (peer == r)
            return fail("rank " + std::to_string(r) + " receives from itself");
          received[{peer, r}].push_back(&program.buffers(int(inst.outputs(0))).type());
        }
      }
    }
    std::set<std::pair<int64_t, int64_t>> pairs;
    for (const auto *side : {&sent, &received})
      for (const auto &entry : *side)
        pairs.insert(entry.first);
    for (const auto &pair : pairs) {
      const auto &sends = sent[pair], &receives = received[pair];
      std::string a = std::to_string(pair.first), b = std::to_string(pair.second);
      if (sends.size() != receives.size())
        return fail("rank " + a + " sends " + std::to_string(sends.size()) + " tensors to rank " +
                    b + ", which receives " + std::to_string(receives.size()) + " from it");
      for (size_t k = 0; k < sends.size(); ++k)
        if (sends[k]->SerializeAsString() != receives[k]->SerializeAsString())
          return fail("tensor " + std::to_string(k + 1) + " that rank " + a + " sends to rank " +
                      b + " is " + typeString(*sends[k]) + ", but rank " + b + " receives " +
                      typeString(*receives[k]));
    }
    return true;
  }

  /// A training step's updates: a graph output of a parameter's type,
  /// copied into that parameter.
  bool checkUpdates(int r) {
    const plan::RankProgram &program = plan_.ranks(r);
    bool pipelined = plan_.training().pipeline().stages() > 1;
    if (pipelined && plan_.training().updates_size() > 0)
      return fail("training: a pipelined plan lists its updates per program, not in training");
    if (!pipelined && program.updates_size() > 0)
      return fail("rank " + std::to_string(r) + ": updates of its own, but the plan has no "
                  "pipeline stages");
    for (const plan::ParameterUpdate &u :
         pipelined ? program.updates() : plan_.training().updates()) {
      std::string where = "training update of output " + std::to_string(u.output());
      if (int64_t(u.output()) >= plan_.outputs_size() ||
          int64_t(u.output()) >= program.outputs_size() ||
          program.outputs(int(u.output())) == kNoBuffer)
        return fail(where + ": no such output");
      if (int64_t(u.buffer()) >= program.buffers_size() ||
          !program.buffers(int(u.buffer())).has_parameter())
        return fail(where + ": buffer " + std::to_string(u.buffer()) + " is not a parameter");
      // Both the rank's value and (for a whole parameter) the graph's output:
      // a sharded parameter's update is sharded too, the graph's type whole.
      const plan::Buffer &parameter = program.buffers(int(u.buffer()));
      const plan::TensorType &to = parameter.type();
      const plan::TensorType &from = program.buffers(int(program.outputs(int(u.output())))).type();
      if (!sameType(from, to) ||
          (parameter.sharding_size() == 0 && !sameType(plan_.outputs(int(u.output())).type(), to)))
        return fail(where + ": its type differs from the parameter's");
    }
    return true;
  }

  bool checkHeader() {
    if (plan_.format_version() != kPlanFormatVersion)
      return fail("plan format version " + std::to_string(plan_.format_version()) +
                  " (written by '" + plan_.producer() + "'); this dtc reads version " +
                  std::to_string(kPlanFormatVersion) +
                  ": recompile the model with this dtc");
    int64_t devices = 1;
    for (const auto &axis : plan_.mesh().axes()) {
      if (axis.size() < 1 || axis.size() > (1 << 20))
        return fail("mesh axis '" + axis.name() + "' has size " +
                    std::to_string(axis.size()));
      devices *= axis.size();
      if (devices > (1 << 20))
        return fail("mesh has more than 2^20 devices");
    }
    axisSizes_ = meshAxisSizes(plan_.mesh());
    if (plan_.program_of_rank_size() == 0) {
      if (devices != plan_.ranks_size())
        return fail("mesh has " + std::to_string(devices) + " devices but the plan has " +
                    std::to_string(plan_.ranks_size()) + " rank programs");
      return true;
    }
    if (plan_.program_of_rank_size() != devices)
      return fail("program_of_rank names the programs of " +
                  std::to_string(plan_.program_of_rank_size()) + " ranks but the mesh has " +
                  std::to_string(devices) + " devices");
    for (int r = 0; r < plan_.program_of_rank_size(); ++r)
      if (plan_.program_of_rank(r) >= uint32_t(plan_.ranks_size()))
        return fail("program_of_rank: rank " + std::to_string(r) + " runs program " +
                    std::to_string(plan_.program_of_rank(r)) + " but the plan has " +
                    std::to_string(plan_.ranks_size()));
    return true;
  }

  bool checkTensors() {
    for (const auto *list : {&plan_.inputs(), &plan_.outputs()})
      for (const auto &t : *list)
        if (byteSize(t.type()) < 0)
          return fail("graph input/output '" + t.name() + "' has an invalid type");
    return true;
  }

  bool checkRank(int r) {
    const auto &rank = plan_.ranks(r);
    std::string where = "rank " + std::to_string(r);
    if (rank.arena_bytes() < 0)
      return fail(where + ": negative arena size");
    for (int b = 0; b < rank.buffers_size(); ++b)
      if (!checkBuffer(rank, b, where + ", buffer " + std::to_string(b)))
        return false;
    for (int i = 0; i < rank.prologue_size(); ++i)
      if (!checkInstruction(rank, rank.prologue(i),
                            where + ", prologue instruction " + std::to_string(i)))
        return false;
    for (int i = 0; i < rank.instructions_size(); ++i)
      if (!checkInstruction(rank, rank.instructions(i),
                            where + ", instruction " + std::to_string(i)))
        return false;
    if (plan_.training().micro_batches() < 0)
      return fail("training: negative micro-batch count");
    if (rank.accumulate_end() > uint32_t(rank.instructions_size()))
      return fail(where + ": accumulate_end " + std::to_string(rank.accumulate_end()) +
                  " is past its " + std::to_string(rank.instructions_size()) + " instructions");
    if (plan_.training().micro_batches() > 1 && plan_.outputs_size() == 0)
      return fail("training: micro-batches but no loss output");
    if (rank.outputs_size() != plan_.outputs_size())
      return fail(where + ": " + std::to_string(rank.outputs_size()) +
                  " output buffers for " + std::to_string(plan_.outputs_size()) +
                  " graph outputs");
    const plan::Pipeline &pipeline = plan_.training().pipeline();
    if (pipeline.stages() > 1) {
      if (pipeline.axis() >= axisSizes_.size() ||
          axisSizes_[pipeline.axis()] != int64_t(pipeline.stages()))
        return fail("training: " + std::to_string(pipeline.stages()) +
                    " pipeline stages, but mesh axis " + std::to_string(pipeline.axis()) +
                    " is not of that size");
      if (pipeline.schedule() != plan::GPIPE && pipeline.schedule() != plan::ONE_F_ONE_B)
        return fail("training: unknown pipeline schedule " +
                    std::to_string(int(pipeline.schedule())));
      if (rank.forward_end() > rank.accumulate_end())
        return fail(where + ": forward_end " + std::to_string(rank.forward_end()) +
                    " is past accumulate_end " + std::to_string(rank.accumulate_end()));
      if (rank.stash_bytes() < 0 ||
          (rank.stash_slots() > 0 && rank.stash_bytes() > rank.arena_bytes() / rank.stash_slots()))
        return fail(where + ": a stash of " + std::to_string(rank.stash_slots()) + " x " +
                    std::to_string(rank.stash_bytes()) + " bytes does not fit its arena");
      for (int b = 0; b < rank.buffers_size(); ++b) {
        const plan::Buffer &buffer = rank.buffers(b);
        if (buffer.stashed() &&
            (rank.stash_slots() == 0 ||
             buffer.offset() + byteSize(buffer.type()) +
                     int64_t(rank.stash_slots() - 1) * rank.stash_bytes() >
                 rank.arena_bytes()))
          return fail(where + ", buffer " + std::to_string(b) + " ('" + buffer.name() +
                      "'): its stash copies do not fit the arena");
      }
    } else if (rank.forward_end() != 0 || rank.stash_slots() != 0) {
      return fail(where + ": a forward part or a stash, but the plan has no pipeline stages");
    }
    for (int o = 0; o < rank.outputs_size(); ++o) {
      uint32_t id = rank.outputs(o);
      if (id == kNoBuffer && pipeline.stages() > 1)
        continue; // another stage's
      if (id >= (uint32_t)rank.buffers_size())
        return fail(where + ": output " + std::to_string(o) + " names buffer " +
                    std::to_string(id) + " of " + std::to_string(rank.buffers_size()));
    }
    return true;
  }

  bool checkBuffer(const plan::RankProgram &rank, int b, const std::string &where) {
    const Buffer &buffer = rank.buffers(b);
    int64_t bytes = byteSize(buffer.type());
    if (bytes < 0)
      return fail(where + " ('" + buffer.name() + "'): invalid type");
    if (buffer.offset() % dtypeBytes(buffer.type().dtype()) != 0)
      return fail(where + " ('" + buffer.name() + "'): offset " +
                  std::to_string(buffer.offset()) + " is not a multiple of its element size");
    if (buffer.offset() < 0 || buffer.offset() > rank.arena_bytes() ||
        rank.arena_bytes() - buffer.offset() < bytes)
      return fail(where + " ('" + buffer.name() + "'): bytes [" +
                  std::to_string(buffer.offset()) + ", +" + std::to_string(bytes) +
                  ") lie outside the arena of " + std::to_string(rank.arena_bytes()));
    if (buffer.sharding_size() != 0 && !checkSharding(buffer, where))
      return false;
    switch (buffer.source_case()) {
    case Buffer::kConstant:
      if ((int64_t)buffer.constant().size() != bytes)
        return fail(where + " ('" + buffer.name() + "'): constant holds " +
                    std::to_string(buffer.constant().size()) + " bytes, its type needs " +
                    std::to_string(bytes));
      break;
    case Buffer::kInput: {
      if (buffer.input() >= (uint32_t)plan_.inputs_size() ||
          (buffer.sharding_size() == 0 &&
           !sameType(plan_.inputs(buffer.input()).type(), buffer.type())))
        return fail(where + " ('" + buffer.name() + "'): input " +
                    std::to_string(buffer.input()) + " is missing or of another type");
      // The graph's input is the whole tensor; the buffer holds a part.
      const plan::Tensor &input = plan_.inputs(buffer.input());
      std::vector<int64_t> parts = shardParts(buffer, axisSizes_);
      if (!isPartOf(buffer.type(), input.type(), parts))
        return fail(where + " ('" + buffer.name() + "'): input '" + input.name() + "' " +
                    typeString(input.type()) + " cut into " + shapeString(parts) +
                    " parts has no part of the buffer's type " + typeString(buffer.type()));
      break;
    }
    case Buffer::kParameter: {
      const auto &param = buffer.parameter();
      if (param.initializer().empty())
        return fail(where + ": parameter without an initializer name");
      if (param.offset() < 0)
        return fail(where + ": negative parameter offset");
      if (param.slice_size() != 0 && buffer.sharding_size() != 0)
        return fail(where + " ('" + param.initializer() +
                    "'): a sharded parameter's slice is the rank's part, found at load; "
                    "the plan must not give one");
      if (param.slice_size() != 0) {
        if (param.slice_size() != buffer.type().shape_size())
          return fail(where + " ('" + param.initializer() + "'): slice rank " +
                      std::to_string(param.slice_size()) + " differs from the buffer's");
        for (int d = 0; d < param.slice_size(); ++d)
          if (param.slice(d).start() < 0 ||
              param.slice(d).size() != buffer.type().shape(d))
            return fail(where + " ('" + param.initializer() + "'): slice of dim " +
                        std::to_string(d) + " does not match the buffer");
      }
      if (param.has_seeded()) {
        const plan::SeededInit &seeded = param.seeded();
        bool fits = seeded.shape_size() == buffer.type().shape_size();
        for (int d = 0; fits && d < seeded.shape_size(); ++d) {
          int64_t start = param.slice_size() ? param.slice(d).start() : 0;
          fits = seeded.shape(d) >= 0 && start + buffer.type().shape(d) <= seeded.shape(d);
        }
        if (!fits)
          return fail(where + " ('" + param.initializer() +
                      "'): the seeded parameter's shape does not hold the buffer's slice");
        plan::TensorType whole;
        whole.set_dtype(buffer.type().dtype());
        *whole.mutable_shape() = seeded.shape();
        std::vector<int64_t> parts = shardParts(buffer, axisSizes_);
        if (buffer.sharding_size() != 0 && !isPartOf(buffer.type(), whole, parts))
          return fail(where + " ('" + param.initializer() + "'): the seeded parameter " +
                      shapeString(seeded.shape()) + " cut into " + shapeString(parts) +
                      " parts has no part of the buffer's shape " +
                      shapeString(buffer.type().shape()));
        if (buffer.type().dtype() != plan::F32 || !std::isfinite(seeded.mean()) ||
            !std::isfinite(seeded.std()) || seeded.std() < 0)
          return fail(where + " ('" + param.initializer() +
                      "'): a seeded parameter must be f32 with a finite mean and std >= 0");
      }
      break;
    }
    case Buffer::SOURCE_NOT_SET:
      break;
    }
    return true;
  }

  /// A sharded buffer (a parameter or input, whose part each rank loads,
  /// or any other value, whose split is recorded for people): every dim's
  /// axes in the mesh, no axis cutting two dims (or one twice).
  bool checkSharding(const Buffer &buffer, const std::string &where) {
    std::string what = where + " ('" + buffer.name() + "')";
    if (buffer.sharding_size() != buffer.type().shape_size())
      return fail(what + ": sharding for " + std::to_string(buffer.sharding_size()) +
                  " dims of a rank-" + std::to_string(buffer.type().shape_size()) + " buffer");
    std::vector<bool> used(axisSizes_.size(), false);
    for (int d = 0; d < buffer.sharding_size(); ++d)
      for (uint32_t axis : buffer.sharding(d).mesh_axes()) {
        if (axis >= axisSizes_.size())
          return fail(what + ": dim " + std::to_string(d) + " is sharded over mesh axis " +
                      std::to_string(axis) + " but the mesh has " +
                      std::to_string(axisSizes_.size()) + " axes");
        if (used[axis])
          return fail(what + ": mesh axis " + std::to_string(axis) +
                      " shards the buffer twice");
        used[axis] = true;
      }
    return true;
  }

  /// A collective: its mesh axes, its reduction, and output shape as its
  /// kind makes it from the input's (plan.proto's CollectiveKind).
  bool checkCollective(const plan::RankProgram &rank, const Instruction &inst,
                       const std::string &where) {
    const plan::Collective &c = inst.collective();
    if (c.kind() == plan::COLLECTIVE_INVALID || !plan::CollectiveKind_IsValid(c.kind()))
      return fail(where + ": collective of unknown kind " + std::to_string(c.kind()) +
                  " (a plan from a newer dtc?)");
    std::string what = where + ": " + plan::CollectiveKind_Name(c.kind()) + " over mesh axes " +
                       axesString(c.mesh_axes());
    std::vector<bool> used(axisSizes_.size(), false);
    for (uint32_t axis : c.mesh_axes()) {
      if (axis >= axisSizes_.size())
        return fail(what + ": the mesh has " + std::to_string(axisSizes_.size()) + " axes");
      if (used[axis])
        return fail(what + ": axis " + std::to_string(axis) + " is named twice");
      used[axis] = true;
    }
    int64_t group = groupSize(axisSizes_, c.mesh_axes());
    what += " (" + std::to_string(group) + " ranks)";
    const TensorType &in = rank.buffers(int(inst.inputs(0))).type();
    const TensorType &out = rank.buffers(int(inst.outputs(0))).type();
    bool reduces = c.kind() == plan::ALL_REDUCE || c.kind() == plan::REDUCE_SCATTER;
    if (reduces && c.reduction() != plan::REDUCE_SUM && c.reduction() != plan::REDUCE_MAX &&
        c.reduction() != plan::REDUCE_MIN)
      return fail(what + ": the reduction must be sum, max or min");
    if (reduces && c.reduction() == plan::REDUCE_SUM && in.dtype() == plan::BOOL)
      return fail(what + ": bools have no sum (max is or, min is and)");
    int rankOf = in.shape_size();
    bool moves = c.kind() != plan::ALL_REDUCE;
    if (moves && (c.axis() < 0 || c.axis() >= rankOf))
      return fail(what + ": dim " + std::to_string(c.axis()) + " is not in the rank-" +
                  std::to_string(rankOf) + " input " + typeString(in));
    if (c.kind() == plan::ALL_TO_ALL && (c.concat_axis() < 0 || c.concat_axis() >= rankOf))
      return fail(what + ": concat dim " + std::to_string(c.concat_axis()) +
                  " is not in the rank-" + std::to_string(rankOf) + " input " +
                  typeString(in));
    bool splits = c.kind() == plan::REDUCE_SCATTER || c.kind() == plan::ALL_TO_ALL ||
                  c.kind() == plan::ALL_SLICE;
    if (splits && in.shape(int(c.axis())) % group != 0)
      return fail(what + ": dim " + std::to_string(c.axis()) + " of the input " +
                  typeString(in) + " does not split into " + std::to_string(group) +
                  " equal parts");
    // in[d] * grows[d] == out[d] * parts[d].
    std::vector<int64_t> grows(size_t(rankOf), 1), parts(size_t(rankOf), 1);
    const char *rule = "the output's shape must be the input's";
    switch (c.kind()) {
    case plan::ALL_GATHER:
      grows[size_t(c.axis())] = group;
      rule = "the output's dim `axis` must be the group size times the input's";
      break;
    case plan::REDUCE_SCATTER:
    case plan::ALL_SLICE:
      parts[size_t(c.axis())] = group;
      rule = "the output's dim `axis` must be the input's divided by the group size";
      break;
    case plan::ALL_TO_ALL:
      parts[size_t(c.axis())] = group;
      grows[size_t(c.concat_axis())] *= group;
      rule = "dim `axis` is divided by the group size, dim `concat_axis` multiplied by it";
      break;
    default:
      break;
    }
    bool fits = in.dtype() == out.dtype() && out.shape_size() == rankOf;
    for (int d = 0; fits && d < rankOf; ++d)
      fits = __int128(in.shape(d)) * grows[size_t(d)] ==
             __int128(out.shape(d)) * parts[size_t(d)];
    if (!fits)
      return fail(what + (moves ? " along dim " + std::to_string(c.axis()) : std::string()) +
                  ": input " + typeString(in) + ", output " + typeString(out) + ": " + rule +
                  ", the dtype the same");
    return true;
  }

  bool checkInstruction(const plan::RankProgram &rank, const Instruction &inst,
                        const std::string &where) {
    if (inst.op_case() == Instruction::OP_NOT_SET)
      return fail(where + ": unknown operation (a plan from a newer dtc?)");
    Arity arity = arityOf(inst);
    if (inst.inputs_size() < arity.minInputs || inst.inputs_size() > arity.maxInputs ||
        inst.outputs_size() != arity.outputs)
      return fail(where + ": wrong number of inputs (" + std::to_string(inst.inputs_size()) +
                  ") or outputs (" + std::to_string(inst.outputs_size()) + ")");
    for (const auto *ids : {&inst.inputs(), &inst.outputs()})
      for (uint32_t id : *ids)
        if (id >= (uint32_t)rank.buffers_size())
          return fail(where + ": buffer " + std::to_string(id) + " out of range (" +
                      std::to_string(rank.buffers_size()) + " buffers)");
    if (inst.has_elementwise() && !checkExpression(inst, where))
      return false;
    if (inst.has_collective() && !checkCollective(rank, inst, where))
      return false;
    if (inst.has_send() || inst.has_recv()) {
      const plan::Transfer &transfer = inst.has_send() ? inst.send() : inst.recv();
      int64_t devices = meshDevices(plan_.mesh());
      std::string what = std::string(inst.has_send() ? "send to " : "receive from ") +
                         transferPeerText(transfer, plan_.mesh());
      if (transfer.has_along() ? transferPeer(transfer, axisSizes_, 0) < 0
                               : transfer.peer() < 0 || transfer.peer() >= devices)
        return fail(where + ": " + what + ", but the mesh " +
                    (transfer.has_along() ? "is " + meshString(axisSizes_)
                                          : "has " + rankCount(devices)));
    }
    // Only elementwise kernels (each element read before it is written) and
    // collectives (which copy what they send) may write over their input.
    if (!inst.has_elementwise() && !inst.has_collective())
      for (uint32_t out : inst.outputs())
        for (uint32_t in : inst.inputs()) {
          const plan::Buffer &o = rank.buffers(int(out)), &i = rank.buffers(int(in));
          int64_t oBytes = byteSize(o.type()), iBytes = byteSize(i.type());
          if (oBytes > 0 && iBytes > 0 && o.offset() < i.offset() + iBytes &&
              i.offset() < o.offset() + oBytes)
            return fail(where + ": output buffer " + std::to_string(out) +
                        " shares bytes with input buffer " + std::to_string(in) +
                        "; only elementwise kernels and collectives work in place");
        }
    // The cost is for dtc simulate, which indexes by its class.
    if (!plan::OpClass_IsValid(inst.cost().op_class()))
      return fail(where + ": unknown cost class " + std::to_string(inst.cost().op_class()) +
                  " (a plan from a newer dtc?)");
    return true;
  }

  bool checkExpression(const Instruction &inst, const std::string &where) {
    const auto &nodes = inst.elementwise().nodes();
    if (nodes.empty())
      return fail(where + ": empty elementwise expression");
    for (int n = 0; n < nodes.size(); ++n) {
      const auto &node = nodes[n];
      if (node.op() == plan::EXPR_INVALID || !plan::ExprOp_IsValid(node.op()))
        return fail(where + ": expression node " + std::to_string(n) + " has no operation");
      if (dtypeBytes(node.dtype()) == 0)
        return fail(where + ": expression node " + std::to_string(n) + " has no type");
      for (uint32_t arg : node.args()) {
        bool ok = node.op() == plan::INPUT ? arg < (uint32_t)inst.inputs_size()
                                           : arg < (uint32_t)n;
        if (!ok)
          return fail(where + ": expression node " + std::to_string(n) +
                      " refers to argument " + std::to_string(arg) +
                      " that does not precede it");
      }
    }
    return true;
  }

  const Plan &plan_;
  std::vector<int64_t> axisSizes_; // the mesh's, once checkHeader passed
  std::string error_;
};

} // namespace

bool validatePlan(const Plan &plan, std::string &error) {
  return PlanValidator(plan).run(error);
}

bool loadPlan(const std::string &path, Plan &plan, std::string &error) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    error = path + ": cannot open file";
    return false;
  }
  if (S_ISDIR(st.st_mode)) {
    error = path + ": is a directory, not a plan";
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.empty() || !plan.ParseFromString(bytes)) {
    error = path + ": not a dtc plan (protobuf parse failed; is the file truncated?)";
    return false;
  }
  if (!validatePlan(plan, error)) {
    error = path + ": " + error;
    return false;
  }
  return true;
}

} // namespace dtc::plan
