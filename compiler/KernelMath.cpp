//===- KernelMath.cpp - math functions in generated kernels ---------------===//
#include "compiler/KernelMath.h"

#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

using namespace mlir;

namespace dtc {

LogicalResult expandKernelMath(Operation *root) {
  RewritePatternSet patterns(root->getContext());
  populateExpandPowFPattern(patterns);
  populateMathPolynomialApproximationPatterns(patterns);
  populateExpandFmaFPattern(patterns);
  return applyPatternsAndFoldGreedily(root, std::move(patterns));
}

} // namespace dtc
