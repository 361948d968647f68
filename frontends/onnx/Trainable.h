//===- Trainable.h - which of a model's weights training updates -*- C++ -*-===//
//
// Exporters store buffers as initializers beside the weights: causal masks,
// rotary cos/sin tables, sinusoidal position tables. Training them would
// change what the model computes (a mask's -inf entries would move under
// AdamW), so the importer decides, per float initializer, whether training
// may update it, and records why not on the parameter (`frozen`).
// docs/trainable-weights.md explains the rule.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_FRONTENDS_ONNX_TRAINABLE_H
#define DTC_FRONTENDS_ONNX_TRAINABLE_H

#include "formats/onnx/onnx.pb.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/LogicalResult.h"

#include <map>
#include <string>
#include <vector>

namespace dtc::onnx {

/// Whether the importer makes `tensor` a parameter (a float tensor of more
/// than one element, whose values stay in the model file) rather than a
/// constant.
bool isParameterTensor(const ::onnx::TensorProto &tensor);

/// `--trainable` / `--frozen`: glob patterns (`*`, `?`, `[...]`, `{a,b}`)
/// on initializer names.
struct TrainablePatterns {
  std::vector<std::string> trainable, frozen;
};

/// The parameters of `graph` that training leaves as they are, each with
/// why ("--frozen 'mask*'", "a mask: its values are 0 and -inf", ...).
/// Patterns decide first; a parameter neither names is frozen when it is
/// not used as a weight (a MatMul, Gemm or convolution operand, a norm's
/// scale or bias, an embedding table) and its values are a mask's or a
/// sin/cos table's. Fails with `error` on a malformed pattern, a pattern
/// that names no parameter, or a parameter both lists name.
mlir::LogicalResult chooseFrozen(mlir::MLIRContext &context, const ::onnx::GraphProto &graph,
                                 const std::string &baseDir, const TrainablePatterns &patterns,
                                 std::map<std::string, std::string> &frozen, std::string &error);

} // namespace dtc::onnx

#endif // DTC_FRONTENDS_ONNX_TRAINABLE_H
