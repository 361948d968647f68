//===- StreamOrderTest.cpp - work on several streams kept in order ---------===//
//
// Random work on four streams over a small arena: every two pieces on
// different streams that touch the same bytes (one of them writing) must
// end up ordered, through the waits StreamOrder asks for and the streams'
// own order; and no wait it asks for is one already implied.
//
//===----------------------------------------------------------------------===//
#include "runtime/StreamOrder.h"

#include <gtest/gtest.h>

#include <random>

using dtc::runtime::ByteRange;
using dtc::runtime::StreamOrder;

namespace {

struct Work {
  int stream;
  std::vector<ByteRange> reads, writes;
};

bool overlap(const std::vector<ByteRange> &a, const std::vector<ByteRange> &b) {
  for (const ByteRange &x : a)
    for (const ByteRange &y : b)
      if (x.overlaps(y))
        return true;
  return false;
}

bool conflict(const Work &a, const Work &b) {
  return overlap(a.writes, b.reads) || overlap(a.writes, b.writes) || overlap(a.reads, b.writes);
}

/// Queues `work` in order through StreamOrder; `lazy` waits, as the CUDA
/// device does on its compute stream, for the latest piece of a stream
/// rather than the one asked. Returns, per piece, the pieces it comes
/// after (transitively), as a reachability matrix.
std::vector<std::vector<bool>> run(const std::vector<Work> &work, bool lazy, int &waits,
                                   int &redundant) {
  StreamOrder order(4);
  size_t n = work.size();
  std::vector<std::vector<bool>> after(n, std::vector<bool>(n, false));
  std::vector<std::vector<size_t>> byTicket(4); // stream -> ticket - 1 -> piece
  std::vector<size_t> lastOn(4, SIZE_MAX);
  for (size_t j = 0; j < n; ++j) {
    const Work &w = work[j];
    auto inherit = [&](size_t i) {
      after[j][i] = true;
      for (size_t k = 0; k < n; ++k)
        if (after[i][k])
          after[j][k] = true;
    };
    for (StreamOrder::Piece p : order.dependencies(w.stream, w.reads, w.writes)) {
      // Waiting for a stream's latest piece may imply the next one asked.
      if (lazy && order.follows(w.stream, p))
        continue;
      ++waits;
      if (order.follows(w.stream, p))
        ++redundant;
      if (lazy)
        p.ticket = order.latest(p.stream);
      order.follow(w.stream, p);
      inherit(byTicket[size_t(p.stream)][p.ticket - 1]);
    }
    if (lastOn[size_t(w.stream)] != SIZE_MAX)
      inherit(lastOn[size_t(w.stream)]);
    uint64_t ticket = order.add(w.stream, w.reads, w.writes);
    EXPECT_EQ(ticket, byTicket[size_t(w.stream)].size() + 1);
    byTicket[size_t(w.stream)].push_back(j);
    lastOn[size_t(w.stream)] = j;
  }
  return after;
}

std::vector<Work> randomWork(std::mt19937 &rng, size_t n) {
  std::uniform_int_distribution<int> stream(0, 9), start(0, 60), length(1, 8), count(0, 2);
  std::vector<Work> work(n);
  for (Work &w : work) {
    int s = stream(rng); // mostly compute, as a rank's program is
    w.stream = s < 6 ? 0 : s - 6;
    for (auto *ranges : {&w.reads, &w.writes})
      for (int k = count(rng) + (ranges == &w.writes ? 1 : 0); k > 0; --k) {
        int64_t b = start(rng);
        ranges->push_back({b, b + length(rng)});
      }
  }
  return work;
}

} // namespace

TEST(StreamOrder, EveryConflictIsOrderedAndNoWaitIsImplied) {
  std::mt19937 rng(7);
  for (bool lazy : {false, true})
    for (int round = 0; round < 200; ++round) {
      std::vector<Work> work = randomWork(rng, 40);
      int waits = 0, redundant = 0;
      std::vector<std::vector<bool>> after = run(work, lazy, waits, redundant);
      EXPECT_EQ(redundant, 0);
      for (size_t j = 0; j < work.size(); ++j)
        for (size_t i = 0; i < j; ++i)
          if (work[i].stream != work[j].stream && conflict(work[i], work[j]))
            ASSERT_TRUE(after[j][i]) << "round " << round << ": piece " << j << " on stream "
                                     << work[j].stream << " does not follow piece " << i
                                     << " on stream " << work[i].stream;
    }
}

TEST(StreamOrder, WaitsOnlyWhereBytesAreShared) {
  StreamOrder order(4);
  // A gradient written on compute, reduced in place on the collectives
  // stream; the next layer's backward (other bytes) needs no wait, a
  // reuse of the gradient's bytes does, and the reduction's result read
  // on compute does.
  order.add(0, {{0, 8}}, {{100, 108}});
  std::vector<StreamOrder::Piece> deps = order.dependencies(1, {{100, 108}}, {{100, 108}});
  ASSERT_EQ(deps.size(), 1u);
  EXPECT_EQ(deps[0], (StreamOrder::Piece{0, 1}));
  order.follow(1, deps[0]);
  order.add(1, {{100, 108}}, {{100, 108}});
  EXPECT_TRUE(order.dependencies(0, {{0, 8}}, {{8, 16}}).empty());
  order.add(0, {{0, 8}}, {{8, 16}});
  deps = order.dependencies(0, {}, {{104, 112}}); // overwrites bytes the reduction uses
  ASSERT_EQ(deps.size(), 1u);
  EXPECT_EQ(deps[0], (StreamOrder::Piece{1, 1}));
  order.follow(0, deps[0]);
  order.add(0, {}, {{104, 112}});
  // Followed once, the reduction is not asked for again.
  EXPECT_TRUE(order.dependencies(0, {{100, 108}}, {}).empty());
  // Through the compute stream's wait, a third stream's work reading the
  // compute stream's latest value follows the reduction as well.
  deps = order.dependencies(3, {{104, 112}}, {{200, 208}});
  ASSERT_EQ(deps.size(), 1u);
  EXPECT_EQ(deps[0], (StreamOrder::Piece{0, 3}));
  order.follow(3, deps[0]);
  EXPECT_TRUE(order.follows(3, {1, 1}));
  order.clear();
  EXPECT_EQ(order.latest(0), 0u);
  EXPECT_TRUE(order.dependencies(1, {{0, 1000}}, {{0, 1000}}).empty());
}
