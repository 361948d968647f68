//===- ConstantFolding.h - folding graph ops on constants -------*- C++ -*-===//
//
// Graph ops fold when their operands are small constants, so shape
// subgraphs (Shape -> Gather -> Concat -> Reshape, as PyTorch exports them)
// disappear at import and in canonicalisation. Large tensors never fold.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_DIALECTS_GRAPH_CONSTANTFOLDING_H
#define DTC_DIALECTS_GRAPH_CONSTANTFOLDING_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"

#include <cmath>
#include <optional>

namespace dtc::graph {

/// Tensors with more elements than this are left alone by the folders.
constexpr int64_t kMaxFoldElements = 1 << 16;

/// A constant's elements, widened to int64 (integers and i1) or double.
struct FoldValues {
  mlir::RankedTensorType type;
  bool isFloat = false;
  llvm::SmallVector<int64_t> ints;
  llvm::SmallVector<double> floats;
};

/// The elements of a small static constant, or nullopt.
std::optional<FoldValues> readFoldValues(mlir::Attribute attr);

/// A dense constant of `type` from int64 or double values (converted to the
/// type's element type).
mlir::DenseElementsAttr makeDense(mlir::RankedTensorType type,
                                  llvm::ArrayRef<int64_t> ints);
mlir::DenseElementsAttr makeDense(mlir::RankedTensorType type,
                                  llvm::ArrayRef<double> floats);

/// For each element of `result` (row-major), the flat index into an operand
/// of shape `operand` that broadcasts to it.
llvm::SmallVector<int64_t> broadcastSourceIndices(llvm::ArrayRef<int64_t> result,
                                                  llvm::ArrayRef<int64_t> operand);

inline std::optional<int64_t> foldDivide(int64_t a, int64_t b) {
  if (b == 0 || (a == INT64_MIN && b == -1))
    return std::nullopt;
  return a / b;
}
inline std::optional<double> foldDivide(double a, double b) { return a / b; }

/// Pow: integers by repeated multiplication (a negative exponent or an
/// overflow does not fold), floats by std::pow (exporters compute shapes
/// as Pow(1369, 0.5) and cast them to integers).
inline std::optional<int64_t> foldPower(int64_t a, int64_t b) {
  if (b < 0)
    return std::nullopt;
  int64_t result = 1;
  for (int64_t i = 0; i < b; ++i)
    if (__builtin_mul_overflow(result, a, &result))
      return std::nullopt;
  return result;
}
inline std::optional<double> foldPower(double a, double b) { return std::pow(a, b); }

/// Folds an elementwise binary op with broadcasting; `fn` is called with
/// (int64_t, int64_t) or (double, double) and returns an optional.
template <typename Fn>
mlir::OpFoldResult foldBinary(mlir::Type resultType, mlir::Attribute lhs,
                              mlir::Attribute rhs, Fn fn) {
  auto type = llvm::dyn_cast<mlir::RankedTensorType>(resultType);
  auto a = readFoldValues(lhs), b = readFoldValues(rhs);
  if (!type || !a || !b || a->isFloat != b->isFloat ||
      type.getNumElements() > kMaxFoldElements)
    return {};
  auto ia = broadcastSourceIndices(type.getShape(), a->type.getShape());
  auto ib = broadcastSourceIndices(type.getShape(), b->type.getShape());
  bool floatResult = llvm::isa<mlir::FloatType>(type.getElementType());
  llvm::SmallVector<int64_t> ints;
  llvm::SmallVector<double> floats;
  for (size_t i = 0; i < ia.size(); ++i) {
    if (a->isFloat) {
      auto r = fn(a->floats[ia[i]], b->floats[ib[i]]);
      if (!r)
        return {};
      floatResult ? floats.push_back(*r) : ints.push_back(int64_t(*r));
    } else {
      auto r = fn(a->ints[ia[i]], b->ints[ib[i]]);
      if (!r)
        return {};
      ints.push_back(*r);
    }
  }
  return floatResult ? makeDense(type, llvm::ArrayRef<double>(floats))
                     : makeDense(type, llvm::ArrayRef<int64_t>(ints));
}

} // namespace dtc::graph

#endif // DTC_DIALECTS_GRAPH_CONSTANTFOLDING_H
