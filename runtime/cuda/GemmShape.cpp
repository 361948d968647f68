//===- GemmShape.cpp - a plan's MatMul as one column-major GEMM -----------===//
#include "runtime/cuda/GemmShape.h"

namespace dtc::runtime::cuda {
namespace {

int64_t product(const std::vector<int64_t> &dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

/// `shape`'s batch dims (all but the last two), padded with 1s in front to `rank`.
std::vector<int64_t> batchOf(const std::vector<int64_t> &shape, size_t rank) {
  std::vector<int64_t> batch(shape.begin(), shape.end() - 2);
  batch.insert(batch.begin(), rank - batch.size(), 1);
  return batch;
}

std::string text(const std::vector<int64_t> &dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i)
    s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

} // namespace

bool gemmShapeOf(const std::vector<int64_t> &lhs, const std::vector<int64_t> &rhs,
                 const std::vector<int64_t> &output, bool transposeLhs, bool transposeRhs,
                 GemmShape &gemm, std::string &why) {
  if (lhs.size() < 2 || rhs.size() < 2 || output.size() < 2) {
    why = "a matrix product needs operands of rank 2 or more";
    return false;
  }
  int64_t lhsRows = lhs[lhs.size() - 2], lhsCols = lhs.back();
  int64_t rhsRows = rhs[rhs.size() - 2], rhsCols = rhs.back();
  int64_t m = transposeLhs ? lhsCols : lhsRows, k = transposeLhs ? lhsRows : lhsCols;
  int64_t n = transposeRhs ? rhsRows : rhsCols;
  if ((transposeRhs ? rhsCols : rhsRows) != k || output[output.size() - 2] != m ||
      output.back() != n) {
    why = "shapes " + text(lhs) + " x " + text(rhs) + " -> " + text(output) +
          " are not a matrix product";
    return false;
  }
  // Column-major, the right operand first: A = rhs (N x K), B = lhs (K x M).
  gemm.m = n;
  gemm.n = m;
  gemm.k = k;
  gemm.transA = transposeRhs; // stored [N, K]: column-major K x N, transposed
  gemm.lda = rhsCols;
  gemm.transB = transposeLhs; // stored [K, M]: column-major M x K, transposed
  gemm.ldb = lhsCols;
  gemm.ldc = n;
  size_t rank = output.size() - 2;
  std::vector<int64_t> lb = batchOf(lhs, rank), rb = batchOf(rhs, rank), ob = batchOf(output, rank);
  int64_t lhsBatch = product(lb), rhsBatch = product(rb), outBatch = product(ob);
  gemm.batch = 1;
  gemm.strideA = gemm.strideB = gemm.strideC = 0;
  if (outBatch == 1)
    return true;
  if (rhsBatch == 1 && !transposeLhs && lb == ob) {
    // The left operand's batch folds into its rows: [B * M, K] x [K, N].
    gemm.n = m * lhsBatch;
    return true;
  }
  gemm.batch = outBatch;
  gemm.strideC = m * n;
  if ((lb == ob || lhsBatch == 1) && (rb == ob || rhsBatch == 1)) {
    gemm.strideA = rhsBatch == 1 ? 0 : n * k;
    gemm.strideB = lhsBatch == 1 ? 0 : m * k;
    return true;
  }
  why = "batch dims " + text(lb) + " and " + text(rb) + " broadcast partly";
  return false;
}

uint32_t gemmAlignment(uint64_t address, int64_t strideBytes) {
  uint64_t bits = address | uint64_t(strideBytes) | 256;
  return uint32_t(bits & (~bits + 1)); // the lowest set bit
}

} // namespace dtc::runtime::cuda
