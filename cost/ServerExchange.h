//===- ServerExchange.h - a parameter-server plan's pushes and pulls -*- C++ -*-===//
//
// What a step of a --sync ps plan (plan.proto: ParameterServers) spends
// moving gradients to the servers and weights back: every worker sends
// each server its tensors' gradients, then receives their weights. Each
// rank's link carries what it sends and receives one message after
// another, within a node on the intra-node link, else on the inter-node
// one, so a server holding a share s of the bytes receives W s of them per
// step (the server bottleneck): pushes take as long as the busiest link,
// pulls likewise. For comparison, the ring (or tree) all-reduce of the same
// gradients over the workers, which moves 2 (W - 1) / W of them per rank.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COST_SERVEREXCHANGE_H
#define DTC_COST_SERVEREXCHANGE_H

#include "cost/Cluster.h"

#include "plan.pb.h"

#include <string>
#include <vector>

namespace dtc::cost {

struct ServerExchange {
  int64_t workers = 0, servers = 0;
  double pushBytes = 0, pullBytes = 0; // one worker's, a step (embeddings' rows alone)
  std::vector<double> serverBytes;     // each server's push share (one worker's bytes)
  double pushSeconds = 0, pullSeconds = 0;
  /// The slowest worker's link and the slowest server's, push and pull
  /// together (an asynchronous worker waits for its own exchange only; a
  /// server takes every worker's).
  double workerSeconds = 0, serverSeconds = 0;
  /// The link that took longest, for people: "server 1's link".
  std::string bottleneck;
  /// The same gradients all-reduced over the workers instead.
  double allReduceSeconds = 0;
};

/// The exchange of `plan`'s parameter servers on `cluster`, ranks placed on
/// nodes in rank order (workers first, then servers).
ServerExchange serverExchange(const plan::Plan &plan, const Cluster &cluster);

} // namespace dtc::cost

#endif // DTC_COST_SERVEREXCHANGE_H
