//===- Cancel.h - a compile another thread may stop early -------*- C++ -*-===//
//
// compileToPlan compiles a second --recompute mode on another thread while
// the first compiles; when the first has room to spare, the second is not
// needed, and waiting for its search would double the planning time. The
// searches check, between the candidates they try, whether their thread's
// compile was cancelled, and stop (failing) when it was.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_CANCEL_H
#define DTC_COMPILER_CANCEL_H

#include <atomic>

namespace dtc {

/// This thread's compile stops when `flag` becomes true (null: never).
void setCompileCancelFlag(const std::atomic<bool> *flag);

/// Whether this thread's compile was cancelled.
bool compileCancelled();

} // namespace dtc

#endif // DTC_COMPILER_CANCEL_H
