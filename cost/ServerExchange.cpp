//===- ServerExchange.cpp -------------------------------------------------===//
#include "cost/ServerExchange.h"

#include "cost/CostModel.h"
#include "plan/DType.h"
#include "plan/ServerTensors.h"
#include "plan/Sharding.h"

#include <algorithm>

namespace dtc::cost {
namespace {

/// One message of `bytes` over `link`: its fastest way for one transfer.
double messageSeconds(const Link &link, double bytes) {
  double best = link.latency + bytes / link.bandwidth;
  for (const auto *list : {&link.protocols, &link.transfers})
    for (const Protocol &p : *list)
      best = std::min(best, p.latency + bytes / p.bandwidth);
  return best;
}

} // namespace

ServerExchange serverExchange(const plan::Plan &plan, const Cluster &cluster) {
  ServerExchange x;
  const plan::ParameterServers &ps = plan.training().parameter_servers();
  x.workers = plan::meshDevices(plan.mesh());
  x.servers = ps.servers();
  if (x.servers == 0)
    return x;
  x.serverBytes.assign(size_t(x.servers), 0);
  std::vector<double> pullShare(size_t(x.servers), 0);
  double dense = 0; // what an all-reduce moves: every gradient whole
  for (const plan::ServerTensor &t : ps.tensors()) {
    dense += double(plan::pushedBytes(plan, t));
    double push = double(plan::expectedPushBytes(plan, t));
    double pull = double(plan::pulledBytes(plan, t));
    x.serverBytes[t.server()] += push;
    pullShare[t.server()] += pull;
    x.pushBytes += push;
    x.pullBytes += pull;
  }
  int64_t perNode = std::max<int64_t>(1, cluster.devicesPerNode);
  auto node = [&](int64_t rank) { return rank / perNode; };
  // One direction of the exchange: each worker sends (or receives)
  // `share[k]` to (from) server k; each rank's link carries its messages
  // one after another. The slowest server's and worker's links.
  struct Phase {
    double server = 0, worker = 0;
    std::string who;
  };
  auto phase = [&](const std::vector<double> &share) {
    Phase p;
    auto between = [&](int64_t w, int64_t k) {
      bool near = node(w) == node(x.workers + k);
      return messageSeconds(near ? cluster.intraNode : cluster.interNode, share[size_t(k)]);
    };
    for (int64_t k = 0; k < x.servers; ++k) {
      double seconds = 0;
      for (int64_t w = 0; w < x.workers; ++w)
        seconds += between(w, k);
      if (seconds > p.server) {
        p.server = seconds;
        p.who = "server " + std::to_string(k) + "'s link";
      }
    }
    for (int64_t w = 0; w < x.workers; ++w) {
      double seconds = 0;
      for (int64_t k = 0; k < x.servers; ++k)
        seconds += between(w, k);
      if (seconds > p.worker) {
        p.worker = seconds;
        if (seconds > p.server)
          p.who = "worker " + std::to_string(w) + "'s link";
      }
    }
    return p;
  };
  Phase push = phase(x.serverBytes), pull = phase(pullShare);
  x.pushSeconds = std::max(push.server, push.worker);
  x.pullSeconds = std::max(pull.server, pull.worker);
  x.workerSeconds = push.worker + pull.worker;
  x.serverSeconds = push.server + pull.server;
  x.bottleneck = x.pushSeconds >= x.pullSeconds ? push.who : pull.who;
  bool crossesNodes = node(0) != node(x.workers - 1);
  x.allReduceSeconds =
      allReduceSeconds(x.workers, dense, crossesNodes ? cluster.interNode : cluster.intraNode);
  return x;
}

} // namespace dtc::cost
