//===- CudnnAttention.cpp - cuDNN's fused attention -----------------------===//
//
// The one file that includes cudnn-frontend (header-only, from NVIDIA's
// nvidia-cudnn-frontend package; found by CMake, see docs/gpu-kernels.md),
// in its dynamic-loading mode: every cuDNN call goes through the handle
// CudnnApi opened, every CUDA runtime call through a libcudart the
// frontend opens itself by its soname (AttentionKernel.cpp preloads the
// toolkit's, for machines whose loader paths lack one).
//
// An instruction's leading dims are flattened into cuDNN's batch and
// heads: tensors are [1, bh, s, d], packed, as dtc lays them out; with a
// bias, [outer, inner, s, d] after the bias's runs of kept and broadcast
// dims (AttentionDims), the bias [outer or 1, inner or 1, Sq or 1, Sk].
// [..., S, H, D] operands (bshd) are [batch, H, s, d] with strides that
// step over the heads within each row (the bias then per batch and head,
// or one for all).
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/CudnnAttention.h"

#ifdef DTC_HAVE_CUDNN_FRONTEND
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include <cudnn_frontend.h>

#include <mutex>
#include <unordered_map>

// The library the frontend resolves cuDNN's entry points in: the one
// CudnnApi opened (set before any graph is made).
namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr;
} // namespace cudnn_frontend
#endif

namespace dtc::runtime::cuda {

#ifdef DTC_HAVE_CUDNN_FRONTEND
namespace fe = cudnn_frontend;

namespace {

// Tensor ids in the variant pack: the instruction's operands in order.
enum Uid : int64_t { Q = 1, K, V, Out, Lse, GradOut, GradQ, GradK, GradV, Bias };

/// The frontend's errors and exceptions as dtc's `why`.
bool good(fe::error_t status, const char *what, std::string &why) {
  if (status.is_good())
    return true;
  why = std::string(what) + ": " + status.get_message();
  return false;
}

} // namespace

bool cudnnAttentionBuilt() { return true; }

struct CudnnAttention::Graph {
  fe::graph::Graph graph;
  bool backward = false, bias = false;
  /// Packed: where k and v (and their gradients) start in q's buffer, in
  /// bytes (AttentionDims.packed).
  bool packed = false;
  int64_t kBytes = 0, vBytes = 0;
};

CudnnAttention::CudnnAttention(std::unique_ptr<Graph> graph) : graph_(std::move(graph)) {}
CudnnAttention::~CudnnAttention() = default;

std::unique_ptr<CudnnAttention> CudnnAttention::describe(const CudnnApi &api,
                                                         const AttentionDims &dims,
                                                         bool backward, int sm,
                                                         std::string &why) {
  if (!dims.bf16) {
    why = "cuDNN's fused attention runs bf16 and f16, not f32";
    return nullptr;
  }
  if (dims.d % 8 || dims.dv % 8) {
    why = "cuDNN's fused attention needs head dims that are multiples of 8 (here " +
          std::to_string(dims.d) + " and " + std::to_string(dims.dv) + ")";
    return nullptr;
  }
  if (dims.causal && dims.sq > dims.sk) {
    // dtc's rows that see no key are zeros with lse -inf; cuDNN's are not.
    why = "a causal mask with more queries than keys hides every key from some queries";
    return nullptr;
  }
  if (dims.bh == 0 || dims.sq == 0 || dims.sk == 0) {
    why = "an empty attention";
    return nullptr;
  }
  if (dims.bshd && dims.bias && (dims.innerStride || dims.outerStride) &&
      dims.inner != dims.heads) {
    why = "a bias that is not per batch and head of [batch, seq, heads, dim] operands";
    return nullptr;
  }
  static std::once_flag once;
  std::call_once(once, [&] { fe::cudnn_dlhandle = api.library; });

  auto graph = std::make_unique<Graph>();
  graph->backward = backward;
  graph->bias = dims.bias;
  graph->packed = dims.packed;
  graph->kBytes = pieceOffset(dims, 1) * 2, graph->vBytes = pieceOffset(dims, 2) * 2; // bf16
  fe::graph::Graph &g = graph->graph;
  g.set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  if (sm > 0)
    g.set_sm_version(sm);
  // cuDNN's batch and heads: [batch, seq, heads, dim] operands' (bshd);
  // else the bias's outer and inner runs of heads (AttentionDims) when
  // there is one, else one batch of every head.
  const int64_t heads = dims.bshd ? dims.heads : dims.bias ? dims.inner : dims.bh,
                batch = dims.bh / heads;
  // Grouped-query attention: k and v (and their gradients) have heads /
  // group heads, q's head h reading their h / group, as cuDNN groups them.
  if (heads % dims.group) {
    why = "grouped-query attention whose bias splits a group of heads";
    return nullptr;
  }
  const int64_t kvHeads = heads / dims.group;
  // q, k, v, the output and the gradients, [rows, cols] per batch and head;
  // a packed buffer's pieces (q, k, v and their gradients) rows 3 H cols
  // apart.
  auto strides = [&](int64_t rows, int64_t cols, bool piece = false,
                     bool kv = false) -> std::vector<int64_t> {
    int64_t pieces = piece && dims.packed ? 3 : 1, h = kv ? kvHeads : heads;
    int64_t headStride = piece && dims.interleaved ? 3 * cols : cols; // [.., S, H, 3, D]
    if (dims.bshd)
      return {rows * pieces * h * cols, headStride, pieces * h * cols, 1};
    return {h * rows * cols, rows * cols, cols, 1};
  };
  auto tensor = [&](const char *name, Uid uid, int64_t rows, int64_t cols, bool piece = false,
                    bool kv = false) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({batch, kv ? kvHeads : heads, rows, cols})
                        .set_stride(strides(rows, cols, piece, kv)));
  };
  auto lse = [&](const std::shared_ptr<fe::graph::Tensor_attributes> &t) {
    t->set_uid(Lse)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({batch, heads, dims.sq, 1})
        .set_stride({heads * dims.sq, dims.sq, 1, 1});
  };
  // The bias: f32 [batch or 1, heads or 1, Sq or 1, Sk].
  std::shared_ptr<fe::graph::Tensor_attributes> bias;
  if (dims.bias) {
    int64_t rows = dims.rowStride ? dims.sq : 1;
    bias = g.tensor(fe::graph::Tensor_attributes()
                        .set_name("bias")
                        .set_uid(Bias)
                        .set_data_type(fe::DataType_t::FLOAT)
                        .set_dim({dims.outerStride ? batch : 1, dims.innerStride ? heads : 1,
                                  rows, dims.sk})
                        .set_stride({dims.outerStride ? dims.outerStride : rows * dims.sk,
                                     dims.innerStride ? dims.innerStride : rows * dims.sk,
                                     dims.rowStride ? dims.rowStride : dims.sk, 1}));
  }
  auto q = tensor("q", Q, dims.sq, dims.d, true),
       k = tensor("k", K, dims.sk, dims.d, true, true),
       v = tensor("v", V, dims.sk, dims.dv, true, true);
  // dtc's causal mask is aligned to the last key (query i of sq sees keys
  // up to i + sk - sq): cuDNN's bottom-right diagonal, its top-left one
  // when sq == sk (the same mask, and the engines' oldest).
  auto alignment = dims.sq == dims.sk ? fe::DiagonalAlignment_t::TOP_LEFT
                                      : fe::DiagonalAlignment_t::BOTTOM_RIGHT;
  try {
    if (!backward) {
      auto options = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(
          true);
      options.set_attn_scale(dims.scale);
      if (dims.causal)
        options.set_diagonal_alignment(alignment).set_diagonal_band_right_bound(0);
      if (bias)
        options.set_bias(bias);
      auto [out, stats] = g.sdpa(q, k, v, options);
      out->set_output(true).set_uid(Out).set_dim({batch, heads, dims.sq, dims.dv}).set_stride(
          strides(dims.sq, dims.dv));
      stats->set_output(true);
      lse(stats);
    } else {
      auto out = tensor("out", Out, dims.sq, dims.dv);
      auto gradOut = tensor("grad_out", GradOut, dims.sq, dims.dv);
      auto stats = g.tensor(fe::graph::Tensor_attributes().set_name("lse"));
      lse(stats);
      auto options = fe::graph::SDPA_backward_attributes().set_name("attention_backward");
      options.set_attn_scale(dims.scale);
      if (dims.causal)
        options.set_diagonal_alignment(alignment).set_diagonal_band_right_bound(0);
      if (bias)
        options.set_bias(bias);
      auto [dq, dk, dv] = g.sdpa_backward(q, k, v, out, gradOut, stats, options);
      auto written = [&](const std::shared_ptr<fe::graph::Tensor_attributes> &t, Uid uid,
                         int64_t rows, int64_t cols, bool kv) {
        t->set_output(true)
            .set_uid(uid)
            .set_dim({batch, kv ? kvHeads : heads, rows, cols})
            .set_stride(strides(rows, cols, true, kv));
      };
      written(dq, GradQ, dims.sq, dims.d, false);
      written(dk, GradK, dims.sk, dims.d, true);
      written(dv, GradV, dims.sk, dims.dv, true);
    }
    if (!good(g.validate(), "cuDNN's fused attention", why))
      return nullptr;
  } catch (const std::exception &e) {
    why = std::string("cuDNN's fused attention: ") + e.what();
    return nullptr;
  }
  return std::unique_ptr<CudnnAttention>(new CudnnAttention(std::move(graph)));
}

bool CudnnAttention::build(cudnnHandle_t handle, std::string &why) {
  fe::graph::Graph &g = graph_->graph;
  try {
    return good(g.build_operation_graph(handle), "cuDNN's operation graph", why) &&
           good(g.create_execution_plans({fe::HeurMode_t::A}), "cuDNN's heuristics", why) &&
           good(g.check_support(handle), "no cuDNN engine takes it", why) &&
           good(g.build_plans(handle), "building cuDNN's plan", why);
  } catch (const std::exception &e) {
    why = std::string("cuDNN's fused attention: ") + e.what();
    return false;
  }
}

int64_t CudnnAttention::workspaceBytes() const {
  int64_t bytes = 0;
  if (graph_->graph.get_workspace_size(bytes).is_bad())
    return -1;
  return bytes;
}

bool CudnnAttention::run(cudnnHandle_t handle, const void *const *inputs, void *const *outputs,
                         void *workspace, std::string &error) const {
  std::unordered_map<int64_t, void *> pack;
  int64_t uid = Q;
  int n = graph_->backward ? 6 : 3;
  for (int i = 0; i < n; ++i)
    pack[uid++] = const_cast<void *>(inputs[i]);
  int results = graph_->backward ? (graph_->packed ? 1 : 3) : 2;
  for (int i = 0; i < results; ++i)
    pack[uid++] = outputs[i];
  if (graph_->packed) { // k and v (their gradients) are pieces of q's (its gradient's) buffer
    auto at = [](void *p, int64_t bytes) { return static_cast<char *>(p) + bytes; };
    pack[K] = at(pack[Q], graph_->kBytes), pack[V] = at(pack[Q], graph_->vBytes);
    if (graph_->backward)
      pack[GradK] = at(pack[GradQ], graph_->kBytes), pack[GradV] = at(pack[GradQ], graph_->vBytes);
  }
  if (graph_->bias)
    pack[Bias] = const_cast<void *>(inputs[n]);
  try {
    return good(graph_->graph.execute(handle, pack, workspace), "cuDNN's fused attention", error);
  } catch (const std::exception &e) {
    error = std::string("cuDNN's fused attention: ") + e.what();
    return false;
  }
}

#else // built without cudnn-frontend's headers

bool cudnnAttentionBuilt() { return false; }

struct CudnnAttention::Graph {};
CudnnAttention::CudnnAttention(std::unique_ptr<Graph> graph) : graph_(std::move(graph)) {}
CudnnAttention::~CudnnAttention() = default;

std::unique_ptr<CudnnAttention> CudnnAttention::describe(const CudnnApi &, const AttentionDims &,
                                                         bool, int, std::string &why) {
  why = "dtc was built without cudnn-frontend's headers (pip install nvidia-cudnn-frontend)";
  return nullptr;
}
bool CudnnAttention::build(cudnnHandle_t, std::string &why) { return false; }
int64_t CudnnAttention::workspaceBytes() const { return -1; }
bool CudnnAttention::run(cudnnHandle_t, const void *const *, void *const *, void *,
                         std::string &error) const {
  return false;
}

#endif

} // namespace dtc::runtime::cuda
