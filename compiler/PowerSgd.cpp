//===- PowerSgd.cpp - weight gradients reduced as rank-r factors ----------===//
//
// Passes description: compiler/Passes.td. PowerSGD (Vogels et al. 2019),
// as PyTorch DDP's powerSGD_hook does it: a gradient matrix M (n x m, the
// tensor's last dim as m) travels as two thin factors. With the rank's
// error feedback E (what earlier steps' approximations left out) and the
// last step's Q (m x r, kept warm between steps):
//
//   M' = M + E;  P = all_reduce(M' Q);  P = orthonormal columns of P;
//   Q = all_reduce(M'^T P);  M^ = P Q^T;  E = M' - M^ / ranks
//
// (n + m) r values on the wire instead of n m. M^ is the sum over the
// ranks, as the all-reduce it replaces was (the step's loss already
// divides by the ranks), and E is this rank's share of what it missed.
// Before the first step Q is zero; a fixed full-rank Q (sines of the row
// and column indices, no table in the plan) stands in for it then. Only
// reductions where the factors move at most half the bytes are replaced.
//
//===----------------------------------------------------------------------===//
#include "compiler/CompileNotes.h"
#include "compiler/Passes.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"
#include "plan/FormatBytes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace dtc {
#define GEN_PASS_DEF_POWERSGD
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

struct PowerSgd : impl::PowerSgdBase<PowerSgd> {
  using PowerSgdBase::PowerSgdBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal() || !func->hasAttr(attr::kTraining))
      return;
    if (rank < 1) {
      func.emitError("PowerSGD's rank must be at least 1, got ") << rank.getValue();
      return signalPassFailure();
    }
    auto module = func->getParentOfType<ModuleOp>();
    mesh::MeshOp meshOp;
    module.walk([&](mesh::MeshOp m) { meshOp = m; });
    SmallVector<mesh::AllReduceOp> reductions;
    func.walk([&](mesh::AllReduceOp op) {
      auto type = cast<RankedTensorType>(op.getType());
      if (!op->hasAttr(attr::kGradientReduction) || !type.getElementType().isF32() ||
          type.getRank() < 2 || op.getReduction() != mesh::ReductionKind::Sum)
        return;
      int64_t m = type.getShape().back(), n = type.getNumElements() / m;
      if ((n + m) * rank * 2 <= n * m) // the factors at most half the bytes
        reductions.push_back(op);
    });
    if (reductions.empty())
      return;
    Block &block = func.getBody().front();
    Operation *terminator = block.getTerminator();
    OpBuilder b(&getContext());
    SmallVector<Value> newResults;
    SmallVector<std::string> newNames;
    double before = 0, after = 0;
    for (size_t index = 0; index < reductions.size(); ++index) {
      mesh::AllReduceOp reduce = reductions[index];
      Location loc = reduce.getLoc();
      auto type = cast<RankedTensorType>(reduce.getType());
      int64_t m = type.getShape().back(), n = type.getNumElements() / m, r = rank;
      int64_t ranks = 1;
      for (int16_t a : reduce.getMeshAxes())
        ranks *= meshOp.getShape()[size_t(a)];
      Attribute once = reduce->getAttr(attr::kOncePerStep);
      auto mark = [&](Value v) {
        if (once)
          v.getDefiningOp()->setAttr(attr::kOncePerStep, once);
        return v;
      };
      Type f32 = b.getF32Type();
      auto tensor = [&](ArrayRef<int64_t> shape) { return RankedTensorType::get(shape, f32); };
      auto scalar = [&](double v) {
        return b.create<graph::ConstantOp>(
            loc, DenseElementsAttr::get(tensor({}), b.getFloatAttr(f32, v)));
      };
      std::string name = "powersgd." + std::to_string(index);
      // The state: this rank's error and the warm-started Q, zeros at first.
      b.setInsertionPointToStart(&block);
      auto state = [&](const std::string &what, ArrayRef<int64_t> shape) {
        auto p = b.create<graph::ParameterOp>(loc, tensor(shape), b.getStringAttr(name + what));
        p->setAttr(attr::kZeros, b.getUnitAttr());
        return p.getResult();
      };
      Value error = state(".error", {n, m});
      Value q = state(".q", {m, r});
      b.setInsertionPoint(reduce);
      Value matrix = mark(b.create<graph::ReshapeOp>(loc, tensor({n, m}), reduce.getInput()));
      Value corrected = mark(b.create<graph::AddOp>(loc, matrix, error));
      // Q, or before the first step a fixed full-rank one: sin(i + 7 j + 1).
      SmallVector<float> rows, cols;
      for (int64_t i = 0; i < m; ++i)
        rows.push_back(float(i));
      for (int64_t j = 0; j < r; ++j)
        cols.push_back(float(7 * j + 1));
      auto table = [&](ArrayRef<int64_t> shape, ArrayRef<float> values) {
        return b.create<graph::ConstantOp>(loc, DenseElementsAttr::get(tensor(shape), values));
      };
      Value start = b.create<graph::SinOp>(
          loc, b.create<graph::AddOp>(loc, table({m, 1}, rows), table({1, r}, cols)));
      Value squares = b.create<graph::ReduceSumOp>(loc, b.create<graph::MulOp>(loc, q, q),
                                                   ArrayRef<int64_t>{0, 1}, false);
      Value unset = b.create<graph::EqualOp>(loc, squares, scalar(0));
      Value warm = mark(b.create<graph::WhereOp>(loc, tensor({m, r}), unset, start, q));
      Value p = mark(b.create<graph::MatmulOp>(loc, corrected, warm));
      auto reduceOver = [&](Value v) {
        auto all = b.create<mesh::AllReduceOp>(loc, v, reduce.getMesh(), reduce.getMeshAxes(),
                                               mesh::ReductionKind::Sum);
        all->setAttr(attr::kGradientReduction, b.getUnitAttr());
        return mark(all.getResult());
      };
      p = reduceOver(p);
      // Gram-Schmidt over P's r columns.
      SmallVector<Value> columns;
      for (int64_t k = 0; k < r; ++k) {
        Value c = mark(b.create<graph::SliceOp>(loc, tensor({n, 1}), p,
                                                b.getDenseI64ArrayAttr({0, k}),
                                                b.getDenseI64ArrayAttr({n, 1}),
                                                b.getDenseI64ArrayAttr({1, 1})));
        for (Value previous : columns) {
          Value dot = mark(b.create<graph::ReduceSumOp>(
              loc, mark(b.create<graph::MulOp>(loc, previous, c)), ArrayRef<int64_t>{0}, true));
          Value along = mark(b.create<graph::MulOp>(loc, dot, previous));
          c = mark(b.create<graph::SubOp>(loc, c, along));
        }
        Value norm = mark(b.create<graph::SqrtOp>(
            loc, mark(b.create<graph::AddOp>(
                     loc,
                     mark(b.create<graph::ReduceSumOp>(
                         loc, mark(b.create<graph::MulOp>(loc, c, c)), ArrayRef<int64_t>{0}, true)),
                     scalar(1e-16)))));
        columns.push_back(mark(b.create<graph::DivOp>(loc, c, norm)));
      }
      Value orthonormal =
          r == 1 ? columns.front()
                 : mark(b.create<graph::ConcatOp>(loc, tensor({n, r}), columns, int64_t(1)));
      Value newQ = reduceOver(mark(b.create<graph::MatmulOp>(loc, corrected, orthonormal,
                                                             /*transpose_lhs=*/true, false)));
      Value approx = mark(b.create<graph::MatmulOp>(loc, orthonormal, newQ, false,
                                                    /*transpose_rhs=*/true));
      Value newError = mark(b.create<graph::SubOp>(
          loc, corrected, mark(b.create<graph::MulOp>(loc, approx, scalar(1.0 / double(ranks))))));
      Value whole = mark(b.create<graph::ReshapeOp>(loc, type, approx));
      reduce.getResult().replaceAllUsesWith(whole);
      reduce.erase();
      newResults.append({newError, newQ});
      newNames.append({name + ".error", name + ".q"});
      before += double(n * m) * 4;
      after += double((n + m) * r) * 4;
    }
    // The state's new values are the step's results, each updating its
    // parameter.
    SmallVector<Value> results(terminator->getOperands());
    results.append(newResults);
    SmallVector<Type> types(func.getResultTypes());
    for (Value v : newResults)
      types.push_back(v.getType());
    unsigned first = func.getNumResults();
    b.setInsertionPoint(terminator);
    b.create<func::ReturnOp>(terminator->getLoc(), results);
    terminator->erase();
    func.setType(FunctionType::get(&getContext(), func.getArgumentTypes(), types));
    for (auto [i, name] : llvm::enumerate(newNames)) {
      func.setResultAttr(first + unsigned(i), attr::kUpdates, b.getStringAttr(name));
      func.setResultAttr(first + unsigned(i), "graph.name", b.getStringAttr(name + ".new"));
    }
    addNote(func, "gradient compression: PowerSGD rank " + std::to_string(rank) + ": " +
                      std::to_string(reductions.size()) +
                      " weight gradients' all-reduces sent as two factors each (" +
                      plan::formatBytes(int64_t(after)) + " instead of " +
                      plan::formatBytes(int64_t(before)) +
                      "), with error feedback; the others as computed");
  }
};

} // namespace
} // namespace dtc
