//===- Diagnostics.h - how dtc prints MLIR diagnostics ----------*- C++ -*-===//
//
// Errors from the compiler's passes come as MLIR diagnostics located at an
// op: its ONNX node (a name over the model file) or the model itself. dtc
// prints them as it prints its other errors, "error: MODEL: MESSAGE", with
// the node when there is one ("error: model.onnx: node 'MatMul_3':
// MESSAGE"), rather than MLIR's "loc(...): error: ...".
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_DIAGNOSTICS_H
#define DTC_COMPILER_DIAGNOSTICS_H

#include "mlir/IR/Diagnostics.h"

#include <string>
#include <thread>

namespace dtc {

/// "error: WHERE: MESSAGE" (warning, note, remark), then its notes on lines
/// of their own, each as its own diagnostic is.
std::string diagnosticText(mlir::Diagnostic &diagnostic);

/// Prints every diagnostic of `context` to stderr as diagnosticText does,
/// while it lives, without MLIR's dump of the op it is attached to.
class DiagnosticPrinter {
public:
  explicit DiagnosticPrinter(mlir::MLIRContext *context);

private:
  mlir::ScopedDiagnosticHandler handler_;
};

/// A ScopedDiagnosticHandler for the diagnostics of the thread that makes
/// it: another thread's (compileToPlan compiles two --recompute modes at
/// once) pass on to the handlers made before it, down to that thread's own.
class ThreadDiagnosticHandler {
public:
  template <typename Handler>
  ThreadDiagnosticHandler(mlir::MLIRContext *context, Handler handler)
      : handler_(context,
                 [owner = std::this_thread::get_id(),
                  handler = std::move(handler)](mlir::Diagnostic &d) mutable -> mlir::LogicalResult {
                   if (std::this_thread::get_id() != owner)
                     return mlir::failure();
                   return handler(d);
                 }) {}

private:
  mlir::ScopedDiagnosticHandler handler_;
};

} // namespace dtc

#endif // DTC_COMPILER_DIAGNOSTICS_H
