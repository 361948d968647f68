//===- FuseRotary.cpp - a rotary embedding's ops as one graph.rotary -----===//
//
// Llama, Mistral and Qwen rotate q and k by their positions as PyTorch
// writes it: x * cos + rotate_half(x) * sin, rotate_half(x) the concat of
// -x's upper half and x's lower half along the last dim. Exported, that is
// two slices, a negation, a concat, two products and a sum, the slices and
// the concat moves no elementwise kernel can fuse: six kernels forward,
// more backward, each a pass over q or k (13% of a small Llama's simulated
// bf16 step). graph.rotary is one kernel each way, an element reading its
// partner half a row away, the tables in f32.
//
//===----------------------------------------------------------------------===//
#include "compiler/CompileNotes.h"
#include "compiler/Interior.h"
#include "compiler/Passes.h"

#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"

namespace dtc {
#define GEN_PASS_DEF_FUSEROTARY
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

using Matched = SmallVector<Operation *>;

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// x when `v` is x's last dim [begin, begin + size) (strides 1, the other
/// dims whole), read by nothing else.
Value lastDimSlice(Value v, int64_t begin, int64_t size, Matched &matched) {
  auto slice = interior<graph::SliceOp>(v, matched);
  if (!slice)
    return {};
  ArrayRef<int64_t> from = typeOf(slice.getInput()).getShape();
  size_t last = from.size() - 1;
  for (size_t d = 0; d < from.size(); ++d)
    if (slice.getStrides()[d] != 1 ||
        slice.getOffsets()[d] != (d == last ? begin : 0) ||
        slice.getSizes()[d] != (d == last ? size : from[d]))
      return {};
  return slice.getInput();
}

/// x when `v` is rotate_half(x): concat(-x[..., h:], x[..., :h]) on the
/// last dim, its parts read by nothing else.
Value rotateHalfOf(Value v, Matched &matched) {
  auto concat = interior<graph::ConcatOp>(v, matched);
  if (!concat || concat.getInputs().size() != 2 ||
      concat.getAxis() != typeOf(v).getRank() - 1 || typeOf(v).getShape().back() % 2)
    return {};
  int64_t h = typeOf(v).getShape().back() / 2;
  auto neg = interior<graph::NegOp>(concat.getInputs()[0], matched);
  Value upper = neg ? lastDimSlice(neg.getInput(), h, h, matched) : Value();
  Value lower = lastDimSlice(concat.getInputs()[1], 0, h, matched);
  return upper && upper == lower ? upper : Value();
}

/// Whether `table` is computed with no trained parameter (positions,
/// constants, frozen tables): it gets no gradient through graph.rotary.
bool isTable(Value table) {
  SmallVector<Value> work{table};
  llvm::DenseSet<Operation *> seen;
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || !seen.insert(def).second)
      continue;
    if (auto p = dyn_cast<graph::ParameterOp>(def); p && !p.getFrozen())
      return false;
    llvm::append_range(work, def->getOperands());
  }
  return true;
}

/// The (value, other factor) pairs of a product read by `add` alone.
SmallVector<std::pair<Value, Value>, 2> productTerms(Value v, Matched &matched) {
  auto mul = interior<graph::MulOp>(v, matched);
  if (!mul)
    return {};
  return {{mul.getLhs(), mul.getRhs()}, {mul.getRhs(), mul.getLhs()}};
}

struct Rotary {
  Value input, cos, sin;
  Matched matched; // read by nothing else, erased after
};

/// x * cos + rotate_half(x) * sin, from its sum back (either order of
/// either sum or product).
std::optional<Rotary> matchRotary(graph::AddOp add) {
  for (auto [first, second] : {std::pair{add.getLhs(), add.getRhs()},
                               std::pair{add.getRhs(), add.getLhs()}}) {
    Matched outer;
    auto plain = productTerms(first, outer), rotated = productTerms(second, outer);
    for (auto [x, cos] : plain)
      for (auto [r, sin] : rotated) {
        Matched matched = outer;
        Value rotatedInput = rotateHalfOf(r, matched);
        if (!rotatedInput || rotatedInput != x || typeOf(x) != typeOf(add.getOutput()))
          continue;
        // The tables broadcast to x and have no gradient.
        auto fits = [&](Value t) {
          auto type = typeOf(t);
          if (type.getRank() > typeOf(x).getRank() ||
              type.getShape().back() != typeOf(x).getShape().back() ||
              !(type.getElementType().isF32() ||
                type.getElementType() == typeOf(x).getElementType()))
            return false;
          for (int64_t d = 1; d <= type.getRank(); ++d) {
            int64_t n = type.getDimSize(type.getRank() - d);
            if (n != 1 && n != typeOf(x).getDimSize(typeOf(x).getRank() - d))
              return false;
          }
          return isTable(t);
        };
        if (fits(cos) && fits(sin))
          return Rotary{x, cos, sin, matched};
      }
  }
  return std::nullopt;
}

struct FuseRotary : impl::FuseRotaryBase<FuseRotary> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    SmallVector<graph::AddOp> roots;
    func.walk([&](graph::AddOp op) { roots.push_back(op); });
    int fused = 0;
    for (graph::AddOp root : roots) {
      auto m = matchRotary(root);
      if (!m)
        continue;
      OpBuilder b(root);
      auto rotary = b.create<graph::RotaryOp>(root.getLoc(), m->input, m->cos, m->sin,
                                              UnitAttr());
      root.replaceAllUsesWith(rotary.getOutput());
      root.erase();
      // Interior ops, users first (in the order matched: products, then
      // the concat, negation and slices).
      for (Operation *dead : m->matched)
        dead->dropAllUses(), dead->erase();
      ++fused;
    }
    if (fused)
      addNote(func, "fusion: " + std::to_string(fused) +
                        " rotary embeddings (x cos + rotate_half(x) sin) computed as one op "
                        "each: no slices, negation or concat of their own");
  }
};

} // namespace
} // namespace dtc
