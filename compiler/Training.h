//===- Training.h - a model's forward pass into a training step --*- C++ -*-===//
#ifndef DTC_COMPILER_TRAINING_H
#define DTC_COMPILER_TRAINING_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

#include <memory>
#include <optional>
#include <string>

namespace dtc {

struct TrainingOptions {
  std::string loss = "cross_entropy"; // or "mse"
  std::optional<int64_t> ignoreIndex;  // cross_entropy
  std::string optimizer = "adamw";     // or "sgd"
  double learningRate = 1e-3;
  double momentum = 0.9;               // sgd
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8; // adamw
  double weightDecay = 0.0;
  double clipNorm = 0.0;               // 0: off
  /// Skip the update of a step whose gradients (or loss) are not finite:
  /// every update becomes where(finite, new, old), finite from the global
  /// sum of the gradients' squares, which the step returns as
  /// `gradient_squares` for the runtime to say so.
  bool skipNonFinite = false;
  std::string schedule = "constant";   // or "cosine"
  int64_t warmupSteps = 0, totalSteps = 0;
  /// "fp32", or "bf16": matmuls and convolutions compute in bf16 between
  /// casts, while weights (the master copy), gradients as they reach the
  /// weights, optimizer state and the loss stay fp32.
  std::string precision = "fp32";
  /// Gradient accumulation: the step runs the model on this many
  /// micro-batches (the model's batch is one micro-batch), sums their
  /// gradients in accumulators and updates once. 1: off.
  int64_t microBatches = 1;
  /// Activation recomputation (dtc-recompute): "none", "selective", "full",
  /// or "auto": the first of these three whose plan fits (compileToPlan).
  /// Not the training step's own option: its pass runs after it.
  std::string recompute = "auto";
  /// Return the model's outputs too (dtc-opt's model-outputs=true, for
  /// looking at them). dtc compile's step returns the loss and the updates
  /// only: the trainer never reads the outputs, and a language model's
  /// logits, cast to f32 for the output, would be the step's largest
  /// tensor (1.6 GB for GPT-2 at 8 x 1024 tokens), written every step; a
  /// split step would also gather them whole on every rank.
  bool modelOutputs = false;
  /// --train-output: the model output the loss reads, by name ("": the
  /// first); for a model whose first output is not the prediction (a
  /// sentence-embedding export's first output is integer).
  std::string trainOutput;
  /// A cross-entropy loss's classes (a vocabulary of at least 32 times
  /// this) padded to a multiple of this (compiler/PadClasses.h); 0: never.
  int64_t padClasses = 128;
};

/// The training step's result (and plan output) holding the global sum of
/// the gradients' squares, with --skip-nonfinite (plan.proto: Training).
constexpr const char *kGradientSquares = "gradient_squares";

/// TrainingOptions' plain fields, which the pass's options
/// (dtc-build-training-step) and the pipeline's (dtc-compile-pipeline) name
/// the same way: one list for every copy between them. (ignoreIndex, at
/// most one label, is copied apart.)
#define DTC_TRAINING_OPTION_FIELDS(X)                                                          \
  X(loss) X(optimizer) X(learningRate) X(momentum) X(beta1) X(beta2) X(epsilon)               \
  X(weightDecay) X(clipNorm) X(schedule) X(warmupSteps) X(totalSteps) X(precision)      \
  X(microBatches) X(trainOutput) X(skipNonFinite) X(padClasses)

/// Checks the options; a message naming the bad one, or empty.
std::string checkTrainingOptions(const TrainingOptions &options);

/// Turns `main` (the model's forward pass; its first result the prediction)
/// into one training step: a `labels` input and the loss, the gradients
/// (differentiate), gradient clipping and the optimizer update, with the
/// optimizer's state as zero-initialised parameters. With micro-batches,
/// each gradient is summed into an accumulator (a zero-initialised
/// parameter marked `dtc.accumulator`, updated in place) and the optimizer
/// reads the accumulated sum / micro-batches. The function then
/// returns the loss, the model's outputs, and the new value of every
/// trained parameter and state (result attribute `dtc.updates` names the
/// parameter). The inputs the runtime feeds carry `dtc.role`; `main`
/// records the options as `dtc.training` and what was built in its notes.
/// This is dtc-build-training-step's work (compiler/Passes.td).
mlir::LogicalResult buildTrainingStep(mlir::func::FuncOp main, const TrainingOptions &options);

/// dtc-build-training-step with `options`.
std::unique_ptr<mlir::Pass> createBuildTrainingStepPass(const TrainingOptions &options);

} // namespace dtc

#endif // DTC_COMPILER_TRAINING_H
