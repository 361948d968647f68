//===- OpCostTest.cpp - each op family's cost rule ------------------------===//
#include "dialects/graph/GraphDialect.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace dtc::graph;

namespace {

/// The costs of the ops in `body` (the inside of a function), in order,
/// skipping the free ones.
std::vector<OpCost> costsOf(const std::string &signature, const std::string &body) {
  MLIRContext context;
  context.loadDialect<GraphDialect, func::FuncDialect>();
  std::string text = "func.func @f" + signature + " {\n" + body + "\n}";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  EXPECT_TRUE(module) << text;
  std::vector<OpCost> costs;
  if (module)
    module->walk([&](CostOp op) {
      if (op->getParentOfType<FusedOp>())
        return;
      OpCost c = op.cost();
      if (c.opClass != OpCost::Free)
        costs.push_back(c);
    });
  return costs;
}

TEST(OpCost, MatmulConvPoolAndFusion) {
  auto costs = costsOf(
      "(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>, %i: tensor<1x3x8x8xf32>, "
      "%k: tensor<5x3x3x3xf32>) -> (tensor<2x8x4xf32>, tensor<1x5x6x6xf32>, "
      "tensor<1x5x3x3xf32>, tensor<2x8x4xf32>)",
      R"(
  %m = graph.matmul %x, %w : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> tensor<2x8x4xf32>
  %c = graph.conv2d %i, %k {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>, tensor<5x3x3x3xf32>) -> tensor<1x5x6x6xf32>
  %p = graph.max_pool2d %c {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x5x6x6xf32>) -> tensor<1x5x3x3xf32>
  %r = graph.reshape %m : (tensor<2x8x4xf32>) -> tensor<64xf32>
  %f = graph.fused %m : (tensor<2x8x4xf32>) -> tensor<2x8x4xf32> {
  ^bb0(%a: tensor<2x8x4xf32>):
    %e = graph.exp %a : (tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
    %n = graph.neg %e : (tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
    graph.yield %n : tensor<2x8x4xf32>
  }
  return %m, %c, %p, %f : tensor<2x8x4xf32>, tensor<1x5x6x6xf32>, tensor<1x5x3x3xf32>, tensor<2x8x4xf32>)");
  ASSERT_EQ(costs.size(), 4u); // the reshape is a view: free
  EXPECT_EQ(costs[0].opClass, OpCost::Matmul);
  EXPECT_DOUBLE_EQ(costs[0].flops, 2.0 * 2 * 8 * 4 * 16);
  EXPECT_DOUBLE_EQ(costs[0].bytes, 4.0 * (2 * 8 * 16 + 16 * 4 + 2 * 8 * 4));
  EXPECT_EQ(costs[1].opClass, OpCost::Conv);
  EXPECT_DOUBLE_EQ(costs[1].flops, 2.0 * 5 * 6 * 6 * 3 * 3 * 3);
  EXPECT_EQ(costs[2].opClass, OpCost::Reduce);
  EXPECT_DOUBLE_EQ(costs[2].flops, 5.0 * 3 * 3 * 4);
  // The fused kernel: both body ops' FLOPs (an exp costs six adds), but
  // only its input and output move.
  EXPECT_EQ(costs[3].opClass, OpCost::Elementwise);
  EXPECT_DOUBLE_EQ(costs[3].flops, (6.0 + 1.0) * 64);
  EXPECT_DOUBLE_EQ(costs[3].bytes, 2.0 * 64 * 4);
}

TEST(OpCost, SixteenBitBytesAndBoolResults) {
  auto costs = costsOf("(%a: tensor<10xbf16>, %b: tensor<10xbf16>) -> tensor<10xi1>", R"(
  %c = graph.less %a, %b : (tensor<10xbf16>, tensor<10xbf16>) -> tensor<10xi1>
  return %c : tensor<10xi1>)");
  ASSERT_EQ(costs.size(), 1u);
  EXPECT_DOUBLE_EQ(costs[0].bytes, 2.0 * 10 * 2 + 10); // bf16 in, one byte per bool out
}

} // namespace

TEST(OpCost, FunctionsCostSeveralAdds) {
  auto costs = costsOf("(%a: tensor<10xf32>, %b: tensor<10xf32>) -> (tensor<10xf32>, "
                       "tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<10xf32>)",
                       R"(
  %s = graph.add %a, %b : (tensor<10xf32>, tensor<10xf32>) -> tensor<10xf32>
  %d = graph.div %a, %b : (tensor<10xf32>, tensor<10xf32>) -> tensor<10xf32>
  %e = graph.erf %a : (tensor<10xf32>) -> tensor<10xf32>
  %g = graph.gelu %a : (tensor<10xf32>) -> tensor<10xf32>
  %t = graph.gelu %a {approximate = "tanh"} : (tensor<10xf32>) -> tensor<10xf32>
  return %s, %d, %e, %g, %t : tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<10xf32>)");
  ASSERT_EQ(costs.size(), 5u);
  // An add is the unit; a divide, an erf and GELU's two forms cost more,
  // the tanh form less than the erf one.
  EXPECT_DOUBLE_EQ(costs[0].flops, 10.0);
  EXPECT_GT(costs[1].flops, 2 * costs[0].flops);
  EXPECT_GT(costs[2].flops, costs[1].flops);
  EXPECT_GT(costs[3].flops, costs[2].flops);
  EXPECT_LT(costs[4].flops, costs[3].flops);
  for (int i = 0; i < 5; ++i) // the bytes are the operands', whatever the function
    EXPECT_DOUBLE_EQ(costs[i].bytes, 4.0 * 10 * (i < 2 ? 3 : 2));
}
