//===- Diagnostics.cpp - how dtc prints MLIR diagnostics --------------------===//
#include "compiler/Diagnostics.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace dtc {
namespace {

/// The place a location names, as a prefix ("model.onnx: node 'X': "), or
/// "" for none.
std::string placeOf(Location loc) {
  if (auto file = dyn_cast<FileLineColLoc>(loc)) {
    std::string text = file.getFilename().str();
    if (file.getLine() > 0)
      text += ":" + std::to_string(file.getLine()) + ":" + std::to_string(file.getColumn());
    return text + ": ";
  }
  if (auto name = dyn_cast<NameLoc>(loc)) {
    // An ONNX node: its name over the model file; the generated GPT's ops
    // and the model itself: a name alone.
    if (isa<UnknownLoc>(name.getChildLoc()))
      return name.getName().str() + ": ";
    return placeOf(name.getChildLoc()) + "node '" + name.getName().str() + "': ";
  }
  if (auto fused = dyn_cast<FusedLoc>(loc))
    return fused.getLocations().empty() ? "" : placeOf(fused.getLocations().front());
  if (auto call = dyn_cast<CallSiteLoc>(loc))
    return placeOf(call.getCallee());
  return "";
}

const char *severityOf(DiagnosticSeverity severity) {
  switch (severity) {
  case DiagnosticSeverity::Error:
    return "error";
  case DiagnosticSeverity::Warning:
    return "warning";
  case DiagnosticSeverity::Note:
    return "note";
  case DiagnosticSeverity::Remark:
    return "remark";
  }
  return "error";
}

} // namespace

std::string diagnosticText(Diagnostic &diagnostic) {
  std::string text = std::string(severityOf(diagnostic.getSeverity())) + ": " +
                     placeOf(diagnostic.getLocation()) + diagnostic.str();
  for (Diagnostic &note : diagnostic.getNotes())
    text += "\n" + diagnosticText(note);
  return text;
}

DiagnosticPrinter::DiagnosticPrinter(MLIRContext *context)
    : handler_(context, [](Diagnostic &diagnostic) {
        llvm::errs() << diagnosticText(diagnostic) << "\n";
        return success();
      }) {
  // A user's error names the model and node, not the IR around it.
  context->printOpOnDiagnostic(false);
}

} // namespace dtc
