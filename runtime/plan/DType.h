//===- DType.h - element types of the plan ----------------------*- C++ -*-===//
//
// Header-only so that every runtime library (the loader, the executor, the
// kernels) shares one definition without depending on each other.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_PLAN_DTYPE_H
#define DTC_RUNTIME_PLAN_DTYPE_H

#include "plan.pb.h"

#include <cstdint>

namespace dtc::runtime {

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

} // namespace dtc::runtime

#endif // DTC_RUNTIME_PLAN_DTYPE_H
