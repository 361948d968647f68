//===- ShapeRules.cpp -----------------------------------------------------===//
#include "dialects/graph/ShapeRules.h"

#include <algorithm>

namespace dtc::graph {

std::optional<Shape> broadcastShapes(llvm::ArrayRef<int64_t> a,
                                     llvm::ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  Shape result(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return std::nullopt;
    result[i] = da == 1 ? db : da;
  }
  return result;
}

std::optional<int64_t> normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

std::optional<int64_t> elementCount(llvm::ArrayRef<int64_t> shape) {
  constexpr int64_t limit = int64_t(1) << 62;
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return std::nullopt;
    if (d != 0 && count > limit / d)
      return std::nullopt;
    count *= d;
  }
  return count;
}

std::optional<int64_t> windowOutputSize(int64_t input, int64_t kernel,
                                        int64_t stride, int64_t padBegin,
                                        int64_t padEnd, int64_t dilation,
                                        bool ceilMode) {
  if (kernel < 1 || stride < 1 || dilation < 1 || padBegin < 0 || padEnd < 0)
    return std::nullopt;
  int64_t span = dilation * (kernel - 1) + 1;
  int64_t padded = input + padBegin + padEnd;
  if (padded < span)
    return std::nullopt;
  int64_t steps = padded - span;
  int64_t out = (ceilMode ? (steps + stride - 1) / stride : steps / stride) + 1;
  // With ceil mode the last window must start inside the input or left pad.
  if (ceilMode && (out - 1) * stride >= input + padBegin)
    --out;
  return out;
}

std::string shapeToString(llvm::ArrayRef<int64_t> shape) {
  if (shape.empty())
    return "scalar";
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      s += 'x';
    s += std::to_string(shape[i]);
  }
  return s;
}

} // namespace dtc::graph
