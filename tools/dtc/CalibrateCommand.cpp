//===- CalibrateCommand.cpp - dtc calibrate --------------------------------===//
//
// Measures this machine (cost/calibrate: one core with the kernels plans
// run, and the link between ranks, started here through mpirun and bound to
// cores as the runtime's ranks are) and writes a cluster file
// (docs/cluster.md).
//
//===----------------------------------------------------------------------===//
#include "tools/dtc/Commands.h"
#include "tools/dtc/OptionParser.h"

#include "tools/dtc/RankLauncher.h"

#include "cost/Cluster.h"
#include "cost/calibrate/Calibrate.h"
#include "runtime/comm/MpiCommunicator.h"
#include "runtime/comm/RankJob.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <unistd.h>

namespace dtc::cli {
namespace {

/// One rank of the link measurement (dtc calibrate --links-rank FILE, under
/// mpirun, each rank bound to a core as plans' ranks are); rank 0 writes
/// the fit to FILE: the jitter, then "c latency bandwidth" per protocol and
/// "t latency bandwidth" per transfer protocol.
int measureLinksAsRank(const std::string &file, bool quick) {
  std::string error;
  std::unique_ptr<runtime::MpiSession> session = runtime::MpiSession::start(error);
  std::unique_ptr<runtime::Communicator> world =
      session ? runtime::worldCommunicator(error) : nullptr;
  int nodeRank = 0, nodeSize = 1;
  if (!world || !runtime::MpiSession::placeOnNode(nodeRank, nodeSize, error))
    return failure("calibrate: MPI did not start: " + error);
  runtime::bindToCores(nodeRank, nodeSize, 1);
  cost::calibrate::LinkMeasurement measured;
  if (!cost::calibrate::measureLinks(*world, quick, measured, error))
    session->abortJob(failure(error));
  if (world->rank() != 0)
    return 0;
  std::ofstream out(file);
  out << fmt::format("{:.9g}\n", measured.jitter);
  const cost::Link &link = measured.link;
  out << fmt::format("c {:.9g} {:.9g}\n", link.latency, link.bandwidth);
  for (const cost::Protocol &more : link.protocols)
    out << fmt::format("c {:.9g} {:.9g}\n", more.latency, more.bandwidth);
  for (const cost::Protocol &transfer : link.transfers)
    out << fmt::format("t {:.9g} {:.9g}\n", transfer.latency, transfer.bandwidth);
  return out ? 0 : failure("calibrate: cannot write " + file);
}

/// Measures the link between local ranks (one per core, at least two) and
/// their jitter by running this command's rank half under mpirun; false
/// with `why` when it cannot (no mpirun, MPI failed), which leaves
/// cpu-local's link.
bool measureLinks(int64_t ranks, bool quick, cost::Link &link, double &jitter,
                  std::string &why) {
  char name[] = "/tmp/dtc-calibrate-XXXXXX";
  int fd = ::mkstemp(name);
  if (fd < 0) {
    why = "cannot make a temporary file";
    return false;
  }
  ::close(fd);
  Args args = {"calibrate", "--links-rank", name};
  if (quick)
    args.push_back("--quick");
  int status = runUnderMpirun(ranks, args, why);
  std::ifstream in(name);
  bool read = status == 0 && (in >> jitter) && jitter >= 0;
  link = {};
  std::string what;
  double latency = 0, bandwidth = 0;
  while (read && in >> what >> latency >> bandwidth && latency > 0 && bandwidth > 0) {
    if (what == "c" && link.bandwidth <= 0)
      link = {latency, bandwidth};
    else
      (what == "c" ? link.protocols : link.transfers).push_back({latency, bandwidth});
  }
  read = read && link.bandwidth > 0 && !link.transfers.empty();
  std::remove(name);
  if (!read && why.empty())
    why = "mpirun exited with status " + std::to_string(status);
  return read;
}

} // namespace

int runCalibrate(const Args &args) {
  std::string output = "-", linksRank, stray;
  bool quick = false, links = true;
  OptionParser parser("calibrate", "argument", stray);
  parser.text("-o", output);
  parser.text("--links-rank", linksRank); // internal: one rank of the link measurement
  parser.flag("--quick", quick);
  parser.flag("--no-links", [&] { links = false; });
  if (int rc = parser.parse(args))
    return rc;
  if (!stray.empty())
    return usageError("calibrate takes no arguments, got '" + stray + "'");
  if (!linksRank.empty())
    return measureLinksAsRank(linksRank, quick);
  auto say = [&](const std::string &line) {
    // Progress goes to stderr when the cluster file goes to stdout.
    if (output == "-")
      fmt::print(stderr, "{}\n", line);
    else
      fmt::print("{}\n", line);
  };
  std::string error;
  cost::Cluster c = *cost::preset("cpu-local", error);
  c.name = "cpu-local";
  c.device.kind = "CPU core (calibrated by dtc calibrate)";
  if (!cost::calibrate::calibrateDevice(c, quick, say, error))
    return failure(error);
  unsigned cores = unsigned(c.devicesPerNode);
  if (links) {
    int64_t ranks = std::max<int64_t>(2, cores);
    std::string why;
    cost::Link measured;
    double jitter = 0;
    if (measureLinks(ranks, quick, measured, jitter, why)) {
      c.intraNode = measured;
      c.device.jitter = jitter;
      // A protocol's line, then each further one's from where it is faster.
      auto describe = [](const std::vector<cost::Protocol> &ways) {
        std::string line = fmt::format("latency {:.2f} us, bandwidth {:.2f} GB/s",
                                       ways[0].latency * 1e6, ways[0].bandwidth / 1e9);
        for (size_t i = 1; i < ways.size(); ++i) {
          double from = (ways[i].latency - ways[0].latency) /
                        (1 / ways[0].bandwidth - 1 / ways[i].bandwidth);
          line += fmt::format("; beyond {:.0f} KiB, latency {:.2f} us, bandwidth {:.2f} GB/s",
                              from / 1024, ways[i].latency * 1e6, ways[i].bandwidth / 1e9);
        }
        return line;
      };
      std::vector<cost::Protocol> ways = {measured};
      ways.insert(ways.end(), measured.protocols.begin(), measured.protocols.end());
      say(fmt::format("  link between ranks (all-gathers of 4 B to 4 MiB per rank after some "
                      "work, {} ranks): {}",
                      ranks, describe(ways)));
      say(fmt::format("  transfers (one rank's 4 B to 4 MiB to another, waiting): {}",
                      describe(measured.transfers)));
      say(fmt::format("  jitter: {:.2f}% (how late the last of {} ranks reaches a collective, "
                      "against the work before it)",
                      jitter * 100, ranks));
    } else {
      say("  link between ranks: not measured (" + why + "); cpu-local's kept");
    }
  } else {
    say("  link between ranks: cpu-local's (--no-links)");
  }
  std::optional<cost::Cluster> check = cost::parseCluster(cost::toJson(c), error);
  if (!check)
    return failure("calibrate measured something impossible: " + error);
  if (int status = writeOutput(output, cost::toJson(c) + "\n"))
    return status;
  if (output != "-")
    say("wrote " + output + " (use it with dtc simulate --cluster " + output + ")");
  return 0;
}

} // namespace dtc::cli
