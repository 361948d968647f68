//===- FuseGelu.cpp - GELU's expanded forms as one graph.gelu -------------===//
//
// Exporters write GELU out in primitives when the framework computed it so:
// GPT-2's `gelu_new` is 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// and the older exporter's exact GELU is 0.5 x (1 + erf(x / sqrt 2)). As
// eight or so ops, training keeps their intermediates for the backward and
// differentiates each; as one graph.gelu it keeps x only and its gradient
// is one fused expression. Factors are matched in any order (products are
// flattened), constants to 1e-4 relative.
//
//===----------------------------------------------------------------------===//
#include "compiler/CompileNotes.h"
#include "compiler/ConstantValues.h"
#include "compiler/Interior.h"
#include "compiler/Passes.h"

#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

#include <cmath>

namespace dtc {
#define GEN_PASS_DEF_FUSEGELU
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

/// The ops a match consumed, erased once the root is replaced.
using Matched = SmallVector<Operation *>;

/// The factors of a product: `v` itself, or a graph.mul's operands
/// flattened (through interior muls).
void factors(Value v, SmallVectorImpl<Value> &out, Matched &matched, bool root = false) {
  auto mul = root ? v.getDefiningOp<graph::MulOp>() : interior<graph::MulOp>(v, matched);
  if (!mul) {
    out.push_back(v);
    return;
  }
  factors(mul.getLhs(), out, matched);
  factors(mul.getRhs(), out, matched);
}

/// Removes the factor equal to `want` (a scalar constant near it, or the
/// value itself); false when there is none.
bool takeConstant(SmallVectorImpl<Value> &fs, double want) {
  for (auto *it = fs.begin(); it != fs.end(); ++it)
    if (near(scalarConstant(*it), want)) {
      fs.erase(it);
      return true;
    }
  return false;
}
bool takeValue(SmallVectorImpl<Value> &fs, Value want) {
  for (auto *it = fs.begin(); it != fs.end(); ++it)
    if (*it == want) {
      fs.erase(it);
      return true;
    }
  return false;
}

/// 1 + f (either order): f, else null.
Value onePlus(Value v, Matched &matched) {
  auto add = interior<graph::AddOp>(v, matched);
  if (!add)
    return {};
  if (near(scalarConstant(add.getRhs()), 1.0))
    return add.getLhs();
  if (near(scalarConstant(add.getLhs()), 1.0))
    return add.getRhs();
  return {};
}

/// Whether `v` is x^3: pow(x, 3) or a product of three x.
bool isCube(Value v, Value x, Matched &matched) {
  if (auto pow = v.getDefiningOp<graph::PowOp>(); pow && pow->hasOneUse())
    if (pow.getLhs() == x && near(scalarConstant(pow.getRhs()), 3.0)) {
      matched.push_back(pow);
      return true;
    }
  SmallVector<Value> fs;
  factors(v, fs, matched);
  return fs.size() == 3 && llvm::all_of(fs, [&](Value f) { return f == x; });
}

/// Whether `u` is sqrt(2/pi) (x + 0.044715 x^3), or Megatron's
/// sqrt(2/pi) x (1 + 0.044715 x^2).
bool isTanhArgument(Value u, Value x, Matched &matched) {
  const double c = std::sqrt(2.0 / M_PI), a = 0.044715;
  SmallVector<Value> fs;
  factors(u, fs, matched);
  if (!takeConstant(fs, c))
    return false;
  if (fs.size() == 1) { // x + a x^3
    auto add = interior<graph::AddOp>(fs[0], matched);
    if (!add)
      return false;
    Value other = add.getLhs() == x ? add.getRhs() : add.getRhs() == x ? add.getLhs() : Value();
    SmallVector<Value> cube;
    if (!other || (factors(other, cube, matched), !takeConstant(cube, a)) || cube.size() != 1)
      return false;
    return isCube(cube[0], x, matched);
  }
  if (fs.size() == 2 && takeValue(fs, x)) { // x (1 + a x^2)
    Value rest = onePlus(fs[0], matched);
    SmallVector<Value> square;
    if (!rest || (factors(rest, square, matched), !takeConstant(square, a)))
      return false;
    return square.size() == 2 && square[0] == x && square[1] == x;
  }
  return false;
}

/// Whether `v` is x / sqrt 2 (or x * (1/sqrt 2)).
bool isScaledForErf(Value v, Value x, Matched &matched) {
  if (auto div = interior<graph::DivOp>(v, matched))
    return div.getLhs() == x && near(scalarConstant(div.getRhs()), M_SQRT2);
  SmallVector<Value> fs;
  factors(v, fs, matched);
  return takeConstant(fs, M_SQRT1_2) && fs.size() == 1 && fs[0] == x;
}

/// The GELU `root` computes, as (x, approximate), when it is one.
std::optional<std::pair<Value, StringRef>> matchGelu(graph::MulOp root, Matched &matched) {
  SmallVector<Value> fs;
  factors(root, fs, matched, /*root=*/true);
  if (fs.size() != 3 || !takeConstant(fs, 0.5))
    return std::nullopt;
  for (int first = 0; first < 2; ++first) {
    Value x = fs[first], bracket = fs[1 - first];
    size_t mark = matched.size();
    Value t = onePlus(bracket, matched);
    if (!t || x.getType() != root.getType()) {
      matched.resize(mark);
      continue;
    }
    if (auto tanh = interior<graph::TanhOp>(t, matched);
        tanh && isTanhArgument(tanh.getInput(), x, matched))
      return std::pair{x, StringRef("tanh")};
    if (auto erf = interior<graph::ErfOp>(t, matched);
        erf && isScaledForErf(erf.getInput(), x, matched))
      return std::pair{x, StringRef("none")};
    matched.resize(mark);
  }
  return std::nullopt;
}

struct FuseGelu : impl::FuseGeluBase<FuseGelu> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    SmallVector<graph::MulOp> roots;
    func.walk([&](graph::MulOp op) { roots.push_back(op); });
    int tanhForm = 0, erfForm = 0;
    for (graph::MulOp root : llvm::reverse(roots)) { // outermost first
      if (!root->getBlock()) // consumed by an earlier match
        continue;
      Matched matched;
      auto gelu = matchGelu(root, matched);
      if (!gelu || !isa<FloatType>(cast<ShapedType>(root.getType()).getElementType()))
        continue;
      OpBuilder b(root);
      auto op = b.create<graph::GeluOp>(root.getLoc(), root.getType(), gelu->first,
                                        b.getStringAttr(gelu->second));
      root.replaceAllUsesWith(op.getResult());
      root.erase();
      // Interior ops, users first; constants are left to cleanup.
      for (Operation *dead : matched)
        dead->dropAllUses(), dead->erase();
      (gelu->second == "tanh" ? tanhForm : erfForm)++;
    }
    if (tanhForm + erfForm)
      addNote(func, "fusion: " + std::to_string(tanhForm + erfForm) +
                        " GELUs written out in primitives (" + std::to_string(tanhForm) +
                        " tanh form, " + std::to_string(erfForm) +
                        " erf form) computed as one gelu each");
  }
};

} // namespace
} // namespace dtc
