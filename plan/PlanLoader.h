//===- PlanLoader.h - reading and checking a dtc plan -----------*- C++ -*-===//
//
// The runtime trusts nothing in a plan file: every buffer index, size and
// offset is checked here, so that execution can index without checks and a
// corrupt, truncated or foreign plan is a message, not a crash.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLAN_PLANLOADER_H
#define DTC_PLAN_PLANLOADER_H

#include "plan/DType.h"

#include "plan.pb.h"

#include <cstdint>
#include <string>

namespace dtc::plan {

/// The plan format this runtime reads; the compiler writes the same.
/// Version 2: training inputs carry a typed role (plan.proto: InputRole)
/// instead of being recognised by name. Version 3: gradient accumulation
/// (Training.micro_batches, RankProgram.accumulate_end, accumulators), which
/// an older runtime would run as one micro-batch per step. Version 4:
/// pipeline stages (Training.pipeline; per-program updates, forward part
/// and stash; sends and receives along a mesh axis). Version 5: interleaved
/// pipelines (virtual stages, RankProgram.part_ends, Transfer.channel), which
/// an older runtime would run in the wrong order. Version 6: the stash in
/// parts, each with its own copies (RankProgram.stashes, Buffer.stash),
/// which an older runtime would overlap. Version 7: local SGD
/// (Training.sync, average_every, data_axes), whose replicas an older
/// runtime would never average. Version 8: parameter servers
/// (Training.parameter_servers; ranks past the mesh), which an older
/// runtime would not start. Version 9: GPU kernels' PTX held once
/// (Plan.gpu_modules), instructions naming theirs. Version 11: fused
/// attention (Instruction.attention, attention_backward). Version 13:
/// layer norm's gradient as one instruction (layer_norm_backward). Version
/// 14: RMSNorm as a layer norm (LayerNorm.rms), which an older runtime would
/// centre. Version 15: cross-entropy as one instruction (cross_entropy).
/// Version 16: elementwise instructions with several outputs
/// (Elementwise.outputs), which an older runtime would refuse or misread.
/// Version 17: bf16 copies of weights (ParameterSource.cast_of), which an
/// older runtime would look for in the model; a weight gradient's GEMM
/// writing its bias's gradient (MatMul.bias_gradient), and a product times
/// a GELU's derivative (MatMul.gelu_gradient). Version 18: a layer norm's
/// gradient summing its scale's and bias's gradients per group of rows
/// (LayerNorm.scale_gradient, bias_gradient), and cross-entropy writing the
/// logits' gradient (CrossEntropy.gradient): operands an older runtime
/// would refuse. Version 19: several instructions' kernels launched as one
/// (GpuKernel.batch, batched), which an older runtime would launch with
/// one instruction's buffers. Version 20: attention reading q, k and v
/// packed in one buffer (Attention.packed), whose backward has one output;
/// rotary embeddings (Instruction.rotary). Version 21: grouped-query
/// attention, k and v with fewer heads than q (their heads dividing q's),
/// which an older runtime would refuse as mismatched shapes. Version 22:
/// buckets, several collectives as one instruction and message
/// (Collective.member_axes). Version 23: parameters padded past the
/// model's shape (ParameterSource.model_shape), which an older runtime
/// would read as the model's tensor and refuse or misplace, and gathers
/// and scatter-adds over a block of a table's rows (Gather.skip_outside),
/// whose ids in other blocks an older runtime would wrap or refuse.
/// Version 24: bf16 copies split otherwise than their f32 weights (ZeRO's
/// master split, its copy whole), which an older runtime would refuse.
constexpr uint32_t kPlanFormatVersion = 24;

/// RankProgram.outputs: an output another pipeline stage computes.
constexpr uint32_t kNoBuffer = 0xFFFFFFFFu;

/// Checks a parsed plan; on failure returns false with `error` saying what
/// is wrong and where (rank, buffer, instruction).
bool validatePlan(const plan::Plan &plan, std::string &error);

/// Reads and validates the plan file at `path`.
bool loadPlan(const std::string &path, plan::Plan &plan, std::string &error);

} // namespace dtc::plan

#endif // DTC_PLAN_PLANLOADER_H
