//===- SpmdPlanBuilder.h - multi-rank plans by hand, for tests --*- C++ -*-===//
//
// Tests build SPMD plans (one program that every rank of a mesh runs) the
// way the compiler writes them: whole graph inputs and outputs, buffers of
// the rank's parts, collectives between the ranks. Buffers are laid out one
// after another in the arena, 64-byte aligned, unless placed by hand.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_TESTS_UNIT_SPMDPLANBUILDER_H
#define DTC_TESTS_UNIT_SPMDPLANBUILDER_H

#include "plan/PlanLoader.h"

#include "plan.pb.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace dtc::testsupport {

/// Per dim, the mesh axes splitting it (empty: whole); an empty list:
/// replicated.
using Sharding = std::vector<std::vector<uint32_t>>;

inline plan::TensorType tensorType(plan::DType dtype, const std::vector<int64_t> &shape) {
  plan::TensorType type;
  type.set_dtype(dtype);
  for (int64_t d : shape)
    type.add_shape(d);
  return type;
}

class SpmdPlanBuilder {
public:
  explicit SpmdPlanBuilder(const std::vector<int64_t> &mesh) {
    plan.set_format_version(plan::kPlanFormatVersion);
    plan.set_producer("test");
    int64_t devices = 1;
    for (size_t a = 0; a < mesh.size(); ++a) {
      plan::MeshAxis *axis = plan.mutable_mesh()->add_axes();
      axis->set_name("axis" + std::to_string(a));
      axis->set_size(mesh[a]);
      devices *= mesh[a];
    }
    program = plan.add_ranks();
    for (int64_t r = 0; devices > 1 && r < devices; ++r)
      plan.add_program_of_rank(0);
  }
  // `program` points into `plan`.
  SpmdPlanBuilder(const SpmdPlanBuilder &) = delete;
  SpmdPlanBuilder &operator=(const SpmdPlanBuilder &) = delete;

  /// A value of `shape` (the rank's).
  uint32_t buffer(plan::DType dtype, const std::vector<int64_t> &shape,
                  const std::string &name = "") {
    plan::Buffer *buffer = program->add_buffers();
    *buffer->mutable_type() = tensorType(dtype, shape);
    buffer->set_name(name.empty() ? "b" + std::to_string(program->buffers_size() - 1) : name);
    int64_t bytes = plan::elementCount(buffer->type()) * plan::dtypeBytes(dtype);
    buffer->set_offset(arena_);
    arena_ += (bytes + 63) / 64 * 64;
    program->set_arena_bytes(arena_);
    return uint32_t(program->buffers_size() - 1);
  }

  /// A value placed at another buffer's bytes (an in-place collective).
  uint32_t bufferAt(uint32_t at, plan::DType dtype, const std::vector<int64_t> &shape) {
    int64_t saved = arena_;
    uint32_t id = buffer(dtype, shape);
    program->mutable_buffers(int(id))->set_offset(program->buffers(int(at)).offset());
    arena_ = std::max(saved, program->buffers(int(at)).offset() +
                                 plan::elementCount(program->buffers(int(id)).type()) *
                                     plan::dtypeBytes(dtype));
    arena_ = (arena_ + 63) / 64 * 64;
    program->set_arena_bytes(arena_);
    return id;
  }

  /// Graph input `name` of the `whole` shape; its buffer holds the rank's
  /// part under `sharding`.
  uint32_t input(const std::string &name, plan::DType dtype, const std::vector<int64_t> &whole,
                 const Sharding &sharding = {}, plan::InputRole role = plan::MODEL_INPUT) {
    plan::Tensor *tensor = plan.add_inputs();
    tensor->set_name(name);
    tensor->set_role(role);
    *tensor->mutable_type() = tensorType(dtype, whole);
    uint32_t id = buffer(dtype, partOf(whole, sharding), name);
    program->mutable_buffers(int(id))->set_input(uint32_t(plan.inputs_size() - 1));
    shard(id, sharding);
    return id;
  }

  /// A parameter of the `whole` shape read from `source`; its buffer holds
  /// the rank's part under `sharding`.
  uint32_t parameter(const plan::ParameterSource &source, plan::DType dtype,
                     const std::vector<int64_t> &whole, const Sharding &sharding = {}) {
    uint32_t id = buffer(dtype, partOf(whole, sharding), source.initializer());
    *program->mutable_buffers(int(id))->mutable_parameter() = source;
    shard(id, sharding);
    return id;
  }

  uint32_t constant(const std::vector<float> &values, const std::vector<int64_t> &shape) {
    uint32_t id = buffer(plan::F32, shape);
    program->mutable_buffers(int(id))->set_constant(
        std::string(reinterpret_cast<const char *>(values.data()), values.size() * 4));
    return id;
  }

  plan::Instruction &instruction(const std::vector<uint32_t> &inputs, uint32_t output) {
    plan::Instruction *inst = program->add_instructions();
    for (uint32_t id : inputs)
      inst->add_inputs(id);
    inst->add_outputs(output);
    return *inst;
  }

  plan::Collective &collective(plan::CollectiveKind kind, const std::vector<uint32_t> &axes,
                               uint32_t input, uint32_t output, int64_t axis = 0,
                               int64_t concatAxis = 0,
                               plan::ReduceKind reduction = plan::REDUCE_SUM) {
    plan::Instruction &inst = instruction({input}, output);
    inst.mutable_cost()->set_op_class(plan::OP_COMMUNICATION);
    plan::Collective *c = inst.mutable_collective();
    c->set_kind(kind);
    for (uint32_t a : axes)
      c->add_mesh_axes(a);
    c->set_axis(axis);
    c->set_concat_axis(concatAxis);
    if (kind == plan::ALL_REDUCE || kind == plan::REDUCE_SCATTER)
      c->set_reduction(reduction);
    return *c;
  }

  /// A bucket: `inputs[i]` to `outputs[i]` in one message, member i
  /// along `memberAxes[i]` (none for all-reduces).
  plan::Collective &bucket(plan::CollectiveKind kind, const std::vector<uint32_t> &axes,
                           const std::vector<uint32_t> &inputs,
                           const std::vector<uint32_t> &outputs,
                           const std::vector<int64_t> &memberAxes = {}) {
    plan::Collective &c = collective(kind, axes, inputs[0], outputs[0]);
    plan::Instruction &inst = *program->mutable_instructions(program->instructions_size() - 1);
    for (size_t i = 1; i < inputs.size(); ++i) {
      inst.add_inputs(inputs[i]);
      inst.add_outputs(outputs[i]);
    }
    for (int64_t a : memberAxes)
      c.add_member_axes(a);
    return c;
  }

  /// Graph output `name`: buffer `id`, of the type `whole` (the buffer's
  /// when not given).
  void output(uint32_t id, const std::string &name, const plan::TensorType *whole = nullptr) {
    plan::Tensor *tensor = plan.add_outputs();
    tensor->set_name(name);
    *tensor->mutable_type() = whole ? *whole : program->buffers(int(id)).type();
    program->add_outputs(id);
  }

  plan::Plan plan;
  plan::RankProgram *program;

private:
  std::vector<int64_t> partOf(std::vector<int64_t> whole, const Sharding &sharding) const {
    for (size_t d = 0; d < sharding.size() && d < whole.size(); ++d)
      for (uint32_t axis : sharding[d])
        whole[d] /= plan.mesh().axes(int(axis)).size();
    return whole;
  }

  void shard(uint32_t id, const Sharding &sharding) {
    for (const std::vector<uint32_t> &axes : sharding) {
      plan::DimSharding *dim = program->mutable_buffers(int(id))->add_sharding();
      for (uint32_t axis : axes)
        dim->add_mesh_axes(axis);
    }
  }

  int64_t arena_ = 0;
};

} // namespace dtc::testsupport

#endif // DTC_TESTS_UNIT_SPMDPLANBUILDER_H
