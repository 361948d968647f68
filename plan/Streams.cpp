//===- Streams.cpp ---------------------------------------------------------===//
#include "plan/Streams.h"

namespace dtc::plan {

bool communicates(const Instruction &inst) {
  return (inst.has_collective() && inst.collective().kind() != ALL_SLICE) || inst.has_send() ||
         inst.has_recv();
}

Stream streamOf(const Instruction &inst, bool overlapped) {
  if (!communicates(inst))
    return Stream::Compute;
  if (inst.has_send() || inst.has_recv())
    return Stream::Transfers;
  return overlapped ? Stream::Reductions : Stream::Collectives;
}

} // namespace dtc::plan
