//===- PlanEmitterTest.cpp - mesh collectives as plan instructions --------===//
//
// No command turns a .mlir file into a plan, so the emitter is tested here:
// a partitioned module's mesh ops, with buffers assigned, become Collective
// instructions that the plan loader accepts.
//
//===----------------------------------------------------------------------===//
#include "compiler/PlanEmitter.h"
#include "plan/PlanLoader.h"
#include "tools/Registration.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace {

/// `body` (the inside of `main`, returning `results`) on a 2x2 mesh of
/// axes dp and tp, with buffers assigned, as a plan; the emitter's
/// messages in `errors`.
std::optional<dtc::plan::Plan> emit(const std::string &signature, const std::string &body,
                                    std::string *errors = nullptr) {
  DialectRegistry registry;
  dtc::registerAllDialects(registry);
  dtc::registerAllPasses();
  MLIRContext context(registry);
  std::string text = "module attributes {dtc.mesh_axis_names = [\"dp\", \"tp\"]} {\n"
                     "mesh.mesh @mesh(shape = 2x2)\n"
                     "func.func @main" + signature + " {\n" + body + "\n}\n}";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  EXPECT_TRUE(module) << text;
  if (!module)
    return std::nullopt;
  PassManager pm(&context);
  EXPECT_TRUE(succeeded(parsePassPipeline("func.func(dtc-assign-buffers)", pm)));
  EXPECT_TRUE(succeeded(pm.run(*module)));
  std::string messages;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &d) {
    messages += d.str() + "\n";
    return success();
  });
  dtc::plan::Plan plan;
  bool ok = succeeded(dtc::emitPlan(*module, plan));
  if (errors)
    *errors = messages;
  if (!ok)
    return std::nullopt;
  plan.set_format_version(dtc::plan::kPlanFormatVersion);
  plan.set_producer("test");
  return plan;
}

const dtc::plan::Instruction *findCollective(const dtc::plan::Plan &plan,
                                             dtc::plan::CollectiveKind kind) {
  for (const dtc::plan::Instruction &inst : plan.ranks(0).instructions())
    if (inst.has_collective() && inst.collective().kind() == kind)
      return &inst;
  return nullptr;
}

std::vector<uint32_t> axesOf(const dtc::plan::Instruction &inst) {
  return {inst.collective().mesh_axes().begin(), inst.collective().mesh_axes().end()};
}

TEST(PlanEmitter, SliceScatterAndAllToAllBecomeCollectives) {
  std::optional<dtc::plan::Plan> plan = emit(
      "(%x: tensor<8x6xf32>) -> (tensor<2x6xf32>, tensor<8x3xf32>, tensor<4x3xf32>)",
      "%s = mesh.all_slice %x on @mesh mesh_axes = [1, 0] slice_axis = 0"
      " : tensor<8x6xf32> -> tensor<2x6xf32>\n"
      "%r = mesh.reduce_scatter %x on @mesh mesh_axes = [1] reduction = <max> scatter_axis = 1"
      " : tensor<8x6xf32> -> tensor<8x3xf32>\n"
      "%t = mesh.all_to_all %s on @mesh mesh_axes = [0] split_axis = 1 concat_axis = 0"
      " : tensor<2x6xf32> -> tensor<4x3xf32>\n"
      "return %s, %r, %t : tensor<2x6xf32>, tensor<8x3xf32>, tensor<4x3xf32>");
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->mesh().axes_size(), 2);
  EXPECT_EQ(plan->mesh().axes(0).name(), "dp");
  EXPECT_EQ(plan->mesh().axes(1).name(), "tp");
  EXPECT_EQ(plan->program_of_rank_size(), 4);
  ASSERT_EQ(plan->ranks(0).instructions_size(), 3);

  // The slice moves nothing between ranks: costed as the copy of its part.
  const dtc::plan::Instruction *slice = findCollective(*plan, dtc::plan::ALL_SLICE);
  ASSERT_TRUE(slice);
  EXPECT_EQ(axesOf(*slice), (std::vector<uint32_t>{1, 0}));
  EXPECT_EQ(slice->collective().axis(), 0);
  EXPECT_EQ(slice->cost().op_class(), dtc::plan::OP_DATA_MOVEMENT);
  EXPECT_EQ(slice->cost().bytes(), 2.0 * 2 * 6 * 4);

  const dtc::plan::Instruction *scatter = findCollective(*plan, dtc::plan::REDUCE_SCATTER);
  ASSERT_TRUE(scatter);
  EXPECT_EQ(axesOf(*scatter), (std::vector<uint32_t>{1}));
  EXPECT_EQ(scatter->collective().axis(), 1);
  EXPECT_EQ(scatter->collective().reduction(), dtc::plan::REDUCE_MAX);
  EXPECT_EQ(scatter->cost().op_class(), dtc::plan::OP_COMMUNICATION);
  EXPECT_EQ(scatter->cost().bytes(), 8.0 * 6 * 4);

  const dtc::plan::Instruction *exchange = findCollective(*plan, dtc::plan::ALL_TO_ALL);
  ASSERT_TRUE(exchange);
  EXPECT_EQ(axesOf(*exchange), (std::vector<uint32_t>{0}));
  EXPECT_EQ(exchange->collective().axis(), 1);
  EXPECT_EQ(exchange->collective().concat_axis(), 0);
  EXPECT_EQ(exchange->cost().op_class(), dtc::plan::OP_COMMUNICATION);
  EXPECT_EQ(exchange->cost().bytes(), 2.0 * 6 * 4);
  // The all-to-all reads what the slice wrote.
  EXPECT_EQ(exchange->inputs(0), slice->outputs(0));

  std::string error;
  EXPECT_TRUE(dtc::plan::validatePlan(*plan, error)) << error;
}

TEST(PlanEmitter, CollectivesThePlanCannotHoldAreErrors) {
  std::string errors;
  EXPECT_FALSE(emit("(%x: tensor<4x2xf32>) -> tensor<2x2xf64>",
                    "%r = mesh.reduce_scatter %x on @mesh mesh_axes = [0] scatter_axis = 0"
                    " : tensor<4x2xf32> -> tensor<2x2xf64>\n"
                    "return %r : tensor<2x2xf64>",
                    &errors));
  EXPECT_NE(
      errors.find("plan collectives keep the element type; this one turns 'f32' into 'f64'"),
      std::string::npos)
      << errors;
  EXPECT_FALSE(emit("(%x: tensor<4x2xf32>) -> tensor<2x2xf32>",
                    "%r = mesh.reduce_scatter %x on @mesh mesh_axes = [0] reduction = <product>"
                    " scatter_axis = 0 : tensor<4x2xf32> -> tensor<2x2xf32>\n"
                    "return %r : tensor<2x2xf32>",
                    &errors));
  EXPECT_NE(errors.find("no plan collective for this reduction"), std::string::npos) << errors;
}

} // namespace
