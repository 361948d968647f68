//===- FastMath.h - float maths that vectorises ------------------*- C++ -*-===//
//
// Branch-free, call-free versions of float functions, so that the loops of
// the elementwise, softmax and normalisation kernels that use them
// vectorise (always inlined into each ISA-specific copy of those loops).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CPU_FASTMATH_H
#define DTC_RUNTIME_CPU_FASTMATH_H

#include <cstdint>
#include <cstring>

namespace dtc::runtime::cpu {

template <class To, class From> [[gnu::always_inline]] inline To bitCast(From v) {
  static_assert(sizeof(To) == sizeof(From));
  To r;
  std::memcpy(&r, &v, sizeof r);
  return r;
}

/// e^(hi + lo) where lo is a small correction to hi, the low part of an
/// argument that does not fit one float.
[[gnu::always_inline]] inline float expSum(float hi, float lo) {
  hi = hi > 100.f ? 100.f : hi; // comparisons with NaN are false: NaN stays
  hi = hi < -110.f ? -110.f : hi;
  const float round = 12582912.f; // 1.5 * 2^23: adding it rounds to an integer
  float k = hi * 1.44269504f + round;
  int32_t n = int32_t(bitCast<uint32_t>(k) - bitCast<uint32_t>(round));
  k -= round;
  float r = hi - k * 0.693359375f; // ln 2 in two parts (Cody and Waite)
  r = r - k * -2.12194440e-4f;
  r += lo;
  float p = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r +
              4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.f;
  // 2^n as two factors, so that results past the largest float become inf
  // and those in the subnormals round once.
  int32_t n1 = n >> 1, n2 = n - n1;
  float s1 = bitCast<float>(uint32_t(n1 + 127) << 23);
  float s2 = bitCast<float>(uint32_t(n2 + 127) << 23);
  return p * s1 * s2;
}

/// e^x: Cody-Waite range reduction and a degree-5 polynomial (Cephes'
/// expf), within 2 ulp; inf past the float range, 0 far below it, NaN stays.
[[gnu::always_inline]] inline float fastExp(float x) { return expSum(x, 0.f); }

/// e^x, but 0 where it would be subnormal (x < -87): computing a subnormal
/// costs a microcode assist of ~100 cycles per element on x86, which made
/// softmax over causally masked scores (-1e9 entries) many times slower. For
/// softmax, whose results are sums' shares, a share below 1e-38 is 0.
[[gnu::always_inline]] inline float fastExpFlushed(float x) {
  bool tiny = x < -87.f;
  float e = fastExp(tiny ? -87.f : x);
  return tiny ? 0.f : e;
}

} // namespace dtc::runtime::cpu

#endif // DTC_RUNTIME_CPU_FASTMATH_H
