// Folding through the same path the importer uses: build graph ops on
// constants and check what they fold to.
#include "dialects/graph/ConstantFolding.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace dtc::graph;

namespace {

class ConstantFoldingTest : public ::testing::Test {
protected:
  ConstantFoldingTest() : builder(&context) {
    context.loadDialect<GraphDialect>();
    module = ModuleOp::create(builder.getUnknownLoc());
    builder.setInsertionPointToEnd(module->getBody());
  }

  Value ints(ArrayRef<int64_t> values, ArrayRef<int64_t> shape) {
    auto type = RankedTensorType::get(shape, builder.getI64Type());
    return builder.create<ConstantOp>(builder.getUnknownLoc(), type,
                                      DenseElementsAttr::get(type, values));
  }

  /// The values `op` folds to, or an empty vector when it does not fold.
  std::vector<int64_t> foldedInts(Operation *op) {
    SmallVector<OpFoldResult> results;
    if (failed(op->fold(results)) || results.size() != 1)
      return {};
    auto values = readFoldValues(dyn_cast<Attribute>(results[0]));
    if (!values)
      return {};
    return std::vector<int64_t>(values->ints.begin(), values->ints.end());
  }

  MLIRContext context;
  OpBuilder builder;
  OwningOpRef<ModuleOp> module;
};

TEST_F(ConstantFoldingTest, AddBroadcasts) {
  Value a = ints({1, 2, 3, 4, 5, 6}, {2, 3});
  Value b = ints({10, 20, 30}, {3});
  auto op = builder.create<AddOp>(builder.getUnknownLoc(), a, b);
  EXPECT_EQ(foldedInts(op), (std::vector<int64_t>{11, 22, 33, 14, 25, 36}));
}

TEST_F(ConstantFoldingTest, IntegerDivisionByZeroDoesNotFold) {
  Value a = ints({4}, {1}), b = ints({0}, {1});
  auto op = builder.create<DivOp>(builder.getUnknownLoc(), a, b);
  EXPECT_TRUE(foldedInts(op).empty());
}

TEST_F(ConstantFoldingTest, GatherConcatAsInShapeSubgraphs) {
  // Shape -> Gather(1) -> Unsqueeze -> Concat([-1], ...) as PyTorch exports.
  Value shape = ints({2, 16, 64}, {3});
  auto gather = builder.create<GatherOp>(
      builder.getUnknownLoc(), shape, ints({1}, {}), builder.getI64IntegerAttr(0), UnitAttr());
  EXPECT_EQ(foldedInts(gather), (std::vector<int64_t>{16}));
  auto gatherNeg = builder.create<GatherOp>(
      builder.getUnknownLoc(), shape, ints({-1, 0}, {2}), builder.getI64IntegerAttr(0), UnitAttr());
  EXPECT_EQ(foldedInts(gatherNeg), (std::vector<int64_t>{64, 2}));
  auto concat = builder.create<ConcatOp>(
      builder.getUnknownLoc(), ValueRange{ints({-1}, {1}), shape},
      builder.getI64IntegerAttr(0));
  EXPECT_EQ(foldedInts(concat), (std::vector<int64_t>{-1, 2, 16, 64}));
}

TEST_F(ConstantFoldingTest, SliceWithNegativeStride) {
  Value v = ints({0, 1, 2, 3, 4, 5}, {6});
  auto op = builder.create<SliceOp>(builder.getUnknownLoc(), v,
                                    builder.getDenseI64ArrayAttr({5}),
                                    builder.getDenseI64ArrayAttr({3}),
                                    builder.getDenseI64ArrayAttr({-2}));
  EXPECT_EQ(foldedInts(op), (std::vector<int64_t>{5, 3, 1}));
}

TEST_F(ConstantFoldingTest, TransposeAndBroadcast) {
  Value m = ints({1, 2, 3, 4, 5, 6}, {2, 3});
  auto t = builder.create<TransposeOp>(builder.getUnknownLoc(), m,
                                       builder.getDenseI64ArrayAttr({1, 0}));
  EXPECT_EQ(foldedInts(t), (std::vector<int64_t>{1, 4, 2, 5, 3, 6}));
  auto b = builder.create<BroadcastOp>(builder.getUnknownLoc(), ints({7, 8}, {2, 1}),
                                       builder.getDenseI64ArrayAttr({2, 2}));
  EXPECT_EQ(foldedInts(b), (std::vector<int64_t>{7, 7, 8, 8}));
}

} // namespace

TEST(ConstantFolding, PowerFoldsIntegersExactlyAndFloatsByPow) {
  EXPECT_EQ(dtc::graph::foldPower(int64_t(2), int64_t(62)), int64_t(1) << 62);
  EXPECT_EQ(dtc::graph::foldPower(int64_t(-3), int64_t(3)), -27);
  EXPECT_EQ(dtc::graph::foldPower(int64_t(5), int64_t(0)), 1);
  // An overflow or a negative exponent (a fraction) is left to run.
  EXPECT_FALSE(dtc::graph::foldPower(int64_t(2), int64_t(64)));
  EXPECT_FALSE(dtc::graph::foldPower(int64_t(3), int64_t(-1)));
  EXPECT_EQ(dtc::graph::foldPower(1369.0, 0.5), 37.0);
}
