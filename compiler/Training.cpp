//===- Training.cpp - loss, gradients and optimizer as graph ops ----------===//
//
// A training step is one graph: forward, loss, backward (compiler/
// Autodiff.cpp) and the optimizer update, so that later passes (fusion,
// scheduling, sharding) see all of it. Optimizer state (momentum, Adam's
// moments) is made of parameters that start at zero: it is checkpointed,
// and can be sharded, like any weight. The per-step scalars that depend on
// the step number (scheduled learning rate, Adam's bias corrections) are
// inputs the runtime computes, which keeps the graph free of a step
// counter and the schedule readable in the plan.
//
//===----------------------------------------------------------------------===//
#include "compiler/Training.h"

#include <limits>

#include "compiler/Autodiff.h"
#include "compiler/CompileNotes.h"
#include "compiler/MixedPrecision.h"
#include "compiler/PadClasses.h"
#include "compiler/Passes.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"
#include "plan/FormatBytes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"

namespace dtc {
#define GEN_PASS_DEF_BUILDTRAININGSTEP
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

class StepBuilder {
public:
  StepBuilder(func::FuncOp func, const TrainingOptions &options)
      : func_(func), options_(options), block_(func.getBody().front()),
        b_(block_.getTerminator()), loc_(func.getLoc()) {}

  LogicalResult build() {
    int parametersBefore = 0;
    func_.walk([&](graph::ParameterOp) { ++parametersBefore; });
    SmallVector<std::pair<Value, std::string>> updates;
    int norms = expandBatchNorms(updates);
    int64_t running = int64_t(updates.size());
    if (options_.precision == "bf16")
      f32Tables_ = castModelToBf16(func_);
    Operation *terminator = block_.getTerminator();
    if (terminator->getNumOperands() == 0)
      return func_.emitError("the model has no output to train");
    // The output the loss reads: --train-output's, else the first.
    std::string outputs; // the model's, for messages: "name (type), ..."
    std::optional<unsigned> trainedOutput;
    for (unsigned i = 0; i < terminator->getNumOperands(); ++i) {
      auto name = func_.getResultAttrOfType<StringAttr>(i, attr::kName);
      std::string text = name ? name.str() : "output " + std::to_string(i);
      std::string typeText;
      llvm::raw_string_ostream os(typeText);
      os << terminator->getOperand(i).getType();
      outputs += (outputs.empty() ? "" : ", ") + text + " (" + typeText + ")";
      if (!options_.trainOutput.empty() && name && name.getValue() == options_.trainOutput)
        trainedOutput = i;
    }
    if (!options_.trainOutput.empty() && !trainedOutput)
      return func_.emitError("--train-output ")
             << options_.trainOutput << ": the model has no output of that name (its outputs: "
             << outputs << ")";
    Value prediction = terminator->getOperand(trainedOutput.value_or(0));
    auto type = typeOf(prediction);
    // What the loss reads: the prediction, or its classes padded (the
    // model's outputs then read the model's part of them).
    Value logits = prediction;
    if (options_.loss == "cross_entropy" && type.getRank() >= 2 &&
        type.getElementType().isF32()) {
      std::string padded;
      logits = padClasses(prediction, options_.padClasses, padded);
      if (!padded.empty())
        addNote(func_, padded);
    }
    SmallVector<Value> modelOutputs(terminator->getOperands());
    if (!type.getElementType().isF32())
      return func_.emitError("training needs an f32 model output, got ")
             << type
             << (trainedOutput || terminator->getNumOperands() == 1
                     ? std::string()
                     : " (the first; --train-output NAME trains another: the model's outputs "
                       "are " + outputs + ")");

    Value loss;
    int64_t classes = 0;
    if (options_.loss == "cross_entropy") {
      if (type.getRank() < 2)
        return func_.emitError("cross_entropy needs logits of rank >= 2 ([batch, ..., classes]), "
                               "got ")
               << type;
      Value labels = addInput("labels", "labels",
                              RankedTensorType::get(type.getShape().drop_back(),
                                                    b_.getI64Type()));
      loss = crossEntropy(logits, labels);
      classes = type.getShape().back();
    } else {
      Value labels = addInput("labels", "labels", type);
      Value diff = b_.create<graph::SubOp>(loc_, prediction, labels);
      loss = meanAll(b_.create<graph::MulOp>(loc_, diff, diff));
    }

    DenseMap<Value, Value> grads;
    if (failed(differentiate(func_, loss, grads)))
      return failure();

    SmallVector<std::pair<graph::ParameterOp, Value>> trained;
    llvm::StringSet<> runningStatistics;
    for (auto &[value, name] : updates)
      runningStatistics.insert(name);
    // Why each parameter that is not trained is not, for the notes.
    std::vector<std::pair<std::string, std::string>> untrained;
    for (Operation &op : block_)
      if (auto p = dyn_cast<graph::ParameterOp>(op)) {
        Value g = grads.lookup(p.getResult());
        if (auto why = p.getFrozen())
          untrained.push_back({p.getName().str(), why->str()});
        else if (g && typeOf(g).getElementType().isF32())
          trained.push_back({p, g});
        else if (!runningStatistics.contains(p.getName()))
          untrained.push_back({p.getName().str(), "the trained output does not depend on it"});
      }
    if (trained.empty())
      return func_.emitError("the loss depends on no f32 parameter: nothing to train")
             << (untrained.empty() ? "" : " (" + describeUntrained(untrained) + ")");
    if (options_.precision == "bf16")
      widenedSums_ = widenGradientSums(trained);
    // Where each gradient is made (through the views of it: a bias's
    // gradient is a reshaped sum), for dtc-compress-gradients and
    // dtc-local-sgd. An embedding's scatter-add marks what it scatters too:
    // a position table read at 0..n-1 scatters at 0..n-1, which the
    // canonicalizer folds away, leaving the reshaped sum as the gradient.
    for (auto &[param, grad] : trained) {
      bool scattered = false; // what a scatter-add scatters: only a sum, or views of one
      for (Operation *def = grad.getDefiningOp(); def; def = def->getOperand(0).getDefiningOp()) {
        bool view = isa<graph::ReshapeOp, graph::SqueezeOp, graph::UnsqueezeOp, graph::CastOp>(def);
        if (scattered && !view && !isa<graph::ReduceSumOp>(def))
          break;
        def->setAttr(attr::kWeightGradient, b_.getUnitAttr());
        scattered = scattered || isa<graph::ScatterAddOp>(def);
        if (!view && !isa<graph::ScatterAddOp>(def))
          break;
      }
    }
    b_.setInsertionPoint(terminator);
    if (options_.microBatches > 1)
      accumulateGradients(trained, updates);
    // The global sum of the gradients' squares: clipping's norm, and
    // whether the step's update is taken.
    Value squares;
    if (options_.clipNorm > 0 || options_.skipNonFinite)
      squares = gradientSquares(trained);
    if (options_.clipNorm > 0)
      clipGradients(trained, squares);
    // Finite: at most the largest float (NaN compares false, +inf is more).
    Value finite = options_.skipNonFinite
                       ? Value(b_.create<graph::LessEqualOp>(
                             loc_, squares, constant(std::numeric_limits<float>::max())))
                       : Value();
    auto guarded = [&](Value updated, Value old) {
      return finite ? Value(b_.create<graph::WhereOp>(loc_, finite, updated, old)) : updated;
    };

    Value lr = addInput("optimizer.lr", "learning_rate", scalarType());
    Value bc1, bc2;
    if (options_.optimizer == "adamw") {
      bc1 = addInput("optimizer.bias_correction1", "bias_correction1", scalarType());
      bc2 = addInput("optimizer.bias_correction2", "bias_correction2", scalarType());
    }
    for (auto [param, grad] : trained) {
      std::string name = param.getName().str();
      Value p = param.getResult(), g = grad;
      if (options_.optimizer == "sgd") {
        if (options_.weightDecay > 0)
          g = add(g, mul(p, constant(options_.weightDecay)));
        Value step = g;
        if (options_.momentum > 0) {
          Value v = state(param, "momentum");
          step = add(mul(v, constant(options_.momentum)), g);
          updates.push_back({guarded(step, v), name + ".momentum"});
        }
        updates.push_back({guarded(sub(p, mul(step, lr)), p), name});
      } else {
        Value m = state(param, "adam_m"), v = state(param, "adam_v");
        Value m2 = add(mul(m, constant(options_.beta1)), mul(g, constant(1 - options_.beta1)));
        Value v2 = add(mul(v, constant(options_.beta2)),
                       mul(mul(g, g), constant(1 - options_.beta2)));
        Value denominator =
            add(b_.create<graph::SqrtOp>(loc_, mul(v2, bc2)), constant(options_.epsilon));
        Value step = b_.create<graph::DivOp>(loc_, mul(m2, bc1), denominator);
        if (options_.weightDecay > 0)
          step = add(step, mul(p, constant(options_.weightDecay)));
        updates.push_back({guarded(m2, m), name + ".adam_m"});
        updates.push_back({guarded(v2, v), name + ".adam_v"});
        updates.push_back({guarded(sub(p, mul(step, lr)), p), name});
      }
    }

    // Results: the loss, the model's outputs, then the updates.
    SmallVector<Value> results{loss};
    SmallVector<Attribute> oldNames;
    // A micro-batched step has one micro-batch's outputs at a time.
    if (options_.modelOutputs && options_.microBatches == 1) {
      results.append(modelOutputs);
      for (unsigned i = 0; i < func_.getNumResults(); ++i)
        oldNames.push_back(func_.getResultAttr(i, attr::kName));
    }
    for (auto &[value, name] : updates)
      results.push_back(value);
    if (options_.skipNonFinite) // last: the updates' indices stay as they are
      results.push_back(squares);
    terminator->setOperands(results);
    SmallVector<Type> types;
    for (Value v : results)
      types.push_back(v.getType());
    func_.setType(FunctionType::get(func_.getContext(), func_.getArgumentTypes(), types));
    // All at once: setting them one by one rebuilds the whole list each
    // time (quadratic in the 4,623 updates of GPT-3).
    SmallVector<DictionaryAttr> attrs;
    auto named = [&](ArrayRef<NamedAttribute> entries) {
      attrs.push_back(b_.getDictionaryAttr(entries));
    };
    named({b_.getNamedAttr(attr::kName, b_.getStringAttr("loss"))});
    for (Attribute name : oldNames)
      named(name ? ArrayRef<NamedAttribute>{b_.getNamedAttr(attr::kName, name)}
                 : ArrayRef<NamedAttribute>{});
    for (auto &[value, name] : updates)
      named({b_.getNamedAttr(attr::kName, b_.getStringAttr(name + ".new")),
             b_.getNamedAttr(attr::kUpdates, b_.getStringAttr(name))});
    if (options_.skipNonFinite)
      named({b_.getNamedAttr(attr::kName, b_.getStringAttr(kGradientSquares))});
    func_.setAllResultAttrs(attrs);

    recordOptions(classes, running);
    int states = 0, accumulators = 0;
    // Updated but not trained: batch norms' running statistics (the first
    // `running` updates).
    llvm::StringSet<> trainedNames;
    for (size_t i = size_t(running); i < updates.size(); ++i)
      trainedNames.insert(updates[i].second);
    int64_t trainedValues = 0, stateBytes = 0;
    func_.walk([&](graph::ParameterOp p) {
      auto type = cast<ShapedType>(p.getType());
      bool accumulator = p->hasAttr(attr::kAccumulator);
      bool state = p->hasAttr(attr::kZeros) && !accumulator;
      accumulators += accumulator;
      states += state;
      if (state)
        stateBytes += type.getNumElements() *
                      std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
      else if (!accumulator && trainedNames.contains(p.getName()))
        trainedValues += type.getNumElements();
    });
    noteWhatWasBuilt(parametersBefore, int(updates.size()) - states - accumulators - int(running),
                     states, norms, running, trainedValues, stateBytes);
    if (!untrained.empty())
      addNote(func_, "training: not trained: " + describeUntrained(untrained) +
                         " (--trainable / --frozen PATTERN choose otherwise)");
    noteTransposedWeights();
    noteUntied();
    if (accumulators)
      addNote(func_, "training: gradients accumulated over " +
                         std::to_string(options_.microBatches) + " micro-batches of " +
                         std::to_string(microBatchRows(modelOutputs)) +
                         (microBatchRows(modelOutputs) == 1 ? " sample" : " samples") +
                         " (the model's batch) per step, in " +
                         std::to_string(accumulators) +
                         " accumulators; one optimizer update per step");
    return success();
  }

private:
  /// `dtc.training` on main: what plan emission writes into the plan's
  /// training section (the loss, the optimizer, the schedule).
  void recordOptions(int64_t classes, int64_t running) {
    SmallVector<NamedAttribute> entries;
    auto add = [&](StringRef name, Attribute value) {
      entries.push_back(b_.getNamedAttr(name, value));
    };
    add("loss", b_.getStringAttr(options_.loss));
    add("optimizer", b_.getStringAttr(options_.optimizer));
    add("learning_rate", b_.getF64FloatAttr(options_.learningRate));
    add("schedule", b_.getStringAttr(options_.schedule));
    add("warmup_steps", b_.getI64IntegerAttr(options_.warmupSteps));
    add("total_steps", b_.getI64IntegerAttr(options_.totalSteps));
    add("beta1", b_.getF64FloatAttr(options_.beta1));
    add("beta2", b_.getF64FloatAttr(options_.beta2));
    add("momentum", b_.getF64FloatAttr(options_.momentum));
    add("weight_decay", b_.getF64FloatAttr(options_.weightDecay));
    add("clip_norm", b_.getF64FloatAttr(options_.clipNorm));
    add("skip_nonfinite", b_.getBoolAttr(options_.skipNonFinite));
    add("precision", b_.getStringAttr(options_.precision));
    add("running_statistics", b_.getI64IntegerAttr(running));
    add("micro_batches", b_.getI64IntegerAttr(options_.microBatches));
    if (classes)
      add("classes", b_.getI64IntegerAttr(classes));
    if (options_.ignoreIndex)
      add("ignore_index", b_.getI64IntegerAttr(*options_.ignoreIndex));
    func_->setAttr(attr::kTraining, b_.getDictionaryAttr(entries));
  }

  /// "a, b, c, d and 3 more": the first four of `items`.
  static std::string firstFew(ArrayRef<std::string> items) {
    std::string text;
    for (size_t i = 0; i < items.size() && i < 4; ++i)
      text += (i ? ", " : "") + items[i];
    if (items.size() > 4)
      text += " and " + std::to_string(items.size() - 4) + " more";
    return text;
  }

  /// Tied weights the exporter had folded into transposed copies, tied again
  /// by the importer.
  void noteTransposedWeights() {
    auto tied = func_->getParentOfType<ModuleOp>()->getAttrOfType<DictionaryAttr>(
        attr::kTransposedWeights);
    if (!tied)
      return;
    std::string text;
    for (NamedAttribute entry : tied)
      text += (text.empty() ? "" : ", ") + entry.getName().str() + " is " +
              cast<StringAttr>(entry.getValue()).str() + " transposed";
    addNote(func_, "training: " + text +
                       " (weights tied in the model exported, folded apart by the "
                       "exporter): trained as one, as the model exported did");
  }

  /// Weights the exporter had merged, each reader now training a copy.
  void noteUntied() {
    std::vector<std::pair<std::string, int>> readers; // merged name, its copies
    func_.walk([&](graph::ParameterOp p) {
      if (std::optional<StringRef> of = p.getCopyOf()) {
        auto it = llvm::find_if(readers, [&](const auto &r) { return r.first == *of; });
        if (it == readers.end())
          readers.push_back({of->str(), 1});
        else
          ++it->second;
      }
    });
    if (readers.empty())
      return;
    std::vector<std::string> items; // the original's reader, then the copies'
    for (const auto &[name, copies] : readers)
      items.push_back(name + " (" + std::to_string(copies + 1) + " readers)");
    std::string text = firstFew(items);
    addNote(func_, "training: " + std::to_string(readers.size()) +
                       (readers.size() == 1 ? " initializer holds" : " initializers hold") +
                       " one number read by several nodes, weights initialised alike that "
                       "the exporter merged: each reader trains a copy of its own, as the "
                       "model exported did: " + text);
  }

  /// "mask (a mask: its values are 0 and -inf); a, b (the trained output
  /// does not depend on it)": names grouped by why, the first few of each.
  static std::string describeUntrained(ArrayRef<std::pair<std::string, std::string>> untrained) {
    std::vector<std::pair<std::string, std::vector<std::string>>> byWhy;
    for (const auto &entry : untrained) {
      const std::string &why = entry.second;
      auto it = llvm::find_if(byWhy, [&](const auto &group) { return group.first == why; });
      if (it == byWhy.end())
        it = byWhy.insert(byWhy.end(), {why, {}});
      it->second.push_back(entry.first);
    }
    std::string text;
    for (const auto &[why, names] : byWhy)
      text += (text.empty() ? "" : "; ") + firstFew(names) + " (" + why + ")";
    return text;
  }

  void noteWhatWasBuilt(int parametersBefore, int trained, int states, int norms,
                        int64_t running, int64_t trainedValues, int64_t stateBytes) {
    const TrainingOptions &o = options_;
    std::string optimizer =
        o.optimizer == "adamw"
            ? "AdamW (beta1 " + formatNumber(o.beta1) + ", beta2 " + formatNumber(o.beta2) +
                  ", weight decay " + formatNumber(o.weightDecay) + ")"
            : "SGD (momentum " + formatNumber(o.momentum) + ", weight decay " +
                  formatNumber(o.weightDecay) + ")";
    addNote(func_, "training: loss " + o.loss + ", " + optimizer + ", learning rate " +
                       formatNumber(o.learningRate) +
                       (o.schedule == "cosine"
                            ? " with " + std::to_string(o.warmupSteps) +
                                  " warm-up steps, cosine decay to step " +
                                  std::to_string(o.totalSteps)
                            : " constant") +
                       (o.clipNorm > 0 ? ", gradients clipped to global norm " +
                                             formatNumber(o.clipNorm)
                                       : "") +
                       (o.skipNonFinite ? ", a step with non-finite gradients leaves the "
                                          "weights and state as they were (--skip-nonfinite)"
                                        : ""));
    addNote(func_, "training: " + std::to_string(trained) + " of " +
                       std::to_string(parametersBefore) + " parameters trained (" +
                       formatCount(trainedValues) + " values), " + std::to_string(states) +
                       " optimizer state tensors added (" +
                       plan::formatBytes(stateBytes) + ", zero-initialised parameters); the " +
                       "labels and the optimizer's per-step scalars are inputs the runtime " +
                       "sets each step");
    if (o.precision == "bf16") {
      // Those the step's results depend on (autodiff also built gradients
      // nothing reads, such as the inputs', which cleanup removes).
      int bf16 = 0;
      llvm::DenseSet<Operation *> live;
      SmallVector<Value> work(block_.getTerminator()->getOperands());
      while (!work.empty()) {
        Operation *op = work.pop_back_val().getDefiningOp();
        if (!op || !live.insert(op).second)
          continue;
        llvm::append_range(work, op->getOperands());
        if (isa<graph::MatmulOp, graph::Conv2DOp, graph::Conv2DBackwardInputOp,
                graph::Conv2DBackwardWeightOp>(op) &&
            typeOf(op->getOperand(0)).getElementType().isBF16())
          ++bf16;
      }
      addNote(func_, "training: mixed precision: the model computes in bf16 (" +
                         std::to_string(bf16) +
                         " matmuls and convolutions, forward and backward; activations and "
                         "their gradients stored in bf16); weights (the master copy), "
                         "optimizer state and the loss stay fp32" +
                         (widenedSums_ ? "; " + std::to_string(widenedSums_) +
                                             " weight gradients that are sums (linear "
                                             "layers' products, biases', norms', "
                                             "embeddings') accumulate straight into fp32"
                                       : std::string()) +
                         (f32Tables_ ? "; " + std::to_string(f32Tables_) +
                                           (f32Tables_ == 1 ? " table" : " tables") +
                                           " computed from positions and constants alone "
                                           "(rotary cos and sin, masks) " +
                                           (f32Tables_ == 1
                                                ? "stays fp32 until activations read it"
                                                : "stay fp32 until activations read them")
                                     : std::string()));
    }
    if (norms)
      addNote(func_, "training: " + std::to_string(norms) +
                         " batch norms normalise with the batch's statistics; " +
                         std::to_string(running) +
                         " running means and variances updated each step");
  }

  /// Mixed precision's weight gradients that are sums (a bias's or a
  /// norm's over the batch, an embedding's scatter-add over the tokens, a
  /// linear layer's product x^T dy, summed over the tokens) keep their f32
  /// accumulator: cast<f32>(reduce_sum(g : bf16)) becomes the sum with an
  /// f32 result, cast<f32>(matmul) the product with one (cuBLASLt writes
  /// f32 from bf16 operands, as Megatron-LM's fused weight-gradient
  /// accumulation does), and so on up through the reshapes, sums and adds
  /// that only the gradient reads (a position table's: the batch's sum,
  /// reshaped, scattered; a tied embedding's: its scatter-add plus the
  /// output layer's product). One rounding and one kernel fewer, and a GPU
  /// adds atomically into f32 (thousands of rows split over many threads,
  /// an embedding's rows), which a bf16 result does not allow. Returns how
  /// many gradients.
  int widenGradientSums(SmallVectorImpl<std::pair<graph::ParameterOp, Value>> &trained) {
    int widened = 0;
    for (auto &entry : trained) {
      auto cast = entry.second.getDefiningOp<graph::CastOp>();
      if (!cast || !widenSum(cast.getInput()))
        continue;
      cast.getOutput().replaceAllUsesWith(cast.getInput());
      entry.second = cast.getInput();
      cast.erase();
      ++widened;
    }
    return widened;
  }

  /// Makes `v` (bf16, read once) f32 where it is a sum or built of sums,
  /// as widenGradientSums says; false (nothing changed) where it is not.
  bool widenSum(Value v) {
    if (!v.hasOneUse() || !typeOf(v).getElementType().isBF16())
      return false;
    Operation *def = v.getDefiningOp();
    auto widen = [&] { v.setType(typeOf(v).clone(b_.getF32Type())); };
    if (isa_and_nonnull<graph::ReduceSumOp, graph::ReduceMeanOp, graph::ScatterAddOp>(def)) {
      widenSum(def->getOperand(0)); // a sum of sums adds f32; else it reads bf16
      widen();
      return true;
    }
    if (isa_and_nonnull<graph::MatmulOp>(def)) { // a product's sums over the batch
      widen();
      return true;
    }
    if (isa_and_nonnull<graph::ReshapeOp>(def)) {
      if (!widenSum(def->getOperand(0)))
        return false;
      widen();
      return true;
    }
    if (auto add = dyn_cast_or_null<graph::AddOp>(def)) {
      if (add.getLhs() == add.getRhs() || typeOf(add.getLhs()) != typeOf(add.getRhs()))
        return false;
      bool lhs = widenSum(add.getLhs()), rhs = widenSum(add.getRhs());
      if (!lhs && !rhs)
        return false;
      OpBuilder b(add);
      for (OpOperand &operand : add->getOpOperands())
        if (typeOf(operand.get()).getElementType().isBF16())
          operand.set(b.create<graph::CastOp>(add.getLoc(),
                                              typeOf(operand.get()).clone(b.getF32Type()),
                                              operand.get()));
      widen();
      return true;
    }
    return false;
  }

  /// Training normalises with the batch's statistics: each batch norm is
  /// spelled out in graph ops (which have gradients), and its running
  /// statistics, when they are parameters, are updated after each step.
  /// Returns how many there were.
  int expandBatchNorms(SmallVectorImpl<std::pair<Value, std::string>> &updates) {
    SmallVector<graph::BatchNormOp> norms;
    func_.walk([&](graph::BatchNormOp op) { norms.push_back(op); });
    for (graph::BatchNormOp op : norms) {
      OpBuilder b(op);
      graph::BatchNormTraining parts = graph::expandBatchNormForTraining(b, op);
      op.replaceAllUsesWith(parts.output);
      for (auto [running, updated] : {std::pair{op.getMean(), parts.runningMean},
                                      std::pair{op.getVariance(), parts.runningVariance}})
        if (auto param = running.getDefiningOp<graph::ParameterOp>())
          updates.push_back({updated, param.getName().str()});
      op.erase();
    }
    return int(norms.size());
  }

  RankedTensorType scalarType() { return RankedTensorType::get({}, b_.getF32Type()); }

  Value constant(double v) {
    return b_.create<graph::ConstantOp>(
        loc_, DenseElementsAttr::get(scalarType(), b_.getF32FloatAttr(float(v))));
  }
  Value add(Value a, Value c) { return b_.create<graph::AddOp>(loc_, a, c); }
  Value sub(Value a, Value c) { return b_.create<graph::SubOp>(loc_, a, c); }
  Value mul(Value a, Value c) { return b_.create<graph::MulOp>(loc_, a, c); }

  Value sumAll(Value v) {
    SmallVector<int64_t> axes;
    for (int64_t d = 0; d < typeOf(v).getRank(); ++d)
      axes.push_back(d);
    return axes.empty() ? v : b_.create<graph::ReduceSumOp>(loc_, v, axes, false).getResult();
  }
  Value meanAll(Value v) {
    SmallVector<int64_t> axes;
    for (int64_t d = 0; d < typeOf(v).getRank(); ++d)
      axes.push_back(d);
    return axes.empty() ? v : b_.create<graph::ReduceMeanOp>(loc_, v, axes, false).getResult();
  }

  /// A new graph input, after the existing ones, that the runtime feeds as
  /// `role` says.
  Value addInput(StringRef name, StringRef role, RankedTensorType type) {
    unsigned index = block_.getNumArguments();
    Value arg = block_.addArgument(type, loc_);
    SmallVector<Type> inputs(func_.getArgumentTypes());
    inputs.push_back(type);
    func_.setType(FunctionType::get(func_.getContext(), inputs, func_.getResultTypes()));
    func_.setArgAttr(index, attr::kName, b_.getStringAttr(name));
    func_.setArgAttr(index, attr::kRole, b_.getStringAttr(role));
    return arg;
  }

  /// Optimizer state for `param`: a zero-initialised parameter.
  Value state(graph::ParameterOp param, StringRef kind) {
    OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointAfter(param);
    auto state = b_.create<graph::ParameterOp>(
        param.getLoc(), param.getType(), b_.getStringAttr(param.getName() + "." + kind));
    state->setAttr(attr::kZeros, b_.getUnitAttr());
    // A padded weight's state: a checkpoint from before the padding holds
    // it in the model's shape, which resuming pads (runtime/train/Reshard.h).
    if (Attribute model = param->getAttr(attr::kModelShape))
      state->setAttr(attr::kModelShape, model);
    return state;
  }

  /// mean over positions of -log_softmax(logits)[label], positions whose
  /// label is the ignore index left out: one graph.cross_entropy (a row
  /// kernel; its gradient one elementwise kernel). bf16 logits are read as
  /// they are, not through the model output's cast to f32: the op computes
  /// in f32 and never writes an f32 copy of the logits.
  Value crossEntropy(Value logits, Value labels) {
    if (auto widened = logits.getDefiningOp<graph::CastOp>();
        widened && typeOf(widened.getInput()).getElementType().isBF16())
      logits = widened.getInput();
    auto rows = RankedTensorType::get(typeOf(labels).getShape(), b_.getF32Type());
    Value losses =
        b_.create<graph::CrossEntropyOp>(loc_, TypeRange{rows, rows}, logits, labels, Value())
            .getLoss();
    if (!options_.ignoreIndex)
      return meanAll(losses);
    auto i64Scalar = RankedTensorType::get({}, b_.getI64Type());
    Value ignore = b_.create<graph::ConstantOp>(
        loc_, DenseElementsAttr::get(i64Scalar, ArrayRef<int64_t>{*options_.ignoreIndex}));
    Value kept = b_.create<graph::NotOp>(loc_, b_.create<graph::EqualOp>(loc_, labels, ignore));
    Value mask = b_.create<graph::CastOp>(
        loc_, RankedTensorType::get(typeOf(labels).getShape(), b_.getF32Type()), kept);
    Value count = b_.create<graph::MaxOp>(loc_, sumAll(mask), constant(1.0));
    return b_.create<graph::DivOp>(loc_, sumAll(mul(losses, mask)), count);
  }

  /// Gradient accumulation: each gradient is added to an accumulator (a
  /// zero-initialised parameter, which the runtime zeroes before each step
  /// and the step updates in place once per micro-batch); the optimizer
  /// reads the sum / micro-batches, the full batch's mean gradient.
  void accumulateGradients(SmallVectorImpl<std::pair<graph::ParameterOp, Value>> &trained,
                           SmallVectorImpl<std::pair<Value, std::string>> &updates) {
    Value scale = constant(1.0 / double(options_.microBatches));
    for (auto &[param, grad] : trained) {
      Value acc = state(param, "grad_accumulator");
      acc.getDefiningOp()->setAttr(attr::kAccumulator, b_.getUnitAttr());
      Value sum = add(acc, grad);
      updates.push_back({sum, param.getName().str() + ".grad_accumulator"});
      grad = mul(sum, scale);
    }
  }

  /// The rows of dim 0 of the model's first output: one micro-batch.
  static int64_t microBatchRows(ArrayRef<Value> outputs) {
    if (outputs.empty() || typeOf(outputs[0]).getRank() == 0)
      return 1;
    return typeOf(outputs[0]).getShape()[0];
  }

  /// The sum of every gradient's squares (the global L2 norm, squared).
  Value gradientSquares(ArrayRef<std::pair<graph::ParameterOp, Value>> trained) {
    Value total;
    for (auto &[param, grad] : trained) {
      Value squares = sumAll(mul(grad, grad));
      total = total ? add(total, squares) : squares;
    }
    return total;
  }

  /// g *= clip / max(norm, clip), norm the global L2 norm of all gradients
  /// (the root of `squares`).
  void clipGradients(SmallVectorImpl<std::pair<graph::ParameterOp, Value>> &trained,
                     Value squares) {
    Value norm = b_.create<graph::SqrtOp>(loc_, squares);
    Value clip = constant(options_.clipNorm);
    Value scale = b_.create<graph::DivOp>(loc_, clip, b_.create<graph::MaxOp>(loc_, norm, clip));
    for (auto &entry : trained)
      entry.second = mul(entry.second, scale);
  }

  func::FuncOp func_;
  const TrainingOptions &options_;
  int widenedSums_ = 0; // gradient sums made f32 (widenGradientSums)
  int f32Tables_ = 0;   // tables the bf16 model reads through a cast (castModelToBf16)
  Block &block_;
  OpBuilder b_;
  Location loc_;
};

} // namespace

std::string checkTrainingOptions(const TrainingOptions &o) {
  if (o.loss != "cross_entropy" && o.loss != "mse")
    return "--loss must be cross_entropy or mse, got '" + o.loss + "'";
  if (o.optimizer != "adamw" && o.optimizer != "sgd")
    return "--optimizer must be adamw or sgd, got '" + o.optimizer + "'";
  if (o.schedule != "constant" && o.schedule != "cosine")
    return "--schedule must be gpipe, 1f1b or interleaved (pipeline stages) or constant or cosine (the "
           "learning rate), got '" + o.schedule + "'";
  if (!(o.learningRate > 0))
    return "--lr must be positive";
  if (o.momentum < 0 || o.momentum >= 1)
    return "--momentum must be in [0, 1)";
  if (o.beta1 < 0 || o.beta1 >= 1 || o.beta2 < 0 || o.beta2 >= 1)
    return "--beta1 and --beta2 must be in [0, 1)";
  if (o.weightDecay < 0 || o.clipNorm < 0 || o.warmupSteps < 0 || o.totalSteps < 0)
    return "--weight-decay, --clip-norm, --warmup and --total-steps must not be negative";
  if (o.schedule == "cosine" && o.totalSteps <= o.warmupSteps)
    return "--schedule cosine needs --total-steps larger than --warmup";
  if (o.precision != "fp32" && o.precision != "bf16")
    return "--precision must be fp32 or bf16, got '" + o.precision + "'";
  if (o.microBatches < 1)
    return "--micro-batches must be at least 1";
  if (o.padClasses < 0)
    return "--pad-classes must not be negative (0: the classes as the model has them)";
  if (o.recompute != "auto" && o.recompute != "none" && o.recompute != "selective" &&
      o.recompute != "full")
    return "--recompute must be none, selective, full or auto, got '" + o.recompute + "'";
  if (o.ignoreIndex && o.loss != "cross_entropy")
    return "--ignore-index applies to --loss cross_entropy only";
  return "";
}

LogicalResult buildTrainingStep(func::FuncOp main, const TrainingOptions &options) {
  if (std::string problem = checkTrainingOptions(options); !problem.empty())
    return main.emitError(problem);
  return StepBuilder(main, options).build();
}

namespace {

struct BuildTrainingStep : impl::BuildTrainingStepBase<BuildTrainingStep> {
  using BuildTrainingStepBase::BuildTrainingStepBase;

  void runOnOperation() override {
    auto main = getOperation().lookupSymbol<func::FuncOp>("main");
    if (!main) {
      getOperation().emitError("no function 'main' to train");
      return signalPassFailure();
    }
    if (ignoreIndex.size() > 1) {
      main.emitError("ignore-index takes one label");
      return signalPassFailure();
    }
    TrainingOptions o;
#define DTC_COPY(field) o.field = field;
    DTC_TRAINING_OPTION_FIELDS(DTC_COPY)
#undef DTC_COPY
    if (!ignoreIndex.empty())
      o.ignoreIndex = ignoreIndex[0];
    o.modelOutputs = modelOutputs;
    if (failed(buildTrainingStep(main, o)))
      signalPassFailure();
  }
};

} // namespace

std::unique_ptr<Pass> createBuildTrainingStepPass(const TrainingOptions &o) {
  BuildTrainingStepOptions p;
#define DTC_COPY(field) p.field = o.field;
  DTC_TRAINING_OPTION_FIELDS(DTC_COPY)
#undef DTC_COPY
  int64_t ignore = o.ignoreIndex.value_or(0);
  if (o.ignoreIndex)
    p.ignoreIndex = ArrayRef<int64_t>(ignore);
  p.modelOutputs = o.modelOutputs;
  return createBuildTrainingStep(p); // copies the options
}

} // namespace dtc
