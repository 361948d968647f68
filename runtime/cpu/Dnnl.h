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

#include <string>
#include <unordered_map>

namespace dtc::runtime::cpu {

/// The process's CPU engine and its in-order stream.
dnnl::engine &dnnlEngine();
dnnl::stream &dnnlStream();

/// Runs `primitive` on `pool.threads()` threads and waits for it.
void executeDnnl(const dnnl::primitive &primitive,
                 const std::unordered_map<int, dnnl::memory> &args, ThreadPool &pool);

/// A plain (strided) f32 memory descriptor.
dnnl::memory::desc plainF32(const dnnl::memory::dims &dims, const dnnl::memory::dims &strides);

/// Reorders the constant tensor at `data` (described by `plain`) into a new
/// memory of layout `want`; returns it (or `plain` over `data` unchanged
/// when the layouts are equal).
dnnl::memory reorderConstant(const dnnl::memory::desc &plain, const void *data,
                             const dnnl::memory::desc &want);

} // namespace dtc::runtime::cpu

#endif // DTC_RUNTIME_CPU_DNNL_H
