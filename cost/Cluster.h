//===- Cluster.h - the devices and links a plan runs on ---------*- C++ -*-===//
//
// A cluster is one device kind repeated over nodes, with a link level
// inside a node and one across nodes. It is read from a JSON cluster file
// (docs/cluster.md) or taken from a preset; every figure is checked, and
// a bad one is named in the message.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COST_CLUSTER_H
#define DTC_COST_CLUSTER_H

#include "plan.pb.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtc::cost {

/// Per-op-class arrays are indexed by plan::OpClass; slot 0
/// (OP_CLASS_INVALID, free ops) stays unused. The compute classes
/// [kFirstOpClass, kComputeClassEnd) have an efficiency in cluster files;
/// OP_COMMUNICATION is timed by the links.
constexpr int kOpClassSlots = plan::OpClass_ARRAYSIZE;
constexpr int kFirstOpClass = plan::OP_MATMUL;
constexpr int kComputeClassEnd = plan::OP_COMMUNICATION;
/// "matmul", "data_movement": the cluster file's name of an op class.
const char *opClassName(plan::OpClass c);

struct Device {
  std::string kind;
  std::map<std::string, double> peakFlops; // per dtype name ("f32", "bf16", ...)
  double memoryBandwidth = 0;              // bytes/s
  double memoryEfficiency = 0;             // of the bandwidth, reached by kernels
  double memoryCapacity = 0;               // bytes
  // Bytes the runtime holds on a device beside the plan's buffers: on a
  // GPU the CUDA context, the libraries' workspace, NCCL's buffers and the
  // kernels' modules (docs/cluster.md); plans are made for the rest.
  double memoryReserved = 0;
  double planMemory() const { return memoryCapacity - memoryReserved; }
  double launchOverhead = 0;               // seconds per kernel
  double efficiency[kOpClassSlots] = {};   // of peak FLOP/s, per op class
  // Per op class, the share of memory_efficiency its memory-bound kernels
  // reach (strided reductions, pooling gradients run below a plain
  // elementwise kernel); 0: unset, counted as 1.
  double classMemoryEfficiency[kOpClassSlots] = {};
  // Per op class, seconds each kernel takes beyond its roofline time
  // (Hockney's n1/2 / r_inf: a GEMM's packing and blocking make small
  // products run below the class's rate by about a fixed time); 0: none.
  double classStartup[kOpClassSlots] = {};
  // Cache levels in front of memory, smallest first (a CPU core's L2 and
  // its share of L3; none on the GPU presets). A kernel reads an operand
  // from the smallest level that holds everything touched since it was
  // last touched (the simulator tracks that); without that history, the
  // first level's bytes stream from it, the next level's from that, and
  // so on (docs/cluster.md says why).
  struct CacheLevel {
    double bytes = 0, bandwidth = 0;
  };
  std::vector<CacheLevel> caches;
  // How much of a kernel's memory time hides under its compute time (1:
  // the roofline's max, as on GPUs; 0: the sum, as a CPU core that loads
  // a block and then computes on it).
  double overlap = 1;
  // Whether collectives and transfers run on a stream of their own beside
  // the kernels (GPUs: NCCL's stream), or inline on the rank's one thread
  // (dtc's CPU runtime: a blocking MPI call between two kernels).
  bool communicationStream = true;
  // Whether the runtime copies a collective's strided parts into a
  // contiguous buffer on the way to the link and back (dtc's CPU runtime:
  // cost::relayoutBytes); false where activations are laid out so that
  // they are contiguous (the GPU presets: Megatron-LM's [sequence, batch,
  // hidden] gathers and scatters along its first dim).
  bool packsStridedParts = false;
  // How much a rank's compute time varies, as a share of it (the standard
  // deviation of a stretch of kernels over its length): the OS and the
  // hardware's noise. Ranks that meet at a collective wait for the slowest.
  double jitter = 0;

  double memoryShare(plan::OpClass c) const {
    return classMemoryEfficiency[c] > 0 ? classMemoryEfficiency[c] : 1.0;
  }

  /// Seconds to move `bytes` at the full bandwidths (before efficiencies)
  /// when nothing says where they are: each level's bytes from it, the
  /// rest from memory.
  double streamSeconds(double bytes) const {
    double seconds = 0, below = 0;
    for (const CacheLevel &level : caches) {
      double here = std::clamp(bytes - below, 0.0, level.bytes - below);
      seconds += here / level.bandwidth;
      below = std::max(below, level.bytes);
    }
    return seconds + std::max(bytes - below, 0.0) / memoryBandwidth;
  }
  /// The bandwidth bytes come at when `reuseBytes` were touched since they
  /// were: the smallest level that holds that many, else memory's.
  double bandwidthAfter(double reuseBytes) const {
    for (const CacheLevel &level : caches)
      if (reuseBytes <= level.bytes)
        return level.bandwidth;
    return memoryBandwidth;
  }

  /// Peak FLOP/s for a compute dtype; f32's where the dtype has no entry
  /// (integer kernels, f64 on a device that lists none).
  double peak(plan::DType dtype) const;
};

/// One way a link carries a message: n bytes take latency + n / bandwidth.
struct Protocol {
  double latency = 0;   // seconds (alpha)
  double bandwidth = 0; // bytes/s per device and direction (1 / beta)
};

/// One level of links: a protocol, and optionally further ones (MPI's eager
/// copies and its rendezvous, NCCL's LL and Simple: a low latency for small
/// messages, a high bandwidth for large); a collective takes the fastest.
/// A transfer (send/recv between two ranks) takes the fastest of
/// `transfers` where there are any: ranks that share memory copy a
/// collective's parts all at once, and one copy alone is faster.
struct Link : Protocol {
  std::vector<Protocol> protocols; // beyond the first; may be empty
  std::vector<Protocol> transfers; // empty: transfers as collectives
  Link() = default;
  Link(double latency, double bandwidth) : Protocol{latency, bandwidth} {}
};

struct Cluster {
  std::string name;
  Device device;
  int64_t devicesPerNode = 0, nodes = 0;
  Link intraNode, interNode;

  int64_t devices() const { return devicesPerNode * nodes; }
};

/// Parses and checks a cluster file's JSON; on failure returns nothing and
/// `error` names the field ("device.peak_flops.f32 must be positive").
std::optional<Cluster> parseCluster(const std::string &json, std::string &error);
std::optional<Cluster> loadCluster(const std::string &path, std::string &error);

/// The presets' names, and one as a cluster (or nothing if unknown).
std::vector<std::string> presetNames();
std::optional<Cluster> preset(const std::string &name, std::string &error);
/// A preset's JSON text, as a starting point for a cluster file.
std::optional<std::string> presetJson(const std::string &name);

/// The cluster as JSON, in the cluster-file format.
std::string toJson(const Cluster &cluster);

} // namespace dtc::cost

#endif // DTC_COST_CLUSTER_H
