//===- TensorData.h - ONNX tensors and types as MLIR ones -------*- C++ -*-===//
//
// The MLIR side of ONNX tensors: element types and dense attributes. The
// TensorProto itself is decoded and its external data checked by the
// shared format library (formats/onnx), as the runtime does.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_FRONTENDS_ONNX_TENSORDATA_H
#define DTC_FRONTENDS_ONNX_TENSORDATA_H

#include "formats/onnx/ExternalData.h"
#include "formats/onnx/TensorProto.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Support/LogicalResult.h"

#include <optional>
#include <string>

namespace dtc::onnx {

/// The MLIR element type of an ONNX TensorProto data type, or null for
/// types dtc does not handle (strings, complex, 4/8-bit floats).
mlir::Type elementTypeOf(mlir::MLIRContext &context, int32_t dataType);

/// "FLOAT", "INT64", ... for messages.
using formats::onnx::dataTypeName;

/// The tensor's static type; fails with `error` on bad dims or types.
mlir::FailureOr<mlir::RankedTensorType>
tensorTypeOf(mlir::MLIRContext &context, const ::onnx::TensorProto &tensor,
             std::string &error);

/// Checks that the tensor's stored bytes (inline or in an external file
/// under `baseDir`) match its shape and type, without reading them. For
/// external data, `external` (when given) gets where the bytes are.
mlir::LogicalResult
checkTensorData(const ::onnx::TensorProto &tensor, const std::string &baseDir,
                std::string &error,
                std::optional<formats::onnx::ExternalData> *external = nullptr);

/// The tensor's values as a dense attribute (reads external data).
mlir::FailureOr<mlir::DenseElementsAttr>
readTensor(mlir::MLIRContext &context, const ::onnx::TensorProto &tensor,
           const std::string &baseDir, std::string &error);

} // namespace dtc::onnx

#endif // DTC_FRONTENDS_ONNX_TENSORDATA_H
