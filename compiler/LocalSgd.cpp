//===- LocalSgd.cpp - data-parallel replicas that train on their own ------===//
//
// Passes description: compiler/Passes.td. Why the gradient is scaled, not
// the loss changed: the step's loss (built before partitioning) is the
// all-reduced sum of each rank's mean over its part of the batch divided
// by the data-parallel ranks, so that the summed gradients are the
// batch's. Without the sum, each rank's gradient is 1/n of its own mean
// loss's; multiplying by n gives the gradient a single device training on
// that part alone would take, and the reported loss stays the mean over
// every rank's part. Why the runtime averages rather than a second compiled
// program: the average is one all-reduce and a scale per weight, the
// same on every backend's Communicator (docs/local-sgd.md).
//
//===----------------------------------------------------------------------===//
#include "compiler/CompileNotes.h"
#include "compiler/OwnLoss.h"
#include "compiler/Passes.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace dtc {
#define GEN_PASS_DEF_LOCALSGD
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

struct LocalSgd : impl::LocalSgdBase<LocalSgd> {
  using LocalSgdBase::LocalSgdBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    auto training = func->getAttrOfType<DictionaryAttr>(attr::kTraining);
    if (func.isExternal() || !training)
      return;
    if (averageEvery < 1) {
      func.emitError("--average-every needs a number of steps of at least 1, got ")
          << averageEvery.getValue();
      return signalPassFailure();
    }
    auto module = func->getParentOfType<ModuleOp>();
    auto names = module ? module->getAttrOfType<ArrayAttr>(attr::kMeshAxisNames) : ArrayAttr();
    mesh::MeshOp meshOp;
    if (module)
      module.walk([&](mesh::MeshOp m) { meshOp = m; });
    int16_t data = -1;
    if (names && meshOp)
      for (auto [i, name] : llvm::enumerate(names.getAsValueRange<StringAttr>()))
        if (name == axis.getValue())
          data = int16_t(i);
    if (data < 0) {
      func.emitError("--sync local keeps replicas along the data-parallel axis '")
          << axis.getValue() << "', which the mesh does not have: give --dp N";
      return signalPassFailure();
    }
    int64_t replicas = meshOp.getShape()[size_t(data)];
    OpBuilder b(&getContext());
    int changed = 0;
    WalkResult walk = func.walk([&](Operation *op) -> WalkResult {
      if (!op->hasAttr(attr::kGradientReduction))
        return WalkResult::advance();
      if (auto scatter = dyn_cast<mesh::ReduceScatterOp>(op))
        if (llvm::is_contained(scatter.getMeshAxes(), data)) {
          op->emitError("--sync local needs every weight whole on each data-parallel rank "
                        "(ZeRO stage 0), but this gradient is reduce-scattered over '")
              << axis.getValue() << "'";
          return WalkResult::interrupt();
        }
      auto reduce = dyn_cast<mesh::AllReduceOp>(op);
      if (!reduce || !llvm::is_contained(reduce.getMeshAxes(), data))
        return WalkResult::advance();
      SmallVector<int16_t> rest;
      for (int16_t a : reduce.getMeshAxes())
        if (a != data)
          rest.push_back(a);
      b.setInsertionPoint(reduce);
      Value gradient = reduce.getInput();
      if (!rest.empty()) {
        auto kept = b.create<mesh::AllReduceOp>(reduce.getLoc(), gradient, reduce.getMesh(), rest,
                                                reduce.getReduction());
        for (StringRef name : {attr::kGradientReduction, attr::kSharding, attr::kOncePerStep})
          if (Attribute a = reduce->getAttr(name))
            kept->setAttr(name, a);
        gradient = kept;
      }
      auto type = cast<RankedTensorType>(gradient.getType());
      Value scale = b.create<graph::ConstantOp>(
          reduce.getLoc(),
          DenseElementsAttr::get(RankedTensorType::get({}, type.getElementType()),
                                 b.getFloatAttr(type.getElementType(), double(replicas))));
      Value scaled = b.create<graph::MulOp>(reduce.getLoc(), gradient, scale);
      for (StringRef kept : {attr::kSharding, attr::kOncePerStep})
        if (Attribute a = reduce->getAttr(kept))
          scaled.getDefiningOp()->setAttr(kept, a);
      reduce.getResult().replaceAllUsesWith(scaled);
      ++changed;
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();
    // Federated clients share nothing within a round: the loss (a scalar
    // all-reduced sum of each rank's mean over the ranks) becomes this
    // rank's mean; any other collective over the axis cannot stay.
    if (federated &&
        failed(keepOwnLoss(func, data, replicas, axis.getValue(),
                           "--sync federated: clients share nothing during a round", "")))
      return signalPassFailure();
    // Ops the walk left behind are erased after it.
    SmallVector<Operation *> dead;
    func.walk([&](mesh::AllReduceOp op) {
      if (op->hasAttr(attr::kGradientReduction) && op.use_empty())
        dead.push_back(op);
    });
    for (Operation *op : dead)
      op->erase();
    NamedAttrList options(training);
    options.set("sync", b.getStringAttr(federated ? "federated" : "local"));
    options.set("average_every", b.getI64IntegerAttr(averageEvery));
    options.set("data_axes", b.getDenseI64ArrayAttr({int64_t(data)}));
    func->setAttr(attr::kTraining, options.getDictionary(&getContext()));
    if (federated) {
      addNote(func, "sync: federated averaging: each of the " + std::to_string(replicas) + " '" +
                        axis.getValue() + "' ranks is a client training on its own data (" +
                        std::to_string(changed) +
                        " gradient all-reduces and the loss's left out); dtc run --rounds "
                        "averages the clients' weights after each round, weighted by their "
                        "samples");
      return;
    }
    addNote(func, "sync: local SGD: each of the " + std::to_string(replicas) + " '" +
                      axis.getValue() + "' ranks trains its own replica (" +
                      std::to_string(changed) +
                      " gradient all-reduces left out); the runtime averages the weights every " +
                      std::to_string(averageEvery) + (averageEvery == 1 ? " step" : " steps") +
                      " and at the end");
  }
};

} // namespace
} // namespace dtc
