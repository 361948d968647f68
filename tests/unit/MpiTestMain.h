//===- MpiTestMain.h - gtest binaries that run on every rank ----*- C++ -*-===//
//
// mpirun starts such a binary once per rank. Every rank runs every test and
// makes the same collective calls whatever it finds, so that a failure is
// reported instead of leaving the other ranks waiting. Rank 0 prints gtest's
// report; the other ranks print only their failures; all agree on the
// verdict.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_TESTS_UNIT_MPITESTMAIN_H
#define DTC_TESTS_UNIT_MPITESTMAIN_H

#include "runtime/comm/MpiCommunicator.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

namespace dtc::testsupport {

/// Prints a rank's failures, prefixed with the rank, in place of gtest's
/// report on ranks other than 0.
class RankFailurePrinter : public testing::EmptyTestEventListener {
public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult &result) override {
    if (result.failed())
      std::printf("[rank %d] %s:%d: Failure\n%s\n", rank_, result.file_name(),
                  result.line_number(), result.summary());
  }
  void OnTestEnd(const testing::TestInfo &info) override {
    if (info.result()->Failed())
      std::printf("[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    std::fflush(stdout);
  }

private:
  int rank_;
};

/// The main of such a binary named `name`: starts MPI, sets `world` to the
/// job's communicator, runs the tests and returns the job's verdict.
inline int runTestsOnEveryRank(int argc, char **argv, const char *name,
                               runtime::Communicator *&world) {
  testing::InitGoogleTest(&argc, argv);
  std::string error;
  std::unique_ptr<runtime::MpiSession> session = runtime::MpiSession::start(error);
  std::unique_ptr<runtime::Communicator> communicator =
      session ? runtime::worldCommunicator(error) : nullptr;
  if (!communicator) {
    std::fprintf(stderr, "%s: %s\n", name, error.c_str());
    return 1;
  }
  world = communicator.get();
  if (world->rank() != 0) {
    testing::TestEventListeners &listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(world->rank()));
  }
  int64_t failedRanks = RUN_ALL_TESTS() != 0;
  if (!world->allReduce(&failedRanks, 1, plan::I64, runtime::Reduction::Sum, error)) {
    std::fprintf(stderr, "%s: %s\n", name, error.c_str());
    return 1;
  }
  if (world->rank() == 0)
    std::printf("%s: %s on %d of %d ranks\n", name, failedRanks ? "FAILED" : "passed",
                int(failedRanks ? failedRanks : world->size()), world->size());
  world = nullptr;
  return failedRanks ? 1 : 0;
}

} // namespace dtc::testsupport

#endif // DTC_TESTS_UNIT_MPITESTMAIN_H
