//===- KernelMath.cpp - math functions in generated kernels ---------------===//
#include "compiler/KernelMath.h"

#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/DialectConversion.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

using namespace mlir;

namespace dtc {

LogicalResult expandKernelMath(Operation *root) {
  // bf16 and f16 math in f32 (between an extension and a truncation): the
  // approximations and libdevice are f32 (and f64) only.
  {
    TypeConverter converter;
    math::populateLegalizeToF32TypeConverter(converter);
    ConversionTarget target(*root->getContext());
    math::populateLegalizeToF32ConversionTarget(target, converter);
    RewritePatternSet widen(root->getContext());
    math::populateLegalizeToF32Patterns(widen, converter);
    if (failed(applyPartialConversion(root, target, std::move(widen))))
      return failure();
  }
  RewritePatternSet patterns(root->getContext());
  populateExpandPowFPattern(patterns);
  populateMathPolynomialApproximationPatterns(patterns);
  populateExpandFmaFPattern(patterns);
  return applyPatternsAndFoldGreedily(root, std::move(patterns));
}

} // namespace dtc
