//===- ElementwiseOps.h - what each elementwise op computes -----*- C++ -*-===//
//
// Internal to the elementwise kernel: each op of plan::ExprOp on one
// element, as a functor per compute class (ElementwiseTypes.h) that the
// loops of ElementwiseLoops.cpp inline, and the op table (name, arity,
// dtype rule, cost) that planning checks expressions against.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CPU_ELEMENTWISEOPS_H
#define DTC_RUNTIME_CPU_ELEMENTWISEOPS_H

#include "runtime/cpu/ElementwiseTypes.h"
#include "runtime/cpu/FastMath.h"

#include "plan.pb.h"

#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>

namespace dtc::runtime::cpu::elementwise {

//===----------------------------------------------------------------------===//
// Vectorisable float maths: no branches and no calls, so the loops over a
// block vectorise (std::exp & co. are opaque calls). Against double
// references on every 61st float, exp, tanh and erf are within 2.5 ulp,
// sigmoid 2.4 and GELU 6 (GeluTanh's results below 1e-18 are within 1e-5
// relative: its float argument to exp rounds); the double class uses std::.
//===----------------------------------------------------------------------===//

/// For what a loop calls per element: a call would keep the loop from
/// vectorising, and inlining is not left to the inliner's cost model.
#define DTC_INLINE [[gnu::always_inline]] inline


DTC_INLINE float fastTanh(float x) {
  float a = std::fabs(x);
  float z = x * x;
  float p = (((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
             1.33314422036e-1f) * z - 3.33332819422e-1f;
  float small = x + x * z * p;
  float large = std::copysign(1.f - 2.f / (fastExp(2.f * a) + 1.f), x);
  return a < 0.625f ? small : large;
}

/// erf is a polynomial below kErfSplit and 1 - erfc above.
constexpr float kErfSplit = 0.9f;
/// Past it, erf is 1 and erfc 0 as floats.
constexpr float kErfcZero = 10.5f;

/// erf(a) for 0 <= a < kErfSplit: a P(a^2), fitted to erf(a)/a.
DTC_INLINE float erfSmall(float a) {
  float z = a * a;
  float p = ((((-6.086067299e-4f * z + 5.011083249e-3f) * z - 2.677827595e-2f) * z +
              1.128212212e-1f) * z - 3.761252133e-1f) * z + 1.128379153f;
  return a * p;
}

/// x^2 as hi + lo, hi exact: the rounding of a plain x * x would cost
/// e^(-x^2) 2 x^2 ulp.
DTC_INLINE void splitSquare(float x, float &hi, float &lo) {
  float xh = bitCast<float>(bitCast<uint32_t>(x) & 0xfffff000u); // 12 bits: xh^2 is exact
  float xl = x - xh;
  hi = xh * xh;
  lo = xl * (x + xh);
}

/// erfc(a) for a >= kErfSplit, given a^2 as sqHi + sqLo: e^(-a^2) R(2 / (2 + a)),
/// R fitted to erfc(a) e^(a^2) on [kErfSplit, kErfcZero].
DTC_INLINE float erfcLarge(float a, float sqHi, float sqLo) {
  float e = expSum(-sqHi, -sqLo);
  a = a > kErfcZero ? kErfcZero : a; // past it e is 0; NaN stays
  float u = 2.f / (2.f + a);
  float r = (((((((7.698511333e-2f * u - 1.735226025e-1f) * u + 1.077147960e-2f) * u +
                1.150406850e-1f) * u + 1.541225710e-1f) * u + 2.539268164e-1f) * u +
              2.808528973e-1f) * u + 2.822099139e-1f) * u - 4.421973306e-6f;
  return e * r;
}

DTC_INLINE float fastErf(float x) {
  float a = std::fabs(x), hi, lo;
  a = a > kErfcZero ? kErfcZero : a; // keeps a^2 finite; NaN stays
  splitSquare(a, hi, lo);
  return std::copysign(a < kErfSplit ? erfSmall(a) : 1.f - erfcLarge(a, hi, lo), x);
}

/// x f for a factor f that vanishes as x goes to -inf: -0 there, not NaN.
template <class T> DTC_INLINE T timesVanishing(T x, T f) { return f == 0 ? T(-0.0) : x * f; }

/// 0.5 x erfc(-x / sqrt 2): the same as 0.5 x (1 + erf(x / sqrt 2)) without
/// losing negative x's small results to 1 + erf(...) ~ 0. (x / sqrt 2)^2 is
/// taken from x, exactly, rather than from the rounded x / sqrt 2.
DTC_INLINE float fastGelu(float x) {
  const float lim = 1.5f * kErfcZero; // > sqrt(2) kErfcZero
  float xc = x > lim ? lim : x < -lim ? -lim : x; // keeps x^2 finite; NaN stays
  float a = std::fabs(xc) * 0.707106781f, hi, lo;
  splitSquare(xc, hi, lo);
  float large = erfcLarge(a, 0.5f * hi, 0.5f * lo);
  float c = a < kErfSplit ? 1.f + std::copysign(erfSmall(a), x) : (x > 0.f ? 2.f - large : large);
  return timesVanishing(x, 0.5f * c);
}

template <class T> DTC_INLINE T vsqrt(T x) {
#if defined(__has_builtin)
#if __has_builtin(__builtin_elementwise_sqrt)
  // std::sqrt may set errno, which keeps clang from vectorising it.
  return __builtin_elementwise_sqrt(x);
#endif
#endif
  return std::sqrt(x);
}

//===----------------------------------------------------------------------===//
// Per-element operations. Integer arithmetic wraps (two's complement) rather
// than being undefined on overflow, and never traps.
//===----------------------------------------------------------------------===//

template <class T> T wrapNeg(T a) { return T(0 - uint64_t(a)); }

struct AddOp {
  template <class T> DTC_INLINE T operator()(T a, T b) const {
    if constexpr (kIsInt<T>)
      return T(uint64_t(a) + uint64_t(b));
    else
      return a + b;
  }
};
struct SubOp {
  template <class T> DTC_INLINE T operator()(T a, T b) const {
    if constexpr (kIsInt<T>)
      return T(uint64_t(a) - uint64_t(b));
    else
      return a - b;
  }
};
struct MulOp {
  template <class T> DTC_INLINE T operator()(T a, T b) const {
    if constexpr (kIsInt<T>)
      return T(uint64_t(a) * uint64_t(b));
    else
      return a * b;
  }
};
struct DivOp {
  template <class T> DTC_INLINE T operator()(T a, T b) const {
    if constexpr (kIsInt<T>) {
      // Truncates toward zero, as onnxruntime; x / 0 is 0 rather than a trap,
      // and INT64_MIN / -1 wraps.
      if (b == 0)
        return 0;
      if constexpr (kIsSigned<T>)
        if (b == T(-1))
          return wrapNeg(a);
      return a / b;
    } else {
      return a / b;
    }
  }
};
struct PowOp {
  template <class T> DTC_INLINE T operator()(T a, T b) const {
    if constexpr (kIsInt<T>) {
      if constexpr (kIsSigned<T>)
        if (b < 0) // 1 / a^-b truncated
          return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
      uint64_t result = 1, base = uint64_t(a);
      for (uint64_t e = uint64_t(b); e; e >>= 1, base *= base)
        if (e & 1)
          result *= base;
      return T(result);
    } else {
      return std::pow(a, b);
    }
  }
};
/// POW with a constant exponent of 2 or 3 (x^2 in hand-written norms, x^3 in
/// GELU's tanh form): a multiply instead of a call.
struct SquareOp {
  template <class T> DTC_INLINE T operator()(T x) const { return MulOp()(x, x); }
};
struct CubeOp {
  template <class T> DTC_INLINE T operator()(T x) const { return MulOp()(MulOp()(x, x), x); }
};
/// Max and Min return NaN when either argument is NaN, as onnxruntime does.
struct MaxOp {
  template <class T> DTC_INLINE T operator()(T a, T b) const {
    return (a > b || isNaN(a)) ? a : b;
  }
};
struct MinOp {
  template <class T> DTC_INLINE T operator()(T a, T b) const {
    return (a < b || isNaN(a)) ? a : b;
  }
};
struct NegOp {
  template <class T> DTC_INLINE T operator()(T x) const {
    if constexpr (kIsInt<T>)
      return wrapNeg(x);
    else
      return -x;
  }
};
struct AbsOp {
  template <class T> DTC_INLINE T operator()(T x) const {
    if constexpr (!kIsSigned<T>)
      return x;
    else if constexpr (kIsInt<T>)
      return x < 0 ? wrapNeg(x) : x;
    else
      return std::fabs(x);
  }
};
struct ReluOp {
  template <class T> DTC_INLINE T operator()(T x) const {
    if constexpr (kIsSigned<T>)
      return x < 0 ? T(0) : x; // NaN stays
    else
      return x;
  }
};
struct ExpOp {
  DTC_INLINE float operator()(float x) const { return fastExp(x); }
  DTC_INLINE double operator()(double x) const { return std::exp(x); }
};
struct LogOp {
  template <class T> DTC_INLINE T operator()(T x) const { return std::log(x); }
};
struct SqrtOp {
  template <class T> DTC_INLINE T operator()(T x) const { return vsqrt(x); }
};
struct ReciprocalOp {
  template <class T> DTC_INLINE T operator()(T x) const { return T(1) / x; }
};
struct TanhOp {
  DTC_INLINE float operator()(float x) const { return fastTanh(x); }
  DTC_INLINE double operator()(double x) const { return std::tanh(x); }
};
struct ErfOp {
  DTC_INLINE float operator()(float x) const { return fastErf(x); }
  DTC_INLINE double operator()(double x) const { return std::erf(x); }
};
/// libm's: rotary tables and positional encodings, not hot loops.
struct SinOp {
  template <class T> DTC_INLINE T operator()(T x) const { return std::sin(x); }
};
struct CosOp {
  template <class T> DTC_INLINE T operator()(T x) const { return std::cos(x); }
};
struct SigmoidOp {
  DTC_INLINE float operator()(float x) const { return 1.f / (1.f + fastExp(-x)); }
  DTC_INLINE double operator()(double x) const { return 1. / (1. + std::exp(-x)); }
};
struct GeluOp {
  DTC_INLINE float operator()(float x) const { return fastGelu(x); }
  DTC_INLINE double operator()(double x) const {
    return timesVanishing(x, 0.5 * std::erfc(-x * 0.7071067811865476));
  }
};
/// 0.5 x (1 + tanh(y)) = x / (1 + e^(-2y)): one exp, and no cancellation
/// for negative x.
struct GeluTanhOp {
  template <class T> DTC_INLINE T operator()(T x) const {
    T y = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
    return timesVanishing(x, T(1) / (T(1) + ExpOp()(T(-2) * y)));
  }
};
struct EqualOp {
  template <class T> DTC_INLINE bool operator()(T a, T b) const { return a == b; }
};
struct LessOp {
  template <class T> DTC_INLINE bool operator()(T a, T b) const { return a < b; }
};
struct LessEqualOp {
  template <class T> DTC_INLINE bool operator()(T a, T b) const { return a <= b; }
};
struct GreaterOp {
  template <class T> DTC_INLINE bool operator()(T a, T b) const { return a > b; }
};
struct GreaterEqualOp {
  template <class T> DTC_INLINE bool operator()(T a, T b) const { return a >= b; }
};
// BOOL values are 0 or 1 in the int64 class.
struct NotOp {
  DTC_INLINE int64_t operator()(int64_t x) const { return x ^ 1; }
};
struct AndOp {
  DTC_INLINE int64_t operator()(int64_t a, int64_t b) const { return a & b; }
};
struct OrOp {
  DTC_INLINE int64_t operator()(int64_t a, int64_t b) const { return a | b; }
};
struct XorOp {
  DTC_INLINE int64_t operator()(int64_t a, int64_t b) const { return a ^ b; }
};
struct NonZeroOp { // CAST to BOOL
  template <class T> DTC_INLINE int64_t operator()(T x) const { return x != 0; }
};
/// CAST between op types: float to int truncates toward zero as C++ does,
/// saturating where C++ leaves it undefined (NaN gives 0; negative floats
/// to U64 wrap through int64).
template <class To> struct CastOp {
  template <class From> DTC_INLINE To operator()(From x) const {
    if constexpr (kIsInt<To> && !kIsInt<From>) {
      const From lim = From(9223372036854775807.0); // 2^63
      To asInt64 = To(x != x ? 0 : x >= lim ? std::numeric_limits<int64_t>::max()
                                   : x <= -lim ? std::numeric_limits<int64_t>::min()
                                               : int64_t(x));
      if constexpr (kIsSigned<To>)
        return asInt64;
      else
        return x < lim ? asInt64 : x < 2 * lim ? To(x) : std::numeric_limits<To>::max();
    } else {
      return To(x);
    }
  }
};

//===----------------------------------------------------------------------===//
// The op table: names for messages, arity and dtype rule, and cost (the
// loop evaluating each op per compute class is chosen in ElementwiseLoops.cpp).
//===----------------------------------------------------------------------===//

enum class Rule : uint8_t {
  Invalid,
  Input,
  Constant,
  Numeric,  // arguments of the node's dtype; any dtype but BOOL
  FloatMath,// arguments of the node's dtype; F32 or F64
  Compare,  // arguments of one dtype; the node is BOOL
  Logic,    // arguments and node BOOL
  Cast,     // any dtype to the node's
  Where,    // BOOL, then two of the node's dtype
};

struct OpInfo {
  const char *name;
  int arity;
  Rule rule;
  int cost; // per element, relative to an add, for the threading grain
};

// Indexed by plan::ExprOp.
inline constexpr OpInfo kOps[] = {
    {"invalid op", 0, Rule::Invalid, 0},
    {"Input", 1, Rule::Input, 0},
    {"Constant", 0, Rule::Constant, 0},
    {"Add", 2, Rule::Numeric, 1},
    {"Sub", 2, Rule::Numeric, 1},
    {"Mul", 2, Rule::Numeric, 1},
    {"Div", 2, Rule::Numeric, 2},
    {"Pow", 2, Rule::Numeric, 20},
    {"Max", 2, Rule::Numeric, 1},
    {"Min", 2, Rule::Numeric, 1},
    {"Neg", 1, Rule::Numeric, 1},
    {"Abs", 1, Rule::Numeric, 1},
    {"Exp", 1, Rule::FloatMath, 6},
    {"Log", 1, Rule::FloatMath, 20},
    {"Sqrt", 1, Rule::FloatMath, 2},
    {"Reciprocal", 1, Rule::FloatMath, 2},
    {"Tanh", 1, Rule::FloatMath, 10},
    {"Erf", 1, Rule::FloatMath, 12},
    {"Relu", 1, Rule::Numeric, 1},
    {"Sigmoid", 1, Rule::FloatMath, 8},
    {"Gelu", 1, Rule::FloatMath, 14},
    {"GeluTanh", 1, Rule::FloatMath, 10},
    {"Clip", 1, Rule::Numeric, 1},
    {"Cast", 1, Rule::Cast, 1},
    {"Where", 3, Rule::Where, 1},
    {"Equal", 2, Rule::Compare, 1},
    {"Less", 2, Rule::Compare, 1},
    {"LessOrEqual", 2, Rule::Compare, 1},
    {"Greater", 2, Rule::Compare, 1},
    {"GreaterOrEqual", 2, Rule::Compare, 1},
    {"Not", 1, Rule::Logic, 1},
    {"And", 2, Rule::Logic, 1},
    {"Or", 2, Rule::Logic, 1},
    {"Xor", 2, Rule::Logic, 1},
    {"Sin", 1, Rule::FloatMath, 20},
    {"Cos", 1, Rule::FloatMath, 20},
};
static_assert(std::size(kOps) == plan::ExprOp_ARRAYSIZE, "an ExprOp without a table entry");

} // namespace dtc::runtime::cpu::elementwise

#endif // DTC_RUNTIME_CPU_ELEMENTWISEOPS_H
