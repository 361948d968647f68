//===- RankJob.cpp --------------------------------------------------------===//
#include "runtime/comm/RankJob.h"

#include "plan/Ranks.h"
#include "plan/Sharding.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sched.h>
#include <thread>
#include <unistd.h>

namespace dtc::runtime {

std::unique_ptr<RankJob> RankJob::join(const plan::Plan &plan, std::string &error) {
  std::unique_ptr<RankJob> job(new RankJob);
  job->session_ = MpiSession::start(error);
  if (job->session_)
    job->world_ = worldCommunicator(error);
  if (!job->world_)
    return nullptr;
  std::vector<int64_t> mesh = plan::meshAxisSizes(plan.mesh());
  int64_t devices = plan::meshDevices(plan.mesh());
  if (devices != job->size()) {
    // Every rank finds this; one message is enough.
    error = job->rank() != 0 ? ""
                             : fmt::format("the plan is for {} (mesh {}), but the job has {}: "
                                           "start it with mpirun -n {} (or let dtc run start it)",
                                           plan::rankCount(devices), plan::meshString(mesh),
                                           job->size(), devices);
    return nullptr;
  }
  job->groups_ = MeshGroups::create(*job->world_, mesh, error);
  if (!job->groups_ || !MpiSession::placeOnNode(job->nodeRank_, job->nodeSize_, error))
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

int RankJob::finish(int status) {
  if (status == 0 || size() == 1)
    return status;
  std::fflush(stdout);
  std::fflush(stderr);
  session_->abortJob(status);
}

} // namespace dtc::runtime
