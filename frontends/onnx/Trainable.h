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
#include <set>
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

/// What the importer decided about a model's weights.
struct WeightChoices {
  /// Parameters training leaves as they are, each with why ("--frozen
  /// 'mask*'", "a mask: its values are 0 and -inf", ...).
  std::map<std::string, std::string> frozen;
  /// Frozen masks that hide causally (0 where j <= i + cols - rows over the
  /// last two dims, a large negative number elsewhere): attention's
  /// causal mask as an exporter folded it (attr::kCausalMask).
  std::set<std::string> causalMasks;
  /// Parameters read by several nodes whose values are all one number: the
  /// exporter merged weights initialised alike (every norm's scale of ones,
  /// every zero bias) into one initializer. Each reader gets a copy of its
  /// own, trained apart, as the model that was exported trained them.
  std::set<std::string> untied;
  /// Initializers that are another's transpose, by name: a tied weight
  /// (GPT-2's lm_head, its embedding's transpose) that the exporter folded
  /// into a copy of its own. Imported as graph.transpose of the other, so
  /// that both train as one again.
  std::map<std::string, std::string> transposeOf;
  /// Float initializers read only where a value sets a shape (Resize's roi
  /// and scales): constants, not weights.
  std::set<std::string> constants;
};

/// Decides `choices` for `graph`. Patterns decide first; a parameter neither
/// names is frozen when it is read only as the sine and cosine of its
/// product with positions (a rotary embedding's inverse frequencies), or
/// when it is not used as a weight (a MatMul, Gemm or convolution operand, a
/// norm's scale or bias, an embedding table) and its values are a mask's or
/// a sin/cos table's. Fails with `error` on a
/// malformed pattern, a pattern that names no parameter, or a parameter
/// both lists name.
mlir::LogicalResult chooseWeights(mlir::MLIRContext &context, const ::onnx::GraphProto &graph,
                                  const std::string &baseDir, const TrainablePatterns &patterns,
                                  WeightChoices &choices, std::string &error);

} // namespace dtc::onnx

#endif // DTC_FRONTENDS_ONNX_TRAINABLE_H
