//===- AttentionReference.h - attention by its definition, in double -*- C++ -*-===//
//
// What the CPU and GPU attention kernel tests compare against: the plan's
// attention and attention_backward (plan.proto: Attention) written out
// row by row in double, the shapes both tests run, and the helpers that
// move values in and out of f32 and bf16 bytes.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_TESTS_UNIT_ATTENTIONREFERENCE_H
#define DTC_TESTS_UNIT_ATTENTIONREFERENCE_H

#include "runtime/cpu/BFloat16.h"

#include "plan/DType.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace dtc::attentiontest {

using Values = std::vector<float>;

struct Case {
  std::vector<int64_t> lead;
  int64_t sq, sk, d, dv;
  bool causal;
  plan::DType dtype;
  /// The bias's shape ([..., Sq or 1, Sk], each leading dim lead's or 1);
  /// empty: no bias.
  std::vector<int64_t> bias = {};
  /// Grouped-query attention: q's heads (lead's last) per head of k and v.
  int64_t group = 1;

  /// k's and v's leading dims: lead with its last divided by the group.
  std::vector<int64_t> kvLead() const {
    std::vector<int64_t> l = lead;
    l.back() /= group;
    return l;
  }
  int64_t kvHeads() const { return lead.back() / group; }

  /// Where the bias's value for head b (over lead, flattened), query i and
  /// key j is.
  size_t biasIndex(int64_t b, int64_t i, int64_t j) const {
    size_t r = lead.size();
    int64_t rows = bias[r], at = (rows == 1 ? 0 : i) * sk + j, stride = rows * sk;
    for (size_t d = r; d-- > 0;) {
      int64_t digit = b % lead[d];
      b /= lead[d];
      if (bias[d] != 1)
        at += digit * stride;
      stride *= bias[d];
    }
    return size_t(at);
  }
  int64_t biasSize() const {
    int64_t n = 1;
    for (int64_t x : bias)
      n *= x;
    return n;
  }

  int64_t bh() const {
    int64_t n = 1;
    for (int64_t x : lead)
      n *= x;
    return n;
  }
  plan::TensorType type(std::vector<int64_t> last, plan::DType of, bool kv = false) const {
    plan::TensorType t;
    t.set_dtype(of);
    for (int64_t x : kv ? kvLead() : lead)
      t.add_shape(x);
    for (int64_t x : last)
      t.add_shape(x);
    return t;
  }
  std::string name() const {
    return std::string(plan::dtypeName(dtype)) + " bh " + std::to_string(bh()) + " sq " +
           std::to_string(sq) + " sk " + std::to_string(sk) + " d " + std::to_string(d) +
           " dv " + std::to_string(dv) + (causal ? " causal" : "") +
           (group > 1 ? " group " + std::to_string(group) : "") +
           (bias.empty() ? "" : " bias " + shapeName(bias));
  }
  static std::string shapeName(const std::vector<int64_t> &shape) {
    std::string s;
    for (int64_t x : shape)
      s += (s.empty() ? "" : "x") + std::to_string(x);
    return s;
  }
};

inline std::vector<Case> cases() {
  std::vector<Case> all;
  for (plan::DType dtype : {plan::F32, plan::BF16}) {
    all.push_back({{1}, 1, 1, 64, 64, false, dtype});
    all.push_back({{2, 3}, 17, 17, 64, 64, true, dtype});
    all.push_back({{2}, 129, 129, 128, 128, true, dtype});
    all.push_back({{2}, 65, 129, 128, 128, false, dtype});
    all.push_back({{2}, 100, 37, 40, 40, true, dtype});  // rows 0..62 see no key
    all.push_back({{2}, 37, 100, 64, 40, true, dtype});  // Sq < Sk
    all.push_back({{1}, 200, 200, 80, 80, false, dtype});
    all.push_back({{1}, 130, 130, 96, 96, true, dtype});
    all.push_back({{3}, 64, 64, 32, 32, true, dtype});
    all.push_back({{1}, 33, 70, 17, 9, false, dtype});    // odd head dims
    all.push_back({{1}, 1024, 1024, 64, 64, true, dtype}); // GPT-2's
    // Biases: BERT's padding mask [B, 1, 1, Sk]; a full one per query
    // (a sliding window, a position bias) with a row hidden entirely; one
    // per head; one beside a causal mask.
    all.push_back({{2, 3}, 17, 17, 64, 64, false, dtype, {2, 1, 1, 17}});
    all.push_back({{2}, 65, 129, 64, 64, false, dtype, {1, 65, 129}});
    all.push_back({{2, 2}, 33, 40, 32, 32, false, dtype, {1, 2, 33, 40}});
    all.push_back({{2}, 37, 100, 64, 40, true, dtype, {2, 1, 100}});
    // Grouped-query attention: 6 query heads on 2 key-value heads (Llama's
    // and Mistral's layout), causal and with a padding mask; multi-query
    // (one key-value head).
    all.push_back({{2, 6}, 70, 70, 64, 64, true, dtype, {}, 3});
    all.push_back({{1, 4}, 33, 90, 32, 32, false, dtype, {1, 1, 1, 90}, 4});
  }
  return all;
}

/// Whether q, k and v of `c` can be one packed [..., S, 3, H, D] buffer.
inline bool packable(const Case &c) { return c.sq == c.sk && c.d == c.dv && c.group == 1; }

inline float rounded(float x, plan::DType dtype) {
  return dtype == plan::BF16 ? float(runtime::cpu::BFloat16(x)) : x;
}

inline Values random(size_t n, float range, plan::DType dtype, std::mt19937 &rng) {
  std::uniform_real_distribution<float> u(-range, range);
  Values v(n);
  for (float &x : v)
    x = rounded(u(rng), dtype);
  return v;
}

inline std::vector<char> bytesOf(const Values &v, plan::DType dtype) {
  std::vector<char> bytes(v.size() * size_t(plan::dtypeBytes(dtype)));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == plan::BF16) {
      runtime::cpu::BFloat16 b(v[i]);
      std::memcpy(bytes.data() + 2 * i, &b.bits, 2);
    } else {
      std::memcpy(bytes.data() + 4 * i, &v[i], 4);
    }
  }
  return bytes;
}

inline Values valuesOf(const std::vector<char> &bytes, plan::DType dtype) {
  size_t n = bytes.size() / size_t(plan::dtypeBytes(dtype));
  Values v(n);
  for (size_t i = 0; i < n; ++i) {
    if (dtype == plan::BF16) {
      runtime::cpu::BFloat16 b;
      std::memcpy(&b.bits, bytes.data() + 2 * i, 2);
      v[i] = float(b);
    } else {
      std::memcpy(&v[i], bytes.data() + 4 * i, 4);
    }
  }
  return v;
}

/// The plan's definition in double: out, lse of each row.
struct Reference {
  std::vector<double> out, lse;
  std::vector<double> dq, dk, dv;
};

inline bool visible(const Case &c, int64_t i, int64_t j) { return !c.causal || j <= i + c.sk - c.sq; }

/// The bias's term for head b, query i, key j (0 without a bias).
inline double biasOf(const Case &c, const Values &bias, int64_t b, int64_t i, int64_t j) {
  return c.bias.empty() ? 0.0 : double(bias[c.biasIndex(b, i, j)]);
}

inline Reference forwardReference(const Case &c, double scale, const Values &q, const Values &k,
                           const Values &v, const Values &bias = {}) {
  Reference r;
  r.out.assign(size_t(c.bh() * c.sq * c.dv), 0.0);
  r.lse.assign(size_t(c.bh() * c.sq), -std::numeric_limits<double>::infinity());
  std::vector<double> s(size_t(c.sk));
  for (int64_t b = 0; b < c.bh(); ++b)
    for (int64_t i = 0; i < c.sq; ++i) {
      const float *qi = &q[size_t((b * c.sq + i) * c.d)];
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < c.sk; ++j) {
        if (!visible(c, i, j))
          continue;
        const float *kj = &k[size_t((b / c.group * c.sk + j) * c.d)];
        double dot = 0;
        for (int64_t e = 0; e < c.d; ++e)
          dot += double(qi[e]) * double(kj[e]);
        s[size_t(j)] = scale * dot + biasOf(c, bias, b, i, j);
        m = std::max(m, s[size_t(j)]);
      }
      if (m == -std::numeric_limits<double>::infinity())
        continue; // no key: out 0, lse -inf
      double l = 0;
      for (int64_t j = 0; j < c.sk; ++j)
        if (visible(c, i, j))
          l += std::exp(s[size_t(j)] - m);
      double lse = m + std::log(l);
      r.lse[size_t(b * c.sq + i)] = lse;
      double *oi = &r.out[size_t((b * c.sq + i) * c.dv)];
      for (int64_t j = 0; j < c.sk; ++j)
        if (visible(c, i, j)) {
          double p = std::exp(s[size_t(j)] - lse);
          for (int64_t e = 0; e < c.dv; ++e)
            oi[e] += p * double(v[size_t((b / c.group * c.sk + j) * c.dv + e)]);
        }
    }
  return r;
}

inline void backwardReference(const Case &c, double scale, const Values &q, const Values &k,
                       const Values &v, const Values &out, const Values &lse, const Values &dout,
                       Reference &r, const Values &bias = {}) {
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  for (int64_t b = 0; b < c.bh(); ++b)
    for (int64_t i = 0; i < c.sq; ++i) {
      double rowLse = lse[size_t(b * c.sq + i)];
      if (std::isinf(rowLse))
        continue;
      const float *qi = &q[size_t((b * c.sq + i) * c.d)];
      const float *gi = &dout[size_t((b * c.sq + i) * c.dv)];
      const float *oi = &out[size_t((b * c.sq + i) * c.dv)];
      double delta = 0;
      for (int64_t e = 0; e < c.dv; ++e)
        delta += double(gi[e]) * double(oi[e]);
      for (int64_t j = 0; j < c.sk; ++j) {
        if (!visible(c, i, j))
          continue;
        const int64_t kb = b / c.group; // k's and v's head
        const float *kj = &k[size_t((kb * c.sk + j) * c.d)];
        const float *vj = &v[size_t((kb * c.sk + j) * c.dv)];
        double dot = 0, dp = 0;
        for (int64_t e = 0; e < c.d; ++e)
          dot += double(qi[e]) * double(kj[e]);
        for (int64_t e = 0; e < c.dv; ++e)
          dp += double(gi[e]) * double(vj[e]);
        double p = std::exp(scale * dot + biasOf(c, bias, b, i, j) - rowLse),
               ds = p * (dp - delta);
        for (int64_t e = 0; e < c.dv; ++e)
          r.dv[size_t((kb * c.sk + j) * c.dv + e)] += p * double(gi[e]);
        for (int64_t e = 0; e < c.d; ++e) {
          r.dq[size_t((b * c.sq + i) * c.d + e)] += scale * ds * double(kj[e]);
          r.dk[size_t((kb * c.sk + j) * c.d + e)] += scale * ds * double(qi[e]);
        }
      }
    }
}

/// The worst error of `got` against `want`, relative to want's largest
/// magnitude (at least `floor`); -inf must match -inf exactly.
inline double worstError(const Values &got, const std::vector<double> &want, double floor,
                  std::string &where) {
  double largest = floor, worst = 0;
  for (double w : want)
    if (!std::isinf(w))
      largest = std::max(largest, std::fabs(w));
  if (largest == 0) // all zeros (a single key's q and k gradients): absolute
    largest = 1;
  for (size_t i = 0; i < want.size(); ++i) {
    double error = std::isinf(want[i]) ? (got[i] == float(want[i]) ? 0.0 : HUGE_VAL)
                                       : std::fabs(double(got[i]) - want[i]) / largest;
    if (!(error <= worst)) { // NaN counts as worst
      worst = std::isnan(error) ? HUGE_VAL : error;
      where = "element " + std::to_string(i) + ": " + std::to_string(got[i]) + ", want " +
              std::to_string(want[i]);
    }
  }
  return worst;
}

/// One case as both tests run it: random inputs (in the case's dtype), the
/// two instructions and their buffers' types. The backward's out and lse
/// are the reference forward's (set by `fromReference`), so its check does
/// not depend on the forward kernel's rounding.
struct Problem {
  double scale;
  Values q, k, v, dout, out, lse, bias;
  plan::Instruction forward, backward;
  std::vector<plan::TensorType> qkv;
  plan::TensorType outType, lseType;

  Problem(const Case &c, std::mt19937 &rng) : scale(1.0 / std::sqrt(double(c.d))) {
    size_t bh = size_t(c.bh());
    q = random(bh * size_t(c.sq * c.d), 2.f, c.dtype, rng);
    k = random(bh / size_t(c.group) * size_t(c.sk * c.d), 2.f, c.dtype, rng);
    v = random(bh / size_t(c.group) * size_t(c.sk * c.dv), 1.f, c.dtype, rng);
    dout = random(bh * size_t(c.sq * c.dv), 1.f, c.dtype, rng);
    forward.mutable_attention()->set_scale(scale);
    forward.mutable_attention()->set_causal(c.causal);
    forward.mutable_attention()->set_bias(!c.bias.empty());
    *backward.mutable_attention_backward() = forward.attention();
    qkv = {c.type({c.sq, c.d}, c.dtype), c.type({c.sk, c.d}, c.dtype, true),
           c.type({c.sk, c.dv}, c.dtype, true)};
    outType = c.type({c.sq, c.dv}, c.dtype);
    lseType = c.type({c.sq}, plan::F32);
    if (!c.bias.empty()) {
      // Values in [-2, 2], a fifth of them -inf (hidden keys), and where a
      // row of its own per query, query 3's row hidden entirely.
      bias = random(size_t(c.biasSize()), 2.f, plan::F32, rng);
      std::uniform_int_distribution<int> fifth(0, 4);
      for (float &x : bias)
        if (fifth(rng) == 0)
          x = -std::numeric_limits<float>::infinity();
      size_t rows = size_t(c.bias[c.bias.size() - 2]);
      if (rows > 3)
        for (size_t at = 3 * size_t(c.sk); at < bias.size(); at += rows * size_t(c.sk))
          std::fill(bias.begin() + long(at), bias.begin() + long(at) + c.sk,
                    -std::numeric_limits<float>::infinity());
      biasType.set_dtype(plan::F32);
      for (int64_t x : c.bias)
        biasType.add_shape(x);
    }
  }

  plan::TensorType biasType;

  /// The forward's input types and values, with the bias when there is one.
  std::vector<plan::TensorType> forwardInputs() const {
    std::vector<plan::TensorType> t = qkv;
    if (!bias.empty())
      t.push_back(biasType);
    return t;
  }
  std::vector<Values> forwardValues() const {
    std::vector<Values> v{q, k, this->v};
    if (!bias.empty())
      v.push_back(bias);
    return v;
  }
  std::vector<Values> backwardValues() const {
    std::vector<Values> v{q, k, this->v, out, lse, dout};
    if (!bias.empty())
      v.push_back(bias);
    return v;
  }

  /// out (rounded to the dtype) and lse from the reference forward.
  void fromReference(const Case &c, const Reference &r) {
    out.resize(r.out.size());
    lse.resize(r.lse.size());
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = rounded(float(r.out[i]), c.dtype);
    for (size_t i = 0; i < lse.size(); ++i)
      lse[i] = float(r.lse[i]);
  }

  std::vector<plan::TensorType> backwardInputs() const {
    std::vector<plan::TensorType> t{qkv[0], qkv[1], qkv[2], outType, lseType, outType};
    if (!bias.empty())
      t.push_back(biasType);
    return t;
  }
};

/// Values of [..., H, rows, cols] (H the last leading dim) as [..., rows,
/// H, cols]; `back` the other way.
inline Values swapHeads(const Values &x, int64_t heads, int64_t rows, int64_t cols,
                        bool back = false) {
  Values y(x.size());
  int64_t matrix = heads * rows * cols;
  for (int64_t at = 0; at < int64_t(x.size()); at += matrix)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          size_t first = size_t(at + (h * rows + r) * cols + c),
                 after = size_t(at + (r * heads + h) * cols + c);
          y[back ? first : after] = x[back ? after : first];
        }
  return y;
}

/// A type's last two dims but one swapped.
inline plan::TensorType swapHeads(plan::TensorType t) {
  int r = t.shape_size();
  int64_t s = t.shape(r - 3);
  t.set_shape(r - 3, t.shape(r - 2));
  t.set_shape(r - 2, s);
  return t;
}

/// `p` with q, k, v, the output and its gradient as [..., S, H, D] (the
/// instructions' `bshd`): the same scores, so every result is p's, moved.
/// Its `out` is set from p's by withOutOf once p has one.
struct BshdProblem : Problem {
  int64_t heads;
  BshdProblem(const Problem &p, const Case &c) : Problem(p), heads(c.lead.back()) {
    forward.mutable_attention()->set_bshd(true);
    backward.mutable_attention_backward()->set_bshd(true);
    q = swapHeads(p.q, heads, c.sq, c.d);
    k = swapHeads(p.k, c.kvHeads(), c.sk, c.d);
    v = swapHeads(p.v, c.kvHeads(), c.sk, c.dv);
    dout = swapHeads(p.dout, heads, c.sq, c.dv);
    for (plan::TensorType &t : qkv)
      t = swapHeads(t);
    outType = swapHeads(outType);
  }
  void withOutOf(const Problem &p, const Case &c) {
    out = swapHeads(p.out, heads, c.sq, c.dv);
    lse = p.lse;
  }
};

/// q, k and v's [..., S, H, D] values side by side as one [..., S, 3, H,
/// D] buffer (Attention.packed), rows of `width` (H D) each; with `heads`
/// H, as [..., S, H, 3, D] (Attention.interleaved).
inline Values packPieces(const Values &q, const Values &k, const Values &v, int64_t width,
                         int64_t heads = 0) {
  Values packed(3 * q.size());
  const Values *pieces[] = {&q, &k, &v};
  int64_t run = heads ? width / heads : width; // what is contiguous: D or H D
  for (size_t at = 0; at < q.size() / size_t(run); ++at) { // a run of one piece
    size_t row = at * size_t(run) / size_t(width), head = at % size_t(width / run);
    for (size_t p = 0; p < 3; ++p) {
      size_t to = heads ? (row * size_t(heads) + head) * 3 + p : row * 3 + p;
      std::copy_n(pieces[p]->begin() + long(at * size_t(run)), run,
                  packed.begin() + long(to * size_t(run)));
    }
  }
  return packed;
}

/// Piece `piece` (0, 1, 2) of a packed buffer's values (interleaved with
/// `heads`).
inline Values pieceOf(const Values &packed, int piece, int64_t width, int64_t heads = 0) {
  Values x(packed.size() / 3);
  int64_t run = heads ? width / heads : width;
  for (size_t at = 0; at < x.size() / size_t(run); ++at) {
    size_t row = at * size_t(run) / size_t(width), head = at % size_t(width / run);
    size_t from =
        heads ? (row * size_t(heads) + head) * 3 + size_t(piece) : row * 3 + size_t(piece);
    std::copy_n(packed.begin() + long(from * size_t(run)), run, x.begin() + long(at * size_t(run)));
  }
  return x;
}

/// A BshdProblem whose q, k and v are one packed buffer (for cases with
/// Sq == Sk and D == Dv): its instructions `packed` (and `interleaved`:
/// [..., S, H, 3, D]), their q, k and v inputs that buffer, the backward's
/// one output its gradient.
struct PackedProblem : BshdProblem {
  int64_t width, interleavedHeads;
  Values qkvValues;
  plan::TensorType packedType;
  PackedProblem(const BshdProblem &t, const Case &c, bool interleaved = false)
      : BshdProblem(t), width(t.heads * c.d), interleavedHeads(interleaved ? t.heads : 0),
        qkvValues(packPieces(t.q, t.k, t.v, width, interleavedHeads)) {
    forward.mutable_attention()->set_packed(true);
    backward.mutable_attention_backward()->set_packed(true);
    forward.mutable_attention()->set_interleaved(interleaved);
    backward.mutable_attention_backward()->set_interleaved(interleaved);
    packedType = t.qkv[0]; // [..., S, H, D]: the 3 goes before H, or after it
    auto *shape = packedType.mutable_shape();
    int at = shape->size() - (interleaved ? 1 : 2);
    shape->Add(0);
    for (int i = shape->size() - 1; i > at; --i)
      shape->Set(i, shape->Get(i - 1));
    shape->Set(at, 3);
    qkv = {packedType, packedType, packedType};
  }
  /// Piece `piece` of a packed buffer of this problem's layout.
  Values piece(const Values &packed, int piece) const {
    return pieceOf(packed, piece, width, interleavedHeads);
  }
  std::vector<Values> forwardValues() const {
    std::vector<Values> v{qkvValues, qkvValues, qkvValues};
    if (!bias.empty())
      v.push_back(bias);
    return v;
  }
  std::vector<Values> backwardValues() const {
    std::vector<Values> v{qkvValues, qkvValues, qkvValues, out, lse, dout};
    if (!bias.empty())
      v.push_back(bias);
    return v;
  }
};

} // namespace dtc::attentiontest

#endif // DTC_TESTS_UNIT_ATTENTIONREFERENCE_H
