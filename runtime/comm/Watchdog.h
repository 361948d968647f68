//===- Watchdog.h - a rank that waits too long ends the job -----*- C++ -*-===//
//
// A rank of a job waits in collectives, sends and receives for the others.
// When one of them stops (SIGSTOP, a frozen machine, a kernel that never
// returns), the others would wait forever. The watchdog is a thread that
// notices a wait longer than the timeout, says what this rank waits for and,
// from the other ranks' heartbeats, which rank stopped and where, and ends
// the process, which makes mpirun end the job (and dtc run --max-restarts
// restart it).
//
// Heartbeats: each rank's watchdog writes a line a second to
// DIR/rank-R (DIR from DTC_HEARTBEAT_DIR, which dtc sets when it starts the
// ranks; under an mpirun of your own, a folder every node sees): the time,
// the step, and the wait it is in. A stopped process writes none, which is
// how the others tell it from a busy one.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_COMM_WATCHDOG_H
#define DTC_RUNTIME_COMM_WATCHDOG_H

#include <cstdint>
#include <string>

namespace dtc::runtime::watchdog {

/// The environment variable naming the heartbeat folder.
constexpr const char *kHeartbeatDir = "DTC_HEARTBEAT_DIR";

/// The exit status of a rank the watchdog ends.
constexpr int kHungStatus = 3;

/// Starts the watchdog of rank `rank` of `ranks`: a wait longer than
/// `timeoutSeconds` ends the process after saying why on stderr. Heartbeats
/// go to `heartbeatDir` when it is not empty. Once per process.
void start(int rank, int ranks, double timeoutSeconds, const std::string &heartbeatDir);

/// Whether start() was called (the waits are watched).
bool running();

/// What the rank is doing, for the messages: "step 12".
void setActivity(const std::string &activity);

/// The watchdog's side of a Wait: `describe(context)` says what it waits
/// for, called (by the watchdog's thread) only while the wait lasts.
using Describe = std::string (*)(const void *context);
void enterWait(Describe describe, const void *context);
void leaveWait();

/// Marks a wait on other ranks (a collective, a send's completion, a
/// receive) while it lives; `describe()` says which ("allReduce (sum) of
/// 1024 f32 on group 'mesh 2x2 axes {0}'"), called only when the watchdog
/// writes a heartbeat or gives up, so a wait costs two uncontended locks
/// and no allocation. Nested waits count as the outermost.
template <typename DescribeFn>
class Wait {
public:
  explicit Wait(DescribeFn describe) : describe_(std::move(describe)), watched_(running()) {
    if (watched_)
      enterWait(&Wait::text, this);
  }
  ~Wait() {
    if (watched_)
      leaveWait();
  }
  Wait(const Wait &) = delete;
  Wait &operator=(const Wait &) = delete;

private:
  static std::string text(const void *self) { return static_cast<const Wait *>(self)->describe_(); }
  DescribeFn describe_; // its captures live in the waiting call's frame
  bool watched_;
};


} // namespace dtc::runtime::watchdog

#endif // DTC_RUNTIME_COMM_WATCHDOG_H
