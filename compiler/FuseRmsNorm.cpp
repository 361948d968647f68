//===- FuseRmsNorm.cpp - RMSNorm's expanded form as one layer_norm --------===//
//
// PyTorch writes RMSNorm (Llama's, Mistral's, Qwen's, T5's) out in ops:
// x * rsqrt(mean(x^2, -1) + eps) * weight, the statistics in f32 after a
// cast for a 16-bit model, and exporters keep them: pow, reduce_mean, add,
// sqrt, reciprocal, two muls and the casts. As those ops, training keeps
// their intermediates for the backward and differentiates each, and a bf16
// step computes the mean square in bf16; as one graph.layer_norm {rms} it
// is one row kernel forward and one backward, its statistics in f32.
//
//===----------------------------------------------------------------------===//
#include "compiler/CompileNotes.h"
#include "compiler/ConstantValues.h"
#include "compiler/Interior.h"
#include "compiler/Passes.h"

#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"

namespace dtc {
#define GEN_PASS_DEF_FUSERMSNORM
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

using Matched = SmallVector<Operation *>;

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// One RMSNorm, matched from its last product back.
struct RmsNorm {
  Value input, scale;
  int64_t axis = 0;
  double epsilon = 0;
  Matched matched; // read by nothing else, erased after
};

/// The factors of a product: `v` itself, or a graph.mul's operands
/// flattened (through interior muls).
void factors(Value v, SmallVectorImpl<Value> &out, Matched &matched) {
  auto mul = interior<graph::MulOp>(v, matched);
  if (!mul)
    return out.push_back(v);
  factors(mul.getLhs(), out, matched);
  factors(mul.getRhs(), out, matched);
}

/// `s` when `v` is 1 / sqrt(s): reciprocal(sqrt(s)) or 1 / sqrt(s).
Value inverseRoot(Value v, Matched &matched) {
  size_t mark = matched.size();
  Value root;
  if (auto reciprocal = interior<graph::ReciprocalOp>(v, matched))
    root = reciprocal.getInput();
  else if (auto div = interior<graph::DivOp>(v, matched);
           div && near(scalarConstant(div.getLhs()), 1.0))
    root = div.getRhs();
  if (auto sqrt = root ? interior<graph::SqrtOp>(root, matched) : graph::SqrtOp())
    return sqrt.getInput();
  matched.resize(mark);
  return {};
}

/// Whether `v` is x^2: pow(x, 2) or x * x.
bool isSquareOf(Value v, Value x, Matched &matched) {
  if (auto pow = interior<graph::PowOp>(v, matched)) {
    if (pow.getLhs() == x && near(scalarConstant(pow.getRhs()), 2.0))
      return true;
    matched.pop_back();
    return false;
  }
  if (auto mul = interior<graph::MulOp>(v, matched)) {
    if (mul.getLhs() == x && mul.getRhs() == x)
      return true;
    matched.pop_back();
  }
  return false;
}

/// Whether `s` is mean(x^2 over dims [axis, rank), keepdims) + eps; sets
/// the match's axis and epsilon.
bool isMeanSquarePlusEpsilon(Value s, Value x, RmsNorm &m) {
  size_t mark = m.matched.size();
  auto fail = [&] {
    m.matched.resize(mark);
    return false;
  };
  auto add = interior<graph::AddOp>(s, m.matched);
  if (!add)
    return fail();
  std::optional<double> epsilon = scalarConstant(add.getRhs());
  Value meanSquare = add.getLhs();
  if (!epsilon) {
    epsilon = scalarConstant(add.getLhs());
    meanSquare = add.getRhs();
  }
  auto mean = epsilon ? interior<graph::ReduceMeanOp>(meanSquare, m.matched)
                      : graph::ReduceMeanOp();
  if (!mean || !mean.getKeepdims() || *epsilon < 0 || typeOf(s) != typeOf(meanSquare))
    return fail();
  // The reduced dims must be the trailing ones, [axis, rank).
  int64_t rank = typeOf(x).getRank();
  SmallVector<bool> reduced(size_t(rank), false);
  for (int64_t a : mean.getAxes()) { // the verifier holds them in [0, rank)
    if (a < 0 || a >= rank)
      return fail();
    reduced[size_t(a)] = true;
  }
  int64_t axis = rank;
  while (axis > 0 && reduced[size_t(axis - 1)])
    --axis;
  if (axis == rank || llvm::count(reduced, true) != rank - axis)
    return fail();
  if (!isSquareOf(mean.getInput(), x, m.matched))
    return fail();
  m.axis = axis;
  m.epsilon = *epsilon;
  return true;
}

/// The normalised row `v`, x * (1 / sqrt(s)) or x / sqrt(s), as (x, s).
std::optional<std::pair<Value, Value>> normalised(Value v, Matched &matched) {
  size_t mark = matched.size();
  if (auto div = interior<graph::DivOp>(v, matched)) {
    if (auto sqrt = interior<graph::SqrtOp>(div.getRhs(), matched))
      return std::pair{div.getLhs(), sqrt.getInput()};
    matched.resize(mark);
    return std::nullopt;
  }
  SmallVector<Value> fs;
  factors(v, fs, matched);
  if (fs.size() == 2)
    for (int i = 0; i < 2; ++i)
      if (Value s = inverseRoot(fs[size_t(i)], matched))
        return std::pair{fs[size_t(1 - i)], s};
  matched.resize(mark);
  return std::nullopt;
}

/// The RMSNorm `root` (the product with the weight) computes, if it is one.
std::optional<RmsNorm> matchRmsNorm(graph::MulOp root) {
  RankedTensorType type = typeOf(root.getResult());
  if (!isa<FloatType>(type.getElementType()))
    return std::nullopt;
  for (int first = 0; first < 2; ++first) {
    RmsNorm m;
    m.scale = root->getOperand(unsigned(first));
    Value row = root->getOperand(unsigned(1 - first));
    // A 16-bit model's statistics in f32: the normalised row cast back.
    if (auto narrowed = interior<graph::CastOp>(row, m.matched))
      row = narrowed.getInput();
    auto found = normalised(row, m.matched);
    if (!found || !isMeanSquarePlusEpsilon(found->second, found->first, m))
      continue;
    Value x = found->first;
    if (typeOf(x) != type) { // x widened to f32 first: normalise the input
      auto widened = x.getDefiningOp<graph::CastOp>();
      if (!widened || typeOf(widened.getInput()) != type)
        continue;
      x = widened.getInput();
    }
    // The weight must have the normalised shape, not broadcast onto it.
    if (typeOf(m.scale) != RankedTensorType::get(type.getShape().drop_front(m.axis),
                                                 type.getElementType()))
      continue;
    m.input = x;
    return m;
  }
  return std::nullopt;
}

struct FuseRmsNorm : impl::FuseRmsNormBase<FuseRmsNorm> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    SmallVector<graph::MulOp> roots;
    func.walk([&](graph::MulOp op) { roots.push_back(op); });
    int fused = 0;
    for (graph::MulOp root : llvm::reverse(roots)) { // outermost first
      if (!root->getBlock()) // consumed by an earlier match
        continue;
      auto m = matchRmsNorm(root);
      if (!m)
        continue;
      OpBuilder b(root);
      auto op = b.create<graph::LayerNormOp>(
          root.getLoc(), root.getType(), m->input, m->scale, Value(),
          b.getI64IntegerAttr(m->axis), b.getF64FloatAttr(m->epsilon), b.getUnitAttr());
      root.replaceAllUsesWith(op.getResult());
      root.erase();
      // Interior ops, users first; a widening cast of the input and
      // constants are left to cleanup.
      for (Operation *dead : m->matched)
        dead->dropAllUses(), dead->erase();
      ++fused;
    }
    if (fused)
      addNote(func, "fusion: " + std::to_string(fused) +
                        " RMSNorms written out in ops computed as one rms layer_norm each " +
                        "(statistics in f32)");
  }
};

} // namespace
} // namespace dtc
