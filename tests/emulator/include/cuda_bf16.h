//===- cuda_bf16.h - the emulator's bfloat16 (CudaOnHost.h) ----*- C++ -*-===//
//
// What a kernel compiled for the host (tests/emulator) finds for CUDA's
// <cuda_bf16.h>: the 16-bit type and its conversions, rounding to nearest
// even as __float2bfloat16_rn does.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_TESTS_EMULATOR_CUDA_BF16_H
#define DTC_TESTS_EMULATOR_CUDA_BF16_H

#include "tests/emulator/CudaOnHost.h"

struct __nv_bfloat16 {
  unsigned short __x;
};

inline float __bfloat162float(__nv_bfloat16 h) {
  uint32_t bits = uint32_t(h.__x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if (std::isnan(f))
    return {static_cast<unsigned short>((bits >> 16) | 0x40u)}; // stays a NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return {static_cast<unsigned short>(bits >> 16)};
}

#endif // DTC_TESTS_EMULATOR_CUDA_BF16_H
