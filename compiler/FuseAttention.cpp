//===- FuseAttention.cpp - attention spelled out as one graph.attention ---===//
//
// Models write attention as ops: scores = q k^T (a matmul, k transposed
// by the matmul or before it), scaled (a multiply or divide by a number),
// masked (a where that fills with a large negative number, or the add of a
// bias of 0 and large negatives), a softmax over the keys, and a matmul by
// the values. Training then keeps the probabilities, batch x heads x Sq x
// Sk of them, for the backward: at GPT-2's sequence of 1024 that is most
// of a layer's activations. graph.attention computes the same without the
// scores tensor (flash attention: a tile of scores at a time, each row's
// log-sum-exp kept for the backward, which recomputes its tiles).
//
// A mask known at compile time that is none or causal (query i sees key j
// iff j <= i + Sk - Sq) becomes the op's `causal`: it is evaluated from
// the ops that make it (constants, trilu, comparisons, where, casts,
// reshapes and broadcasts of them), as the generated GPT and ONNX's
// Attention write it. Any other mask (padding read from the model's
// inputs, as BERT's attention_mask; a sliding window) or added bias
// becomes the op's f32 `bias`, broadcast to the scores, when no parameter
// reaches it (it has no gradient): an added term as it is, a where's
// condition as where(hide, fill, 0).
//
//
// Models split heads out of a projection ([B, S, H, D]) and transpose them
// to [B, H, S, D] before attention, and back after it: q, k and v read
// through such a transpose (a chain of them composing to it) are read as
// they were, the op `bshd`, and its output transposed back, which cancels
// with the model's transpose after it. Four passes over q, k, v and the
// output each way fewer per layer; the kernels read the rows strided.
// Where q, k and v are the three pieces of one projection's product
// ([..., 3 H D], transformers' GPT-2 `c_attn`), split by slices, the op
// reads them there (`packed`: the product viewed as [..., S, 3, H, D]),
// and its backward writes their gradients side by side: no copies out of
// the product, no concat of the gradients back into one.
//
//===----------------------------------------------------------------------===//
#include "compiler/CompileNotes.h"
#include "compiler/ConstantValues.h"
#include "compiler/Interior.h"
#include "compiler/Passes.h"

#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <tuple>

namespace dtc {
#define GEN_PASS_DEF_FUSEATTENTION
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// A fill at or below this hides a key: exp(fill - max) is 0 in f32 (and
/// bf16) for any score a model makes.
constexpr double kMasked = -1e4;

/// The largest mask evaluated (elements), to keep compile memory bounded.
constexpr int64_t kMaxMaskElements = int64_t(1) << 25;

/// What a mask hides: none, the causal triangle, or something else.
enum class Mask { None, Causal, Other };

/// Where a mask comes from: a where's condition that hides (or keeps)
/// keys, a bias of 0s and large negatives (or any added term), or a frozen
/// parameter the importer marked causal.
struct MaskSource {
  enum Kind { Hides, Keeps, Bias, CausalParameter };
  Value value;
  Kind kind;
  double fill = 0; // a where's fill (Hides, Keeps)
};

/// The ops of one attention, matched from its last matmul back.
struct Match {
  Value q, k, v; // k as [..., Sk, D], v as [..., Sk, Dv], after any transposes made
  Value kTransposed, vTransposed; // the values to transpose first, if they need it
  double scale = 1;
  bool causal = false;
  std::optional<MaskSource> bias;  // a mask or bias carried as the op's bias
  ArrayRef<int64_t> scoresShape;   // [..., Sq, Sk]
  SmallVector<Operation *> interior; // read by nothing else, erased after
};

/// The interior op defining `v`, read by nothing else, or null.
template <class Op> Op interior(Value v, Match &m) { return dtc::interior<Op>(v, m.interior); }

/// Masks' values and what they hide, each worked out once: every layer of
/// a model reads the same mask, and at a sequence of 2048 it has 4M values.
class MaskReader {
public:
  /// `v`'s values, when computed from constants.
  const std::optional<ConstantValues> &values(Value v) {
    auto [it, added] = values_.try_emplace(v);
    if (added)
      it->second = evaluateConstant(v, kMaxMaskElements);
    return it->second;
  }

  /// What `source` hides from [sq, sk] scores; every [sq, sk] slice of it
  /// must hide the same.
  Mask classify(const MaskSource &source, int64_t sq, int64_t sk) {
    auto key = std::make_tuple(source.value.getAsOpaquePointer(), int(source.kind), sq, sk);
    auto [it, added] = classes_.try_emplace(key, Mask::Other);
    if (added)
      it->second = classifyOnce(source, sq, sk);
    return it->second;
  }

private:
  Mask classifyOnce(const MaskSource &source, int64_t sq, int64_t sk) {
    ArrayRef<int64_t> shape = typeOf(source.value).getShape();
    size_t rank = shape.size();
    int64_t rows = rank >= 2 ? shape[rank - 2] : 1, cols = rank >= 1 ? shape.back() : 1;
    // A row that sees no key would differ: the written ops spread it evenly.
    bool causalFits = sq <= sk;
    if (source.kind == MaskSource::CausalParameter)
      return rows == sq && cols == sk && causalFits ? Mask::Causal : Mask::Other;
    const std::optional<ConstantValues> &v = values(source.value);
    if (!v || (rows != 1 && rows != sq) || (cols != 1 && cols != sk))
      return Mask::Other;
    bool none = true, causal = causalFits;
    for (size_t slice = 0; slice < v->values.size(); slice += size_t(rows * cols))
      for (int64_t i = 0; i < sq && (none || causal); ++i)
        for (int64_t j = 0; j < sk; ++j) {
          float x = v->values[slice + size_t((rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j))];
          if (source.kind == MaskSource::Bias && x != 0 && x > kMasked)
            return Mask::Other; // a bias that shifts scores, not a mask
          bool hidden = source.kind == MaskSource::Keeps ? x == 0 : x != 0;
          none = none && !hidden;
          causal = causal && hidden == (j > i + sk - sq);
        }
    return none ? Mask::None : causal ? Mask::Causal : Mask::Other;
  }

  llvm::DenseMap<Value, std::optional<ConstantValues>> values_;
  std::map<std::tuple<const void *, int, int64_t, int64_t>, Mask> classes_;
};

/// Whether `s` is a matmul, scaled or not (multiplied or divided by
/// numbers), read by nothing else: the scores before their mask.
bool isScoresProduct(Value s) {
  while (true) {
    Operation *op = s.getDefiningOp();
    if (!op || !op->hasOneUse())
      return false;
    if (isa<graph::MatmulOp>(op))
      return true;
    auto mul = dyn_cast<graph::MulOp>(op);
    auto div = dyn_cast<graph::DivOp>(op);
    if (mul && scalarConstant(mul.getRhs()))
      s = mul.getLhs();
    else if (mul && scalarConstant(mul.getLhs()))
      s = mul.getRhs();
    else if (div && scalarConstant(div.getRhs()))
      s = div.getLhs();
    else
      return false;
  }
}

/// Whether a parameter (one not frozen as a causal mask) reaches `v`: a
/// bias computed from one would need a gradient. Unknown past `budget` ops.
bool reachedByParameter(Value v, int budget = 4096) {
  llvm::DenseSet<Operation *> seen;
  SmallVector<Value> work{v};
  while (!work.empty()) {
    Operation *op = work.pop_back_val().getDefiningOp();
    if (!op || !seen.insert(op).second)
      continue;
    if (--budget < 0)
      return true;
    if (auto p = dyn_cast<graph::ParameterOp>(op); p && !p->hasAttr(attr::kCausalMask))
      return true;
    llvm::append_range(work, op->getOperands());
  }
  return false;
}

/// Whether `shape` broadcasts to `scores` [..., Sq, Sk] (numpy's rule,
/// aligned from the right).
bool broadcastsTo(ArrayRef<int64_t> shape, ArrayRef<int64_t> scores) {
  if (shape.size() > scores.size())
    return false;
  size_t offset = scores.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1 && shape[d] != scores[offset + d])
      return false;
  return true;
}

/// Scores masked by `x` (a where or an add): the scores, and in `mask`
/// where the mask comes from (none when there is no mask).
Value peelMask(Value x, Match &m, MaskReader &masks, std::optional<MaskSource> &mask) {
  if (auto w = x.getDefiningOp<graph::WhereOp>(); w && w->hasOneUse()) {
    // where(hide, fill, scores) or where(keep, scores, fill)
    for (bool fillFirst : {true, false}) {
      auto fill = scalarConstant(fillFirst ? w.getX() : w.getY());
      if (!fill || *fill > kMasked)
        continue;
      mask = MaskSource{w.getCond(), fillFirst ? MaskSource::Hides : MaskSource::Keeps, *fill};
      m.interior.push_back(w);
      return fillFirst ? w.getY() : w.getX();
    }
    return {};
  }
  if (auto add = x.getDefiningOp<graph::AddOp>(); add && add->hasOneUse()) {
    // The term computed from constants first (a mask that may be causal),
    // then one beside a product of queries and keys.
    for (bool known : {true, false})
      for (bool biasFirst : {true, false}) {
        Value term = biasFirst ? add.getLhs() : add.getRhs();
        Value other = biasFirst ? add.getRhs() : add.getLhs();
        auto frozen = term.getDefiningOp<graph::ParameterOp>();
        if (known && frozen && frozen->hasAttr(attr::kCausalMask))
          mask = MaskSource{term, MaskSource::CausalParameter};
        else if (known ? bool(masks.values(term)) : isScoresProduct(other))
          mask = MaskSource{term, MaskSource::Bias};
        else
          continue;
        m.interior.push_back(add);
        return other;
      }
    return {};
  }
  return x;
}

/// Scores times or divided by numbers: the product q k^T, the scale in `m`.
/// With `sameType`, only numbers that do not broadcast what they scale to
/// a larger shape (q and k, which keep their own).
Value peelScale(Value s, Match &m, bool sameType = false) {
  auto fits = [&](Value inner) { return !sameType || inner.getType() == s.getType(); };
  while (true) {
    if (auto mul = s.getDefiningOp<graph::MulOp>(); mul && mul->hasOneUse()) {
      auto l = scalarConstant(mul.getLhs()), r = scalarConstant(mul.getRhs());
      if ((r || l) && fits(r ? mul.getLhs() : mul.getRhs())) {
        m.scale *= r ? *r : *l;
        m.interior.push_back(mul);
        s = r ? mul.getLhs() : mul.getRhs();
        continue;
      }
    }
    if (auto div = s.getDefiningOp<graph::DivOp>(); div && div->hasOneUse())
      if (auto r = scalarConstant(div.getRhs()); r && *r != 0 && fits(div.getLhs())) {
        m.scale /= *r;
        m.interior.push_back(div);
        s = div.getLhs();
        continue;
      }
    return s;
  }
}

/// The probabilities under a NaN guard, as PyTorch's exporter writes
/// scaled_dot_product_attention: where(not(p == p), 0, p) zeroes the rows
/// a mask hid entirely (softmax's NaN there), as fused attention does
/// (out 0). The guard is consumed; `x` itself when there is none.
Value peelNanGuard(Value x, Match &m) {
  auto guard = x.getDefiningOp<graph::WhereOp>();
  auto zero = guard ? scalarConstant(guard.getX()) : std::nullopt;
  if (!guard || !guard->hasOneUse() || !zero || *zero != 0)
    return x;
  Value p = guard.getY();
  auto notNan = guard.getCond().getDefiningOp<graph::NotOp>();
  auto same = notNan ? notNan.getInput().getDefiningOp<graph::EqualOp>() : graph::EqualOp();
  if (!same || !notNan->hasOneUse() || !same->hasOneUse() || same.getLhs() != p ||
      same.getRhs() != p)
    return x;
  // p is read by the comparison (twice) and the where, nothing else.
  if (llvm::any_of(p.getUsers(), [&](Operation *user) { return user != same && user != guard; }))
    return x;
  m.interior.append({guard, notNan, same});
  return p;
}

/// Matches the attention whose last matmul (probabilities x values) is `pv`.
std::optional<Match> matchAttention(graph::MatmulOp pv, MaskReader &masks) {
  Match m;
  if (pv.getTransposeLhs() || !isa<FloatType>(typeOf(pv.getOutput()).getElementType()))
    return std::nullopt;
  Value probabilities = peelNanGuard(pv.getLhs(), m);
  auto softmax = probabilities == pv.getLhs()
                     ? interior<graph::SoftmaxOp>(probabilities, m)
                     : probabilities.getDefiningOp<graph::SoftmaxOp>();
  if (softmax && probabilities != pv.getLhs())
    m.interior.push_back(softmax);
  int64_t rank = typeOf(pv.getOutput()).getRank();
  if (!softmax || (int64_t(softmax.getAxis()) != rank - 1 && int64_t(softmax.getAxis()) != -1))
    return std::nullopt;
  std::optional<MaskSource> mask;
  Value scores = peelMask(softmax.getInput(), m, masks, mask);
  if (!scores)
    return std::nullopt;
  auto qk = interior<graph::MatmulOp>(peelScale(scores, m), m);
  if (!qk || qk.getTransposeLhs() || !(m.scale > 0) || !std::isfinite(m.scale))
    return std::nullopt;
  // q and k each times a number (as exporters scale both by the scale's
  // square root, so that q k^T does not overflow in 16 bits): the scale,
  // exact (a bf16 step would round the numbers), and no pass over q or k.
  m.q = peelScale(qk.getLhs(), m, /*sameType=*/true);
  (qk.getTransposeRhs() ? m.k : m.kTransposed) = peelScale(qk.getRhs(), m, /*sameType=*/true);
  if (!(m.scale > 0) || !std::isfinite(m.scale))
    return std::nullopt;
  (pv.getTransposeRhs() ? m.vTransposed : m.v) = pv.getRhs();
  // q [..., Sq, D], k^T [..., D, Sk], v [..., Sk, Dv]; no batch broadcasting.
  auto q = typeOf(m.q), kt = typeOf(qk.getRhs()), v = typeOf(pv.getRhs());
  if (kt.getRank() != rank || v.getRank() != rank || q.getRank() != rank ||
      kt.getElementType() != q.getElementType() || v.getElementType() != q.getElementType())
    return std::nullopt;
  auto lead = q.getShape().drop_back(2);
  if (kt.getShape().drop_back(2) != lead || v.getShape().drop_back(2) != lead)
    return std::nullopt;
  auto scoreType = typeOf(qk.getOutput());
  int64_t sq = scoreType.getDimSize(rank - 2), sk = scoreType.getDimSize(rank - 1);
  m.scoresShape = scoreType.getShape();
  if (mask) {
    Mask hides = masks.classify(*mask, sq, sk);
    if (hides == Mask::Other) {
      // Carried as a bias: one with no gradient, that fits the scores.
      if (mask->kind == MaskSource::CausalParameter || reachedByParameter(mask->value) ||
          !broadcastsTo(typeOf(mask->value).getShape(), m.scoresShape))
        return std::nullopt;
      m.bias = mask;
    }
    m.causal = hides == Mask::Causal;
  }
  return m;
}

/// `v` with its last two dims swapped.
Value transposeLast(OpBuilder &b, Location loc, Value v) {
  SmallVector<int64_t> perm(size_t(typeOf(v).getRank()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  if (auto swap = v.getDefiningOp<graph::TransposeOp>(); swap && swap.getPerm() == ArrayRef(perm))
    return swap.getInput(); // what it swapped, so that its own chain shows
  return b.create<graph::TransposeOp>(loc, v, b.getDenseI64ArrayAttr(perm));
}

/// The permutation that swaps the last two dims but one: [..., S, H, D]
/// and [..., H, S, D] into each other.
SmallVector<int64_t> headsSwap(int64_t rank) {
  SmallVector<int64_t> perm(static_cast<size_t>(rank));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[perm.size() - 3], perm[perm.size() - 2]);
  return perm;
}

/// The x that `v` is x transposed by headsSwap, through a chain of
/// transposes composing to it; null when there is none.
Value throughHeadsSwap(Value v) {
  int64_t rank = typeOf(v).getRank();
  if (rank < 3)
    return {};
  SmallVector<int64_t> swap = headsSwap(rank), perm(static_cast<size_t>(rank));
  std::iota(perm.begin(), perm.end(), 0); // v's dim i is x's dim perm[i]
  for (Value x = v; auto t = x.getDefiningOp<graph::TransposeOp>();) {
    for (int64_t &d : perm)
      d = t.getPerm()[size_t(d)];
    x = t.getInput();
    if (perm == swap)
      return x;
  }
  return {};
}

/// Where `x`, [..., S, H, D], is piece p of one projection's product P
/// [..., 3 H D] (transformers' `c_attn`): a reshape of P's columns [p H D,
/// (p + 1) H D), a split's result p or a slice. P and p; a null P when it
/// is not.
std::pair<Value, int64_t> packedPiece(Value x) {
  auto reshape = x.getDefiningOp<graph::ReshapeOp>();
  if (!reshape || typeOf(x).getRank() < 3)
    return {};
  ArrayRef<int64_t> shape = typeOf(x).getShape();
  int64_t width = shape.back() * shape[shape.size() - 2];
  if (auto split = reshape.getInput().getDefiningOp<graph::SplitOp>()) {
    int64_t rank = typeOf(split.getInput()).getRank();
    if (split.getAxis() != rank - 1 || split.getSizes() != ArrayRef<int64_t>{width, width, width})
      return {};
    return {split.getInput(), cast<OpResult>(reshape.getInput()).getResultNumber()};
  }
  auto slice = reshape.getInput().getDefiningOp<graph::SliceOp>();
  if (!slice)
    return {};
  ArrayRef<int64_t> from = typeOf(slice.getInput()).getShape(), sizes = slice.getSizes();
  if (sizes.back() != width || from.back() != 3 * width || slice.getOffsets().back() % width ||
      llvm::any_of(slice.getStrides(), [](int64_t s) { return s != 1; }) ||
      sizes.drop_back() != from.drop_back() ||
      llvm::any_of(slice.getOffsets().drop_back(), [](int64_t o) { return o != 0; }))
    return {};
  return {slice.getInput(), slice.getOffsets().back() / width};
}

/// q, k and v of a bshd attention as one packed value [..., S, 3, H, D]
/// where they are pieces 0, 1 and 2 of one product; null where not.
Value packedQkv(OpBuilder &b, Location loc, Value q, Value k, Value v) {
  auto [pq, iq] = packedPiece(q);
  auto [pk, ik] = packedPiece(k);
  auto [pv, iv] = packedPiece(v);
  if (!pq || pk != pq || pv != pq || iq != 0 || ik != 1 || iv != 2 ||
      typeOf(k) != typeOf(q) || typeOf(v) != typeOf(q))
    return {};
  SmallVector<int64_t> shape(typeOf(q).getShape());
  shape.insert(shape.end() - 2, 3);
  return b.create<graph::ReshapeOp>(loc, RankedTensorType::get(shape, typeOf(q).getElementType()),
                                    pq);
}

/// k when `kT` is k^T spelled as PyTorch exports it through a grouped
/// query attention's repeat: reshape(transpose_last(reshape(A))), the
/// reshapes changing only the leading dims: k is then A reshaped to kT's
/// leading dims (a new reshape); null otherwise.
Value untransposedKey(OpBuilder &b, Location loc, Value kT) {
  auto outer = kT.getDefiningOp<graph::ReshapeOp>();
  auto swap = outer ? outer.getInput().getDefiningOp<graph::TransposeOp>() : nullptr;
  auto inner = swap ? swap.getInput().getDefiningOp<graph::ReshapeOp>() : nullptr;
  if (!inner)
    return {};
  int64_t rank = typeOf(swap).getRank();
  SmallVector<int64_t> last(static_cast<size_t>(rank));
  std::iota(last.begin(), last.end(), 0);
  std::swap(last[size_t(rank - 1)], last[size_t(rank - 2)]);
  ArrayRef<int64_t> a = typeOf(inner.getInput()).getShape(), flat = typeOf(inner).getShape(),
                    out = typeOf(kT).getShape();
  auto lastTwo = [](ArrayRef<int64_t> s) { return s.take_back(2); };
  if (swap.getPerm() != ArrayRef<int64_t>(last) || a.size() < 2 || out.size() < 2 ||
      lastTwo(a) != lastTwo(flat) || lastTwo(typeOf(swap).getShape()) != lastTwo(out))
    return {};
  SmallVector<int64_t> shape(out.drop_back(2));
  shape.append({a[a.size() - 2], a.back()});
  return b.create<graph::ReshapeOp>(loc, RankedTensorType::get(shape, typeOf(kT).getElementType()),
                                    inner.getInput());
}

/// `table` (broadcast onto a [..., H, S, D] value of `rank`) as it
/// broadcasts onto the [..., S, H, D] one: at that rank, its heads and
/// sequence dims swapped (a reshape where either is 1).
Value swappedTable(OpBuilder &b, Location loc, Value table, int64_t rank) {
  SmallVector<int64_t> shape(typeOf(table).getShape());
  shape.insert(shape.begin(), size_t(rank) - shape.size(), 1);
  size_t h = size_t(rank - 3), s = size_t(rank - 2);
  Type element = typeOf(table).getElementType();
  if (shape[h] == 1 || shape[s] == 1) {
    std::swap(shape[h], shape[s]);
    return b.create<graph::ReshapeOp>(loc, RankedTensorType::get(shape, element), table);
  }
  Value full = b.create<graph::ReshapeOp>(loc, RankedTensorType::get(shape, element), table);
  return b.create<graph::TransposeOp>(loc, full, b.getDenseI64ArrayAttr(headsSwap(rank)));
}

/// `x` ([..., G R, S, D]) when it is a grouped query attention's repeat
/// of [..., G, S, D] over each group's R query heads (transformers'
/// repeat_kv: unsqueeze, broadcast, reshape): what it repeats; else null.
Value repeatedOf(Value x) {
  int64_t rank = typeOf(x).getRank();
  auto merge = x.getDefiningOp<graph::ReshapeOp>();
  auto spread = merge ? merge.getInput().getDefiningOp<graph::BroadcastOp>() : nullptr;
  auto unsqueeze = spread ? spread.getInput().getDefiningOp<graph::UnsqueezeOp>() : nullptr;
  if (!unsqueeze || rank < 3 || unsqueeze.getAxes() != ArrayRef<int64_t>{rank - 2})
    return {};
  Value y = unsqueeze.getInput();
  ArrayRef<int64_t> groups = typeOf(y).getShape(), spreadShape = typeOf(spread).getShape();
  SmallVector<int64_t> want(groups);
  if (typeOf(y).getRank() != rank)
    return {};
  want.insert(want.begin() + (rank - 2), spreadShape[size_t(rank - 2)]);
  return spreadShape == ArrayRef<int64_t>(want) ? y : Value();
}

/// `v` ([..., H, S, D]) made again as [..., S, H, D] from what makes it,
/// where the heads come from a transpose (throughHeadsSwap) and what
/// follows keeps the rows apart: a rotary embedding (its tables swapped
/// too). What the chain made before stays for any other reader (cleanup
/// removes it where there is none). Null where it is not; with no
/// builder, only whether it is (v itself).
Value rowsOf(OpBuilder *b, Location loc, Value v) {
  if (Value x = throughHeadsSwap(v))
    return x;
  int64_t rank = typeOf(v).getRank();
  if (auto rotary = v.getDefiningOp<graph::RotaryOp>(); rotary && rank >= 3) {
    Value x = rowsOf(b, loc, rotary.getInput());
    if (!x || !b)
      return x ? v : Value();
    return b->create<graph::RotaryOp>(loc, x, swappedTable(*b, loc, rotary.getCos(), rank),
                                      swappedTable(*b, loc, rotary.getSin(), rank),
                                      rotary.getBackwardAttr());
  }
  return {};
}

/// An f32 scalar constant.
Value scalarF32(OpBuilder &b, Location loc, double x) {
  auto type = RankedTensorType::get({}, b.getF32Type());
  return b.create<graph::ConstantOp>(loc, DenseElementsAttr::get(type, float(x)));
}

/// The op's bias from `source`: f32, of the scores' rank, ending in Sk.
Value buildBias(OpBuilder &b, Location loc, const MaskSource &source,
                ArrayRef<int64_t> scores) {
  Value bias = source.value;
  if (source.kind != MaskSource::Bias) { // where(hide, fill, 0), where(keep, 0, fill)
    Value fill = scalarF32(b, loc, source.fill), zero = scalarF32(b, loc, 0);
    bool hides = source.kind == MaskSource::Hides;
    bias = b.create<graph::WhereOp>(loc, source.value, hides ? fill : zero, hides ? zero : fill);
  } else if (!typeOf(bias).getElementType().isF32()) {
    bias = b.create<graph::CastOp>(loc, typeOf(bias).clone(b.getF32Type()), bias);
  }
  ArrayRef<int64_t> shape = typeOf(bias).getShape();
  if (shape.size() < scores.size()) {
    SmallVector<int64_t> ranked(scores.size() - shape.size(), 1);
    ranked.append(shape.begin(), shape.end());
    bias = b.create<graph::ReshapeOp>(loc, typeOf(bias).clone(ranked), bias);
  }
  if (typeOf(bias).getShape().back() != scores.back()) { // one value for every key
    SmallVector<int64_t> full(typeOf(bias).getShape());
    full.back() = scores.back();
    bias = b.create<graph::BroadcastOp>(loc, bias, b.getDenseI64ArrayAttr(full));
  }
  return bias;
}

/// Exporters write k^T and the heads' split in several moves (PyTorch's
/// k^T: [B, H, S, D] reshaped to [B*H, S, D], transposed, reshaped back):
/// the transposes and reshapes are composed first (their canonicalization
/// patterns, on them alone), so that the match and the layout see one
/// transpose each.
void composeMoves(func::FuncOp func) {
  MLIRContext *context = func.getContext();
  RewritePatternSet patterns(context);
  graph::TransposeOp::getCanonicalizationPatterns(patterns, context);
  graph::ReshapeOp::getCanonicalizationPatterns(patterns, context);
  SmallVector<Operation *> moves;
  func.walk([&](Operation *op) {
    if (isa<graph::TransposeOp, graph::ReshapeOp>(op))
      moves.push_back(op);
  });
  GreedyRewriteConfig config;
  config.strictMode = GreedyRewriteStrictness::ExistingAndNewOps;
  (void)applyOpPatternsAndFold(moves, std::move(patterns), config);
}

struct FuseAttention : impl::FuseAttentionBase<FuseAttention> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    composeMoves(func);
    SmallVector<graph::MatmulOp> roots;
    func.walk([&](graph::MatmulOp op) { roots.push_back(op); });
    int fused = 0, causal = 0, biased = 0, inPlace = 0, packed = 0, grouped = 0;
    MaskReader masks;
    for (graph::MatmulOp pv : roots) {
      if (!pv->getBlock()) // consumed by an earlier match
        continue;
      auto m = matchAttention(pv, masks);
      if (!m)
        continue;
      OpBuilder b(pv);
      Location loc = pv.getLoc();
      Value k = m->k;
      if (!k && !(k = untransposedKey(b, loc, m->kTransposed)))
        k = transposeLast(b, loc, m->kTransposed);
      Value v = m->v ? m->v : transposeLast(b, loc, m->vTransposed);
      Value bias = m->bias ? buildBias(b, loc, *m->bias, m->scoresShape) : Value();
      // Grouped-query attention: k and v read once per group of query
      // heads, not repeated over them.
      Value groupK = repeatedOf(k), groupV = repeatedOf(v);
      if (groupK && groupV && typeOf(groupK).getShape().drop_back(2) ==
                                  typeOf(groupV).getShape().drop_back(2))
        k = groupK, v = groupV, ++grouped;
      Value q = m->q;
      bool bshd = rowsOf(nullptr, loc, q) && rowsOf(nullptr, loc, k) && rowsOf(nullptr, loc, v);
      if (bshd)
        q = rowsOf(&b, loc, q), k = rowsOf(&b, loc, k), v = rowsOf(&b, loc, v);
      Value qkv = bshd ? packedQkv(b, loc, q, k, v) : Value();
      if (qkv)
        q = k = v = qkv, ++packed;
      auto attention = b.create<graph::AttentionOp>(
          loc, q, k, v, bias, b.getF64FloatAttr(m->scale), b.getBoolAttr(m->causal),
          bshd ? b.getUnitAttr() : UnitAttr(), qkv ? b.getUnitAttr() : UnitAttr());
      Value output = attention.getOutput();
      if (bshd) { // back to what the model reads; its own transpose cancels it
        SmallVector<int64_t> swap = headsSwap(typeOf(output).getRank());
        output = b.create<graph::TransposeOp>(loc, output, b.getDenseI64ArrayAttr(swap));
        ++inPlace;
      }
      pv.getOutput().replaceAllUsesWith(output);
      pv.erase();
      for (Operation *dead : m->interior) // users first; masks are left to cleanup
        dead->erase();
      ++fused;
      causal += m->causal;
      biased += bool(bias);
    }
    if (fused)
      addNote(func, "fusion: " + std::to_string(fused) + " attentions (" +
                        std::to_string(causal) + " causal" +
                        (biased ? ", " + std::to_string(biased) +
                                      " with their mask as a bias operand"
                                : std::string()) +
                        ") computed as one op each, flash style: no scores tensor, the "
                        "backward recomputes them" +
                        (inPlace ? "; " + std::to_string(inPlace) +
                                       " read q, k, v and write their output as [batch, seq, "
                                       "heads, dim], no transposes around them"
                                 : std::string()) +
                        (packed ? "; " + std::to_string(packed) +
                                      " read q, k and v where one projection wrote them side "
                                      "by side, no copies split them out"
                                : std::string()) +
                        (grouped ? "; " + std::to_string(grouped) +
                                       " read k and v once per group of query heads "
                                       "(grouped-query attention), not repeated over them"
                                 : std::string()));
  }
};

} // namespace
} // namespace dtc
