//===- CommTest.cpp - collectives over MPI, on every rank -----------------===//
//
// Runs under mpirun (ctest runs it on 4 ranks and on 1), on every rank
// (MpiTestMain.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/comm/MeshGroups.h"
#include "runtime/comm/MpiCommunicator.h"
#include "runtime/cpu/BFloat16.h"
#include "tests/unit/MpiTestMain.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <type_traits>
#include <vector>

using namespace dtc;
using namespace dtc::runtime;
using cpu::BFloat16;

namespace {

Communicator *world = nullptr;
/// MpiSession::launchedByMpi() before MPI started.
bool launchedByMpi = false;

testing::AssertionResult contains(const std::string &text, const std::string &part) {
  if (text.find(part) != std::string::npos)
    return testing::AssertionSuccess();
  return testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

const std::vector<plan::DType> kReducible = {plan::F32, plan::F64, plan::F16, plan::BF16,
                                             plan::I64, plan::I32, plan::I16, plan::I8,
                                             plan::U64, plan::U32, plan::U16, plan::U8};
const std::vector<plan::DType> kAll = {plan::F32, plan::F64, plan::F16, plan::BF16, plan::I64,
                                       plan::I32, plan::I16, plan::I8,  plan::U64,  plan::U32,
                                       plan::U16, plan::U8,  plan::BOOL};
const Reduction kReductions[] = {Reduction::Sum, Reduction::Max, Reduction::Min};

/// Calls `f` with a value of `dtype`'s storage type.
template <typename F>
auto withStorage(plan::DType dtype, F f) {
  switch (dtype) {
  case plan::F32: return f(float());
  case plan::F64: return f(double());
  case plan::F16: return f(_Float16());
  case plan::BF16: return f(BFloat16());
  case plan::I64: return f(int64_t());
  case plan::I32: return f(int32_t());
  case plan::I16: return f(int16_t());
  case plan::I8: return f(int8_t());
  case plan::U64: return f(uint64_t());
  case plan::U32: return f(uint32_t());
  case plan::U16: return f(uint16_t());
  default: return f(uint8_t()); // U8, BOOL
  }
}

/// `values` as `dtype`'s elements.
std::vector<char> encode(plan::DType dtype, const std::vector<double> &values) {
  std::vector<char> bytes(values.size() * size_t(dtypeBytes(dtype)));
  withStorage(dtype, [&](auto zero) {
    using T = decltype(zero);
    for (size_t i = 0; i < values.size(); ++i) {
      T v;
      if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, _Float16>)
        v = T(float(values[i]));
      else
        v = T(values[i]);
      std::memcpy(bytes.data() + i * sizeof(T), &v, sizeof(T));
    }
    return 0;
  });
  return bytes;
}

std::vector<double> decode(plan::DType dtype, const std::vector<char> &bytes) {
  std::vector<double> values(bytes.size() / size_t(dtypeBytes(dtype)));
  withStorage(dtype, [&](auto zero) {
    using T = decltype(zero);
    for (size_t i = 0; i < values.size(); ++i) {
      T v;
      std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
      if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, _Float16>)
        values[i] = double(float(v));
      else
        values[i] = double(v);
    }
    return 0;
  });
  return values;
}

bool isFloat(plan::DType dtype) {
  return dtype == plan::F32 || dtype == plan::F64 || dtype == plan::F16 || dtype == plan::BF16;
}
bool isUnsigned(plan::DType dtype) {
  return dtype == plan::U8 || dtype == plan::U16 || dtype == plan::U32 || dtype == plan::U64;
}

/// Rank `rank`'s element `i`: small numbers that differ per rank and that
/// every dtype holds exactly, sums over a few ranks included (never
/// negative for unsigned dtypes, 0 or 1 for bool).
double valueOf(plan::DType dtype, int rank, int64_t i) {
  if (dtype == plan::BOOL)
    return (rank + i) % 3 == 0;
  double v = double((rank * 7 + i * 3) % 11);
  if (isUnsigned(dtype))
    return v;
  return isFloat(dtype) ? v - 5 + 0.25 * rank : v - 5;
}

std::vector<double> valuesOf(plan::DType dtype, int rank, int64_t count, int64_t first = 0) {
  std::vector<double> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    values[size_t(i)] = valueOf(dtype, rank, first + i);
  return values;
}

/// Element `i` reduced over every rank, in double (exact for these values).
double reduced(plan::DType dtype, Reduction reduction, int64_t i) {
  double result = valueOf(dtype, 0, i);
  for (int r = 1; r < world->size(); ++r) {
    double v = valueOf(dtype, r, i);
    result = reduction == Reduction::Sum ? result + v
             : reduction == Reduction::Max ? std::max(result, v)
                                           : std::min(result, v);
  }
  return result;
}

/// Bytes that differ per rank, element and byte, for data movement.
std::vector<char> patternOf(plan::DType dtype, int rank, int64_t count, int64_t first = 0) {
  int64_t width = dtypeBytes(dtype);
  std::vector<char> bytes(size_t(count * width));
  for (int64_t i = 0; i < count * width; ++i)
    bytes[size_t(i)] = char(rank * 37 + (first * width + i) * 11 + int(dtype));
  return bytes;
}

std::vector<char> concat(const std::vector<std::vector<char>> &parts) {
  std::vector<char> all;
  for (const auto &part : parts)
    all.insert(all.end(), part.begin(), part.end());
  return all;
}

// Each collective runs whole (one MPI call) and in pieces of 3 elements
// (bytes for send and recv), which splits every buffer below into several.
class CollectiveTest : public testing::TestWithParam<int64_t> {
protected:
  void SetUp() override { setMpiChunkElements(GetParam()); }
  void TearDown() override { setMpiChunkElements(0); }
  bool inPieces() const { return GetParam() > 0; }
};

TEST_P(CollectiveTest, AllReduceEveryDTypeAndReduction) {
  const int64_t count = 10;
  for (plan::DType dtype : kAll) {
    for (Reduction reduction : kReductions) {
      if (dtype == plan::BOOL && reduction == Reduction::Sum)
        continue;
      SCOPED_TRACE(std::string(dtypeName(dtype)) + " " + reductionName(reduction));
      std::vector<char> data = encode(dtype, valuesOf(dtype, world->rank(), count));
      std::string error;
      EXPECT_TRUE(world->allReduce(data.data(), count, dtype, reduction, error)) << error;
      std::vector<double> expected(count);
      for (int64_t i = 0; i < count; ++i)
        expected[size_t(i)] = reduced(dtype, reduction, i);
      EXPECT_EQ(decode(dtype, data), expected);
    }
  }
}

TEST_P(CollectiveTest, HalfSumsRoundToNearestEven) {
  if (world->size() < 2)
    GTEST_SKIP() << "needs two ranks";
  // 256 + 3 (bf16) and 2048 + 3 (f16) lie halfway between two neighbours:
  // ties go to the even significand (260, 2052), truncation would give 258
  // and 2050.
  for (auto [dtype, big, expected] : {std::tuple(plan::BF16, 256.0, 260.0),
                                      std::tuple(plan::F16, 2048.0, 2052.0)}) {
    SCOPED_TRACE(dtypeName(dtype));
    double mine = world->rank() == 0 ? big : world->rank() == 1 ? 3.0 : 0.0;
    std::vector<char> data = encode(dtype, {mine, 1.5});
    std::string error;
    EXPECT_TRUE(world->allReduce(data.data(), 2, dtype, Reduction::Sum, error)) << error;
    EXPECT_EQ(decode(dtype, data), (std::vector<double>{expected, 1.5 * world->size()}));
  }
}

TEST_P(CollectiveTest, AllGatherConcatenatesInRankOrder) {
  const int64_t countPerRank = 5;
  for (plan::DType dtype : kAll) {
    SCOPED_TRACE(dtypeName(dtype));
    std::vector<char> send = patternOf(dtype, world->rank(), countPerRank);
    std::vector<char> recv(send.size() * size_t(world->size()));
    std::string error;
    EXPECT_TRUE(world->allGather(send.data(), recv.data(), countPerRank, dtype, error)) << error;
    std::vector<std::vector<char>> blocks;
    for (int r = 0; r < world->size(); ++r)
      blocks.push_back(patternOf(dtype, r, countPerRank));
    EXPECT_EQ(recv, concat(blocks));
  }
}

TEST_P(CollectiveTest, ReduceScatterGivesEachRankItsBlock) {
  const int64_t countPerRank = 4;
  const int64_t total = countPerRank * world->size();
  for (plan::DType dtype : kReducible) {
    for (Reduction reduction : kReductions) {
      SCOPED_TRACE(std::string(dtypeName(dtype)) + " " + reductionName(reduction));
      std::vector<char> send = encode(dtype, valuesOf(dtype, world->rank(), total));
      std::vector<char> recv(size_t(countPerRank * dtypeBytes(dtype)));
      std::string error;
      EXPECT_TRUE(world->reduceScatter(send.data(), recv.data(), countPerRank, dtype, reduction,
                                       error))
          << error;
      std::vector<double> expected;
      for (int64_t i = 0; i < countPerRank; ++i)
        expected.push_back(reduced(dtype, reduction, world->rank() * countPerRank + i));
      EXPECT_EQ(decode(dtype, recv), expected);
    }
  }
}

TEST_P(CollectiveTest, AllToAllTransposesBlocks) {
  const int64_t countPerRank = 4;
  const int size = world->size(), rank = world->rank();
  // Rank s's block for rank d: the pattern of "rank" s * size + d.
  for (plan::DType dtype : kAll) {
    SCOPED_TRACE(dtypeName(dtype));
    std::vector<std::vector<char>> sendBlocks, expectedBlocks;
    for (int peer = 0; peer < size; ++peer) {
      sendBlocks.push_back(patternOf(dtype, rank * size + peer, countPerRank));
      expectedBlocks.push_back(patternOf(dtype, peer * size + rank, countPerRank));
    }
    std::vector<char> send = concat(sendBlocks), recv(send.size());
    std::string error;
    EXPECT_TRUE(world->allToAll(send.data(), recv.data(), countPerRank, dtype, error)) << error;
    EXPECT_EQ(recv, concat(expectedBlocks));
  }
}

TEST_P(CollectiveTest, BroadcastFromEveryRoot) {
  const int64_t count = 7;
  for (plan::DType dtype : kAll) {
    for (int root = 0; root < world->size(); ++root) {
      SCOPED_TRACE(std::string(dtypeName(dtype)) + " from " + std::to_string(root));
      std::vector<char> data = patternOf(dtype, world->rank(), count);
      std::string error;
      EXPECT_TRUE(world->broadcast(data.data(), count, dtype, root, error)) << error;
      EXPECT_EQ(data, patternOf(dtype, root, count));
    }
  }
}

TEST_P(CollectiveTest, EmptyBuffersAreFine) {
  std::string error;
  EXPECT_TRUE(world->allReduce(nullptr, 0, plan::F32, Reduction::Sum, error)) << error;
  EXPECT_TRUE(world->allGather(nullptr, nullptr, 0, plan::F32, error)) << error;
  EXPECT_TRUE(world->broadcast(nullptr, 0, plan::I8, 0, error)) << error;
}

/// Even ranks send first, odd ranks receive first; a lone rank sends to
/// itself (small messages are buffered).
template <typename Send, typename Recv>
void ringExchange(Send sendNext, Recv recvPrevious) {
  if (world->rank() % 2 == 0) {
    sendNext();
    recvPrevious();
  } else {
    recvPrevious();
    sendNext();
  }
}

TEST_P(CollectiveTest, SendRecvAroundARing) {
  const int size = world->size(), rank = world->rank();
  const int next = (rank + 1) % size, previous = (rank + size - 1) % size;
  std::vector<char> mine = patternOf(plan::U8, rank, 10), theirs(10);
  std::vector<char> tagged = patternOf(plan::U8, rank + 100, 4), theirsTagged(4);
  std::string error;
  ringExchange(
      [&] {
        // Two messages to the same peer, told apart by their tags.
        EXPECT_TRUE(world->send(tagged.data(), 4, next, 8, error)) << error;
        EXPECT_TRUE(world->send(mine.data(), 10, next, 7, error)) << error;
      },
      [&] {
        EXPECT_TRUE(world->recv(theirs.data(), 10, previous, 7, error)) << error;
        EXPECT_TRUE(world->recv(theirsTagged.data(), 4, previous, 8, error)) << error;
      });
  EXPECT_EQ(theirs, patternOf(plan::U8, previous, 10));
  EXPECT_EQ(theirsTagged, patternOf(plan::U8, previous + 100, 4));
}

TEST_P(CollectiveTest, RecvOfTheWrongSizeFails) {
  const int size = world->size(), rank = world->rank();
  const int next = (rank + 1) % size, previous = (rank + size - 1) % size;
  std::vector<char> data(8, 'x'), buffer(8);
  std::string sendError, recvError;
  bool sent = true, received = true;
  ringExchange([&] { sent = world->send(data.data(), 4, next, 3, sendError); },
               [&] { received = world->recv(buffer.data(), 8, previous, 3, recvError); });
  EXPECT_TRUE(sent) << sendError;
  EXPECT_FALSE(received);
  EXPECT_TRUE(contains(recvError, "recv of 8 bytes from peer " + std::to_string(previous) +
                                      " (tag 3) on group 'world'"));
  EXPECT_TRUE(contains(recvError, "shorter (4 bytes)"));

  // A longer message than asked for: MPI's truncation error. (In pieces,
  // the rest of the message would stay queued, so only whole.)
  if (inPieces())
    return;
  recvError.clear();
  ringExchange([&] { sent = world->send(data.data(), 8, next, 4, sendError); },
               [&] { received = world->recv(buffer.data(), 4, previous, 4, recvError); });
  EXPECT_TRUE(sent) << sendError;
  EXPECT_FALSE(received);
  EXPECT_TRUE(contains(recvError, "MPI_ERR_TRUNCATE"));
}

INSTANTIATE_TEST_SUITE_P(Comm, CollectiveTest, testing::Values(int64_t(0), int64_t(3)),
                         [](const testing::TestParamInfo<int64_t> &info) {
                           return info.param ? "InPiecesOf" + std::to_string(info.param)
                                             : std::string("Whole");
                         });

TEST(CommTest, BarrierAndSize) {
  std::string error;
  EXPECT_TRUE(world->barrier(error)) << error;
  EXPECT_GE(world->rank(), 0);
  EXPECT_LT(world->rank(), world->size());
  EXPECT_EQ(world->name(), "world");
}

TEST(CommTest, LaunchedByMpiReadsTheEnvironment) {
  // Without a launcher, MPI starts a world of this process alone.
  if (!launchedByMpi)
    EXPECT_EQ(world->size(), 1);
  const char *names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
  std::vector<std::pair<const char *, std::string>> saved;
  for (const char *name : names)
    if (const char *value = std::getenv(name))
      saved.emplace_back(name, value);
  for (const char *name : names)
    ::unsetenv(name);
  EXPECT_FALSE(MpiSession::launchedByMpi());
  for (const char *name : names) {
    ::setenv(name, "4", 1);
    EXPECT_TRUE(MpiSession::launchedByMpi()) << name;
    ::unsetenv(name);
  }
  for (const auto &[name, value] : saved)
    ::setenv(name, value.c_str(), 1);
}

TEST(CommTest, SplitGroupsByColorOrderedByKey) {
  const int size = world->size(), rank = world->rank();
  std::string error;
  // Even and odd ranks, each group in reverse rank order.
  std::unique_ptr<Communicator> half = world->split(rank % 2, -rank, error);
  ASSERT_TRUE(half) << error; // every rank fails alike, or none does
  std::vector<int> members;
  for (int r = size - 1; r >= 0; --r)
    if (r % 2 == rank % 2)
      members.push_back(r);
  EXPECT_EQ(half->size(), int(members.size()));
  EXPECT_EQ(half->rank(), int(std::find(members.begin(), members.end(), rank) - members.begin()));
  EXPECT_EQ(half->name(), "world split " + std::to_string(rank % 2));

  int64_t sum = rank;
  EXPECT_TRUE(half->allReduce(&sum, 1, plan::I64, Reduction::Sum, error)) << error;
  int64_t expected = 0;
  for (int r : members)
    expected += r;
  EXPECT_EQ(sum, expected);

  // A group's group.
  std::unique_ptr<Communicator> alone = half->split(half->rank(), 0, error);
  ASSERT_TRUE(alone) << error;
  EXPECT_EQ(alone->size(), 1);
  EXPECT_EQ(alone->rank(), 0);
}

TEST(CommTest, MeshCoordinatesAreRowMajor) {
  EXPECT_EQ(meshCoordinates(4, {2, 3}), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(meshCoordinates(5, {2, 3}), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(meshCoordinates(7, {2, 2, 2}), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(meshRank({1, 2}, {2, 3}), 5);
  for (int64_t rank = 0; rank < 24; ++rank)
    EXPECT_EQ(meshRank(meshCoordinates(rank, {2, 3, 4}), {2, 3, 4}), rank);
}

/// The world ranks of `group`, in group rank order.
std::vector<int64_t> worldRanksOf(Communicator &group) {
  int64_t mine = world->rank();
  std::vector<int64_t> ranks(size_t(group.size()));
  std::string error;
  EXPECT_TRUE(group.allGather(&mine, ranks.data(), 1, plan::I64, error)) << error;
  return ranks;
}

TEST(CommTest, MeshGroupsOfA2x2Mesh) {
  const int size = world->size(), rank = world->rank();
  // 4 ranks: a 2x2 mesh; 1 rank: a 1x1 mesh, where every group is the rank.
  std::vector<int64_t> sizes = size == 4 ? std::vector<int64_t>{2, 2} : std::vector<int64_t>{1, 1};
  if (size != 4 && size != 1)
    GTEST_SKIP() << "runs on 4 ranks or 1";
  std::string error;
  std::unique_ptr<MeshGroups> mesh = MeshGroups::create(*world, sizes, error);
  ASSERT_TRUE(mesh) << error;
  EXPECT_EQ(mesh->coordinates(), meshCoordinates(rank, sizes));
  int64_t row = mesh->coordinates()[0], column = mesh->coordinates()[1];

  Communicator *axis0 = mesh->group({0}, error);
  Communicator *axis1 = mesh->group({1}, error);
  Communicator *both = mesh->group({1, 0}, error);
  Communicator *none = mesh->group({}, error);
  ASSERT_TRUE(axis0 && axis1 && both && none) << error;

  if (size == 4) {
    // Axis 0: {0,2} and {1,3}; axis 1: {0,1} and {2,3}.
    EXPECT_EQ(worldRanksOf(*axis0), (std::vector<int64_t>{column, column + 2}));
    EXPECT_EQ(worldRanksOf(*axis1), (std::vector<int64_t>{2 * row, 2 * row + 1}));
    EXPECT_EQ(worldRanksOf(*both), (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(axis0->name(), "mesh 2x2 axes {0}");
    EXPECT_EQ(both->name(), "mesh 2x2 axes {0,1}");
  } else {
    EXPECT_EQ(worldRanksOf(*both), (std::vector<int64_t>{0}));
  }
  EXPECT_EQ(worldRanksOf(*none), (std::vector<int64_t>{rank}));
  // On one axis, the group rank is the coordinate.
  EXPECT_EQ(axis0->rank(), row);
  EXPECT_EQ(axis1->rank(), column);
  EXPECT_EQ(both->rank(), rank);

  // Later requests are looked up, in any axis order.
  EXPECT_EQ(mesh->group({0, 1}, error), both);
  EXPECT_EQ(mesh->group({0}, error), axis0);

  // A sum along axis 0 adds the column's ranks.
  int64_t sum = rank;
  EXPECT_TRUE(axis0->allReduce(&sum, 1, plan::I64, Reduction::Sum, error)) << error;
  EXPECT_EQ(sum, size == 4 ? 2 * column + 2 : 0);
}

TEST(CommTest, MeshGroupsRejectBadMeshesAndAxes) {
  std::string error;
  EXPECT_FALSE(MeshGroups::create(*world, {int64_t(world->size()), 2}, error));
  EXPECT_TRUE(contains(error, "needs " + std::to_string(world->size() * 2) + " ranks"));
  EXPECT_FALSE(MeshGroups::create(*world, {0}, error));
  EXPECT_TRUE(contains(error, "at least one device"));

  std::unique_ptr<MeshGroups> mesh = MeshGroups::create(*world, {world->size()}, error);
  ASSERT_TRUE(mesh) << error;
  EXPECT_FALSE(mesh->group({1}, error));
  EXPECT_TRUE(contains(error, "axis 1 is not in [0, 1)"));
  EXPECT_FALSE(mesh->group({0, 0}, error));
  EXPECT_TRUE(contains(error, "axis 0 is named twice"));
}

TEST(CommTest, FailuresAreMessagesNotAborts) {
  const int size = world->size();
  std::string error;
  char byte = 0;
  EXPECT_FALSE(world->send(&byte, 1, size, 0, error));
  EXPECT_TRUE(contains(error, "send of 1 bytes to peer " + std::to_string(size) +
                                  " (tag 0) on group 'world' (rank " +
                                  std::to_string(world->rank()) + " of " +
                                  std::to_string(size) + ") failed: "));
  EXPECT_TRUE(contains(error, "MPI_ERR_RANK"));

  float value = 1;
  EXPECT_FALSE(world->broadcast(&value, 1, plan::F32, size, error));
  EXPECT_TRUE(contains(error, "broadcast of 1 f32 from root " + std::to_string(size)));
  EXPECT_TRUE(contains(error, "MPI_ERR_ROOT"));

  uint8_t flag = 1;
  EXPECT_FALSE(world->allReduce(&flag, 1, plan::BOOL, Reduction::Sum, error));
  EXPECT_TRUE(contains(error, "no sum of bool"));
  EXPECT_FALSE(world->allReduce(&value, -1, plan::F32, Reduction::Max, error));
  EXPECT_TRUE(contains(error, "the count is negative"));
  EXPECT_FALSE(world->allGather(&value, &value, 1, plan::DTYPE_INVALID, error));
  EXPECT_TRUE(contains(error, "unknown dtype 0"));
  EXPECT_FALSE(world->split(-1, 0, error));
  EXPECT_TRUE(contains(error, "split (color -1, key 0) on group 'world'"));

  // The communicator still works.
  EXPECT_TRUE(world->barrier(error)) << error;
}

} // namespace

int main(int argc, char **argv) {
  launchedByMpi = MpiSession::launchedByMpi();
  return dtc::testsupport::runTestsOnEveryRank(argc, argv, "dtc-comm-tests", world);
}
