//===- CostModel.cpp -------------------------------------------------------===//
#include "cost/CostModel.h"

#include <algorithm>
#include <cmath>

namespace dtc::cost {

double instructionSeconds(const plan::Cost &cost, const Device &device) {
  if (cost.op_class() == plan::OP_CLASS_INVALID)
    return 0;
  double efficiency = device.efficiency[cost.op_class()];
  double compute = cost.flops() / (device.peak(cost.dtype()) * efficiency);
  double memory = cost.bytes() / (device.memoryBandwidth * device.memoryEfficiency);
  return std::max(compute, memory) + device.launchOverhead;
}

double collectiveSeconds(Collective kind, Algorithm algorithm, int64_t ranks, double bytes,
                         const Link &link) {
  if (ranks <= 1 && kind != Collective::SendRecv)
    return 0;
  double p = double(ranks), a = link.latency, perByte = 1.0 / link.bandwidth;
  switch (kind) {
  case Collective::AllReduce:
    if (algorithm == Algorithm::Tree)
      return 2 * std::ceil(std::log2(p)) * a + 2 * bytes * perByte;
    return 2 * (p - 1) * a + 2 * (p - 1) / p * bytes * perByte;
  case Collective::AllGather:
  case Collective::ReduceScatter:
  case Collective::AllToAll:
    return (p - 1) * a + (p - 1) / p * bytes * perByte;
  case Collective::SendRecv:
    return a + bytes * perByte;
  }
  return 0;
}

double allReduceSeconds(int64_t ranks, double bytes, const Link &link) {
  return std::min(collectiveSeconds(Collective::AllReduce, Algorithm::Ring, ranks, bytes, link),
                  collectiveSeconds(Collective::AllReduce, Algorithm::Tree, ranks, bytes, link));
}

} // namespace dtc::cost
