//===- DType.h - element types of the plan ----------------------*- C++ -*-===//
//
// Header-only so that every runtime library (the loader, the executor, the
// kernels) and the simulator share one definition without depending on
// each other.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLAN_DTYPE_H
#define DTC_PLAN_DTYPE_H

#include "plan.pb.h"

#include <cstdint>
#include <string>

namespace dtc::plan {

/// Bytes per element of `dtype`, 0 for DTYPE_INVALID or unknown values.
inline int64_t dtypeBytes(plan::DType dtype) {
  switch (dtype) {
  case plan::F64: case plan::I64: case plan::U64: return 8;
  case plan::F32: case plan::I32: case plan::U32: return 4;
  case plan::F16: case plan::BF16: case plan::I16: case plan::U16: return 2;
  case plan::I8: case plan::U8: case plan::BOOL: return 1;
  default: return 0;
  }
}

/// Element count of `type`, or -1 when a dim is negative or the count
/// overflows.
inline int64_t elementCount(const plan::TensorType &type) {
  constexpr int64_t limit = int64_t(1) << 48;
  int64_t count = 1;
  for (int64_t d : type.shape()) {
    if (d < 0 || (d != 0 && count > limit / d))
      return -1;
    count *= d;
  }
  return count;
}

/// Bytes of a `type` tensor, or -1 when its element count is invalid or
/// its dtype unknown.
inline int64_t byteSize(const plan::TensorType &type) {
  int64_t count = elementCount(type), bytes = dtypeBytes(type.dtype());
  return count < 0 || bytes == 0 ? -1 : count * bytes;
}

/// "f32", "i64", ... for messages.
inline const char *dtypeName(plan::DType dtype) {
  switch (dtype) {
  case plan::F32: return "f32";
  case plan::F64: return "f64";
  case plan::F16: return "f16";
  case plan::BF16: return "bf16";
  case plan::I64: return "i64";
  case plan::I32: return "i32";
  case plan::I16: return "i16";
  case plan::I8: return "i8";
  case plan::U8: return "u8";
  case plan::U16: return "u16";
  case plan::U32: return "u32";
  case plan::U64: return "u64";
  case plan::BOOL: return "bool";
  default: return "invalid";
  }
}

/// "f32[2,3]" for messages.
inline std::string typeToString(const TensorType &type) {
  std::string s = std::string(dtypeName(type.dtype())) + "[";
  for (int i = 0; i < type.shape_size(); ++i)
    s += (i ? "," : "") + std::to_string(type.shape(i));
  return s + "]";
}

} // namespace dtc::plan

#endif // DTC_PLAN_DTYPE_H
