//===- Cancel.h - a compile another thread may stop early -------*- C++ -*-===//
//
// compileToPlan compiles a second --recompute mode on another thread while
// the first compiles; when the first has room to spare, the second is not
// needed, and waiting for its search would double the planning time. The
// stage search (PipelineSearch.cpp) likewise searches the next stage count
// on another thread, not needed once a count is slower. The searches
// check, between the candidates they try, whether their thread's compile
// was cancelled, and stop (failing) when it was.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_CANCEL_H
#define DTC_COMPILER_CANCEL_H

#include <atomic>

namespace dtc {

/// This thread's compile stops when `flag` or `also` becomes true (null:
/// never). A search that runs part of itself on another thread gives that
/// thread its own flag, and its compile's as `also`.
void setCompileCancelFlag(const std::atomic<bool> *flag, const std::atomic<bool> *also = nullptr);

/// The flag set for this thread's compile (null: none).
const std::atomic<bool> *compileCancelFlag();

/// Whether this thread's compile was cancelled.
bool compileCancelled();

} // namespace dtc

#endif // DTC_COMPILER_CANCEL_H
