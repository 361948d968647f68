// The plan loader rejects corrupt, truncated and foreign plans with a
// message; a well-formed plan passes.
#include "runtime/PlanLoader.h"

#include <gtest/gtest.h>

#include <fstream>

using namespace dtc;
using runtime::validatePlan;

namespace {

/// One rank computing y = relu(x) on a 2x3 f32 tensor in a 48-byte arena.
plan::Plan reluPlan() {
  plan::Plan p;
  p.set_format_version(runtime::kPlanFormatVersion);
  p.set_producer("test");
  auto *axis = p.mutable_mesh()->add_axes();
  axis->set_name("dp");
  axis->set_size(1);
  plan::TensorType type;
  type.set_dtype(plan::F32);
  type.add_shape(2);
  type.add_shape(3);
  for (auto *t : {p.add_inputs(), p.add_outputs()}) {
    t->set_name(t == &p.inputs(0) ? "x" : "y");
    *t->mutable_type() = type;
  }
  auto *rank = p.add_ranks();
  rank->set_arena_bytes(48);
  auto *x = rank->add_buffers();
  *x->mutable_type() = type;
  x->set_input(0);
  auto *y = rank->add_buffers();
  *y->mutable_type() = type;
  y->set_offset(24);
  auto *inst = rank->add_instructions();
  inst->add_inputs(0);
  inst->add_outputs(1);
  auto *expr = inst->mutable_elementwise();
  auto *in = expr->add_nodes();
  in->set_op(plan::INPUT);
  in->add_args(0);
  in->set_dtype(plan::F32);
  auto *relu = expr->add_nodes();
  relu->set_op(plan::RELU);
  relu->add_args(0);
  relu->set_dtype(plan::F32);
  rank->add_outputs(1);
  return p;
}

std::string errorOf(const plan::Plan &p) {
  std::string error;
  EXPECT_FALSE(validatePlan(p, error));
  return error;
}

TEST(PlanLoader, AcceptsWellFormedPlan) {
  std::string error;
  EXPECT_TRUE(validatePlan(reluPlan(), error)) << error;
}

TEST(PlanLoader, RejectsOtherFormatVersion) {
  auto p = reluPlan();
  p.set_format_version(99);
  EXPECT_NE(errorOf(p).find("recompile"), std::string::npos);
}

TEST(PlanLoader, RejectsBufferIndexOutOfRange) {
  auto p = reluPlan();
  p.mutable_ranks(0)->mutable_instructions(0)->set_inputs(0, 7);
  EXPECT_NE(errorOf(p).find("buffer 7 out of range"), std::string::npos);
}

TEST(PlanLoader, ChecksPrologueInstructions) {
  auto p = reluPlan();
  *p.mutable_ranks(0)->add_prologue() = p.ranks(0).instructions(0);
  std::string error;
  EXPECT_TRUE(validatePlan(p, error)) << error;
  p.mutable_ranks(0)->mutable_prologue(0)->set_inputs(0, 9);
  std::string message = errorOf(p);
  EXPECT_NE(message.find("prologue instruction 0"), std::string::npos) << message;
  EXPECT_NE(message.find("buffer 9 out of range"), std::string::npos) << message;
}

TEST(PlanLoader, RejectsBufferOutsideArena) {
  auto p = reluPlan();
  p.mutable_ranks(0)->mutable_buffers(1)->set_offset(40);
  EXPECT_NE(errorOf(p).find("outside the arena"), std::string::npos);
}

TEST(PlanLoader, RejectsMisalignedBuffer) {
  // Found by the plan fuzzer: kernels read floats at the buffer's offset.
  auto p = reluPlan();
  p.mutable_ranks(0)->mutable_buffers(1)->set_offset(3);
  EXPECT_NE(errorOf(p).find("not a multiple of its element size"), std::string::npos);
}

TEST(PlanLoader, RejectsExpressionReferringForward) {
  auto p = reluPlan();
  p.mutable_ranks(0)->mutable_instructions(0)->mutable_elementwise()->mutable_nodes(1)->set_args(0, 1);
  EXPECT_NE(errorOf(p).find("does not precede"), std::string::npos);
}

TEST(PlanLoader, RejectsUnknownCostClass) {
  // dtc simulate indexes its per-class tables by it.
  auto p = reluPlan();
  p.mutable_ranks(0)->mutable_instructions(0)->mutable_cost()->set_op_class(plan::OpClass(42));
  std::string message = errorOf(p);
  EXPECT_NE(message.find("instruction 0: unknown cost class 42 (a plan from a newer dtc?)"),
            std::string::npos)
      << message;
}

TEST(PlanLoader, RejectsMeshRankMismatch) {
  auto p = reluPlan();
  p.mutable_mesh()->mutable_axes(0)->set_size(2);
  EXPECT_NE(errorOf(p).find("2 devices"), std::string::npos);
}

TEST(PlanLoader, RejectsTruncatedAndForeignFiles) {
  std::string bytes = reluPlan().SerializeAsString();
  std::string dir = ::testing::TempDir();
  for (size_t cut : {size_t(0), size_t(3), bytes.size() / 2}) {
    std::string path = dir + "/cut.dtcp";
    std::ofstream(path, std::ios::binary) << bytes.substr(0, cut);
    plan::Plan p;
    std::string error;
    EXPECT_FALSE(runtime::loadPlan(path, p, error));
    EXPECT_FALSE(error.empty());
  }
  plan::Plan p;
  std::string error;
  EXPECT_FALSE(runtime::loadPlan(dir + "/does-not-exist.dtcp", p, error));
  EXPECT_NE(error.find("cannot open"), std::string::npos);
}

} // namespace
