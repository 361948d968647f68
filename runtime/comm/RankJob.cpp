//===- RankJob.cpp --------------------------------------------------------===//
#include "runtime/comm/RankJob.h"

#include "plan/Ranks.h"
#include "plan/Sharding.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sched.h>
#include <thread>
#include <unistd.h>

namespace dtc::runtime {
namespace {

/// How long a failing rank waits for the others to fail too before it
/// ends the job alone.
constexpr double kFailureWaitSeconds = 3;

/// "error: RANK: rest" for "error: rest" (and "dtc: ..."), the rank's name
/// after the severity, as dtc names ranks in its messages.
std::string prefixRank(const std::string &line, const std::string &who) {
  for (const char *head : {"error: ", "dtc: ", "warning: "})
    if (line.rfind(head, 0) == 0)
      return head + who + ": " + line.substr(std::strlen(head));
  return who + ": " + line;
}
std::string prefixRank(const std::string &line, int rank) {
  return prefixRank(line, "rank " + std::to_string(rank));
}

} // namespace

std::unique_ptr<RankJob> RankJob::join(const plan::Plan &plan, std::string &error) {
  std::unique_ptr<RankJob> job(new RankJob);
  job->session_ = MpiSession::start(error);
  if (job->session_)
    job->world_ = worldCommunicator(error);
  if (!job->world_)
    return nullptr;
  std::vector<int64_t> mesh = plan::meshAxisSizes(plan.mesh());
  int64_t devices = plan::meshDevices(plan.mesh());
  int64_t servers = plan.training().parameter_servers().servers();
  if (devices + servers != job->size()) {
    // Every rank finds this; one message is enough.
    std::string servedBy = servers ? fmt::format(" and {} parameter server{}", servers,
                                                 servers == 1 ? "" : "s")
                                   : "";
    error = job->rank() != 0 ? ""
                             : fmt::format("the plan is for {} (mesh {}{}), but the job has {}: "
                                           "start it with mpirun -n {} (or let dtc run start it)",
                                           plan::rankCount(devices + servers),
                                           plan::meshString(mesh), servedBy, job->size(),
                                           devices + servers);
    return nullptr;
  }
  // Parameter servers: the mesh's collectives among its own ranks.
  Communicator *meshRanks = job->world_.get();
  if (servers) {
    job->meshWorld_ = job->world_->split(job->rank() < devices ? 0 : 1, job->rank(), error);
    if (!job->meshWorld_)
      return nullptr;
    meshRanks = job->meshWorld_.get();
  }
  if (job->rank() < devices) {
    job->groups_ = MeshGroups::create(*meshRanks, mesh, error);
    if (!job->groups_)
      return nullptr;
  }
  if (!MpiSession::placeOnNode(job->nodeRank_, job->nodeSize_, error))
    return nullptr;
  return job;
}

void RankJob::quietOtherRanks() const {
  if (rank() == 0)
    return;
  std::fflush(stdout);
  int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, STDOUT_FILENO);
    ::close(null);
  }
}

RankJob::~RankJob() = default;

int RankJob::defaultThreads() const {
  int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / nodeSize_);
}

std::string bindToCores(int nodeRank, int nodeSize, int threads) {
  // Unbound ranks wander: the OS moves them, and a rank that shares a core
  // with mpirun or another rank for a while makes every other rank wait
  // for it at the next collective (measured: one of two unbound ranks 38%
  // slower in its matmuls; docs/cluster.md).
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0)
    return "ranks: not bound to cores (cannot read this process's CPU affinity)";
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && int(cpus.size()) < CPU_COUNT(&allowed); ++c)
    if (CPU_ISSET(c, &allowed))
      cpus.push_back(c);
  std::string onNode = fmt::format("{} on this machine, {} thread{} each", nodeSize, threads,
                                   threads == 1 ? "" : "s");
  if (long(cpus.size()) < online)
    return fmt::format("ranks: {}, bound by their launcher", onNode);
  if (int64_t(nodeSize) * threads > int64_t(cpus.size()))
    return fmt::format("ranks: {}, more than its {} cores: not bound, the OS shares the cores",
                       onNode, cpus.size());
  cpu_set_t own;
  CPU_ZERO(&own);
  for (int t = 0; t < threads; ++t)
    CPU_SET(cpus[size_t(nodeRank * threads + t)], &own);
  if (::sched_setaffinity(0, sizeof own, &own) != 0)
    return fmt::format("ranks: {}, not bound to cores (sched_setaffinity: {})", onNode,
                       std::strerror(errno));
  return fmt::format("ranks: {}, each bound to cores of its own", onNode);
}

std::string RankJob::bindToCores(int threads) {
  return runtime::bindToCores(nodeRank_, nodeSize_, threads);
}

int RankJob::finish(int status, const std::vector<std::string> &errors) {
  std::string mine;
  for (const std::string &e : errors)
    mine += e + "\n";
  if (status == 0 || size() == 1) {
    std::fputs(mine.c_str(), stderr);
    return status;
  }
  std::fflush(stdout);
  std::vector<std::string> all;
  if (!session_->gatherFailures(mine, kFailureWaitSeconds, all)) {
    // Alone: the others may wait for this rank in a collective.
    std::string prefixed;
    for (const std::string &e : errors)
      prefixed += prefixRank(e, rank()) + "\n";
    std::fputs(prefixed.c_str(), stderr);
    std::fflush(stderr);
    session_->abortJob(status);
  }
  if (rank() == 0) {
    // Each distinct text once, in the order of the first rank with it.
    std::vector<std::pair<std::string, std::vector<int>>> distinct;
    for (int r = 0; r < int(all.size()); ++r) {
      auto it = std::find_if(distinct.begin(), distinct.end(),
                             [&](const auto &d) { return d.first == all[size_t(r)]; });
      if (it == distinct.end())
        distinct.push_back({all[size_t(r)], {r}});
      else
        it->second.push_back(r);
    }
    std::string text;
    for (const auto &[message, ranks] : distinct) {
      if (distinct.size() == 1) { // every rank the same: as one process would say it
        text += message;
        continue;
      }
      std::string who = ranks.size() == 1 ? "rank " : "ranks ";
      for (size_t i = 0; i < ranks.size(); ++i)
        who += (i ? ", " : "") + std::to_string(ranks[i]);
      size_t begin = 0;
      while (begin < message.size()) {
        size_t end = std::min(message.find('\n', begin), message.size());
        text += prefixRank(message.substr(begin, end - begin), who) + "\n";
        begin = end + 1;
      }
    }
    std::fputs(text.c_str(), stderr);
    std::fflush(stderr);
    // Left for the dtc that started the ranks; if it cannot be, the exit
    // status says it (and mpirun with it).
    const char *path = std::getenv(kStatusFile);
    FILE *file = path ? std::fopen(path, "w") : nullptr;
    bool written = file && std::fprintf(file, "%d\n", status) > 0;
    if (file)
      written = std::fclose(file) == 0 && written;
    return written ? 0 : status;
  }
  return std::getenv(kStatusFile) ? 0 : status;
}

} // namespace dtc::runtime
