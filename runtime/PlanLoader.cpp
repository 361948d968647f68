//===- PlanLoader.cpp -----------------------------------------------------===//
#include "runtime/PlanLoader.h"

#include <cmath>
#include <fstream>
#include <iterator>
#include <sys/stat.h>

namespace dtc::runtime {

using plan::Buffer;
using plan::Instruction;
using plan::Plan;
using plan::TensorType;

int64_t elementCount(const TensorType &type) {
  constexpr int64_t limit = int64_t(1) << 48;
  int64_t count = 1;
  for (int64_t d : type.shape()) {
    if (d < 0 || (d != 0 && count > limit / d))
      return -1;
    count *= d;
  }
  return count;
}

namespace {

/// Byte size of a valid tensor type, or -1.
int64_t byteSize(const TensorType &type) {
  int64_t count = elementCount(type), bytes = dtypeBytes(type.dtype());
  return count < 0 || bytes == 0 ? -1 : count * bytes;
}

bool sameType(const TensorType &a, const TensorType &b) {
  return a.dtype() == b.dtype() &&
         std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(),
                    b.shape().end());
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
    if (!ok)
      error = error_;
    return ok;
  }

private:
  bool fail(const std::string &message) {
    error_ = message;
    return false;
  }

  /// A training step's updates: a graph output of a parameter's type,
  /// copied into that parameter.
  bool checkUpdates(int r) {
    const plan::RankProgram &program = plan_.ranks(r);
    for (const plan::ParameterUpdate &u : plan_.training().updates()) {
      std::string where = "training update of output " + std::to_string(u.output());
      if (int64_t(u.output()) >= plan_.outputs_size() ||
          int64_t(u.output()) >= program.outputs_size())
        return fail(where + ": no such output");
      if (int64_t(u.buffer()) >= program.buffers_size() ||
          !program.buffers(int(u.buffer())).has_parameter())
        return fail(where + ": buffer " + std::to_string(u.buffer()) + " is not a parameter");
      const plan::TensorType &from = plan_.outputs(int(u.output())).type(),
                             &to = program.buffers(int(u.buffer())).type();
      if (from.SerializeAsString() != to.SerializeAsString())
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
    if (devices != plan_.ranks_size())
      return fail("mesh has " + std::to_string(devices) + " devices but the plan has " +
                  std::to_string(plan_.ranks_size()) + " rank programs");
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
    if (rank.outputs_size() != plan_.outputs_size())
      return fail(where + ": " + std::to_string(rank.outputs_size()) +
                  " output buffers for " + std::to_string(plan_.outputs_size()) +
                  " graph outputs");
    for (int o = 0; o < rank.outputs_size(); ++o) {
      uint32_t id = rank.outputs(o);
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
    switch (buffer.source_case()) {
    case Buffer::kConstant:
      if ((int64_t)buffer.constant().size() != bytes)
        return fail(where + " ('" + buffer.name() + "'): constant holds " +
                    std::to_string(buffer.constant().size()) + " bytes, its type needs " +
                    std::to_string(bytes));
      break;
    case Buffer::kInput:
      if (buffer.input() >= (uint32_t)plan_.inputs_size() ||
          !sameType(plan_.inputs(buffer.input()).type(), buffer.type()))
        return fail(where + " ('" + buffer.name() + "'): input " +
                    std::to_string(buffer.input()) + " is missing or of another type");
      break;
    case Buffer::kParameter: {
      const auto &param = buffer.parameter();
      if (param.initializer().empty())
        return fail(where + ": parameter without an initializer name");
      if (param.offset() < 0)
        return fail(where + ": negative parameter offset");
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

} // namespace dtc::runtime
