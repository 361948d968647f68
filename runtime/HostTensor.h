//===- HostTensor.h - a tensor in host memory, its element types -*- C++ -*-===//
//
// A dense tensor as the tensor files hold it, and the element types it may
// have with their names in each file format (ONNX data type, NumPy descr).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_HOSTTENSOR_H
#define DTC_RUNTIME_HOSTTENSOR_H

#include "formats/onnx/TensorProto.h"

#include "plan.pb.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtc::runtime {

/// A dense row-major tensor owned by the host.
struct HostTensor {
  std::string name;             // from the file (TensorProto.name), may be empty
  plan::TensorType type;
  std::vector<char> bytes;      // little-endian elements
};

/// An element type a host tensor may have.
struct ElementType {
  int32_t onnxType; // ::onnx::TensorProto::DataType
  plan::DType dtype;
  int64_t bytes;
  const char *npyDescr; // nullptr: NumPy has no such dtype
};

/// The element type of an ONNX data type, a plan dtype or a NumPy descr
/// ('<f4', '|u1', ...; one-byte types in any byte order); nullptr when the
/// runtime does not hold it.
const ElementType *elementTypeOfOnnx(int32_t onnxType);

/// A TensorProto's element type when the runtime holds it, its dims checked
/// and described into `info`; nullptr with `error` (starting with `label`)
/// otherwise.
const ElementType *onnxElementType(const ::onnx::TensorProto &tensor, const std::string &label,
                                   formats::onnx::TensorInfo &info, std::string &error);
const ElementType *elementTypeOf(plan::DType dtype);
const ElementType *elementTypeOfNpy(std::string_view descr);

/// The element count of `dims`, or -1 with `error` (starting with `label`)
/// when a dim is negative or the count overflows.
int64_t countElements(const std::vector<int64_t> &dims, const std::string &label,
                      std::string &error);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_HOSTTENSOR_H
