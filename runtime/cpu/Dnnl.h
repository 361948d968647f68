//===- Dnnl.h - oneDNN primitives on the pool's threads ----------*- C++ -*-===//
//
// oneDNN (Debian's libdnnl, OpenMP runtime) runs the f32 matmuls and
// convolutions: unlike OpenBLAS it can reorder a weight matrix into its
// kernels' blocked layout once, at load time, and its brgemm kernels reach a
// higher share of this machine's peak (docs/cpu-kernels.md has the figures).
// The ThreadPool runs on the same OpenMP threads, so one set of threads
// serves both.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CPU_DNNL_H
#define DTC_RUNTIME_CPU_DNNL_H

#include "runtime/cpu/ThreadPool.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <unordered_map>

namespace dtc::runtime::cpu {

/// Whether kernels may use oneDNN (default yes). Off, each kernel takes
/// its own path (OpenBLAS, our convolutions, our copies): for tests of
/// those paths, and to compare the two.
bool dnnlAllowed();
void setDnnlAllowed(bool allowed);

/// The process's CPU engine and its in-order stream.
dnnl::engine &dnnlEngine();
dnnl::stream &dnnlStream();

/// Runs `primitive` on `pool.threads()` threads and waits for it.
void executeDnnl(const dnnl::primitive &primitive,
                 const std::unordered_map<int, dnnl::memory> &args, ThreadPool &pool);

/// A plain (strided) f32 memory descriptor.
dnnl::memory::desc plainF32(const dnnl::memory::dims &dims, const dnnl::memory::dims &strides);

/// The weights layout to ask a primitive for: its own choice
/// (`format_tag::any`) when the weights are `constant` (not null), since
/// they will be reordered once; else `plain`, the layout they arrive in.
dnnl::memory::desc weightsRequest(const dnnl::memory::desc &plain, const void *constant);

/// The weights memory for a primitive that chose layout `chosen`: the
/// constant weights reordered into it once (or `plain` over them when the
/// layouts agree), or, when `constant` is null, `plain` without data, for
/// run() to point at each call's weights.
dnnl::memory weightsMemory(const dnnl::memory::desc &plain, const void *constant,
                           const dnnl::memory::desc &chosen);

} // namespace dtc::runtime::cpu

#endif // DTC_RUNTIME_CPU_DNNL_H
