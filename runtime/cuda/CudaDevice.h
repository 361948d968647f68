//===- CudaDevice.h - a rank's NVIDIA GPU -----------------------*- C++ -*-===//
//
// The Device (runtime/Device.h) of the CUDA backend: the GPU's primary
// context, a compute stream and, for NCCL's collectives, communication
// streams beside it (plan/Streams.h), ordered by events where their work
// shares bytes (runtime/StreamOrder.h); the arena in one allocation
// (checked against the GPU's free memory first), the plan's generated
// kernels loaded from their PTX (the chip's own, or the newest older one:
// the driver compiles PTX for the GPU it finds), cuBLASLt for matrix
// products, and the CPU backend's kernel on host copies where no GPU
// kernel covers an instruction yet.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CUDA_CUDADEVICE_H
#define DTC_RUNTIME_CUDA_CUDADEVICE_H

#include "runtime/Device.h"

#include <memory>
#include <string>

namespace dtc::runtime::cuda {

/// The GPU a process of a job takes: its local rank (OMPI_COMM_WORLD_LOCAL_RANK,
/// SLURM_LOCALID, or `fallback`) modulo `gpus`.
int localGpu(int gpus, int fallback);

/// Opens GPU `ordinal`; null with a message saying what failed.
std::unique_ptr<Device> openCudaDevice(int ordinal, std::string &error);

} // namespace dtc::runtime::cuda

#endif // DTC_RUNTIME_CUDA_CUDADEVICE_H
