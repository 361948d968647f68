//===- FuseLossGradient.cpp - the loss's gradient written by its row kernel -===//
//
// graph.cross_entropy reads each row of logits (max, sum of exps) and
// writes the row's loss and log-sum-exp; autodiff writes the logits'
// gradient after it as graph ops, (exp(logits - lse) - onehot(label)) *
// factor, the factor each row's loss gradient times whether its label is
// a class: one elementwise kernel that reads the logits again. At a
// language model's vocabulary the logits are the step's largest tensor
// (GPT-2's benchmark step: 823 MB in bf16), so that second read is a
// twentieth of the step's non-GEMM time. The row kernel has the row in
// hand: the factor's ops (they read only the labels and constants) move
// before it, and it writes the gradient too (`grad_scale`). Before the
// step is cut into pipeline stages, so that a last stage stashes the
// gradient for its backward where it stashed the logits and the labels.
//
//===----------------------------------------------------------------------===//
#include "compiler/CompileNotes.h"
#include "compiler/FusionMatches.h"
#include "compiler/Passes.h"
#include "compiler/Placement.h"

#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

namespace dtc {
#define GEN_PASS_DEF_FUSELOSSGRADIENT
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// Whether `v` is [rows..., 1] of `rows` (a reshape of it: autodiff's column).
bool isColumnOf(Value v, Value rows) {
  auto r = v.getDefiningOp<graph::ReshapeOp>();
  return r && r.getInput() == rows && typeOf(v).getShape().drop_back() == typeOf(rows).getShape() &&
         typeOf(v).getShape().back() == 1;
}

/// Whether `v` is the integer constant 0, 1, ..., n-1 of shape [n].
bool isClassIds(Value v, int64_t n) {
  auto c = v.getDefiningOp<graph::ConstantOp>();
  auto dense = c ? dyn_cast<DenseIntElementsAttr>(c.getValue()) : DenseIntElementsAttr();
  if (!dense || dense.getType().getRank() != 1 || dense.getNumElements() != n)
    return false;
  int64_t k = 0;
  for (const APInt &id : dense.getValues<APInt>())
    if (id.getSExtValue() != k++)
      return false;
  return true;
}

} // namespace

/// The logits' gradient as autodiff writes it (dialects/graph/Gradients.cpp)
/// from `ce`'s lse: its last value (of the logits' type), the row factor
/// in `factor`, the ops it is made of in `ops` (in the order made).
Value lossGradient(graph::CrossEntropyOp ce, Value &factor, SmallVectorImpl<Operation *> &ops) {
  Value logits = ce.getLogits(), labels = ce.getLabels();
  int64_t classes = typeOf(logits).getShape().back();
  for (Operation *user : ce.getLse().getUsers()) {
    auto column = dyn_cast<graph::ReshapeOp>(user);
    if (!column || !isColumnOf(column.getOutput(), ce.getLse()) || !column->hasOneUse())
      continue;
    auto shifted = dyn_cast<graph::SubOp>(*column->getUsers().begin());
    if (!shifted || shifted.getRhs() != column.getOutput() || !shifted->hasOneUse())
      continue;
    Value wide = shifted.getLhs();
    auto widen = wide.getDefiningOp<graph::CastOp>();
    if (wide != logits && !(widen && widen.getInput() == logits))
      continue;
    auto p = dyn_cast<graph::ExpOp>(*shifted->getUsers().begin());
    if (!p || !p->hasOneUse())
      continue;
    auto d = dyn_cast<graph::SubOp>(*p->getUsers().begin());
    if (!d || d.getLhs() != p.getOutput() || !d->hasOneUse())
      continue;
    auto hitF = d.getRhs().getDefiningOp<graph::CastOp>();
    auto hit = hitF ? hitF.getInput().getDefiningOp<graph::EqualOp>() : graph::EqualOp();
    if (!hit || !((isColumnOf(hit.getLhs(), labels) && isClassIds(hit.getRhs(), classes)) ||
                  (isColumnOf(hit.getRhs(), labels) && isClassIds(hit.getLhs(), classes))))
      continue;
    auto m = dyn_cast<graph::MulOp>(*d->getUsers().begin());
    if (!m)
      continue;
    Value f = m.getLhs() == d.getOutput() ? m.getRhs() : m.getLhs();
    auto fType = typeOf(f);
    SmallVector<int64_t> columnShape(typeOf(labels).getShape());
    columnShape.push_back(1);
    if (f == d.getOutput() || !fType.getElementType().isF32() ||
        fType.getShape() != ArrayRef<int64_t>(columnShape))
      continue;
    Value last = m.getOutput();
    SmallVector<Operation *> found;
    if (widen)
      found.push_back(widen);
    found.append({column, shifted, p, hit.getLhs().getDefiningOp(),
                  hit.getRhs().getDefiningOp(), hit, hitF, d, m});
    if (typeOf(last) != typeOf(logits)) {
      auto narrow = last.hasOneUse() ? dyn_cast<graph::CastOp>(*last.getUsers().begin())
                                     : graph::CastOp();
      if (!narrow || typeOf(narrow.getOutput()) != typeOf(logits))
        continue;
      found.push_back(narrow);
      last = narrow.getOutput();
    }
    factor = f;
    ops.append(found);
    return last;
  }
  return {};
}

namespace {

/// Moves what makes `value` and comes after `before` to just before it, in
/// order; whether it could (none of it reads `before`'s results, all of it
/// in `before`'s part).
bool hoistAbove(Value value, Operation *before) {
  llvm::SetVector<Operation *> slice;
  SmallVector<Value> work{value};
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || slice.contains(def))
      continue;
    if (def->getBlock() != before->getBlock())
      return false; // the step's ops are one block; anything else stays as it is
    if (def->isBeforeInBlock(before))
      continue;
    if (def == before || def->getNumRegions() || !samePart(def, before))
      return false;
    slice.insert(def);
    work.append(def->operand_begin(), def->operand_end());
  }
  SmallVector<Operation *> inOrder(slice.begin(), slice.end());
  llvm::sort(inOrder, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  for (Operation *op : inOrder)
    op->moveBefore(before);
  return true;
}

/// `ce` writing its logits' gradient; whether it does now.
bool fuse(graph::CrossEntropyOp ce) {
  if (ce.getGradScale())
    return false;
  Value factor;
  SmallVector<Operation *> interior;
  Value gradient = lossGradient(ce, factor, interior);
  if (!gradient || !samePart(gradient.getDefiningOp(), ce) || !hoistAbove(factor, ce))
    return false;
  OpBuilder b(ce);
  Value scale = b.create<graph::ReshapeOp>(
      ce.getLoc(), RankedTensorType::get(typeOf(ce.getLabels()).getShape(), b.getF32Type()),
      factor);
  SmallVector<Type, 3> types{ce.getLoss().getType(), ce.getLse().getType(),
                            ce.getLogits().getType()};
  auto joined = b.create<graph::CrossEntropyOp>(ce.getLoc(), types, ce.getLogits(),
                                                ce.getLabels(), scale);
  for (NamedAttribute a : ce->getDiscardableAttrs())
    joined->setAttr(a.getName(), a.getValue());
  ce.getLoss().replaceAllUsesWith(joined.getLoss());
  ce.getLse().replaceAllUsesWith(joined.getLse());
  gradient.replaceAllUsesWith(joined.getGradLogits()[0]);
  ce.erase();
  for (Operation *op : llvm::reverse(interior))
    if (op->use_empty())
      op->erase();
  return true;
}

struct FuseLossGradient : impl::FuseLossGradientBase<FuseLossGradient> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    SmallVector<graph::CrossEntropyOp> losses;
    func.walk([&](graph::CrossEntropyOp ce) { losses.push_back(ce); });
    int fused = 0;
    for (graph::CrossEntropyOp ce : losses)
      fused += fuse(ce);
    if (fused)
      addNote(func, "fusion: " + std::to_string(fused) +
                        (fused == 1 ? " cross-entropy loss writes the logits' gradient as it "
                                      "reads them"
                                    : " cross-entropy losses write the logits' gradient as they "
                                      "read them") +
                        " (no second pass over the logits)");
  }
};

} // namespace
} // namespace dtc
