//===- Cluster.cpp - cluster files and presets -----------------------------===//
#include "cost/Cluster.h"

#include "plan/DType.h"
#include "plan/FormatBytes.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cmath>
#include <cstdio>

namespace dtc::cost {

namespace {

/// A number as messages show it: "1.5", "-1", "2e+12".
std::string number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", v);
  return buffer;
}

const char *const kClassNames[kOpClassSlots] = {"none",   "matmul", "conv",          "elementwise",
                                                "reduce", "norm",   "data_movement", "communication"};

/// Reads fields of a JSON object, remembering the first problem with its
/// path ("device.peak_flops.f32").
class Reader {
public:
  explicit Reader(std::string &error) : error_(error) {}

  const llvm::json::Object *object(const llvm::json::Object &parent, const std::string &path,
                                   llvm::StringRef key) {
    const llvm::json::Value *v = parent.get(key);
    std::string where = join(path, key);
    if (!v)
      return fail(where + " is missing"), nullptr;
    if (!v->getAsObject())
      return fail(where + " must be an object"), nullptr;
    return v->getAsObject();
  }

  /// Calls `each(object, itsPath)` on each object of the list at `key`, in
  /// order, if there is one; stops at the first failure. `shape` says what
  /// the list holds, for the message when it is not a list of objects.
  template <typename Each>
  void forEachObject(const llvm::json::Object &parent, const std::string &path,
                     llvm::StringRef key, const std::string &shape, Each each) {
    const llvm::json::Value *v = parent.get(key);
    if (!v)
      return;
    std::string where = join(path, key);
    const llvm::json::Array *list = v->getAsArray();
    if (!list)
      return void(fail(where + " must be a list of " + shape));
    for (size_t i = 0; i < list->size() && ok(); ++i) {
      std::string item = where + "[" + std::to_string(i) + "]";
      const llvm::json::Object *o = (*list)[i].getAsObject();
      if (!o)
        return void(fail(item + " must be an object"));
      each(*o, item);
    }
  }

  /// A number > 0 (or >= 0 with `zeroOk`), at most `max` when given.
  double positive(const llvm::json::Object &parent, const std::string &path, llvm::StringRef key,
                  bool zeroOk = false, double max = 0) {
    const llvm::json::Value *v = parent.get(key);
    std::string where = join(path, key);
    if (!v)
      return fail(where + " is missing"), 0;
    std::optional<double> d = v->getAsNumber();
    if (!d)
      return fail(where + " must be a number"), 0;
    if (!std::isfinite(*d) || (zeroOk ? *d < 0 : *d <= 0))
      return fail(where + " must be " + (zeroOk ? "zero or more" : "positive") + ", got " +
                  number(*d)),
             0;
    if (max > 0 && *d > max)
      return fail(where + " must be at most " + number(max) + ", got " +
                  number(*d)),
             0;
    return *d;
  }

  int64_t count(const llvm::json::Object &parent, const std::string &path, llvm::StringRef key) {
    double d = positive(parent, path, key);
    if (ok() && (d != std::floor(d) || d > double(1 << 24)))
      fail(join(path, key) + " must be a whole number up to 2^24, got " +
           number(d));
    return int64_t(d);
  }

  std::string text(const llvm::json::Object &parent, const std::string &path, llvm::StringRef key) {
    const llvm::json::Value *v = parent.get(key);
    if (!v || !v->getAsString())
      return fail(join(path, key) + " must be a string"), "";
    return v->getAsString()->str();
  }

  void fail(const std::string &message) {
    if (error_.empty())
      error_ = message;
  }
  bool ok() const { return error_.empty(); }

  static std::string join(const std::string &path, llvm::StringRef key) {
    return path.empty() ? key.str() : path + "." + key.str();
  }

private:
  std::string &error_;
};

Link readLink(Reader &r, const llvm::json::Object &links, llvm::StringRef key) {
  Link link;
  if (const llvm::json::Object *o = r.object(links, "links", key)) {
    std::string path = "links." + key.str();
    link.latency = r.positive(*o, path, "latency");
    link.bandwidth = r.positive(*o, path, "bandwidth");
    for (auto [field, ways] : {std::pair{"protocols", &link.protocols},
                               std::pair{"transfers", &link.transfers}})
      r.forEachObject(*o, path, field, "{\"latency\", \"bandwidth\"} objects",
                      [&, ways = ways](const llvm::json::Object &p, const std::string &item) {
                        ways->push_back({r.positive(p, item, "latency"),
                                         r.positive(p, item, "bandwidth")});
                      });
  }
  return link;
}

// Figures and their sources are in docs/cluster.md; the JSON repeats the
// source of each device and link so that a copied preset keeps it.
const char *const kCpuLocal = R"json({
  "name": "cpu-local",
  "source": "this machine's cores, one device each (2-core Sapphire Rapids VM); rates measured by bench/ (dtc-gemm-bench: ~130 GFLOP/s sgemm per core) -- run dtc calibrate for yours",
  "device": {
    "kind": "CPU core (AVX-512)",
    "peak_flops": {"f32": 1.6e11, "f64": 8.0e10, "bf16": 1.6e11},
    "memory_bandwidth": 1.2e10,
    "memory_efficiency": 0.7,
    "memory_capacity": 1.2e10,
    "launch_overhead": 2e-6,
    "efficiency": {"matmul": 0.8, "conv": 0.6, "elementwise": 0.5, "reduce": 0.4, "norm": 0.4, "data_movement": 0.6},
    "communication_stream": false,
    "packs_strided_parts": true,
    "jitter": 0.02
  },
  "topology": {"devices_per_node": 2, "nodes": 1},
  "links": {
    "intra_node": {"latency": 2e-6, "bandwidth": 1e9, "protocols": [{"latency": 6e-6, "bandwidth": 6e9}], "transfers": [{"latency": 1e-6, "bandwidth": 2.3e9}, {"latency": 3e-6, "bandwidth": 11e9}]},
    "inter_node": {"latency": 2e-5, "bandwidth": 1.25e9}
  }
})json";

const char *const kA100 = R"json({
  "name": "a100-80g",
  "source": "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB): FP32 19.5, TF32 156, BF16/FP16 312 TFLOP/s dense, HBM2e 2039 GB/s, 80 GB (81051 MiB as the driver reports it, deviceQuery); NVLink 3 600 GB/s per GPU (300 GB/s each way); DGX A100 / Selene nodes: 8 GPUs, eight HDR 200 Gb/s InfiniBand ports (25 GB/s per GPU each way). Links at what NCCL moves over them, per its maintainers: ~230 GB/s all-reduce bus bandwidth over A100 NVLink (12 links x 25 GB/s line rate, ~20 GB/s each with 128-byte payloads; NVIDIA/nccl-tests#149) and 24 GB/s per 200 Gb/s NIC (NVIDIA/nccl-tests#119). Reserved: what dtc run --backend cuda keeps beside the plan's buffers (a CUDA context of about 0.5 GiB, 32 MiB of library workspace, 256 MiB for modules and staging, 512 MiB per NCCL communicator, three of them)",
  "device": {
    "kind": "NVIDIA A100-SXM4-80GB",
    "peak_flops": {"f32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "f16": 312e12, "f64": 19.5e12},
    "memory_bandwidth": 2.039e12,
    "memory_efficiency": 0.8,
    "memory_capacity": 84987740160,
    "memory_reserved": 2684354560,
    "launch_overhead": 5e-6,
    "efficiency": {"matmul": 0.75, "conv": 0.6, "elementwise": 0.8, "reduce": 0.7, "norm": 0.7, "data_movement": 0.8}
  },
  "topology": {"devices_per_node": 8, "nodes": 128},
  "links": {
    "intra_node": {"latency": 3e-6, "bandwidth": 230e9},
    "inter_node": {"latency": 6e-6, "bandwidth": 24e9}
  }
})json";

const char *const kH100 = R"json({
  "name": "h100-sxm",
  "source": "NVIDIA H100 Tensor Core GPU datasheet (SXM5 80GB): FP32 67, TF32 494.7, BF16/FP16 989.4 TFLOP/s dense, HBM3 3.35 TB/s, 80 GB (81559 MiB as the driver reports it, deviceQuery); NVLink 4 900 GB/s per GPU (450 GB/s each way); DGX H100 nodes: 8 GPUs, one ConnectX-7 NDR 400 Gb/s port per GPU (50 GB/s each way). Links at what NCCL moves over them, per its maintainers: ~370 GB/s over H100 NVLink after ~20% protocol overhead (ring; NVIDIA/nccl-tests#212) and 24 GB/s per 200 Gb/s of NIC, 48 GB/s for NDR (NVIDIA/nccl-tests#119). Reserved: what dtc run --backend cuda keeps beside the plan's buffers (a CUDA context of about 0.5 GiB, 32 MiB of library workspace, 256 MiB for modules and staging, 512 MiB per NCCL communicator, three of them)",
  "device": {
    "kind": "NVIDIA H100-SXM5-80GB",
    "peak_flops": {"f32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12, "f16": 989.4e12, "f64": 67e12},
    "memory_bandwidth": 3.35e12,
    "memory_efficiency": 0.8,
    "memory_capacity": 85520809984,
    "memory_reserved": 2684354560,
    "launch_overhead": 4e-6,
    "efficiency": {"matmul": 0.7, "conv": 0.55, "elementwise": 0.8, "reduce": 0.7, "norm": 0.7, "data_movement": 0.8}
  },
  "topology": {"devices_per_node": 8, "nodes": 128},
  "links": {
    "intra_node": {"latency": 3e-6, "bandwidth": 370e9},
    "inter_node": {"latency": 6e-6, "bandwidth": 48e9}
  }
})json";

struct Preset {
  const char *name, *json;
};
const Preset kPresets[] = {{"cpu-local", kCpuLocal}, {"a100-80g", kA100}, {"h100-sxm", kH100}};

} // namespace

const char *opClassName(plan::OpClass c) { return kClassNames[int(c)]; }

double Device::peak(plan::DType dtype) const {
  auto it = peakFlops.find(plan::dtypeName(dtype));
  return it != peakFlops.end() ? it->second : peakFlops.at("f32");
}

std::optional<Cluster> parseCluster(const std::string &json, std::string &error) {
  error.clear();
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(json);
  if (!parsed) {
    error = "not valid JSON: " + llvm::toString(parsed.takeError());
    return std::nullopt;
  }
  const llvm::json::Object *root = parsed->getAsObject();
  if (!root) {
    error = "the cluster must be a JSON object";
    return std::nullopt;
  }
  Reader r(error);
  Cluster c;
  c.name = root->get("name") ? r.text(*root, "", "name") : "cluster";
  if (const llvm::json::Object *d = r.object(*root, "", "device")) {
    c.device.kind = r.text(*d, "device", "kind");
    if (const llvm::json::Object *peaks = r.object(*d, "device", "peak_flops")) {
      for (const auto &[key, value] : *peaks)
        c.device.peakFlops[key.str()] = r.positive(*peaks, "device.peak_flops", key);
      if (r.ok() && !c.device.peakFlops.count("f32"))
        r.fail("device.peak_flops.f32 is missing (the peak other dtypes fall back to)");
    }
    c.device.memoryBandwidth = r.positive(*d, "device", "memory_bandwidth");
    c.device.memoryEfficiency = r.positive(*d, "device", "memory_efficiency", false, 1.0);
    c.device.memoryCapacity = r.positive(*d, "device", "memory_capacity");
    c.device.launchOverhead = r.positive(*d, "device", "launch_overhead", true);
    if (d->get("memory_reserved")) {
      c.device.memoryReserved = r.positive(*d, "device", "memory_reserved", true);
      if (r.ok() && c.device.memoryReserved >= c.device.memoryCapacity)
        r.fail("device.memory_reserved must be below memory_capacity (" +
               plan::formatBytes(int64_t(c.device.memoryCapacity)) + "), got " +
               plan::formatBytes(int64_t(c.device.memoryReserved)));
    }
    if (d->get("overlap"))
      c.device.overlap = r.positive(*d, "device", "overlap", true, 1.0);
    if (d->get("jitter"))
      c.device.jitter = r.positive(*d, "device", "jitter", true, 1.0);
    for (auto [field, flag] : {std::pair{"communication_stream", &c.device.communicationStream},
                               std::pair{"packs_strided_parts", &c.device.packsStridedParts}})
      if (const llvm::json::Value *v = d->get(field)) {
        if (std::optional<bool> b = v->getAsBoolean())
          *flag = *b;
        else
          r.fail(std::string("device.") + field + " must be true or false");
      }
    if (const llvm::json::Object *eff = r.object(*d, "device", "efficiency"))
      for (int k = kFirstOpClass; k < kComputeClassEnd; ++k)
        c.device.efficiency[k] = r.positive(*eff, "device.efficiency", kClassNames[k], false, 1.0);
    if (const llvm::json::Object *mem = d->getObject("class_memory_efficiency"))
      for (int k = kFirstOpClass; k < kComputeClassEnd; ++k)
        if (mem->get(kClassNames[k]))
          c.device.classMemoryEfficiency[k] =
              r.positive(*mem, "device.class_memory_efficiency", kClassNames[k], false, 1.0);
    if (const llvm::json::Object *startup = d->getObject("startup"))
      for (int k = kFirstOpClass; k < kComputeClassEnd; ++k)
        if (startup->get(kClassNames[k]))
          c.device.classStartup[k] = r.positive(*startup, "device.startup", kClassNames[k], true);
    // Optional: without it, no cache levels.
    if (d->get("cache"))
      r.fail("device.cache is now device.caches, a list of levels smallest first: "
             "[{\"bytes\": ..., \"bandwidth\": ...}]");
    r.forEachObject(*d, "device", "caches", "{\"bytes\", \"bandwidth\"} levels",
                    [&](const llvm::json::Object &level, const std::string &path) {
                      Device::CacheLevel l{r.positive(level, path, "bytes"),
                                           r.positive(level, path, "bandwidth")};
                      if (r.ok() && !c.device.caches.empty() &&
                          l.bytes <= c.device.caches.back().bytes)
                        r.fail(path + ".bytes must be more than the level before's (" +
                               number(c.device.caches.back().bytes) + "): smallest first");
                      c.device.caches.push_back(l);
                    });
  }
  if (const llvm::json::Object *t = r.object(*root, "", "topology")) {
    c.devicesPerNode = r.count(*t, "topology", "devices_per_node");
    c.nodes = r.count(*t, "topology", "nodes");
  }
  if (const llvm::json::Object *links = r.object(*root, "", "links")) {
    c.intraNode = readLink(r, *links, "intra_node");
    c.interNode = readLink(r, *links, "inter_node");
  }
  if (!r.ok())
    return std::nullopt;
  return c;
}

std::optional<Cluster> loadCluster(const std::string &path, std::string &error) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer) {
    error = path + ": cannot read the cluster file: " + buffer.getError().message();
    return std::nullopt;
  }
  std::optional<Cluster> c = parseCluster((*buffer)->getBuffer().str(), error);
  if (!c)
    error = path + ": " + error;
  return c;
}

std::vector<std::string> presetNames() {
  std::vector<std::string> names;
  for (const Preset &p : kPresets)
    names.push_back(p.name);
  return names;
}

std::optional<std::string> presetJson(const std::string &name) {
  for (const Preset &p : kPresets)
    if (name == p.name)
      return std::string(p.json);
  return std::nullopt;
}

std::optional<Cluster> preset(const std::string &name, std::string &error) {
  std::optional<std::string> json = presetJson(name);
  if (!json) {
    error = "unknown preset '" + name + "' (presets: cpu-local, a100-80g, h100-sxm)";
    return std::nullopt;
  }
  return parseCluster(*json, error);
}

std::string toJson(const Cluster &c) {
  llvm::json::Object peaks, eff;
  for (const auto &[k, v] : c.device.peakFlops)
    peaks[k] = v;
  llvm::json::Object classMemory, startup;
  for (int k = kFirstOpClass; k < kComputeClassEnd; ++k) {
    eff[kClassNames[k]] = c.device.efficiency[k];
    if (c.device.classMemoryEfficiency[k] > 0)
      classMemory[kClassNames[k]] = c.device.classMemoryEfficiency[k];
    if (c.device.classStartup[k] > 0)
      startup[kClassNames[k]] = c.device.classStartup[k];
  }
  auto link = [](const Link &l) {
    llvm::json::Object o{{"latency", l.latency}, {"bandwidth", l.bandwidth}};
    auto list = [&](const char *key, const std::vector<Protocol> &ways) {
      llvm::json::Array items;
      for (const Protocol &p : ways)
        items.push_back(llvm::json::Object{{"latency", p.latency}, {"bandwidth", p.bandwidth}});
      if (!items.empty())
        o[key] = std::move(items);
    };
    list("protocols", l.protocols);
    list("transfers", l.transfers);
    return o;
  };
  llvm::json::Object device{{"kind", c.device.kind},
                            {"peak_flops", std::move(peaks)},
                            {"memory_bandwidth", c.device.memoryBandwidth},
                            {"memory_efficiency", c.device.memoryEfficiency},
                            {"memory_capacity", c.device.memoryCapacity},
                            {"launch_overhead", c.device.launchOverhead},
                            {"efficiency", std::move(eff)},
                            {"class_memory_efficiency", std::move(classMemory)}};
  if (!startup.empty())
    device["startup"] = std::move(startup);
  if (c.device.memoryReserved > 0)
    device["memory_reserved"] = c.device.memoryReserved;
  if (c.device.overlap != 1)
    device["overlap"] = c.device.overlap;
  if (!c.device.communicationStream)
    device["communication_stream"] = false;
  if (c.device.packsStridedParts)
    device["packs_strided_parts"] = true;
  if (c.device.jitter > 0)
    device["jitter"] = c.device.jitter;
  if (!c.device.caches.empty()) {
    llvm::json::Array levels;
    for (const Device::CacheLevel &l : c.device.caches)
      levels.push_back(llvm::json::Object{{"bytes", l.bytes}, {"bandwidth", l.bandwidth}});
    device["caches"] = std::move(levels);
  }
  llvm::json::Value root = llvm::json::Object{
      {"name", c.name},
      {"device", std::move(device)},
      {"topology", llvm::json::Object{{"devices_per_node", c.devicesPerNode},
                                      {"nodes", c.nodes}}},
      {"links", llvm::json::Object{{"intra_node", link(c.intraNode)},
                                   {"inter_node", link(c.interNode)}}}};
  return llvm::formatv("{0:2}", root).str();
}

} // namespace dtc::cost
