//===- FuseNormGradients.cpp - a layer norm's weight gradients in its kernel ===//
//
// Autodiff writes a layer norm's gradient as one row kernel for the
// input's gradient (graph.layer_norm_backward, which also gives each row's
// mean and rstd) and its weights' gradients as graph ops: the scale's,
// sum(dy * xhat) over the rows with xhat recomputed from those statistics,
// and the bias's, sum(dy). That is an elementwise kernel reading the input
// and dy again and writing their product (rounded to dy's type in mixed
// precision), and two reductions reading dy and the product. The row
// kernel has dy and xhat in hand: here it adds them up too, in f32, into
// one row of partial sums per group of rows (`scale_gradient`,
// `bias_gradient`), and a sum over the few groups gives each gradient.
// Runs after the step is split, so the groups are a rank's own rows.
//
//===----------------------------------------------------------------------===//
#include "compiler/CompileNotes.h"
#include "compiler/Passes.h"
#include "compiler/Placement.h"

#include "dialects/graph/GraphOps.h"

#include "mlir/IR/Builders.h"

namespace dtc {
#define GEN_PASS_DEF_FUSENORMGRADIENTS
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

/// Rows per group: at least kMinGroupRows, and at most kMaxGroups groups
/// (a GPU block each: about 8 resident per multiprocessor on an H100). The
/// partial sums are then at most 1/kMinGroupRows of dy's f32 size.
constexpr int64_t kMinGroupRows = 8;
constexpr int64_t kMaxGroups = 1024;

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// Whether `v` is `of` or its cast to f32 (a 16-bit value widened).
bool widens(Value v, Value of) {
  if (v == of)
    return true;
  auto cast = v.getDefiningOp<graph::CastOp>();
  return cast && cast.getInput() == of && typeOf(v).getElementType().isF32();
}

/// The operand of binary `op` other than `v` (null if neither or both are).
Value otherOperand(Operation *op, Value v) {
  if (op->getNumOperands() != 2 || (op->getOperand(0) == v) == (op->getOperand(1) == v))
    return {};
  return op->getOperand(0) == v ? op->getOperand(1) : op->getOperand(0);
}

/// Whether `sum` adds up its input over dims [0, axis) (a layer norm's rows).
bool sumsRows(graph::ReduceSumOp sum, int64_t axis) {
  int64_t rank = typeOf(sum.getInput()).getRank();
  SmallVector<int64_t> axes;
  for (int64_t a : sum.getAxes())
    axes.push_back(a < 0 ? a + rank : a);
  llvm::sort(axes);
  return axes == llvm::to_vector(llvm::seq<int64_t>(0, axis)) &&
         typeOf(sum.getOutput()).getElementType().isF32();
}

/// The sum over the rows of dy * xhat that `g`'s statistics make, as
/// autodiff writes it (dialects/graph/Gradients.cpp; products in either
/// order), the ops between collected in `ops`; null when there is none.
graph::ReduceSumOp scaleSum(graph::LayerNormBackwardOp g, SmallVectorImpl<Operation *> &ops) {
  Value x = g.getInput(), dy = g.getGradOutput(), rstd = g.getRstd();
  auto shape = typeOf(x).getShape();
  for (Operation *user : rstd.getUsers()) {
    auto xhat = dyn_cast<graph::MulOp>(user);
    Value centred = xhat ? otherOperand(xhat, rstd) : Value();
    if (!centred || !xhat->hasOneUse())
      continue;
    auto sub = centred.getDefiningOp<graph::SubOp>();
    if (g.getRms() ? !widens(centred, x)
                   : !sub || sub.getRhs() != g.getMean() || !widens(sub.getLhs(), x))
      continue;
    auto product = dyn_cast<graph::MulOp>(*xhat->getUsers().begin());
    Value grad = product ? otherOperand(product, xhat.getOutput()) : Value();
    if (!grad || !widens(grad, dy) || typeOf(product.getOutput()).getShape() != shape)
      continue;
    // In the order made: the widening casts, the centring, xhat, the
    // product, its narrowing cast.
    SmallVector<Operation *> found;
    Value widened = g.getRms() ? centred : sub.getLhs();
    for (auto [v, of] : {std::pair(grad, dy), std::pair(widened, x)})
      if (v != of)
        found.push_back(v.getDefiningOp());
    if (!g.getRms())
      found.push_back(sub);
    found.append({xhat, product});
    Value summed = product.getOutput();
    if (summed.hasOneUse())
      if (auto narrowed = dyn_cast<graph::CastOp>(*summed.getUsers().begin())) {
        summed = narrowed.getOutput();
        found.push_back(narrowed);
      }
    auto sum = summed.hasOneUse() ? dyn_cast<graph::ReduceSumOp>(*summed.getUsers().begin())
                                  : graph::ReduceSumOp();
    if (!sum || !sumsRows(sum, int64_t(g.getAxis())) || !samePart(sum, g))
      continue;
    ops.append(found);
    return sum;
  }
  return {};
}

/// A sum of dy itself over the rows: the bias's gradient.
graph::ReduceSumOp biasSum(graph::LayerNormBackwardOp g) {
  for (Operation *user : g.getGradOutput().getUsers())
    if (auto sum = dyn_cast<graph::ReduceSumOp>(user);
        sum && sumsRows(sum, int64_t(g.getAxis())) && samePart(sum, g))
      return sum;
  return {};
}

/// `partials` summed over its groups in place of `sum` (its type, its
/// attributes); one group is the sum.
Value total(OpBuilder &b, Value partials, graph::ReduceSumOp sum) {
  Location loc = sum.getLoc();
  SmallVector<int64_t> shape(typeOf(partials).getShape());
  Value result = partials;
  if (shape[0] > 1) {
    shape[0] = 1;
    auto summed = b.create<graph::ReduceSumOp>(
        loc, RankedTensorType::get(shape, b.getF32Type()), partials,
        b.getDenseI64ArrayAttr({0}), b.getBoolAttr(true));
    for (NamedAttribute a : sum->getDiscardableAttrs())
      summed->setAttr(a.getName(), a.getValue());
    result = summed.getOutput();
  }
  auto want = typeOf(sum.getOutput());
  if (want.getShape() != ArrayRef<int64_t>(shape))
    result = b.create<graph::ReshapeOp>(loc, want, result);
  return result;
}

/// `g` summing its scale's (and bias's) gradients; whether it does now.
bool fuse(graph::LayerNormBackwardOp g) {
  if (!g.getPartials().empty())
    return false;
  int64_t axis = int64_t(g.getAxis());
  auto shape = typeOf(g.getInput()).getShape();
  if (axis == 0)
    return false;
  SmallVector<Operation *> interior;
  graph::ReduceSumOp scale = scaleSum(g, interior);
  if (!scale)
    return false;
  graph::ReduceSumOp bias = g.getRms() ? graph::ReduceSumOp() : biasSum(g);
  // The bias's sum may come before the gradient op (it needs only dy):
  // what reads it moves below, or the bias is summed apart.
  if (bias && bias->isBeforeInBlock(g) && !sinkReadersBelow(bias.getOutput(), g))
    bias = {};

  int64_t rows = 1;
  for (int64_t d : shape.take_front(axis))
    rows *= d;
  int64_t perGroup = std::max(kMinGroupRows, (rows + kMaxGroups - 1) / kMaxGroups);
  SmallVector<int64_t> partialShape(shape);
  partialShape[0] = std::max<int64_t>(1, (rows + perGroup - 1) / perGroup);
  for (int64_t d = 1; d < axis; ++d)
    partialShape[size_t(d)] = 1;
  OpBuilder b(g);
  auto partialType = RankedTensorType::get(partialShape, b.getF32Type());
  SmallVector<Type> types(g->getResultTypes());
  types.append(bias ? 2 : 1, partialType);
  auto joined = b.create<graph::LayerNormBackwardOp>(
      g.getLoc(), types, g.getInput(), g.getScale(), g.getGradOutput(), g.getResidual(),
      g.getAxisAttr(), g.getEpsilonAttr(), g.getRmsAttr(), b.getUnitAttr(),
      bias ? b.getUnitAttr() : UnitAttr());
  for (NamedAttribute a : g->getDiscardableAttrs())
    joined->setAttr(a.getName(), a.getValue());
  for (unsigned r = 0; r < 3; ++r)
    g->getResult(r).replaceAllUsesWith(joined->getResult(r));
  if (bias) {
    OpBuilder at = bias->isBeforeInBlock(g) ? OpBuilder(g) : OpBuilder(bias);
    bias.getOutput().replaceAllUsesWith(total(at, joined.getPartials()[1], bias));
    bias.erase();
  }
  OpBuilder at(scale);
  scale.getOutput().replaceAllUsesWith(total(at, joined.getPartials()[0], scale));
  scale.erase();
  g.erase();
  // What computed the product alone, last reader first.
  for (Operation *op : llvm::reverse(interior))
    if (op->use_empty())
      op->erase();
  return true;
}

struct FuseNormGradients : impl::FuseNormGradientsBase<FuseNormGradients> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    SmallVector<graph::LayerNormBackwardOp> gradients;
    func.walk([&](graph::LayerNormBackwardOp g) { gradients.push_back(g); });
    int fused = 0;
    for (graph::LayerNormBackwardOp g : gradients)
      fused += fuse(g);
    if (fused)
      addNote(func, "fusion: " + std::to_string(fused) +
                        (fused == 1 ? " layer norm gradient sums its scale's and bias's "
                                      "gradients per group of rows as it writes"
                                    : " layer norm gradients sum their scale's and bias's "
                                      "gradients per group of rows as they write") +
                        " the input's (no product or reductions of dy of their own)");
  }
};

} // namespace
} // namespace dtc
