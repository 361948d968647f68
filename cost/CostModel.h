//===- CostModel.h - op and collective times on a cluster -------*- C++ -*-===//
#ifndef DTC_COST_COSTMODEL_H
#define DTC_COST_COSTMODEL_H

#include "cost/Cluster.h"

namespace dtc::cost {

/// Seconds of one instruction on `device`: the roofline
/// max(flops / (peak(dtype) * efficiency(class)), bytes / (bandwidth *
/// memory efficiency)) plus the class's startup and the launch overhead;
/// 0 for a free op. Memory time hides under compute by the device's
/// overlap (1: the max). The bytes take `streamSeconds` at full bandwidth
/// when the caller knows where they are (the simulator: which cache level
/// each operand is in), else Device::streamSeconds. An instruction another's
/// launch runs (`launched` false: GpuKernel.batched) pays no startup or
/// launch overhead of its own.
double instructionSeconds(const plan::Cost &cost, const Device &device,
                          double streamSeconds = -1, bool launched = true);

enum class Collective { AllReduce, AllGather, ReduceScatter, AllToAll, SendRecv };
enum class Algorithm { Ring, Tree };

/// Seconds of a collective among `ranks` devices over `link` (alpha-beta).
/// `bytes` is the whole tensor: what all-reduce reduces, all-gather
/// gathers, reduce-scatter scatters, all-to-all exchanges (each rank's
/// full buffer), send/recv sends.
///   ring all-reduce        2 (p-1) a + 2 (p-1)/p n/B
///   tree all-reduce        2 ceil(log2 p) a + 2 n/B   (pipelined double tree)
///   all-gather, reduce-scatter, all-to-all   (p-1) a + (p-1)/p n/B
///   send/recv              a + n/B
double collectiveSeconds(Collective kind, Algorithm algorithm, int64_t ranks, double bytes,
                         const Link &link);

/// A message of `bytes` that took `seconds` (a measurement of a link).
struct LinkSample {
  double bytes = 0, seconds = 0;
};

/// The link that best explains `samples` (at least two sizes) as
/// latency + bytes / bandwidth, by least squares on the relative error: one
/// protocol, or two (a collective takes the faster) where two lines
/// explain the samples at least twice as well (MPI's eager copies below
/// some size, its rendezvous above). Latencies are at least 1 ns.
Link fitLink(std::vector<LinkSample> samples);

/// The expected largest of `n` independent standard normal samples (0 for
/// one, 0.564 for two, 1.03 for four, 3.2 for a thousand): how far behind
/// the typical rank the slowest of n arrives, in standard deviations.
double expectedMaximum(int64_t n);

/// The faster of ring and tree for an all-reduce (NCCL picks per size too).
double allReduceSeconds(int64_t ranks, double bytes, const Link &link);

/// The ranks of a plan collective's group, and whether they share a node
/// (ranks row-major over the mesh, nodes filled in rank order).
struct CollectiveGroup {
  int64_t ranks = 1;
  bool withinNode = true;
};
CollectiveGroup collectiveGroup(const plan::Mesh &mesh, const plan::Collective &collective,
                                int64_t devicesPerNode);

/// The bytes a collective reads and writes on its own device to lay its
/// parts out for the link and back (the runtime's pack and unpack): a part
/// along a dim with elements before it is strided, and is copied once more
/// on its way to the link (reduce-scatter, all-to-all's split dim) or from
/// it (all-gather, all-to-all's concat dim). Without the input's or the
/// output's type, a dim after the first counts as strided.
double relayoutBytes(const plan::Collective &c, double inBytes, double outBytes,
                     const plan::TensorType *input = nullptr,
                     const plan::TensorType *output = nullptr);

/// What a collective's relayout copies (relayoutBytes) take on `device`:
/// 0 where the device does not pack strided parts (GPUs: activations laid
/// out so that parts are contiguous). The simulator and the sharding search
/// cost collectives' local copies by this one rule.
double relayoutSeconds(const plan::Collective &c, double inBytes, double outBytes,
                       const plan::TensorType *input, const plan::TensorType *output,
                       const Device &device);

/// Seconds of a plan's collective instruction on `cluster`: its kind among
/// its group's ranks over the link its group crosses (the slowest one),
/// and, where the device packs strided parts, its relayoutBytes streamed
/// on it (all-to-alls between split dims copy 4x their bytes locally, a
/// large share of their time on CPU ranks; a bucket's members are all
/// staged); an all-slice, which
/// communicates nothing, by its cost on the device.
double collectiveInstructionSeconds(const plan::Mesh &mesh, const plan::Instruction &inst,
                                    const Cluster &cluster,
                                    const plan::TensorType *input = nullptr,
                                    const plan::TensorType *output = nullptr);

} // namespace dtc::cost

#endif // DTC_COST_COSTMODEL_H
