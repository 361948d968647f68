//===- gpu_gemm_bench.cpp - dtc's cuBLASLt GEMMs against cuBLAS ----------===//
//
// dtc-gpu-gemm-bench [--floor F] [--repeat N]
//
// On an NVIDIA GPU: GPT-2 small's bf16 training GEMMs (8 x 1024 tokens,
// hidden 768, 12 heads, vocabulary 50257; forward, and the backward's
// transposed products), each run as `dtc run --backend cuda` runs a plan's
// MatMul (the CUDA device's kernel: cuBLASLt, its heuristic's algorithm)
// and as cuBLAS's cublasGemmStridedBatchedEx computes the same column-major
// product (GemmShape.h; bf16 in and out, fp32 accumulation), each timed over
// N calls between device synchronizations. Prints TFLOP/s for both and
// their ratio; exit status 1 when a ratio is below --floor (default 0.9,
// issue #23's: cuBLASLt at 90% of cuBLAS), 2 without a GPU.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/cuda/CudaDevice.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/DriverApi.h"
#include "runtime/cuda/GemmShape.h"
#include "runtime/cuda/OpenLibrary.h"

#include <cublas_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace dtc;

struct Shape {
  const char *what;
  std::vector<int64_t> lhs, rhs, out;
  bool transposeLhs = false, transposeRhs = false;
};

const int64_t T = 8 * 1024, H = 768, F = 3072, V = 50257, S = 1024, D = 64, B = 8 * 12;

const Shape kShapes[] = {
    {"q/k/v/out projection", {T, H}, {H, H}, {T, H}},
    {"mlp up", {T, H}, {H, F}, {T, F}},
    {"mlp down", {T, F}, {F, H}, {T, H}},
    {"lm head", {T, H}, {H, V}, {T, V}},
    {"scores q.k^T", {B, S, D}, {B, S, D}, {B, S, S}, false, true},
    {"context p.v", {B, S, S}, {B, S, D}, {B, S, D}},
    {"mlp up, weight grad x^T.dy", {T, H}, {T, F}, {H, F}, true, false},
    {"lm head, input grad dy.w^T", {T, V}, {H, V}, {T, H}, false, true},
};

plan::TensorType bf16(const std::vector<int64_t> &shape) {
  plan::TensorType t;
  t.set_dtype(plan::BF16);
  for (int64_t d : shape)
    t.add_shape(d);
  return t;
}

int64_t elements(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// cuBLAS's entry points this benchmark calls (dlopen, as dtc's runtime
/// opens its CUDA libraries).
struct Cublas {
  cublasStatus_t (*create)(cublasHandle_t *) = nullptr;
  cublasStatus_t (*destroy)(cublasHandle_t) = nullptr;
  cublasStatus_t (*gemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                         const void *, const void *, cudaDataType, int, long long, const void *,
                         cudaDataType, int, long long, const void *, void *, cudaDataType, int,
                         long long, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
};

bool openCublas(Cublas &c, std::string &error) {
  void *library =
      runtime::cuda::openToolkitLibrary({"libcublas.so.13", "libcublas.so.12", "libcublas.so"},
                                        error);
  if (!library)
    return false;
  c.create = reinterpret_cast<decltype(c.create)>(dlsym(library, "cublasCreate_v2"));
  c.destroy = reinterpret_cast<decltype(c.destroy)>(dlsym(library, "cublasDestroy_v2"));
  c.gemm = reinterpret_cast<decltype(c.gemm)>(dlsym(library, "cublasGemmStridedBatchedEx"));
  if (!c.create || !c.destroy || !c.gemm)
    error = "libcublas lacks cublasCreate_v2, cublasDestroy_v2 or cublasGemmStridedBatchedEx";
  return c.create && c.destroy && c.gemm;
}

} // namespace

int main(int argc, char **argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0); // a line at a time: a run cut short keeps them
  double floor = 0.9;
  int repeat = 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--floor") && i + 1 < argc)
      floor = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc)
      repeat = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: dtc-gpu-gemm-bench [--floor F] [--repeat N]\n");
      return 2;
    }
  }
  std::string why;
  if (runtime::cuda::usableGpus(why) == 0) {
    std::printf("dtc-gpu-gemm-bench: no usable NVIDIA GPU (%s): not run\n", why.c_str());
    return 2;
  }
  std::string error;
  auto device = runtime::cuda::openCudaDevice(0, error);
  const runtime::cuda::DriverApi *api = runtime::cuda::driverApi(why);
  Cublas cublas;
  cublasHandle_t handle = nullptr;
  if (!device || !api || !openCublas(cublas, error) || cublas.create(&handle)) {
    std::fprintf(stderr, "dtc-gpu-gemm-bench: %s\n", (error.empty() ? why : error).c_str());
    return 1;
  }
  auto sync = [&] { return api->cuCtxSynchronize() == CUDA_SUCCESS; };
  runtime::cpu::ThreadPool pool(1);
  std::printf("bf16 GEMMs of GPT-2 small's training step on %s, %d calls each\n",
              device->name().c_str(), repeat);
  std::printf("  %-28s %14s %14s %7s\n", "product", "dtc TFLOP/s", "cuBLAS TFLOP/s", "ratio");
  double worst = 1e9;
  for (const Shape &s : kShapes) {
    std::vector<plan::TensorType> in{bf16(s.lhs), bf16(s.rhs)}, out{bf16(s.out)};
    plan::Instruction inst;
    inst.mutable_matmul()->set_transpose_lhs(s.transposeLhs);
    inst.mutable_matmul()->set_transpose_rhs(s.transposeRhs);
    size_t bytes[3] = {size_t(elements(s.lhs)) * 2, size_t(elements(s.rhs)) * 2,
                       size_t(elements(s.out)) * 2};
    std::vector<char *> buffers;
    for (size_t b : bytes) {
      char *at = device->allocate(b, error);
      if (!at || !device->zero(at, b, error)) {
        std::fprintf(stderr, "dtc-gpu-gemm-bench: %s\n", error.c_str());
        return 1;
      }
      buffers.push_back(at);
    }
    auto host = runtime::cpu::makeKernel(inst, in, out, error);
    auto kernel = device->kernelFor(inst, in, out, std::move(host), plan::Stream::Compute, error);
    runtime::cuda::GemmShape g;
    std::vector<int64_t> lhs = s.lhs, rhs = s.rhs, o = s.out;
    if (!kernel || device->hostStagedSummary() != "" ||
        !runtime::cuda::gemmShapeOf(lhs, rhs, o, s.transposeLhs, s.transposeRhs, g, error)) {
      std::fprintf(stderr, "dtc-gpu-gemm-bench: %s: not on cuBLASLt: %s %s\n", s.what,
                   error.c_str(), device->hostStagedSummary().c_str());
      return 1;
    }
    const void *ins[] = {buffers[0], buffers[1]};
    void *outs[] = {buffers[2]};
    float alpha = 1, beta = 0;
    auto dtcCall = [&] { return kernel->run(ins, outs, pool, error); };
    auto cublasCall = [&] {
      // As GemmShape.h states it: A is the plan's right operand, B its left.
      return cublas.gemm(handle, g.transA ? CUBLAS_OP_T : CUBLAS_OP_N,
                         g.transB ? CUBLAS_OP_T : CUBLAS_OP_N, int(g.m), int(g.n), int(g.k),
                         &alpha, buffers[1], CUDA_R_16BF, int(g.lda), g.strideA, buffers[0],
                         CUDA_R_16BF, int(g.ldb), g.strideB, &beta, buffers[2], CUDA_R_16BF,
                         int(g.ldc), g.strideC, int(g.batch), CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
    };
    // Seconds a call, the best of 3 rounds of `repeat` calls (after 3 warm-ups).
    auto time = [&](auto call) {
      double best = 1e30;
      for (int w = 0; w < 3; ++w)
        if (!call())
          return -1.0;
      for (int round = 0; round < 3; ++round) {
        if (!sync())
          return -1.0;
        auto start = std::chrono::steady_clock::now();
        for (int r = 0; r < repeat; ++r)
          if (!call())
            return -1.0;
        if (!sync() || !device->synchronize(error))
          return -1.0;
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                            start)
                                      .count() /
                                  repeat);
      }
      return best;
    };
    double ours = time(dtcCall), theirs = time(cublasCall);
    if (ours <= 0 || theirs <= 0) {
      std::fprintf(stderr, "dtc-gpu-gemm-bench: %s: a product failed: %s\n", s.what,
                   error.c_str());
      return 1;
    }
    double flops = 2.0 * double(g.batch) * double(g.m) * double(g.n) * double(g.k);
    double ratio = theirs / ours;
    worst = std::min(worst, ratio);
    std::printf("  %-28s %14.1f %14.1f %6.2fx\n", s.what, flops / ours / 1e12,
                flops / theirs / 1e12, ratio);
  }
  cublas.destroy(handle);
  std::printf("worst dtc/cuBLAS ratio %.2f (floor %.2f)\n", worst, floor);
  return worst < floor ? 1 : 0;
}
