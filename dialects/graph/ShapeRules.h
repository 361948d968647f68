//===- ShapeRules.h - shape arithmetic shared by ops and importer -*- C++ -*-===//
//
// Plain shape arithmetic (no MLIR types), used by the graph ops' result-type
// rules and by the ONNX importer's constant folding, so both agree.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_DIALECTS_GRAPH_SHAPERULES_H
#define DTC_DIALECTS_GRAPH_SHAPERULES_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include <cstdint>
#include <optional>
#include <string>

namespace dtc::graph {

using Shape = llvm::SmallVector<int64_t, 6>;

/// NumPy broadcasting of two shapes; nullopt when a dim pair is neither equal
/// nor 1.
std::optional<Shape> broadcastShapes(llvm::ArrayRef<int64_t> a,
                                     llvm::ArrayRef<int64_t> b);

/// Maps an axis in [-rank, rank) to [0, rank); nullopt when out of range.
std::optional<int64_t> normalizeAxis(int64_t axis, int64_t rank);

/// Number of elements, or nullopt on overflow past 2^62 or a negative dim.
std::optional<int64_t> elementCount(llvm::ArrayRef<int64_t> shape);

/// Output length of a sliding window (conv, pool) along one dim; nullopt
/// when the window does not fit.
std::optional<int64_t> windowOutputSize(int64_t input, int64_t kernel,
                                        int64_t stride, int64_t padBegin,
                                        int64_t padEnd, int64_t dilation,
                                        bool ceilMode);

/// "2x3x4" (or "scalar" for rank 0), for messages.
std::string shapeToString(llvm::ArrayRef<int64_t> shape);

} // namespace dtc::graph

#endif // DTC_DIALECTS_GRAPH_SHAPERULES_H
