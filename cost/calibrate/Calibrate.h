//===- Calibrate.h - measuring this machine for the cost model --*- C++ -*-===//
//
// What `dtc calibrate` measures, as a library: one core with the kernels
// plans run (runtime/cpu): sgemm rate at a few shapes, a convolution's
// rate, the memory bandwidth of a large elementwise kernel, the per-kernel
// floor, cache levels, the elementwise rate, the overlap of memory and
// compute, the classes' shares and small kernels' startup; and the link
// between ranks (dtc's all-gathers and transfers, timed as a step meets
// them) and their jitter. The command starts the ranks and writes the
// cluster file (docs/cluster.md). Unlike the rest of cost/, this links the
// runtime's kernels and communicators: it runs them.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COST_CALIBRATE_CALIBRATE_H
#define DTC_COST_CALIBRATE_CALIBRATE_H

#include "cost/Cluster.h"
#include "runtime/comm/Communicator.h"

#include <functional>
#include <string>

namespace dtc::cost::calibrate {

/// A line of progress for people ("  sgemm 512x512x512: 61.2 GFLOP/s").
using Say = std::function<void(const std::string &line)>;

/// Measures one core of this machine into `cluster.device` (and its cores
/// and memory per core into `cluster`); `quick` takes fewer, smaller
/// measurements. False with `error` when the kernels cannot be timed.
bool calibrateDevice(Cluster &cluster, bool quick, const Say &say, std::string &error);

struct LinkMeasurement {
  Link link;         // all-gathers' protocols, and transfers' (link.transfers)
  double jitter = 0; // how late the last rank reaches a collective, per unit of work
};

/// Every rank of `world` (at least two, one per core) calls this together:
/// all-gathers of 4 bytes to 4 MiB per rank after a step's worth of work,
/// and transfers of the same sizes from rank 0 to rank 1. Rank 0 fits
/// `out` (cost::fitLink). False with `error` when a collective fails.
bool measureLinks(runtime::Communicator &world, bool quick, LinkMeasurement &out,
                  std::string &error);

} // namespace dtc::cost::calibrate

#endif // DTC_COST_CALIBRATE_CALIBRATE_H
