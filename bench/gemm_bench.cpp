//===- gemm_bench.cpp - dtc's matmul kernel against OpenBLAS sgemm --------===//
//
// dtc-gemm-bench [--threads N] [--min-seconds S] [--floor F]
//
// For the GEMM shapes of the benchmark GPT (4 layers, hidden 256, 4 heads,
// seq 128, batch 1) and a square 512, times OpenBLAS's cblas_sgemm called
// directly and dtc's MatMul kernel (makeKernel on a plan instruction, as
// `dtc run` prepares it), and prints GFLOP/s for both and their ratio. A
// batched shape is, for OpenBLAS, one sgemm per matrix in a loop.
//
// The kernel is meant to stay within reach of OpenBLAS: exit status 1 when
// any dtc/OpenBLAS ratio is below --floor (default 0.7).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using dtc::runtime::cpu::Kernel;
using dtc::runtime::cpu::ThreadPool;

/// batch x ([M,K] x [K,N]); batch 1 is a plain GEMM.
struct GemmShape {
  const char *what;
  int64_t batch, M, K, N;

  double flops() const { return 2.0 * double(batch) * double(M) * double(N) * double(K); }
};

const GemmShape kShapes[] = {
    {"qkv projection", 1, 128, 256, 768},
    {"attention output", 1, 128, 256, 256},
    {"mlp up", 1, 128, 256, 1024},
    {"mlp down", 1, 128, 1024, 256},
    {"scores q.k^T (4 heads)", 4, 128, 64, 128},
    {"context p.v (4 heads)", 4, 128, 128, 64},
    {"square 512", 1, 512, 512, 512},
};

/// Seconds per call of each of `bodies`: the best of 7 rounds, each long
/// enough (at least `minSeconds` / 7) to swamp the clock. The bodies take
/// turns within a round, so that a burst of load from elsewhere on the
/// machine hits all of them rather than one.
std::vector<double> timePerCall(const std::vector<std::function<void()>> &bodies,
                                double minSeconds) {
  using Clock = std::chrono::steady_clock;
  constexpr int kRounds = 7;
  auto timeCalls = [](const std::function<void()> &body, int64_t calls) {
    auto start = Clock::now();
    for (int64_t i = 0; i < calls; ++i)
      body();
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  std::vector<int64_t> calls;
  for (const auto &body : bodies) {
    body(); // warm up: page in the buffers, start OpenBLAS's threads
    int64_t n = 1;
    while (timeCalls(body, n) < minSeconds / kRounds)
      n *= 2;
    calls.push_back(n);
  }
  std::vector<double> best(bodies.size(), 1e30);
  for (int round = 0; round < kRounds; ++round)
    for (size_t i = 0; i < bodies.size(); ++i)
      best[i] = std::min(best[i], timeCalls(bodies[i], calls[i]) / double(calls[i]));
  return best;
}

dtc::plan::TensorType tensorType(std::initializer_list<int64_t> shape) {
  dtc::plan::TensorType t;
  t.set_dtype(dtc::plan::F32);
  for (int64_t d : shape)
    t.add_shape(d);
  return t;
}

/// dtc's kernel for the shape, typed as the GPT's plan has it: activations
/// [batch, M, K] against a shared weight [K, N], or per-head batches
/// [1, heads, M, K] x [1, heads, K, N].
std::unique_ptr<Kernel> dtcKernel(const GemmShape &s) {
  dtc::plan::Instruction inst;
  inst.mutable_matmul();
  std::vector<dtc::plan::TensorType> in, out;
  if (s.batch == 1) {
    in = {tensorType({1, s.M, s.K}), tensorType({s.K, s.N})};
    out = {tensorType({1, s.M, s.N})};
  } else {
    in = {tensorType({1, s.batch, s.M, s.K}), tensorType({1, s.batch, s.K, s.N})};
    out = {tensorType({1, s.batch, s.M, s.N})};
  }
  std::string error;
  auto kernel = dtc::runtime::cpu::makeKernel(inst, in, out, error);
  if (!kernel) {
    std::fprintf(stderr, "error: makeKernel refused [%lld,%lld]x[%lld,%lld]: %s\n",
                 (long long)s.M, (long long)s.K, (long long)s.K, (long long)s.N,
                 error.c_str());
    std::exit(2);
  }
  return kernel;
}

int usage(const char *message) {
  std::fprintf(stderr,
               "dtc-gemm-bench: %s\nusage: dtc-gemm-bench [--threads N] "
               "[--min-seconds S] [--floor F]\n",
               message);
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  double minSeconds = 0.5, floor = 0.7;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (i + 1 >= argc)
      return usage(("unknown option or missing value: " + arg).c_str());
    char *end = nullptr;
    if (arg == "--threads")
      threads = int(std::strtol(argv[++i], &end, 10));
    else if (arg == "--min-seconds")
      minSeconds = std::strtod(argv[++i], &end);
    else if (arg == "--floor")
      floor = std::strtod(argv[++i], &end);
    else
      return usage(("unknown option " + arg).c_str());
    if (!end || *end || threads < 1 || minSeconds <= 0)
      return usage(("bad value for " + arg).c_str());
  }

  ThreadPool pool(threads);
  std::printf("GEMM rate on %d thread%s (%s)\n", threads, threads == 1 ? "" : "s",
              openblas_get_config());
  std::printf("%-24s %-22s %10s %10s %8s\n", "step", "shape", "OpenBLAS", "dtc",
              "dtc/BLAS");
  std::printf("%-24s %-22s %10s %10s %8s\n", "", "", "GFLOP/s", "GFLOP/s", "");
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  double worst = 1e30;
  for (const GemmShape &s : kShapes) {
    std::vector<float> a(size_t(s.batch * s.M * s.K)), b(size_t(s.batch * s.K * s.N)),
        c(size_t(s.batch * s.M * s.N));
    for (float &x : a)
      x = uniform(rng);
    for (float &x : b)
      x = uniform(rng);

    auto kernel = dtcKernel(s);
    const void *inputs[] = {a.data(), b.data()};
    void *outputs[] = {c.data()};
    std::string error;
    std::vector<double> seconds = timePerCall(
        {[&] {
           // dtc's kernel may leave OpenBLAS single-threaded between batches.
           openblas_set_num_threads(threads);
           for (int64_t i = 0; i < s.batch; ++i)
             cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(s.M), int(s.N),
                         int(s.K), 1.0f, a.data() + i * s.M * s.K, int(s.K),
                         b.data() + i * s.K * s.N, int(s.N), 0.0f, c.data() + i * s.M * s.N,
                         int(s.N));
         },
         [&] {
           if (!kernel->run(inputs, outputs, pool, error)) {
             std::fprintf(stderr, "error: the kernel failed: %s\n", error.c_str());
             std::exit(2);
           }
         }},
        minSeconds);
    double blasSeconds = seconds[0], dtcSeconds = seconds[1];

    char shape[64];
    if (s.batch == 1)
      std::snprintf(shape, sizeof shape, "%lldx%lld x %lldx%lld", (long long)s.M,
                    (long long)s.K, (long long)s.K, (long long)s.N);
    else
      std::snprintf(shape, sizeof shape, "%lldx(%lldx%lld x %lldx%lld)", (long long)s.batch,
                    (long long)s.M, (long long)s.K, (long long)s.K, (long long)s.N);
    double blasRate = s.flops() / blasSeconds * 1e-9, dtcRate = s.flops() / dtcSeconds * 1e-9;
    worst = std::min(worst, dtcRate / blasRate);
    std::printf("%-24s %-22s %10.1f %10.1f %8.2f\n", s.what, shape, blasRate, dtcRate,
                dtcRate / blasRate);
  }
  bool ok = worst >= floor;
  std::printf("lowest dtc/OpenBLAS ratio %.2f: %s the %.0f%% floor\n", worst,
              ok ? "meets" : "BELOW", floor * 100);
  return ok ? 0 : 1;
}
