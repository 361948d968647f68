//===- TensorIO.h - tensors in and out of files -----------------*- C++ -*-===//
//
// Tensors come and go as ONNX TensorProto `.pb` files (as the ONNX test
// suites lay them out: input_0.pb, output_0.pb, ...) or NumPy `.npy` files.
// TensorProto decoding is formats/onnx's; .npy is NpyFile.h's.
//
// Also included from here, for the callers that use them with tensor
// files: whole files (Files.h), slices (TensorSlices.h) and parameters
// (ParameterReader.h, SeededParameters.h).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_TENSORIO_H
#define DTC_RUNTIME_TENSORIO_H

#include "runtime/Files.h"
#include "runtime/HostTensor.h"
#include "runtime/ParameterReader.h"
#include "runtime/SeededParameters.h"
#include "runtime/TensorSlices.h"

#include <string>

namespace dtc::runtime {

/// Reads a TensorProto (.pb) or NumPy (.npy, by extension) file.
bool readTensorFile(const std::string &path, HostTensor &tensor, std::string &error);

/// Writes `tensor` as a TensorProto (.pb) or NumPy (.npy, by extension)
/// file, atomically (a temporary file renamed into place).
bool writeTensorFile(const std::string &path, const HostTensor &tensor,
                     std::string &error);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_TENSORIO_H
