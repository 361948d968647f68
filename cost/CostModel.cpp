//===- CostModel.cpp -------------------------------------------------------===//
#include "cost/CostModel.h"

#include <algorithm>
#include <cmath>

namespace dtc::cost {

double instructionSeconds(const plan::Cost &cost, const Device &device, double streamSeconds) {
  if (cost.op_class() == plan::OP_CLASS_INVALID)
    return 0;
  double efficiency = device.efficiency[cost.op_class()];
  double compute = cost.flops() / (device.peak(cost.dtype()) * efficiency);
  if (streamSeconds < 0)
    streamSeconds = device.streamSeconds(double(cost.bytes()));
  double memory =
      streamSeconds / (device.memoryEfficiency * device.memoryShare(cost.op_class()));
  return std::max(compute, memory) + (1 - device.overlap) * std::min(compute, memory) +
         device.classStartup[cost.op_class()] + device.launchOverhead;
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

CollectiveGroup collectiveGroup(const plan::Mesh &mesh, const plan::Collective &collective,
                                int64_t devicesPerNode) {
  // Rank 0's group: coordinates 0 except on the group's axes. Its highest
  // rank decides whether it leaves the first node.
  CollectiveGroup group;
  int64_t highest = 0;
  for (uint32_t axis : collective.mesh_axes()) {
    if (axis >= uint32_t(mesh.axes_size()))
      continue;
    int64_t stride = 1;
    for (int a = mesh.axes_size() - 1; a > int(axis); --a)
      stride *= mesh.axes(a).size();
    group.ranks *= mesh.axes(int(axis)).size();
    highest += (mesh.axes(int(axis)).size() - 1) * stride;
  }
  group.withinNode = highest < devicesPerNode;
  return group;
}

double collectiveInstructionSeconds(const plan::Mesh &mesh, const plan::Instruction &inst,
                                    const Cluster &cluster) {
  const plan::Collective &c = inst.collective();
  CollectiveGroup group = collectiveGroup(mesh, c, cluster.devicesPerNode);
  const Link &link = group.withinNode ? cluster.intraNode : cluster.interNode;
  double local = inst.cost().bytes(), p = double(group.ranks);
  switch (c.kind()) {
  case plan::ALL_REDUCE:
    return allReduceSeconds(group.ranks, local, link);
  case plan::ALL_GATHER: // the whole gathered tensor
    return collectiveSeconds(Collective::AllGather, Algorithm::Ring, group.ranks, local * p, link);
  case plan::REDUCE_SCATTER:
    return collectiveSeconds(Collective::ReduceScatter, Algorithm::Ring, group.ranks, local, link);
  case plan::ALL_TO_ALL:
    return collectiveSeconds(Collective::AllToAll, Algorithm::Ring, group.ranks, local, link);
  case plan::ALL_SLICE: // no communication: the copy of the rank's part
    return instructionSeconds(inst.cost(), cluster.device);
  default:
    return 0;
  }
}

} // namespace dtc::cost
