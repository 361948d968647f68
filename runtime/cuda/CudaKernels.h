//===- CudaKernels.h - a plan instruction's kernel on an NVIDIA GPU -*- C++ -*-===//
//
// Each a cpu::Kernel whose run() gets device addresses and queues its
// work on the device's stream: a kernel the compiler generated (its PTX
// loaded by the device, launched with cuLaunchKernel), fused attention
// (cuDNN's, or hand-written kernels whose PTX the runtime embeds), a matrix product
// through cuBLASLt, a collective through NCCL, and the CPU backend's kernel
// run on host copies of the operands (the instructions no GPU kernel
// covers yet).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CUDA_CUDAKERNELS_H
#define DTC_RUNTIME_CUDA_CUDAKERNELS_H

#include "runtime/cpu/Kernels.h"
#include "runtime/cuda/CublasLtApi.h"
#include "runtime/cuda/CudnnApi.h"
#include "runtime/cuda/DriverApi.h"
#include "runtime/cuda/NcclApi.h"

#include <memory>
#include <string>
#include <vector>

namespace dtc::runtime::cuda {

/// What a kernel needs of its device: the driver, the stream its work
/// goes on, cuBLASLt and its workspace.
struct CudaContext {
  const DriverApi *driver = nullptr;
  CUstream stream = nullptr;
  const CublasLtApi *cublasLt = nullptr; // null: matrix products run on the host
  cublasLtHandle_t cublasLtHandle = nullptr;
  CUdeviceptr workspace = 0;
  size_t workspaceBytes = 0;
  CUdeviceptr status = 0; // the status word kernels set when their data is out of range
  const CudnnApi *cudnn = nullptr; // null: convolutions run on the host
  cudnnHandle_t cudnnHandle = nullptr;
  int sm = 0; // compute capability, 90 for sm_90
  /// The attention kernels allowed: DTC_ATTENTION_KERNELS=auto (cuDNN's
  /// where it takes the instruction, else dtc's), cudnn or flash.
  enum class AttentionKernels { Auto, Cudnn, Flash } attentionKernels = AttentionKernels::Auto;
};

/// `function` launched as `gpu` says (grid, block, its parameters' order,
/// zeroed outputs first, the context's status word) on buffers of
/// `inputs` and `outputs`' types.
std::unique_ptr<cpu::Kernel> makeGeneratedKernel(const CudaContext &context, CUfunction function,
                                                 const plan::GpuKernel &gpu,
                                                 const std::vector<plan::TensorType> &inputs,
                                                 const std::vector<plan::TensorType> &outputs,
                                                 std::string &error);

/// The matrix product through cuBLASLt (fp32, or bf16 with fp32
/// accumulation); null with `why` when cuBLASLt does not cover it (another
/// dtype, a partial batch broadcast, no algorithm).
std::unique_ptr<cpu::Kernel> makeGemmKernel(const CudaContext &context,
                                            const plan::MatMul &matmul,
                                            const std::vector<plan::TensorType> &inputs,
                                            const std::vector<plan::TensorType> &outputs,
                                            std::string &why);

/// A convolution or one of its gradients through cuDNN (fp32, or bf16
/// with fp32 accumulation; the forward's bias and relu after it); null
/// with `why` when cuDNN does not cover it (pads that differ between the
/// two sides of a dim, another dtype, no algorithm within the workspace).
std::unique_ptr<cpu::Kernel> makeConvKernel(const CudaContext &context,
                                            const plan::Instruction &inst,
                                            const std::vector<plan::TensorType> &inputs,
                                            const plan::TensorType &output, std::string &why);

/// Which kernels an attention instruction got: cuDNN's fused attention,
/// or (where cuDNN does not take it, `cudnnWhy`) dtc's flash kernels.
struct AttentionChoice {
  bool cudnn = false;
  std::string cudnnWhy;
};

/// attention or attention_backward through cuDNN's fused attention
/// (CudnnAttention.h; bf16), else the hand-written flash-attention kernels
/// (kernels/FlashAttention.cu: f32 by FMA, bf16 on tensor cores), as the
/// context's `attentionKernels` allows; either's scratch goes in the
/// context's workspace. Null with `why` when neither covers it (another
/// dtype, a head dim over 128, mismatched shapes, too little shared memory
/// or workspace).
std::unique_ptr<cpu::Kernel> makeAttentionKernel(const CudaContext &context,
                                                 const plan::Instruction &inst,
                                                 const std::vector<plan::TensorType> &inputs,
                                                 const std::vector<plan::TensorType> &outputs,
                                                 AttentionChoice &choice, std::string &why);

/// A collective through NCCL on `comm` (this rank `rank` of the group's
/// `size`, ranked row-major over the group's mesh axes sorted): all-reduces,
/// and all-gathers and reduce-scatters along a leading dim over axes
/// listed in order (NCCL's blocks are then the plan's parts); null with
/// `why` otherwise (the MPI kernel on host copies takes those). A
/// bucket's members (an input and an output each) are grouped calls, one
/// launch.
std::unique_ptr<cpu::Kernel> makeNcclKernel(const CudaContext &context, const NcclApi &nccl,
                                            ncclComm_t comm, const plan::Collective &collective,
                                            const std::vector<plan::TensorType> &inputs,
                                            const std::vector<plan::TensorType> &outputs,
                                            std::string &why);

/// `host` (a CPU kernel) run on host copies: the inputs (and outputs, which
/// a kernel may read) brought over when the stream is idle, the outputs
/// taken back.
std::unique_ptr<cpu::Kernel> makeHostStagedKernel(const CudaContext &context,
                                                  std::unique_ptr<cpu::Kernel> host,
                                                  const std::vector<plan::TensorType> &inputs,
                                                  const std::vector<plan::TensorType> &outputs);

} // namespace dtc::runtime::cuda

#endif // DTC_RUNTIME_CUDA_CUDAKERNELS_H
