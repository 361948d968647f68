//===- BFloat16.h - bfloat16 storage ---------------------------*- C++ -*-===//
//
// The top 16 bits of an IEEE float. Written out rather than the compiler's
// __bf16, whose conversions call a runtime function (__truncsfbf2) that
// Debian 12's libgcc lacks; these are a few integer ops that vectorise.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CPU_BFLOAT16_H
#define DTC_RUNTIME_CPU_BFLOAT16_H

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace dtc::runtime::cpu {

struct BFloat16 {
  uint16_t bits;

  BFloat16() = default;
  /// Rounds to nearest, ties to even; every NaN becomes the quiet NaN
  /// 0x7fc0 (as onnxruntime and the ONNX reference do).
  explicit BFloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
      bits = 0x7fc0;
    else
      bits = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  explicit operator float() const {
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
};

/// `count` floats rounded into `to` (bf16 storage).
inline void storeBf16(const float *from, size_t count, void *to) {
  auto *out = static_cast<BFloat16 *>(to);
  for (size_t i = 0; i < count; ++i)
    out[i] = BFloat16(from[i]);
}

} // namespace dtc::runtime::cpu

#endif // DTC_RUNTIME_CPU_BFLOAT16_H
