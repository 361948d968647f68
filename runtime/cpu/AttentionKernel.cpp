//===- AttentionKernel.cpp - fused scaled dot-product attention -----------===//
//
// softmax(scale q k^T, masked) v without the scores of the whole batch in
// memory: per (leading index, block of query rows) the block's scores are
// one sgemm into a scratch tile of rows x Sk, softmaxed in place (its
// log-sum-exp kept per row), and multiplied into the output by another.
// The backward recomputes each block's probabilities from lse, as flash
// attention's does, and sums the key and value gradients over the blocks.
// 16-bit inputs are widened a matrix at a time and results rounded once.
// A bias (f32, broadcast to the scores) is added to each tile's scaled
// scores; a row it hides entirely (-inf) is 0, as a causal row with no key.
// With `bshd` (q, k, v and the output [..., S, H, D]) each head's rows are
// gathered into a matrix of their own and its results scattered back.
// `packed` q, k and v are one buffer [..., S, 3, H, D] ([..., S, H, 3, D]
// `interleaved`), each a piece of it (rows 3 H D apart), and the
// backward's gradients one such buffer.
// Grouped-query attention: k and v have G heads where q has H = G R, q's
// head h reading k's and v's head h / R; the backward sums each group's
// key and value gradients over its R query heads, a group per task.
//
//===----------------------------------------------------------------------===//
#include "plan/DType.h"
#include "runtime/cpu/BFloat16.h"
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/KernelSupport.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace dtc::runtime::cpu {
namespace {

/// Query rows per scratch tile: bounds the scratch at kRows x Sk floats.
constexpr int64_t kRows = 128;

/// The shapes of one attention: `batch` leading indices of [Sq, D] queries,
/// [Sk, D] keys and [Sk, Dv] values.
struct Dims {
  int64_t batch = 1, sq = 0, sk = 0, d = 0, dv = 0;
  double scale = 1;
  bool causal = false;
  /// [..., S, H, D] operands: leading index b is head b % heads of outer
  /// index b / heads.
  bool bshd = false;
  int64_t heads = 1;
  /// q, k and v pieces 0, 1 and 2 of one [..., S, 3, H, D] buffer
  /// ([..., S, H, 3, D] when interleaved).
  bool packed = false, interleaved = false;
  /// Grouped-query attention: q's heads per head of k and v (1 without),
  /// and k's and v's heads ([..., S, G, D] with bshd).
  int64_t group = 1, kvHeads = 1;
  /// With a bias: where each leading index's [Sq or 1, Sk] of it starts,
  /// and the step between its rows (0 when one row serves every query).
  std::vector<int64_t> biasAt;
  int64_t biasRow = 0;

  /// Keys query row i sees: the first visible(i) of them.
  int64_t visible(int64_t i) const {
    return causal ? std::clamp<int64_t>(i + sk - sq + 1, 0, sk) : sk;
  }
};

bool refuse(std::string &error, std::string message) {
  error = std::move(message);
  return false;
}

bool sameLead(const plan::TensorType &a, const plan::TensorType &b) {
  return a.shape_size() == b.shape_size() && a.shape_size() >= 2 &&
         std::equal(a.shape().begin(), a.shape().end() - 2, b.shape().begin());
}

/// q's heads per head of `kv` (heads first): 1 when their leading dims
/// are the same, R when they are but for kv's last, H / R (grouped-query
/// attention); 0 when neither.
int64_t groupOf(const plan::TensorType &q, const plan::TensorType &kv) {
  if (sameLead(q, kv))
    return 1;
  int r = q.shape_size();
  if (r < 3 || kv.shape_size() != r ||
      !std::equal(q.shape().begin(), q.shape().end() - 3, kv.shape().begin()))
    return 0;
  int64_t h = q.shape(r - 3), g = kv.shape(r - 3);
  return g > 0 && h % g == 0 ? h / g : 0;
}

/// `type` as [..., H, S, D]: its dims 3rd and 2nd from last swapped when
/// `bshd`.
plan::TensorType headsFirst(plan::TensorType type, bool bshd) {
  int r = type.shape_size();
  if (bshd && r >= 3) {
    int64_t s = type.shape(r - 3);
    type.set_shape(r - 3, type.shape(r - 2));
    type.set_shape(r - 2, s);
  }
  return type;
}

/// A packed q, k or v's type, [..., S, 3, H, D] ([..., S, H, 3, D]
/// `interleaved`), as one piece's [..., S, H, D].
plan::TensorType pieceOf(plan::TensorType type, bool packed, bool interleaved) {
  if (packed) {
    auto *shape = type.mutable_shape();
    shape->erase(shape->end() - (interleaved ? 2 : 3));
  }
  return type;
}

/// Reads q, k, v's shapes (and checks the rest against them).
bool readDims(const plan::Attention &attr, bool backward, const KernelTypes &types, Dims &dims,
              std::string &error) {
  dims.bshd = attr.bshd(), dims.packed = attr.packed(), dims.interleaved = attr.interleaved();
  if (dims.interleaved && !dims.packed)
    return refuse(error, "interleaved q, k and v must be packed");
  if (dims.packed) {
    const plan::TensorType &qkv = types.inputs[0];
    int r = qkv.shape_size();
    auto same = [&](const plan::TensorType &t) {
      return t.dtype() == qkv.dtype() && shapeOf(t) == shapeOf(qkv);
    };
    if (!dims.bshd || r < 4 || qkv.shape(r - (dims.interleaved ? 2 : 3)) != 3 ||
        !same(types.inputs[1]) || !same(types.inputs[2]))
      return refuse(error, "packed q, k and v " + shapeString(types.inputs[0]) + ", " +
                               shapeString(types.inputs[1]) + ", " +
                               shapeString(types.inputs[2]) + " are not one bshd buffer " +
                               (dims.interleaved ? "[..., S, H, 3, D]" : "[..., S, 3, H, D]"));
  }
  auto piece = [&](int i) {
    return headsFirst(pieceOf(types.inputs[size_t(i)], dims.packed, dims.interleaved), dims.bshd);
  };
  const plan::TensorType q = piece(0), k = piece(1), v = piece(2);
  for (const plan::TensorType *t : {&q, &k, &v})
    if (!checkDType(t->dtype(), {plan::F32, plan::BF16, plan::F16}, error))
      return false;
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    return refuse(error, "q, k and v must share one dtype");
  int r = q.shape_size();
  dims.group = groupOf(q, k);
  if (r < (dims.bshd ? 3 : 2) || dims.group == 0 || !sameLead(k, v) ||
      k.shape(r - 1) != q.shape(r - 1) || v.shape(r - 2) != k.shape(r - 2))
    return refuse(error, "shapes " + shapeString(types.inputs[0]) + ", " +
                             shapeString(types.inputs[1]) + ", " + shapeString(types.inputs[2]) +
                             (dims.bshd ? " are not q [..., Sq, H, D], k [..., Sk, G, D], "
                                          "v [..., Sk, G, Dv] (G dividing H)"
                                        : " are not q [..., H, Sq, D], k [..., G, Sk, D], "
                                          "v [..., G, Sk, Dv] (G dividing H)"));
  dims.heads = dims.bshd ? q.shape(r - 3) : 1;
  dims.kvHeads = dims.bshd ? k.shape(r - 3) : 1;
  Shape shape = shapeOf(q);
  dims.batch = product(shape, 0, size_t(r - 2));
  dims.sq = q.shape(r - 2), dims.d = q.shape(r - 1), dims.sk = k.shape(r - 2);
  dims.dv = v.shape(r - 1);
  dims.scale = attr.scale(), dims.causal = attr.causal();
  if (!(dims.scale > 0) || !std::isfinite(dims.scale))
    return refuse(error, "scale must be positive and finite");
  size_t biasInput = backward ? 6 : 3; // after q, k, v (and out, lse, grad_out)
  if (attr.bias() != (types.inputs.size() == biasInput + 1))
    return refuse(error, attr.bias() ? "the bias input is missing"
                                     : "an input past the last is not a bias");
  if (attr.bias()) {
    const plan::TensorType &bias = types.inputs[biasInput];
    bool fits = bias.dtype() == plan::F32 && bias.shape_size() == r &&
                bias.shape(r - 1) == dims.sk &&
                (bias.shape(r - 2) == 1 || bias.shape(r - 2) == dims.sq);
    for (int d = 0; fits && d < r - 2; ++d)
      fits = bias.shape(d) == 1 || bias.shape(d) == q.shape(d);
    if (!fits)
      return refuse(error, "bias " + std::string(plan::dtypeName(bias.dtype())) +
                               shapeString(bias) + " is not f32 broadcasting to the scores "
                               "[..., Sq, Sk] of q " + shapeString(q));
    dims.biasRow = bias.shape(r - 2) == 1 ? 0 : dims.sk;
    // Each leading index's offset: its digits over q's leading dims, a
    // bias dim of 1 contributing none.
    dims.biasAt.assign(size_t(dims.batch), 0);
    for (int64_t b = 0; b < dims.batch; ++b) {
      int64_t rest = b, stride = bias.shape(r - 2) * dims.sk, at = 0;
      for (int d = r - 3; d >= 0; --d) {
        int64_t digit = rest % q.shape(d);
        rest /= q.shape(d);
        if (bias.shape(d) != 1)
          at += digit * stride;
        stride *= bias.shape(d);
      }
      dims.biasAt[size_t(b)] = at;
    }
  }
  if (!fitsBlas({dims.sq, dims.sk, dims.d, dims.dv}))
    return refuse(error, "dims past 2^31");
  return true;
}

/// Whether `type` is `shape` in `dtype`.
bool isType(const plan::TensorType &type, const Shape &shape, plan::DType dtype) {
  return type.dtype() == dtype && shapeOf(type) == shape;
}

Shape withLast(const plan::TensorType &type, std::initializer_list<int64_t> last) {
  Shape shape = shapeOf(type);
  shape.resize(shape.size() - 2);
  shape.insert(shape.end(), last);
  return shape;
}

/// Where leading index b's [rows, cols] matrix of an operand lies: from
/// element `at`, its rows `ld` apart (cols, H x cols with bshd, 3 H x
/// cols for a packed piece).
struct Matrix {
  int64_t at = 0, ld = 0, rows = 0, cols = 0;
  bool dense() const { return ld == cols; }
};

/// `piece`: q's, k's or v's (0, 1, 2; their gradients' too), which are
/// pieces of one buffer when packed; -1 for the output and its gradient.
/// k's and v's `b` counts their own heads (b / group of q's).
Matrix matrixOf(const Dims &m, int64_t b, int64_t rows, int64_t cols, int piece = -1) {
  if (!m.bshd)
    return {b * rows * cols, cols, rows, cols};
  int64_t heads = piece > 0 ? m.kvHeads : m.heads;
  int64_t outer = b / heads, head = b % heads;
  if (m.packed && m.interleaved && piece >= 0)
    return {((outer * rows * m.heads + head) * 3 + piece) * cols, 3 * m.heads * cols, rows, cols};
  if (m.packed && piece >= 0)
    return {((outer * rows * 3 + piece) * m.heads + head) * cols, 3 * m.heads * cols, rows, cols};
  return {(outer * rows * heads + head) * cols, heads * cols, rows, cols};
}

float elementOf(plan::DType dtype, const void *data, int64_t i) {
  return dtype == plan::F32    ? static_cast<const float *>(data)[i]
         : dtype == plan::BF16 ? float(static_cast<const BFloat16 *>(data)[i])
                               : float(static_cast<const _Float16 *>(data)[i]);
}

/// Matrix `x` of a `dtype` buffer as dense floats: the buffer itself when
/// f32 and dense, else gathered (and widened) into `scratch`.
const float *asFloat(plan::DType dtype, const void *data, const Matrix &x,
                     std::vector<float> &scratch) {
  if (dtype == plan::F32 && x.dense())
    return static_cast<const float *>(data) + x.at;
  scratch.resize(size_t(x.rows * x.cols));
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t c = 0; c < x.cols; ++c)
      scratch[size_t(r * x.cols + c)] = elementOf(dtype, data, x.at + r * x.ld + c);
  return scratch.data();
}

/// Where a result for matrix `x` is computed: in the f32 buffer itself
/// when dense, else in `scratch` (then written by store).
float *resultIn(plan::DType dtype, void *data, const Matrix &x, std::vector<float> &scratch) {
  if (dtype == plan::F32 && x.dense())
    return static_cast<float *>(data) + x.at;
  scratch.resize(size_t(x.rows * x.cols));
  return scratch.data();
}

/// Writes the dense floats of matrix `x` into a `dtype` buffer (nothing
/// when resultIn gave the buffer itself).
void store(plan::DType dtype, const float *from, void *data, const Matrix &x) {
  if (dtype == plan::F32 && x.dense())
    return;
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t c = 0; c < x.cols; ++c) {
      int64_t i = x.at + r * x.ld + c;
      float v = from[r * x.cols + c];
      if (dtype == plan::F32)
        static_cast<float *>(data)[i] = v;
      else if (dtype == plan::BF16)
        static_cast<BFloat16 *>(data)[i] = BFloat16(v);
      else
        static_cast<_Float16 *>(data)[i] = _Float16(v);
    }
}

/// The scores of query rows [i0, i0 + rows) against the first `keys` keys,
/// scaled: s = scale q k^T, into `s` (rows x keys).
/// Plus the bias's rows for them (`bias`: the leading index's, or null).
void scores(const Dims &m, const float *q, const float *k, const float *bias, int64_t i0,
            int64_t rows, int64_t keys, float *s) {
  Gemm g;
  g.transB = true, g.M = rows, g.N = keys, g.K = m.d, g.lda = m.d, g.ldb = m.d;
  g.run(q + i0 * m.d, k, s);
  float scale = float(m.scale);
  for (int64_t e = 0; e < rows * keys; ++e)
    s[e] *= scale;
  if (bias)
    for (int64_t r = 0; r < rows; ++r) {
      const float *row = bias + (i0 + r) * m.biasRow;
      for (int64_t j = 0; j < keys; ++j)
        s[r * keys + j] += row[j];
    }
}

/// The forward on one leading index: out [Sq, Dv] and lse [Sq].
void forward(const Dims &m, const float *q, const float *k, const float *v, const float *bias,
             float *out, float *lse, std::vector<float> &tile) {
  for (int64_t i0 = 0; i0 < m.sq; i0 += kRows) {
    int64_t rows = std::min(kRows, m.sq - i0);
    int64_t keys = m.visible(i0 + rows - 1); // the block's last row sees the most
    tile.assign(size_t(rows * std::max<int64_t>(keys, 1)), 0.0f);
    float *s = tile.data();
    if (keys > 0)
      scores(m, q, k, bias, i0, rows, keys, s);
    for (int64_t r = 0; r < rows; ++r) {
      float *row = s + r * keys;
      int64_t n = m.visible(i0 + r);
      float top = n ? *std::max_element(row, row + n) : 0.0f;
      if (n == 0 || top == -std::numeric_limits<float>::infinity()) { // no key seen
        std::fill(row, row + keys, 0.0f);
        lse[i0 + r] = -std::numeric_limits<float>::infinity();
        continue;
      }
      double sum = 0;
      for (int64_t j = 0; j < n; ++j)
        sum += row[j] = std::exp(row[j] - top);
      float inv = float(1.0 / sum);
      for (int64_t j = 0; j < n; ++j)
        row[j] *= inv;
      std::fill(row + n, row + keys, 0.0f);
      lse[i0 + r] = top + float(std::log(sum));
    }
    float *o = out + i0 * m.dv;
    if (keys == 0) {
      std::fill(o, o + rows * m.dv, 0.0f);
      continue;
    }
    Gemm pv;
    pv.M = rows, pv.N = m.dv, pv.K = keys, pv.lda = keys, pv.ldb = m.dv;
    pv.run(s, v, o);
  }
}

/// The backward on one leading index: dq [Sq, D]; dk [Sk, D] and dv [Sk,
/// Dv] added to (summed over the blocks and a group's query heads).
void backward(const Dims &m, const float *q, const float *k, const float *v, const float *bias,
              const float *out, const float *lse, const float *dout, float *dq, float *dk,
              float *dv, std::vector<float> &p, std::vector<float> &dp) {
  float scale = float(m.scale);
  for (int64_t i0 = 0; i0 < m.sq; i0 += kRows) {
    int64_t rows = std::min(kRows, m.sq - i0);
    int64_t keys = m.visible(i0 + rows - 1);
    if (keys == 0) {
      std::fill(dq + i0 * m.d, dq + (i0 + rows) * m.d, 0.0f);
      continue;
    }
    p.resize(size_t(rows * keys));
    dp.resize(size_t(rows * keys));
    scores(m, q, k, bias, i0, rows, keys, p.data());
    for (int64_t r = 0; r < rows; ++r) {
      float *row = p.data() + r * keys;
      int64_t n = m.visible(i0 + r);
      float l = lse[i0 + r];
      for (int64_t j = 0; j < keys; ++j)
        row[j] = j < n && std::isfinite(l) ? std::exp(row[j] - l) : 0.0f;
    }
    const float *g = dout + i0 * m.dv;
    Gemm dV; // dv += p^T dout
    dV.transA = true, dV.M = keys, dV.N = m.dv, dV.K = rows, dV.lda = keys, dV.ldb = m.dv;
    dV.run(p.data(), g, dv, 1.0f);
    Gemm dP; // dp = dout v^T
    dP.transB = true, dP.M = rows, dP.N = keys, dP.K = m.dv, dP.lda = m.dv, dP.ldb = m.dv;
    dP.run(g, v, dp.data());
    for (int64_t r = 0; r < rows; ++r) {
      const float *o = out + (i0 + r) * m.dv, *go = g + r * m.dv;
      double delta = 0;
      for (int64_t c = 0; c < m.dv; ++c)
        delta += double(o[c]) * double(go[c]);
      float *ds = dp.data() + r * keys;
      const float *pr = p.data() + r * keys;
      for (int64_t j = 0; j < keys; ++j)
        ds[j] = scale * pr[j] * (ds[j] - float(delta));
    }
    Gemm dQ; // dq = ds k
    dQ.M = rows, dQ.N = m.d, dQ.K = keys, dQ.lda = keys, dQ.ldb = m.d;
    dQ.run(dp.data(), k, dq + i0 * m.d);
    Gemm dK; // dk += ds^T q
    dK.transA = true, dK.M = keys, dK.N = m.d, dK.K = rows, dK.lda = keys, dK.ldb = m.d;
    dK.run(dp.data(), q + i0 * m.d, dk, 1.0f);
  }
}

} // namespace

std::unique_ptr<Kernel> makeAttentionKernel(const plan::Instruction &inst,
                                            const KernelTypes &types, std::string &error) {
  Dims m;
  if (!readDims(inst.attention(), false, types, m, error))
    return nullptr;
  plan::DType dtype = types.inputs[0].dtype();
  const plan::TensorType q =
      headsFirst(pieceOf(types.inputs[0], m.packed, m.interleaved), m.bshd);
  if (!isType(headsFirst(types.outputs[0], m.bshd), withLast(q, {m.sq, m.dv}), dtype) ||
      !isType(types.outputs[1], withLast(q, {m.sq}), plan::F32))
    return fail(error, m.bshd ? "outputs must be out [..., Sq, H, Dv] in q's dtype and lse "
                                "[..., H, Sq] f32"
                              : "outputs must be out [..., Sq, Dv] in q's dtype and lse "
                                "[..., Sq] f32");
  return makeFunctionKernel([m, dtype](const void *const *in, void *const *outs,
                                       ThreadPool &pool) {
    SingleThreadedBlas single(pool);
    pool.parallelFor(m.batch, 1, [&](int64_t b0, int64_t b1) {
      std::vector<float> sq, sk, sv, so, tile;
      for (int64_t b = b0; b < b1; ++b) {
        Matrix out = matrixOf(m, b, m.sq, m.dv);
        const float *q = asFloat(dtype, in[0], matrixOf(m, b, m.sq, m.d, 0), sq);
        const float *k = asFloat(dtype, in[1], matrixOf(m, b / m.group, m.sk, m.d, 1), sk);
        const float *v = asFloat(dtype, in[2], matrixOf(m, b / m.group, m.sk, m.dv, 2), sv);
        float *o = resultIn(dtype, outs[0], out, so);
        const float *bias =
            m.biasAt.empty() ? nullptr : static_cast<const float *>(in[3]) + m.biasAt[size_t(b)];
        forward(m, q, k, v, bias, o, static_cast<float *>(outs[1]) + b * m.sq, tile);
        store(dtype, o, outs[0], out);
      }
    });
  });
}

std::unique_ptr<Kernel> makeAttentionBackwardKernel(const plan::Instruction &inst,
                                                    const KernelTypes &types,
                                                    std::string &error) {
  Dims m;
  if (!readDims(inst.attention_backward(), true, types, m, error))
    return nullptr;
  plan::DType dtype = types.inputs[0].dtype();
  const plan::TensorType q =
      headsFirst(pieceOf(types.inputs[0], m.packed, m.interleaved), m.bshd);
  Shape out = withLast(q, {m.sq, m.dv});
  if (!isType(headsFirst(types.inputs[3], m.bshd), out, dtype) ||
      !isType(headsFirst(types.inputs[5], m.bshd), out, dtype) ||
      !isType(types.inputs[4], withLast(q, {m.sq}), plan::F32))
    return fail(error, m.bshd ? "output and grad_output must be [..., Sq, H, Dv] in q's "
                                "dtype, lse [..., H, Sq] f32"
                              : "output and grad_output must be [..., Sq, Dv] in q's dtype, "
                                "lse [..., Sq] f32");
  for (size_t i = 0; i < types.outputs.size(); ++i)
    if (!isType(types.outputs[i], shapeOf(types.inputs[i]), dtype))
      return fail(error, m.packed ? "the gradient must have the packed q, k and v's type"
                                  : "the gradients must have q's, k's and v's types");
  return makeFunctionKernel([m, dtype](const void *const *in, void *const *outs,
                                       ThreadPool &pool) {
    SingleThreadedBlas single(pool);
    // A task per head of k and v: its group of query heads in turn, their
    // key and value gradients summed in place.
    pool.parallelFor(m.batch / m.group, 1, [&](int64_t g0, int64_t g1) {
      std::vector<float> s[6], grads[3], p, dp;
      for (int64_t kb = g0; kb < g1; ++kb) {
        Matrix kx = matrixOf(m, kb, m.sk, m.d, 1), vx = matrixOf(m, kb, m.sk, m.dv, 2);
        const float *k = asFloat(dtype, in[1], kx, s[1]);
        const float *v = asFloat(dtype, in[2], vx, s[2]);
        float *dk = resultIn(dtype, outs[m.packed ? 0 : 1], kx, grads[1]);
        float *dv = resultIn(dtype, outs[m.packed ? 0 : 2], vx, grads[2]);
        std::fill(dk, dk + kx.rows * kx.cols, 0.0f); // dense either way
        std::fill(dv, dv + vx.rows * vx.cols, 0.0f);
        for (int64_t b = kb * m.group; b < (kb + 1) * m.group; ++b) {
          Matrix qx = matrixOf(m, b, m.sq, m.d, 0), rows = matrixOf(m, b, m.sq, m.dv);
          const float *q = asFloat(dtype, in[0], qx, s[0]);
          const float *o = asFloat(dtype, in[3], rows, s[3]);
          const float *g = asFloat(dtype, in[5], rows, s[5]);
          const float *lse = static_cast<const float *>(in[4]) + b * m.sq;
          float *dq = resultIn(dtype, outs[0], qx, grads[0]);
          const float *bias = m.biasAt.empty()
                                  ? nullptr
                                  : static_cast<const float *>(in[6]) + m.biasAt[size_t(b)];
          backward(m, q, k, v, bias, o, lse, g, dq, dk, dv, p, dp);
          store(dtype, dq, outs[0], qx);
        }
        store(dtype, dk, outs[m.packed ? 0 : 1], kx);
        store(dtype, dv, outs[m.packed ? 0 : 2], vx);
      }
    });
  });
}

} // namespace dtc::runtime::cpu
