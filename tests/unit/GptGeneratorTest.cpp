//===- GptGeneratorTest.cpp - generated GPT graphs ------------------------===//
#include "dialects/graph/GraphOps.h"
#include "frontends/gpt/GptGenerator.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace dtc;

namespace {

/// The elements of every parameter the module declares.
int64_t parameterElements(ModuleOp module) {
  int64_t total = 0;
  module.walk([&](graph::ParameterOp p) {
    total += cast<ShapedType>(p.getType()).getNumElements();
  });
  return total;
}

TEST(GptGenerator, ParameterCountMatchesTheGraph) {
  MLIRContext context;
  gpt::GptConfig config;
  config.layers = 3;
  config.hidden = 48;
  config.heads = 6;
  config.seq = 10;
  config.vocab = 70;
  config.batch = 2;
  config.ffn = 100;
  OwningOpRef<ModuleOp> module = gpt::buildGpt(context, config);
  ASSERT_TRUE(succeeded(verify(*module)));
  EXPECT_EQ(parameterElements(*module), config.parameterCount());
  int matmuls = 0;
  module->walk([&](graph::MatmulOp) { ++matmuls; });
  EXPECT_EQ(matmuls, 3 * 8 + 1); // q, k, v, scores, context, proj, fc, proj per layer; head
}

TEST(GptGenerator, Gpt3Has175BillionParameters) {
  std::string error;
  auto config = gpt::parseGptSpec(
      "gpt:layers=96,hidden=12288,heads=96,seq=2048,vocab=51200,batch=1", error);
  ASSERT_TRUE(config) << error;
  EXPECT_NEAR(double(config->parameterCount()), 175.2e9, 0.2e9);
  EXPECT_EQ(gpt::gptSpec(*config),
            "gpt:layers=96,hidden=12288,heads=96,seq=2048,vocab=51200,batch=1");
}

TEST(GptGenerator, SpecErrorsNameTheKey) {
  std::string error;
  EXPECT_FALSE(gpt::parseGptSpec("gpt:layers=2,width=3", error));
  EXPECT_NE(error.find("unknown key 'width'"), std::string::npos) << error;
  EXPECT_FALSE(gpt::parseGptSpec("gpt:batch=-1", error));
  EXPECT_NE(error.find("batch needs a positive integer"), std::string::npos) << error;
  EXPECT_FALSE(gpt::parseGptSpec("model.onnx", error));
}

} // namespace
