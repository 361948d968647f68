//===- Overlap.cpp --------------------------------------------------------===//
#include "plan/Overlap.h"

#include "plan/DType.h"

#include <algorithm>
#include <map>

namespace dtc::plan {

namespace {

/// The gradient accumulators (by offset: where their bytes end) and, per
/// accumulator, the instructions that read or write its bytes, in program
/// order: one pass over the program.
struct Accumulators {
  std::map<int64_t, int64_t> ends;
  std::map<int64_t, std::vector<uint32_t>> uses;
};

Accumulators accumulatorsOf(const RankProgram &program) {
  Accumulators a;
  std::map<int64_t, int64_t> &ends = a.ends;
  for (const Buffer &b : program.buffers())
    if (b.has_parameter() && b.parameter().accumulator())
      ends[b.offset()] = b.offset() + std::max<int64_t>(0, byteSize(b.type()));
  std::map<int64_t, std::vector<uint32_t>> &uses = a.uses;
  for (int i = 0; i < program.instructions_size(); ++i) {
    const Instruction &inst = program.instructions(i);
    for (const auto *ids : {&inst.inputs(), &inst.outputs()})
      for (uint32_t id : *ids) {
        const Buffer &b = program.buffers(int(id));
        int64_t begin = b.offset(), end = begin + std::max<int64_t>(0, byteSize(b.type()));
        // The accumulators whose bytes [begin, end) meet.
        auto it = ends.upper_bound(begin);
        if (it != ends.begin())
          --it;
        for (; it != ends.end() && it->first < end; ++it)
          if (begin < it->second) {
            std::vector<uint32_t> &list = uses[it->first];
            if (list.empty() || list.back() != uint32_t(i))
              list.push_back(uint32_t(i));
          }
      }
  }
  return a;
}

std::string problem(const RankProgram &program, const OverlappedInstruction &o,
                    const Accumulators &accumulators) {
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
  // In place, in the bytes of a gradient accumulator (the value the last
  // accumulation wrote over it).
  const Buffer &in = program.buffers(int(inst.inputs(0)));
  const Buffer &out = program.buffers(int(inst.outputs(0)));
  auto accumulator = accumulators.ends.find(in.offset());
  auto used = accumulators.uses.find(in.offset());
  if (accumulator == accumulators.ends.end() ||
      accumulator->second - in.offset() != byteSize(in.type()) || out.offset() != in.offset() ||
      used == accumulators.uses.end())
    return "only an all-reduce in place in a gradient accumulator may run early";
  const std::vector<uint32_t> &list = used->second;
  if (!std::binary_search(list.begin(), list.end(), o.after()))
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
  for (uint32_t i : list) {
    if (i < once && (i < partBegin || i > o.after()))
      return "instruction " + std::to_string(i) + " touches the accumulator outside the part " +
             "before instruction " + std::to_string(o.after());
    if (i >= once && i < o.instruction())
      return "instruction " + std::to_string(i) + " touches the accumulator before the reduction";
  }
  return "";
}

} // namespace

std::string overlapProblem(const RankProgram &program, const OverlappedInstruction &o) {
  return problem(program, o, accumulatorsOf(program));
}

std::string overlappedProblem(const RankProgram &program) {
  if (program.overlapped_size() == 0)
    return "";
  Accumulators accumulators = accumulatorsOf(program);
  std::vector<bool> seen(size_t(program.instructions_size()), false);
  for (const OverlappedInstruction &o : program.overlapped()) {
    std::string why = problem(program, o, accumulators);
    if (!why.empty())
      return "overlapped instruction " + std::to_string(o.instruction()) + ": " + why;
    if (seen[o.instruction()])
      return "instruction " + std::to_string(o.instruction()) + " is overlapped twice";
    seen[o.instruction()] = true;
  }
  return "";
}

std::vector<OverlappedInstruction> overlappableReductions(const RankProgram &program) {
  std::vector<OverlappedInstruction> found;
  Accumulators accumulators = accumulatorsOf(program);
  uint32_t once = program.accumulate_end();
  for (uint32_t i = once; i < uint32_t(program.instructions_size()); ++i) {
    const Instruction &inst = program.instructions(int(i));
    if (!inst.has_collective() || inst.collective().kind() != ALL_REDUCE ||
        inst.inputs_size() != 1)
      continue;
    // After the last per-micro-batch instruction that touches the accumulator.
    auto used = accumulators.uses.find(program.buffers(int(inst.inputs(0))).offset());
    if (used == accumulators.uses.end())
      continue;
    auto last = std::lower_bound(used->second.begin(), used->second.end(), once);
    if (last == used->second.begin())
      continue;
    OverlappedInstruction o;
    o.set_instruction(i);
    o.set_after(*std::prev(last));
    if (problem(program, o, accumulators).empty())
      found.push_back(o);
  }
  return found;
}

} // namespace dtc::plan
