//===- AttentionKernel.cpp - fused attention on an NVIDIA GPU ------------===//
//
// attention and attention_backward through cuDNN's fused attention
// (CudnnAttention.h) where it takes the instruction, else through the
// hand-written kernels of kernels/FlashAttention.cu, whose PTX is embedded
// in the runtime. That module is loaded once per CUDA context, by the
// first flash kernel made there, and unloaded when the last one is gone.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/AttentionLaunch.h"
#include "runtime/cuda/CudaKernels.h"
#include "runtime/cuda/CudnnAttention.h"
#include "runtime/cuda/OpenLibrary.h"
#include "runtime/cuda/kernels/FlashAttentionPtx.h"

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

namespace dtc::runtime::cuda {
namespace {

/// A block's dynamic shared memory without opting in.
constexpr unsigned kDefaultSharedBytes = 48 << 10;

class AttentionModule {
public:
  AttentionModule(const AttentionModule &) = delete;
  AttentionModule &operator=(const AttentionModule &) = delete;
  ~AttentionModule() {
    if (module_)
      api_.cuModuleUnload(module_);
  }

  /// The module in the calling thread's current context, loaded if no
  /// kernel holds it yet.
  static std::shared_ptr<AttentionModule> current(const DriverApi &api, std::string &why) {
    static std::mutex mutex;
    static std::map<CUcontext, std::weak_ptr<AttentionModule>> loaded;
    CUcontext context = nullptr;
    if (!check(api, api.cuCtxGetCurrent(&context), "cuCtxGetCurrent", why))
      return nullptr;
    if (!context) {
      why = "no CUDA context is current";
      return nullptr;
    }
    std::lock_guard<std::mutex> lock(mutex);
    if (std::shared_ptr<AttentionModule> held = loaded[context].lock())
      return held;
    std::shared_ptr<AttentionModule> module(new AttentionModule(api));
    if (!module->load(why))
      return nullptr;
    loaded[context] = module;
    return module;
  }

  /// The kernel `launch` names, allowed its dynamic shared memory (opting
  /// in past 48 KiB); null with why when the GPU has less.
  CUfunction function(const AttentionLaunch &launch, std::string &why) {
    std::lock_guard<std::mutex> lock(mutex_);
    CUfunction function = nullptr;
    if (!check(api_, api_.cuModuleGetFunction(&function, module_, launch.entry.c_str()),
               ("attention kernel " + launch.entry).c_str(), why))
      return nullptr;
    if (launch.sharedBytes > maxSharedBytes_) {
      why = launch.entry + " needs " + std::to_string(launch.sharedBytes) +
            " bytes of shared memory per block; this GPU gives at most " +
            std::to_string(maxSharedBytes_);
      return nullptr;
    }
    // The attribute is the function's, shared by every kernel made of it:
    // only ever raised.
    unsigned &allowed = allowed_.try_emplace(function, kDefaultSharedBytes).first->second;
    if (launch.sharedBytes > allowed) {
      if (!check(api_,
                 api_.cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         int(launch.sharedBytes)),
                 ("allowing " + launch.entry + " its shared memory").c_str(), why))
        return nullptr;
      allowed = launch.sharedBytes;
    }
    return function;
  }

private:
  explicit AttentionModule(const DriverApi &api) : api_(api) {}

  bool load(std::string &why) {
    char log[4096] = {};
    CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *values[] = {log, reinterpret_cast<void *>(uintptr_t(sizeof log - 1))};
    if (!check(api_, api_.cuModuleLoadDataEx(&module_, flashAttentionPtx(), 2, options, values),
               "loading the attention kernels' PTX", why)) {
      module_ = nullptr;
      if (log[0])
        why += ": " + std::string(log);
      return false;
    }
    CUdevice device = 0;
    int optIn = 0;
    if (!check(api_, api_.cuCtxGetDevice(&device), "cuCtxGetDevice", why) ||
        !check(api_,
               api_.cuDeviceGetAttribute(
                   &optIn, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device),
               "the GPU's shared memory per block", why))
      return false;
    maxSharedBytes_ = unsigned(optIn);
    return true;
  }

  const DriverApi &api_;
  CUmodule module_ = nullptr;
  unsigned maxSharedBytes_ = 0;
  std::mutex mutex_;
  std::map<CUfunction, unsigned> allowed_; // each function's dynamic shared memory limit
};

class AttentionKernel final : public cpu::Kernel {
public:
  struct Step {
    CUfunction function;
    AttentionLaunch launch;
  };

  AttentionKernel(const CudaContext &context, std::shared_ptr<AttentionModule> module,
                  const AttentionDims &dims, std::vector<Step> steps)
      : context_(context), module_(std::move(module)), dims_(dims), steps_(std::move(steps)) {}

  bool run(const void *const *inputs, void *const *outputs, cpu::ThreadPool &,
           std::string &error) override {
    bool backward = steps_.size() == 2;
    AttentionArgs args(dims_, backward, inputs, outputs,
                       reinterpret_cast<void *>(uintptr_t(context_.workspace)));
    for (size_t i = 0; i < steps_.size(); ++i)
      if (!launch(steps_[i], args.params(i), error))
        return false;
    return true;
  }

private:
  bool launch(const Step &step, void **args, std::string &error) {
    const AttentionLaunch &l = step.launch;
    if (l.gridX == 0 || l.gridY == 0) // no rows: nothing to write
      return true;
    const DriverApi &api = *context_.driver;
    return check(api,
                 api.cuLaunchKernel(step.function, l.gridX, l.gridY, 1, l.threads, 1, 1,
                                    l.sharedBytes, context_.stream, args, nullptr),
                 ("launching " + l.entry).c_str(), error);
  }

  const CudaContext &context_;
  std::shared_ptr<AttentionModule> module_; // keeps the functions loaded
  AttentionDims dims_;
  std::vector<Step> steps_;
};

/// A built cuDNN graph, shared by every instruction of its dims on one
/// handle (a model's layers: cuDNN's runtime-fusion engines compile a
/// kernel per plan, which takes a while), run one call at a time.
struct SharedGraph {
  std::unique_ptr<CudnnAttention> graph;
  std::mutex running;
};

/// The graph for (`handle`, `dims`, `backward`) if one is built and still
/// held by a kernel; `make` builds it otherwise (null with why when cuDNN
/// does not take it, which is not remembered).
std::shared_ptr<SharedGraph>
sharedGraph(cudnnHandle_t handle, const AttentionDims &dims, bool backward,
            const std::function<std::unique_ptr<CudnnAttention>(std::string &)> &make,
            std::string &why) {
  using Key = std::tuple<const void *, bool, std::vector<int64_t>, float>;
  static std::mutex mutex;
  static std::map<Key, std::weak_ptr<SharedGraph>> built;
  Key key{handle, backward,
          {dims.bh, dims.sq, dims.sk, dims.d, dims.dv, dims.bf16, dims.causal, dims.bias,
           dims.inner, dims.outerStride, dims.innerStride, dims.rowStride, dims.bshd,
           dims.heads, dims.packed, dims.interleaved, dims.group},
          dims.scale};
  std::lock_guard<std::mutex> lock(mutex);
  if (std::shared_ptr<SharedGraph> held = built[key].lock())
    return held;
  auto graph = std::make_shared<SharedGraph>();
  if (!(graph->graph = make(why)))
    return nullptr;
  built[key] = graph;
  return graph;
}

/// cuDNN's fused attention on the compute stream, its scratch in the
/// device's workspace.
class CudnnAttentionKernel final : public cpu::Kernel {
public:
  CudnnAttentionKernel(const CudaContext &context, std::shared_ptr<SharedGraph> graph)
      : context_(context), graph_(std::move(graph)) {}

  bool run(const void *const *inputs, void *const *outputs, cpu::ThreadPool &,
           std::string &error) override {
    const CudnnApi &dnn = *context_.cudnn;
    std::lock_guard<std::mutex> lock(graph_->running);
    return check(dnn, dnn.cudnnSetStream(context_.cudnnHandle, context_.stream),
                 "cudnnSetStream", error) &&
           graph_->graph->run(context_.cudnnHandle, inputs, outputs,
                              reinterpret_cast<void *>(uintptr_t(context_.workspace)), error);
  }

private:
  const CudaContext &context_;
  std::shared_ptr<SharedGraph> graph_;
};

/// cuDNN's kernel for `dims`; null with why where cuDNN does not take it.
std::unique_ptr<cpu::Kernel> makeCudnnKernel(const CudaContext &context,
                                             const AttentionDims &dims, bool backward,
                                             std::string &why) {
  if (!context.cudnn) {
    why = "cuDNN is not loaded";
    return nullptr;
  }
  // cudnn-frontend opens libcudart by its soname: the toolkit's, opened
  // here first, is the one it gets where the loader's paths have none.
  static std::once_flag once;
  std::call_once(once, [] {
    std::string ignored;
    openToolkitLibrary({"libcudart.so.13", "libcudart.so.12"}, ignored);
  });
  std::shared_ptr<SharedGraph> graph = sharedGraph(
      context.cudnnHandle, dims, backward,
      [&](std::string &refused) -> std::unique_ptr<CudnnAttention> {
        std::unique_ptr<CudnnAttention> made =
            CudnnAttention::describe(*context.cudnn, dims, backward, context.sm, refused);
        if (!made || !made->build(context.cudnnHandle, refused))
          return nullptr;
        return made;
      },
      why);
  if (!graph)
    return nullptr;
  int64_t bytes = graph->graph->workspaceBytes();
  if (bytes < 0 || size_t(bytes) > context.workspaceBytes) {
    why = "its plan needs " + std::to_string(bytes) + " bytes of workspace; the device has " +
          std::to_string(context.workspaceBytes);
    return nullptr;
  }
  return std::make_unique<CudnnAttentionKernel>(context, std::move(graph));
}

} // namespace

std::unique_ptr<cpu::Kernel> makeAttentionKernel(const CudaContext &context,
                                                 const plan::Instruction &inst,
                                                 const std::vector<plan::TensorType> &inputs,
                                                 const std::vector<plan::TensorType> &outputs,
                                                 AttentionChoice &choice, std::string &why) {
  bool backward = inst.has_attention_backward();
  if (!backward && !inst.has_attention()) {
    why = "not an attention instruction";
    return nullptr;
  }
  AttentionDims dims;
  if (!attentionDimsOf(backward, backward ? inst.attention_backward() : inst.attention(), inputs,
                       outputs, dims, why))
    return nullptr;
  using Allowed = CudaContext::AttentionKernels;
  choice = AttentionChoice();
  if (context.attentionKernels != Allowed::Flash) {
    if (auto kernel = makeCudnnKernel(context, dims, backward, choice.cudnnWhy)) {
      choice.cudnn = true;
      return kernel;
    }
    if (context.attentionKernels == Allowed::Cudnn) {
      why = "cuDNN: " + choice.cudnnWhy + " (DTC_ATTENTION_KERNELS=cudnn)";
      return nullptr;
    }
  } else {
    choice.cudnnWhy = "DTC_ATTENTION_KERNELS=flash";
  }
  if (backward && attentionScratchBytes(dims) > context.workspaceBytes) {
    why = "attention_backward's Delta needs " + std::to_string(attentionScratchBytes(dims)) +
          " bytes of scratch; the device's workspace has " +
          std::to_string(context.workspaceBytes);
    return nullptr;
  }
  std::shared_ptr<AttentionModule> module = AttentionModule::current(*context.driver, why);
  if (!module)
    return nullptr;
  std::vector<AttentionKernel::Step> steps;
  std::vector<AttentionLaunch> launches;
  if (backward)
    launches = {gradQLaunch(dims), gradKVLaunch(dims)};
  else
    launches = {forwardLaunch(dims)};
  for (AttentionLaunch &launch : launches) {
    CUfunction function = module->function(launch, why);
    if (!function)
      return nullptr;
    steps.push_back({function, std::move(launch)});
  }
  return std::make_unique<AttentionKernel>(context, std::move(module), dims, std::move(steps));
}

} // namespace dtc::runtime::cuda
