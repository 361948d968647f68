//===- CostTest.cpp - cluster files, cost formulas, the step simulator ----===//
#include "cost/CostModel.h"
#include "cost/ServerExchange.h"
#include "cost/Simulator.h"

#include "llvm/Support/JSON.h"

#include <gtest/gtest.h>

#include <set>

using namespace dtc;
using namespace dtc::cost;

namespace {

TEST(Cluster, PresetsParseAndRoundTrip) {
  for (const std::string &name : presetNames()) {
    std::string error;
    std::optional<Cluster> c = preset(name, error);
    ASSERT_TRUE(c) << name << ": " << error;
    EXPECT_EQ(c->name, name);
    EXPECT_GT(c->devices(), 0);
    std::optional<Cluster> again = parseCluster(toJson(*c), error);
    ASSERT_TRUE(again) << error;
    EXPECT_EQ(toJson(*again), toJson(*c));
  }
  std::string error;
  Cluster h100 = *preset("h100-sxm", error);
  EXPECT_DOUBLE_EQ(h100.device.peak(plan::BF16), 989.4e12);
  EXPECT_DOUBLE_EQ(h100.device.peak(plan::I64), 67e12); // falls back to f32's
  EXPECT_EQ(h100.devicesPerNode, 8);
  EXPECT_DOUBLE_EQ(h100.intraNode.bandwidth, 370e9); // NCCL's, not the line rate
  EXPECT_DOUBLE_EQ(h100.interNode.bandwidth, 48e9);
  // Plans are made for what the runtime leaves: the driver's 81559 MiB
  // less 2.5 GiB; a CPU core keeps nothing back.
  EXPECT_DOUBLE_EQ(h100.device.planMemory(), 81559.0 * (1 << 20) - 2.5 * (1 << 30));
  Cluster cpu = *preset("cpu-local", error);
  EXPECT_EQ(cpu.device.planMemory(), cpu.device.memoryCapacity);
}

TEST(Cluster, ErrorsNameTheField) {
  std::string json = *presetJson("a100-80g"), error;
  auto broken = [&](const std::string &from, const std::string &to) {
    std::string text = json;
    size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    EXPECT_FALSE(parseCluster(text, error));
    return error;
  };
  EXPECT_EQ(broken("\"nodes\": 128", "\"nodes\": 0"), "topology.nodes must be positive, got 0");
  EXPECT_EQ(broken("\"nodes\": 128", "\"nodes\": 2.5"),
            "topology.nodes must be a whole number up to 2^24, got 2.5");
  EXPECT_EQ(broken("\"f32\": 19.5e12", "\"f32\": \"fast\""),
            "device.peak_flops.f32 must be a number");
  EXPECT_EQ(broken("\"f32\": 19.5e12, ", ""),
            "device.peak_flops.f32 is missing (the peak other dtypes fall back to)");
  EXPECT_EQ(broken("\"launch_overhead\": 5e-6", "\"launch_overhead\": -1"),
            "device.launch_overhead must be zero or more, got -1");
  EXPECT_EQ(broken("\"memory_reserved\": 2684354560", "\"memory_reserved\": 9e10"),
            "device.memory_reserved must be below memory_capacity (79.15 GiB), got 83.82 GiB");
  EXPECT_FALSE(parseCluster("[1, 2]", error));
  EXPECT_EQ(error, "the cluster must be a JSON object");
}

TEST(CostModel, RooflineTakesTheSlowerBoundPlusLaunch) {
  Device d;
  d.peakFlops = {{"f32", 1e12}, {"bf16", 4e12}};
  d.memoryBandwidth = 1e11;
  d.memoryEfficiency = 0.5;
  d.launchOverhead = 1e-6;
  for (double &e : d.efficiency)
    e = 0.5;
  plan::Cost c;
  c.set_op_class(plan::OP_MATMUL);
  c.set_dtype(plan::F32);
  c.set_flops(1e9); // 1e9 / (1e12 * 0.5) = 2 ms
  c.set_bytes(1e6); // 1e6 / (1e11 * 0.5) = 20 us
  EXPECT_NEAR(instructionSeconds(c, d), 2e-3 + 1e-6, 1e-12);
  c.set_dtype(plan::BF16);
  EXPECT_NEAR(instructionSeconds(c, d), 0.5e-3 + 1e-6, 1e-12);
  c.set_bytes(1e9); // memory bound: 20 ms
  EXPECT_NEAR(instructionSeconds(c, d), 20e-3 + 1e-6, 1e-12);
  EXPECT_EQ(instructionSeconds(plan::Cost(), d), 0.0); // a view: no kernel
  // A class whose memory-bound kernels reach a quarter of the bandwidth
  // (calibrated): four times as long; other classes unchanged.
  d.classMemoryEfficiency[plan::OP_REDUCE] = 0.25;
  EXPECT_NEAR(instructionSeconds(c, d), 20e-3 + 1e-6, 1e-12);
  c.set_op_class(plan::OP_REDUCE);
  EXPECT_NEAR(instructionSeconds(c, d), 80e-3 + 1e-6, 1e-12);
}

TEST(Cluster, ClassMemoryEfficiencyIsOptionalAndRoundTrips) {
  std::string json = *presetJson("cpu-local"), error;
  Cluster plain = *parseCluster(json, error);
  EXPECT_EQ(plain.device.memoryShare(plan::OP_REDUCE), 1.0); // absent: full bandwidth
  plain.device.classMemoryEfficiency[plan::OP_REDUCE] = 0.25;
  std::optional<Cluster> again = parseCluster(toJson(plain), error);
  ASSERT_TRUE(again) << error;
  EXPECT_DOUBLE_EQ(again->device.memoryShare(plan::OP_REDUCE), 0.25);
  EXPECT_EQ(again->device.memoryShare(plan::OP_NORM), 1.0);
  std::string text = toJson(plain);
  size_t at = text.find("\"reduce\": 0.25");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, 15, "\"reduce\": 1.5");
  EXPECT_FALSE(parseCluster(text, error));
  EXPECT_EQ(error, "device.class_memory_efficiency.reduce must be at most 1, got 1.5");
}

/// A device of 1 TFLOP/s and 10 GB/s at which every class reaches its peak,
/// and an f32 cost of `flops` and `bytes` in class `c`.
Device plainDevice(double memoryEfficiency) {
  Device d;
  d.peakFlops = {{"f32", 1e12}};
  d.memoryBandwidth = 1e10;
  d.memoryEfficiency = memoryEfficiency;
  for (double &e : d.efficiency)
    e = 1;
  return d;
}
plan::Cost costOf(plan::OpClass c, double flops, double bytes) {
  plan::Cost cost;
  cost.set_op_class(c);
  cost.set_dtype(plan::F32);
  cost.set_flops(flops);
  cost.set_bytes(bytes);
  return cost;
}

TEST(CostModel, TheFirstCacheBytesStreamFromTheCache) {
  Device d = plainDevice(0.5);
  plan::Cost c = costOf(plan::OP_ELEMENTWISE, 0, 1e6);
  EXPECT_NEAR(instructionSeconds(c, d), 1e6 / 5e9, 1e-15); // no cache level
  d.caches = {{4e5, 1e11}};
  // 4e5 bytes at 1e11 and 6e5 at 1e10, both at half efficiency.
  EXPECT_NEAR(instructionSeconds(c, d), (4e5 / 1e11 + 6e5 / 1e10) / 0.5, 1e-15);
  d.caches.push_back({8e5, 5e10}); // a second level takes the next 4e5
  EXPECT_NEAR(instructionSeconds(c, d), (4e5 / 1e11 + 4e5 / 5e10 + 2e5 / 1e10) / 0.5, 1e-15);
  EXPECT_NEAR(instructionSeconds(c, d, 1e-3), 1e-3 / 0.5, 1e-15); // the caller knows
  EXPECT_EQ(d.bandwidthAfter(4e5), 1e11);
  EXPECT_EQ(d.bandwidthAfter(4e5 + 1), 5e10);
  EXPECT_EQ(d.bandwidthAfter(1e6), 1e10);
  d.caches.pop_back();
  c.set_bytes(2e5); // all of it in the cache
  EXPECT_NEAR(instructionSeconds(c, d), 2e5 / 1e11 / 0.5, 1e-15);
  d.classMemoryEfficiency[plan::OP_ELEMENTWISE] = 0.25; // a class's share applies to both
  EXPECT_NEAR(instructionSeconds(c, d), 2e5 / 1e11 / 0.5 / 0.25, 1e-15);
}

TEST(CostModel, StartupAndOverlapOfMemoryAndCompute) {
  Device d = plainDevice(1);
  plan::Cost c = costOf(plan::OP_MATMUL, 3e6, 1e4); // 3 us of compute, 1 us of memory
  EXPECT_NEAR(instructionSeconds(c, d), 3e-6, 1e-15); // the roofline: the larger
  d.overlap = 0;                                      // a core that loads, then computes
  EXPECT_NEAR(instructionSeconds(c, d), 4e-6, 1e-15);
  d.overlap = 0.25;
  EXPECT_NEAR(instructionSeconds(c, d), 3.75e-6, 1e-15);
  d.classStartup[plan::OP_MATMUL] = 2e-6; // per kernel of the class, not of others
  EXPECT_NEAR(instructionSeconds(c, d), 5.75e-6, 1e-15);
  c.set_op_class(plan::OP_ELEMENTWISE);
  EXPECT_NEAR(instructionSeconds(c, d), 3.75e-6, 1e-15);
}

TEST(Cluster, CacheIsOptionalAndRoundTrips) {
  std::string json = *presetJson("cpu-local"), error;
  Cluster plain = *parseCluster(json, error);
  EXPECT_TRUE(plain.device.caches.empty());
  EXPECT_EQ(toJson(plain).find("cache"), std::string::npos);
  plain.device.caches = {{2097152, 5e10}, {33554432, 2.5e10}};
  plain.device.overlap = 0.4;
  plain.device.classStartup[plan::OP_MATMUL] = 3e-7;
  std::optional<Cluster> again = parseCluster(toJson(plain), error);
  ASSERT_TRUE(again) << error;
  ASSERT_EQ(again->device.caches.size(), 2u);
  EXPECT_EQ(again->device.caches[0].bytes, 2097152.0);
  EXPECT_EQ(again->device.caches[1].bandwidth, 2.5e10);
  EXPECT_EQ(again->device.overlap, 0.4);
  EXPECT_EQ(again->device.classStartup[plan::OP_MATMUL], 3e-7);
  EXPECT_EQ(again->device.classStartup[plan::OP_CONV], 0.0);
  auto broken = [&](const std::string &cache) {
    std::string text = json;
    text.replace(text.find("\"memory_bandwidth\""), 0, "\"caches\": " + cache + ", ");
    EXPECT_FALSE(parseCluster(text, error)) << text;
    return error;
  };
  EXPECT_EQ(broken("[{\"bytes\": 1024}]"), "device.caches[0].bandwidth is missing");
  EXPECT_EQ(broken("[{\"bytes\": -1, \"bandwidth\": 1e10}]"),
            "device.caches[0].bytes must be positive, got -1");
  EXPECT_EQ(broken("[{\"bytes\": 2048, \"bandwidth\": 1e10}, {\"bytes\": 1024, "
                   "\"bandwidth\": 1e9}]"),
            "device.caches[1].bytes must be more than the level before's (2048): smallest "
            "first");
  EXPECT_EQ(broken("[2]"), "device.caches[0] must be an object");
  EXPECT_EQ(broken("{\"bytes\": 1024}"),
            "device.caches must be a list of {\"bytes\", \"bandwidth\"} levels");
  std::string old = json;
  old.replace(old.find("\"memory_bandwidth\""), 0, "\"cache\": {}, ");
  EXPECT_FALSE(parseCluster(old, error));
  EXPECT_NE(error.find("device.cache is now device.caches"), std::string::npos) << error;
}

TEST(CostModel, CollectiveFormulas) {
  Link link{1e-5, 1e10};
  double n = 1e8;
  // Ring all-reduce over 4: 6 latencies and 2 * 3/4 of the bytes.
  EXPECT_NEAR(collectiveSeconds(Collective::AllReduce, Algorithm::Ring, 4, n, link),
              6e-5 + 1.5e-2, 1e-12);
  EXPECT_NEAR(collectiveSeconds(Collective::AllReduce, Algorithm::Tree, 4, n, link),
              4e-5 + 2e-2, 1e-12);
  EXPECT_NEAR(collectiveSeconds(Collective::AllGather, Algorithm::Ring, 4, n, link),
              3e-5 + 7.5e-3, 1e-12);
  EXPECT_NEAR(collectiveSeconds(Collective::SendRecv, Algorithm::Ring, 2, n, link), 1e-5 + 1e-2,
              1e-12);
  EXPECT_EQ(collectiveSeconds(Collective::AllReduce, Algorithm::Ring, 1, n, link), 0.0);
  // Small messages: the tree's log p latencies win; large ones: the ring.
  EXPECT_LT(allReduceSeconds(64, 1e3, link),
            collectiveSeconds(Collective::AllReduce, Algorithm::Ring, 64, 1e3, link));
  EXPECT_DOUBLE_EQ(allReduceSeconds(64, 1e9, link),
                   collectiveSeconds(Collective::AllReduce, Algorithm::Ring, 64, 1e9, link));
}

TEST(CostModel, ACollectiveTakesTheFastestProtocol) {
  Link link{1e-6, 1e9};       // eager: small messages
  link.protocols = {{5e-6, 1e10}}; // rendezvous: large ones
  // 1 KiB: 1 us + 1.024 us eagerly; 5 us + 0.1 us the other way.
  EXPECT_NEAR(collectiveSeconds(Collective::SendRecv, Algorithm::Ring, 2, 1024, link),
              1e-6 + 1.024e-6, 1e-15);
  EXPECT_NEAR(collectiveSeconds(Collective::SendRecv, Algorithm::Ring, 2, 1e6, link),
              5e-6 + 1e-4, 1e-15);
  // All-gather over 4 ranks of 4 MB: 3 latencies and 3 MB, rendezvous.
  EXPECT_NEAR(collectiveSeconds(Collective::AllGather, Algorithm::Ring, 4, 4e6, link),
              3 * 5e-6 + 3e6 / 1e10, 1e-15);
}

TEST(CostModel, ATransferTakesTheLinksTransferProtocolsWhereItHasThem) {
  Link link{1e-6, 1e9};
  link.protocols = {{5e-6, 5e9}};
  double allGather = collectiveSeconds(Collective::AllGather, Algorithm::Ring, 2, 8e6, link);
  // Without transfer protocols a transfer runs as the collectives do.
  EXPECT_NEAR(collectiveSeconds(Collective::SendRecv, Algorithm::Ring, 2, 4e6, link),
              5e-6 + 4e6 / 5e9, 1e-15);
  // With them, only they count (one copy alone runs at 1e10 here), even
  // where the collectives' line would be faster (1 KiB: 2.024 us there).
  link.transfers = {{3e-6, 1e10}};
  EXPECT_NEAR(collectiveSeconds(Collective::SendRecv, Algorithm::Ring, 2, 4e6, link),
              3e-6 + 4e6 / 1e10, 1e-15);
  EXPECT_NEAR(collectiveSeconds(Collective::SendRecv, Algorithm::Ring, 2, 1024, link),
              3e-6 + 1024 / 1e10, 1e-15);
  EXPECT_EQ(collectiveSeconds(Collective::AllGather, Algorithm::Ring, 2, 8e6, link), allGather);
}

TEST(CostModel, FitLinkFindsOneProtocolOrTwo) {
  // Samples of one line come back as that line, alone.
  std::vector<LinkSample> line;
  for (double n : {4.0, 1024.0, 65536.0, 4194304.0})
    line.push_back({n, 2e-6 + n / 5e9});
  Link one = fitLink(line);
  EXPECT_NEAR(one.latency, 2e-6, 1e-12);
  EXPECT_NEAR(one.bandwidth, 5e9, 1e3);
  EXPECT_TRUE(one.protocols.empty());
  // Samples of the faster of two lines (eager to 4 KiB, rendezvous past)
  // come back as both, within 5% at every size; one line cannot do that.
  Link truth{0.5e-6, 1.2e9};
  truth.protocols = {{3e-6, 6.5e9}};
  std::vector<LinkSample> two;
  for (double n = 4; n <= 4194304; n *= 4)
    two.push_back({n, collectiveSeconds(Collective::SendRecv, Algorithm::Ring, 2, n, truth)});
  Link fitted = fitLink(two);
  ASSERT_EQ(fitted.protocols.size(), 1u);
  for (const LinkSample &s : two)
    EXPECT_NEAR(collectiveSeconds(Collective::SendRecv, Algorithm::Ring, 2, s.bytes, fitted) /
                    s.seconds,
                1.0, 0.05)
        << s.bytes << " bytes";
  // Noisy samples never give a negative latency.
  Link noisy = fitLink({{4, 1e-7}, {8, 1e-8}, {1e6, 1e-4}});
  EXPECT_GE(noisy.latency, 1e-9);
  EXPECT_GT(noisy.bandwidth, 0);
}

TEST(Cluster, LinkProtocolsAndTheCommunicationStreamRoundTrip) {
  std::string json = *presetJson("a100-80g"), error;
  Cluster c = *parseCluster(json, error);
  EXPECT_TRUE(c.device.communicationStream); // GPUs: NCCL's stream
  EXPECT_FALSE(preset("cpu-local", error)->device.communicationStream);
  EXPECT_EQ(toJson(c).find("protocols"), std::string::npos);
  c.intraNode.protocols = {{4e-6, 4e11}};
  c.device.communicationStream = false;
  c.device.jitter = 0.02;
  std::optional<Cluster> again = parseCluster(toJson(c), error);
  ASSERT_TRUE(again) << error;
  ASSERT_EQ(again->intraNode.protocols.size(), 1u);
  EXPECT_EQ(again->intraNode.protocols[0].latency, 4e-6);
  EXPECT_EQ(again->intraNode.protocols[0].bandwidth, 4e11);
  EXPECT_TRUE(again->interNode.protocols.empty());
  EXPECT_TRUE(again->intraNode.transfers.empty());
  c.intraNode.transfers = {{1e-6, 2e9}, {3e-6, 1e10}};
  again = parseCluster(toJson(c), error);
  ASSERT_TRUE(again) << error;
  ASSERT_EQ(again->intraNode.transfers.size(), 2u);
  EXPECT_EQ(again->intraNode.transfers[1].latency, 3e-6);
  EXPECT_EQ(again->intraNode.transfers[1].bandwidth, 1e10);
  EXPECT_FALSE(again->device.communicationStream);
  EXPECT_EQ(again->device.jitter, 0.02);
  c.device.packsStridedParts = true;
  EXPECT_TRUE(parseCluster(toJson(c), error)->device.packsStridedParts);
  auto broken = [&](const std::string &from, const std::string &to) {
    std::string text = json;
    text.replace(text.find(from), from.size(), to);
    EXPECT_FALSE(parseCluster(text, error)) << text;
    return error;
  };
  const std::string intra = "\"intra_node\": {\"latency\": 3e-6,";
  EXPECT_EQ(broken(intra, intra + " \"protocols\": [{\"latency\": 1e-6}],"),
            "links.intra_node.protocols[0].bandwidth is missing");
  EXPECT_EQ(broken(intra, intra + " \"protocols\": {},"),
            "links.intra_node.protocols must be a list of {\"latency\", \"bandwidth\"} "
            "objects");
  EXPECT_EQ(broken(intra, intra + " \"protocols\": [{\"latency\": -1, \"bandwidth\": 1}],"),
            "links.intra_node.protocols[0].latency must be positive, got -1");
  EXPECT_EQ(broken(intra, intra + " \"transfers\": [{\"bandwidth\": 1e9}],"),
            "links.intra_node.transfers[0].latency is missing");
  EXPECT_EQ(broken("\"memory_bandwidth\"", "\"communication_stream\": 1, \"memory_bandwidth\""),
            "device.communication_stream must be true or false");
  EXPECT_EQ(broken("\"memory_bandwidth\"", "\"packs_strided_parts\": \"yes\", \"memory_bandwidth\""),
            "device.packs_strided_parts must be true or false");
}

/// Instruction i of rank 0 reads `inputs` and writes buffer `output`.
void addInstruction(plan::RankProgram &p, std::vector<uint32_t> inputs, uint32_t output,
                    double flops) {
  plan::Instruction *inst = p.add_instructions();
  for (uint32_t in : inputs)
    inst->add_inputs(in);
  inst->add_outputs(output);
  inst->mutable_cost()->set_flops(flops);
  inst->mutable_cost()->set_op_class(plan::OP_MATMUL);
  inst->mutable_cost()->set_dtype(plan::F32);
}

TEST(Simulator, OneRankRunsItsProgramInOrder) {
  std::string error;
  Cluster c = *preset("a100-80g", error);
  plan::Plan plan;
  plan::RankProgram *p = plan.add_ranks();
  for (int b = 0; b < 4; ++b)
    p->add_buffers();
  p->set_arena_bytes(1 << 20);
  addInstruction(*p, {0}, 1, 1e12);
  addInstruction(*p, {1}, 2, 2e12);
  addInstruction(*p, {0}, 3, 1e12);
  Simulation sim = simulate(plan, c, true);
  double unit = 1e12 / (19.5e12 * 0.75) + c.device.launchOverhead;
  double twice = 2e12 / (19.5e12 * 0.75) + c.device.launchOverhead;
  EXPECT_NEAR(sim.stepSeconds, 2 * unit + twice, 1e-12);
  ASSERT_EQ(sim.events.size(), 3u);
  EXPECT_NEAR(sim.events[1].start, unit, 1e-12);
  EXPECT_NEAR(sim.events[2].start, unit + twice, 1e-12); // the stream is busy until then
  EXPECT_DOUBLE_EQ(sim.flops, 4e12);
  EXPECT_EQ(sim.ranks[0].memoryPeakBytes, 1 << 20);
  EXPECT_NEAR(sim.ranks[0].compute, sim.stepSeconds, 1e-12);
  EXPECT_EQ(sim.ranks[0].idle, 0.0);

  std::string trace = chromeTrace(plan, sim, [](const plan::Instruction &) { return "mm"; });
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(trace);
  ASSERT_TRUE(bool(parsed));
  int slices = 0;
  for (const llvm::json::Value &e : *parsed->getAsObject()->getArray("traceEvents"))
    slices += e.getAsObject()->getString("ph") == llvm::StringRef("X");
  EXPECT_EQ(slices, 3);
}

/// An empty plan on a one-axis mesh of `size` ranks.
plan::Plan planOnMesh(const std::string &axisName, int64_t size) {
  plan::Plan plan;
  plan::MeshAxis *axis = plan.mutable_mesh()->add_axes();
  axis->set_name(axisName);
  axis->set_size(size);
  return plan;
}

TEST(CostModel, CollectivesOverStridedPartsCopyThemLocally) {
  std::string error;
  Cluster c = *preset("a100-80g", error);
  plan::Plan plan = planOnMesh("tp", 2);
  auto type = [](std::vector<int64_t> shape) {
    plan::TensorType t;
    t.set_dtype(plan::F32);
    for (int64_t d : shape)
      t.add_shape(d);
    return t;
  };
  plan::Instruction inst;
  inst.mutable_collective()->set_kind(plan::ALL_TO_ALL);
  inst.mutable_collective()->add_mesh_axes(0);
  inst.mutable_cost()->set_bytes(1 << 20);
  const double n = 1 << 20;
  double link = collectiveSeconds(Collective::AllToAll, Algorithm::Ring, 2, n, c.intraNode);
  // [64, 4096] split along dim 1 (strided: packed), concatenated along
  // dim 0 (contiguous: no unpack): its bytes read and written once more.
  plan::TensorType in = type({64, 4096}), out = type({128, 2048});
  inst.mutable_collective()->set_axis(1);
  inst.mutable_collective()->set_concat_axis(0);
  EXPECT_EQ(relayoutBytes(inst.collective(), n, n, &in, &out), 2 * n);
  // Counted where the device's runtime packs them (not the GPU presets).
  EXPECT_FALSE(c.device.packsStridedParts);
  EXPECT_TRUE(preset("cpu-local", error)->device.packsStridedParts);
  EXPECT_NEAR(collectiveInstructionSeconds(plan.mesh(), inst, c, &in, &out), link, 1e-15);
  c.device.packsStridedParts = true;
  EXPECT_NEAR(collectiveInstructionSeconds(plan.mesh(), inst, c, &in, &out),
              link + c.device.streamSeconds(2 * n) / c.device.memoryEfficiency, 1e-15);
  // Both ways strided: packed and unpacked.
  plan::TensorType out3 = type({2, 64, 2048});
  inst.mutable_collective()->set_concat_axis(1);
  EXPECT_EQ(relayoutBytes(inst.collective(), n, n, &in, &out3), 4 * n);
  // Split along a dim with only ones before it: contiguous, as the first.
  plan::TensorType flat = type({1, 64, 4096});
  inst.mutable_collective()->set_axis(1);
  inst.mutable_collective()->set_concat_axis(0);
  EXPECT_EQ(relayoutBytes(inst.collective(), n, n, &flat, &out), 0);
  // Without types, a dim after the first counts as strided.
  EXPECT_EQ(relayoutBytes(inst.collective(), n, n), 2 * n);
  // All-gather along dim 0 lands in place; along dim 1 it is unpacked.
  inst.mutable_collective()->set_kind(plan::ALL_GATHER);
  inst.mutable_collective()->set_axis(0);
  EXPECT_EQ(relayoutBytes(inst.collective(), n, 2 * n, &in, &out), 0);
  inst.mutable_collective()->set_axis(1);
  EXPECT_EQ(relayoutBytes(inst.collective(), n, 2 * n, &in, &out), 4 * n);
  // All-reduce works in place.
  inst.mutable_collective()->set_kind(plan::ALL_REDUCE);
  EXPECT_EQ(relayoutBytes(inst.collective(), n, n, &in, &out), 0);
}

TEST(Simulator, AllSliceIsALocalCopyNotCommunication) {
  // On 2 ranks: slice a whole tensor, then gather the parts back.
  std::string error;
  Cluster c = *preset("a100-80g", error);
  plan::Plan plan = planOnMesh("tp", 2);
  plan.add_program_of_rank(0);
  plan.add_program_of_rank(0);
  plan::RankProgram *p = plan.add_ranks();
  for (int b = 0; b < 3; ++b)
    p->add_buffers();
  const double part = 1 << 20; // bytes of a rank's part
  plan::Instruction *slice = p->add_instructions();
  slice->add_inputs(0);
  slice->add_outputs(1);
  slice->mutable_collective()->set_kind(plan::ALL_SLICE);
  slice->mutable_collective()->add_mesh_axes(0);
  slice->mutable_cost()->set_bytes(2 * part); // read and written once
  slice->mutable_cost()->set_op_class(plan::OP_DATA_MOVEMENT);
  slice->mutable_cost()->set_dtype(plan::F32);
  plan::Instruction *gather = p->add_instructions();
  gather->add_inputs(1);
  gather->add_outputs(2);
  *gather->mutable_collective() = slice->collective();
  gather->mutable_collective()->set_kind(plan::ALL_GATHER);
  gather->mutable_cost()->set_bytes(part);
  gather->mutable_cost()->set_op_class(plan::OP_COMMUNICATION);

  Simulation sim = simulate(plan, c, true);
  double copy = 2 * part / (c.device.memoryBandwidth * c.device.memoryEfficiency) +
                c.device.launchOverhead;
  double gathered = collectiveInstructionSeconds(plan.mesh(), *gather, c);
  EXPECT_NEAR(collectiveInstructionSeconds(plan.mesh(), *slice, c), copy, 1e-15);
  ASSERT_EQ(sim.events.size(), 2u); // one program, timed once for both ranks
  EXPECT_FALSE(sim.events[0].communication);
  EXPECT_NEAR(sim.events[0].end - sim.events[0].start, copy, 1e-15);
  EXPECT_TRUE(sim.events[1].communication);
  EXPECT_NEAR(sim.events[1].start, copy, 1e-15); // waits for its input, the part
  EXPECT_NEAR(sim.stepSeconds, copy + gathered, 1e-15);
  EXPECT_NEAR(sim.ranks[1].compute, copy, 1e-15);
  EXPECT_NEAR(sim.ranks[1].byClass[plan::OP_DATA_MOVEMENT], copy, 1e-15);
  EXPECT_NEAR(sim.ranks[1].communication, gathered, 1e-15);
}

/// Two ranks of a 2-rank mesh with programs of their own: `work` seconds'
/// worth of matmul FLOPs each, then (when `reduce`) an all-reduce of 1 MiB.
plan::Plan twoPrograms(const Cluster &c, double work0, double work1, bool reduce1) {
  plan::Plan plan = planOnMesh("x", 2);
  double rate = 19.5e12 * 0.75; // a100-80g's f32 matmul
  for (auto [work, reduce] : {std::pair{work0, true}, std::pair{work1, reduce1}}) {
    plan.add_program_of_rank(uint32_t(plan.ranks_size()));
    plan::RankProgram *p = plan.add_ranks();
    for (int b = 0; b < 3; ++b)
      p->add_buffers();
    addInstruction(*p, {0}, 1, (work - c.device.launchOverhead) * rate);
    if (!reduce)
      continue;
    plan::Instruction *ar = p->add_instructions();
    ar->add_inputs(1);
    ar->add_outputs(2);
    ar->mutable_collective()->set_kind(plan::ALL_REDUCE);
    ar->mutable_collective()->add_mesh_axes(0);
    ar->mutable_cost()->set_bytes(1 << 20);
    ar->mutable_cost()->set_op_class(plan::OP_COMMUNICATION);
  }
  return plan;
}

TEST(Simulator, RanksWithDifferentProgramsMeetAtTheirCollectives) {
  // Rank 1 finishes its share in 1 ms and waits for rank 0 (2 ms) before
  // their all-reduce: the wait comes out of the timelines.
  std::string error;
  Cluster c = *preset("a100-80g", error);
  plan::Plan plan = twoPrograms(c, 2e-3, 1e-3, true);
  Simulation sim = simulate(plan, c, true);
  ASSERT_EQ(sim.error, "");
  double reduce = collectiveInstructionSeconds(plan.mesh(), plan.ranks(0).instructions(1), c);
  ASSERT_EQ(sim.events.size(), 4u); // every rank on its own timeline
  for (const Event &e : sim.events)
    if (e.communication)
      EXPECT_NEAR(e.start, 2e-3, 1e-12) << "rank " << e.rank;
  EXPECT_NEAR(sim.stepSeconds, 2e-3 + reduce, 1e-12);
  ASSERT_EQ(sim.ranks.size(), 2u);
  EXPECT_NEAR(sim.ranks[0].idle, reduce, 1e-12); // compute waits for the all-reduce
  EXPECT_NEAR(sim.ranks[1].idle, 1e-3 + reduce, 1e-12); // and rank 1 for rank 0 too
  EXPECT_NEAR(sim.ranks[1].compute, 1e-3, 1e-12);
}

TEST(Simulator, EqualProgramsTimedJointlyOrOnceAgree) {
  // Two copies of one program are simulated rank by rank, one shared
  // program once: the same step.
  std::string error;
  Cluster c = *preset("a100-80g", error);
  plan::Plan copies = twoPrograms(c, 2e-3, 2e-3, true);
  plan::Plan shared = copies;
  shared.mutable_ranks()->RemoveLast();
  shared.set_program_of_rank(1, 0);
  Simulation jointly = simulate(copies, c, true), once = simulate(shared, c, true);
  ASSERT_EQ(jointly.error, "");
  EXPECT_EQ(jointly.events.size(), 4u);
  EXPECT_EQ(once.events.size(), 2u);
  EXPECT_DOUBLE_EQ(jointly.stepSeconds, once.stepSeconds);
  for (int r = 0; r < 2; ++r) {
    EXPECT_DOUBLE_EQ(jointly.ranks[r].idle, once.ranks[r].idle);
    EXPECT_DOUBLE_EQ(jointly.ranks[r].communication, once.ranks[r].communication);
  }
  EXPECT_DOUBLE_EQ(jointly.flops, once.flops);
}

TEST(Simulator, InlineCommunicationAddsToTheStep) {
  // Compute that does not need the all-reduce's result overlaps it on a
  // communication stream; without one (dtc's CPU runtime) it waits.
  std::string error;
  Cluster c = *preset("a100-80g", error);
  plan::Plan plan = twoPrograms(c, 2e-3, 2e-3, true);
  plan.mutable_ranks()->RemoveLast();
  plan.set_program_of_rank(1, 0);
  addInstruction(*plan.mutable_ranks(0), {0}, 1, 1e12); // after the all-reduce, independent
  double reduce = collectiveInstructionSeconds(plan.mesh(), plan.ranks(0).instructions(1), c);
  double after = 1e12 / (19.5e12 * 0.75) + c.device.launchOverhead;
  Simulation stream = simulate(plan, c, false);
  EXPECT_NEAR(stream.stepSeconds, 2e-3 + std::max(reduce, after), 1e-12);
  c.device.communicationStream = false;
  Simulation inline_ = simulate(plan, c, false);
  EXPECT_NEAR(inline_.stepSeconds, 2e-3 + reduce + after, 1e-12);
  EXPECT_NEAR(inline_.ranks[0].communication, reduce, 1e-12);
  EXPECT_NEAR(inline_.ranks[0].idle, 0, 1e-12);
}

TEST(Simulator, AnOverlappedReductionRunsDuringTheLastBackward) {
  // Two micro-batches of two matmuls (1 ms, then 2 ms), the second's
  // result all-reduced each micro-batch; the all-reduce of the first one's
  // sum runs once per step, behind the last per-micro-batch one on the
  // collectives' stream. Listed as overlapped after the first matmul, it
  // starts when the last micro-batch has made that sum, on a stream of its
  // own, and is done by the step's end.
  std::string error;
  Cluster c = *preset("a100-80g", error);
  plan::Plan plan = planOnMesh("dp", 2);
  plan.mutable_training()->set_micro_batches(2);
  plan.add_program_of_rank(0);
  plan.add_program_of_rank(0);
  plan::RankProgram *p = plan.add_ranks();
  for (int b = 0; b < 5; ++b)
    p->add_buffers();
  double rate = 19.5e12 * 0.75; // a100-80g's f32 matmul
  addInstruction(*p, {0}, 1, (1e-3 - c.device.launchOverhead) * rate);
  addInstruction(*p, {0}, 2, (2e-3 - c.device.launchOverhead) * rate);
  auto allReduce = [&](uint32_t in, uint32_t out) {
    plan::Instruction *r = p->add_instructions();
    r->add_inputs(in);
    r->add_outputs(out);
    r->mutable_collective()->set_kind(plan::ALL_REDUCE);
    r->mutable_collective()->add_mesh_axes(0);
    r->mutable_cost()->set_bytes(1 << 20);
    r->mutable_cost()->set_op_class(plan::OP_COMMUNICATION);
    return collectiveInstructionSeconds(plan.mesh(), *r, c);
  };
  double each = allReduce(2, 4);
  p->set_accumulate_end(3);
  double reduced = allReduce(1, 3);
  Simulation once = simulate(plan, c, false);
  EXPECT_NEAR(once.stepSeconds, 6e-3 + each + reduced, 1e-12);
  plan::OverlappedInstruction *o = p->add_overlapped();
  o->set_instruction(3);
  o->set_after(0);
  Simulation overlapped = simulate(plan, c, true);
  ASSERT_EQ(overlapped.error, "");
  EXPECT_NEAR(overlapped.stepSeconds, 6e-3 + each, 1e-12);
  ASSERT_EQ(overlapped.events.size(), 7u); // 2 x 3 per micro-batch, the reduction once
  const Event &r = overlapped.events[4]; // after micro-batch 2's first matmul
  EXPECT_EQ(r.instruction, 3);
  EXPECT_EQ(r.stream, 3);
  EXPECT_NEAR(r.start, 4e-3, 1e-12);
}

TEST(Simulator, JitterMakesEveryMeetingWaitForTheSlowestRank) {
  // E[max] of n standard normals: known values.
  EXPECT_EQ(expectedMaximum(1), 0.0);
  EXPECT_NEAR(expectedMaximum(2), 1 / std::sqrt(3.14159265358979), 1e-4);
  EXPECT_NEAR(expectedMaximum(4), 1.02938, 1e-4);
  EXPECT_NEAR(expectedMaximum(1000), 3.24144, 1e-3);
  // 2 ms of work, then an all-reduce on 2 ranks: with 1% jitter the
  // all-reduce waits 0.564 * 1% * 2 ms for the later rank, and the next
  // step's first meeting counts the work after the last one (none here).
  std::string error;
  Cluster c = *preset("a100-80g", error);
  plan::Plan plan = twoPrograms(c, 2e-3, 2e-3, true);
  plan.mutable_ranks()->RemoveLast();
  plan.set_program_of_rank(1, 0);
  double still = simulate(plan, c, false).stepSeconds;
  c.device.jitter = 0.01;
  EXPECT_NEAR(simulate(plan, c, false).stepSeconds, still + expectedMaximum(2) * 0.01 * 2e-3,
              1e-12);
  // Work after the all-reduce is the tail the next step's first meeting
  // waits on as well.
  addInstruction(*plan.mutable_ranks(0), {2}, 1, 1e12);
  double tail = 1e12 / (19.5e12 * 0.75) + c.device.launchOverhead;
  c.device.jitter = 0;
  still = simulate(plan, c, false).stepSeconds;
  c.device.jitter = 0.01;
  EXPECT_NEAR(simulate(plan, c, false).stepSeconds,
              still + expectedMaximum(2) * 0.01 * (2e-3 + tail), 1e-12);
}

TEST(Simulator, ACollectiveSomeRankNeverReachesIsAnError) {
  std::string error;
  Cluster c = *preset("a100-80g", error);
  Simulation sim = simulate(twoPrograms(c, 1e-3, 1e-3, false), c, false);
  EXPECT_EQ(sim.error, "rank 0 waits forever at instruction 1 (ALL_REDUCE) for ranks 0, 1: "
                       "some of them never reach it (their programs make fewer collectives on "
                       "that group)");
}

TEST(Simulator, BytesSentToARankOnThisNodeComeBackFromMemory) {
  // Stage 0 writes 1 MiB and sends it to stage 1 on the same node, whose
  // core reads it into its own caches: stage 0's next write of it (the
  // next step's: steps repeat) streams at memory's pace, where without the
  // send it would stay in cache. The receiver reads what it received from
  // its cache.
  std::string error;
  Cluster c = *preset("cpu-local", error);
  c.device.caches = {{8 << 20, 1e11}};
  c.device.jitter = 0;
  const double bytes = 1 << 20;
  auto stages = [&](bool send) {
    plan::Plan plan = planOnMesh("pp", 2);
    for (int stage = 0; stage < 2; ++stage) {
      plan.add_program_of_rank(uint32_t(stage));
      plan::RankProgram *p = plan.add_ranks();
      for (int b = 0; b < 2; ++b) {
        p->add_buffers()->set_offset(uint64_t(b) << 20);
        p->mutable_buffers(b)->mutable_type()->set_dtype(plan::F32);
        p->mutable_buffers(b)->mutable_type()->add_shape(1 << 18);
      }
      plan::Instruction *write = p->add_instructions();
      if (stage == 1) {
        write->mutable_recv()->set_peer(0);
        write->add_outputs(0);
        write = p->add_instructions();
        write->add_inputs(0);
      }
      write->add_outputs(stage == 0 ? 0 : 1);
      *write->mutable_cost() = costOf(plan::OP_ELEMENTWISE, 0, stage == 0 ? bytes : 2 * bytes);
      if (stage == 0 && send) {
        plan::Instruction *out = p->add_instructions();
        out->add_inputs(0);
        out->mutable_send()->set_peer(1);
      }
      if (!send) // one stage alone
        break;
    }
    return simulate(plan, c, true);
  };
  Simulation sent = stages(true), kept = stages(false);
  ASSERT_EQ(sent.error, "");
  auto seconds = [&](const Simulation &sim, int rank, int instruction) {
    for (const Event &e : sim.events)
      if (e.rank == rank && e.instruction == instruction)
        return e.end - e.start;
    return -1.0;
  };
  plan::Cost fill = costOf(plan::OP_ELEMENTWISE, 0, bytes);
  EXPECT_NEAR(seconds(sent, 0, 0),
              instructionSeconds(fill, c.device, bytes / c.device.memoryBandwidth), 1e-12);
  EXPECT_NEAR(seconds(kept, 0, 0), instructionSeconds(fill, c.device, bytes / 1e11), 1e-12);
  EXPECT_NEAR(seconds(sent, 1, 1),
              instructionSeconds(costOf(plan::OP_ELEMENTWISE, 0, 2 * bytes), c.device,
                                 2 * bytes / 1e11),
              1e-12);
}

TEST(Simulator, PipelineBubblesComeOutOfTheTimelines) {
  // Two stages, two micro-batches of 1 ms each per stage: stage 0 sends
  // each micro-batch's activations to stage 1 as soon as it has them.
  // Stage 1 waits for the first (the bubble: 1 ms plus a transfer), then
  // overlaps its receive of the second with its first micro-batch.
  std::string error;
  Cluster c = *preset("a100-80g", error);
  plan::Plan plan = planOnMesh("pp", 2);
  double rate = 19.5e12 * 0.75, work = 1e-3;
  for (int stage = 0; stage < 2; ++stage) {
    plan.add_program_of_rank(uint32_t(stage));
    plan::RankProgram *p = plan.add_ranks();
    for (int b = 0; b < 6; ++b) {
      plan::TensorType *t = p->add_buffers()->mutable_type();
      t->set_dtype(plan::F32);
      t->add_shape(1 << 20); // 4 MiB of activations
    }
    for (int mb = 0; mb < 2; ++mb) {
      if (stage == 0) {
        addInstruction(*p, {0}, uint32_t(1 + mb), (work - c.device.launchOverhead) * rate);
        plan::Instruction *send = p->add_instructions();
        send->add_inputs(uint32_t(1 + mb));
        send->mutable_send()->set_peer(1);
      } else {
        plan::Instruction *recv = p->add_instructions();
        recv->add_outputs(uint32_t(1 + mb));
        recv->mutable_recv()->set_peer(0);
        addInstruction(*p, {uint32_t(1 + mb)}, uint32_t(3 + mb),
                       (work - c.device.launchOverhead) * rate);
      }
    }
  }
  Simulation sim = simulate(plan, c, true);
  ASSERT_EQ(sim.error, "");
  double transfer = collectiveSeconds(Collective::SendRecv, Algorithm::Ring, 2, 4 << 20,
                                      c.intraNode);
  // Stage 1: receive [1, 1+t], work [1+t, 2+t], receive [2, 2+t] (the
  // second send starts after stage 0's second micro-batch), work [2+t, 3+t].
  EXPECT_NEAR(sim.stepSeconds, 3 * work + transfer, 1e-12);
  ASSERT_EQ(sim.ranks.size(), 2u);
  EXPECT_NEAR(sim.ranks[1].idle, work + transfer, 1e-12); // the bubble
  EXPECT_NEAR(sim.ranks[0].idle, work + transfer, 1e-12); // its last send, then the end
  // A GPU's sends are staged (runtime/cuda/NcclTransfers.cpp): the sender's
  // stream holds each only for its copy into the staging buffer; the link's
  // time is the receive's.
  double staged = 2.0 * (4 << 20) / (c.device.memoryBandwidth * c.device.memoryEfficiency);
  EXPECT_NEAR(sim.ranks[0].communication, 2 * staged, 1e-12);
  EXPECT_NEAR(sim.ranks[1].communication, 2 * transfer, 1e-12);

  // A send nobody receives (sends are buffered: the sender goes on).
  plan.mutable_ranks(1)->mutable_instructions()->DeleteSubrange(2, 2);
  Simulation stuck = simulate(plan, c, false);
  EXPECT_EQ(stuck.error, "rank 0 sends 2 tensors to rank 1, which receives 1 of them");
  // A receive nobody sends to waits forever.
  plan::Plan waiting = plan;
  waiting.mutable_ranks(0)->mutable_instructions()->DeleteSubrange(1, 3);
  Simulation forever = simulate(waiting, c, false);
  EXPECT_EQ(forever.error, "rank 1 waits forever at instruction 0 (receive from rank 0): that "
                           "rank never makes the matching send");
}

TEST(Simulator, AStagesRanksAreSimulatedOnceAsAllOfThem) {
  // Two stages of two data-parallel ranks (mesh pp=2 x dp=2, a program per
  // stage): each micro-batch, stage 0 computes and sends along pp to the
  // rank like it on stage 1, which receives and computes; then each stage
  // all-reduces over dp, stage 1 with more work. The lowest rank of each
  // stage simulated for its stage gives every rank the times that
  // simulating all four does; its events stand for its stage's.
  std::string error;
  Cluster c = *preset("a100-80g", error);
  c.device.jitter = 1e-6; // per meeting: the same on every rank of a group
  plan::Plan plan = planOnMesh("pp", 2);
  plan::MeshAxis *dp = plan.mutable_mesh()->add_axes();
  dp->set_name("dp");
  dp->set_size(2);
  double rate = 19.5e12 * 0.75;
  for (uint32_t program : {0u, 0u, 1u, 1u})
    plan.add_program_of_rank(program);
  for (int stage = 0; stage < 2; ++stage) {
    plan::RankProgram *p = plan.add_ranks();
    for (int b = 0; b < 8; ++b) {
      plan::TensorType *t = p->add_buffers()->mutable_type();
      t->set_dtype(plan::F32);
      t->add_shape(1 << 18);
    }
    for (int mb = 0; mb < 3; ++mb) {
      plan::Instruction *transfer = nullptr;
      if (stage == 0) {
        addInstruction(*p, {0}, uint32_t(1 + mb), 1e-3 * rate);
        transfer = p->add_instructions();
        transfer->add_inputs(uint32_t(1 + mb));
        transfer->mutable_send()->mutable_along()->set_coordinate(1);
      } else {
        transfer = p->add_instructions();
        transfer->add_outputs(uint32_t(1 + mb));
        transfer->mutable_recv()->mutable_along()->set_coordinate(0);
        addInstruction(*p, {uint32_t(1 + mb)}, uint32_t(4 + mb), 2e-3 * rate);
      }
    }
    plan::Instruction *reduce = p->add_instructions();
    reduce->add_inputs(0);
    reduce->add_outputs(7);
    reduce->mutable_collective()->set_kind(plan::ALL_REDUCE);
    reduce->mutable_collective()->add_mesh_axes(1);
    reduce->mutable_cost()->set_bytes(1 << 20);
    reduce->mutable_cost()->set_op_class(plan::OP_COMMUNICATION);
  }
  Simulation once = simulate(plan, c, true), every = simulate(plan, c, true, /*everyRank=*/true);
  ASSERT_EQ(once.error, "");
  ASSERT_EQ(every.error, "");
  EXPECT_GT(every.stepSeconds, 6e-3); // stage 1's three micro-batches, after stage 0's first
  EXPECT_DOUBLE_EQ(once.stepSeconds, every.stepSeconds);
  EXPECT_DOUBLE_EQ(once.flops, every.flops);
  ASSERT_EQ(once.ranks.size(), 4u);
  ASSERT_EQ(every.ranks.size(), 4u);
  for (size_t r = 0; r < 4; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_DOUBLE_EQ(once.ranks[r].compute, every.ranks[r].compute);
    EXPECT_DOUBLE_EQ(once.ranks[r].communication, every.ranks[r].communication);
    EXPECT_DOUBLE_EQ(once.ranks[r].idle, every.ranks[r].idle);
    EXPECT_DOUBLE_EQ(once.ranks[r].end, every.ranks[r].end);
  }
  EXPECT_LT(every.ranks[2].idle, every.ranks[0].idle); // the stages differ
  std::set<int> onceRanks, everyRanks;
  for (const Event &e : once.events)
    onceRanks.insert(e.rank);
  for (const Event &e : every.events)
    everyRanks.insert(e.rank);
  EXPECT_EQ(onceRanks, (std::set<int>{0, 2}));
  EXPECT_EQ(everyRanks, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(2 * once.events.size(), every.events.size());

  // A send to a fixed rank breaks the symmetry (rank 1 would send to rank
  // 2, not to the rank like it): every rank is simulated, and the one that
  // is never received from is found.
  plan.mutable_ranks(0)->mutable_instructions(1)->mutable_send()->set_peer(2);
  Simulation fixed = simulate(plan, c, false);
  EXPECT_NE(fixed.error, "");
  EXPECT_EQ(fixed.error, simulate(plan, c, false, /*everyRank=*/true).error);
}

} // namespace

// A parameter-server plan's exchange: 4 workers (2 a node) and 2 servers
// (on a node of their own); server 0 holds a 1000-byte tensor, server 1
// rows 4..8 of a 16-row one (124 bytes a row: 496 bytes). Every worker-server pair crosses nodes: server 0 receives 4 x 1000
// bytes, one message after another, the slowest link.
TEST(ServerExchange, PushesTakeTheBusiestLink) {
  plan::Plan p;
  auto *axis = p.mutable_mesh()->add_axes();
  axis->set_name("dp");
  axis->set_size(4);
  auto addOutput = [&](std::vector<int64_t> shape) {
    plan::TensorType *type = p.add_outputs()->mutable_type();
    type->set_dtype(plan::F32);
    for (int64_t d : shape)
      type->add_shape(d);
  };
  addOutput({250});   // 0: tensor a's gradient (1000 bytes)
  addOutput({16, 31}); // 1: tensor b's gradient, 16 rows of 124 bytes
  addOutput({250});   // 2: a's new weight (server 0)
  addOutput({4, 31});  // 3: b's rows 4..8 (server 1)
  plan::ParameterServers *ps = p.mutable_training()->mutable_parameter_servers();
  ps->set_servers(2);
  plan::ServerTensor *a = ps->add_tensors();
  a->set_weight("a");
  a->set_server(0);
  a->set_gradient(0);
  a->set_weight_output(2);
  plan::ServerTensor *b = ps->add_tensors();
  b->set_weight("b");
  b->set_server(1);
  b->set_gradient(1);
  b->set_weight_output(3);
  b->set_first_row(4);
  b->set_rows(4);
  Cluster cluster;
  cluster.devicesPerNode = 2;
  cluster.nodes = 3;
  cluster.intraNode = Link{1e-6, 1e10};
  cluster.interNode = Link{1e-5, 1e9};
  ServerExchange x = serverExchange(p, cluster);
  EXPECT_EQ(x.workers, 4);
  EXPECT_EQ(x.servers, 2);
  EXPECT_DOUBLE_EQ(x.pushBytes, 1000 + 4 * 31 * 4);
  EXPECT_DOUBLE_EQ(x.pullBytes, 1000 + 4 * 31 * 4);
  // Server 0: four messages of 1000 bytes over the inter-node link.
  EXPECT_NEAR(x.pushSeconds, 4 * (1e-5 + 1000 / 1e9), 1e-12);
  EXPECT_EQ(x.bottleneck, "server 0's link");
  // A worker sends its two messages; an asynchronous worker waits for its
  // own push and pull only.
  EXPECT_NEAR(x.workerSeconds, 2 * (2 * 1e-5 + (1000 + 496) / 1e9), 1e-12);
  EXPECT_NEAR(x.serverSeconds, 2 * 4 * (1e-5 + 1000 / 1e9), 1e-12);
  // The ring all-reduce of the same 1496 bytes over the 4 workers (two nodes).
  EXPECT_NEAR(x.allReduceSeconds, allReduceSeconds(4, 1496, cluster.interNode), 1e-15);
}
