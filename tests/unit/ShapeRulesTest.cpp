#include "dialects/graph/ShapeRules.h"

#include <gtest/gtest.h>

using namespace dtc::graph;

TEST(ShapeRules, BroadcastFollowsNumPy) {
  EXPECT_EQ(*broadcastShapes({2, 1, 4}, {3, 1}), (Shape{2, 3, 4}));
  EXPECT_EQ(*broadcastShapes({}, {5}), (Shape{5}));
  EXPECT_EQ(*broadcastShapes({0, 3}, {1, 3}), (Shape{0, 3}));
  EXPECT_FALSE(broadcastShapes({2, 3}, {4}).has_value());
}

TEST(ShapeRules, NormalizeAxisRejectsOutOfRange) {
  EXPECT_EQ(*normalizeAxis(-1, 4), 3);
  EXPECT_EQ(*normalizeAxis(0, 1), 0);
  EXPECT_FALSE(normalizeAxis(4, 4).has_value());
  EXPECT_FALSE(normalizeAxis(-5, 4).has_value());
  EXPECT_FALSE(normalizeAxis(0, 0).has_value());
}

TEST(ShapeRules, ElementCountDetectsOverflow) {
  EXPECT_EQ(*elementCount({}), 1);
  EXPECT_EQ(*elementCount({2, 0, 7}), 0);
  EXPECT_FALSE(elementCount({int64_t(1) << 40, int64_t(1) << 40}).has_value());
  EXPECT_FALSE(elementCount({-1, 2}).has_value());
}

TEST(ShapeRules, WindowOutputSize) {
  // 32 wide, kernel 3, stride 1, pad 1: same size.
  EXPECT_EQ(*windowOutputSize(32, 3, 1, 1, 1, 1, false), 32);
  // Pool 2x2 stride 2.
  EXPECT_EQ(*windowOutputSize(5, 2, 2, 0, 0, 1, false), 2);
  EXPECT_EQ(*windowOutputSize(5, 2, 2, 0, 0, 1, true), 3);
  // Ceil mode may not start a window in the right padding.
  EXPECT_EQ(*windowOutputSize(4, 3, 2, 1, 1, 1, true), 3);
  EXPECT_EQ(*windowOutputSize(3, 2, 2, 1, 1, 1, true), 2);
  // Dilation 2 widens the kernel to 5.
  EXPECT_EQ(*windowOutputSize(7, 3, 1, 0, 0, 2, false), 3);
  EXPECT_FALSE(windowOutputSize(2, 3, 1, 0, 0, 1, false).has_value());
  EXPECT_FALSE(windowOutputSize(8, 3, 0, 0, 0, 1, false).has_value());
}

TEST(ShapeRules, ShapeToString) {
  EXPECT_EQ(shapeToString({2, 128}), "2x128");
  EXPECT_EQ(shapeToString({}), "scalar");
}
