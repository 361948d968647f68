//===- CostModel.cpp -------------------------------------------------------===//
#include "cost/CostModel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>

namespace dtc::cost {

double instructionSeconds(const plan::Cost &cost, const Device &device, double streamSeconds,
                          bool launched) {
  if (cost.op_class() == plan::OP_CLASS_INVALID)
    return 0;
  double efficiency = device.efficiency[cost.op_class()];
  double compute = cost.flops() / (device.peak(cost.dtype()) * efficiency);
  if (streamSeconds < 0)
    streamSeconds = device.streamSeconds(double(cost.bytes()));
  double memory =
      streamSeconds / (device.memoryEfficiency * device.memoryShare(cost.op_class()));
  return std::max(compute, memory) + (1 - device.overlap) * std::min(compute, memory) +
         (launched ? device.classStartup[cost.op_class()] + device.launchOverhead : 0);
}

namespace {

double protocolSeconds(Collective kind, Algorithm algorithm, int64_t ranks, double bytes,
                       const Protocol &link) {
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

} // namespace

double collectiveSeconds(Collective kind, Algorithm algorithm, int64_t ranks, double bytes,
                         const Link &link) {
  if (ranks <= 1 && kind != Collective::SendRecv)
    return 0;
  // A transfer takes the link's transfer protocols where it has any; the
  // rest take its collective ones.
  double fastest = std::numeric_limits<double>::infinity();
  auto consider = [&](const Protocol &way) {
    fastest = std::min(fastest, protocolSeconds(kind, algorithm, ranks, bytes, way));
  };
  if (kind == Collective::SendRecv && !link.transfers.empty()) {
    std::for_each(link.transfers.begin(), link.transfers.end(), consider);
  } else {
    consider(link);
    std::for_each(link.protocols.begin(), link.protocols.end(), consider);
  }
  return fastest;
}

double allReduceSeconds(int64_t ranks, double bytes, const Link &link) {
  return std::min(collectiveSeconds(Collective::AllReduce, Algorithm::Ring, ranks, bytes, link),
                  collectiveSeconds(Collective::AllReduce, Algorithm::Tree, ranks, bytes, link));
}

namespace {

/// The line through `samples` by least squares on the relative error;
/// false when its slope is not positive (no bandwidth).
bool fitProtocol(const LinkSample *begin, const LinkSample *end, Protocol &p) {
  // Minimise sum ((a + b n - t) / t)^2 over a and b.
  double s00 = 0, s01 = 0, s11 = 0, r0 = 0, r1 = 0;
  for (const LinkSample *s = begin; s != end; ++s) {
    double w = 1 / (s->seconds * s->seconds);
    s00 += w, s01 += w * s->bytes, s11 += w * s->bytes * s->bytes;
    r0 += w * s->seconds, r1 += w * s->bytes * s->seconds;
  }
  double det = s00 * s11 - s01 * s01;
  if (!(det > 0))
    return false;
  double a = (r0 * s11 - r1 * s01) / det, b = (s00 * r1 - s01 * r0) / det;
  if (a < 1e-9) { // no negative latency: refit the slope alone at 1 ns
    a = 1e-9;
    b = (r1 - a * s01) / s11;
  }
  if (!(b > 0))
    return false;
  p = {a, 1 / b};
  return true;
}

double relativeError(const std::vector<LinkSample> &samples, const Link &link) {
  double sum = 0;
  for (const LinkSample &s : samples) {
    double e = collectiveSeconds(Collective::SendRecv, Algorithm::Ring, 2, s.bytes, link) /
                   s.seconds - 1;
    sum += e * e;
  }
  return sum;
}

} // namespace

double expectedMaximum(int64_t n) {
  if (n <= 1)
    return 0;
  static std::mutex lock;
  static std::map<int64_t, double> known;
  std::lock_guard<std::mutex> hold(lock);
  auto [at, added] = known.try_emplace(n, 0.0);
  if (!added)
    return at->second;
  // E[max] = integral of x n phi(x) Phi(x)^(n-1) dx, by the midpoint rule.
  const double step = 1e-3, pi = 3.14159265358979323846;
  double sum = 0;
  for (double x = -10 + step / 2; x < 10; x += step) {
    double phi = std::exp(-x * x / 2) / std::sqrt(2 * pi);
    double Phi = 0.5 * std::erfc(-x / std::sqrt(2.0));
    sum += x * double(n) * phi * std::pow(Phi, double(n - 1)) * step;
  }
  return at->second = sum;
}

Link fitLink(std::vector<LinkSample> samples) {
  std::sort(samples.begin(), samples.end(),
            [](const LinkSample &a, const LinkSample &b) { return a.bytes < b.bytes; });
  const LinkSample *first = samples.data(), *last = first + samples.size();
  Link best;
  Protocol p;
  if (!fitProtocol(first, last, p)) // one protocol: the largest message's rate
    p = {std::max(1e-9, first->seconds), last->bytes / last->seconds};
  static_cast<Protocol &>(best) = p;
  double bestError = relativeError(samples, best);
  double one = bestError;
  // Two protocols: the small messages' line and the large ones', each
  // through at least two sizes.
  for (size_t split = 2; split + 2 <= samples.size(); ++split) {
    Protocol small, large;
    if (!fitProtocol(first, first + split, small) || !fitProtocol(first + split, last, large))
      continue;
    Link two(small.latency, small.bandwidth);
    two.protocols = {large};
    double error = relativeError(samples, two);
    if (error < bestError && error * 2 <= one) {
      best = two;
      bestError = error;
    }
  }
  return best;
}

CollectiveGroup collectiveGroup(const plan::Mesh &mesh, const plan::Collective &collective,
                                int64_t devicesPerNode) {
  // Rank 0's group: coordinates 0 except on the group's axes. Its highest
  // rank decides whether it leaves the first node.
  CollectiveGroup group;
  int64_t highest = 0;
  // A range of one axis' coordinates (a replicated stage's replicas).
  if (collective.has_coordinates() && collective.mesh_axes_size() == 1 &&
      collective.mesh_axes(0) < uint32_t(mesh.axes_size())) {
    int64_t stride = 1;
    for (int a = mesh.axes_size() - 1; a > int(collective.mesh_axes(0)); --a)
      stride *= mesh.axes(a).size();
    group.ranks = collective.coordinates().count();
    // Its ranks span (count - 1) strides: within a node when that is less
    // than one node's devices, wherever the range starts on the node.
    group.withinNode = (group.ranks - 1) * stride < devicesPerNode &&
                       collective.coordinates().first() * stride / devicesPerNode ==
                           (collective.coordinates().first() + group.ranks - 1) * stride /
                               devicesPerNode;
    return group;
  }
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

namespace {

/// The elements before dim `axis` of `type`; 2 (some) without a type and
/// axis > 0.
int64_t elementsBefore(const plan::TensorType *type, int64_t axis) {
  if (!type)
    return axis > 0 ? 2 : 1;
  int64_t n = 1;
  for (int d = 0; d < type->shape_size() && d < axis; ++d)
    n *= type->shape(d);
  return n;
}

} // namespace

double relayoutBytes(const plan::Collective &c, double inBytes, double outBytes,
                     const plan::TensorType *input, const plan::TensorType *output) {
  // A part along a dim with anything before it is strided: read and
  // written once more on its way to or from the link.
  bool packs = elementsBefore(input, c.axis()) > 1;
  switch (c.kind()) {
  case plan::ALL_GATHER:
    return elementsBefore(output, c.axis()) > 1 ? 2 * outBytes : 0;
  case plan::REDUCE_SCATTER:
    return packs ? 2 * inBytes : 0;
  case plan::ALL_TO_ALL:
    return (packs ? 2 * inBytes : 0) +
           (elementsBefore(output, c.concat_axis()) > 1 ? 2 * outBytes : 0);
  default:
    return 0;
  }
}

double relayoutSeconds(const plan::Collective &c, double inBytes, double outBytes,
                       const plan::TensorType *input, const plan::TensorType *output,
                       const Device &device) {
  if (!device.packsStridedParts)
    return 0;
  return device.streamSeconds(relayoutBytes(c, inBytes, outBytes, input, output)) /
         device.memoryEfficiency;
}

double collectiveInstructionSeconds(const plan::Mesh &mesh, const plan::Instruction &inst,
                                    const Cluster &cluster, const plan::TensorType *input,
                                    const plan::TensorType *output) {
  const plan::Collective &c = inst.collective();
  CollectiveGroup group = collectiveGroup(mesh, c, cluster.devicesPerNode);
  const Link &link = group.withinNode ? cluster.intraNode : cluster.interNode;
  double local = inst.cost().bytes(), p = double(group.ranks);
  double outBytes = c.kind() == plan::ALL_GATHER       ? local * p
                    : c.kind() == plan::REDUCE_SCATTER ? local / p
                                                       : local;
  double copies =
      group.ranks > 1 ? relayoutSeconds(c, local, outBytes, input, output, cluster.device) : 0;
  // A bucket's members go through one staging buffer each way where the
  // device packs parts (the CPU runtime); on a GPU each is NCCL's own.
  if (inst.inputs_size() > 1)
    copies = group.ranks > 1 && cluster.device.packsStridedParts
                 ? cluster.device.streamSeconds(2 * (local + outBytes)) /
                       cluster.device.memoryEfficiency
                 : 0;
  switch (c.kind()) {
  case plan::ALL_REDUCE:
    return allReduceSeconds(group.ranks, local, link);
  case plan::ALL_GATHER: // the whole gathered tensor
    return collectiveSeconds(Collective::AllGather, Algorithm::Ring, group.ranks, outBytes, link) +
           copies;
  case plan::REDUCE_SCATTER:
    return collectiveSeconds(Collective::ReduceScatter, Algorithm::Ring, group.ranks, local,
                             link) +
           copies;
  case plan::ALL_TO_ALL:
    return collectiveSeconds(Collective::AllToAll, Algorithm::Ring, group.ranks, local, link) +
           copies;
  case plan::ALL_SLICE: // no communication: the copy of the rank's part
    return instructionSeconds(inst.cost(), cluster.device);
  default:
    return 0;
  }
}

} // namespace dtc::cost
