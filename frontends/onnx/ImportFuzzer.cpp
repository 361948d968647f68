//===- ImportFuzzer.cpp - libFuzzer target for the ONNX importer ----------===//
//
// Feeds arbitrary bytes to the importer: it must answer with a module or an
// error message, never crash, hang or leak.
//
//===----------------------------------------------------------------------===//
#include "frontends/onnx/OnnxImporter.h"

#include "mlir/IR/MLIRContext.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // A fresh context per input keeps runs independent (uniqued attributes
  // would otherwise grow without bound).
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  dtc::onnx::ImportOptions options;
  std::string error;
  auto module = dtc::onnx::importOnnxBytes(context, data, size, "fuzz.onnx",
                                           "/nonexistent", options, error);
  if (!module && error.empty())
    __builtin_trap(); // a failure must always say why
  return 0;
}
