//===- AttentionLaunch.h - the attention kernels' launches -------*- C++ -*-===//
//
// Host-side arithmetic for FlashAttention.cu, with no CUDA types so that it
// is checked without a GPU (dtc-cuda-host-tests): an instruction's dims read
// from its operands (refused, with why, where the kernels do not cover
// them), and each kernel's entry point, grid, block and dynamic shared
// memory, from the tiles of kernels/AttentionTiles.h that the kernels use.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CUDA_ATTENTIONLAUNCH_H
#define DTC_RUNTIME_CUDA_ATTENTIONLAUNCH_H

#include "plan.pb.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dtc::runtime::cuda {

/// An attention instruction's problem: bh (the leading dims flattened)
/// heads of sq queries and sk keys, head dims d (q, k) and dv (v, out).
struct AttentionDims {
  int64_t bh = 0, sq = 0, sk = 0, d = 0, dv = 0;
  bool bf16 = false, causal = false;
  float scale = 1.f;
  /// q, k, v, out and the gradients [..., S, H, D]: head bh's row i of a
  /// [rows, cols] operand at ((bh / heads * rows + i) * heads + bh % heads)
  /// * cols, rows heads * cols apart. Else [..., H, S, D]: at (bh * rows +
  /// i) * cols (heads 1).
  bool bshd = false;
  int64_t heads = 1;
  /// q, k, v and their gradients pieces 0, 1 and 2 of one [..., S, 3, H,
  /// D] buffer (Attention.packed, with bshd): their rows 3 H cols apart,
  /// k's and v's from H D and 2 H D elements on (pieceOffset).
  bool packed = false;
  /// Packed as [..., S, H, 3, D] (Attention.interleaved): head h's piece at
  /// (3 h + piece) D of a row, so each piece's heads 3 D apart.
  bool interleaved = false;
  /// Grouped-query attention: q's heads per head of k and v, which have
  /// leading dims of q's but for the last (heads), divided by it; q's head
  /// bh reads their head bh / group. 1 otherwise.
  int64_t group = 1;
  /// The bias (f32 [..., Sq or 1, Sk]), if any, as the kernels index it:
  /// head h's starts at (h / inner) * outerStride + (h % inner) *
  /// innerStride, its row i at i * rowStride (0: one row for all). The
  /// leading dims split into an outer and an inner run, each all the
  /// bias's or all broadcast (1): [B, H] with [B, 1], [1, H], [1, 1] or
  /// [B, H] biases, and any rank-3 one.
  bool bias = false;
  int64_t inner = 1, outerStride = 0, innerStride = 0, rowStride = 0;
};

/// One kernel launch: grid x over row tiles, y over bh.
struct AttentionLaunch {
  std::string entry; // the kernel's name in the PTX
  unsigned gridX = 0, gridY = 0, threads = 0;
  unsigned sharedBytes = 0; // dynamic
  int rowsPerBlock = 0;     // queries (forward, grad_q) or keys (grad_kv) per block
};

/// The dims of attention (`backward` false: inputs q, k, v; outputs out,
/// lse) or attention_backward (inputs q, k, v, out, lse, grad_out; outputs
/// grad_q, grad_k, grad_v), each with its bias last when it has one; false
/// with `why` for what the kernels do not cover: dtypes other than f32 and
/// bf16, head dims over 128, shapes that disagree, more than 65535 heads,
/// a bias whose broadcast dims interleave with its others. With bshd
/// (Attention.bshd) q, k, v, the output and the gradients are [..., S, H,
/// D]; packed (Attention.packed), q, k and v one [..., S, 3, H, D] buffer
/// and the backward's one output their gradients.
bool attentionDimsOf(bool backward, const plan::Attention &attention,
                     const std::vector<plan::TensorType> &inputs,
                     const std::vector<plan::TensorType> &outputs, AttentionDims &dims,
                     std::string &why);

/// Where piece `piece` (q 0, k 1, v 2) starts in a packed buffer, in
/// elements; 0 when not packed.
int64_t pieceOffset(const AttentionDims &dims, int piece);

/// The forward kernel's launch.
AttentionLaunch forwardLaunch(const AttentionDims &dims);
/// The backward's first kernel: grad_q, and Delta into scratch.
AttentionLaunch gradQLaunch(const AttentionDims &dims);
/// The backward's second: grad_k and grad_v, reading Delta (a block per
/// key tile of each head of k and v).
AttentionLaunch gradKVLaunch(const AttentionDims &dims);

/// The backward's scratch: Delta, a float per query row.
size_t attentionScratchBytes(const AttentionDims &dims);

/// The arguments of an instruction's launches (forwardLaunch's, or
/// gradQLaunch's then gradKVLaunch's) in their entry points' order
/// (FlashAttention.cu: DTC_ATTENTION_ENTRIES), as cuLaunchKernel takes
/// them: from the instruction's inputs and outputs (device addresses;
/// packed, each of q, k and v at its piece) and the backward's scratch
/// (attentionScratchBytes).
class AttentionArgs {
public:
  AttentionArgs(const AttentionDims &dims, bool backward, const void *const *inputs,
                void *const *outputs, void *scratch);
  AttentionArgs(const AttentionArgs &) = delete;
  AttentionArgs &operator=(const AttentionArgs &) = delete;

  /// The kernel parameters of launch `i` (0, or 0 and 1 backward).
  void **params(size_t i) { return params_[i].data(); }

private:
  uint64_t q_ = 0, k_ = 0, v_ = 0, out_ = 0, lse_ = 0, gradOut_ = 0, delta_ = 0, gradQ_ = 0,
           gradK_ = 0, gradV_ = 0, bias_ = 0;
  int sq_, sk_, d_, dv_, causal_, heads_, pieces_, headStride_, group_, per_, row_;
  float scale_;
  long long outer_, inner_;
  std::vector<std::vector<void *>> params_;
};

/// The key tiles a forward or grad_q block starting at query q0 visits
/// (causal masking skips those no row of it sees).
int keyTilesVisited(const AttentionDims &dims, int64_t q0);
/// The query tiles a grad_kv block starting at key k0 visits.
int queryTilesVisited(const AttentionDims &dims, int64_t k0);

} // namespace dtc::runtime::cuda

#endif // DTC_RUNTIME_CUDA_ATTENTIONLAUNCH_H
