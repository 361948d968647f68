//===- RankLauncher.cpp - dtc run on several ranks ------------------------===//
#include "tools/dtc/RankLauncher.h"

#include "runtime/comm/RankJob.h"
#include "runtime/comm/Watchdog.h"
#include "runtime/train/CheckpointFolder.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
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

/// Set when the user (Ctrl-C) or a batch system (SIGTERM, SIGHUP) stopped
/// the job: --max-restarts does not start it again.
volatile sig_atomic_t stopRequested = 0;

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


/// This executable's path, or "" with `error`.
std::string selfPath(std::string &error) {
  char self[PATH_MAX];
  ssize_t length = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (length <= 0) {
    error = std::string("cannot find dtc's own executable to start the ranks: ") +
            std::strerror(errno);
    return "";
  }
  self[length] = '\0';
  return self;
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
  std::string self = selfPath(error);
  if (self.empty())
    return {};
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

/// Runs `command` as a child and waits for it, passing SIGTERM and SIGHUP
/// on; false with `error` when it could not start or was lost, else its
/// wait status in `status`.
bool runChild(std::vector<std::string> command, int &status, std::string &error) {
  std::vector<char *> argv = argvOf(command);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t child = ::fork();
  if (child < 0) {
    error = "cannot start " + command[0] + ": " + std::strerror(errno);
    return false;
  }
  if (child == 0) {
    ::execv(command[0].c_str(), argv.data());
    std::fprintf(stderr, "error: cannot start %s: %s\n", command[0].c_str(), std::strerror(errno));
    ::_exit(127);
  }
  ::unsetenv(kStartedByDtc);
  // The child stops its ranks: Ctrl-C reaches it from the terminal as it
  // reaches this process, which waits for it; a SIGTERM or SIGHUP sent to
  // this process alone (a batch system's) is passed on to it.
  mpirunPid = child;
  struct sigaction forward = {}, note = {}, oldInt = {}, oldTerm = {}, oldHup = {};
  forward.sa_handler = [](int signal) {
    stopRequested = 1;
    ::kill(mpirunPid, signal);
  };
  // Ctrl-C reaches the child from the terminal already: only noted here.
  note.sa_handler = [](int) { stopRequested = 1; };
  ::sigaction(SIGINT, &note, &oldInt);
  ::sigaction(SIGTERM, &forward, &oldTerm);
  ::sigaction(SIGHUP, &forward, &oldHup);
  int waited;
  while ((waited = ::waitpid(child, &status, 0)) < 0 && errno == EINTR) {
  }
  ::sigaction(SIGINT, &oldInt, nullptr);
  ::sigaction(SIGTERM, &oldTerm, nullptr);
  ::sigaction(SIGHUP, &oldHup, nullptr);
  if (waited < 0) {
    error = "lost " + command[0] + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

/// How a job this process started ended.
struct JobEnd {
  int status = 1;      // dtc's exit status for it
  bool agreed = false; // its ranks all failed alike, an error they printed: no death
  std::string why;     // how it ended, for the restart's line
  bool started = true; // false: it could not start (`why` says why)
};

/// Runs the plan's `ranks` ranks (`dtc ARGS` under mpirun, or dtc itself
/// for one) and waits for them.
JobEnd runJob(int64_t ranks, const Args &args) {
  JobEnd end;
  if (ranks <= 1) {
    std::string self = selfPath(end.why);
    if (self.empty()) {
      end.started = false;
      return end;
    }
    std::vector<std::string> command = {self};
    command.insert(command.end(), args.begin(), args.end());
    int status = 0;
    if (!runChild(command, status, end.why)) {
      end.started = false;
      return end;
    }
    if (WIFEXITED(status)) {
      end.status = WEXITSTATUS(status);
      end.agreed = end.status == 1; // an error it printed (a crash is another status)
      end.why = fmt::format("dtc exited with status {}", end.status);
    } else {
      end.status = 128 + WTERMSIG(status);
      end.why = fmt::format("dtc was killed by signal {} ({})", WTERMSIG(status),
                            strsignal(WTERMSIG(status)));
    }
    return end;
  }
  // The ranks' heartbeats (runtime/comm/Watchdog.h), unless the user
  // named a folder: one of the job's own, removed after.
  char heartbeats[] = "/tmp/dtc-heartbeats-XXXXXX";
  bool ownHeartbeats = !std::getenv(runtime::watchdog::kHeartbeatDir) && ::mkdtemp(heartbeats);
  if (ownHeartbeats)
    ::setenv(runtime::watchdog::kHeartbeatDir, heartbeats, 1);
  // When every rank fails alike, rank 0 prints the error once and leaves the
  // status here, and the ranks end normally: no abort from mpirun.
  char statusPath[] = "/tmp/dtc-status-XXXXXX";
  int fd = ::mkstemp(statusPath);
  if (fd >= 0) {
    ::close(fd);
    ::setenv(runtime::RankJob::kStatusFile, statusPath, 1);
  }
  int status = runUnderMpirun(ranks, args, end.why);
  int left = -1;
  if (fd >= 0) {
    if (FILE *file = std::fopen(statusPath, "r")) {
      if (std::fscanf(file, "%d", &left) != 1)
        left = -1;
      std::fclose(file);
    }
    std::remove(statusPath);
  }
  if (ownHeartbeats) {
    std::error_code ec;
    std::filesystem::remove_all(heartbeats, ec);
    ::unsetenv(runtime::watchdog::kHeartbeatDir);
  }
  if (status < 0) {
    end.started = end.why.find("mpirun ended by signal") != std::string::npos;
    return end;
  }
  end.agreed = status == 0 && left > 0;
  end.status = end.agreed ? left : status;
  end.why = fmt::format("a rank died or the job aborted (mpirun exited with status {})", status);
  return end;
}

/// The newest step a resume of the files in `dir` written since `since`
/// would start from; -1 when there is none.
int64_t resumableSince(const std::string &dir, std::filesystem::file_time_type since) {
  runtime::train::CheckpointFolder folder;
  std::string ignored;
  if (!runtime::train::inspectCheckpointFolder(dir, folder, ignored))
    return -1;
  std::error_code ec;
  for (const auto &file : folder.files)
    if (std::filesystem::last_write_time(std::filesystem::path(dir) / file.name, ec) >= since &&
        !ec)
      return folder.resumableStep;
  return -1;
}

} // namespace

int relaunchUnderMpirun(int64_t ranks, const Args &args) {
  if (std::getenv(kStartedByDtc))
    return failure("dtc started this rank under mpirun, but it sees no MPI environment "
                   "(OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK): is that mpirun OpenMPI's?");
  JobEnd end = runJob(ranks, args);
  return end.started ? end.status : failure(end.why);
}

int runWithRestarts(int64_t ranks, const Args &args, int maxRestarts,
                    const std::string &checkpoint) {
  if (std::getenv(kStartedByDtc))
    return relaunchUnderMpirun(ranks, args); // says what is wrong
  // Restarts resume from the checkpoints this run wrote, or, when it was
  // itself a resume, from the folder's.
  bool resumes = std::find(args.begin(), args.end(), "--resume") != args.end();
  auto began = std::filesystem::file_time_type::clock::now();
  Args attempt = args;
  for (int restarts = 0;; ++restarts) {
    auto start = std::chrono::steady_clock::now();
    JobEnd end = runJob(ranks, attempt);
    if (!end.started)
      return failure(end.why);
    if (end.status == 0) {
      if (restarts > 0)
        fmt::print("run: finished after {} {}\n", restarts, restarts == 1 ? "restart" : "restarts");
      return 0;
    }
    if (end.agreed) // bad input, a non-finite loss: it would fail again
      return end.status;
    if (stopRequested) {
      fmt::print(stderr, "run: stopped by a signal; not restarting it\n");
      return end.status;
    }
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (restarts == maxRestarts)
      return failure(fmt::format("the run ended abnormally ({}) and --max-restarts {} are used up",
                                 end.why, maxRestarts));
    int64_t step = resumes ? resumableSince(checkpoint, {}) : resumableSince(checkpoint, began);
    attempt = args;
    if (step >= 0 && !resumes)
      attempt.push_back("--resume");
    if (step < 0 && resumes)
      attempt.erase(std::find(attempt.begin(), attempt.end(), "--resume"));
    fmt::print(stderr, "restart {} of {}: {} after {:.1f} s; {}\n", restarts + 1, maxRestarts,
               end.why, seconds,
               step >= 0 ? fmt::format("resuming from step {} ({})", step, checkpoint)
                         : "no checkpoint written yet: starting over");
    std::fflush(stderr);
  }
}

int runUnderMpirun(int64_t ranks, const Args &args, std::string &error) {
  std::vector<std::string> command = mpirunCommand(ranks, args, error);
  if (command.empty())
    return -1;
  int status = 0;
  if (!runChild(command, status, error))
    return -1;
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  error = "mpirun ended by signal " + std::to_string(WTERMSIG(status));
  return -1;
}

} // namespace dtc::cli
