//===- CompressGradients.cpp - weight gradients reduced in bf16 or f16 ----===//
//
// Passes description: compiler/Passes.td. Why not keep f32: on a data-
// parallel step the gradients' reduction is the traffic that grows with the
// model; half the bytes is half that time where the network is the limit.
// Why cast around the collective rather than reduce into a wider type: the
// runtime's collectives move one type, and MPI's bf16/f16 sums (ours,
// runtime/comm) already widen each pair to f32 before rounding.
//
//===----------------------------------------------------------------------===//
#include "compiler/CompileNotes.h"
#include "compiler/Passes.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"
#include "plan/FormatBytes.h"

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"

namespace dtc {
#define GEN_PASS_DEF_COMPRESSGRADIENTS
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

struct CompressGradients : impl::CompressGradientsBase<CompressGradients> {
  using CompressGradientsBase::CompressGradientsBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (precision != "bf16" && precision != "f16") {
      func.emitError("--compress-gradients takes bf16 or f16, got '") << precision << "'";
      return signalPassFailure();
    }
    OpBuilder b(&getContext());
    Type narrow = precision == "bf16" ? Type(b.getBF16Type()) : Type(b.getF16Type());
    SmallVector<Operation *> reductions;
    func.walk([&](Operation *op) {
      if (op->hasAttr(attr::kGradientReduction) &&
          isa<mesh::AllReduceOp, mesh::ReduceScatterOp>(op) &&
          cast<ShapedType>(op->getOperand(0).getType()).getElementType().isF32())
        reductions.push_back(op);
    });
    double bytes = 0;
    for (Operation *op : reductions) {
      auto in = cast<ShapedType>(op->getOperand(0).getType());
      auto out = cast<ShapedType>(op->getResult(0).getType());
      b.setInsertionPoint(op);
      Value cast = b.create<graph::CastOp>(op->getLoc(), in.clone(narrow), op->getOperand(0));
      op->setOperand(0, cast);
      op->getResult(0).setType(out.clone(narrow));
      b.setInsertionPointAfter(op);
      auto back = b.create<graph::CastOp>(op->getLoc(), out, op->getResult(0));
      op->getResult(0).replaceAllUsesExcept(back, back);
      // The casts run where the reduction does (once per step after a
      // deferred one).
      if (Attribute once = op->getAttr(attr::kOncePerStep)) {
        cast.getDefiningOp()->setAttr(attr::kOncePerStep, once);
        back->setAttr(attr::kOncePerStep, once);
      }
      if (Attribute sharding = op->getAttr(attr::kSharding))
        back->setAttr(attr::kSharding, sharding);
      bytes += double(in.getNumElements()) * 2;
    }
    if (!reductions.empty())
      addNote(func, "gradient compression: " + std::to_string(reductions.size()) +
                        " gradient reductions sent in " + precision.getValue() + " (" +
                        plan::formatBytes(int64_t(bytes)) + " instead of " +
                        plan::formatBytes(int64_t(2 * bytes)) + " in f32)");
  }
};

} // namespace
} // namespace dtc
