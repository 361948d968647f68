//===- GemmShape.h - a plan's MatMul as one column-major GEMM ---*- C++ -*-===//
//
// cuBLAS(Lt) multiplies column-major matrices; the plan's tensors are
// row-major. A row-major C = A B is the column-major C^T = B^T A^T, and a
// row-major matrix read as column-major is its transpose, so the GEMM
// takes the plan's right operand first: no data moves. Batch dims map to
// a strided batch (stride 0 for an operand broadcast over the batch); a
// right operand with no batch lets the left operand's batch fold into its
// rows (one larger GEMM). Other broadcasts have no single GEMM. Plain
// arithmetic, no CUDA: tested on any machine (CudaGeometryTest).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CUDA_GEMMSHAPE_H
#define DTC_RUNTIME_CUDA_GEMMSHAPE_H

#include <cstdint>
#include <string>
#include <vector>

namespace dtc::runtime::cuda {

/// C (m x n) = op(A) (m x k) op(B) (k x n), column-major, `batch` times:
/// A is the plan's right operand, B its left, C its output.
struct GemmShape {
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1;
  int64_t strideA = 0, strideB = 0, strideC = 0; // elements between batch entries
};

/// The GEMM computing output[..., M, N] = lhs[..., M, K] rhs[..., K, N]
/// (each operand's last two dims swapped first when transposed); false
/// with `why` when the batch dims broadcast in a way no strided batch
/// covers.
bool gemmShapeOf(const std::vector<int64_t> &lhs, const std::vector<int64_t> &rhs,
                 const std::vector<int64_t> &output, bool transposeLhs, bool transposeRhs,
                 GemmShape &gemm, std::string &why);

/// The alignment cuBLASLt may assume of a matrix at `address` whose
/// batch entries are `strideBytes` apart (0: one matrix): the largest power
/// of two up to 256 dividing both. Its heuristic assumes 256 unless told
/// (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*); a plan's buffers are 64-byte
/// aligned, and a view's may be less.
uint32_t gemmAlignment(uint64_t address, int64_t strideBytes);

} // namespace dtc::runtime::cuda

#endif // DTC_RUNTIME_CUDA_GEMMSHAPE_H
