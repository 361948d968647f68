//===- LoopKernels.h - kernels for reductions, rows and data movement -*- C++ -*-===//
//
// The kernels of the graph ops that are not elementwise: reductions,
// softmax and layer norm rows, transposes, slices, copies, concatenation,
// gather and its scatter-add gradient. Each is one parallel loop
// (scf.parallel) over the kernel's threads whose body reads and writes
// the op's flat buffers with computed indices: a thread per output element
// (reductions fold their input in a sequential loop), per row (softmax,
// layer norm) or per update (scatter-add, by atomic adds). Like the
// elementwise kernels, they lower for GPUs (dtc-kernels-to-ptx) and for
// the host (the tests) alike.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_LOOPKERNELS_H
#define DTC_COMPILER_LOOPKERNELS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <string>

namespace dtc {

/// Threads a block: dtc-kernels-to-ptx tiles a kernel's parallel loop by
/// it, and dtc-batch-kernels starts each member of a launch at a multiple.
constexpr int64_t kThreadsPerBlock = 256;

/// Whether `op` is a kind buildLoopKernel covers (its types may still not be).
bool hasLoopKernel(mlir::Operation *op);

/// Builds `op`'s kernels at `b`'s insertion point, one per instruction the
/// plan makes of it (a split's pieces are a slice each), named by
/// `nextName`: a kernel's arguments are its instruction's buffers (flat
/// memrefs), inputs then outputs; `dtc.threads` says how many threads it
/// runs, `dtc.zero_outputs` that its outputs must be zeros before it
/// runs, and `dtc.status` that a last argument is a status word (a gather's
/// out-of-range index sets it). None, with `missing` saying what, when an element type or a case
/// is not covered.
llvm::SmallVector<mlir::func::FuncOp>
buildLoopKernels(mlir::OpBuilder &b, mlir::Operation *op,
                 llvm::function_ref<std::string()> nextName, std::string &missing);

} // namespace dtc

#endif // DTC_COMPILER_LOOPKERNELS_H
