//===- CudnnAttention.h - cuDNN's fused attention -----------------*- C++ -*-===//
//
// attention and attention_backward through cuDNN's fused scaled-dot-product
// attention: the graph NVIDIA's cudnn-frontend describes (its sdpa and
// sdpa_backward nodes, which cuDNN's runtime fusion engines take), built
// once per instruction, run on the handle's stream. The frontend opens
// libcudnn through the handle CudnnApi holds, so nothing CUDA is linked.
// Its types stay in CudnnAttention.cpp, the one file that includes it.
//
// cuDNN's softmax statistics are dtc's lse (the log-sum-exp of each row's
// scaled, masked scores, natural log, f32), so either engine's forward
// feeds either's backward.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CUDA_CUDNNATTENTION_H
#define DTC_RUNTIME_CUDA_CUDNNATTENTION_H

#include "runtime/cuda/AttentionLaunch.h"
#include "runtime/cuda/CudnnApi.h"

#include <cstdint>
#include <memory>
#include <string>

namespace dtc::runtime::cuda {

/// Whether dtc was built with cudnn-frontend's headers.
bool cudnnAttentionBuilt();

class CudnnAttention {
public:
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention &) = delete;
  CudnnAttention &operator=(const CudnnAttention &) = delete;

  /// The graph of `dims` (backward: q, k, v, out, lse, grad_out -> grad_q,
  /// grad_k, grad_v), validated by the frontend for a GPU of compute
  /// capability `sm` (90: sm_90); null with `why` where cuDNN's fused
  /// attention does not take it: f32 (it runs bf16 and f16 only), head
  /// dims not a multiple of 8, a causal mask hiding every key from some
  /// query (more queries than keys), or what the frontend refuses.
  static std::unique_ptr<CudnnAttention> describe(const CudnnApi &api, const AttentionDims &dims,
                                                  bool backward, int sm, std::string &why);

  /// cuDNN's execution plan for `handle`'s GPU (its heuristics' first
  /// that the GPU supports); false with `why` when no engine takes the
  /// graph.
  bool build(cudnnHandle_t handle, std::string &why);

  /// The device scratch the built plan needs.
  int64_t workspaceBytes() const;

  /// One run on the handle's current stream, operands in the
  /// instruction's order.
  bool run(cudnnHandle_t handle, const void *const *inputs, void *const *outputs,
           void *workspace, std::string &error) const;

private:
  struct Graph;
  explicit CudnnAttention(std::unique_ptr<Graph> graph);
  std::unique_ptr<Graph> graph_;
};

} // namespace dtc::runtime::cuda

#endif // DTC_RUNTIME_CUDA_CUDNNATTENTION_H
