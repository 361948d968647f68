//===- CudaHostTest.cpp - the CUDA backend's host-side arithmetic ---------===//
//
// What the CUDA backend decides on the host, checked without a GPU: each
// matrix product's GEMM (GemmShape.h) run by a plain column-major GEMM
// loop against the row-major product it stands for, over transposes,
// batches, folded batches and broadcasts; which PTX a GPU loads; which
// GPU a process takes; and that every driver, cuBLASLt and NCCL entry
// point the backend calls exists in the toolkit's libraries (its libcuda
// stub).
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/CudaDevice.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CublasLtApi.h"
#include "runtime/cuda/DriverApi.h"
#include "runtime/cuda/GemmShape.h"
#include "runtime/cuda/NcclApi.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

using namespace dtc::runtime::cuda;

namespace {

using Shape = std::vector<int64_t>;

int64_t product(const Shape &s, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i)
    n *= s[i];
  return n;
}

/// The row-major product with NumPy batch broadcasting, the plan's meaning.
std::vector<float> reference(const std::vector<float> &lhs, const Shape &ls,
                             const std::vector<float> &rhs, const Shape &rs, const Shape &os,
                             bool tl, bool tr) {
  size_t rank = os.size();
  int64_t m = os[rank - 2], n = os[rank - 1];
  int64_t k = tl ? ls[ls.size() - 2] : ls.back();
  std::vector<float> out(size_t(product(os, 0, rank)));
  int64_t batches = product(os, 0, rank - 2);
  for (int64_t b = 0; b < batches; ++b) {
    // The batch coordinates, each operand's read at 0 where it has size 1.
    int64_t lb = 0, rb = 0, rest = b, lstride = 1, rstride = 1;
    for (int64_t d = int64_t(rank) - 3; d >= 0; --d) {
      int64_t c = rest % os[size_t(d)];
      rest /= os[size_t(d)];
      int64_t ld = d - (int64_t(rank) - int64_t(ls.size())),
              rd = d - (int64_t(rank) - int64_t(rs.size()));
      if (ld >= 0) {
        lb += (ls[size_t(ld)] == 1 ? 0 : c) * lstride;
        lstride *= ls[size_t(ld)];
      }
      if (rd >= 0) {
        rb += (rs[size_t(rd)] == 1 ? 0 : c) * rstride;
        rstride *= rs[size_t(rd)];
      }
    }
    const float *l = lhs.data() + lb * m * k, *r = rhs.data() + rb * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += double(tl ? l[p * m + i] : l[i * k + p]) * double(tr ? r[j * k + p] : r[p * n + j]);
        out[size_t(b * m * n + i * n + j)] = float(s);
      }
  }
  return out;
}

/// A column-major strided-batch GEMM as cuBLAS defines it.
std::vector<float> columnMajorGemm(const GemmShape &g, const std::vector<float> &a,
                                   const std::vector<float> &b, size_t outputSize) {
  std::vector<float> c(outputSize, 0);
  for (int64_t batch = 0; batch < g.batch; ++batch) {
    const float *A = a.data() + batch * g.strideA, *B = b.data() + batch * g.strideB;
    float *C = c.data() + batch * g.strideC;
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < g.k; ++p) {
          float x = g.transA ? A[i * g.lda + p] : A[p * g.lda + i];
          float y = g.transB ? B[p * g.ldb + j] : B[j * g.ldb + p];
          s += double(x) * double(y);
        }
        C[j * g.ldc + i] = float(s);
      }
  }
  return c;
}

struct Product {
  Shape lhs, rhs, out;
  bool tl, tr;
  int64_t batch; // the GEMM's batch count wanted (1: one GEMM, folded or not)
};

TEST(CudaHost, EveryMatrixProductAsOneColumnMajorGemm) {
  std::vector<Product> cases = {
      {{5, 7}, {7, 3}, {5, 3}, false, false, 1},
      {{7, 5}, {7, 3}, {5, 3}, true, false, 1},
      {{5, 7}, {3, 7}, {5, 3}, false, true, 1},
      {{7, 5}, {3, 7}, {5, 3}, true, true, 1},
      {{2, 4, 5, 7}, {7, 3}, {2, 4, 5, 3}, false, false, 1},   // folded into 40 rows
      {{2, 4, 5, 7}, {3, 7}, {2, 4, 5, 3}, false, true, 1},    // a linear layer's weight
      {{2, 4, 7, 5}, {7, 3}, {2, 4, 5, 3}, true, false, 8},    // transposed: no folding
      {{2, 4, 5, 7}, {2, 4, 7, 3}, {2, 4, 5, 3}, false, false, 8}, // attention scores
      {{2, 4, 5, 7}, {2, 4, 3, 7}, {2, 4, 5, 3}, false, true, 8},
      {{5, 7}, {6, 7, 3}, {6, 5, 3}, false, false, 6},          // the left operand broadcast
      {{1, 5, 7}, {6, 7, 3}, {6, 5, 3}, false, false, 6},
  };
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> real(-1, 1);
  for (const Product &p : cases) {
    SCOPED_TRACE(testing::PrintToString(p.lhs) + " x " + testing::PrintToString(p.rhs));
    GemmShape g;
    std::string why;
    ASSERT_TRUE(gemmShapeOf(p.lhs, p.rhs, p.out, p.tl, p.tr, g, why)) << why;
    EXPECT_EQ(g.batch, p.batch);
    std::vector<float> lhs(size_t(product(p.lhs, 0, p.lhs.size()))),
        rhs(size_t(product(p.rhs, 0, p.rhs.size())));
    for (float &v : lhs)
      v = real(rng);
    for (float &v : rhs)
      v = real(rng);
    std::vector<float> want = reference(lhs, p.lhs, rhs, p.rhs, p.out, p.tl, p.tr);
    std::vector<float> got = columnMajorGemm(g, rhs, lhs, want.size()); // A = rhs, B = lhs
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5) << "element " << i;
  }
  // A partial broadcast has no single strided batch: said, and left to the host.
  GemmShape g;
  std::string why;
  EXPECT_FALSE(gemmShapeOf({2, 1, 5, 7}, {1, 3, 7, 4}, {2, 3, 5, 4}, false, false, g, why));
  EXPECT_EQ(why, "batch dims [2, 1] and [1, 3] broadcast partly");
  EXPECT_FALSE(gemmShapeOf({5, 7}, {6, 3}, {5, 3}, false, false, g, why));
  EXPECT_NE(why.find("not a matrix product"), std::string::npos) << why;
}

TEST(CudaHost, AGpuLoadsItsOwnPtxOrTheNewestOlder) {
  std::vector<std::string> chips = {"sm_80", "sm_90"};
  EXPECT_EQ(chipFor(9, 0, chips), "sm_90");  // H100, H200
  EXPECT_EQ(chipFor(8, 0, chips), "sm_80");  // A100
  EXPECT_EQ(chipFor(8, 9, chips), "sm_80");  // L4, L40: sm_80's PTX, compiled forward
  EXPECT_EQ(chipFor(10, 0, chips), "sm_90"); // B200
  EXPECT_EQ(chipFor(7, 5, chips), "");       // T4: older than every kernel
}

TEST(CudaHost, EachLocalRankTakesAGpuInTurn) {
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("SLURM_LOCALID");
  EXPECT_EQ(localGpu(4, 6), 2);
  setenv("SLURM_LOCALID", "3", 1);
  EXPECT_EQ(localGpu(2, 0), 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "5", 1); // mpirun's, before Slurm's
  EXPECT_EQ(localGpu(8, 0), 5);
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("SLURM_LOCALID");
}

/// The toolkit's folder (CUDA_HOME, or the one CMake found).
std::string toolkit() {
  const char *home = std::getenv("CUDA_HOME");
  return home && *home ? home : DTC_CUDA_TOOLKIT_ROOT;
}

TEST(CudaHost, EveryDriverEntryPointIsInTheToolkitsLibcuda) {
  // The toolkit's libcuda stub exports the driver's API (its calls fail
  // without a driver): each name DriverApi looks up resolves there.
  std::string stub = toolkit() + "/lib64/stubs/libcuda.so";
  std::string why;
  const DriverApi *api = driverApi(why, stub.c_str());
  ASSERT_NE(api, nullptr) << why;
  EXPECT_NE(api->cuMemAlloc, nullptr);
  EXPECT_NE(api->cuLaunchKernel, nullptr);
  // A library that is not a driver is named with what it lacks.
  EXPECT_EQ(driverApi(why, "libm.so.6"), nullptr);
  EXPECT_NE(why.find("lacks cuInit"), std::string::npos) << why;
  EXPECT_EQ(driverApi(why, "libnot-a-driver.so"), nullptr);
  EXPECT_NE(why.find("cannot be loaded"), std::string::npos) << why;
}

TEST(CudaHost, CublasLtLoadsWithEveryEntryPoint) {
  std::string why;
  const CublasLtApi *api = cublasLtApi(why);
  ASSERT_NE(api, nullptr) << why;
  EXPECT_STREQ(api->cublasLtGetStatusString(CUBLAS_STATUS_SUCCESS), "success");
}

TEST(CudaHost, NcclLoadsWithEveryEntryPoint) {
  std::string why;
  const NcclApi *api = ncclApi(why);
  ASSERT_NE(api, nullptr) << why;
  std::string error;
  EXPECT_FALSE(check(*api, ncclInvalidArgument, "ncclAllReduce", error));
  EXPECT_EQ(error.rfind("ncclAllReduce: ", 0), 0u) << error;
}

} // namespace
