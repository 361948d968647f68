//===- RankLauncher.cpp - dtc run on several ranks ------------------------===//
#include "tools/dtc/RankLauncher.h"

#include "runtime/comm/RankJob.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>

namespace dtc::cli {
namespace {

/// Set in the environment of the ranks dtc starts itself, so that a rank
/// that does not see mpirun's environment fails instead of starting mpirun
/// again.
constexpr const char *kStartedByDtc = "DTC_STARTED_RANKS";

/// The mpirun this process waits for (runUnderMpirun), for its signal handlers.
volatile pid_t mpirunPid = 0;

/// The executable `name` in a folder of $PATH, or "".
std::string findOnPath(const std::string &name) {
  const char *path = std::getenv("PATH");
  std::string folders = path ? path : "";
  size_t begin = 0;
  while (begin <= folders.size()) {
    size_t end = std::min(folders.find(':', begin), folders.size());
    std::string folder = folders.substr(begin, end - begin);
    std::string candidate = (folder.empty() ? "." : folder) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    begin = end + 1;
  }
  return "";
}


/// `mpirun -n RANKS --oversubscribe --bind-to none DTC ARGS`, and the
/// environment the ranks need; empty with `error` when there is no mpirun
/// or no path to this executable.
std::vector<std::string> mpirunCommand(int64_t ranks, const Args &args, std::string &error) {
  std::string mpirun = findOnPath("mpirun");
  if (mpirun.empty()) {
    error = fmt::format("running {} ranks needs mpirun (OpenMPI), which is not on PATH: "
                        "install it, or start the ranks yourself (mpirun -n {} dtc ..., or srun)",
                        ranks, ranks);
    return {};
  }
  char self[PATH_MAX];
  ssize_t length = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (length <= 0) {
    error = std::string("cannot find dtc's own executable to start the ranks: ") +
            std::strerror(errno);
    return {};
  }
  self[length] = '\0';
  std::vector<std::string> command = {mpirun, "-n", std::to_string(ranks),
                                      // Tests and laptops run more ranks than cores;
                                      // each rank's threads go where the OS puts them.
                                      "--oversubscribe", "--bind-to", "none", self};
  command.insert(command.end(), args.begin(), args.end());
  ::setenv(kStartedByDtc, "1", 1);
  // OpenMPI refuses root unless told; pass that on only where it applies.
  if (::geteuid() == 0) {
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  return command;
}

std::vector<char *> argvOf(std::vector<std::string> &command) {
  std::vector<char *> argv;
  for (std::string &arg : command)
    argv.push_back(arg.data());
  argv.push_back(nullptr);
  return argv;
}

} // namespace

int relaunchUnderMpirun(int64_t ranks, const Args &args) {
  if (std::getenv(kStartedByDtc))
    return failure("dtc started this rank under mpirun, but it sees no MPI environment "
                   "(OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK): is that mpirun OpenMPI's?");
  // When every rank fails alike, rank 0 prints the error once and leaves the
  // status here, and the ranks end normally: no abort from mpirun.
  char statusPath[] = "/tmp/dtc-status-XXXXXX";
  int fd = ::mkstemp(statusPath);
  if (fd >= 0) {
    ::close(fd);
    ::setenv(runtime::RankJob::kStatusFile, statusPath, 1);
  }
  std::string error;
  int status = runUnderMpirun(ranks, args, error);
  int left = -1;
  if (fd >= 0) {
    if (FILE *file = std::fopen(statusPath, "r")) {
      if (std::fscanf(file, "%d", &left) != 1)
        left = -1;
      std::fclose(file);
    }
    std::remove(statusPath);
  }
  if (status < 0)
    return failure(error);
  return status == 0 && left > 0 ? left : status;
}

int runUnderMpirun(int64_t ranks, const Args &args, std::string &error) {
  std::vector<std::string> command = mpirunCommand(ranks, args, error);
  if (command.empty())
    return -1;
  std::vector<char *> argv = argvOf(command);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t child = ::fork();
  if (child < 0) {
    error = std::string("cannot start mpirun: ") + std::strerror(errno);
    return -1;
  }
  if (child == 0) {
    ::execv(command[0].c_str(), argv.data());
    std::fprintf(stderr, "error: cannot start %s: %s\n", command[0].c_str(), std::strerror(errno));
    ::_exit(127);
  }
  ::unsetenv(kStartedByDtc);
  // mpirun stops the ranks: Ctrl-C reaches it from the terminal as it
  // reaches this process, which waits for it; a SIGTERM or SIGHUP sent to
  // this process alone (a batch system's) is passed on to it.
  mpirunPid = child;
  struct sigaction forward = {}, ignore = {}, oldInt = {}, oldTerm = {}, oldHup = {};
  forward.sa_handler = [](int signal) { ::kill(mpirunPid, signal); };
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGINT, &ignore, &oldInt);
  ::sigaction(SIGTERM, &forward, &oldTerm);
  ::sigaction(SIGHUP, &forward, &oldHup);
  int status = 0;
  int waited;
  while ((waited = ::waitpid(child, &status, 0)) < 0 && errno == EINTR) {
  }
  ::sigaction(SIGINT, &oldInt, nullptr);
  ::sigaction(SIGTERM, &oldTerm, nullptr);
  ::sigaction(SIGHUP, &oldHup, nullptr);
  if (waited < 0) {
    error = std::string("lost mpirun: ") + std::strerror(errno);
    return -1;
  }
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  error = "mpirun ended by signal " + std::to_string(WTERMSIG(status));
  return -1;
}

} // namespace dtc::cli
