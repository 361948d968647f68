//===- FlashAttentionPtx.h - the attention kernels' PTX ----------*- C++ -*-===//
//
// FlashAttention.cu compiled by nvcc for compute_80 (the driver JIT-compiles
// it for sm_80 and newer), embedded at build time (cmake/EmbedPtx.cmake).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CUDA_KERNELS_FLASHATTENTIONPTX_H
#define DTC_RUNTIME_CUDA_KERNELS_FLASHATTENTIONPTX_H

namespace dtc::runtime::cuda {

/// The PTX text, NUL-terminated, as cuModuleLoadData takes it.
const char *flashAttentionPtx();

} // namespace dtc::runtime::cuda

#endif // DTC_RUNTIME_CUDA_KERNELS_FLASHATTENTIONPTX_H
