//===- GptGenerator.h - GPT-style graphs without weights --------*- C++ -*-===//
//
// Builds a GPT (token and position embeddings, pre-norm transformer blocks
// with causal self-attention and a GELU MLP, final norm, untied LM head)
// directly in the graph dialect from a few numbers, so models of any size,
// 175 billion parameters included, can be planned and simulated without a
// byte of weights. Parameters carry a seeded initialiser instead of values
// (`dtc.init_std`: normal(0, std); `dtc.init_value`: a constant), which
// the runtime draws element by element, so a generated model also trains.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_FRONTENDS_GPT_GPTGENERATOR_H
#define DTC_FRONTENDS_GPT_GPTGENERATOR_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <optional>
#include <string>

namespace mlir {
class MLIRContext;
}

namespace dtc::gpt {

struct GptConfig {
  int64_t layers = 2, hidden = 64, heads = 4, seq = 64, vocab = 256, batch = 8;
  int64_t ffn = 0; // 0: 4 * hidden

  int64_t ffnSize() const { return ffn ? ffn : 4 * hidden; }
  /// Trainable parameters (embeddings, blocks, final norm, LM head).
  int64_t parameterCount() const;
};

/// The prefix that names a generated model where a model file is expected.
inline constexpr const char *kGptSpecPrefix = "gpt:";

/// Parses "gpt:layers=96,hidden=12288,heads=96,seq=2048,vocab=51200,batch=8"
/// (keys in any order, each optional; ffn defaults to 4*hidden). Empty with
/// `error` naming the bad key or value.
std::optional<GptConfig> parseGptSpec(const std::string &spec, std::string &error);

/// The spec that parses back to `config`.
std::string gptSpec(const GptConfig &config);

/// The module: func @main(input_ids: [batch, seq] i64) -> logits [batch, seq, vocab].
mlir::OwningOpRef<mlir::ModuleOp> buildGpt(mlir::MLIRContext &context, const GptConfig &config);

} // namespace dtc::gpt

#endif // DTC_FRONTENDS_GPT_GPTGENERATOR_H
