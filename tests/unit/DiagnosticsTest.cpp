//===- DiagnosticsTest.cpp - how dtc prints MLIR diagnostics ----------------===//
#include "compiler/Diagnostics.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace {

std::string textAt(MLIRContext &context, Location loc, const std::string &message,
                   DiagnosticSeverity severity = DiagnosticSeverity::Error) {
  Diagnostic diagnostic(loc, severity);
  diagnostic << message;
  return dtc::diagnosticText(diagnostic);
}

TEST(Diagnostics, NameTheModelAndTheNodeAsTheOtherErrorsDo) {
  MLIRContext context;
  Location model = FileLineColLoc::get(&context, "gpt2.onnx", 0, 0);
  EXPECT_EQ(textAt(context, model, "--dp 3: input 'input_ids' has batch 8"),
            "error: gpt2.onnx: --dp 3: input 'input_ids' has batch 8");
  // An ONNX node: its name over the model file.
  Location node = NameLoc::get(StringAttr::get(&context, "MatMul_3"), model);
  EXPECT_EQ(textAt(context, node, "no split meets the pinned mesh"),
            "error: gpt2.onnx: node 'MatMul_3': no split meets the pinned mesh");
  // The generated GPT: its spec (or an op's name) alone.
  Location spec = NameLoc::get(StringAttr::get(&context, "gpt:layers=2"));
  EXPECT_EQ(textAt(context, spec, "x", DiagnosticSeverity::Warning), "warning: gpt:layers=2: x");
  // A file with a line (an .mlir input), a fused location, none.
  EXPECT_EQ(textAt(context, FileLineColLoc::get(&context, "step.mlir", 3, 7), "x"),
            "error: step.mlir:3:7: x");
  EXPECT_EQ(textAt(context, FusedLoc::get(&context, {node, spec}), "x"),
            "error: gpt2.onnx: node 'MatMul_3': x");
  EXPECT_EQ(textAt(context, UnknownLoc::get(&context), "x"), "error: x");
}

TEST(Diagnostics, NotesFollowOnLinesOfTheirOwn) {
  MLIRContext context;
  Location model = FileLineColLoc::get(&context, "m.onnx", 0, 0);
  Diagnostic diagnostic(model, DiagnosticSeverity::Error);
  diagnostic << "no plan fits";
  diagnostic.attachNote(model) << "the smallest needs 2 GiB";
  EXPECT_EQ(dtc::diagnosticText(diagnostic),
            "error: m.onnx: no plan fits\nnote: m.onnx: the smallest needs 2 GiB");
}

TEST(Diagnostics, ThePrinterLeavesTheOpOut) {
  MLIRContext context;
  context.printOpOnDiagnostic(true);
  {
    dtc::DiagnosticPrinter printer(&context);
    EXPECT_FALSE(context.shouldPrintOpOnDiagnostic());
  }
}

} // namespace
