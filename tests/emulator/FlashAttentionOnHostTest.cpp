//===- FlashAttentionOnHostTest.cpp - the flash kernels run on the CPU ----===//
//
// runtime/cuda/kernels/FlashAttention.cu compiled as host C++ and run by
// the emulator (CudaOnHost.h), launched as the runtime launches it: the
// instruction's dims, grids, shared memory and arguments from
// AttentionLaunch.h (attentionDimsOf, forwardLaunch, gradQLaunch,
// gradKVLaunch, AttentionArgs), the kernels named by each launch's entry.
// Every case of AttentionReference.h, heads first, bshd, packed and
// interleaved, is
// held to AttentionChecks.h's bounds, as on a GPU (tests/gpu). Inputs must
// come back unchanged, and nothing may be written around an output.
//
// What this cannot show: speed, and what only hardware does (the tensor
// cores' own rounding, the order of a warp's sums, shared-memory bank
// conflicts). The kernels' PTX is assembled for sm_90 by ptxas in
// dtc-cuda-host-tests' attention-ptx-assembles.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/AttentionLaunch.h"
#include "tests/unit/AttentionChecks.h"

#include "plan/DType.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <utility>

#include "tests/emulator/CudaOnHost.h"

namespace {
// The kernels' `extern __shared__ unsigned char smem[]`.
alignas(128) unsigned char smem[dtc::cudaonhost::kMaxSharedBytes];
} // namespace

#include "runtime/cuda/kernels/FlashAttention.cu"

namespace {

namespace at = dtc::attentiontest;
using dtc::runtime::cuda::AttentionArgs;
using dtc::runtime::cuda::AttentionDims;
using dtc::runtime::cuda::AttentionLaunch;

/// A kernel entry point called with cuLaunchKernel's parameter array.
using Entry = std::function<void(void **)>;

template <typename T> T parameter(void *p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

template <typename... A, size_t... I>
void callWith(void (*f)(A...), void **params, std::index_sequence<I...>) {
  f(parameter<A>(params[I])...);
}

template <typename... A> Entry entry(void (*f)(A...)) {
  return [f](void **params) { callWith(f, params, std::index_sequence_for<A...>{}); };
}

/// The PTX's entry points by name, as the runtime finds them.
const std::map<std::string, Entry> &entries() {
  static const std::map<std::string, Entry> all = {
      {"dtc_attention_forward_f32", entry(dtc_attention_forward_f32)},
      {"dtc_attention_grad_q_f32", entry(dtc_attention_grad_q_f32)},
      {"dtc_attention_grad_kv_f32", entry(dtc_attention_grad_kv_f32)},
      {"dtc_attention_forward_bf16", entry(dtc_attention_forward_bf16)},
      {"dtc_attention_grad_q_bf16", entry(dtc_attention_grad_q_bf16)},
      {"dtc_attention_grad_kv_bf16", entry(dtc_attention_grad_kv_bf16)},
  };
  return all;
}

/// A device buffer: 256-byte aligned as cuMemAlloc's, with guard bytes on
/// each side that must stay as they were.
class Buffer {
public:
  static constexpr size_t kGuard = 256;
  Buffer(const std::vector<char> &bytes) : size_(bytes.size()), storage_(size_ + 3 * kGuard) {
    std::memset(storage_.data(), 0x5a, storage_.size());
    std::memcpy(data(), bytes.data(), size_);
  }
  char *data() {
    uintptr_t p = reinterpret_cast<uintptr_t>(storage_.data()) + kGuard;
    return reinterpret_cast<char *>((p + kGuard - 1) / kGuard * kGuard);
  }
  std::vector<char> bytes() { return std::vector<char>(data(), data() + size_); }
  /// Whether every byte outside the data is still a guard byte.
  bool guardsHold() {
    for (size_t i = 0; i < storage_.size(); ++i) {
      char *p = storage_.data() + i;
      if ((p < data() || p >= data() + size_) && *p != 0x5a)
        return false;
    }
    return true;
  }

private:
  size_t size_;
  std::vector<char> storage_;
};

/// Runs `inst` through the emulated flash kernels: the outputs' values.
std::vector<at::Values> runOnHost(const dtc::plan::Instruction &inst,
                                  const std::vector<dtc::plan::TensorType> &inTypes,
                                  const std::vector<at::Values> &inputs,
                                  const std::vector<dtc::plan::TensorType> &outTypes) {
  bool backward = inst.has_attention_backward();
  AttentionDims dims;
  std::string why;
  bool fits = dtc::runtime::cuda::attentionDimsOf(
      backward, backward ? inst.attention_backward() : inst.attention(), inTypes, outTypes, dims,
      why);
  EXPECT_TRUE(fits) << why;
  if (!fits)
    return {};
  std::vector<std::unique_ptr<Buffer>> in, out;
  std::vector<const void *> inPointers;
  std::vector<void *> outPointers;
  for (size_t i = 0; i < inputs.size(); ++i) {
    in.push_back(std::make_unique<Buffer>(at::bytesOf(inputs[i], inTypes[i].dtype())));
    inPointers.push_back(in.back()->data());
  }
  // Outputs and the scratch start as NaN bytes, so a row the kernels miss
  // (or a Delta grad_kv reads before grad_q writes it) shows.
  for (const dtc::plan::TensorType &t : outTypes) {
    out.push_back(std::make_unique<Buffer>(std::vector<char>(size_t(dtc::plan::byteSize(t)),
                                                             char(0xff))));
    outPointers.push_back(out.back()->data());
  }
  Buffer scratch(std::vector<char>(attentionScratchBytes(dims), char(0xff)));
  AttentionArgs args(dims, backward, inPointers.data(), outPointers.data(), scratch.data());
  std::vector<AttentionLaunch> launches;
  if (backward)
    launches = {gradQLaunch(dims), gradKVLaunch(dims)};
  else
    launches = {forwardLaunch(dims)};
  for (size_t i = 0; i < launches.size(); ++i) {
    const AttentionLaunch &l = launches[i];
    auto found = entries().find(l.entry);
    EXPECT_NE(found, entries().end()) << "no entry point " << l.entry;
    if (found == entries().end())
      return {};
    void **params = args.params(i);
    std::string error;
    bool ran = dtc::cudaonhost::launch(
        {l.gridX, l.gridY, 1}, {l.threads, 1, 1}, l.sharedBytes, smem, sizeof smem,
        [&] { found->second(params); }, error);
    EXPECT_TRUE(ran) << l.entry << ": " << error;
    if (!ran)
      return {};
  }
  for (size_t i = 0; i < inputs.size(); ++i)
    EXPECT_EQ(in[i]->bytes(), at::bytesOf(inputs[i], inTypes[i].dtype()))
        << "input " << i << " was written";
  std::vector<at::Values> results;
  for (size_t o = 0; o < outTypes.size(); ++o) {
    EXPECT_TRUE(out[o]->guardsHold()) << "written around output " << o;
    results.push_back(at::valuesOf(out[o]->bytes(), outTypes[o].dtype()));
  }
  EXPECT_TRUE(scratch.guardsHold()) << "written around the scratch";
  return results;
}

/// Every case in `layout`; how many ran.
int checkAll(at::Layout layout, unsigned seed) {
  int ran = 0;
  for (const at::Case &c : at::cases()) {
    bool packed = layout == at::Layout::Packed || layout == at::Layout::Interleaved;
    if (packed && !at::packable(c))
      continue;
    SCOPED_TRACE(c.name());
    auto start = std::chrono::steady_clock::now();
    at::Errors e = at::checkAttention(c, layout, seed, runOnHost);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("attention %s: worst relative error out %.2g lse %.2g grad_q %.2g grad_k %.2g "
                "grad_v %.2g (%.1f s)\n",
                c.name().c_str(), e.out, e.lse, e.dq, e.dk, e.dv, seconds);
    ++ran;
  }
  return ran;
}

TEST(FlashAttentionOnHost, HeadsFirstAgainstADoubleReference) {
  EXPECT_GT(checkAll(at::Layout::HeadsFirst, 7), 0);
}

TEST(FlashAttentionOnHost, HeadsAfterTheSequenceAgainstADoubleReference) {
  EXPECT_GT(checkAll(at::Layout::Bshd, 9), 0);
}

TEST(FlashAttentionOnHost, PackedPiecesAgainstADoubleReference) {
  EXPECT_GT(checkAll(at::Layout::Packed, 5), 0);
}

TEST(FlashAttentionOnHost, InterleavedPiecesAgainstADoubleReference) {
  EXPECT_GT(checkAll(at::Layout::Interleaved, 3), 0);
}

} // namespace
