//===- CalibrateCommand.cpp - dtc calibrate --------------------------------===//
//
// Measures this machine with the kernels plans run (runtime/cpu), one core
// per device: sgemm rate at a few shapes, a convolution's rate, the memory
// bandwidth of a large elementwise kernel, the per-kernel floor; writes a
// cluster file (docs/cluster.md). Links between ranks are measured with MPI
// once the runtime has it (issue 6); until then they keep cpu-local's.
//
//===----------------------------------------------------------------------===//
#include "tools/dtc/Commands.h"

#include "cost/Cluster.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <unistd.h>

namespace dtc::cli {
namespace {

plan::TensorType f32(std::vector<int64_t> shape) {
  plan::TensorType t;
  t.set_dtype(plan::F32);
  for (int64_t d : shape)
    t.add_shape(d);
  return t;
}

int64_t elements(const plan::TensorType &t) {
  int64_t n = 1;
  for (int64_t d : t.shape())
    n *= d;
  return n;
}

/// The best of `repeats` timings (after one warm-up run) of the kernel for
/// `inst`, on one thread; 0 if it cannot be made.
double bestSeconds(const plan::Instruction &inst, const std::vector<plan::TensorType> &inputs,
                   const plan::TensorType &output, int repeats) {
  std::string error;
  auto kernel = runtime::cpu::makeKernel(inst, inputs, {output}, error);
  if (!kernel)
    return 0;
  std::vector<std::vector<float>> in;
  std::vector<const void *> pointers;
  for (const plan::TensorType &t : inputs) {
    in.emplace_back(size_t(elements(t)), 0.5f);
    pointers.push_back(in.back().data());
  }
  std::vector<float> out(size_t(elements(output)));
  void *outPtr = out.data();
  runtime::cpu::ThreadPool pool(1);
  double best = 1e30;
  for (int r = 0; r <= repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    kernel->run(pointers.data(), &outPtr, pool, error);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r > 0)
      best = std::min(best, s);
  }
  return best;
}

double gemmRate(int64_t m, int64_t n, int64_t k, int repeats) {
  plan::Instruction inst;
  inst.mutable_matmul();
  double s = bestSeconds(inst, {f32({m, k}), f32({k, n})}, f32({m, n}), repeats);
  return s > 0 ? 2.0 * double(m * n * k) / s : 0;
}

double convRate(int repeats) {
  plan::Instruction inst;
  plan::Conv2D *c = inst.mutable_conv2d();
  for (int i = 0; i < 2; ++i)
    c->add_strides(1), c->add_dilations(1);
  for (int i = 0; i < 4; ++i)
    c->add_pads(1);
  c->set_groups(1);
  double s = bestSeconds(inst, {f32({8, 32, 32, 32}), f32({64, 32, 3, 3})}, f32({8, 64, 32, 32}),
                         repeats);
  return s > 0 ? 2.0 * 8 * 64 * 32 * 32 * 32 * 9 / s : 0;
}

/// out = a + b over `n` floats: 12 bytes per element.
double addSeconds(int64_t n, int repeats) {
  plan::Instruction inst;
  plan::Elementwise *e = inst.mutable_elementwise();
  for (int i = 0; i < 2; ++i) {
    plan::ExprNode *in = e->add_nodes();
    in->set_op(plan::INPUT);
    in->add_args(uint32_t(i));
    in->set_dtype(plan::F32);
  }
  plan::ExprNode *add = e->add_nodes();
  add->set_op(plan::ADD);
  add->add_args(0);
  add->add_args(1);
  add->set_dtype(plan::F32);
  return bestSeconds(inst, {f32({n}), f32({n})}, f32({n}), repeats);
}

} // namespace

int runCalibrate(const Args &args) {
  std::string output = "-";
  bool quick = false;
  for (size_t i = 0; i < args.size(); ++i) {
    bool missing = false;
    if (auto v = flagValue(args, i, "-o", missing))
      output = *v;
    else if (args[i] == "--quick")
      quick = true;
    else if (missing)
      return usageError(args[i] + " needs a value");
    else
      return usageError("calibrate: unknown argument '" + args[i] + "'");
  }
  int repeats = quick ? 2 : 10;
  auto say = [&](const std::string &line) {
    // Progress goes to stderr when the cluster file goes to stdout.
    if (output == "-")
      fmt::print(stderr, "{}\n", line);
    else
      fmt::print("{}\n", line);
  };
  std::string error;
  cost::Cluster c = *cost::preset("cpu-local", error);
  c.name = "cpu-local";
  c.device.kind = "CPU core (calibrated by dtc calibrate)";
  say("calibrating one core (the kernels plans run, one thread)...");

  const int64_t shapes[][3] = {{512, 512, 512}, {128, 768, 256}, {1024, 256, 1024}};
  double best = 0, sum = 0;
  for (const auto &s : shapes) {
    double rate = gemmRate(s[0], s[1], s[2], repeats);
    say(fmt::format("  sgemm {}x{}x{}: {:.1f} GFLOP/s", s[0], s[1], s[2], rate / 1e9));
    best = std::max(best, rate);
    sum += rate;
  }
  if (best <= 0)
    return failure("calibrate: the matmul kernel could not be timed");
  // The peak is the best GEMM seen; matmuls reach their average of it.
  c.device.peakFlops["f32"] = best;
  c.device.peakFlops["bf16"] = best; // computed through f32 kernels on this CPU
  c.device.peakFlops["f64"] = best / 2;
  c.device.efficiency[plan::OP_MATMUL] =
      std::min(1.0, sum / double(std::size(shapes)) / best);
  double conv = convRate(repeats);
  say(fmt::format("  conv2d 8x32x32x32, 64 3x3 filters: {:.1f} GFLOP/s", conv / 1e9));
  if (conv > 0)
    c.device.efficiency[plan::OP_CONV] = std::min(1.0, conv / best);

  int64_t big = quick ? (int64_t(1) << 22) : (int64_t(1) << 24);
  double s = addSeconds(big, repeats);
  if (s <= 0)
    return failure("calibrate: the elementwise kernel could not be timed");
  double bandwidth = 12.0 * double(big) / s;
  say(fmt::format("  memory: {:.1f} GB/s (out = a + b over {} MiB arrays)", bandwidth / 1e9,
                  big * 4 >> 20));
  c.device.memoryBandwidth = bandwidth;
  c.device.memoryEfficiency = 1.0; // the bandwidth is what a kernel reaches
  double floor = addSeconds(1, repeats * 20);
  say(fmt::format("  kernel floor: {:.2f} us (a one-element kernel)", floor * 1e6));
  c.device.launchOverhead = floor;

  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGE_SIZE);
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  c.devicesPerNode = cores;
  c.nodes = 1;
  if (pages > 0 && pageSize > 0)
    c.device.memoryCapacity = double(pages) * double(pageSize) / cores;
  say(fmt::format("  {} cores, {:.1f} GiB of memory each", cores,
                  c.device.memoryCapacity / double(1 << 30)));
  say("  links between ranks: cpu-local's (MPI measurements come with multi-rank runs)");
  std::optional<cost::Cluster> check = cost::parseCluster(cost::toJson(c), error);
  if (!check)
    return failure("calibrate measured something impossible: " + error);
  if (int status = writeOutput(output, cost::toJson(c) + "\n"))
    return status;
  if (output != "-")
    say("wrote " + output + " (use it with dtc simulate --cluster " + output + ")");
  return 0;
}

} // namespace dtc::cli
