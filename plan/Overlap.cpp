//===- Overlap.cpp --------------------------------------------------------===//
#include "plan/Overlap.h"

#include "plan/DType.h"

#include <algorithm>

namespace dtc::plan {

namespace {

/// Whether instruction `inst` reads or writes bytes [begin, end).
bool touches(const RankProgram &program, const Instruction &inst, int64_t begin, int64_t end) {
  for (const auto *ids : {&inst.inputs(), &inst.outputs()})
    for (uint32_t id : *ids) {
      const Buffer &b = program.buffers(int(id));
      int64_t bytes = std::max<int64_t>(0, byteSize(b.type()));
      if (b.offset() < end && begin < b.offset() + bytes)
        return true;
    }
  return false;
}

} // namespace

std::string overlapProblem(const RankProgram &program, const OverlappedInstruction &o) {
  uint32_t count = uint32_t(program.instructions_size()), once = program.accumulate_end();
  if (o.instruction() < once || o.instruction() >= count)
    return "instruction " + std::to_string(o.instruction()) +
           " is not in the once-per-step part [" + std::to_string(once) + ", " +
           std::to_string(count) + ")";
  if (o.after() >= once)
    return "runs after instruction " + std::to_string(o.after()) +
           ", which is not in the per-micro-batch part";
  const Instruction &inst = program.instructions(int(o.instruction()));
  if (!inst.has_collective() || inst.collective().kind() != ALL_REDUCE ||
      inst.inputs_size() != 1 || inst.outputs_size() != 1)
    return "only an all-reduce may run early";
  const Buffer &in = program.buffers(int(inst.inputs(0)));
  const Buffer &out = program.buffers(int(inst.outputs(0)));
  // In place, in the bytes of a gradient accumulator (the value the last
  // accumulation wrote over it).
  bool inAccumulator = false;
  for (const Buffer &b : program.buffers())
    inAccumulator = inAccumulator || (b.has_parameter() && b.parameter().accumulator() &&
                                      b.offset() == in.offset() &&
                                      byteSize(b.type()) == byteSize(in.type()));
  if (!inAccumulator || out.offset() != in.offset())
    return "only an all-reduce in place in a gradient accumulator may run early";
  int64_t begin = in.offset(), end = begin + std::max<int64_t>(0, byteSize(in.type()));
  if (!touches(program, program.instructions(int(o.after())), begin, end))
    return "instruction " + std::to_string(o.after()) + " does not write the accumulator";
  // Of the per-micro-batch instructions only `after`'s part, up to it,
  // touches the accumulator: the last micro-batch's run of that part is
  // then the last to.
  uint32_t partBegin = 0;
  for (uint32_t e : program.part_ends())
    if (e <= o.after())
      partBegin = std::max(partBegin, e);
  if (program.forward_end() <= o.after())
    partBegin = std::max(partBegin, program.forward_end());
  for (uint32_t i = 0; i < once; ++i)
    if ((i < partBegin || i > o.after()) &&
        touches(program, program.instructions(int(i)), begin, end))
      return "instruction " + std::to_string(i) + " touches the accumulator outside the part " +
             "before instruction " + std::to_string(o.after());
  for (uint32_t i = once; i < o.instruction(); ++i)
    if (touches(program, program.instructions(int(i)), begin, end))
      return "instruction " + std::to_string(i) + " touches the accumulator before the reduction";
  return "";
}

std::vector<OverlappedInstruction> overlappableReductions(const RankProgram &program) {
  std::vector<OverlappedInstruction> found;
  uint32_t once = program.accumulate_end();
  for (uint32_t i = once; i < uint32_t(program.instructions_size()); ++i) {
    const Instruction &inst = program.instructions(int(i));
    if (!inst.has_collective() || inst.collective().kind() != ALL_REDUCE ||
        inst.inputs_size() != 1)
      continue;
    const Buffer &in = program.buffers(int(inst.inputs(0)));
    int64_t begin = in.offset(), end = begin + std::max<int64_t>(0, byteSize(in.type()));
    // The last per-micro-batch instruction that touches the accumulator.
    for (uint32_t j = once; j-- > 0;)
      if (touches(program, program.instructions(int(j)), begin, end)) {
        OverlappedInstruction o;
        o.set_instruction(i);
        o.set_after(j);
        if (overlapProblem(program, o).empty())
          found.push_back(o);
        break;
      }
  }
  return found;
}

} // namespace dtc::plan
