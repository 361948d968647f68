//===- PipelineStagesTest.cpp - which stage each op of a step runs on -----===//
#include "compiler/PipelineStages.h"
#include "compiler/Training.h"
#include "dialects/graph/GraphOps.h"
#include "frontends/gpt/GptGenerator.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace dtc;

namespace {

/// A 4-layer GPT's training step with 4 micro-batches.
OwningOpRef<ModuleOp> gptStep(MLIRContext &context) {
  gpt::GptConfig config;
  config.layers = 4;
  config.hidden = 32;
  config.heads = 2;
  config.seq = 8;
  config.vocab = 64;
  config.batch = 2;
  OwningOpRef<ModuleOp> module = gpt::buildGpt(context, config);
  TrainingOptions training;
  training.microBatches = 4;
  EXPECT_TRUE(succeeded(buildTrainingStep(module->lookupSymbol<func::FuncOp>("main"), training)));
  return module;
}

/// The stage of every parameter whose name starts with `prefix` (its
/// optimizer state and accumulator included), or -2 when they differ.
int stageOfParameters(ModuleOp module, const StageMemory &memory, StringRef prefix) {
  std::optional<int> stage;
  module.walk([&](graph::ParameterOp p) {
    if (!p.getName().starts_with(prefix))
      return;
    int s = memory.stageOf(p);
    stage = !stage || *stage == s ? s : -2;
  });
  return stage.value_or(-3);
}

TEST(PipelineStages, OneForwardOneBackwardKeepsItsStagesWeightsAndStashes) {
  MLIRContext context;
  OwningOpRef<ModuleOp> module = gptStep(context);
  auto main = module->lookupSymbol<func::FuncOp>("main");
  std::shared_ptr<const StageMemory> memory =
      StageMemory::of(main, 2, 1, plan::ONE_F_ONE_B, 4);
  ASSERT_TRUE(memory);
  // 1F1B: the first stage holds 2 micro-batches' activations, the last 1.
  EXPECT_EQ(memory->inFlight, (std::vector<double>{2, 1}));
  EXPECT_EQ(stageOfParameters(*module, *memory, "h.0."), 0);
  EXPECT_EQ(stageOfParameters(*module, *memory, "h.1."), 0);
  EXPECT_EQ(stageOfParameters(*module, *memory, "h.2."), 1);
  EXPECT_EQ(stageOfParameters(*module, *memory, "h.3."), 1);
  // Every op but constants runs on one of the two stages.
  int placed = 0;
  for (Operation &op : main.getBody().front().without_terminator()) {
    ASSERT_TRUE(memory->chunkOf.count(&op));
    if (int stage = memory->stageOf(&op); stage != kAnyStage) {
      EXPECT_TRUE(stage == 0 || stage == 1);
      ++placed;
    }
  }
  EXPECT_GT(placed, 100);
}

TEST(PipelineStages, InterleavedChunksGoRoundTheStages) {
  MLIRContext context;
  OwningOpRef<ModuleOp> module = gptStep(context);
  auto main = module->lookupSymbol<func::FuncOp>("main");
  std::shared_ptr<const StageMemory> memory =
      StageMemory::of(main, 2, 2, plan::INTERLEAVED, 4);
  ASSERT_TRUE(memory);
  // Per chunk: 1F1B over 2 stages x 2 virtual stages and 4 micro-batches
  // keeps 4 and 2 on stage 0's virtual stages, 3 and 1 on stage 1's
  // (chunks 0, 2 on stage 0; 1, 3 on stage 1).
  EXPECT_EQ(memory->inFlight, (std::vector<double>{4, 3, 2, 1}));
  // Chunk c (a layer each) on stage c mod 2.
  EXPECT_EQ(stageOfParameters(*module, *memory, "h.0."), 0);
  EXPECT_EQ(stageOfParameters(*module, *memory, "h.1."), 1);
  EXPECT_EQ(stageOfParameters(*module, *memory, "h.2."), 0);
  EXPECT_EQ(stageOfParameters(*module, *memory, "h.3."), 1);
}

TEST(PipelineStages, MoreChunksThanPlacesToCutIsNoCut) {
  MLIRContext context;
  OwningOpRef<ModuleOp> module = gptStep(context);
  EXPECT_FALSE(StageMemory::of(module->lookupSymbol<func::FuncOp>("main"), 64, 1,
                               plan::ONE_F_ONE_B, 64));
}

} // namespace
