//===- PadClasses.h - a classifier's classes padded to a round count -*- C++ -*-===//
//
// A language model's vocabulary is rarely a round number (GPT-2's 50257 is
// odd): tensor parallelism cannot split its logits by class, and a bf16
// GEMM of 50257 columns has rows no vector load aligns. Megatron-LM pads
// the vocabulary to a multiple of 128 x its tensor-parallel size; dtc pads
// the classifier's weight to a multiple of `multiple` (128) whatever the
// mesh, so that every plan of a model holds the same shapes (checkpoints
// move between them), and masks the padded classes out of the loss: their
// logits get -1e9 added (in the GEMM's bias epilogue), their softmax is 0,
// so their gradients are 0 and their weights, zeros at load, stay zeros.
// The loss and every real weight's gradient are the unpadded model's.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_PADCLASSES_H
#define DTC_COMPILER_PADCLASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <string>

namespace dtc {

/// The classes of `logits` (f32, classes last: what a cross-entropy loss
/// reads), padded to a multiple of `multiple` where there are at least 32 x
/// `multiple` of them (a vocabulary, not ten digits) and they come from a
/// product with a weight of the model (through casts and transposes; a
/// bias of the model's added, padded too): the weight (and bias) become
/// parameters of the padded shape carrying `dtc.model_shape`, their other
/// readers read the model's part (an embedding's gather reads the padded
/// table as it is), and so is an untied embedding table of `classes` rows
/// (a gather's by row), `logits`' other readers the model's classes, and the
/// padded logits are returned, the padded classes masked. Otherwise (or
/// `multiple` 0) `logits` itself. `note` says what was padded.
mlir::Value padClasses(mlir::Value logits, int64_t multiple, std::string &note);

} // namespace dtc

#endif // DTC_COMPILER_PADCLASSES_H
