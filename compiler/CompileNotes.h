//===- CompileNotes.h - the decisions passes record for people --*- C++ -*-===//
//
// Each pass that decides something says so in one line, appended to @main's
// `dtc.notes` (so `dtc-opt` shows them and lit tests check them); plan
// emission copies them into the plan, where `dtc compile` and `dtc plan`
// print them. Numbers are written the way the rest of dtc writes them.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_COMPILER_COMPILENOTES_H
#define DTC_COMPILER_COMPILENOTES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <string>
#include <vector>

namespace dtc {

/// Appends `text` to `func`'s notes.
void addNote(mlir::func::FuncOp func, const llvm::Twine &text);

/// `func`'s notes, in order.
std::vector<std::string> notesOf(mlir::func::FuncOp func);

/// "0.001", "3", "1e-08": a number as printf's %g writes it.
std::string formatNumber(double value);

/// The name a location carries (a model node's, `h.0.attn`), or empty.
std::string locationName(mlir::Location loc);

/// "1.23 s", "4.56 ms", "7.8 us".
std::string formatSeconds(double seconds);

/// "950", "12.3 k", "124 M", "175 B": a count, three digits.
std::string formatCount(int64_t count);

} // namespace dtc

#endif // DTC_COMPILER_COMPILENOTES_H
