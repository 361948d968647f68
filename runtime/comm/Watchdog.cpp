//===- Watchdog.cpp - a rank that waits too long ends the job -------------===//
#include "runtime/comm/Watchdog.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <unistd.h>
#include <vector>

namespace dtc::runtime::watchdog {
namespace {

using Clock = std::chrono::steady_clock;

/// What the main thread is doing, as the watchdog thread reads it.
struct State {
  std::mutex mutex;
  int depth = 0;        // waits entered and not left (nested: the outermost counts)
  Describe describe = nullptr; // the outermost wait's
  const void *context = nullptr;
  Clock::time_point since;
  std::string activity = "start-up";
};

State &state() {
  static State s;
  return s;
}

std::atomic<bool> started{false};

double wallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// A rank's heartbeat: when it was written, what the rank was doing and,
/// when it was waiting on others, for how long and in what.
struct Beat {
  double time = 0;
  double waiting = -1; // seconds; -1: not waiting
  std::string activity, what;
};

std::string beatPath(const std::string &dir, int rank) {
  return dir + "/rank-" + std::to_string(rank);
}

void writeBeat(const std::string &dir, int rank, const Beat &beat) {
  std::string path = beatPath(dir, rank), temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << fmt::format("{:.3f}\n{:.3f}\n{}\n{}\n", beat.time, beat.waiting, beat.activity,
                       beat.what);
    if (!out)
      return; // a heartbeat is best effort: the timeout still ends the wait
  }
  std::rename(temporary.c_str(), path.c_str());
}

std::optional<Beat> readBeat(const std::string &dir, int rank) {
  std::ifstream in(beatPath(dir, rank));
  Beat beat;
  std::string time, waiting;
  if (!std::getline(in, time) || !std::getline(in, waiting) ||
      !std::getline(in, beat.activity))
    return std::nullopt;
  std::getline(in, beat.what);
  try {
    beat.time = std::stod(time);
    beat.waiting = std::stod(waiting);
  } catch (...) {
    return std::nullopt;
  }
  return beat;
}

/// "0, 1 and 3".
std::string ranksText(const std::vector<int> &ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i)
    text += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  return text;
}

/// Says why this rank gives up: what it waits for and, from the
/// heartbeats, what the others do; then ends the process.
[[noreturn]] void giveUp(int rank, int ranks, double timeout, double waited,
                         const std::string &what, const std::string &activity,
                         const std::string &dir, double stale) {
  std::string text = fmt::format(
      "rank {}: no progress for {:.0f} s (--timeout {:g} s): waiting in {} during {}", rank,
      waited, timeout, what, activity);
  if (!dir.empty()) {
    double now = wallSeconds();
    std::vector<int> silent, waitingToo;
    std::string others;
    for (int r = 0; r < ranks; ++r) {
      if (r == rank)
        continue;
      std::optional<Beat> beat = readBeat(dir, r);
      if (!beat) {
        silent.push_back(r);
      } else if (now - beat->time > stale) {
        others += fmt::format("; rank {} stopped {:.0f} s ago (no heartbeat since: its process "
                              "is stopped or its machine froze), during {}{}",
                              r, now - beat->time, beat->activity,
                              beat->waiting >= 0 ? ", waiting in " + beat->what : "");
      } else if (beat->waiting < 0) {
        others += fmt::format("; rank {} is running but not waiting on others, during {}: it "
                              "may be stuck in its own work",
                              r, beat->activity);
      } else {
        waitingToo.push_back(r);
      }
    }
    text += others;
    if (!silent.empty())
      text += fmt::format("; no heartbeat from rank{} {} (not started, or {} is not shared "
                          "with its machine)",
                          silent.size() == 1 ? "" : "s", ranksText(silent), dir);
    if (!waitingToo.empty())
      text += fmt::format("; rank{} {} wait{} too", waitingToo.size() == 1 ? "" : "s",
                          ranksText(waitingToo), waitingToo.size() == 1 ? "s" : "");
  }
  text += "; ending the job";
  std::fprintf(stderr, "error: %s\n", text.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  ::_exit(kHungStatus);
}

} // namespace

bool running() { return started.load(std::memory_order_relaxed); }

void start(int rank, int ranks, double timeoutSeconds, const std::string &heartbeatDir) {
  if (started.exchange(true))
    return;
  // A heartbeat a second (more often under a short timeout, as in tests); a
  // rank whose last is three beats old is stopped.
  double interval = std::clamp(timeoutSeconds / 4, 0.05, 1.0);
  double stale = std::max(3 * interval, 0.5);
  std::thread([=] {
    for (bool first = true;; first = false) {
      if (!first) // the first beat at once: a rank stopped early is seen as stopped
        std::this_thread::sleep_for(std::chrono::duration<double>(interval));
      Beat beat;
      double waited = -1;
      {
        State &s = state();
        std::lock_guard<std::mutex> lock(s.mutex);
        beat.activity = s.activity;
        if (s.depth > 0) { // the wait goes on (and its description lives) while we hold the lock
          waited = std::chrono::duration<double>(Clock::now() - s.since).count();
          beat.what = s.describe(s.context);
        }
      }
      beat.time = wallSeconds();
      beat.waiting = waited;
      if (!heartbeatDir.empty())
        writeBeat(heartbeatDir, rank, beat);
      if (waited > timeoutSeconds)
        giveUp(rank, ranks, timeoutSeconds, waited, beat.what, beat.activity, heartbeatDir,
               stale);
    }
  }).detach();
}

void setActivity(const std::string &activity) {
  if (!running())
    return;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.activity = activity;
}

void enterWait(Describe describe, const void *context) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.depth++ == 0) {
    s.describe = describe;
    s.context = context;
    s.since = Clock::now();
  }
}

void leaveWait() {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  --s.depth;
}

} // namespace dtc::runtime::watchdog
