// The plan loader rejects corrupt, truncated and foreign plans with a
// message; a well-formed plan passes.
#include "plan/CastCopies.h"
#include "plan/PlanLoader.h"
#include "plan/PlanPrinter.h"
#include "tests/unit/SpmdPlanBuilder.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>

using namespace dtc;
using plan::validatePlan;

namespace {

/// One rank computing y = relu(x) on a 2x3 f32 tensor in a 48-byte arena.
plan::Plan reluPlan() {
  plan::Plan p;
  p.set_format_version(plan::kPlanFormatVersion);
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

TEST(PlanLoader, ChecksAnExpressionsOutputs) {
  auto p = reluPlan();
  plan::Instruction &inst = *p.mutable_ranks(0)->mutable_instructions(0);
  inst.mutable_elementwise()->add_outputs(1);
  std::string error;
  EXPECT_TRUE(validatePlan(p, error)) << error; // one named output, the instruction's one
  inst.mutable_elementwise()->add_outputs(0);
  std::string message = errorOf(p);
  EXPECT_NE(message.find("wrong number of inputs (1) or outputs (1)"), std::string::npos)
      << message;
  inst.add_outputs(inst.outputs(0));
  inst.mutable_elementwise()->set_outputs(1, 5);
  message = errorOf(p);
  EXPECT_NE(message.find("expression output node 5 is past the last node"), std::string::npos)
      << message;
}

// Format 18's optional outputs count: a cross-entropy writing the logits'
// gradient takes a third input and output, a layer norm's gradient
// summing its weights' gradients a fourth (and fifth) output.
TEST(PlanLoader, CountsTheFusedGradientsOperands) {
  auto p = reluPlan();
  plan::Instruction &inst = *p.mutable_ranks(0)->mutable_instructions(0);
  inst.mutable_cross_entropy()->set_gradient(true);
  inst.clear_inputs();
  inst.clear_outputs();
  for (int i = 0; i < 2; ++i) {
    inst.add_inputs(0);
    inst.add_outputs(1);
  }
  std::string message = errorOf(p);
  EXPECT_NE(message.find("wrong number of inputs (2) or outputs (2)"), std::string::npos)
      << message;
  inst.add_inputs(0);
  inst.add_outputs(1);
  std::string error;
  EXPECT_TRUE(validatePlan(p, error)) << error;

  // A product plus an addend, with a bias and without.
  plan::MatMul &mm = *inst.mutable_matmul();
  mm.set_addend(true);
  inst.clear_outputs();
  inst.add_outputs(1);
  EXPECT_TRUE(validatePlan(p, error)) << error;
  mm.set_bias(true);
  message = errorOf(p);
  EXPECT_NE(message.find("wrong number of inputs (3) or outputs (1)"), std::string::npos)
      << message;
  inst.add_inputs(0);
  EXPECT_TRUE(validatePlan(p, error)) << error;
  inst.mutable_inputs()->RemoveLast();
  for (int i = 0; i < 2; ++i)
    inst.add_outputs(1);

  plan::LayerNorm &ln = *inst.mutable_layer_norm_backward();
  ln.set_axis(1);
  ln.set_scale_gradient(true);
  ln.set_bias_gradient(true);
  message = errorOf(p);
  EXPECT_NE(message.find("wrong number of inputs (3) or outputs (3)"), std::string::npos)
      << message;
  inst.add_outputs(1);
  inst.add_outputs(1);
  EXPECT_TRUE(validatePlan(p, error)) << error;
}

TEST(PlanLoader, ChecksLaunchBatches) {
  // Three relus, the last launching them all (GpuKernel.batch): a run of
  // consecutive instructions, in one part of the step, its parameters
  // among their operands.
  auto p = reluPlan();
  plan::RankProgram &rank = *p.mutable_ranks(0);
  auto *module = p.add_gpu_modules();
  module->set_entry("batch_0_kernel");
  for (int i = 0; i < 2; ++i)
    *rank.add_instructions() = rank.instructions(0);
  for (int i = 0; i < 2; ++i)
    rank.mutable_instructions(i)->mutable_gpu()->set_batched(true);
  plan::GpuKernel &gpu = *rank.mutable_instructions(2)->mutable_gpu();
  gpu.set_entry("batch_0_kernel");
  gpu.set_grid(3);
  gpu.set_block(256);
  gpu.set_batch(3);
  for (uint32_t k : {0u, 3u, 4u, 5u})
    gpu.add_params(k);
  rank.set_accumulate_end(3);
  std::string error;
  EXPECT_TRUE(validatePlan(p, error)) << error;

  gpu.add_params(6);
  std::string message = errorOf(p);
  EXPECT_NE(message.find("instruction 2's batched kernel: parameter 6 is not one of its "
                         "instructions' 6 operands"),
            std::string::npos)
      << message;
  gpu.mutable_params()->RemoveLast();

  gpu.set_batch(2);
  message = errorOf(p);
  EXPECT_NE(message.find("instruction 2's kernel launches 2 instructions, but 2 before it "
                         "wait for it"),
            std::string::npos)
      << message;
  gpu.set_batch(3);

  rank.set_accumulate_end(1); // the once-per-step part starts inside the batch
  message = errorOf(p);
  EXPECT_NE(message.find("crosses the end of a part of the step (instruction 1)"),
            std::string::npos)
      << message;
  rank.set_accumulate_end(3);

  rank.mutable_instructions(2)->clear_gpu();
  message = errorOf(p);
  EXPECT_NE(message.find("instruction 0 is launched by a later one's kernel, but no launch "
                         "follows it"),
            std::string::npos)
      << message;
  rank.mutable_instructions(2)->mutable_gpu()->set_batched(true);
  message = errorOf(p);
  EXPECT_NE(message.find("the last 3 instructions wait for a launch that never comes"),
            std::string::npos)
      << message;
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
    EXPECT_FALSE(plan::loadPlan(path, p, error));
    EXPECT_FALSE(error.empty());
  }
  plan::Plan p;
  std::string error;
  EXPECT_FALSE(plan::loadPlan(dir + "/does-not-exist.dtcp", p, error));
  EXPECT_NE(error.find("cannot open"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// Multi-rank plans
//===----------------------------------------------------------------------===//

using testsupport::SpmdPlanBuilder;

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

/// A 2x2 SPMD plan: x (8x6) by rows over both axes (buffer 0), a parameter
/// w (6x4) by columns over axis 1 (buffer 1), x's parts gathered (buffer 2,
/// instruction 0).
struct SpmdPlan : SpmdPlanBuilder {
  SpmdPlan() : SpmdPlanBuilder({2, 2}) {
    uint32_t x = input("x", plan::F32, {8, 6}, {{0, 1}, {}});
    plan::ParameterSource w;
    w.set_initializer("w");
    parameter(w, plan::F32, {6, 4}, {{}, {1}});
    uint32_t g = buffer(plan::F32, {8, 6});
    collective(plan::ALL_GATHER, {0, 1}, x, g, 0);
    output(g, "g");
  }
  plan::Buffer &buffers(int id) { return *program->mutable_buffers(id); }
  plan::Collective &gather() { return *program->mutable_instructions(0)->mutable_collective(); }
};

/// The message for SpmdPlan after `change`.
std::string errorWith(const std::function<void(SpmdPlan &)> &change) {
  SpmdPlan p;
  change(p);
  return errorOf(p.plan);
}

TEST(PlanLoader, AcceptsSpmdPlan) {
  SpmdPlan p;
  std::string error;
  EXPECT_TRUE(validatePlan(p.plan, error)) << error;
  // One program per rank is fine too.
  p.plan.clear_program_of_rank();
  for (int r = 1; r < 4; ++r)
    *p.plan.add_ranks() = p.plan.ranks(0);
  EXPECT_TRUE(validatePlan(p.plan, error)) << error;
}

TEST(PlanLoader, ChecksSendAndReceive) {
  // A program per rank; rank 0 sends x (f32[2,6]) to rank 1, which receives
  // it into the gathered buffer's bytes as a f32[2,6].
  auto pipeline = [](SpmdPlan &p) {
    p.plan.clear_program_of_rank();
    for (int r = 1; r < 4; ++r)
      *p.plan.add_ranks() = p.plan.ranks(0);
    plan::Instruction *send = p.plan.mutable_ranks(0)->add_instructions();
    send->add_inputs(0);
    send->mutable_send()->set_peer(1);
    plan::RankProgram *one = p.plan.mutable_ranks(1);
    plan::Buffer *into = one->add_buffers();
    *into->mutable_type() = one->buffers(0).type();
    into->set_offset(one->buffers(2).offset());
    plan::Instruction *recv = one->add_instructions();
    recv->add_outputs(uint32_t(one->buffers_size() - 1));
    recv->mutable_recv()->set_peer(0);
  };
  std::string error;
  SpmdPlan ok;
  pipeline(ok);
  EXPECT_TRUE(validatePlan(ok.plan, error)) << error;
  auto broken = [&](const std::function<void(plan::Plan &)> &change) {
    SpmdPlan p;
    pipeline(p);
    change(p.plan);
    return errorOf(p.plan);
  };
  EXPECT_TRUE(contains(broken([](plan::Plan &p) {
                         p.mutable_ranks(0)->mutable_instructions(1)->mutable_send()->set_peer(4);
                       }),
                       "rank 0, instruction 1: send to rank 4, but the mesh has 4 ranks"));
  EXPECT_TRUE(contains(broken([](plan::Plan &p) {
                         p.mutable_ranks(0)->mutable_instructions(1)->mutable_send()->set_peer(0);
                       }),
                       "rank 0 sends to itself"));
  EXPECT_TRUE(contains(broken([](plan::Plan &p) {
                         *p.mutable_ranks(0)->add_instructions() = p.ranks(0).instructions(1);
                       }),
                       "rank 0 sends 2 tensors to rank 1, which receives 1 from it"));
  EXPECT_TRUE(contains(broken([](plan::Plan &p) {
                         p.mutable_ranks(1)->mutable_instructions()->RemoveLast();
                       }),
                       "rank 0 sends 1 tensors to rank 1, which receives 0 from it"));
  EXPECT_TRUE(contains(broken([](plan::Plan &p) {
                         plan::RankProgram *one = p.mutable_ranks(1);
                         one->mutable_buffers(one->buffers_size() - 1)
                             ->mutable_type()
                             ->set_shape(1, 3);
                       }),
                       "tensor 1 that rank 0 sends to rank 1 is f32[2,6], but rank 1 receives "
                       "f32[2,3]"));
  EXPECT_TRUE(contains(broken([](plan::Plan &p) {
                         p.mutable_ranks(0)->mutable_instructions(1)->add_outputs(2);
                       }),
                       "instruction 1: wrong number of inputs (1) or outputs (1)"));
  // Rank 1 sends x back after its receive; rank 0 receives it before its
  // own send: each waits for the other.
  EXPECT_TRUE(contains(broken([](plan::Plan &p) {
                         plan::RankProgram *zero = p.mutable_ranks(0), *one = p.mutable_ranks(1);
                         plan::Instruction back = zero->instructions(1);
                         back.mutable_send()->set_peer(0);
                         *one->add_instructions() = back;
                         plan::Instruction *recv = zero->mutable_instructions()->Add();
                         *recv = one->instructions(1);
                         recv->mutable_recv()->set_peer(1);
                         recv->set_outputs(0, 0); // into x, f32[2,6] as sent
                         zero->mutable_instructions()->SwapElements(1, 2);
                       }),
                       "the ranks' sends and receives cannot all meet: rank 0 waits "
                       "(instruction 1) for a tensor from rank 1, and rank 1 waits "
                       "(instruction 1) for a tensor from rank 0"));
}

TEST(PlanLoader, RejectsBadProgramOfRank) {
  SpmdPlan p;
  p.plan.mutable_program_of_rank()->RemoveLast();
  EXPECT_TRUE(contains(errorOf(p.plan),
                       "program_of_rank names the programs of 3 ranks but the mesh has 4 "
                       "devices"));
  SpmdPlan q;
  q.plan.set_program_of_rank(2, 1);
  EXPECT_TRUE(contains(errorOf(q.plan), "rank 2 runs program 1 but the plan has 1"));
  SpmdPlan r;
  r.plan.clear_program_of_rank();
  EXPECT_TRUE(contains(errorOf(r.plan), "mesh has 4 devices but the plan has 1 rank programs"));
}

TEST(PlanLoader, AcceptsSplitIntermediates) {
  // Any value may record how it is split (dtc plan shows it); the runtime
  // reads the split only of parameters and inputs.
  SpmdPlan p;
  for (int d = 0; d < p.buffers(2).type().shape_size(); ++d)
    p.buffers(2).add_sharding();
  p.buffers(2).mutable_sharding(0)->add_mesh_axes(0);
  std::string error;
  EXPECT_TRUE(validatePlan(p.plan, error)) << error;
}

TEST(PlanLoader, RejectsBadSharding) {
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) { *p.buffers(2).add_sharding() = {}; }),
                       "buffer 2 ('b2'): sharding for 1 dims"));
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) {
                         p.buffers(1).mutable_sharding()->RemoveLast();
                       }),
                       "sharding for 1 dims of a rank-2 buffer"));
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) {
                         p.buffers(1).mutable_sharding(1)->set_mesh_axes(0, 2);
                       }),
                       "dim 1 is sharded over mesh axis 2 but the mesh has 2 axes"));
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) {
                         p.buffers(1).mutable_sharding(0)->add_mesh_axes(1);
                       }),
                       "mesh axis 1 shards the buffer twice"));
  // An input's buffer holds one of its equal parts.
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) {
                         p.buffers(0).mutable_type()->set_shape(0, 3);
                       }),
                       "input 'x' f32[8,6] cut into [4,1] parts has no part of the buffer's "
                       "type f32[3,6]"));
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) {
                         p.plan.mutable_inputs(0)->mutable_type()->set_shape(0, 9);
                       }),
                       "input 'x' f32[9,6] cut into [4,1] parts has no part"));
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) {
                         auto *slice = p.buffers(1).mutable_parameter()->add_slice();
                         slice->set_size(6);
                         p.buffers(1).mutable_parameter()->add_slice()->set_size(2);
                       }),
                       "a sharded parameter's slice is the rank's part"));
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) {
                         auto *seeded = p.buffers(1).mutable_parameter()->mutable_seeded();
                         seeded->set_std(1);
                         seeded->add_shape(6);
                         seeded->add_shape(6);
                       }),
                       "the seeded parameter [6,6] cut into [1,2] parts has no part of the "
                       "buffer's shape [6,2]"));
}

TEST(PlanLoader, RejectsBadCollective) {
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) { p.gather().set_kind(plan::CollectiveKind(9)); }),
                       "instruction 0: collective of unknown kind 9"));
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) { p.gather().set_mesh_axes(1, 2); }),
                       "ALL_GATHER over mesh axes {0,2}: the mesh has 2 axes"));
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) { p.gather().set_mesh_axes(1, 0); }),
                       "axis 0 is named twice"));
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) { p.gather().set_axis(2); }),
                       "dim 2 is not in the rank-2 input f32[2,6]"));
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) { p.gather().set_axis(1); }),
                       "rank 0, instruction 0: ALL_GATHER over mesh axes {0,1} (4 ranks) along "
                       "dim 1: input f32[2,6], output f32[8,6]: the output's dim `axis` must be "
                       "the group size times the input's"));
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) {
                         p.buffers(2).mutable_type()->set_dtype(plan::F64);
                         p.program->set_arena_bytes(p.program->arena_bytes() + 1024);
                       }),
                       "input f32[2,6], output f64[8,6]"));
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) { p.gather().set_kind(plan::ALL_REDUCE); }),
                       "ALL_REDUCE over mesh axes {0,1} (4 ranks): the reduction must be sum, "
                       "max or min"));
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) {
                         p.gather().set_kind(plan::ALL_REDUCE);
                         p.gather().set_reduction(plan::REDUCE_MEAN);
                       }),
                       "the reduction must be sum, max or min"));
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) {
                         p.gather().set_kind(plan::ALL_REDUCE);
                         p.gather().set_reduction(plan::REDUCE_SUM);
                       }),
                       "the output's shape must be the input's"));
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) {
                         p.gather().set_kind(plan::REDUCE_SCATTER);
                         p.gather().set_reduction(plan::REDUCE_SUM);
                         p.gather().clear_mesh_axes();
                         p.gather().add_mesh_axes(1);
                       }),
                       "the output's dim `axis` must be the input's divided by the group size"));
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) {
                         p.gather().set_kind(plan::ALL_TO_ALL);
                         p.gather().set_axis(1);
                         p.gather().set_concat_axis(0);
                         p.gather().clear_mesh_axes();
                         p.gather().add_mesh_axes(1);
                       }),
                       "dim `axis` is divided by the group size, dim `concat_axis` multiplied "
                       "by it"));
  // All-to-all: dim 1 (6) does not split 4 ways.
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) {
                         p.gather().set_kind(plan::ALL_TO_ALL);
                         p.gather().set_axis(1);
                         p.gather().set_concat_axis(1);
                         *p.buffers(2).mutable_type() = p.buffers(0).type();
                       }),
                       "ALL_TO_ALL over mesh axes {0,1} (4 ranks): dim 1 of the input f32[2,6] "
                       "does not split into 4 equal parts"));
  // All-slice: each rank keeps its part; the part must be one of equal ones
  // and the output of its shape.
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) {
                         p.gather().set_kind(plan::ALL_SLICE);
                         p.gather().set_axis(1);
                       }),
                       "ALL_SLICE over mesh axes {0,1} (4 ranks): dim 1 of the input f32[2,6] "
                       "does not split into 4 equal parts"));
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) {
                         p.gather().set_kind(plan::ALL_SLICE);
                         p.gather().clear_mesh_axes();
                         p.gather().add_mesh_axes(1);
                         p.gather().set_axis(1);
                       }),
                       "ALL_SLICE over mesh axes {1} (2 ranks) along dim 1: input f32[2,6], "
                       "output f32[8,6]: the output's dim `axis` must be the input's divided "
                       "by the group size"));
  EXPECT_TRUE(contains(errorWith([](SpmdPlan &p) {
                         p.gather().set_kind(plan::ALL_TO_ALL);
                         p.gather().set_concat_axis(-1);
                       }),
                       "concat dim -1 is not in the rank-2 input"));
}

TEST(PlanLoader, AcceptsCollectiveOfEveryKind) {
  SpmdPlanBuilder b({2, 2});
  uint32_t x = b.input("x", plan::F32, {8, 8}, {{0, 1}, {}}); // [2,8]
  uint32_t flags = b.input("flags", plan::BOOL, {4}, {{1, 0}});
  uint32_t any = b.buffer(plan::BOOL, {1});
  b.collective(plan::ALL_REDUCE, {1, 0}, flags, any, 0, 0, plan::REDUCE_MAX);
  uint32_t scattered = b.buffer(plan::F32, {2, 4});
  b.collective(plan::REDUCE_SCATTER, {1}, x, scattered, 1);
  uint32_t exchanged = b.buffer(plan::F32, {4, 4});
  b.collective(plan::ALL_TO_ALL, {0}, x, exchanged, 1, 0);
  uint32_t same = b.buffer(plan::F32, {2, 8});
  b.collective(plan::ALL_TO_ALL, {0, 1}, x, same, 1, 1);
  uint32_t sliced = b.buffer(plan::F32, {2, 2});
  b.collective(plan::ALL_SLICE, {1, 0}, x, sliced, 1);
  uint32_t mask = b.input("mask", plan::BOOL, {4}), bits = b.buffer(plan::BOOL, {2});
  b.collective(plan::ALL_SLICE, {0}, mask, bits, 0); // no reduction: any dtype
  b.output(same, "same");
  std::string error;
  EXPECT_TRUE(validatePlan(b.plan, error)) << error;

  // A bool has no sum.
  b.program->mutable_instructions(0)->mutable_collective()->set_reduction(plan::REDUCE_SUM);
  EXPECT_TRUE(contains(errorOf(b.plan), "bools have no sum"));
}

TEST(PlanLoader, ChecksBuckets) {
  // Two all-gathers as one message, the second along dim 1.
  auto bucket = [](SpmdPlanBuilder &b) {
    uint32_t x = b.input("x", plan::F32, {8, 6}, {{0, 1}, {}});
    uint32_t y = b.input("y", plan::F32, {4, 8}, {{}, {0, 1}});
    uint32_t gx = b.buffer(plan::F32, {8, 6}), gy = b.buffer(plan::F32, {4, 8});
    b.bucket(plan::ALL_GATHER, {0, 1}, {x, y}, {gx, gy}, {0, 1});
    b.output(gx, "gx");
    return b.program->mutable_instructions(0);
  };
  std::string error;
  SpmdPlanBuilder ok({2, 2});
  bucket(ok);
  EXPECT_TRUE(validatePlan(ok.plan, error)) << error;
  auto broken = [&](const std::function<void(SpmdPlanBuilder &, plan::Instruction &)> &change) {
    SpmdPlanBuilder b({2, 2});
    change(b, *bucket(b));
    return errorOf(b.plan);
  };
  EXPECT_TRUE(contains(broken([](SpmdPlanBuilder &, plan::Instruction &i) {
                         i.mutable_collective()->clear_member_axes();
                       }),
                       "ALL_GATHER over mesh axes {0,1} (4 ranks): 0 member axes for 2 inputs "
                       "(one a member)"));
  EXPECT_TRUE(contains(broken([](SpmdPlanBuilder &, plan::Instruction &i) {
                         i.mutable_collective()->set_member_axes(1, 0);
                       }),
                       "member 1 along dim 0: input f32[4,2], output f32[4,8]"));
  EXPECT_TRUE(contains(broken([](SpmdPlanBuilder &, plan::Instruction &i) {
                         i.mutable_collective()->set_kind(plan::ALL_TO_ALL);
                       }),
                       "a bucket of 2 collectives must be all-reduces, all-gathers or "
                       "reduce-scatters"));
  EXPECT_TRUE(contains(broken([](SpmdPlanBuilder &, plan::Instruction &i) {
                         i.clear_outputs();
                         i.add_outputs(2);
                       }),
                       "instruction 0"));
  EXPECT_TRUE(contains(broken([](SpmdPlanBuilder &b, plan::Instruction &) {
                         b.program->mutable_buffers(1)->mutable_type()->set_dtype(plan::BF16);
                         b.plan.mutable_inputs(1)->mutable_type()->set_dtype(plan::BF16);
                       }),
                       "a bucket's members share one dtype"));
  // Member 1's output over member 0's input: both move at once.
  EXPECT_TRUE(contains(broken([](SpmdPlanBuilder &b, plan::Instruction &) {
                         b.program->mutable_buffers(3)->set_offset(b.program->buffers(0).offset());
                       }),
                       "a bucket's output 1 shares bytes with its input 0"));
}

TEST(PlanLoader, AcceptsUpdateOfShardedParameter) {
  // The rank's update is the parameter's part; the graph's output is whole.
  SpmdPlanBuilder b({2, 2});
  plan::ParameterSource w;
  w.set_initializer("w");
  w.set_zeros(true);
  uint32_t param = b.parameter(w, plan::F32, {4, 4}, {{0}, {1}});
  uint32_t updated = b.buffer(plan::F32, {2, 2});
  plan::TensorType whole = testsupport::tensorType(plan::F32, {4, 4});
  b.output(updated, "w.new", &whole);
  plan::ParameterUpdate *update = b.plan.mutable_training()->add_updates();
  update->set_output(0);
  update->set_buffer(param);
  std::string error;
  EXPECT_TRUE(validatePlan(b.plan, error)) << error;
  b.program->mutable_buffers(int(updated))->mutable_type()->set_shape(0, 1);
  EXPECT_TRUE(contains(errorOf(b.plan), "its type differs from the parameter's"));
}

TEST(PlanLoader, ChecksPaddedParameters) {
  // A [3,5] initializer padded to [4,8], split over both axes.
  SpmdPlanBuilder b({2, 2});
  plan::ParameterSource w;
  w.set_initializer("w");
  for (int64_t d : {3, 5})
    w.add_model_shape(d);
  uint32_t id = b.parameter(w, plan::F32, {4, 8}, {{0}, {1}});
  b.output(id, "w");
  std::string error;
  EXPECT_TRUE(validatePlan(b.plan, error)) << error;
  // dtc plan --full says so.
  EXPECT_TRUE(contains(plan::printPlan(b.plan), "parameter 'w', padded from f32[3,5]"));

  auto refused = [&](std::vector<int64_t> model, const std::string &message) {
    plan::Plan p = b.plan;
    p.mutable_ranks(0)->mutable_buffers(int(id))->mutable_parameter()->clear_model_shape();
    for (int64_t d : model)
      p.mutable_ranks(0)->mutable_buffers(int(id))->mutable_parameter()->add_model_shape(d);
    EXPECT_TRUE(contains(errorOf(p), message));
  };
  refused({3, 5, 1}, "('w'): model shape [3,5,1] has rank 3, the buffer f32[2,4] rank 2");
  refused({0, 5}, "model shape [0,5]: dim 0 is 0, not in [1, 4] (the plan's whole tensor [4,8])");
  // Past the whole tensor (the buffer's [2,4] times its [2,2] parts).
  refused({3, 9}, "model shape [3,9]: dim 1 is 9, not in [1, 8] (the plan's whole tensor [4,8])");
  // The whole tensor's own shape pads nothing, and is no harm.
  b.program->mutable_buffers(int(id))->mutable_parameter()->set_model_shape(0, 4);
  EXPECT_TRUE(validatePlan(b.plan, error)) << error;
  // A generated parameter's whole is its seeded shape.
  plan::SeededInit *seeded =
      b.program->mutable_buffers(int(id))->mutable_parameter()->mutable_seeded();
  seeded->set_std(1);
  for (int64_t d : {4, 8})
    seeded->add_shape(d);
  EXPECT_TRUE(validatePlan(b.plan, error)) << error;
  refused({5, 5}, "dim 0 is 5, not in [1, 4] (the plan's whole tensor [4,8])");
}

TEST(PlanLoader, ChecksBf16CopiesOfWeights) {
  // A training step's copy is bf16, of its weight's whole shape, made
  // from an f32 parameter of its own program, and only where weights
  // change through the step alone. It may be split otherwise (ZeRO's
  // whole copy of a split master), which the runtime is told.
  SpmdPlanBuilder b({2, 2});
  b.plan.mutable_training()->set_micro_batches(1);
  plan::ParameterSource w, copy;
  w.set_initializer("w");
  copy.set_initializer("w.bf16");
  copy.set_cast_of("w");
  b.parameter(w, plan::F32, {4, 4}, {{0}, {1}});
  uint32_t c = b.parameter(copy, plan::BF16, {4, 4}, {{0}, {1}});
  std::string error;
  EXPECT_TRUE(validatePlan(b.plan, error)) << error;

  plan::Buffer &buffer = *b.program->mutable_buffers(int(c));
  buffer.mutable_parameter()->set_cast_of("v");
  EXPECT_TRUE(contains(errorOf(b.plan), "parameter 'w.bf16' (the bf16 copy of 'v'): the program "
                                        "has no parameter 'v'"));
  // An inference plan's copy may stand alone (the runtime reads the
  // model's 'v' and casts it), bf16 still.
  plan::Plan inference = b.plan;
  inference.clear_training();
  EXPECT_TRUE(validatePlan(inference, error)) << error;
  inference.mutable_ranks(0)->mutable_buffers(int(c))->mutable_type()->set_dtype(plan::F32);
  EXPECT_TRUE(contains(errorOf(inference), "the program has no parameter 'v'"));
  buffer.mutable_parameter()->set_cast_of("w");
  buffer.mutable_type()->set_dtype(plan::F32);
  EXPECT_TRUE(contains(errorOf(b.plan), "not a bf16 tensor of an f32 weight's shape"));
  buffer.mutable_type()->set_dtype(plan::BF16);
  buffer.mutable_parameter()->set_zeros(true);
  EXPECT_TRUE(contains(errorOf(b.plan), "made from nothing else"));
  buffer.mutable_parameter()->set_zeros(false);
  std::vector<plan::CastCopy> copies;
  ASSERT_TRUE(plan::castCopies(*b.program, {2, 2}, false, copies, error)) << error;
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_FALSE(copies[0].splitOtherwise);
  // Split otherwise: its dims' axes swapped, or whole (its part the whole
  // [4,4]); not of another whole shape.
  std::swap(*buffer.mutable_sharding(0), *buffer.mutable_sharding(1));
  EXPECT_TRUE(validatePlan(b.plan, error)) << error;
  ASSERT_TRUE(plan::castCopies(*b.program, {2, 2}, false, copies, error)) << error;
  EXPECT_TRUE(copies[0].splitOtherwise);
  plan::Buffer split = buffer;
  buffer.clear_sharding();
  EXPECT_TRUE(contains(errorOf(b.plan), "not a bf16 tensor of an f32 weight's shape"));
  for (int d = 0; d < 2; ++d)
    buffer.mutable_type()->set_shape(d, 4);
  EXPECT_TRUE(validatePlan(b.plan, error)) << error;
  ASSERT_TRUE(plan::castCopies(*b.program, {2, 2}, false, copies, error)) << error;
  EXPECT_TRUE(copies[0].splitOtherwise);
  buffer = split;
  std::swap(*buffer.mutable_sharding(0), *buffer.mutable_sharding(1));
  EXPECT_TRUE(validatePlan(b.plan, error)) << error;

  b.plan.mutable_training()->set_average_every(4);
  EXPECT_TRUE(contains(errorOf(b.plan), "bf16 copies of weights, which local SGD's averaging "
                                        "would leave behind"));
}

// dtc plan --full names skip_outside on gathers and scatter-adds (a block
// of a split table) and says nothing without it.
TEST(PlanPrinter, ShowsSkipOutside) {
  plan::Instruction gather, scatter;
  gather.mutable_gather()->set_axis(0);
  scatter.mutable_scatter_add()->set_axis(1);
  EXPECT_EQ(plan::describeInstruction(gather), "gather axis=0");
  EXPECT_EQ(plan::describeInstruction(scatter), "scatter_add axis=1");
  gather.mutable_gather()->set_skip_outside(true);
  scatter.mutable_scatter_add()->set_skip_outside(true);
  EXPECT_EQ(plan::describeInstruction(gather), "gather axis=0 skip_outside");
  EXPECT_EQ(plan::describeInstruction(scatter), "scatter_add axis=1 skip_outside");
}

} // namespace
