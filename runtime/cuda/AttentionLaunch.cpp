//===- AttentionLaunch.cpp - the attention kernels' launches --------------===//
#include "runtime/cuda/AttentionLaunch.h"
#include "runtime/cuda/kernels/AttentionTiles.h"

#include "plan/DType.h"

namespace dtc::runtime::cuda {
namespace {

using namespace attention;

/// Whether `t` is `dtype` of `shape`; else false with why naming `what`.
bool expect(const plan::TensorType &t, plan::DType dtype, const std::vector<int64_t> &shape,
            const char *what, std::string &why) {
  if (t.dtype() == dtype && std::vector<int64_t>(t.shape().begin(), t.shape().end()) == shape)
    return true;
  plan::TensorType want;
  want.set_dtype(dtype);
  for (int64_t n : shape)
    want.add_shape(n);
  why = std::string(what) + " is " + plan::typeToString(t) + ", expected " +
        plan::typeToString(want);
  return false;
}

AttentionLaunch launchOf(const AttentionDims &dims, const char *kernel, int64_t rows,
                         int sharedBytes, int64_t heads) {
  AttentionLaunch launch;
  launch.entry = std::string("dtc_attention_") + kernel + (dims.bf16 ? "_bf16" : "_f32");
  launch.rowsPerBlock = blockRows(dims.bf16);
  launch.gridX = unsigned((rows + launch.rowsPerBlock - 1) / launch.rowsPerBlock);
  launch.gridY = unsigned(heads);
  launch.threads = unsigned(threadsPerBlock(dims.bf16));
  launch.sharedBytes = unsigned(sharedBytes);
  return launch;
}

/// The bias's layout in `dims` (AttentionDims), for q's leading dims
/// `lead`; false with why where the kernels cannot index it.
bool biasLayout(const plan::TensorType &bias, const std::vector<int64_t> &lead, int64_t sq,
                int64_t sk, AttentionDims &dims, std::string &why) {
  size_t rank = lead.size() + 2;
  bool fits = bias.dtype() == plan::F32 && size_t(bias.shape_size()) == rank &&
              bias.shape(int(rank) - 1) == sk &&
              (bias.shape(int(rank) - 2) == 1 || bias.shape(int(rank) - 2) == sq);
  for (size_t d = 0; fits && d < lead.size(); ++d)
    fits = bias.shape(int(d)) == 1 || bias.shape(int(d)) == lead[d];
  if (!fits) {
    why = "bias " + plan::typeToString(bias) + " is not f32 broadcasting to the scores";
    return false;
  }
  int64_t rows = bias.shape(int(rank) - 2);
  dims.bias = true;
  dims.rowStride = rows == 1 ? 0 : sk;
  // Dims of 1 in q's lead are the bias's and broadcast alike: skip them.
  // The rest: an outer run then an inner run, each all kept or all
  // broadcast.
  std::vector<std::pair<int64_t, bool>> runs; // (size, the bias has it), merged
  for (size_t d = 0; d < lead.size(); ++d) {
    if (lead[d] == 1)
      continue;
    bool kept = bias.shape(int(d)) != 1;
    if (!runs.empty() && runs.back().second == kept)
      runs.back().first *= lead[d];
    else
      runs.push_back({lead[d], kept});
  }
  if (runs.size() > 2) {
    why = "bias " + plan::typeToString(bias) + ": its broadcast dims interleave with its others";
    return false;
  }
  int64_t matrix = rows * sk;
  dims.inner = runs.empty() ? 1 : runs.back().first;
  dims.innerStride = !runs.empty() && runs.back().second ? matrix : 0;
  bool innerKept = !runs.empty() && runs.back().second;
  dims.outerStride =
      runs.size() == 2 && runs.front().second ? matrix * (innerKept ? dims.inner : 1) : 0;
  return true;
}

} // namespace

namespace {
/// A packed attention's q, k and v (one [..., S, 3, H, D] buffer) as
/// pieces [..., S, H, D] of their own, and its backward's one output as
/// their three gradients.
bool unpack(bool backward, const plan::Attention &attention,
            std::vector<plan::TensorType> &inputs, std::vector<plan::TensorType> &outputs,
            std::string &why) {
  const plan::TensorType qkv = inputs.empty() ? plan::TensorType() : inputs[0];
  int r = qkv.shape_size(), three = attention.interleaved() ? 2 : 3; // where the 3 is
  auto same = [&](const plan::TensorType &t) {
    return t.dtype() == qkv.dtype() &&
           std::equal(t.shape().begin(), t.shape().end(), qkv.shape().begin(), qkv.shape().end());
  };
  if (!attention.bshd() || inputs.size() < 3 || r < 4 || qkv.shape(r - three) != 3 ||
      !same(inputs[1]) || !same(inputs[2]) ||
      (backward && (outputs.size() != 1 || !same(outputs[0])))) {
    why = std::string(backward ? "attention_backward" : "attention") +
          " packed: q, k and v must be one bshd buffer " +
          (attention.interleaved() ? "[..., S, H, 3, D]" : "[..., S, 3, H, D]") +
          (backward ? " and the one output its gradient" : "");
    return false;
  }
  plan::TensorType piece = qkv;
  piece.mutable_shape()->erase(piece.mutable_shape()->end() - three);
  for (size_t i = 0; i < 3; ++i)
    inputs[i] = piece;
  if (backward)
    outputs.assign(3, piece);
  return true;
}

bool headsFirstDims(bool backward, const plan::Attention &attention,
                    const std::vector<plan::TensorType> &operands,
                    const std::vector<plan::TensorType> &results, AttentionDims &dims,
                    std::string &why);
} // namespace

bool attentionDimsOf(bool backward, const plan::Attention &attention,
                     const std::vector<plan::TensorType> &operands,
                     const std::vector<plan::TensorType> &results, AttentionDims &dims,
                     std::string &why) {
  if (headsFirstDims(backward, attention, operands, results, dims, why))
    return true;
  if (attention.bshd())
    why += " (bshd: q, k, v, the output and the gradients read as [..., H, S, D])";
  return false;
}

namespace {
bool headsFirstDims(bool backward, const plan::Attention &attention,
                    const std::vector<plan::TensorType> &operands,
                    const std::vector<plan::TensorType> &results, AttentionDims &dims,
                    std::string &why) {
  const char *name = backward ? "attention_backward" : "attention";
  // bshd: q, k, v, out, grad_out and the gradients [..., S, H, D], read
  // below as [..., H, S, D] (the kernels index their rows by the layout).
  std::vector<plan::TensorType> inputs = operands, outputs = results;
  if (attention.interleaved() && !attention.packed()) {
    why = std::string(name) + " interleaved: q, k and v must be packed";
    return false;
  }
  if (attention.packed() && !unpack(backward, attention, inputs, outputs, why))
    return false;
  dims.packed = attention.packed();
  dims.interleaved = attention.interleaved();
  if (attention.bshd()) {
    auto swap = [&](plan::TensorType &t) {
      int r = t.shape_size();
      if (r < 3)
        return false;
      int64_t s = t.shape(r - 3);
      t.set_shape(r - 3, t.shape(r - 2));
      t.set_shape(r - 2, s);
      return true;
    };
    bool ok = true;
    for (size_t i : {0, 1, 2, 3, 5})
      if (i < inputs.size() && (i < 3 || backward))
        ok = swap(inputs[i]) && ok;
    for (size_t i = 0; i < outputs.size() && i < (backward ? 3u : 1u); ++i)
      ok = swap(outputs[i]) && ok;
    if (!ok) {
      why = std::string(name) + " bshd: q, k, v and the output need a rank of 3 or more";
      return false;
    }
    dims.bshd = true;
    dims.heads = inputs[0].shape(inputs[0].shape_size() - 3);
  }
  size_t wantIn = (backward ? 6 : 3) + (attention.bias() ? 1 : 0), wantOut = backward ? 3 : 2;
  if (inputs.size() != wantIn || outputs.size() != wantOut) {
    why = std::string(name) + " takes " + std::to_string(wantIn) + " inputs and gives " +
          std::to_string(wantOut) + " outputs, not " + std::to_string(inputs.size()) + " and " +
          std::to_string(outputs.size());
    return false;
  }
  const plan::TensorType &q = inputs[0];
  plan::DType dtype = q.dtype();
  if (dtype != plan::F32 && dtype != plan::BF16) {
    why = std::string("the attention kernels run f32 and bf16, not ") + plan::dtypeName(dtype);
    return false;
  }
  int rank = q.shape_size();
  if (rank < 2) {
    why = "q " + plan::typeToString(q) + " has no [sq, d] dims";
    return false;
  }
  std::vector<int64_t> lead(q.shape().begin(), q.shape().end() - 2);
  int64_t sq = q.shape(rank - 2), d = q.shape(rank - 1);
  const plan::TensorType &k = inputs[1], &v = inputs[2];
  if (k.shape_size() != rank || v.shape_size() != rank) {
    why = "q " + plan::typeToString(q) + ", k " + plan::typeToString(k) + " and v " +
          plan::typeToString(v) + " differ in rank";
    return false;
  }
  int64_t sk = k.shape(rank - 2), dv = v.shape(rank - 1);
  // Grouped-query attention: k's heads (its last leading dim) dividing q's.
  int64_t group = 1;
  if (rank >= 3 && k.shape(rank - 3) > 0 && k.shape(rank - 3) != lead.back() &&
      lead.back() % k.shape(rank - 3) == 0)
    group = lead.back() / k.shape(rank - 3);
  auto with = [&](int64_t rows, int64_t cols, bool kv = false) {
    std::vector<int64_t> shape = lead;
    if (kv)
      shape.back() /= group;
    shape.push_back(rows);
    shape.push_back(cols);
    return shape;
  };
  std::vector<int64_t> lseShape = lead;
  lseShape.push_back(sq);
  if (!expect(k, dtype, with(sk, d, true), "k", why) ||
      !expect(v, dtype, with(sk, dv, true), "v", why))
    return false;
  if (!backward) {
    if (!expect(outputs[0], dtype, with(sq, dv), "out", why) ||
        !expect(outputs[1], plan::F32, lseShape, "lse", why))
      return false;
  } else if (!expect(inputs[3], dtype, with(sq, dv), "out", why) ||
             !expect(inputs[4], plan::F32, lseShape, "lse", why) ||
             !expect(inputs[5], dtype, with(sq, dv), "grad_out", why) ||
             !expect(outputs[0], dtype, with(sq, d), "grad_q", why) ||
             !expect(outputs[1], dtype, with(sk, d, true), "grad_k", why) ||
             !expect(outputs[2], dtype, with(sk, dv, true), "grad_v", why)) {
    return false;
  }
  if (d > kMaxHeadDim || dv > kMaxHeadDim) {
    why = "head dims " + std::to_string(d) + " (q, k) and " + std::to_string(dv) +
          " (v): the attention kernels take at most " + std::to_string(kMaxHeadDim);
    return false;
  }
  int64_t bh = 1;
  for (int64_t n : lead)
    bh *= n;
  if (bh > 65535 || sq > (int64_t(1) << 30) || sk > (int64_t(1) << 30)) {
    why = std::to_string(bh) + " heads of " + std::to_string(sq) + " queries and " +
          std::to_string(sk) + " keys: the attention kernels take at most 65535 heads and 2^30 "
          "rows";
    return false;
  }
  if (attention.bias() && !biasLayout(inputs.back(), lead, sq, sk, dims, why))
    return false;
  dims.bh = bh;
  dims.group = group;
  dims.sq = sq;
  dims.sk = sk;
  dims.d = d;
  dims.dv = dv;
  dims.bf16 = dtype == plan::BF16;
  dims.causal = attention.causal();
  dims.scale = float(attention.scale());
  return true;
}
} // namespace

int64_t pieceOffset(const AttentionDims &dims, int piece) {
  if (!dims.packed)
    return 0;
  return piece * (dims.interleaved ? 1 : dims.heads) * dims.d; // packed: d == dv
}

AttentionLaunch forwardLaunch(const AttentionDims &dims) {
  return launchOf(dims, "forward", dims.sq,
                  forwardSmem(dims.bf16, int(dims.d), int(dims.dv)).bytes, dims.bh);
}

AttentionLaunch gradQLaunch(const AttentionDims &dims) {
  return launchOf(dims, "grad_q", dims.sq, gradQSmem(dims.bf16, int(dims.d), int(dims.dv)).bytes,
                  dims.bh);
}

AttentionLaunch gradKVLaunch(const AttentionDims &dims) {
  return launchOf(dims, "grad_kv", dims.sk,
                  gradKVSmem(dims.bf16, int(dims.d), int(dims.dv)).bytes, dims.bh / dims.group);
}

size_t attentionScratchBytes(const AttentionDims &dims) {
  return size_t(dims.bh) * size_t(dims.sq) * sizeof(float);
}

AttentionArgs::AttentionArgs(const AttentionDims &dims, bool backward,
                             const void *const *inputs, void *const *outputs, void *scratch)
    : sq_(int(dims.sq)), sk_(int(dims.sk)), d_(int(dims.d)), dv_(int(dims.dv)),
      causal_(dims.causal ? 1 : 0), heads_(dims.bshd ? int(dims.heads) : 0),
      pieces_(dims.packed ? 3 : 1), headStride_(dims.interleaved ? 3 : 1),
      group_(int(dims.group)), per_(int(dims.inner)),
      row_(int(dims.rowStride)),
      scale_(dims.scale), outer_(dims.outerStride), inner_(dims.innerStride) {
  auto address = [](const void *p) { return uint64_t(reinterpret_cast<uintptr_t>(p)); };
  // Packed, q, k and v (and their gradients) are pieces of one buffer.
  auto piece = [&](const void *buffer, int i) {
    return address(buffer) + uint64_t(pieceOffset(dims, i) * (dims.bf16 ? 2 : 4));
  };
  q_ = piece(inputs[0], 0);
  k_ = piece(inputs[1], 1);
  v_ = piece(inputs[2], 2);
  // The bias, last of the inputs (FlashAttention.cu's Bias).
  bias_ = dims.bias ? address(inputs[backward ? 6 : 3]) : 0;
  std::vector<void *> tail = {&sq_,    &sk_,         &d_,     &dv_,   &scale_,
                              &causal_, &heads_,      &pieces_, &headStride_, &group_,
                              &bias_,   &per_,        &row_,   &outer_, &inner_};
  auto with = [&](std::vector<void *> head) {
    head.insert(head.end(), tail.begin(), tail.end());
    return head;
  };
  if (!backward) { // outputs: out, lse
    out_ = address(outputs[0]);
    lse_ = address(outputs[1]);
    params_.push_back(with({&q_, &k_, &v_, &out_, &lse_}));
    return;
  }
  // Inputs q, k, v, out, lse, grad_out; outputs grad_q, grad_k, grad_v
  // (packed: one output, their pieces). grad_q's kernel writes Delta into
  // the scratch, grad_kv's reads it.
  out_ = address(inputs[3]);
  lse_ = address(inputs[4]);
  gradOut_ = address(inputs[5]);
  delta_ = address(scratch);
  int second = dims.packed ? 0 : 1; // the gradients' outputs: 0, 1, 2 or 0, 0, 0
  gradQ_ = piece(outputs[0], 0);
  gradK_ = piece(outputs[second], 1);
  gradV_ = piece(outputs[2 * second], 2);
  params_.push_back(with({&q_, &k_, &v_, &out_, &gradOut_, &lse_, &delta_, &gradQ_}));
  params_.push_back(with({&q_, &k_, &v_, &gradOut_, &lse_, &delta_, &gradK_, &gradV_}));
}

int keyTilesVisited(const AttentionDims &dims, int64_t q0) {
  TileRange r = keyTilesOf(int(q0), blockRows(dims.bf16), int(dims.sq), int(dims.sk), dims.causal);
  return r.end - r.begin;
}

int queryTilesVisited(const AttentionDims &dims, int64_t k0) {
  TileRange r =
      queryTilesOf(int(k0), blockRows(dims.bf16), int(dims.sq), int(dims.sk), dims.causal);
  return r.end - r.begin;
}

} // namespace dtc::runtime::cuda
