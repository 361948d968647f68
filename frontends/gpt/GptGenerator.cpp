//===- GptGenerator.cpp ----------------------------------------------------===//
#include "frontends/gpt/GptGenerator.h"
#include "dialects/graph/AttrNames.h"

#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringExtras.h"

#include <cmath>

using namespace mlir;

namespace dtc::gpt {

int64_t GptConfig::parameterCount() const {
  int64_t h = hidden, f = ffnSize();
  int64_t block = 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + 2 * h + (h * f + f) + (f * h + h);
  return vocab * h + seq * h + layers * block + 2 * h + h * vocab;
}

std::optional<GptConfig> parseGptSpec(const std::string &spec, std::string &error) {
  StringRef rest(spec);
  if (!rest.consume_front(kGptSpecPrefix)) {
    error = "'" + spec + "' is not a generated model (gpt:layers=N,hidden=N,...)";
    return std::nullopt;
  }
  GptConfig config;
  std::pair<StringRef, int64_t *> keys[] = {
      {"layers", &config.layers}, {"hidden", &config.hidden}, {"heads", &config.heads},
      {"seq", &config.seq},       {"vocab", &config.vocab},   {"batch", &config.batch},
      {"ffn", &config.ffn}};
  SmallVector<StringRef> items;
  rest.split(items, ',', -1, /*KeepEmpty=*/false);
  for (StringRef item : items) {
    auto [key, value] = item.split('=');
    int64_t *slot = nullptr;
    for (auto &[name, field] : keys)
      if (name == key.trim())
        slot = field;
    if (!slot) {
      error = "'" + spec + "': unknown key '" + key.trim().str() +
              "' (layers, hidden, heads, seq, vocab, batch, ffn)";
      return std::nullopt;
    }
    int64_t number = 0;
    if (value.trim().getAsInteger(10, number) || number <= 0) {
      error = "'" + spec + "': " + key.trim().str() + " needs a positive integer, got '" +
              value.trim().str() + "'";
      return std::nullopt;
    }
    *slot = number;
  }
  if (config.hidden % config.heads != 0) {
    error = "'" + spec + "': hidden " + std::to_string(config.hidden) +
            " is not a multiple of heads " + std::to_string(config.heads);
    return std::nullopt;
  }
  return config;
}

std::string gptSpec(const GptConfig &c) {
  std::string spec = std::string(kGptSpecPrefix) + "layers=" + std::to_string(c.layers) +
                     ",hidden=" + std::to_string(c.hidden) + ",heads=" +
                     std::to_string(c.heads) + ",seq=" + std::to_string(c.seq) +
                     ",vocab=" + std::to_string(c.vocab) + ",batch=" + std::to_string(c.batch);
  if (c.ffn)
    spec += ",ffn=" + std::to_string(c.ffn);
  return spec;
}

namespace {

/// Emits the ops of one model into `main`, in order.
class GptBuilder {
public:
  GptBuilder(MLIRContext &context, const GptConfig &config, Block &body)
      : config_(config), b_(&context), loc_(UnknownLoc::get(&context)) {
    b_.setInsertionPointToEnd(&body);
  }

  Value build(Value ids) {
    const GptConfig &c = config_;
    int64_t headDim = c.hidden / c.heads;
    named("embeddings");
    Value tokens = b_.create<graph::GatherOp>(loc_, normal("wte", {c.vocab, c.hidden}), ids, 0);
    SmallVector<int64_t> positions;
    for (int64_t i = 0; i < c.seq; ++i)
      positions.push_back(i);
    auto positionType = RankedTensorType::get({c.seq}, b_.getI64Type());
    Value position = b_.create<graph::ConstantOp>(
        loc_, DenseElementsAttr::get(positionType, ArrayRef(positions)));
    Value x = add(tokens,
                  b_.create<graph::GatherOp>(loc_, normal("wpe", {c.seq, c.hidden}), position, 0));

    // The causal mask, computed once (at load: it depends on constants only).
    auto square = RankedTensorType::get({c.seq, c.seq}, b_.getF32Type());
    Value lower = b_.create<graph::TriluOp>(
        loc_, b_.create<graph::ConstantOp>(loc_, DenseElementsAttr::get(square, 1.0f)), false, 0);
    Value masked = b_.create<graph::EqualOp>(loc_, lower, scalar(0.0));

    for (int64_t l = 0; l < c.layers; ++l) {
      std::string p = "h." + std::to_string(l) + ".";
      named(p + "attn");
      Value h = layerNorm(x, p + "ln_1");
      // Separate query, key and value projections (not GPT-2's fused
      // c_attn): split by columns, each rank's block is whole heads.
      auto heads = [&](Value v, ArrayRef<int64_t> perm) {
        Value split = b_.create<graph::ReshapeOp>(
            loc_, RankedTensorType::get({c.batch, c.seq, c.heads, headDim}, b_.getF32Type()), v);
        return b_.create<graph::TransposeOp>(loc_, split, b_.getDenseI64ArrayAttr(perm));
      };
      Value q = heads(linear(h, p + "attn.q_proj", c.hidden, c.hidden), {0, 2, 1, 3});
      Value k = heads(linear(h, p + "attn.k_proj", c.hidden, c.hidden), {0, 2, 3, 1});
      Value v = heads(linear(h, p + "attn.v_proj", c.hidden, c.hidden), {0, 2, 1, 3});
      Value scores = b_.create<graph::DivOp>(loc_, b_.create<graph::MatmulOp>(loc_, q, k),
                                             scalar(std::sqrt(double(headDim))));
      scores = b_.create<graph::WhereOp>(loc_, masked, scalar(-1e9), scores);
      Value probs = b_.create<graph::SoftmaxOp>(loc_, scores, 3);
      Value context = b_.create<graph::TransposeOp>(
          loc_, b_.create<graph::MatmulOp>(loc_, probs, v), b_.getDenseI64ArrayAttr({0, 2, 1, 3}));
      context = b_.create<graph::ReshapeOp>(
          loc_, RankedTensorType::get({c.batch, c.seq, c.hidden}, b_.getF32Type()), context);
      x = add(x, linear(context, p + "attn.c_proj", c.hidden, c.hidden));

      named(p + "mlp");
      h = layerNorm(x, p + "ln_2");
      Value up = linear(h, p + "mlp.c_fc", c.hidden, c.ffnSize());
      Value act = b_.create<graph::GeluOp>(loc_, up, b_.getStringAttr("tanh"));
      x = add(x, linear(act, p + "mlp.c_proj", c.ffnSize(), c.hidden));
    }
    named("head");
    x = layerNorm(x, "ln_f");
    return b_.create<graph::MatmulOp>(loc_, x, normal("lm_head.weight", {c.hidden, c.vocab}));
  }

private:
  void named(const std::string &where) { loc_ = NameLoc::get(b_.getStringAttr(where)); }

  Value parameter(const std::string &name, ArrayRef<int64_t> shape, StringRef attr,
                  double value) {
    auto param = b_.create<graph::ParameterOp>(
        loc_, RankedTensorType::get(shape, b_.getF32Type()), b_.getStringAttr(name));
    param->setAttr(attr, b_.getF64FloatAttr(value));
    return param;
  }
  /// GPT-2's initialisation: weights normal(0, 0.02), biases 0, norm scales 1.
  Value normal(const std::string &name, ArrayRef<int64_t> shape) {
    return parameter(name, shape, attr::kInitStd, 0.02);
  }
  Value filled(const std::string &name, int64_t size, double value) {
    return parameter(name, {size}, attr::kInitValue, value);
  }

  Value scalar(double value) {
    auto type = RankedTensorType::get({}, b_.getF32Type());
    return b_.create<graph::ConstantOp>(loc_, DenseElementsAttr::get(type, float(value)));
  }
  Value add(Value a, Value c) { return b_.create<graph::AddOp>(loc_, a, c); }

  Value layerNorm(Value x, const std::string &name) {
    return b_.create<graph::LayerNormOp>(loc_, x, filled(name + ".weight", config_.hidden, 1.0),
                                         filled(name + ".bias", config_.hidden, 0.0),
                                         uint64_t(2), llvm::APFloat(1e-5));
  }
  Value linear(Value x, const std::string &name, int64_t in, int64_t out) {
    Value y = b_.create<graph::MatmulOp>(loc_, x, normal(name + ".weight", {in, out}));
    return add(y, filled(name + ".bias", out, 0.0));
  }

  const GptConfig &config_;
  OpBuilder b_;
  Location loc_;
};

} // namespace

OwningOpRef<ModuleOp> buildGpt(MLIRContext &context, const GptConfig &config) {
  context.loadDialect<graph::GraphDialect, func::FuncDialect>();
  OpBuilder b(&context);
  Location loc = NameLoc::get(b.getStringAttr(gptSpec(config)));
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  auto idsType = RankedTensorType::get({config.batch, config.seq}, b.getI64Type());
  auto logitsType =
      RankedTensorType::get({config.batch, config.seq, config.vocab}, b.getF32Type());
  b.setInsertionPointToEnd(module->getBody());
  auto func = b.create<func::FuncOp>(loc, "main", b.getFunctionType({idsType}, {logitsType}));
  func.setArgAttr(0, attr::kName, b.getStringAttr("input_ids"));
  func.setResultAttr(0, attr::kName, b.getStringAttr("logits"));
  Block *body = func.addEntryBlock();
  GptBuilder builder(context, config, *body);
  Value logits = builder.build(body->getArgument(0));
  OpBuilder end(&context);
  end.setInsertionPointToEnd(body);
  end.create<func::ReturnOp>(loc, logits);
  (*module)->setAttr(attr::kSource, b.getStringAttr(gptSpec(config)));
  return module;
}

} // namespace dtc::gpt
