//===- KernelCheck.cpp - a kernel's result against the CPU backend's ------===//
#include "tests/unit/KernelCheck.h"

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dtc::test {
namespace {

/// Random bytes of `t`: floats in [-3, 3] (and above 0 for inputs named in
/// `positive`, for log and sqrt), integers in [-5, 5], bools either.
std::vector<char> randomOf(const plan::TensorType &t, std::mt19937 &rng, bool positive) {
  int64_t n = count(t);
  std::vector<char> bytes(size_t(n * bytesOf(t.dtype())));
  std::uniform_real_distribution<float> real(positive ? 0.1f : -3.0f, 3.0f);
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype()) {
    case plan::F32: {
      float v = real(rng);
      std::memcpy(&bytes[size_t(i * 4)], &v, 4);
      break;
    }
    case plan::I64: {
      int64_t v = int64_t(rng() % 11) - 5;
      std::memcpy(&bytes[size_t(i * 8)], &v, 8);
      break;
    }
    case plan::BOOL:
      bytes[size_t(i)] = char(rng() % 2);
      break;
    case plan::BF16: { // a float's upper half
      float v = real(rng);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      uint16_t half = uint16_t(bits >> 16);
      std::memcpy(&bytes[size_t(i * 2)], &half, 2);
      break;
    }
    case plan::I32: {
      int32_t v = int32_t(rng() % 11) - 5;
      std::memcpy(&bytes[size_t(i * 4)], &v, 4);
      break;
    }
    default:
      ADD_FAILURE() << "no random inputs of dtype " << int(t.dtype());
    }
  }
  return bytes;
}

/// Random indices of `t` into an axis of `dim` rows, negative ones (from
/// the end) included; with `outside` (skip_outside), [-dim, 2 dim): a third
/// of them in range.
std::vector<char> randomIndices(const plan::TensorType &t, int64_t dim, bool outside,
                                std::mt19937 &rng) {
  int64_t n = count(t);
  std::vector<char> bytes(size_t(n * bytesOf(t.dtype())));
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = int64_t(rng() % uint64_t((outside ? 3 : 2) * dim)) - dim;
    if (t.dtype() == plan::I64) {
      std::memcpy(&bytes[size_t(i * 8)], &v, 8);
    } else {
      int32_t w = int32_t(v);
      std::memcpy(&bytes[size_t(i * 4)], &w, 4);
    }
  }
  return bytes;
}

/// The rows of the axis an instruction's index input (operand 1) indexes,
/// or 0 when it has none.
int64_t indexedRows(const plan::Instruction &inst,
                    const std::vector<plan::TensorType> &inTypes,
                    const plan::TensorType &outType) {
  if (inst.has_gather())
    return inTypes[0].shape(int(inst.gather().axis()));
  if (inst.has_scatter_add())
    return outType.shape(int(inst.scatter_add().axis()));
  return 0;
}

/// Whether the instruction's indices may fall outside the axis (skip_outside).
bool skipsOutside(const plan::Instruction &inst) {
  return (inst.has_gather() && inst.gather().skip_outside()) ||
         (inst.has_scatter_add() && inst.scatter_add().skip_outside());
}

} // namespace

int64_t bytesOf(plan::DType t) {
  switch (t) {
  case plan::F64: case plan::I64: return 8;
  case plan::BF16: case plan::F16: return 2;
  case plan::BOOL: return 1;
  default: return 4;
  }
}

int64_t count(const plan::TensorType &t) {
  int64_t n = 1;
  for (int64_t d : t.shape())
    n *= d;
  return n;
}

bool runOnCpu(const plan::RankProgram &program, const plan::Instruction &inst,
              const std::vector<int> &positive, std::mt19937 &rng, KernelRun &run,
              std::map<uint32_t, std::vector<char>> *shared) {
  for (uint32_t b : inst.inputs())
    run.inTypes.push_back(program.buffers(int(b)).type());
  for (uint32_t b : inst.outputs())
    run.outTypes.push_back(program.buffers(int(b)).type());
  std::string error;
  auto cpu = runtime::cpu::makeKernel(inst, run.inTypes, run.outTypes, error);
  EXPECT_TRUE(cpu) << error;
  if (!cpu)
    return false;
  int64_t rows = indexedRows(inst, run.inTypes, run.outTypes[0]);
  for (size_t i = 0; i < run.inTypes.size(); ++i) {
    // A buffer another instruction of the run read holds what it read.
    if (shared && shared->count(inst.inputs(int(i)))) {
      run.inputs.push_back(shared->at(inst.inputs(int(i))));
      continue;
    }
    bool isPositive = std::count(positive.begin(), positive.end(), int(i)) > 0;
    run.inputs.push_back(rows && i == 1
                             ? randomIndices(run.inTypes[i], rows, skipsOutside(inst), rng)
                             : randomOf(run.inTypes[i], rng, isPositive));
    if (shared)
      (*shared)[inst.inputs(int(i))] = run.inputs.back();
  }
  std::vector<void *> out;
  for (const plan::TensorType &t : run.outTypes) {
    run.expected.emplace_back(size_t(count(t) * bytesOf(t.dtype())), 0);
    out.push_back(run.expected.back().data());
  }
  std::vector<const void *> in;
  for (auto &v : run.inputs)
    in.push_back(v.data());
  runtime::cpu::ThreadPool pool(1);
  bool ok = cpu->run(in.data(), out.data(), pool, error);
  EXPECT_TRUE(ok) << error;
  return ok;
}

bool runBatchOnCpu(const plan::RankProgram &program, int last, std::mt19937 &rng,
                   KernelRun &run) {
  int first = last + 1 - int(program.instructions(last).gpu().batch());
  std::map<uint32_t, std::vector<char>> shared;
  KernelRun outputs;
  for (int i = first; i <= last; ++i) {
    EXPECT_TRUE(i == last || program.instructions(i).gpu().batched()) << "instruction " << i;
    KernelRun member;
    if (!runOnCpu(program, program.instructions(i), {}, rng, member, &shared))
      return false;
    auto append = [](auto &to, auto &from) {
      to.insert(to.end(), std::make_move_iterator(from.begin()),
                std::make_move_iterator(from.end()));
    };
    append(run.inTypes, member.inTypes);
    append(run.inputs, member.inputs);
    append(outputs.outTypes, member.outTypes);
    append(outputs.expected, member.expected);
  }
  run.outTypes = std::move(outputs.outTypes);
  run.expected = std::move(outputs.expected);
  return true;
}

double compareOutput(const plan::Instruction &inst, const KernelRun &run,
                     const std::vector<char> &actual, size_t output) {
  const std::vector<char> &expected = run.expected[output];
  int64_t n = count(run.outTypes[output]);
  plan::DType type = run.outTypes[output].dtype();
  if (type != plan::F32 && type != plan::BF16)
    return actual == expected ? 0 : -1;
  if (inst.has_transpose() || inst.has_slice() || inst.has_concat() || inst.has_copy() ||
      inst.has_gather())
    return actual == expected ? 0 : -1; // moves: the same bytes
  // bf16: the f32 before the rounding may differ in its last bits, which
  // can move the result by one bf16 step.
  auto element = [&](const std::vector<char> &v, int64_t i) {
    float f = 0;
    if (type == plan::F32) {
      std::memcpy(&f, &v[size_t(i * 4)], 4);
    } else {
      uint16_t half;
      std::memcpy(&half, &v[size_t(i * 2)], 2);
      uint32_t bits = uint32_t(half) << 16;
      std::memcpy(&f, &bits, 4);
    }
    return f;
  };
  double scale = type == plan::BF16 ? 1e-4 / 0.0078125 : 1.0;
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    float a = element(actual, i), e = element(expected, i);
    if (std::isnan(a) && std::isnan(e))
      continue; // both undefined alike (a square root of a random negative)
    if (std::isfinite(a) != std::isfinite(e))
      return INFINITY;
    if (std::isfinite(e))
      worst = std::max(worst, scale * std::abs(double(a) - double(e)) /
                                  std::max(std::abs(double(e)), 0.5));
  }
  return worst;
}

} // namespace dtc::test
