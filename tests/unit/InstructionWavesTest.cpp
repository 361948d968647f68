//===- InstructionWavesTest.cpp - which instructions run side by side -----===//
#include "runtime/InstructionWaves.h"

#include <gtest/gtest.h>

namespace {

using dtc::runtime::ByteRange;
using dtc::runtime::findWaves;
using dtc::runtime::InstructionAccess;
using dtc::runtime::Wave;

InstructionAccess op(std::vector<ByteRange> reads, std::vector<ByteRange> writes,
                     bool alongside = true) {
  return {alongside, std::move(reads), std::move(writes)};
}

/// AdamW's shape: each weight's two moments from its gradient, then the
/// weight from both moments. The moments of every weight form one level,
/// the weights the next.
TEST(InstructionWaves, IndependentUpdatesShareALevel) {
  std::vector<InstructionAccess> ops;
  for (int64_t w = 0; w < 3; ++w) {
    int64_t base = w * 100; // gradient 0-10, m 10-20, v 20-30, weight 30-40
    ops.push_back(op({{base, base + 10}, {base + 10, base + 20}}, {{base + 10, base + 20}}));
    ops.push_back(op({{base, base + 10}, {base + 20, base + 30}}, {{base + 20, base + 30}}));
    ops.push_back(op({{base + 10, base + 30}, {base + 30, base + 40}}, {{base + 30, base + 40}}));
  }
  std::vector<Wave> waves = findWaves(ops, {});
  ASSERT_EQ(waves.size(), 1u);
  EXPECT_EQ(waves[0].begin, 0u);
  EXPECT_EQ(waves[0].end, 9u);
  ASSERT_EQ(waves[0].levels.size(), 2u);
  EXPECT_EQ(waves[0].levels[0].size(), 6u);
  EXPECT_EQ(waves[0].levels[1], (std::vector<size_t>{2, 5, 8}));
}

/// A later instruction that overwrites bytes an earlier one reads (the
/// arena reuses them), or writes what it writes, comes a level after it;
/// one that reads what it writes too.
TEST(InstructionWaves, EveryHazardOrdersTwoInstructions) {
  // read after write
  EXPECT_TRUE(findWaves({op({}, {{0, 8}}), op({{4, 12}}, {{20, 28}})}, {}).empty());
  // write after read
  EXPECT_TRUE(findWaves({op({{0, 8}}, {{20, 28}}), op({}, {{7, 9}})}, {}).empty());
  // write after write
  EXPECT_TRUE(findWaves({op({}, {{0, 8}}), op({}, {{0, 8}})}, {}).empty());
  // touching ranges do not overlap: side by side
  std::vector<Wave> waves = findWaves({op({{0, 8}}, {{8, 16}}), op({{0, 8}}, {{16, 24}})}, {});
  ASSERT_EQ(waves.size(), 1u);
  EXPECT_EQ(waves[0].levels.size(), 1u);
}

/// Waves stop at an instruction that may not run beside others (a
/// collective, a library kernel) and at the parts of a step, which run
/// apart; the largest of a level comes first.
TEST(InstructionWaves, WavesStopAtBarriersAndParts) {
  std::vector<InstructionAccess> ops = {
      op({}, {{0, 4}}),         op({}, {{10, 30}}), // a wave: 0-1
      op({}, {{40, 44}}, false),                     // a collective
      op({}, {{50, 54}}),       op({}, {{60, 64}}), // a wave: 3-4, cut at 5
      op({}, {{70, 74}}),       op({}, {{80, 84}}), // a wave: 5-6
  };
  std::vector<Wave> waves = findWaves(ops, {5});
  ASSERT_EQ(waves.size(), 3u);
  EXPECT_EQ(waves[0].begin, 0u);
  EXPECT_EQ(waves[0].end, 2u);
  EXPECT_EQ(waves[0].levels[0], (std::vector<size_t>{1, 0})); // 20 bytes before 4
  EXPECT_EQ(waves[1].begin, 3u);
  EXPECT_EQ(waves[1].end, 5u);
  EXPECT_EQ(waves[2].begin, 5u);
  EXPECT_EQ(waves[2].end, 7u);
  // a chain is no wave
  EXPECT_TRUE(findWaves({op({}, {{0, 4}}), op({{0, 4}}, {{4, 8}})}, {}).empty());
}

} // namespace
