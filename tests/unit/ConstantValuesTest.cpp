// evaluateConstant (compiler/ConstantValues.h), which dtc-fuse-attention
// uses to read masks, on small functions parsed from text: each op it
// knows, broadcasting, and what it refuses (a function argument, a tensor
// past the limit).
#include "compiler/ConstantValues.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace {

class ConstantValuesTest : public ::testing::Test {
protected:
  ConstantValuesTest() { context.loadDialect<dtc::graph::GraphDialect, func::FuncDialect>(); }

  /// The value `body`'s function returns, evaluated (limit `max`).
  std::optional<dtc::ConstantValues> evaluate(const std::string &body, const std::string &type,
                                              int64_t max = 1 << 20) {
    std::string text = "func.func @f(%arg: tensor<2xf32>) -> " + type + " {\n" + body + "\n}";
    module = parseSourceString<ModuleOp>(text, &context);
    EXPECT_TRUE(module) << text;
    if (!module)
      return std::nullopt;
    auto f = cast<func::FuncOp>(module->getBody()->front());
    return dtc::evaluateConstant(f.getBody().front().getTerminator()->getOperand(0), max);
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
};

using Floats = std::vector<float>;

TEST_F(ConstantValuesTest, ComparisonsLogicAndWhereBroadcast) {
  auto v = evaluate(R"(
    %a = graph.constant dense<[0, 1, 2]> : tensor<3xi64>
    %b = graph.reshape %a : (tensor<3xi64>) -> tensor<3x1xi64>
    %le = graph.less_equal %a, %b : (tensor<3xi64>, tensor<3x1xi64>) -> tensor<3x3xi1>
    %t = graph.constant dense<true> : tensor<i1>
    %n = graph.not %le : (tensor<3x3xi1>) -> tensor<3x3xi1>
    %o = graph.or %n, %t : (tensor<3x3xi1>, tensor<i1>) -> tensor<3x3xi1>
    %x = graph.and %o, %le : (tensor<3x3xi1>, tensor<3x3xi1>) -> tensor<3x3xi1>
    %z = graph.constant dense<0.0> : tensor<f32>
    %m = graph.constant dense<-1.0e9> : tensor<f32>
    %w = graph.where %x, %z, %m : (tensor<3x3xi1>, tensor<f32>, tensor<f32>) -> tensor<3x3xf32>
    return %w : tensor<3x3xf32>)",
                    "tensor<3x3xf32>");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->shape, (SmallVector<int64_t>{3, 3}));
  EXPECT_EQ(v->values, (Floats{0, -1e9f, -1e9f, 0, 0, -1e9f, 0, 0, 0}));
}

TEST_F(ConstantValuesTest, SharedPartsAndBroadcastsOverSeveralDims) {
  // %s is read twice (evaluated once, kept); %a [2,1,3] against %b [4,1]
  // broadcasts to [2,4,3] over a middle and a leading dim; the sum over
  // the middle dim reduces between two kept ones.
  auto v = evaluate(R"(
    %a = graph.constant dense<[[[0.0, 1.0, 2.0]], [[10.0, 20.0, 30.0]]]> : tensor<2x1x3xf32>
    %b = graph.constant dense<[[100.0], [200.0], [300.0], [400.0]]> : tensor<4x1xf32>
    %s = graph.add %a, %b : (tensor<2x1x3xf32>, tensor<4x1xf32>) -> tensor<2x4x3xf32>
    %d = graph.sub %s, %s : (tensor<2x4x3xf32>, tensor<2x4x3xf32>) -> tensor<2x4x3xf32>
    %e = graph.add %s, %d : (tensor<2x4x3xf32>, tensor<2x4x3xf32>) -> tensor<2x4x3xf32>
    %r = graph.reduce_sum %e {axes = array<i64: 1>, keepdims = false} : (tensor<2x4x3xf32>) -> tensor<2x3xf32>
    return %r : tensor<2x3xf32>)",
                    "tensor<2x3xf32>");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->shape, (SmallVector<int64_t>{2, 3}));
  // Row i, column j: sum over k of a[i][j] + b[k] = 4 a[i][j] + 1000.
  EXPECT_EQ(v->values, (Floats{1000, 1004, 1008, 1040, 1080, 1120}));
}

TEST_F(ConstantValuesTest, TriluTransposeGatherAndReductions) {
  // upper k=1: [[0,2,3],[0,0,6]]; transposed [[0,0],[2,0],[3,6]]; rows 2,
  // 0 (as -3), 1 gathered: [[3,6],[0,0],[2,0]]; row sums [9,0,2] less
  // column maxima [3,6]: [[6,3],[-3,-6],[-1,-4]].
  auto v = evaluate(R"(
    %a = graph.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>
    %u = graph.trilu %a {upper = true, k = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %t = graph.transpose %u {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
    %i = graph.constant dense<[2, -3, 1]> : tensor<3xi64>
    %g = graph.gather %t, %i {axis = 0 : i64} : (tensor<3x2xf32>, tensor<3xi64>) -> tensor<3x2xf32>
    %s = graph.reduce_sum %g {axes = array<i64: 1>, keepdims = true} : (tensor<3x2xf32>) -> tensor<3x1xf32>
    %x = graph.reduce_max %g {axes = array<i64: 0>, keepdims = false} : (tensor<3x2xf32>) -> tensor<2xf32>
    %sx = graph.sub %s, %x : (tensor<3x1xf32>, tensor<2xf32>) -> tensor<3x2xf32>
    return %sx : tensor<3x2xf32>)",
                    "tensor<3x2xf32>");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->values, (Floats{6, 3, -3, -6, -1, -4}));
  // The minimum over all, casts to i1 and back, a broadcast, a product.
  auto w = evaluate(R"(
    %a = graph.constant dense<[[2.0, 0.0], [-1.0, 3.0]]> : tensor<2x2xf32>
    %n = graph.reduce_min %a {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x2xf32>) -> tensor<f32>
    %c = graph.cast %a : (tensor<2x2xf32>) -> tensor<2x2xi1>
    %f = graph.cast %c : (tensor<2x2xi1>) -> tensor<2x2xf32>
    %b = graph.broadcast %f {shape = array<i64: 2, 2, 2>} : (tensor<2x2xf32>) -> tensor<2x2x2xf32>
    %m = graph.mul %b, %n : (tensor<2x2x2xf32>, tensor<f32>) -> tensor<2x2x2xf32>
    return %m : tensor<2x2x2xf32>)",
                    "tensor<2x2x2xf32>");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->values, (Floats{-1, 0, -1, -1, -1, 0, -1, -1}));
}

TEST_F(ConstantValuesTest, RefusesArgumentsUnknownOpsAndLargeTensors) {
  EXPECT_FALSE(evaluate("return %arg : tensor<2xf32>", "tensor<2xf32>"));
  EXPECT_FALSE(evaluate(R"(
    %e = graph.exp %arg : (tensor<2xf32>) -> tensor<2xf32>
    return %e : tensor<2xf32>)",
                        "tensor<2xf32>"));
  EXPECT_FALSE(evaluate(R"(
    %a = graph.constant dense<1.0> : tensor<2xf32>
    %e = graph.exp %a : (tensor<2xf32>) -> tensor<2xf32>
    return %e : tensor<2xf32>)",
                        "tensor<2xf32>"));
  const char *big = R"(
    %a = graph.constant dense<1.0> : tensor<64x64xf32>
    %t = graph.trilu %a {upper = false} : (tensor<64x64xf32>) -> tensor<64x64xf32>
    return %t : tensor<64x64xf32>)";
  EXPECT_TRUE(evaluate(big, "tensor<64x64xf32>", 4096));
  EXPECT_FALSE(evaluate(big, "tensor<64x64xf32>", 4095));
  // A gather index out of range is not a value.
  EXPECT_FALSE(evaluate(R"(
    %a = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
    %i = graph.constant dense<[2]> : tensor<1xi64>
    %g = graph.gather %a, %i {axis = 0 : i64} : (tensor<2xf32>, tensor<1xi64>) -> tensor<1xf32>
    return %g : tensor<1xf32>)",
                        "tensor<1xf32>"));
}

// A block of a split table (skip_outside): indices outside it take zeros,
// none wraps (-2 would be row 1) and none is refused.
TEST_F(ConstantValuesTest, GatherSkippingOutsideTakesZeros) {
  auto v = evaluate(R"(
    %a = graph.constant dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]> : tensor<3x2xf32>
    %i = graph.constant dense<[-1, 0, 2, 3, -2]> : tensor<5xi64>
    %g = graph.gather %a, %i {axis = 0 : i64, skip_outside} : (tensor<3x2xf32>, tensor<5xi64>) -> tensor<5x2xf32>
    return %g : tensor<5x2xf32>)",
                    "tensor<5x2xf32>");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->values, (Floats{0, 0, 1, 2, 5, 6, 0, 0, 0, 0}));
}

} // namespace
