//===- WatchdogTest.cpp - a wait past the timeout ends the process --------===//
#include "runtime/comm/Watchdog.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <unistd.h>

using namespace dtc::runtime;

namespace {

std::string makeTempDir() {
  char path[] = "/tmp/dtc-watchdog-test-XXXXXX";
  return ::mkdtemp(path);
}

/// A heartbeat as another rank's watchdog writes it, `age` seconds old.
void writeBeat(const std::string &dir, int rank, double age, double waiting,
               const std::string &activity, const std::string &what) {
  double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string path = dir + "/rank-" + std::to_string(rank);
  std::ofstream(path + ".tmp") << std::to_string(now - age) << "\n"
                               << waiting << "\n"
                               << activity << "\n"
                               << what << "\n";
  std::filesystem::rename(path + ".tmp", path); // whole, as the watchdog writes them
}

/// Rank 0 of 4 waits forever; rank 1's heartbeat is 60 s old, rank 2's is
/// fresh and waiting, rank 3's fresh and busy.
[[noreturn]] void waitForever(const std::string &dir) {
  writeBeat(dir, 1, 60, -1, "step 7", "");
  writeBeat(dir, 2, 0, 1.5, "step 8", "allReduce");
  watchdog::start(0, 4, 0.3, dir);
  watchdog::setActivity("step 8");
  // Rank 2 and 3 keep beating while rank 0 waits.
  std::thread([dir] {
    for (;;) {
      writeBeat(dir, 2, 0, 1.5, "step 8", "allReduce");
      writeBeat(dir, 3, 0, -1, "step 8", "");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }).detach();
  watchdog::Wait wait([] { return std::string("allReduce (sum) of 4 f32 on group 'world'"); });
  // A wait inside it does not change what the outer one says.
  watchdog::Wait inner([] { return std::string("an inner wait"); });
  for (;;)
    std::this_thread::sleep_for(std::chrono::seconds(1));
}

} // namespace

TEST(WatchdogTest, AWaitPastTheTimeoutNamesTheStoppedRankAndEndsTheProcess) {
  std::string dir = makeTempDir();
  EXPECT_EXIT(waitForever(dir), ::testing::ExitedWithCode(watchdog::kHungStatus),
              "rank 0: no progress for [0-9]+ s \\(--timeout 0.3 s\\): waiting in allReduce "
              "\\(sum\\) of 4 f32 on group 'world' during step 8; rank 1 stopped [0-9]+ s ago "
              "\\(no heartbeat since: its process is stopped or its machine froze\\), during "
              "step 7; rank 3 is running but not waiting on others, during step 8: it may be "
              "stuck in its own work; rank 2 waits too; ending the job");
  // Its own heartbeats were written.
  EXPECT_TRUE(std::filesystem::exists(dir + "/rank-0"));
  std::filesystem::remove_all(dir);
}

TEST(WatchdogTest, WaitsAreFreeWhenItDoesNotRun) {
  // No start(): a Wait never describes itself.
  bool described = false;
  {
    watchdog::Wait wait([&] {
      described = true;
      return std::string("x");
    });
  }
  EXPECT_FALSE(described);
  EXPECT_FALSE(watchdog::running());
}
