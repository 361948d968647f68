//===- ElementwiseTypes.h - the classes elementwise values compute in -*- C++ -*-===//
//
// Internal to the elementwise kernel. Values are computed in three classes:
// float (F32, and the 16-bit floats), double (F64) and int64 (every integer
// type and BOOL, widened on load, narrowed on store). Here: which class a
// dtype computes in, and the C++ types that store and compute each dtype.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CPU_ELEMENTWISETYPES_H
#define DTC_RUNTIME_CPU_ELEMENTWISETYPES_H

#include "plan/DType.h"
#include "runtime/cpu/BFloat16.h"
#include "runtime/cpu/KernelSupport.h"

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

namespace dtc::runtime::cpu::elementwise {

enum class Compute : uint8_t { F32, F64, I64 };

inline bool isSupported(plan::DType dtype) { return elementBytes(dtype) != 0; }

/// Why `dtype` cannot be computed here, for messages.
inline std::string unsupported(plan::DType dtype) {
  if (elementBytes(dtype) == 0)
    return std::to_string(int(dtype)) + " is not a valid dtype";
  return std::string(dtypeName(dtype)) + " is not supported by the CPU backend";
}

/// 16-bit floats are stored as such and computed in float, each node's
/// result rounded to 16 bits (see narrowFnFor).
inline bool isHalf(plan::DType dtype) { return dtype == plan::F16 || dtype == plan::BF16; }

inline bool isFloat(plan::DType dtype) {
  return dtype == plan::F32 || dtype == plan::F64 || isHalf(dtype);
}

inline Compute computeOf(plan::DType dtype) {
  return dtype == plan::F32 || isHalf(dtype) ? Compute::F32
         : dtype == plan::F64                ? Compute::F64
                                             : Compute::I64;
}

/// Calls f(T()) with T the C++ type that stores `dtype` (bool for BOOL, one
/// byte). `dtype` must be supported.
template <class F> decltype(auto) visitStorage(plan::DType dtype, F &&f) {
  switch (dtype) {
  case plan::F64: return f(double());
  case plan::I64: return f(int64_t());
  case plan::I32: return f(int32_t());
  case plan::I16: return f(int16_t());
  case plan::I8: return f(int8_t());
  case plan::U8: return f(uint8_t());
  case plan::U16: return f(uint16_t());
  case plan::U32: return f(uint32_t());
  case plan::U64: return f(uint64_t());
  case plan::BOOL: return f(bool());
  case plan::F16: return f(_Float16());
  case plan::BF16: return f(BFloat16());
  case plan::F32:
  default: return f(float());
  }
}

/// The compute class of storage type S.
template <class S>
constexpr bool kIsHalfStorage = std::is_same_v<S, _Float16> || std::is_same_v<S, BFloat16>;
template <class S>
using ComputeOf =
    std::conditional_t<kIsHalfStorage<S>, float,
                       std::conditional_t<std::is_floating_point_v<S>, S, int64_t>>;

/// Calls f(T()) with T the type ops on `dtype` compute in: its compute
/// class, but uint64_t for U64, so that values past 2^63 compare, divide and
/// convert as unsigned (the bits are the same int64 slot).
template <class F> decltype(auto) visitOpType(plan::DType dtype, F &&f) {
  switch (dtype) {
  case plan::F32: case plan::F16: case plan::BF16: return f(float());
  case plan::F64: return f(double());
  case plan::U64: return f(uint64_t());
  default: return f(int64_t());
  }
}

template <class T> constexpr bool kIsInt = std::is_integral_v<T>;
template <class T> constexpr bool kIsSigned = std::is_signed_v<T>;

template <class T> bool isNaN(T v) {
  if constexpr (kIsInt<T>)
    return false;
  else
    return v != v;
}

/// `v` as an int64, saturating (NaN is 0) where C++ leaves it undefined.
inline int64_t saturateToInt64(double v) {
  if (!(v == v))
    return 0;
  if (v >= 9223372036854775807.0)
    return std::numeric_limits<int64_t>::max();
  if (v <= -9223372036854775808.0)
    return std::numeric_limits<int64_t>::min();
  return int64_t(v);
}

} // namespace dtc::runtime::cpu::elementwise

#endif // DTC_RUNTIME_CPU_ELEMENTWISETYPES_H
