//===- CudaKernels.cpp - a plan instruction's kernel on an NVIDIA GPU -----===//
#include "runtime/cuda/CudaKernels.h"
#include "runtime/cuda/GemmShape.h"
#include "runtime/comm/Watchdog.h"

#include "plan/DType.h"

#include <algorithm>
#include <array>

namespace dtc::runtime::cuda {
namespace {

std::vector<size_t> bytesOf(const std::vector<plan::TensorType> &types) {
  std::vector<size_t> bytes;
  for (const plan::TensorType &t : types)
    bytes.push_back(size_t(byteSize(t)));
  return bytes;
}

CUdeviceptr address(const void *p) { return CUdeviceptr(reinterpret_cast<uintptr_t>(p)); }

class GeneratedKernel final : public cpu::Kernel {
public:
  GeneratedKernel(const CudaContext &context, CUfunction function, const plan::GpuKernel &gpu,
                  size_t inputs, std::vector<size_t> outputBytes)
      : context_(context), function_(function), grid_(unsigned(gpu.grid())),
        block_(unsigned(gpu.block())), params_(gpu.params().begin(), gpu.params().end()),
        inputs_(inputs), outputBytes_(std::move(outputBytes)), zero_(gpu.zero_outputs()) {}

  bool run(const void *const *inputs, void *const *outputs, cpu::ThreadPool &,
           std::string &error) override {
    const DriverApi &api = *context_.driver;
    if (zero_)
      for (size_t o = 0; o < outputBytes_.size(); ++o)
        if (!check(api, api.cuMemsetD8Async(address(outputs[o]), 0, outputBytes_[o],
                                            context_.stream),
                   "zeroing a kernel's output", error))
          return false;
    if (grid_ == 0)
      return true; // no threads (a scatter-add of no updates: its zeroed output)
    // Each parameter is a buffer's device address, in the kernel's order.
    std::vector<CUdeviceptr> pointers(params_.size());
    std::vector<void *> args(params_.size());
    for (size_t p = 0; p < params_.size(); ++p) {
      size_t b = params_[p];
      pointers[p] = b < inputs_                       ? address(inputs[b])
                    : b < inputs_ + outputBytes_.size() ? address(outputs[b - inputs_])
                                                        : context_.status;
      args[p] = &pointers[p];
    }
    return check(api,
                 api.cuLaunchKernel(function_, grid_, 1, 1, block_, 1, 1, 0, context_.stream,
                                    args.data(), nullptr),
                 "cuLaunchKernel", error);
  }

private:
  const CudaContext &context_;
  CUfunction function_;
  unsigned grid_, block_;
  std::vector<uint32_t> params_;
  size_t inputs_;
  std::vector<size_t> outputBytes_;
  bool zero_;
};

/// cuBLASLt's descriptors of one GEMM, made once.
class GemmKernel final : public cpu::Kernel {
public:
  explicit GemmKernel(const CudaContext &context) : context_(context) {}
  ~GemmKernel() override {
    const CublasLtApi &lt = *context_.cublasLt;
    for (cublasLtMatrixLayout_t layout : {a_, b_, c_})
      if (layout)
        lt.cublasLtMatrixLayoutDestroy(layout);
    if (desc_)
      lt.cublasLtMatmulDescDestroy(desc_);
  }

  /// `type` the operands', `resultType` the product's: the operands' or,
  /// for bf16 operands, f32 (the accumulator kept).
  bool prepare(const GemmShape &g, cudaDataType type, cudaDataType resultType,
               const plan::MatMul &matmul, std::string &why) {
    const CublasLtApi &lt = *context_.cublasLt;
    cublasOperation_t transA = g.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t transB = g.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    // A linear layer's bias (and activation) in the epilogue: the bias runs
    // along the row-major product's columns, which are the column-major
    // product's rows (GemmShape.h), as cuBLASLt's bias vector is.
    bias_ = matmul.bias();
    addend_ = matmul.addend();
    addendInput_ = bias_ ? 3 : 2;
    // Training's GELU keeps its input (the second output) for its gradient:
    // GELU_AUX_BIAS writes it beside the GELU, laid out as the output.
    aux_ = bias_ && matmul.keep_preactivation();
    // A weight gradient x^T dy's bias gradient: dy's rows summed, which are
    // the column-major A's (the plan's rhs) along k.
    biasGradient_ = matmul.bias_gradient();
    // A GELU's input gradient: the product times the derivative at the
    // GELU's input, which DGELU reads as its aux (laid out as the output).
    geluGradient_ = matmul.gelu_gradient();
    cublasLtEpilogue_t epilogue =
        biasGradient_                                          ? CUBLASLT_EPILOGUE_BGRADA
        : geluGradient_                                        ? CUBLASLT_EPILOGUE_DGELU
        : !bias_                                               ? CUBLASLT_EPILOGUE_DEFAULT
        : aux_                                                 ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
        : matmul.activation() == plan::ACTIVATION_RELU         ? CUBLASLT_EPILOGUE_RELU_BIAS
        : matmul.activation() == plan::ACTIVATION_GELU_TANH    ? CUBLASLT_EPILOGUE_GELU_BIAS
                                                               : CUBLASLT_EPILOGUE_BIAS;
    if ((aux_ || geluGradient_) && (g.ldc % 8 || (g.batch > 1 && g.strideC % 8))) {
      why = std::string("cuBLASLt's ") + (aux_ ? "GELU_AUX_BIAS" : "DGELU") +
            " needs the preactivation's leading dim (" + std::to_string(g.ldc) +
            ") and batch stride divisible by 8";
      return false;
    }
    if (!check(lt, lt.cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F),
               "cublasLtMatmulDescCreate", why) ||
        !check(lt, lt.cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &transA,
                                                     sizeof transA),
               "TRANSA", why) ||
        !check(lt, lt.cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &transB,
                                                     sizeof transB),
               "TRANSB", why) ||
        !check(lt, lt.cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                     &epilogue, sizeof epilogue),
               "EPILOGUE", why))
      return false;
    int64_t auxLd = g.ldc, auxStride = g.strideC;
    if ((aux_ || geluGradient_) &&
        (!check(lt, lt.cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                      &auxLd, sizeof auxLd),
                "EPILOGUE_AUX_LD", why) ||
         (g.batch > 1 &&
          !check(lt,
                 lt.cublasLtMatmulDescSetAttribute(
                     desc_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &auxStride,
                     sizeof auxStride),
                 "EPILOGUE_AUX_BATCH_STRIDE", why))))
      return false;
    // Stored shapes, column-major: op(A) is m x k, op(B) k x n.
    auto layout = [&](cublasLtMatrixLayout_t &l, cudaDataType t, int64_t rows, int64_t cols,
                      int64_t ld, int64_t stride) {
      int32_t batch = int32_t(g.batch);
      return check(lt, lt.cublasLtMatrixLayoutCreate(&l, t, uint64_t(rows), uint64_t(cols), ld),
                   "cublasLtMatrixLayoutCreate", why) &&
             (g.batch == 1 ||
              (check(lt, lt.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                             &batch, sizeof batch),
                     "BATCH_COUNT", why) &&
               check(lt, lt.cublasLtMatrixLayoutSetAttribute(
                             l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
                     "STRIDED_BATCH_OFFSET", why)));
    };
    if (!layout(a_, type, g.transA ? g.k : g.m, g.transA ? g.m : g.k, g.lda, g.strideA) ||
        !layout(b_, type, g.transB ? g.n : g.k, g.transB ? g.k : g.n, g.ldb, g.strideB) ||
        !layout(c_, resultType, g.m, g.n, g.ldc, g.strideC))
      return false;
    // Batch entries' distances in bytes: an entry is aligned as its
    // matrix's start and its stride allow (gemmAlignment).
    int64_t operandBytes = type == CUDA_R_16BF ? 2 : 4;
    int64_t resultBytes = resultType == CUDA_R_16BF ? 2 : 4;
    if (g.batch > 1)
      strideBytes_ = {g.strideA * operandBytes, g.strideB * operandBytes, g.strideC * resultBytes,
                      g.strideC * resultBytes};
    return choose({256, 256, 256, 256}, why);
  }

  /// The heuristic's algorithm for operands (A, B, C, D) aligned to
  /// `alignment` bytes: cuBLASLt assumes 256 unless told, and an algorithm
  /// chosen so fails on less.
  bool choose(const std::array<uint32_t, 4> &alignment, std::string &why) {
    const CublasLtApi &lt = *context_.cublasLt;
    cublasLtMatmulPreference_t preference = nullptr;
    uint64_t workspace = context_.workspaceBytes;
    int found = 0;
    static constexpr std::array<cublasLtMatmulPreferenceAttributes_t, 4> kAlignments = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    bool ok = check(lt, lt.cublasLtMatmulPreferenceCreate(&preference),
                    "cublasLtMatmulPreferenceCreate", why) &&
              check(lt, lt.cublasLtMatmulPreferenceSetAttribute(
                            preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                            sizeof workspace),
                    "MAX_WORKSPACE_BYTES", why);
    for (size_t i = 0; ok && i < kAlignments.size(); ++i)
      ok = check(lt, lt.cublasLtMatmulPreferenceSetAttribute(preference, kAlignments[i],
                                                             &alignment[i], sizeof alignment[i]),
                 "MIN_ALIGNMENT", why);
    ok = ok && check(lt, lt.cublasLtMatmulAlgoGetHeuristic(context_.cublasLtHandle, desc_, a_, b_,
                                                           c_, c_, preference, 1, &heuristic_,
                                                           &found),
                     "cublasLtMatmulAlgoGetHeuristic", why);
    if (preference)
      lt.cublasLtMatmulPreferenceDestroy(preference);
    if (ok && found == 0) {
      why = "cuBLASLt has no algorithm for this GEMM";
      ok = false;
    }
    alignment_ = alignment;
    return ok;
  }

  bool run(const void *const *inputs, void *const *outputs, cpu::ThreadPool &,
           std::string &error) override {
    const CublasLtApi &lt = *context_.cublasLt;
    // An addend (the last input, laid out as the output) is the GEMM's C.
    float alpha = 1, beta = addend_ ? 1 : 0;
    // The epilogue's vector (a bias read, a bias gradient written) and its
    // aux matrix (a GELU's input kept, or read for its gradient).
    auto pointer = [&](cublasLtMatmulDescAttributes_t attribute, const void *at,
                       const char *name) {
      return check(lt, lt.cublasLtMatmulDescSetAttribute(desc_, attribute, &at, sizeof at), name,
                   error);
    };
    // The plan's buffers are 64-byte aligned and a view's may be less:
    // an operand aligned below what the algorithm was chosen for chooses
    // again (once: an instruction's addresses are the same every step).
    const void *c = addend_ ? inputs[addendInput_] : outputs[0];
    const void *operands[4] = {inputs[1], inputs[0], c, outputs[0]};
    std::array<uint32_t, 4> alignment;
    bool lower = false;
    for (size_t i = 0; i < 4; ++i) {
      alignment[i] = gemmAlignment(uint64_t(address(operands[i])), strideBytes_[i]);
      lower = lower || alignment[i] < alignment_[i];
    }
    if (lower && !choose(alignment, error))
      return false;
    const void *vector = bias_ ? inputs[2] : biasGradient_ ? outputs[1] : nullptr;
    const void *aux = aux_ ? outputs[1] : geluGradient_ ? inputs[2] : nullptr;
    if ((vector && !pointer(CUBLASLT_MATMUL_DESC_BIAS_POINTER, vector, "BIAS_POINTER")) ||
        (aux && !pointer(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux, "EPILOGUE_AUX_POINTER")))
      return false;
    // A is the plan's right operand, B its left (GemmShape.h).
    return check(lt,
                 lt.cublasLtMatmul(context_.cublasLtHandle, desc_, &alpha, inputs[1], a_,
                                   inputs[0], b_, &beta, c, c_, outputs[0], c_,
                                   &heuristic_.algo,
                                   reinterpret_cast<void *>(uintptr_t(context_.workspace)),
                                   context_.workspaceBytes, context_.stream),
                 "cublasLtMatmul", error);
  }

private:
  const CudaContext &context_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic_{};
  std::array<uint32_t, 4> alignment_{};   // what heuristic_ was chosen for: A, B, C, D
  std::array<int64_t, 4> strideBytes_{}; // between batch entries; 0 for one matrix
  bool bias_ = false;   // inputs[2], the epilogue's
  bool aux_ = false;    // outputs[1], the GELU's input
  bool addend_ = false; // inputs[addendInput_], C
  size_t addendInput_ = 3; // after the operands and the bias
  bool biasGradient_ = false; // outputs[1], A's sum along k
  bool geluGradient_ = false; // inputs[2], the GELU's input DGELU reads
};

class NcclKernel final : public cpu::Kernel {
public:
  /// Elements in and out of each member (two or more: a bucket, its
  /// members' calls grouped, which NCCL launches as one).
  struct Member {
    size_t inCount, outCount;
  };

  NcclKernel(const CudaContext &context, const NcclApi &nccl, ncclComm_t comm,
             plan::CollectiveKind kind, ncclRedOp_t op, ncclDataType_t type,
             std::vector<Member> members, size_t elementBytes)
      : context_(context), nccl_(nccl), comm_(comm), kind_(kind), op_(op), type_(type),
        members_(std::move(members)), elementBytes_(elementBytes),
        scratch_(members_.size(), 0) {}
  ~NcclKernel() override {
    for (CUdeviceptr s : scratch_)
      if (s)
        context_.driver->cuMemFree(s);
  }

  bool run(const void *const *inputs, void *const *outputs, cpu::ThreadPool &,
           std::string &error) override {
    // Copies of inputs that overlap their outputs, allocated before the
    // group starts: nothing inside it may fail (the others would wait for
    // the members it never issued), nor allocate while NCCL runs.
    const DriverApi &api = *context_.driver;
    for (size_t m = 0; m < members_.size(); ++m)
      if (overlaps(m, inputs[m], outputs[m]) && !scratch_[m] &&
          !check(api, api.cuMemAlloc(&scratch_[m], members_[m].inCount * elementBytes_),
                 "cuMemAlloc (a collective's input copy)", error))
        return false;
    bool grouped = members_.size() > 1;
    if (grouped && !check(nccl_, nccl_.ncclGroupStart(), "ncclGroupStart", error))
      return false;
    bool ok = true;
    for (size_t m = 0; ok && m < members_.size(); ++m)
      ok = runMember(m, inputs[m], outputs[m], error);
    // A group started is ended, whatever a member said.
    std::string ended;
    if (grouped && !check(nccl_, nccl_.ncclGroupEnd(), "ncclGroupEnd", ended)) {
      if (ok)
        error = ended;
      return false;
    }
    return ok;
  }

private:
  /// Whether member m's input must be copied first: NCCL takes buffers
  /// apart, or exactly in place (an all-reduce's, an all-gather's input at
  /// its rank's block); other overlaps are undefined.
  bool overlaps(size_t m, const void *in, const void *out) const {
    auto a = reinterpret_cast<uintptr_t>(in), b = reinterpret_cast<uintptr_t>(out);
    size_t inBytes = members_[m].inCount * elementBytes_;
    size_t outBytes = members_[m].outCount * elementBytes_;
    return a < b + outBytes && b < a + inBytes && !(kind_ == plan::ALL_REDUCE && a == b);
  }

  bool runMember(size_t m, const void *in, void *out, std::string &error) {
    size_t inCount = members_[m].inCount, outCount = members_[m].outCount;
    if (overlaps(m, in, out)) {
      const DriverApi &api = *context_.driver;
      if (!check(api,
                 api.cuMemcpyDtoDAsync(scratch_[m], address(in), inCount * elementBytes_,
                                       context_.stream),
                 "copying a collective's input", error))
        return false;
      in = reinterpret_cast<const void *>(uintptr_t(scratch_[m]));
    }
    cudaStream_t stream = context_.stream;
    switch (kind_) {
    case plan::ALL_REDUCE:
      return check(nccl_, nccl_.ncclAllReduce(in, out, inCount, type_, op_, comm_, stream),
                   "ncclAllReduce", error);
    case plan::ALL_GATHER:
      return check(nccl_, nccl_.ncclAllGather(in, out, inCount, type_, comm_, stream),
                   "ncclAllGather", error);
    default:
      return check(nccl_, nccl_.ncclReduceScatter(in, out, outCount, type_, op_, comm_, stream),
                   "ncclReduceScatter", error);
    }
  }

private:
  const CudaContext &context_;
  const NcclApi &nccl_;
  ncclComm_t comm_;
  plan::CollectiveKind kind_;
  ncclRedOp_t op_;
  ncclDataType_t type_;
  std::vector<Member> members_;
  size_t elementBytes_;
  std::vector<CUdeviceptr> scratch_; // a member's input copy, where it overlaps its output
};

class HostStagedKernel final : public cpu::Kernel {
public:
  HostStagedKernel(const CudaContext &context, std::unique_ptr<cpu::Kernel> host,
                   std::vector<size_t> inputBytes, std::vector<size_t> outputBytes)
      : context_(context), host_(std::move(host)), inputBytes_(std::move(inputBytes)),
        outputBytes_(std::move(outputBytes)) {
    for (size_t n : inputBytes_)
      inputs_.emplace_back(n);
    for (size_t n : outputBytes_)
      outputs_.emplace_back(n);
  }

  bool run(const void *const *inputs, void *const *outputs, cpu::ThreadPool &pool,
           std::string &error) override {
    const DriverApi &api = *context_.driver;
    std::vector<const void *> in;
    std::vector<void *> out;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (!check(api, api.cuMemcpyDtoHAsync(inputs_[i].data(), address(inputs[i]),
                                            inputBytes_[i], context_.stream),
                 "copying an input to the host", error))
        return false;
      in.push_back(inputs_[i].data());
    }
    for (size_t o = 0; o < outputs_.size(); ++o) {
      if (!check(api, api.cuMemcpyDtoHAsync(outputs_[o].data(), address(outputs[o]),
                                            outputBytes_[o], context_.stream),
                 "copying an output to the host", error))
        return false;
      out.push_back(outputs_[o].data());
    }
    {
      // Behind NCCL's work too, when the stream waits on it: watched.
      watchdog::Wait wait([] { return std::string("the GPU, to run an instruction on the host"); });
      if (!check(api, api.cuStreamSynchronize(context_.stream), "cuStreamSynchronize", error))
        return false;
    }
    if (!host_->run(in.data(), out.data(), pool, error))
      return false;
    for (size_t o = 0; o < outputs_.size(); ++o)
      if (!check(api, api.cuMemcpyHtoDAsync(address(outputs[o]), outputs_[o].data(),
                                            outputBytes_[o], context_.stream),
                 "copying an output to the device", error))
        return false;
    return true;
  }

private:
  const CudaContext &context_;
  std::unique_ptr<cpu::Kernel> host_;
  std::vector<size_t> inputBytes_, outputBytes_;
  std::vector<std::vector<char>> inputs_, outputs_;
};

} // namespace

std::unique_ptr<cpu::Kernel> makeGeneratedKernel(const CudaContext &context, CUfunction function,
                                                 const plan::GpuKernel &gpu,
                                                 const std::vector<plan::TensorType> &inputs,
                                                 const std::vector<plan::TensorType> &outputs,
                                                 std::string &error) {
  size_t buffers = inputs.size() + outputs.size() + (gpu.status() ? 1 : 0);
  // A launch batch's kernel takes a buffer read by several of its
  // instructions once; a kernel takes no buffer it does not read.
  if (size_t(gpu.params_size()) > buffers) {
    error = "kernel " + gpu.entry() + " takes " + std::to_string(gpu.params_size()) +
            " buffers, the instruction has " + std::to_string(buffers);
    return nullptr;
  }
  for (uint32_t p : gpu.params())
    if (p >= buffers) {
      error = "kernel " + gpu.entry() + ": parameter buffer " + std::to_string(p) +
              " is not one of the instruction's " + std::to_string(buffers);
      return nullptr;
    }
  if (gpu.grid() < 0 || gpu.block() < 1 || gpu.block() > 1024 || gpu.grid() > 0x7fffffff) {
    error = "kernel " + gpu.entry() + ": a launch of " + std::to_string(gpu.grid()) +
            " blocks of " + std::to_string(gpu.block()) + " threads is not one a GPU runs";
    return nullptr;
  }
  return std::make_unique<GeneratedKernel>(context, function, gpu, inputs.size(),
                                           bytesOf(outputs));
}

std::unique_ptr<cpu::Kernel> makeGemmKernel(const CudaContext &context,
                                            const plan::MatMul &matmul,
                                            const std::vector<plan::TensorType> &inputs,
                                            const std::vector<plan::TensorType> &outputs,
                                            std::string &why) {
  if (!context.cublasLt) {
    why = "cuBLASLt is not loaded";
    return nullptr;
  }
  const plan::TensorType &output = outputs.front();
  // A bias gradient (BGRADA: A is the plan's rhs) is the product's type.
  if (matmul.bias_gradient() &&
      (matmul.bias() || !matmul.transpose_lhs() || matmul.transpose_rhs() ||
       outputs.size() != 2 || outputs[1].dtype() != output.dtype() || inputs.size() != 2 ||
       inputs[1].shape_size() != 2 || elementCount(outputs[1]) != inputs[1].shape(1))) {
    why = "cuBLASLt's BGRADA sums a plain x^T dy product's dy rows into a vector of the "
          "product's type";
    return nullptr;
  }
  // bf16 operands may give an f32 product (a weight's gradient, its
  // accumulator kept); a bias is the product's type, an addend the output's.
  if (inputs.size() != 2u + matmul.bias() + matmul.addend() + matmul.gelu_gradient() ||
      (matmul.addend() && (matmul.gelu_gradient() || matmul.bias_gradient() ||
                           matmul.activation() != plan::ACTIVATION_NONE))) {
    why = "a product takes 2 inputs, and one more for each of a bias, an addend (without an "
          "activation or epilogue output) and a GELU's input; got " +
          std::to_string(inputs.size());
    return nullptr;
  }
  if (matmul.gelu_gradient() &&
      (matmul.bias() || matmul.bias_gradient() || inputs[2].dtype() != output.dtype() ||
       !std::equal(inputs[2].shape().begin(), inputs[2].shape().end(), output.shape().begin(),
                   output.shape().end()))) {
    why = "cuBLASLt's DGELU reads a plain product's GELU input laid out as its output";
    return nullptr;
  }
  const plan::TensorType &addend = inputs.back();
  if (matmul.addend() && (addend.dtype() != output.dtype() ||
                          !std::equal(addend.shape().begin(), addend.shape().end(),
                                      output.shape().begin(), output.shape().end()))) {
    why = "an addend must be laid out as the product";
    return nullptr;
  }
  plan::DType dtype = inputs[0].dtype(), result = output.dtype();
  bool widened = dtype == plan::BF16 && result == plan::F32 && !matmul.bias();
  if (inputs[1].dtype() != dtype ||
      (matmul.bias() && inputs[2].dtype() != result) || (result != dtype && !widened) ||
      (dtype != plan::F32 && dtype != plan::BF16)) {
    why = "cuBLASLt runs fp32 and bf16 products here (bf16 into f32 too), not " +
          plan::DType_Name(dtype) + " into " + plan::DType_Name(result);
    return nullptr;
  }
  auto shape = [](const plan::TensorType &t) {
    return std::vector<int64_t>(t.shape().begin(), t.shape().end());
  };
  GemmShape g;
  if (!gemmShapeOf(shape(inputs[0]), shape(inputs[1]), shape(output), matmul.transpose_lhs(),
                   matmul.transpose_rhs(), g, why))
    return nullptr;
  auto kernel = std::make_unique<GemmKernel>(context);
  if (!kernel->prepare(g, dtype == plan::F32 ? CUDA_R_32F : CUDA_R_16BF,
                       result == plan::F32 ? CUDA_R_32F : CUDA_R_16BF, matmul, why))
    return nullptr;
  return kernel;
}

std::unique_ptr<cpu::Kernel> makeNcclKernel(const CudaContext &context, const NcclApi &nccl,
                                            ncclComm_t comm, const plan::Collective &collective,
                                            const std::vector<plan::TensorType> &inputs,
                                            const std::vector<plan::TensorType> &outputs,
                                            std::string &why) {
  plan::CollectiveKind kind = collective.kind();
  const plan::TensorType &input = inputs.front();
  if (kind != plan::ALL_REDUCE && kind != plan::ALL_GATHER && kind != plan::REDUCE_SCATTER) {
    why = plan::CollectiveKind_Name(kind) + " goes through MPI";
    return nullptr;
  }
  std::vector<NcclKernel::Member> members;
  for (size_t m = 0; m < inputs.size(); ++m) {
    members.push_back({size_t(elementCount(inputs[m])), size_t(elementCount(outputs[m]))});
    if (kind == plan::ALL_REDUCE)
      continue;
    // NCCL's blocks in group-rank order are the plan's parts when the axes
    // are listed sorted and no dim comes before the split one.
    int64_t axis = collective.member_axes_size() ? collective.member_axes(int(m))
                                                 : collective.axis();
    bool sorted = std::is_sorted(collective.mesh_axes().begin(), collective.mesh_axes().end());
    int64_t outer = 1;
    for (int64_t d = 0; d < axis; ++d)
      outer *= inputs[m].shape(int(d));
    if (!sorted || outer != 1) {
      why = plan::CollectiveKind_Name(kind) + " along an inner dim goes through MPI";
      return nullptr;
    }
  }
  ncclDataType_t type;
  switch (input.dtype()) {
  case plan::F32: type = ncclFloat32; break;
  case plan::F64: type = ncclFloat64; break;
  case plan::F16: type = ncclFloat16; break;
  case plan::BF16: type = ncclBfloat16; break;
  case plan::I32: type = ncclInt32; break;
  case plan::I64: type = ncclInt64; break;
  case plan::U8: case plan::BOOL: type = ncclUint8; break;
  default:
    why = "NCCL has no " + plan::DType_Name(input.dtype());
    return nullptr;
  }
  ncclRedOp_t op = collective.reduction() == plan::REDUCE_MAX   ? ncclMax
                   : collective.reduction() == plan::REDUCE_MIN ? ncclMin
                                                                : ncclSum;
  return std::make_unique<NcclKernel>(context, nccl, comm, kind, op, type, std::move(members),
                                      size_t(dtypeBytes(input.dtype())));
}

std::unique_ptr<cpu::Kernel> makeHostStagedKernel(const CudaContext &context,
                                                  std::unique_ptr<cpu::Kernel> host,
                                                  const std::vector<plan::TensorType> &inputs,
                                                  const std::vector<plan::TensorType> &outputs) {
  return std::make_unique<HostStagedKernel>(context, std::move(host), bytesOf(inputs),
                                            bytesOf(outputs));
}

} // namespace dtc::runtime::cuda
