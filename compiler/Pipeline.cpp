//===- Pipeline.cpp -------------------------------------------------------===//
#include "compiler/Pipeline.h"

#include "compiler/Passes.h"
#include "compiler/PlanEmitter.h"
#include "compiler/ShardingSearch.h"
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

std::string formatSeconds(double s) {
  char buffer[32];
  if (s >= 1)
    std::snprintf(buffer, sizeof buffer, "%.2f s", s);
  else if (s >= 1e-3)
    std::snprintf(buffer, sizeof buffer, "%.2f ms", s * 1e3);
  else
    std::snprintf(buffer, sizeof buffer, "%.1f us", s * 1e6);
  return buffer;
}

int64_t intAttr(Operation *op, StringRef name) {
  auto attr = op->getAttrOfType<IntegerAttr>(name);
  return attr ? attr.getInt() : 0;
}

} // namespace

int64_t ParallelOptions::devices() const {
  int64_t n = 1;
  for (int64_t size : mesh)
    n *= size;
  return std::max(n, std::max<int64_t>(1, dataParallel) * std::max<int64_t>(1, tensorParallel));
}

/// The mesh's axes: the pinned ones (dp, tp), then what is left of the
/// devices as one free axis, or the --mesh axes when nothing is pinned.
static std::vector<MeshAxisSpec> meshAxes(const ParallelOptions &p) {
  std::vector<MeshAxisSpec> axes;
  if (p.dataParallel > 1)
    axes.push_back({"dp", p.dataParallel, AxisRole::Data});
  if (p.tensorParallel > 1)
    axes.push_back({"tp", p.tensorParallel, AxisRole::Tensor});
  int64_t pinned = 1;
  for (const MeshAxisSpec &a : axes)
    pinned *= a.size;
  if (axes.empty()) {
    static const char *kNames[] = {"x", "y", "z", "w"};
    for (auto [i, size] : llvm::enumerate(p.mesh))
      if (size > 1)
        axes.push_back({i < 4 ? kNames[i] : "a" + std::to_string(i), size, AxisRole::Free});
  } else if (p.devices() / pinned > 1) {
    axes.push_back({"x", p.devices() / pinned, AxisRole::Free});
  }
  return axes;
}

static std::string meshNote(const std::vector<MeshAxisSpec> &axes, const ParallelOptions &p,
                            const SearchResult &r) {
  std::string text = "mesh: ", pinned;
  for (const MeshAxisSpec &a : axes) {
    text += (text.size() > 6 ? " x " : "") + a.name + "=" + std::to_string(a.size);
    if (a.role != AxisRole::Free)
      pinned += std::string(pinned.empty() ? "" : ", ") + "--" + a.name;
  }
  text += pinned.empty() ? " (searched)" : " (pinned by " + pinned + ")";
  if (p.zero >= 0)
    text += ", ZeRO stage " + std::to_string(p.zero) + " pinned";
  text += "; " + std::to_string(r.splitParameters) + " of " + std::to_string(r.parameters) +
          " parameters split";
  for (const std::string &idle : r.idleAxes)
    text += "; warning: nothing is split over " + idle + ": its devices all repeat the same work";
  return text;
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

  bool split = parallel.devices() > 1;
  if (training && split) {
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

  {
    PassManager cleanup(module.getContext());
    OpPassManager &fpm = cleanup.nest<func::FuncOp>();
    fpm.addPass(createCanonicalizerPass());
    fpm.addPass(createCSEPass());
    if (failed(cleanup.run(module)))
      return failure();
  }
  std::vector<MeshAxisSpec> axes = meshAxes(parallel);
  SearchResult searched;
  if (split) {
    SearchOptions options;
    options.mesh = axes;
    options.training = training != nullptr;
    options.zero = parallel.zero;
    options.cluster = parallel.cluster;
    options.memoryLimit = parallel.memoryLimit > 0 ? parallel.memoryLimit
                                                   : parallel.cluster.device.memoryCapacity;
    FailureOr<SearchResult> result = searchShardings(module, func, options);
    if (failed(result))
      return failure();
    searched = *result;
  }

  PassManager pm(module.getContext());
  if (std::getenv("DTC_PRINT_IR")) { // for compiler developers: IR after each pass
    module.getContext()->disableMultithreading();
    pm.enableIRPrinting();
  }
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
  func.walk([&](Operation *op) {
    collectives += op->getDialect() && op->getDialect()->getNamespace() == "mesh" &&
                   !isa<mesh::MeshOp>(op);
  });
  if (split) {
    note(meshNote(axes, parallel, searched));
    double limit = parallel.memoryLimit > 0 ? parallel.memoryLimit
                                            : parallel.cluster.device.memoryCapacity;
    char solve[64];
    std::snprintf(solve, sizeof solve, "CBC %s in %.2f s",
                  searched.optimal ? "optimal" : "best found", searched.searchSeconds);
    note("search: " + std::to_string(searched.ops) + " ops, " +
         std::to_string(searched.decisions) +
         " decisions (alike ops in each layer decide together), " +
         std::to_string(searched.eliminated) + " settled by exact reductions, " +
         std::to_string(searched.variables) + " variables left, " + solve +
         "; predicted per step " +
         formatSeconds(searched.computeSeconds) + " compute + " +
         formatSeconds(searched.communicationSeconds) + " communication, " +
         formatBytes(int64_t(searched.memoryBytes)) +
         " per device of weights, optimizer state and kept activations (limit " +
         formatBytes(int64_t(limit)) + "); " + std::to_string(collectives) +
         " collectives inserted");
  } else {
    note("mesh: 1 device (single-rank plan)");
  }
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
      note("training: mixed precision: the model computes in bf16 (" + std::to_string(bf16) +
           " matmuls and convolutions, forward and backward; activations and their gradients "
           "stored in bf16); weights (the master copy), optimizer state and the loss stay fp32");
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
