//===- OnnxImporter.h - ONNX model -> graph dialect -------------*- C++ -*-===//
#ifndef DTC_FRONTENDS_ONNX_ONNXIMPORTER_H
#define DTC_FRONTENDS_ONNX_ONNXIMPORTER_H

#include "frontends/onnx/Trainable.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dtc::onnx {

/// The default-domain opsets the importer accepts. 13-21 are the tested
/// range; later opsets only widened the type lists of the supported ops.
constexpr int kMinOpset = 13;
constexpr int kMaxOpset = 27;

struct ImportOptions {
  /// `--shape NAME=2x128`: NAME is a graph input (its whole shape) or a
  /// symbolic dim (dim_param) such as `batch` (then a single number).
  std::map<std::string, std::vector<int64_t>> shapes;
  /// `--freeze NAME=FILE.pb`: graph input NAME becomes a constant with the
  /// value in the ONNX TensorProto file (e.g. a shape fed as an input).
  std::map<std::string, std::string> frozenInputs;
  /// `--micro-batches N` (training): the graph is imported for one
  /// micro-batch, dim 0 of every input whose dim 0 is the batch (that of
  /// the first input) divided by N.
  int64_t microBatches = 1;
  /// `--trainable` / `--frozen PATTERN`: which weights training updates,
  /// where the importer's default (Trainable.h) is not what the user wants.
  TrainablePatterns trainable;
};

/// Parses `--shape` text `NAME=2x128` into `options`; false with `error` set
/// when it is malformed.
bool parseShapeOption(const std::string &text, ImportOptions &options,
                      std::string &error);

/// Imports the ONNX model at `path` as a module with one `func.func @main`.
/// On failure returns null and sets `error` to a message naming the file,
/// the node, its op type and what is wrong.
mlir::OwningOpRef<mlir::ModuleOp> importOnnxFile(mlir::MLIRContext &context,
                                                 const std::string &path,
                                                 const ImportOptions &options,
                                                 std::string &error);

/// As importOnnxFile, from bytes in memory (external data files are looked
/// up relative to `baseDir`).
mlir::OwningOpRef<mlir::ModuleOp>
importOnnxBytes(mlir::MLIRContext &context, const void *data, size_t size,
                const std::string &displayName, const std::string &baseDir,
                const ImportOptions &options, std::string &error);

/// The ONNX op types with a converter, sorted.
std::vector<std::string> supportedOnnxOps();

} // namespace dtc::onnx

#endif // DTC_FRONTENDS_ONNX_ONNXIMPORTER_H
