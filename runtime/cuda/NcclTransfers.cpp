//===- NcclTransfers.cpp ---------------------------------------------------===//
#include "runtime/cuda/NcclTransfers.h"

#include "runtime/comm/Communicator.h"
#include "runtime/comm/Watchdog.h"

#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

namespace dtc::runtime::cuda {
namespace {

/// The MPI tag a communicator's id travels on (below the parameter
/// servers' and MPI's reserved tags, above the pipeline's).
constexpr int kIdTag = 32100;

CUdeviceptr address(const void *p) { return CUdeviceptr(reinterpret_cast<uintptr_t>(p)); }

/// In each two-rank communicator the sender is rank 0, the receiver 1.
class NcclTransferKernel final : public cpu::Kernel {
public:
  NcclTransferKernel(NcclTransfers &transfers, const CudaContext &context, const NcclApi &nccl,
                     int rank, bool send, size_t bytes, std::vector<int64_t> peers, int tag,
                     const int64_t *microBatch)
      : transfers_(transfers), context_(context), nccl_(nccl), rank_(rank), send_(send),
        bytes_(bytes), peers_(std::move(peers)), tag_(tag), microBatch_(microBatch) {}
  ~NcclTransferKernel() override {
    if (copied_)
      context_.driver->cuEventDestroy(copied_);
  }

  bool run(const void *const *inputs, void *const *outputs, cpu::ThreadPool &,
           std::string &error) override {
    if (bytes_ == 0)
      return true; // both sides skip it
    int64_t turn =
        peers_.size() > 1 && microBatch_ ? *microBatch_ % int64_t(peers_.size()) : 0;
    int64_t peer = peers_[size_t(turn)];
    const NcclTransfers::Route *route =
        send_ ? transfers_.route(rank_, peer, tag_) : transfers_.route(peer, rank_, tag_);
    if (!route || !route->comm) {
      error = std::string("no NCCL communicator ") + (send_ ? "to" : "from") + " rank " +
              std::to_string(peer) + " on tag " + std::to_string(tag_);
      return false;
    }
    if (!send_)
      return check(nccl_,
                   nccl_.ncclRecv(outputs[0], bytes_, ncclUint8, 0, route->comm,
                                  context_.stream),
                   "ncclRecv", error);
    // Buffered: copied in the program's order, sent from the copy on the
    // route's own stream, which nothing here waits for.
    const DriverApi &api = *context_.driver;
    CUevent sent = nullptr;
    CUdeviceptr staged = transfers_.staging(bytes_, sent, error);
    if (!staged ||
        (!copied_ && !check(api, api.cuEventCreate(&copied_, CU_EVENT_DISABLE_TIMING),
                            "cuEventCreate", error)))
      return false;
    return check(api, api.cuMemcpyDtoDAsync(staged, address(inputs[0]), bytes_, context_.stream),
                 "staging a pipeline send", error) &&
           check(api, api.cuEventRecord(copied_, context_.stream), "cuEventRecord", error) &&
           check(api, api.cuStreamWaitEvent(route->stream, copied_, 0), "cuStreamWaitEvent",
                 error) &&
           check(nccl_,
                 nccl_.ncclSend(reinterpret_cast<const void *>(uintptr_t(staged)), bytes_,
                                ncclUint8, 1, route->comm, route->stream),
                 "ncclSend", error) &&
           check(api, api.cuEventRecord(sent, route->stream), "cuEventRecord", error);
  }

private:
  NcclTransfers &transfers_;
  const CudaContext &context_;
  const NcclApi &nccl_;
  int rank_;
  bool send_;
  size_t bytes_;
  std::vector<int64_t> peers_;
  int tag_;
  const int64_t *microBatch_;
  CUevent copied_ = nullptr;
};

} // namespace

NcclTransfers::~NcclTransfers() {
  const DriverApi &api = *context_.driver;
  // Sends still in flight finish when their receivers take them; a peer
  // that has stopped never does, so the wait is bounded, then abandoned.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (auto &[key, route] : routes_) {
    bool done = !route.stream;
    while (!done && std::chrono::steady_clock::now() < deadline) {
      done = api.cuStreamQuery(route.stream) != CUDA_ERROR_NOT_READY;
      if (!done)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (route.comm)
      done ? nccl_.ncclCommDestroy(route.comm) : nccl_.ncclCommAbort(route.comm);
    if (route.stream && done)
      api.cuStreamDestroy(route.stream);
  }
  for (const Staging &s : staging_) {
    api.cuEventDestroy(s.sent);
    api.cuMemFree(s.at);
  }
}

void NcclTransfers::abort() {
  for (auto &[key, route] : routes_)
    if (route.comm)
      nccl_.ncclCommAbort(std::exchange(route.comm, nullptr));
}

std::unique_ptr<cpu::Kernel> NcclTransfers::kernel(bool send, size_t bytes,
                                                   std::vector<int64_t> peers, int tag,
                                                   const int64_t *microBatch) {
  for (int64_t peer : peers)
    routes_.try_emplace(send ? keyOf(rank_, peer, tag) : keyOf(peer, rank_, tag));
  return std::make_unique<NcclTransferKernel>(*this, context_, nccl_, rank_, send, bytes,
                                              std::move(peers), tag, microBatch);
}

const NcclTransfers::Route *NcclTransfers::route(int64_t from, int64_t to, int tag) const {
  auto it = routes_.find(keyOf(from, to, tag));
  return it == routes_.end() ? nullptr : &it->second;
}

bool NcclTransfers::connect(Communicator &world, std::string &error) {
  const DriverApi &api = *context_.driver;
  // The byte each pair sends as it is made.
  CUdeviceptr probe = 0;
  if (!check(api, api.cuMemAlloc(&probe, 1), "cuMemAlloc (a byte to connect NCCL's pairs)",
             error))
    return false;
  struct Free {
    const DriverApi &api;
    CUdeviceptr at;
    ~Free() { api.cuMemFree(at); }
  } freed{api, probe};
  void *byte = reinterpret_cast<void *>(uintptr_t(probe));
  for (auto &[key, route] : routes_) {
    auto [low, high, from, tag] = key;
    int64_t to = from == low ? high : low;
    bool sender = from == rank_;
    // The sender's id, and whether it made one (a zero id otherwise: the
    // receiver stops too rather than wait alone).
    char message[sizeof(ncclUniqueId) + 1] = {};
    ncclUniqueId id{};
    std::string why;
    if (sender) {
      message[sizeof id] = check(nccl_, nccl_.ncclGetUniqueId(&id), "ncclGetUniqueId", why);
      std::memcpy(message, &id, sizeof id);
      if (!world.send(message, int64_t(sizeof message), int(to), kIdTag, error))
        return false;
    } else {
      if (!world.recv(message, int64_t(sizeof message), int(from), kIdTag, error))
        return false;
      std::memcpy(&id, message, sizeof id);
    }
    std::string pair = "NCCL between ranks " + std::to_string(from) + " and " +
                       std::to_string(to) + " (pipeline tag " + std::to_string(tag) + ")";
    if (!message[sizeof id]) {
      error = pair + ": " + (sender ? why : "the sending rank could not make its id");
      return false;
    }
    watchdog::Wait wait([&] { return "connecting " + pair; });
    if (!check(nccl_, nccl_.ncclCommInitRank(&route.comm, 2, id, sender ? 0 : 1),
               pair.c_str(), error) ||
        (sender && !check(api, api.cuStreamCreate(&route.stream, CU_STREAM_NON_BLOCKING),
                          "cuStreamCreate (a pipeline send's)", error)))
      return false;
    CUstream stream = sender ? route.stream : context_.stream;
    if (!check(nccl_,
               sender ? nccl_.ncclSend(byte, 1, ncclUint8, 1, route.comm, stream)
                      : nccl_.ncclRecv(byte, 1, ncclUint8, 0, route.comm, stream),
               pair.c_str(), error) ||
        !check(api, api.cuStreamSynchronize(stream), pair.c_str(), error))
      return false;
  }
  return world.completeSends(error);
}

CUdeviceptr NcclTransfers::staging(size_t bytes, CUevent &sent, std::string &error) {
  const DriverApi &api = *context_.driver;
  Staging *best = nullptr;
  for (Staging &s : staging_)
    if (s.bytes >= bytes && (!best || s.bytes < best->bytes) &&
        api.cuEventQuery(s.sent) == CUDA_SUCCESS) // its last send is done
      best = &s;
  if (!best) {
    Staging s;
    s.bytes = bytes;
    if (!check(api, api.cuMemAlloc(&s.at, bytes),
               ("a staging buffer of " + std::to_string(bytes) + " bytes for a pipeline send")
                   .c_str(),
               error))
      return 0;
    if (!check(api, api.cuEventCreate(&s.sent, CU_EVENT_DISABLE_TIMING), "cuEventCreate",
               error)) {
      api.cuMemFree(s.at);
      return 0;
    }
    staging_.push_back(s);
    best = &staging_.back();
  }
  sent = best->sent;
  return best->at;
}

} // namespace dtc::runtime::cuda
