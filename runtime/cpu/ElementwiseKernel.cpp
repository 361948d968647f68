//===- ElementwiseKernel.cpp - fused elementwise expressions --------------===//
//
// The expression is evaluated a block of output elements at a time: each
// node over the whole block into per-thread scratch, so that every node is
// one tight loop the compiler vectorises and the block's values stay in
// cache. Values are computed in three classes: float (F32), double (F64) and
// int64 (every integer type and BOOL, widened on load, narrowed on store).
//
// This file runs the blocks. The rest of the kernel, internal to it:
// ElementwisePlan.cpp checks and prepares an expression (merged dims, how
// each input is read, scratch slots); ElementwiseLoops.cpp has every loop a
// step runs, compiled per instruction set; ElementwiseOps.h is what each op
// computes on one element; ElementwiseTypes.h the compute classes.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ElementwiseKernel.h"

#include "runtime/cpu/ElementwisePlan.h"
#include "runtime/cpu/KernelSupport.h"
#include "runtime/cpu/ThreadPool.h"

#include <algorithm>
#include <cstring>
#include <memory>

namespace dtc::runtime::cpu {
namespace elementwise {
namespace {

/// The plan's fields are the kernel's own (a base, not a member), read by
/// the blocks as members.
class ElementwiseKernel final : public Kernel, private ElementwisePlan {
public:
  explicit ElementwiseKernel(ElementwisePlan plan) : ElementwisePlan(std::move(plan)) {}

  bool run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
           std::string &error) override;
  bool runsAlongsideOthers() const override { return true; } // scratch is thread_local

private:
  /// Blocks [begin, end): output o written to `targets[o]`, by its node's
  /// loop where `inPlace[o]`, else stored after the block's last node.
  void runBlocks(const void *const *inputs, char *const *targets, const bool *inPlace,
                 int64_t begin, int64_t end) const;
  void loadStrided(const Step &step, const void *src, int64_t start, int64_t n,
                   char *dst) const;
};

void ElementwiseKernel::loadStrided(const Step &step, const void *src, int64_t start,
                                    int64_t n, char *dst) const {
  const InputAccess &in = inputs_[step.input];
  const int64_t inner = dims_.back(), innerStride = in.strides.back();
  const int64_t dstBytes = computeBytes(in);
  const size_t outer = dims_.size() - 1;
  // The rows over the outer dims by an odometer (a division per dim and
  // row cost more than loading a short row).
  thread_local Odometer rows;
  rows.start(dims_.data(), in.strides.data(), outer, start / inner);
  for (int64_t done = 0, col = start % inner; done < n; col = 0, rows.next()) {
    int64_t count = std::min(inner - col, n - done);
    step.load(src, rows.offset() + col * innerStride, innerStride == 0, dst + done * dstBytes,
              count);
    done += count;
  }
}

void ElementwiseKernel::runBlocks(const void *const *inputs, char *const *targets,
                                  const bool *inPlace, int64_t begin, int64_t end) const {
  // Scratch lives as long as the thread, so blocks allocate nothing. Each
  // slot holds a block of 8-byte values (or of floats).
  thread_local std::unique_ptr<char[]> scratch;
  thread_local int64_t scratchBytes = 0;
  thread_local std::vector<const void *> values;
  const int64_t slotBytes = kBlock * 8;
  if (scratchBytes < slots_ * slotBytes) {
    scratch.reset(new char[size_t(slots_ * slotBytes)]);
    scratchBytes = slots_ * slotBytes;
  }
  values.resize(size_t(nodes_));
  // Per node, the output its loop writes in place; -1 for none.
  thread_local std::vector<int> writes;
  writes.assign(size_t(nodes_), -1);
  for (size_t o = 0; o < outputs_.size(); ++o)
    if (inPlace[o])
      writes[size_t(outputs_[o].node)] = int(o);
  char *base = scratch.get();
  auto slot = [&](const Step &s) { return base + s.slot * slotBytes; };

  auto evaluate = [&](const Step &s, int64_t n, void *out) {
    const void *args[3] = {values[s.args[0]], values[s.args[1]], values[s.args[2]]};
    s.fn(s, args, out, n);
    if (s.narrow)
      s.narrow(out, n);
    values[s.node] = out;
  };
  // Values for every block, as long as the longest block.
  const int64_t longest = std::min(kBlock, total_);
  for (const Step &s : uniformSteps_) {
    if (s.kind == StepKind::Compute) {
      evaluate(s, longest, slot(s));
    } else {
      s.load(inputs[s.input], 0, true, slot(s), longest);
      values[s.node] = slot(s);
    }
  }
  const int64_t inner = dims_.back();
  for (const Step &s : blockSteps_)
    if (s.kind == StepKind::InputRepeated)
      for (int64_t at = 0; at < longest + inner; at += inner)
        s.load(inputs[s.input], 0, false, slot(s) + at * computeBytes(inputs_[s.input]),
               std::min(inner, longest + inner - at));
  for (int64_t block = begin; block < end; ++block) {
    const int64_t start = block * kBlock, n = std::min(kBlock, total_ - start);
    for (const Step &s : blockSteps_) {
      switch (s.kind) {
      case StepKind::InputInPlace:
        values[s.node] = static_cast<const char *>(inputs[s.input]) +
                         start * inputs_[s.input].bytes;
        break;
      case StepKind::InputRepeated:
        values[s.node] = slot(s) + start % inner * computeBytes(inputs_[s.input]);
        break;
      case StepKind::InputLoad:
        if (inputs_[s.input].full)
          s.load(inputs[s.input], start, false, slot(s), n);
        else
          loadStrided(s, inputs[s.input], start, n, slot(s));
        values[s.node] = slot(s);
        break;
      case StepKind::Compute: {
        int o = writes[size_t(s.node)];
        evaluate(s, n, o >= 0 ? targets[o] + start * outputs_[size_t(o)].bytes : slot(s));
        break;
      }
      }
    }
    for (size_t o = 0; o < outputs_.size(); ++o)
      if (!inPlace[o])
        outputs_[o].store(values[size_t(outputs_[o].node)], targets[o], start, n);
  }
}

bool ElementwiseKernel::run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
                            std::string &error) {
  if (total_ == 0)
    return true;
  // Buffer assignment may give an output an input's bytes (a parameter's
  // update over it). A block reads its inputs before it stores, so an input
  // whose element i is output element i is safe, though not for the loops'
  // restrict pointers (no writing in place); any other overlap would read
  // elements already overwritten, and that output goes through a
  // temporary.
  const size_t count = outputs_.size();
  std::vector<char *> targets(count);
  std::unique_ptr<bool[]> inPlace(new bool[count]);
  std::vector<std::vector<char>> temporaries(count);
  for (size_t o = 0; o < count; ++o) {
    const OutputAccess &out = outputs_[o];
    char *output = static_cast<char *>(outputs[o]);
    inPlace[o] = out.storeInPlace;
    bool viaTemporary = false;
    const auto outBegin = reinterpret_cast<uintptr_t>(output);
    const auto outEnd = outBegin + uintptr_t(total_ * out.bytes);
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const InputAccess &in = inputs_[i];
      int64_t elements = 1;
      for (size_t d = 0; d < dims_.size(); ++d)
        if (in.strides[d] != 0)
          elements *= dims_[d];
      const auto begin = reinterpret_cast<uintptr_t>(inputs[i]);
      if (begin >= outEnd || outBegin >= begin + uintptr_t(elements * in.bytes))
        continue;
      inPlace[o] = false;
      if (!in.full || begin != outBegin || in.bytes != out.bytes)
        viaTemporary = true;
    }
    targets[o] = output;
    if (viaTemporary) {
      temporaries[o].resize(size_t(total_ * out.bytes));
      targets[o] = temporaries[o].data();
      inPlace[o] = out.storeInPlace;
    }
  }
  const int64_t blocks = (total_ + kBlock - 1) / kBlock;
  pool.parallelFor(blocks, grain_, [&](int64_t begin, int64_t end) {
    runBlocks(inputs, targets.data(), inPlace.get(), begin, end);
  });
  for (size_t o = 0; o < count; ++o)
    if (!temporaries[o].empty())
      std::memcpy(outputs[o], temporaries[o].data(), temporaries[o].size());
  return true;
}

} // namespace
} // namespace elementwise

std::unique_ptr<Kernel> makeElementwiseKernel(const plan::Elementwise &expr,
                                              const std::vector<plan::TensorType> &inputTypes,
                                              const std::vector<plan::TensorType> &outputTypes,
                                              std::string &error) {
  auto prepared = elementwise::planElementwise(expr, inputTypes, outputTypes, error);
  if (!prepared)
    return nullptr;
  return std::make_unique<elementwise::ElementwiseKernel>(std::move(*prepared));
}

} // namespace dtc::runtime::cpu
