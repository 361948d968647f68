//===- Calibrate.cpp - this machine measured as the cost model sees it ----===//
//
// Times the kernels plans run (runtime/cpu), on one core, as a step meets
// them, and MPI's collectives and transfers between ranks; fits what the
// cost model needs (docs/cluster.md).
//
//===----------------------------------------------------------------------===//
#include "cost/calibrate/Calibrate.h"

#include "cost/CostModel.h"
#include "plan/DType.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>
#include <unistd.h>

namespace dtc::cost::calibrate {
namespace {

plan::TensorType f32(std::vector<int64_t> shape) {
  plan::TensorType t;
  t.set_dtype(plan::F32);
  for (int64_t d : shape)
    t.add_shape(d);
  return t;
}

/// The median of `times` (not empty).
double median(std::vector<double> times) {
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

/// The median of `repeats` timings (after one warm-up round) of the kernel
/// for `inst`, on one thread; 0 if it cannot be made. With several `sets`
/// of operands the kernel runs on each in turn, so that each run's operands
/// were last touched several runs before, as in a training step. Each run
/// is timed alone, as the executor times a step's kernels, unless `batch`:
/// then kernels shorter than a few microseconds are timed several runs at a
/// time (for differences between two kernels, where each run's clock reads
/// and call, tens of nanoseconds, cancel but their jitter would not).
double medianSeconds(const plan::Instruction &inst, const std::vector<plan::TensorType> &inputs,
                     const plan::TensorType &output, int repeats, int sets = 1,
                     bool batch = false) {
  std::string error;
  auto kernel = runtime::cpu::makeKernel(inst, inputs, {output}, error);
  if (!kernel)
    return 0;
  std::vector<std::vector<float>> arrays;
  std::vector<std::vector<const void *>> in(static_cast<size_t>(sets));
  std::vector<void *> out(static_cast<size_t>(sets));
  for (int set = 0; set < sets; ++set) {
    for (const plan::TensorType &t : inputs) {
      arrays.emplace_back(size_t(plan::elementCount(t)), 0.5f);
      in[size_t(set)].push_back(arrays.back().data());
    }
    arrays.emplace_back(size_t(plan::elementCount(output)));
    out[size_t(set)] = arrays.back().data();
  }
  runtime::cpu::ThreadPool pool(1);
  // Seconds for `runs` runs, the sets in turn.
  auto timed = [&](int runs) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < runs; ++i)
      kernel->run(in[size_t(i % sets)].data(), &out[size_t(i % sets)], pool, error);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  double warm = timed(sets) / sets;
  int runs = 1;
  if (batch)
    runs = sets * int(std::clamp(std::ceil(2e-6 / std::max(warm, 1e-9) / sets), 1.0, 64.0));
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    if (runs > 1) {
      times.push_back(timed(runs) / runs);
      continue;
    }
    for (int set = 0; set < sets; ++set) {
      auto start = std::chrono::steady_clock::now();
      kernel->run(in[size_t(set)].data(), &out[size_t(set)], pool, error);
      times.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
  return median(std::move(times));
}

double gemmRate(int64_t m, int64_t n, int64_t k, int repeats) {
  plan::Instruction inst;
  inst.mutable_matmul();
  double s = medianSeconds(inst, {f32({m, k}), f32({k, n})}, f32({m, n}), repeats);
  return s > 0 ? 2.0 * double(m * n * k) / s : 0;
}

/// A 3x3 convolution's rate on an [N, C, H, W] image to K channels: the
/// geometric mean of its forward and its two gradients (all "conv" in the
/// cost model; the gradients run slower).
double convRate(int64_t N, int64_t C, int64_t H, int64_t K, int repeats) {
  auto conv = [](plan::Conv2D *c) {
    for (int i = 0; i < 2; ++i)
      c->add_strides(1), c->add_dilations(1);
    for (int i = 0; i < 4; ++i)
      c->add_pads(1);
    c->set_groups(1);
  };
  plan::Instruction forward, input, weight;
  conv(forward.mutable_conv2d());
  conv(input.mutable_conv2d_backward_input());
  conv(weight.mutable_conv2d_backward_weight());
  plan::TensorType x = f32({N, C, H, H}), w = f32({K, C, 3, 3}), y = f32({N, K, H, H});
  double flops = 2.0 * double(N * K * H * H * C * 9), log = 0;
  for (double s : {medianSeconds(forward, {x, w}, y, repeats),
                   medianSeconds(input, {y, w}, x, repeats),
                   medianSeconds(weight, {x, y}, w, repeats)}) {
    if (s <= 0)
      return 0;
    log += std::log(flops / s);
  }
  return std::exp(log / 3);
}

/// An elementwise instruction built node by node (every node f32).
struct Expression {
  plan::Instruction inst;
  uint32_t node(plan::ExprOp op, std::vector<uint32_t> args, double value = 0) {
    plan::ExprNode *n = inst.mutable_elementwise()->add_nodes();
    n->set_op(op);
    for (uint32_t a : args)
      n->add_args(a);
    n->set_value(value);
    n->set_dtype(plan::F32);
    return uint32_t(inst.elementwise().nodes_size() - 1);
  }
};

/// out = a + b over `n` floats (12 bytes per element), on `sets` sets of
/// arrays in turn.
double addSeconds(int64_t n, int repeats, int sets = 1, bool batch = false) {
  Expression e;
  e.node(plan::ADD, {e.node(plan::INPUT, {0}), e.node(plan::INPUT, {1})});
  return medianSeconds(e.inst, {f32({n}), f32({n})}, f32({n}), repeats, sets, batch);
}

/// A fused chain of `nodes` adds over `n` floats, ((a + b) + b) + ...: the
/// unit the cost model counts elementwise work in (ElementwiseOps.def).
double addChainSeconds(int64_t n, int nodes, int repeats, bool batch = false) {
  Expression e;
  uint32_t a = e.node(plan::INPUT, {0}), b = e.node(plan::INPUT, {1});
  for (int k = 0; k < nodes; ++k)
    a = e.node(plan::ADD, {a, b});
  return medianSeconds(e.inst, {f32({n}), f32({n})}, f32({n}), repeats, 1, batch);
}

/// The level past a core's L2: its share of the L3 (what a step's weights
/// and optimizer state come from when they fit there). Its bandwidth is an
/// add over four sets of arrays in turn, each set twice the L2; its size is
/// the largest footprint still streaming at 80% of that (doubling, up to
/// the L3's share per core), not what the OS says (a VM's L3 may be the
/// host's).
void addSharedCacheLevel(Device &device, bool quick, int repeats,
                         const std::function<void(const std::string &)> &say) {
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  double l2 = device.caches.back().bytes;
  double share = l3 > 0 ? double(l3) / std::max(1u, std::thread::hardware_concurrency()) : 0;
  if (share < 4 * l2) {
    say("  no shared cache level (sysconf reports no L3 larger than four L2s per core)");
    return;
  }
  auto bandwidth = [&](double footprint, int sets) {
    int64_t n = int64_t(footprint / 12);
    double s = addSeconds(n, repeats, sets);
    return s > 0 ? 12.0 * double(n) / s : 0.0;
  };
  double rate = bandwidth(2 * l2, 4), size = 4 * l2;
  if (rate <= 0)
    return;
  double limit = std::min(share, quick ? 32.0 * (1 << 20) : 256.0 * (1 << 20));
  for (double f = 8 * l2; f <= limit && bandwidth(f, 1) >= 0.8 * rate; f *= 2)
    size = f;
  device.caches.push_back({size, rate});
  say(fmt::format("  shared cache: {:.0f} MiB at {:.1f} GB/s (out = a + b, 4 sets of 3 x {} "
                  "KiB in turn; within 80% of that up to {:.0f} MiB, tried up to {:.0f})",
                  size / (1 << 20), rate / 1e9, int64_t(2 * l2 / 12 * 4) >> 10,
                  size / (1 << 20), limit / (1 << 20)));
}

/// Whether a kernel's memory time hides under its compute: a chain of 8
/// adds on arrays past the L2 (what the cost model's next level holds),
/// whose adds and loads take about as long, against both times summed (0)
/// and the larger (1). Its memory time is an add over the same arrays,
/// timed in turn with the chain, five rounds, the median round kept: the
/// two timed apart (and the compute from another kernel) put the overlap
/// anywhere from 0.35 to 0.73 between runs on a shared host.
void measureOverlap(Device &device, double l2Bytes, double perAdd, double floor,
                    int repeats, const std::function<void(const std::string &)> &say) {
  const int nodes = 8;
  int64_t n = int64_t(l2Bytes / 6); // three arrays: twice the L2
  double compute = nodes * double(n) / perAdd;
  std::vector<std::array<double, 3>> rounds; // overlap, chain, memory
  for (int r = 0; r < 5; ++r) {
    double memory = addSeconds(n, repeats, 1) - floor;
    double t = addChainSeconds(n, nodes, repeats) - floor;
    double overlap = std::clamp((compute + memory - t) / std::min(compute, memory), 0.0, 1.0);
    rounds.push_back({overlap, t, memory});
  }
  std::nth_element(rounds.begin(), rounds.begin() + 2, rounds.end());
  auto [overlap, t, memory] = rounds[2];
  device.overlap = overlap;
  say(fmt::format("  overlap of memory and compute: {:.2f} ({} adds on {} KiB arrays: {:.1f} "
                  "us, compute {:.1f} us, memory {:.1f} us; the median of 5 rounds)",
                  overlap, nodes, n * 4 >> 10, t * 1e6, compute * 1e6, memory * 1e6));
}

/// The bytes a kernel reads and writes, as the compiler's cost counts them.
double kernelBytes(const std::vector<plan::TensorType> &inputs, const plan::TensorType &output) {
  double bytes = 4.0 * double(plan::elementCount(output));
  for (const plan::TensorType &t : inputs)
    bytes += 4.0 * double(plan::elementCount(t));
  return bytes;
}

/// A memory-bound kernel's share of the bandwidth a plain elementwise
/// kernel reaches: its bytes (inputs and output, as the compiler's cost
/// counts them) at the device's bandwidths (cache, then memory), over its
/// time less the kernel floor.
double bandwidthShare(const plan::Instruction &inst, const std::vector<plan::TensorType> &inputs,
                      const plan::TensorType &output, const Device &device, double floor,
                      int repeats) {
  double s = medianSeconds(inst, inputs, output, repeats);
  if (s <= 0)
    return 0;
  return std::clamp(device.streamSeconds(kernelBytes(inputs, output)) / std::max(s - floor, 1e-9),
                    0.01, 1.0);
}

/// What a small kernel takes beyond the floor and its bytes at its class's
/// share of the bandwidth (`share`); 0 when it cannot be timed.
double startupSeconds(const plan::Instruction &inst, const std::vector<plan::TensorType> &inputs,
                      const plan::TensorType &output, const Device &device, double share,
                      double floor, int repeats) {
  double s = medianSeconds(inst, inputs, output, repeats);
  if (s <= 0 || share <= 0)
    return 0;
  return std::max(0.0, s - floor - device.streamSeconds(kernelBytes(inputs, output)) / share);
}

/// The geometric mean of `shares` (0 when any kernel could not be timed).
double geometricMean(const std::vector<double> &shares) {
  double log = 0;
  for (double s : shares) {
    if (s <= 0)
      return 0;
    log += std::log(s);
  }
  return std::exp(log / double(shares.size()));
}

plan::Instruction reduceSum(std::vector<int64_t> axes) {
  plan::Instruction inst;
  inst.mutable_reduce()->set_kind(plan::REDUCE_SUM);
  for (int64_t a : axes)
    inst.mutable_reduce()->add_axes(a);
  return inst;
}

/// Each memory-bound op class's share of the elementwise bandwidth, from
/// kernels of the shapes training steps run, at sizes that fit the cache
/// (as a step's activations do, one kernel after another): reductions over
/// the channels' batch and pixels (batch norm), along rows and down columns
/// (bias gradients), a max pool's gradient; layer norm and softmax along
/// rows; transposes to and from channels-last and of a matrix. The geometric
/// mean of each class's kernels is its share.
void measureClassShares(Device &device, double floor, int repeats,
                        const std::function<void(const std::string &)> &say) {
  plan::Instruction pool;
  plan::Pool2D *p = pool.mutable_pool2d_backward();
  p->set_max(true);
  for (int i = 0; i < 2; ++i)
    p->add_kernel(2), p->add_strides(2), p->add_dilations(1);
  for (int i = 0; i < 4; ++i)
    p->add_pads(0);
  double reduce = geometricMean(
      {bandwidthShare(reduceSum({0, 2, 3}), {f32({4, 32, 32, 32})}, f32({1, 32, 1, 1}), device,
                      floor, repeats),
       bandwidthShare(reduceSum({1}), {f32({512, 256})}, f32({512, 1}), device, floor, repeats),
       bandwidthShare(reduceSum({0}), {f32({512, 256})}, f32({1, 256}), device, floor, repeats),
       bandwidthShare(pool, {f32({4, 16, 32, 32}), f32({4, 16, 16, 16})},
                      f32({4, 16, 32, 32}), device, floor, repeats)});
  plan::Instruction norm, softmax;
  norm.mutable_layer_norm()->set_axis(1);
  norm.mutable_layer_norm()->set_epsilon(1e-5);
  softmax.mutable_softmax()->set_axis(1);
  double norms = geometricMean(
      {bandwidthShare(norm, {f32({512, 256}), f32({256}), f32({256})}, f32({512, 256}), device,
                      floor, repeats),
       bandwidthShare(softmax, {f32({2048, 64})}, f32({2048, 64}), device, floor, repeats)});
  auto transpose = [](std::vector<int64_t> perm) {
    plan::Instruction inst;
    for (int64_t d : perm)
      inst.mutable_transpose()->add_perm(d);
    return inst;
  };
  double moves = geometricMean(
      {bandwidthShare(transpose({0, 2, 3, 1}), {f32({4, 32, 32, 32})}, f32({4, 32, 32, 32}),
                      device, floor, repeats),
       bandwidthShare(transpose({0, 3, 1, 2}), {f32({4, 32, 32, 32})}, f32({4, 32, 32, 32}),
                      device, floor, repeats),
       bandwidthShare(transpose({1, 0}), {f32({256, 512})}, f32({512, 256}), device, floor,
                      repeats)});
  for (auto [c, share] : {std::pair{plan::OP_REDUCE, reduce}, std::pair{plan::OP_NORM, norms},
                          std::pair{plan::OP_DATA_MOVEMENT, moves}}) {
    if (share <= 0) {
      say(fmt::format("  {}: could not be timed; counted at the full bandwidth",
                      cost::opClassName(c)));
      continue;
    }
    device.classMemoryEfficiency[c] = share;
    say(fmt::format("  {} kernels: {:.0f}% of the elementwise bandwidth", cost::opClassName(c),
                    100 * share));
  }
  // A small model's loss and bias gradients: rows of 10, batches of 16. Such
  // kernels take several times the floor beyond their bytes (a reduction
  // sets out its kept positions, a softmax its tiles), which the shares,
  // measured on large kernels, leave out.
  plan::Instruction logSoftmax = softmax;
  logSoftmax.mutable_softmax()->set_log(true);
  double reduceStartup =
      (startupSeconds(reduceSum({1}), {f32({16, 10})}, f32({16, 1}), device, reduce, floor,
                      repeats * 20) +
       startupSeconds(reduceSum({0}), {f32({16, 128})}, f32({1, 128}), device, reduce, floor,
                      repeats * 20)) /
      2;
  double normStartup = startupSeconds(logSoftmax, {f32({16, 10})}, f32({16, 10}), device, norms,
                                      floor, repeats * 20);
  device.classStartup[plan::OP_REDUCE] = reduceStartup;
  device.classStartup[plan::OP_NORM] = normStartup;
  say(fmt::format("  small kernels' startup: reduce {:.2f} us, norm {:.2f} us (sums over 16x10 "
                  "and 16x128, a log-softmax over 16x10, beyond their bytes)",
                  reduceStartup * 1e6, normStartup * 1e6));
}

/// All-gathers of `countPerRank` floats per rank met as a plan's ranks meet
/// one: each rank first runs the kernels' worth of work a step does between
/// two collectives (streaming twice its core's cache, which leaves MPI's
/// state and buffers out of it), then writes its part afresh (in the
/// writer's cache, not the reader's), and no barrier lines the ranks up.
/// Back to back after a barrier instead, collectives of 4 B to 64 KiB take
/// a half to a third of what they take in a step (docs/cluster.md).
struct MetCollective {
  double seconds = 0; // the collective itself: what the last rank to arrive waits
  double lag = 0;     // how long after the average rank the last arrives
  double work = 0;    // the work before it
};

using Clock = std::chrono::steady_clock;

/// The work a step does between two meetings of ranks: streams twice the
/// core's L2, which leaves MPI's state and buffers out of it.
void streamWork() {
  long cache = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
  static std::vector<float> work(size_t(cache > 0 ? cache : 2 << 20) / 2, 1.0f);
  for (float &x : work)
    x = x * 0.999f + 0.001f;
}

/// The medians over `repeats` all-gathers (every rank's times are gathered
/// to every rank, so all compute the same); `seconds` 0 after a failure,
/// with `error`.
MetCollective allGatherMet(runtime::Communicator &world, int64_t countPerRank, int repeats,
                           std::string &error) {
  std::vector<float> send(static_cast<size_t>(countPerRank));
  std::vector<float> recv(send.size() * size_t(world.size()));
  std::vector<double> times, works;
  for (int r = 0; r <= repeats; ++r) {
    auto begin = Clock::now();
    streamWork();
    std::fill(send.begin(), send.end(), float(r));
    auto start = Clock::now();
    if (!world.allGather(send.data(), recv.data(), countPerRank, plan::F32, error))
      return {};
    if (r > 0) {
      times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      works.push_back(std::chrono::duration<double>(start - begin).count());
    }
  }
  // Every rank's times, rank by rank.
  std::vector<double> all(times.size() * size_t(world.size()));
  if (!world.allGather(times.data(), all.data(), int64_t(times.size()), plan::F64, error))
    return {};
  // The last rank to arrive waits only for the collective; each other rank
  // also for the time between its arrival and the last's.
  std::vector<double> alone, lags;
  for (size_t i = 0; i < times.size(); ++i) {
    double least = all[i], sum = 0;
    for (size_t k = 0; k < size_t(world.size()); ++k) {
      least = std::min(least, all[k * times.size() + i]);
      sum += all[k * times.size() + i];
    }
    alone.push_back(least);
    lags.push_back(sum / world.size() - least);
  }
  return {median(alone), median(lags), median(works)};
}

/// The median time of `repeats` transfers of `bytes` from rank 0 to rank 1
/// as a pipeline's stages meet them: the sender works, writes the tensor
/// afresh and sends it to a receiver already waiting (the other ranks take
/// no part). Timed from the send's start to the receive's end on the
/// machine's one monotonic clock (ranks share a machine here). 0 after a
/// failure, with `error`; meaningful on rank 0.
double transferMet(runtime::Communicator &world, int64_t bytes, int repeats, std::string &error) {
  if (world.rank() > 1)
    return 1;
  std::vector<char> data(static_cast<size_t>(bytes));
  std::vector<double> at; // rank 0: each send's start; rank 1: each receive's end
  const int tag = 7;
  for (int r = 0; r <= repeats; ++r) {
    if (world.rank() == 0) {
      streamWork();
      std::fill(data.begin(), data.end(), char(r));
      at.push_back(std::chrono::duration<double>(Clock::now().time_since_epoch()).count());
      // Sends are buffered; waiting for this one drives it (MPI moves a
      // large message only while the sender is inside MPI) and times it.
      if (!world.send(data.data(), bytes, 1, tag, error) || !world.completeSends(error))
        return 0;
    } else {
      if (!world.recv(data.data(), bytes, 0, tag, error))
        return 0;
      at.push_back(std::chrono::duration<double>(Clock::now().time_since_epoch()).count());
    }
  }
  int64_t count = int64_t(at.size()) * int64_t(sizeof(double));
  if (world.rank() == 1)
    return world.send(at.data(), count, 0, tag, error) ? 1 : 0;
  std::vector<double> ends(at.size());
  if (!world.recv(ends.data(), count, 1, tag, error))
    return 0;
  std::vector<double> times;
  for (size_t r = 1; r < at.size(); ++r) // the first is a warm-up
    times.push_back(std::max(ends[r] - at[r], 1e-9));
  return median(times);
}

} // namespace

bool calibrateDevice(Cluster &c, bool quick, const Say &say, std::string &error) {
  int repeats = quick ? 2 : 10;
  say("calibrating one core (the kernels plans run, one thread)...");

  // Large products and a small model's (its data in cache, as a step's is).
  const int64_t shapes[][3] = {
      {512, 512, 512}, {128, 768, 256}, {1024, 256, 1024}, {128, 256, 64}};
  double best = 0, sum = 0;
  for (const auto &s : shapes) {
    double rate = gemmRate(s[0], s[1], s[2], repeats);
    say(fmt::format("  sgemm {}x{}x{}: {:.1f} GFLOP/s", s[0], s[1], s[2], rate / 1e9));
    best = std::max(best, rate);
    sum += rate;
  }
  if (best <= 0) {
    error = "calibrate: the matmul kernel could not be timed";
    return false;
  }
  // The peak is the best GEMM seen; matmuls reach their average of it.
  c.device.peakFlops["f32"] = best;
  c.device.peakFlops["bf16"] = best; // computed through f32 kernels on this CPU
  c.device.peakFlops["f64"] = best / 2;
  c.device.efficiency[plan::OP_MATMUL] =
      std::min(1.0, sum / double(std::size(shapes)) / best);
  // A large convolution and a small CNN's; their geometric mean.
  double large = convRate(8, 32, 32, 64, repeats), small = convRate(4, 16, 32, 32, repeats);
  double conv = std::sqrt(large * small);
  say(fmt::format("  conv2d 3x3, forward and gradients: {:.1f} GFLOP/s (8x32x32x32 to 64 "
                  "channels {:.1f}, 4x16x32x32 to 32 {:.1f})",
                  conv / 1e9, large / 1e9, small / 1e9));
  if (conv > 0)
    c.device.efficiency[plan::OP_CONV] = std::min(1.0, conv / best);

  int64_t big = quick ? (int64_t(1) << 22) : (int64_t(1) << 24);
  double s = addSeconds(big, repeats);
  if (s <= 0) {
    error = "calibrate: the elementwise kernel could not be timed";
    return false;
  }
  double bandwidth = 12.0 * double(big) / s;
  say(fmt::format("  memory: {:.1f} GB/s (out = a + b over {} MiB arrays)", bandwidth / 1e9,
                  big * 4 >> 20));
  c.device.memoryBandwidth = bandwidth;
  c.device.memoryEfficiency = 1.0; // the bandwidth is what a kernel reaches
  double floor = addSeconds(1, repeats * 20);
  say(fmt::format("  kernel floor: {:.2f} us (a one-element kernel)", floor * 1e6));
  c.device.launchOverhead = floor;
  // Small products run below the matmul rate by about a fixed time each
  // (packing and blocking; Hockney's n1/2 / r_inf): the mean of what a
  // 16x64x64 and a 64x64x64 product take beyond their FLOPs at that rate.
  double startup = 0;
  for (int64_t m : {16, 64}) {
    double rate = gemmRate(m, 64, 64, repeats * 20);
    double flops = 2.0 * double(m) * 64 * 64;
    double rated = best * c.device.efficiency[plan::OP_MATMUL];
    startup += rate > 0 ? std::max(0.0, flops / rate - flops / rated - floor) / 2 : 0;
  }
  c.device.classStartup[plan::OP_MATMUL] = startup;
  say(fmt::format("  matmul startup: {:.2f} us (16x64x64 and 64x64x64 beyond the rate)",
                  startup * 1e6));
  // Cache levels. A core's L1: the kernels of a small model (a few KiB a
  // tensor) read what the kernel before wrote from there, at several times
  // the L2's rate. Per element, between two sizes that fit (the floor and
  // the call cancel).
  long l1Bytes = sysconf(_SC_LEVEL1_DCACHE_SIZE), cacheBytes = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l1Bytes > 0 && cacheBytes > l1Bytes) {
    int64_t large = l1Bytes / 24, small = large / 4; // three arrays in half the L1
    double perElement = (addSeconds(large, repeats * 20, 1, true) -
                         addSeconds(small, repeats * 20, 1, true)) /
                        double(large - small);
    if (perElement > 0) {
      c.device.caches.push_back({double(l1Bytes), 12.0 / perElement});
      say(fmt::format("  L1 cache: {} KiB at {:.1f} GB/s (out = a + b, 3 x {} KiB against 3 x "
                      "{} KiB)",
                      l1Bytes >> 10, 12.0 / perElement / 1e9, large * 4 >> 10,
                      small * 4 >> 10));
    }
  }
  // The L2, the last level a core has to itself: a training step's kernels
  // mostly read what the kernels just before them wrote, and when it fits
  // there it streams at this rate.
  int64_t inCache = cacheBytes / 48; // three arrays: a quarter of the cache
  double cached = cacheBytes > 0 ? addSeconds(inCache, repeats * 5, 4) - floor : 0;
  if (cached > 0) {
    c.device.caches.push_back({double(cacheBytes), 12.0 * double(inCache) / cached});
    say(fmt::format("  cache: {:.1f} MiB at {:.1f} GB/s (out = a + b, 4 sets of 3 x {} KiB "
                    "in turn)",
                    double(cacheBytes) / (1 << 20), c.device.caches.back().bandwidth / 1e9,
                    inCache * 4 >> 10));
    addSharedCacheLevel(c.device, quick, repeats, say);
    // The elementwise kernel evaluates an expression node by node over
    // blocks in cache; the cost model counts its work in adds (a divide
    // or a function costs several, ElementwiseOps.def). The class's rate is
    // what an add beyond the others costs: a chain of 16 adds against one of
    // 8 over arrays in the L1 (the loads, the stores and the floor cancel;
    // a chain's time alone counted its L2 traffic as compute, and a step's
    // small kernels ran 1.2-1.4x faster than that predicted).
    // Five rounds a while apart, the median kept: measured once, one
    // calibration in five came out 1.3x slow (a burst of the host's other
    // work, a core's sibling busy).
    int64_t n = std::clamp<int64_t>(l1Bytes / 24, 256, 4096);
    std::vector<double> rates;
    for (int round = 0; round < 5; ++round) {
      double extra = addChainSeconds(n, 16, repeats * 4, true) -
                     addChainSeconds(n, 8, repeats * 4, true);
      rates.push_back(extra > 0 ? 8 * double(n) / extra : 0);
      if (round < 4)
        addSeconds(int64_t(cacheBytes) / 12, 1); // a while: a pass over the L2
    }
    double perAdd = median(rates);
    if (perAdd > 0)
      c.device.efficiency[plan::OP_ELEMENTWISE] = std::min(1.0, perAdd / best);
    say(fmt::format("  elementwise: {:.1f} GFLOP/s (a fused chain of 16 adds against one of 8, "
                    "in L1)",
                    perAdd / 1e9));
    if (perAdd > 0)
      measureOverlap(c.device, double(cacheBytes), perAdd, floor, repeats, say);
  } else {
    say("  cache: size unknown (sysconf); kernels counted at the memory bandwidth");
  }
  measureClassShares(c.device, floor, repeats, say);

  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGE_SIZE);
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  c.devicesPerNode = cores;
  c.nodes = 1;
  if (pages > 0 && pageSize > 0)
    c.device.memoryCapacity = double(pages) * double(pageSize) / cores;
  say(fmt::format("  {} cores, {:.1f} GiB of memory each", cores,
                  c.device.memoryCapacity / double(1 << 30)));
  return true;
}

bool measureLinks(runtime::Communicator &world, bool quick, LinkMeasurement &out,
                  std::string &error) {
  int64_t p = world.size();
  std::vector<int64_t> sizes = quick ? std::vector<int64_t>{1, 256, 4096, 65536, 1 << 20}
                                     : std::vector<int64_t>{1, 32, 256, 1024, 4096, 16384,
                                                            65536, 262144, 1 << 20};
  std::vector<LinkSample> samples, transfers;
  double lag = 0, work = 0;
  for (int64_t floats : sizes) {
    int repeats = quick ? 10 : floats >= 262144 ? 20 : 100;
    MetCollective met = allGatherMet(world, floats, repeats, error);
    if (met.seconds <= 0) {
      error = "calibrate: an all-gather failed: " + error;
      return false;
    }
    samples.push_back({4.0 * double(floats), met.seconds / double(p - 1)});
    lag += met.lag, work += met.work;
    double transfer = transferMet(world, 4 * floats, repeats, error);
    if (transfer <= 0) {
      error = "calibrate: a transfer failed: " + error;
      return false;
    }
    transfers.push_back({4.0 * double(floats), transfer});
  }
  if (world.rank() == 0) {
    out.link = fitLink(samples);
    Link transfer = fitLink(transfers);
    out.link.transfers = {Protocol{transfer.latency, transfer.bandwidth}};
    for (const Protocol &more : transfer.protocols)
      out.link.transfers.push_back(more);
    out.jitter = std::min(1.0, lag / work / expectedMaximum(p));
  }
  return true;
}

} // namespace dtc::cost::calibrate
