//===- Pipeline.cpp -------------------------------------------------------===//
#include "compiler/Pipeline.h"

#include "compiler/Passes.h"
#include "compiler/PlanEmitter.h"
#include "dialects/graph/GraphOps.h"
#include "runtime/plan/FormatBytes.h"

#include "mlir/Dialect/Mesh/IR/MeshDialect.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/BitVector.h"
#include "mlir/Transforms/Passes.h"


using namespace mlir;

namespace dtc {
namespace {

std::string fmtNumber(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", v);
  return buffer;
}

int64_t intAttr(Operation *op, StringRef name) {
  auto attr = op->getAttrOfType<IntegerAttr>(name);
  return attr ? attr.getInt() : 0;
}

} // namespace

/// A data-parallel mesh: every input's batch dim (dim 0) split over the
/// `dp` axis. Inputs without dims (the optimizer's scalars) stay whole.
static LogicalResult splitBatch(ModuleOp module, func::FuncOp func, int64_t ranks) {
  module.getContext()->loadDialect<mesh::MeshDialect>();
  OpBuilder b(module.getContext());
  b.setInsertionPointToStart(module.getBody());
  b.create<mesh::MeshOp>(module.getLoc(), "mesh", ArrayRef<int64_t>{ranks});
  module->setAttr("dtc.mesh_axis_names", b.getArrayAttr({b.getStringAttr("dp")}));
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto type = cast<RankedTensorType>(func.getArgument(i).getType());
    if (type.getRank() == 0)
      continue;
    if (type.getDimSize(0) % ranks != 0) {
      auto name = func.getArgAttrOfType<StringAttr>(i, "graph.name");
      return func.emitError() << "--dp " << ranks << ": input '"
                              << (name ? name.getValue() : "") << "' has batch "
                              << type.getDimSize(0) << ", which " << ranks
                              << " ranks cannot split evenly";
    }
    SmallVector<Attribute> dims(type.getRank(), b.getDenseI64ArrayAttr({}));
    dims[0] = b.getDenseI64ArrayAttr({0});
    func.setArgAttr(i, "dtc.sharding", b.getArrayAttr(dims));
  }
  return success();
}

LogicalResult compileToPlan(ModuleOp module, plan::Plan &plan,
                            const TrainingOptions *training, const ParallelOptions &parallel) {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func)
    return module.emitError("no function 'main' to compile");
  int parametersBefore = 0;
  func.walk([&](graph::ParameterOp) { ++parametersBefore; });
  int norms = 0, relus = 0, transposes = 0;
  func.walk([&](graph::BatchNormOp) { ++norms; });
  if (training && failed(buildTrainingStep(func, *training, *plan.mutable_training())))
    return failure();
  func.walk([&](graph::TransposeOp) { ++transposes; });
  func.walk([&](graph::ReluOp) { ++relus; });

  if (parallel.dataParallel > 1 && failed(splitBatch(module, func, parallel.dataParallel)))
    return failure();
  if (training && parallel.dataParallel > 1) {
    // A split training step returns the loss and the updates only: the
    // model's outputs (logits) would have to be gathered whole on every
    // rank each step, and the trainer never reads them.
    llvm::BitVector modelOutputs(func.getNumResults());
    for (unsigned i = 1; i < func.getNumResults(); ++i)
      if (!func.getResultAttr(i, "dtc.updates"))
        modelOutputs.set(i);
    Operation *ret = func.getBody().front().getTerminator();
    ret->eraseOperands(modelOutputs);
    func.eraseResults(modelOutputs);
  }

  PassManager pm(module.getContext());
  OpPassManager &cleanup = pm.nest<func::FuncOp>();
  cleanup.addPass(createCanonicalizerPass());
  cleanup.addPass(createCSEPass());
  pm.addPass(createSpmdPartition());
  OpPassManager &fpm = pm.nest<func::FuncOp>();
  if (!training) // folds inference batch norms into the weights
    fpm.addPass(createFuseConv());
  fpm.addPass(createChannelsLast());
  fpm.addPass(createFuseElementwise());
  HoistConstantsOptions hoist;
  hoist.parameters = !training; // trained parameters change every step
  fpm.addPass(createHoistConstants(hoist));
  fpm.addPass(createScheduleForMemory());
  fpm.addPass(createAssignBuffers());
  if (failed(pm.run(module)))
    return failure();
  if (failed(emitPlan(module, plan)))
    return failure();

  int fused = 0, elementwiseOps = 0, normsLeft = 0, foldedRelus = 0;
  func.walk([&](graph::FusedOp f) {
    ++fused;
    f.getBody().walk([&](Operation *op) {
      elementwiseOps += op->hasTrait<graph::GraphElementwise>();
    });
  });
  func.walk([&](graph::BatchNormOp) { ++normsLeft; });
  int channelsLast = 0, transposesAfter = 0;
  func.walk([&](graph::Conv2DOp c) {
    foldedRelus += c.getRelu();
    channelsLast += c.getChannelsLast();
  });
  func.walk([&](graph::MaxPool2DOp p) { channelsLast += p.getChannelsLast(); });
  func.walk([&](graph::AvgPool2DOp p) { channelsLast += p.getChannelsLast(); });
  func.walk([&](graph::TransposeOp) { ++transposesAfter; });
  auto &notes = *plan.mutable_decisions()->mutable_notes();
  auto note = [&](std::string text) { *notes.Add() = std::move(text); };
  int collectives = 0;
  func.walk([&](Operation *op) { collectives += isa<mesh::AllReduceOp, mesh::AllGatherOp>(op); });
  if (parallel.dataParallel > 1)
    note("mesh: dp=" + std::to_string(parallel.dataParallel) +
         " (pinned by --dp): every rank runs the same program on 1/" +
         std::to_string(parallel.dataParallel) + " of the batch; " +
         std::to_string(collectives) + " collectives inserted (gradients all-reduced)");
  else
    note("mesh: 1 device (single-rank plan)");
  if (training) {
    const plan::Training &t = plan.training();
    int states = 0;
    for (const plan::Buffer &b : plan.ranks(0).buffers())
      states += b.has_parameter() && b.parameter().zeros();
    std::string optimizer =
        t.optimizer() == "adamw"
            ? "AdamW (beta1 " + fmtNumber(t.beta1()) + ", beta2 " + fmtNumber(t.beta2()) +
                  ", weight decay " + fmtNumber(t.weight_decay()) + ")"
            : "SGD (momentum " + fmtNumber(t.momentum()) + ", weight decay " +
                  fmtNumber(t.weight_decay()) + ")";
    note("training: loss " + t.loss() + ", " + optimizer + ", learning rate " +
         fmtNumber(t.learning_rate()) +
         (t.schedule() == "cosine" ? " with " + std::to_string(t.warmup_steps()) +
                                         " warm-up steps, cosine decay to step " +
                                         std::to_string(t.total_steps())
                                   : " constant") +
         (t.clip_norm() > 0 ? ", gradients clipped to global norm " + fmtNumber(t.clip_norm())
                            : ""));
    int64_t running = t.running_statistics();
    note("training: " + std::to_string(t.updates_size() - states - running) + " of " +
         std::to_string(parametersBefore) + " parameters trained, " + std::to_string(states) +
         " optimizer state tensors added (zero-initialised parameters); inputs 'labels', " +
         "'optimizer.*' set by the runtime each step");
    note("training: " + std::to_string(intAttr(func, "dtc.updates_in_place")) + " of " +
         std::to_string(t.updates_size()) +
         " updates written over their parameter by the step (no copy, no extra buffer)");
    if (t.precision() == "bf16") {
      int bf16 = 0;
      func.walk([&](Operation *op) {
        if (isa<graph::MatmulOp, graph::Conv2DOp, graph::Conv2DBackwardInputOp,
                graph::Conv2DBackwardWeightOp>(op) &&
            cast<RankedTensorType>(op->getResult(0).getType()).getElementType().isBF16())
          ++bf16;
      });
      note("training: mixed precision: " + std::to_string(bf16) +
           " matmuls and convolutions (forward and backward) compute in bf16 between casts; "
           "weights (the master copy), optimizer state and the loss stay fp32");
    }
    if (norms)
      note("training: " + std::to_string(norms) +
           " batch norms normalise with the batch's statistics; " + std::to_string(running) +
           " running means and variances updated each step");
  }
  note("fusion: " + std::to_string(elementwiseOps) + " elementwise ops in " +
       std::to_string(fused) + " fused kernels (no intermediate tensors inside a kernel)");
  if (!training && (norms || foldedRelus))
    note("convolutions: " + std::to_string(norms - normsLeft) + " of " + std::to_string(norms) +
         " batch norms folded into their convolution's weights, " +
         std::to_string(foldedRelus) + " of " + std::to_string(relus) +
         " ReLUs applied in a convolution's epilogue");
  if (channelsLast)
    note("layout: " + std::to_string(channelsLast) +
         " convolutions and pools run channels-last (NHWC), at the cost of " +
         std::to_string(transposesAfter - transposes) + " transposes to and from NCHW");
  if (int prologue = plan.ranks(0).prologue_size())
    note("prologue: " + std::to_string(prologue) +
         " instructions depend only on parameters and constants; they run once, at load");
  if (auto schedule = func->getAttrOfType<DictionaryAttr>("dtc.schedule")) {
    auto peak = [&](StringRef key) { return cast<IntegerAttr>(schedule.get(key)).getInt(); };
    bool memory = cast<StringAttr>(schedule.get("order")).getValue() == "memory";
    note(std::string("schedule: ") +
         (memory ? "memory-greedy order" : "source order kept") + " (simulated activation peak " +
         formatBytes(peak("memory_peak_bytes")) + " greedy vs " +
         formatBytes(peak("source_peak_bytes")) + " source)");
  }
  int64_t arena = intAttr(func, "dtc.arena_bytes"), params = intAttr(func, "dtc.parameter_bytes"),
          unshared = intAttr(func, "dtc.unshared_bytes");
  note("memory: peak " + formatBytes(arena) + " = parameters " +
       (plan.ranks(0).prologue_size() ? "and load-time values " : "") + formatBytes(params) +
       " + activations " + formatBytes(arena - params) + " (" + formatBytes(unshared - params) +
       " without buffer reuse)");
  note("instructions: " + std::to_string(plan.ranks(0).instructions_size()) + " over " +
       std::to_string(plan.ranks(0).buffers_size()) + " buffers");
  return success();
}

} // namespace dtc
