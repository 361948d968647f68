//===- CudaDevice.cpp - a rank's NVIDIA GPU -------------------------------===//
#include "runtime/cuda/CudaDevice.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaKernels.h"
#include "runtime/cuda/NcclTransfers.h"
#include "runtime/comm/MeshGroups.h"
#include "runtime/comm/Watchdog.h"
#include "runtime/StreamOrder.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>

#include "plan/DType.h"
#include "plan/FormatBytes.h"
#include "plan/PlanPrinter.h"

#include <cstdlib>
#include <map>
#include <thread>
#include <utility>
#include <vector>

namespace dtc::runtime::cuda {
namespace {

/// cuBLASLt's workspace: what its fastest algorithms for large GEMMs ask.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

/// GPU memory left free beside the arena: the kernels' modules, cuDNN's
/// and cuBLASLt's own, and per NCCL communicator its channels' buffers
/// (a few MiB per channel and peer, tens of channels on NVLink).
constexpr size_t kHeadroomBytes = size_t(256) << 20;
constexpr size_t kNcclBytes = size_t(512) << 20;

/// A wait for a stream checks it (and NCCL's communicators) as fast as it
/// can for kSpin, then every kPollInterval.
constexpr auto kSpin = std::chrono::milliseconds(2);
constexpr auto kPollInterval = std::chrono::microseconds(100);

/// "0, 1": mesh axes for a message.
std::string axesText(const std::vector<int> &axes) {
  std::string text;
  for (int a : axes)
    text += (text.empty() ? "" : ", ") + std::to_string(a);
  return text;
}

/// The kind of an instruction, for the host-staged summary.
std::string kindOf(const plan::Instruction &inst) {
  std::string text = plan::describeInstruction(inst);
  return text.substr(0, text.find_first_of(" ("));
}

class CudaDevice final : public Device {
public:
  ~CudaDevice() override {
    const DriverApi &api = *context_.driver;
    transfers_.reset(); // its sends finish first
    modules_.clear();
    for (CUmodule module : loaded_)
      api.cuModuleUnload(module);
    for (const auto &[axes, comm] : comms_)
      if (comm) // else aborted (release)
        nccl_->ncclCommDestroy(comm);
    if (context_.cublasLtHandle)
      context_.cublasLt->cublasLtDestroy(context_.cublasLtHandle);
    if (context_.cudnnHandle)
      context_.cudnn->cudnnDestroy(context_.cudnnHandle);
    for (CUdeviceptr p : allocations_)
      api.cuMemFree(p);
    for (std::vector<CUevent> &events : events_)
      for (CUevent event : events)
        api.cuEventDestroy(event);
    if (computeEvent_)
      api.cuEventDestroy(computeEvent_);
    for (CudaContext &context : contexts_)
      if (context.stream)
        api.cuStreamDestroy(context.stream);
    if (primary_)
      api.cuDevicePrimaryCtxRelease(device_);
  }

  bool open(int ordinal, std::string &error) {
    std::string why;
    const DriverApi *api = driverApi(why);
    if (!api) {
      error = "no usable NVIDIA GPU: " + why;
      return false;
    }
    context_.driver = api;
    int count = 0;
    if (!check(*api, api->cuInit(0), "cuInit", error) ||
        !check(*api, api->cuDeviceGetCount(&count), "cuDeviceGetCount", error))
      return false;
    if (ordinal < 0 || ordinal >= count) {
      error = "GPU " + std::to_string(ordinal) + " is not there (the driver sees " +
              std::to_string(count) + ")";
      return false;
    }
    char name[256] = {};
    CUcontext context = nullptr;
    if (!check(*api, api->cuDeviceGet(&device_, ordinal), "cuDeviceGet", error) ||
        !check(*api, api->cuDeviceGetName(name, sizeof name - 1, device_), "cuDeviceGetName",
               error) ||
        !check(*api,
               api->cuDeviceGetAttribute(&major_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                         device_),
               "compute capability", error) ||
        !check(*api,
               api->cuDeviceGetAttribute(&minor_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                         device_),
               "compute capability", error) ||
        !check(*api, api->cuDevicePrimaryCtxRetain(&context, device_), "cuDevicePrimaryCtxRetain",
               error))
      return false;
    primary_ = true;
    ordinal_ = ordinal;
    // Where the GPU sits (PCI domain, bus, device): what tells two ranks'
    // GPUs apart on a host, whatever ordinal CUDA_VISIBLE_DEVICES gives
    // each (NCCL's test too).
    int pci[3] = {};
    for (auto [at, attribute] : {std::pair{0, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID},
                                 std::pair{1, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID},
                                 std::pair{2, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID}})
      if (!check(*api, api->cuDeviceGetAttribute(&pci[at], attribute, device_),
                 "the GPU's PCI location", error))
        return false;
    pciLocation_ = (int64_t(pci[0]) << 32) | (int64_t(pci[1]) << 8) | int64_t(pci[2]);
    int driver = 0;
    api->cuDriverGetVersion(&driver); // in the name only: a too-old driver shows there
    name_ = std::string(name) + " (sm_" + std::to_string(major_ * 10 + minor_) + ", GPU " +
            std::to_string(ordinal) + ", driver for CUDA " + std::to_string(driver / 1000) +
            "." + std::to_string(driver % 1000 / 10) + ")";
    if (!check(*api, api->cuCtxSetCurrent(context), "cuCtxSetCurrent", error) ||
        !check(*api, api->cuStreamCreate(&context_.stream, CU_STREAM_NON_BLOCKING),
               "cuStreamCreate", error) ||
        !check(*api, api->cuEventCreate(&computeEvent_, CU_EVENT_DISABLE_TIMING),
               "cuEventCreate", error))
      return false;
    // cuBLASLt is optional: without it matrix products run on the host.
    if ((context_.cublasLt = cublasLtApi(cublasLtWhy_)) &&
        !check(*context_.cublasLt, context_.cublasLt->cublasLtCreate(&context_.cublasLtHandle),
               "cublasLtCreate", cublasLtWhy_))
      context_.cublasLt = nullptr;
    context_.sm = major_ * 10 + minor_;
    if (const char *kernels = std::getenv("DTC_ATTENTION_KERNELS"); kernels && *kernels) {
      using Allowed = CudaContext::AttentionKernels;
      std::string k = kernels;
      if (k == "auto" || k == "cudnn" || k == "flash")
        context_.attentionKernels =
            k == "auto" ? Allowed::Auto : k == "cudnn" ? Allowed::Cudnn : Allowed::Flash;
      else {
        error = "DTC_ATTENTION_KERNELS is '" + k + "'; it must be auto, cudnn or flash";
        return false;
      }
    }
    // So is cuDNN: without it convolutions run on the host.
    if ((context_.cudnn = cudnnApi(cudnnWhy_)) &&
        !check(*context_.cudnn, context_.cudnn->cudnnCreate(&context_.cudnnHandle), "cudnnCreate",
               cudnnWhy_))
      context_.cudnn = nullptr;
    return true;
  }

  std::string name() const override { return name_; }

  bool load(const plan::Plan &plan, std::string &) override {
    for (const plan::GpuModule &module : plan.gpu_modules())
      code_[module.entry()] = &module;
    return true;
  }

  char *allocate(size_t bytes, std::string &error) override {
    const DriverApi &api = *context_.driver;
    size_t free = 0, total = 0;
    if (!check(api, api.cuMemGetInfo(&free, &total), "cuMemGetInfo", error))
      return nullptr;
    // The libraries' workspace (cuBLASLt's, cuDNN's attention and
    // convolutions', the flash backward's) and what is allocated after the
    // arena: NCCL's buffers (connected at the first collective), staging
    // for pipeline sends, kernels' modules.
    size_t workspace = context_.cublasLt || context_.cudnn ? kWorkspaceBytes : 0;
    size_t headroom = kHeadroomBytes + comms_.size() * kNcclBytes;
    if (bytes + workspace + headroom > free) {
      error = "the rank needs " + plan::formatBytes(int64_t(bytes + workspace + headroom)) +
              " of GPU memory (its arena " + plan::formatBytes(int64_t(bytes)) +
              ": weights, optimizer state, activations; the libraries' workspace " +
              plan::formatBytes(int64_t(workspace)) + "; kept free for NCCL and the kernels' "
              "modules " + plan::formatBytes(int64_t(headroom)) + "), but " + name_ + " has " +
              plan::formatBytes(int64_t(free)) + " free of " + plan::formatBytes(int64_t(total)) +
              ": compile the plan for this GPU (--memory-limit, or more devices)";
      return nullptr;
    }
    CUdeviceptr arena = 0;
    if (!check(api, api.cuMemAlloc(&arena, bytes), "cuMemAlloc (the arena)", error))
      return nullptr;
    allocations_.push_back(arena);
    if (workspace && !context_.workspace) {
      if (!check(api, api.cuMemAlloc(&context_.workspace, workspace),
                 "cuMemAlloc (cuBLASLt's workspace)", error))
        return nullptr;
      allocations_.push_back(context_.workspace);
      context_.workspaceBytes = workspace;
    }
    return reinterpret_cast<char *>(uintptr_t(arena));
  }

  bool upload(char *to, const void *from, size_t bytes, std::string &error) override {
    const DriverApi &api = *context_.driver;
    return order(kCompute, {}, {range(to, bytes)}, error) &&
           check(api, api.cuMemcpyHtoDAsync(address(to), from, bytes, context_.stream),
                 "copying to the GPU", error) &&
           queued(kCompute, {}, {range(to, bytes)}, error) && synchronize(error);
  }

  bool download(void *to, const char *from, size_t bytes, std::string &error) override {
    const DriverApi &api = *context_.driver;
    return order(kCompute, {range(from, bytes)}, {}, error) &&
           check(api, api.cuMemcpyDtoHAsync(to, address(from), bytes, context_.stream),
                 "copying from the GPU", error) &&
           queued(kCompute, {range(from, bytes)}, {}, error) && synchronize(error);
  }

  bool copy(char *to, const char *from, size_t bytes, std::string &error) override {
    const DriverApi &api = *context_.driver;
    // Overlapping regions (a value moved within its own bytes) go through
    // the host: the driver's copies assume disjoint ones.
    if (to < from + bytes && from < to + bytes) {
      std::vector<char> staged(bytes);
      return download(staged.data(), from, bytes, error) &&
             upload(to, staged.data(), bytes, error);
    }
    std::vector<ByteRange> reads{range(from, bytes)}, writes{range(to, bytes)};
    return order(kCompute, reads, writes, error) &&
           check(api, api.cuMemcpyDtoDAsync(address(to), address(from), bytes, context_.stream),
                 "copying within the GPU", error) &&
           queued(kCompute, std::move(reads), std::move(writes), error);
  }

  bool zero(char *at, size_t bytes, std::string &error) override {
    const DriverApi &api = *context_.driver;
    return order(kCompute, {}, {range(at, bytes)}, error) &&
           check(api, api.cuMemsetD8Async(address(at), 0, bytes, context_.stream),
                 "zeroing GPU memory", error) &&
           queued(kCompute, {}, {range(at, bytes)}, error);
  }

  bool synchronize(std::string &error) override {
    const DriverApi &api = *context_.driver;
    for (int s = plan::kStreams; s-- > 0;)
      if (contexts_[size_t(s)].stream &&
          !idle(contexts_[size_t(s)].stream,
                s ? "running the GPU's communication" : "running the GPU's kernels", error)) {
        failed_ = true;
        return false;
      }
    order_.clear(); // every stream idle: nothing left to order
    computeRecorded_ = 0;
    if (!context_.status)
      return true;
    // A kernel found its data out of range: said once, then cleared.
    int32_t status = 0;
    if (!check(api, api.cuMemcpyDtoHAsync(&status, context_.status, sizeof status, context_.stream),
               "reading the kernels' status", error) ||
        !check(api, api.cuStreamSynchronize(context_.stream), "reading the kernels' status",
               error))
      return false;
    if (status == 0)
      return true;
    api.cuMemsetD8Async(context_.status, 0, sizeof status, context_.stream);
    error = "an index of a gather or scatter-add is out of range for its axis (dtc run "
            "--backend cpu names the index and the instruction)";
    return false;
  }

  /// Waits for `stream`'s work: a wait the watchdog sees (a peer that
  /// stopped leaves NCCL's kernels waiting, and --timeout ends the rank),
  /// that stops at the first error NCCL's communicators report (a peer
  /// gone, a network error) rather than wait on a collective that cannot
  /// end.
  bool idle(CUstream stream, const char *what, std::string &error) {
    const DriverApi &api = *context_.driver;
    if (!nccl_ && !runtime::watchdog::running()) // one rank: nothing to watch
      return check(api, api.cuStreamSynchronize(stream), what, error);
    CUresult result = api.cuStreamQuery(stream);
    if (result != CUDA_ERROR_NOT_READY)
      return check(api, result, what, error);
    runtime::watchdog::Wait wait([what] { return std::string(what); });
    // Spun at first (a step's end is near when it is waited for), then
    // polled.
    auto spinUntil = std::chrono::steady_clock::now() + kSpin;
    for (;;) {
      if (std::chrono::steady_clock::now() < spinUntil)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(kPollInterval);
      result = api.cuStreamQuery(stream);
      if (result != CUDA_ERROR_NOT_READY)
        return check(api, result, what, error);
      if (!ncclHealthy(error))
        return false;
    }
  }

  /// False with `error` when one of the rank's NCCL communicators has
  /// failed.
  bool ncclHealthy(std::string &error) {
    if (!nccl_)
      return true;
    for (const auto &[axes, comm] : comms_) {
      ncclResult_t state = ncclSuccess;
      if (!comm || nccl_->ncclCommGetAsyncError(comm, &state) != ncclSuccess ||
          state == ncclSuccess || state == ncclInProgress)
        continue;
      const char *last = nccl_->ncclGetLastError(comm);
      error = std::string("NCCL over mesh axes {") + axesText(axes) + "} failed: " +
              nccl_->ncclGetErrorString(state) + (last && *last ? std::string(": ") + last : "");
      return false;
    }
    return true;
  }

  /// Before the kernels go: a rank whose step failed, or whose streams
  /// still run, aborts its NCCL communicators (ending their kernels: a
  /// peer may never come), so that freeing memory and destroying the
  /// communicators do not wait on them; then the GPU's work finishes.
  void release() override {
    const DriverApi &api = *context_.driver;
    bool busy = failed_;
    for (const CudaContext &context : contexts_)
      busy = busy || (context.stream && api.cuStreamQuery(context.stream) != CUDA_SUCCESS);
    if (busy && nccl_) {
      for (auto &[axes, comm] : comms_)
        if (comm)
          nccl_->ncclCommAbort(std::exchange(comm, nullptr));
      if (transfers_)
        transfers_->abort();
    }
    api.cuCtxSynchronize();
  }

  bool connect(MeshGroups &mesh, const std::vector<std::vector<int>> &groups,
               std::string &error) override {
    Communicator &world = mesh.world();
    if (world.size() <= 1)
      return true;
    world_ = &world;
    // NCCL refuses two ranks on one GPU: each rank says which it has (its
    // host's name and the GPU's PCI location); ranks that share one keep to
    // MPI. So do all when any rank cannot load NCCL: every rank then runs
    // the same collectives the same way.
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    int64_t mine[2] = {int64_t(std::hash<std::string>()(host) & 0x7fffffffffffffff),
                       pciLocation_};
    std::vector<int64_t> all(size_t(2 * world.size()));
    if (!world.allGather(mine, all.data(), 2, plan::I64, error))
      return false;
    for (size_t a = 0; a < all.size(); a += 2)
      for (size_t b = a + 2; b < all.size(); b += 2)
        if (all[a] == all[b] && all[a + 1] == all[b + 1])
          ncclWhy_ = "ranks share a GPU";
    const NcclApi *nccl = ncclWhy_.empty() ? ncclApi(ncclWhy_) : nullptr;
    int64_t everywhere = nccl != nullptr;
    if (!world.allReduce(&everywhere, 1, plan::I64, Reduction::Min, error))
      return false;
    if (!everywhere) {
      if (ncclWhy_.empty())
        ncclWhy_ = "another rank cannot load it";
      return true;
    }
    nccl_ = nccl;
    const CudaContext *transfers = contextOf(plan::Stream::Transfers, error);
    if (!transfers)
      return false;
    transfers_ = std::make_unique<NcclTransfers>(*transfers, *nccl_, world.rank());
    for (const std::vector<int> &axes : groups) {
      Communicator *group = mesh.group(axes, error);
      if (!group)
        return false;
      // Group rank 0's id to the others, then every rank joins. A failure
      // to make the id reaches every rank (a zero id), so none waits alone.
      ncclUniqueId id{};
      std::string why;
      int64_t ok = group->rank() != 0 || check(*nccl_, nccl_->ncclGetUniqueId(&id),
                                               "ncclGetUniqueId", why);
      if (!group->broadcast(&id, int64_t(sizeof id), plan::U8, 0, error) ||
          !group->allReduce(&ok, 1, plan::I64, Reduction::Min, error))
        return false;
      ncclComm_t comm = nullptr;
      runtime::watchdog::Wait wait([&] { return "joining NCCL over " + group->name(); });
      if (!ok || !check(*nccl_, nccl_->ncclCommInitRank(&comm, group->size(), id, group->rank()),
                        "ncclCommInitRank", error)) {
        error = "NCCL over " + group->name() + ": " + (ok ? error : why);
        return false;
      }
      comms_[axes] = comm;
    }
    return true;
  }

  std::unique_ptr<cpu::Kernel> kernelFor(const plan::Instruction &inst,
                                         const std::vector<plan::TensorType> &inputs,
                                         const std::vector<plan::TensorType> &outputs,
                                         std::unique_ptr<cpu::Kernel> host,
                                         plan::Stream stream, std::string &error) override {
    std::unique_ptr<cpu::Kernel> kernel =
        deviceKernel(inst, inputs, outputs, std::move(host), stream, error);
    return kernel ? std::make_unique<OrderedKernel>(*this, std::move(kernel), stream, inputs,
                                                    outputs)
                  : nullptr;
  }

  bool communicationStreams() const override { return nccl_ != nullptr; }

  std::unique_ptr<cpu::Kernel> transferKernel(bool send, const plan::TensorType &type,
                                              std::vector<int64_t> peers, int tag,
                                              const int64_t *microBatch,
                                              std::unique_ptr<cpu::Kernel> host,
                                              std::string &) override {
    std::vector<plan::TensorType> operand{type}, none;
    if (transfers_) // on the transfers stream, ordered by the bytes it touches
      return std::make_unique<OrderedKernel>(
          *this, transfers_->kernel(send, size_t(byteSize(type)), std::move(peers), tag,
                                    microBatch),
          plan::Stream::Transfers, send ? operand : none, send ? none : operand);
    ++hostStaged_[send ? "send" : "recv"];
    return std::make_unique<OrderedKernel>(
        *this, makeHostStagedKernel(context_, std::move(host), send ? operand : none,
                                    send ? none : operand),
        plan::Stream::Compute, send ? operand : none, send ? none : operand);
  }

  bool connectTransfers(std::string &error) override {
    return !transfers_ || transfers_->empty() || transfers_->connect(*world_, error);
  }

  /// The kernel itself, its work queued on the stream it runs on (the
  /// compute stream but for NCCL's collectives).
  std::unique_ptr<cpu::Kernel> deviceKernel(const plan::Instruction &inst,
                                            const std::vector<plan::TensorType> &inputs,
                                            const std::vector<plan::TensorType> &outputs,
                                            std::unique_ptr<cpu::Kernel> host,
                                            plan::Stream &stream, std::string &error) {
    plan::Stream wanted = stream;
    stream = plan::Stream::Compute;
    if (inst.has_gpu()) {
      if (inst.gpu().status() && !context_.status) {
        const DriverApi &api = *context_.driver;
        if (!check(api, api.cuMemAlloc(&context_.status, sizeof(int32_t)),
                   "cuMemAlloc (the status word)", error) ||
            !check(api, api.cuMemsetD8Async(context_.status, 0, sizeof(int32_t), context_.stream),
                   "zeroing the status word", error))
          return nullptr;
        allocations_.push_back(context_.status);
      }
      CUfunction function = functionOf(inst.gpu(), error);
      return function ? makeGeneratedKernel(context_, function, inst.gpu(), inputs, outputs, error)
                      : nullptr;
    }
    std::string why;
    if (inst.has_matmul())
      if (auto gemm = makeGemmKernel(context_, inst.matmul(), inputs, outputs, why))
        return gemm;
    if (inst.has_attention() || inst.has_attention_backward()) {
      AttentionChoice choice;
      if (auto attention = makeAttentionKernel(context_, inst, inputs, outputs, choice, why)) {
        ++(choice.cudnn ? attentionOnCudnn_ : attentionOnFlash_);
        if (!choice.cudnn)
          attentionCudnnWhy_ = choice.cudnnWhy;
        return attention;
      }
      attentionWhy_ = why;
    }
    if (inst.has_conv2d() || inst.has_conv2d_backward_input() ||
        inst.has_conv2d_backward_weight()) {
      if (auto conv = makeConvKernel(context_, inst, inputs, outputs[0], why))
        return conv;
      convWhy_ = why;
    }
    // A replicated stage's replicas (Collective.coordinates) have no NCCL
    // communicator of their own: their sum runs host-staged over MPI.
    if (inst.has_collective() && nccl_ && !inst.collective().has_coordinates()) {
      std::vector<int> axes(inst.collective().mesh_axes().begin(),
                            inst.collective().mesh_axes().end());
      std::sort(axes.begin(), axes.end());
      if (auto it = comms_.find(axes); it != comms_.end()) {
        const CudaContext *on = contextOf(wanted, error);
        if (!on)
          return nullptr;
        if (auto kernel = makeNcclKernel(*on, *nccl_, it->second, inst.collective(), inputs,
                                         outputs, why)) {
          stream = wanted;
          return kernel;
        }
      }
    }
    ++hostStaged_[kindOf(inst)];
    return makeHostStagedKernel(context_, std::move(host), inputs, outputs);
  }

  std::string kernelSummary() const override {
    if (attentionOnCudnn_ + attentionOnFlash_ == 0)
      return {};
    std::string summary = "attention on cuDNN " + std::to_string(attentionOnCudnn_) +
                          ", on dtc's flash kernels " + std::to_string(attentionOnFlash_);
    if (attentionOnFlash_)
      summary += " (cuDNN: " + attentionCudnnWhy_ + ")";
    return summary;
  }

  std::string hostStagedSummary() const override {
    std::string summary;
    for (const auto &[kind, n] : hostStaged_)
      summary += (summary.empty() ? "" : ", ") + kind + " " + std::to_string(n);
    if (!summary.empty() && !cublasLtWhy_.empty())
      summary += " (cuBLASLt: " + cublasLtWhy_ + ")";
    if (!convWhy_.empty() || !cudnnWhy_.empty())
      for (const char *kind : {"conv2d", "conv2d_backward_input", "conv2d_backward_weight"})
        if (hostStaged_.count(kind)) {
          summary += " (cuDNN: " + (cudnnWhy_.empty() ? convWhy_ : cudnnWhy_) + ")";
          break;
        }
    if (!attentionWhy_.empty() &&
        (hostStaged_.count("attention") || hostStaged_.count("attention_backward")))
      summary += " (attention: " + attentionWhy_ + ")";
    if ((hostStaged_.count("collective") || hostStaged_.count("send") ||
         hostStaged_.count("recv")) &&
        !ncclWhy_.empty())
      summary += " (NCCL: " + ncclWhy_ + ")";
    return summary;
  }

  /// Makes `stream` wait for the work on other streams that work touching
  /// `reads` and `writes` depends on (StreamOrder): a communication
  /// stream's piece by the event recorded after it, the compute stream's by
  /// an event recorded now (after its latest kernel: queued in order, the
  /// piece's consumer is rarely far behind).
  bool order(int stream, const std::vector<ByteRange> &reads,
             const std::vector<ByteRange> &writes, std::string &error) {
    const DriverApi &api = *context_.driver;
    CUstream waiting = contexts_[size_t(stream)].stream;
    for (StreamOrder::Piece piece : order_.dependencies(stream, reads, writes)) {
      if (order_.follows(stream, piece)) // implied by an earlier wait of these
        continue;
      CUevent event = nullptr;
      if (piece.stream == kCompute) {
        piece.ticket = order_.latest(kCompute);
        if (computeRecorded_ < piece.ticket &&
            !check(api, api.cuEventRecord(computeEvent_, context_.stream), "cuEventRecord",
                   error))
          return false;
        computeRecorded_ = piece.ticket;
        event = computeEvent_;
      } else {
        event = events_[size_t(piece.stream)][piece.ticket - 1];
      }
      if (!check(api, api.cuStreamWaitEvent(waiting, event, 0), "cuStreamWaitEvent", error))
        return false;
      order_.follow(stream, piece);
    }
    return true;
  }

  /// Notes work queued on `stream`; after a communication stream's, an
  /// event others can wait for.
  bool queued(int stream, std::vector<ByteRange> reads, std::vector<ByteRange> writes,
              std::string &error) {
    uint64_t ticket = order_.add(stream, std::move(reads), std::move(writes));
    if (stream == kCompute)
      return true;
    const DriverApi &api = *context_.driver;
    std::vector<CUevent> &events = events_[size_t(stream)];
    if (events.size() < ticket) {
      CUevent event = nullptr;
      if (!check(api, api.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING), "cuEventCreate",
                 error))
        return false;
      events.push_back(event);
    }
    return check(api, api.cuEventRecord(events[ticket - 1], contexts_[size_t(stream)].stream),
                 "cuEventRecord", error);
  }

private:
  static constexpr int kCompute = int(plan::Stream::Compute);

  static CUdeviceptr address(const void *p) { return CUdeviceptr(reinterpret_cast<uintptr_t>(p)); }
  static ByteRange range(const void *at, size_t bytes) {
    auto begin = int64_t(reinterpret_cast<uintptr_t>(at));
    return {begin, begin + int64_t(bytes)};
  }

  /// The context of `stream`'s kernels: the compute stream's, or a
  /// communication stream's, made when first used.
  const CudaContext *contextOf(plan::Stream stream, std::string &error) {
    CudaContext &context = contexts_[size_t(stream)];
    if (!context.stream) {
      const DriverApi &api = *context_.driver;
      context.driver = &api;
      if (!check(api, api.cuStreamCreate(&context.stream, CU_STREAM_NON_BLOCKING),
                 "cuStreamCreate (a communication stream)", error))
        return nullptr;
    }
    return &context;
  }

  /// A kernel whose work is ordered against the other streams' by the
  /// bytes it reads (its inputs) and writes (its outputs).
  class OrderedKernel final : public cpu::Kernel {
  public:
    OrderedKernel(CudaDevice &device, std::unique_ptr<cpu::Kernel> kernel, plan::Stream stream,
                  const std::vector<plan::TensorType> &inputs,
                  const std::vector<plan::TensorType> &outputs)
        : device_(device), kernel_(std::move(kernel)), stream_(int(stream)) {
      for (const plan::TensorType &t : inputs)
        inputBytes_.push_back(size_t(byteSize(t)));
      for (const plan::TensorType &t : outputs)
        outputBytes_.push_back(size_t(byteSize(t)));
    }

    bool run(const void *const *inputs, void *const *outputs, cpu::ThreadPool &pool,
             std::string &error) override {
      std::vector<ByteRange> reads, writes;
      for (size_t i = 0; i < inputBytes_.size(); ++i)
        reads.push_back(range(inputs[i], inputBytes_[i]));
      for (size_t o = 0; o < outputBytes_.size(); ++o)
        writes.push_back(range(outputs[o], outputBytes_[o]));
      return device_.order(stream_, reads, writes, error) &&
             kernel_->run(inputs, outputs, pool, error) &&
             device_.queued(stream_, std::move(reads), std::move(writes), error);
    }

  private:
    CudaDevice &device_;
    std::unique_ptr<cpu::Kernel> kernel_;
    int stream_;
    std::vector<size_t> inputBytes_, outputBytes_;
  };

  /// The kernel's function, its module loaded from the PTX for this GPU
  /// (once per entry point).
  CUfunction functionOf(const plan::GpuKernel &gpu, std::string &error) {
    if (auto it = modules_.find(gpu.entry()); it != modules_.end())
      return it->second;
    auto held = code_.find(gpu.entry());
    if (held == code_.end()) {
      error = "kernel " + gpu.entry() + " is not among the plan's GPU modules";
      return nullptr;
    }
    std::vector<std::string> chips;
    for (const plan::ChipCode &code : held->second->code())
      chips.push_back(code.chip());
    std::string chip = chipFor(major_, minor_, chips);
    const plan::ChipCode *code = nullptr;
    for (const plan::ChipCode &c : held->second->code())
      if (c.chip() == chip)
        code = &c;
    if (!code) {
      std::string list;
      for (const std::string &c : chips)
        list += (list.empty() ? "" : ", ") + c;
      error = "kernel " + gpu.entry() + " is compiled for " + list + ", not for " + name_ +
              " or an older chip";
      return nullptr;
    }
    const DriverApi &api = *context_.driver;
    char log[4096] = {};
    CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *values[] = {log, reinterpret_cast<void *>(uintptr_t(sizeof log - 1))};
    CUmodule module = nullptr;
    CUfunction function = nullptr;
    if (!check(api, api.cuModuleLoadDataEx(&module, code->ptx().c_str(), 2, options, values),
               ("loading kernel " + gpu.entry() + "'s PTX for " + chip).c_str(), error)) {
      if (log[0])
        error += ": " + std::string(log);
      return nullptr;
    }
    loaded_.push_back(module);
    if (!check(api, api.cuModuleGetFunction(&function, module, gpu.entry().c_str()),
               ("kernel " + gpu.entry()).c_str(), error))
      return nullptr;
    modules_[gpu.entry()] = function;
    return function;
  }

  // Per stream (plan/Streams.h), the context its kernels run in; the
  // compute stream's is the device's own.
  std::array<CudaContext, plan::kStreams> contexts_;
  CudaContext &context_ = contexts_[0];
  StreamOrder order_{plan::kStreams};
  std::array<std::vector<CUevent>, plan::kStreams> events_; // after each piece, by ticket - 1
  CUevent computeEvent_ = nullptr; // recorded when another stream waits on compute
  uint64_t computeRecorded_ = 0;   // the compute stream's ticket it was last recorded at
  CUdevice device_ = 0;
  bool primary_ = false;
  int major_ = 0, minor_ = 0;
  std::string name_, cublasLtWhy_, cudnnWhy_;
  std::string convWhy_; // why the last convolution cuDNN did not take runs on the host
  int attentionOnCudnn_ = 0, attentionOnFlash_ = 0;
  std::string attentionCudnnWhy_; // why cuDNN did not take the last the flash kernels did
  std::string attentionWhy_; // why the last attention the flash kernels did not take does
  std::vector<CUdeviceptr> allocations_;
  std::vector<CUmodule> loaded_;
  std::map<std::string, CUfunction> modules_; // by entry point
  std::map<std::string, const plan::GpuModule *> code_; // the plan's, by entry point
  std::map<std::string, int> hostStaged_;     // instruction kind -> count
  int ordinal_ = 0;
  int64_t pciLocation_ = 0; // domain << 32 | bus << 8 | device
  bool failed_ = false;     // a wait for the GPU's work failed: release() aborts NCCL
  const NcclApi *nccl_ = nullptr;                // null: collectives through MPI
  Communicator *world_ = nullptr;                // all ranks (MPI), when there are others
  std::unique_ptr<NcclTransfers> transfers_;     // null: pipeline transfers through MPI
  std::string ncclWhy_;
  std::map<std::vector<int>, ncclComm_t> comms_; // by sorted mesh axes
};

} // namespace

int localGpu(int gpus, int fallback) {
  int local = fallback;
  for (const char *var : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"})
    if (const char *v = std::getenv(var); v && *v) {
      local = std::atoi(v);
      break;
    }
  return gpus > 0 ? local % gpus : 0;
}

std::unique_ptr<Device> openCudaDevice(int ordinal, std::string &error) {
  auto device = std::make_unique<CudaDevice>();
  if (!device->open(ordinal, error))
    return nullptr;
  return device;
}

} // namespace dtc::runtime::cuda
