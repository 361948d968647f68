//===- ElementwiseKernel.cpp - fused elementwise expressions --------------===//
//
// The expression is evaluated a block of output elements at a time: each
// node over the whole block into per-thread scratch, so that every node is
// one tight loop the compiler vectorises and the block's values stay in
// cache. Values are computed in three classes: float (F32), double (F64) and
// int64 (every integer type and BOOL, widened on load, narrowed on store).
//
// Adjacent output dims that every input broadcasts alike are merged when the
// kernel is made, so that a block reads an input in place (same shape as the
// output and of the compute type), from a tile made once per thread (one row
// repeated, as a bias), as copies or splats along the inner dim, or not at
// all (one element, splat once per thread). Nodes of such uniform values
// alone are evaluated once per thread too.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/BFloat16.h"
#include "runtime/cpu/ElementwiseKernel.h"
#include "runtime/cpu/FastMath.h"
#include "plan/DType.h"

#include "runtime/cpu/KernelSupport.h"
#include "runtime/cpu/ThreadPool.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>

namespace dtc::runtime::cpu {
namespace {

/// Output elements per block: the scratch of a dozen live nodes (8 bytes
/// each) stays within L2, and per-block overhead is small against it.
constexpr int64_t kBlock = 1024;

//===----------------------------------------------------------------------===//
// Element types
//===----------------------------------------------------------------------===//

enum class Compute : uint8_t { F32, F64, I64 };


bool isSupported(plan::DType dtype) { return elementBytes(dtype) != 0; }

/// Why `dtype` cannot be computed here, for messages.
std::string unsupported(plan::DType dtype) {
  if (elementBytes(dtype) == 0)
    return std::to_string(int(dtype)) + " is not a valid dtype";
  return std::string(dtypeName(dtype)) + " is not supported by the CPU backend";
}

/// 16-bit floats are stored as such and computed in float, each node's
/// result rounded to 16 bits (see narrowFnFor).
bool isHalf(plan::DType dtype) { return dtype == plan::F16 || dtype == plan::BF16; }

bool isFloat(plan::DType dtype) {
  return dtype == plan::F32 || dtype == plan::F64 || isHalf(dtype);
}

Compute computeOf(plan::DType dtype) {
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
// Node evaluation over a block
//===----------------------------------------------------------------------===//

struct Step;
/// Evaluates one node over `n` elements: `args` are its arguments' blocks.
using StepFn = void (*)(const Step &step, const void *const *args, void *out, int64_t n);
/// Brings int64 values into a narrower integer dtype's range (wraps).
using NarrowFn = void (*)(void *values, int64_t n);
/// Reads `n` elements of an input from element `offset` (or element
/// `offset` n times, when `splat`) into a block of its compute type.
using LoadFn = void (*)(const void *src, int64_t offset, bool splat, void *dst, int64_t n);
/// Writes `n` values of the last node to the output from element `offset`.
using StoreFn = void (*)(const void *src, void *dst, int64_t offset, int64_t n);

enum class StepKind : uint8_t {
  InputInPlace, // same shape as the output and of the compute type: no copy
  InputRepeated, // one row repeated (a bias): tiled once per thread, no copy
  InputLoad,
  Compute,
};

struct Step {
  StepKind kind = StepKind::Compute;
  int node = 0;
  int args[3] = {0, 0, 0};
  int slot = -1; // scratch block holding the result
  StepFn fn = nullptr;
  NarrowFn narrow = nullptr;
  // CONSTANT's value, CLIP's bounds, in the node's compute class.
  double param[2] = {0, 0};
  int64_t intParam[2] = {0, 0};
  // INPUT
  int input = 0;
  LoadFn load = nullptr;
};

template <class T> T paramOf(const Step &step, int k) {
  if constexpr (kIsInt<T>)
    return step.intParam[k];
  else
    return T(step.param[k]);
}

// Each loop is a Loop::run, compiled three times through the wrappers
// below: for the baseline the build targets (SSE2 on x86-64), for AVX2 with
// FMA and for AVX-512 (4, 8 and 16 floats a step), the widest the CPU has
// chosen when the kernel is made. The transcendental ops gain most.

template <class In, class Out, class F> struct Unary {
  DTC_INLINE static void run(const Step &, const void *const *args, void *out, int64_t n) {
    const In *__restrict x = static_cast<const In *>(args[0]);
    Out *__restrict y = static_cast<Out *>(out);
    F f;
    for (int64_t i = 0; i < n; ++i)
      y[i] = Out(f(x[i]));
  }
};

template <class In, class Out, class F> struct Binary {
  DTC_INLINE static void run(const Step &, const void *const *args, void *out, int64_t n) {
    const In *__restrict a = static_cast<const In *>(args[0]);
    const In *__restrict b = static_cast<const In *>(args[1]);
    Out *__restrict y = static_cast<Out *>(out);
    F f;
    for (int64_t i = 0; i < n; ++i)
      y[i] = Out(f(a[i], b[i]));
  }
};

template <class T> struct Where {
  DTC_INLINE static void run(const Step &, const void *const *args, void *out, int64_t n) {
    const int64_t *__restrict c = static_cast<const int64_t *>(args[0]);
    const T *__restrict a = static_cast<const T *>(args[1]);
    const T *__restrict b = static_cast<const T *>(args[2]);
    T *__restrict y = static_cast<T *>(out);
    for (int64_t i = 0; i < n; ++i)
      y[i] = c[i] ? a[i] : b[i];
  }
};

template <class T> struct Clip {
  DTC_INLINE static void run(const Step &step, const void *const *args, void *out, int64_t n) {
    const T *__restrict x = static_cast<const T *>(args[0]);
    T *__restrict y = static_cast<T *>(out);
    const T lo = paramOf<T>(step, 0), hi = paramOf<T>(step, 1);
    for (int64_t i = 0; i < n; ++i) {
      T v = x[i] < lo ? lo : x[i]; // NaN stays
      y[i] = v > hi ? hi : v;
    }
  }
};

template <class T> struct Constant {
  DTC_INLINE static void run(const Step &step, const void *const *, void *out, int64_t n) {
    std::fill_n(static_cast<T *>(out), n, paramOf<T>(step, 0));
  }
};

template <class Loop>
void baselineLoop(const Step &step, const void *const *args, void *out, int64_t n) {
  Loop::run(step, args, out, n);
}

#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
#define DTC_X86_LOOPS 1
template <class Loop>
__attribute__((target("avx2,fma"))) void avx2Loop(const Step &step, const void *const *args,
                                                   void *out, int64_t n) {
  Loop::run(step, args, out, n);
}

template <class Loop>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"))) void
avx512Loop(const Step &step, const void *const *args, void *out, int64_t n) {
  Loop::run(step, args, out, n);
}

VectorIsa cpuIsa() {
  static const VectorIsa isa = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
      return VectorIsa::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      return VectorIsa::Avx2;
    return VectorIsa::Baseline;
  }();
  return isa;
}
#endif

std::atomic<VectorIsa> isaLimit{VectorIsa::Avx512};

/// The compiled Loop for this CPU (within isaLimit).
template <class Loop> StepFn loopFn() {
#ifdef DTC_X86_LOOPS
  switch (std::min(cpuIsa(), isaLimit.load())) {
  case VectorIsa::Avx512: return avx512Loop<Loop>;
  case VectorIsa::Avx2: return avx2Loop<Loop>;
  default: break;
  }
#endif
  return baselineLoop<Loop>;
}

template <class S> void roundLoop(void *values, int64_t n) {
  float *v = static_cast<float *>(values);
  for (int64_t i = 0; i < n; ++i)
    v[i] = float(S(v[i]));
}

template <class S> void narrowLoop(void *values, int64_t n) {
  int64_t *v = static_cast<int64_t *>(values);
  for (int64_t i = 0; i < n; ++i)
    v[i] = int64_t(S(v[i]));
}

template <class S, class C>
void loadLoop(const void *src, int64_t offset, bool splat, void *dst, int64_t n) {
  // BOOL bytes are read as bytes: any nonzero byte is true.
  using Raw = std::conditional_t<std::is_same_v<S, bool>, uint8_t, S>;
  auto convert = [](Raw v) {
    if constexpr (std::is_same_v<S, bool>)
      return C(v != 0);
    else
      return C(v);
  };
  const Raw *__restrict in = static_cast<const Raw *>(src) + offset;
  C *__restrict out = static_cast<C *>(dst);
  if (splat) {
    std::fill_n(out, n, convert(*in));
  } else {
    for (int64_t i = 0; i < n; ++i)
      out[i] = convert(in[i]);
  }
}

template <class C, class S> void storeLoop(const void *src, void *dst, int64_t offset, int64_t n) {
  const C *__restrict in = static_cast<const C *>(src);
  if constexpr (std::is_same_v<S, bool>) {
    uint8_t *__restrict out = static_cast<uint8_t *>(dst) + offset;
    for (int64_t i = 0; i < n; ++i)
      out[i] = in[i] != 0;
  } else {
    S *__restrict out = static_cast<S *>(dst) + offset;
    for (int64_t i = 0; i < n; ++i)
      out[i] = S(in[i]);
  }
}

//===----------------------------------------------------------------------===//
// The op table: names for messages, arity and dtype rule, and the loop
// evaluating each op per compute class.
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
constexpr OpInfo kOps[] = {
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
};
static_assert(std::size(kOps) == plan::ExprOp_ARRAYSIZE, "an ExprOp without a table entry");

/// The loop for `op` on compute class T (the node's; its arguments' for
/// comparisons); null for an op the class does not have.
template <class T> StepFn opLoopFor(plan::ExprOp op) {
  switch (op) {
  case plan::CONSTANT: return loopFn<Constant<T>>();
  case plan::ADD: return loopFn<Binary<T, T, AddOp>>();
  case plan::SUB: return loopFn<Binary<T, T, SubOp>>();
  case plan::MUL: return loopFn<Binary<T, T, MulOp>>();
  case plan::DIV: return loopFn<Binary<T, T, DivOp>>();
  case plan::POW: return loopFn<Binary<T, T, PowOp>>();
  case plan::MAX: return loopFn<Binary<T, T, MaxOp>>();
  case plan::MIN: return loopFn<Binary<T, T, MinOp>>();
  case plan::NEG: return loopFn<Unary<T, T, NegOp>>();
  case plan::ABS: return loopFn<Unary<T, T, AbsOp>>();
  case plan::RELU: return loopFn<Unary<T, T, ReluOp>>();
  case plan::CLIP: return loopFn<Clip<T>>();
  case plan::WHERE: return loopFn<Where<T>>();
  case plan::EQUAL: return loopFn<Binary<T, int64_t, EqualOp>>();
  case plan::LESS: return loopFn<Binary<T, int64_t, LessOp>>();
  case plan::LESS_EQUAL: return loopFn<Binary<T, int64_t, LessEqualOp>>();
  case plan::GREATER: return loopFn<Binary<T, int64_t, GreaterOp>>();
  case plan::GREATER_EQUAL: return loopFn<Binary<T, int64_t, GreaterEqualOp>>();
  default: break;
  }
  if constexpr (std::is_same_v<T, int64_t>) { // BOOL
    switch (op) {
    case plan::NOT: return loopFn<Unary<T, T, NotOp>>();
    case plan::AND: return loopFn<Binary<T, T, AndOp>>();
    case plan::OR: return loopFn<Binary<T, T, OrOp>>();
    case plan::XOR: return loopFn<Binary<T, T, XorOp>>();
    default: return nullptr;
    }
  } else if constexpr (!kIsInt<T>) {
    switch (op) {
    case plan::EXP: return loopFn<Unary<T, T, ExpOp>>();
    case plan::LOG: return loopFn<Unary<T, T, LogOp>>();
    case plan::SQRT: return loopFn<Unary<T, T, SqrtOp>>();
    case plan::RECIPROCAL: return loopFn<Unary<T, T, ReciprocalOp>>();
    case plan::TANH: return loopFn<Unary<T, T, TanhOp>>();
    case plan::ERF: return loopFn<Unary<T, T, ErfOp>>();
    case plan::SIGMOID: return loopFn<Unary<T, T, SigmoidOp>>();
    case plan::GELU: return loopFn<Unary<T, T, GeluOp>>();
    case plan::GELU_TANH: return loopFn<Unary<T, T, GeluTanhOp>>();
    default: return nullptr;
    }
  }
  return nullptr;
}

StepFn castFnFor(plan::DType from, plan::DType to) {
  return visitOpType(from, [&](auto f) -> StepFn {
    using From = decltype(f);
    if (to == plan::BOOL)
      return loopFn<Unary<From, int64_t, NonZeroOp>>();
    return visitOpType(to, [](auto t) -> StepFn {
      using To = decltype(t);
      return loopFn<Unary<From, To, CastOp<To>>>();
    });
  });
}

/// The wrap into `dtype` after an op whose int64 result may leave its range;
/// for 16-bit floats, the rounding of every node's float result.
NarrowFn narrowFnFor(plan::ExprOp op, plan::DType dtype) {
  if (dtype == plan::F16)
    return roundLoop<_Float16>;
  if (dtype == plan::BF16)
    return roundLoop<BFloat16>;
  switch (op) {
  case plan::ADD: case plan::SUB: case plan::MUL: case plan::DIV: case plan::POW:
  case plan::NEG: case plan::ABS: case plan::CAST:
    break;
  default:
    return nullptr; // results within the arguments' range, or BOOL
  }
  switch (dtype) {
  case plan::I32: return narrowLoop<int32_t>;
  case plan::I16: return narrowLoop<int16_t>;
  case plan::I8: return narrowLoop<int8_t>;
  case plan::U8: return narrowLoop<uint8_t>;
  case plan::U16: return narrowLoop<uint16_t>;
  case plan::U32: return narrowLoop<uint32_t>;
  default: return nullptr; // I64, and U64 kept as its bits
  }
}

//===----------------------------------------------------------------------===//
// The kernel
//===----------------------------------------------------------------------===//

/// How a block reads one instruction input.
struct InputAccess {
  plan::DType dtype;
  int64_t bytes;       // per element
  Compute compute;
  bool full = false;   // same shape as the output: element i is output element i
  std::vector<int64_t> strides; // per merged output dim; 0 where it broadcasts
};

/// Bytes per element of the input once loaded.
int64_t computeBytes(const InputAccess &in) { return in.compute == Compute::F32 ? 4 : 8; }

class ElementwiseKernel final : public Kernel {
public:
  bool run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
           std::string &error) override;

  // Filled by makeElementwiseKernel.
  std::vector<int64_t> dims_;        // merged output dims, inner last; at least one
  int64_t total_ = 0;
  int64_t outputBytes_ = 0;
  std::vector<InputAccess> inputs_;
  std::vector<Step> uniformSteps_;   // the same for every block: once per thread
  std::vector<Step> blockSteps_;
  int nodes_ = 0;
  int last_ = 0;                     // the output node
  int slots_ = 0;
  bool storeInPlace_ = false;        // the last node's loop may write the output
  StoreFn store_ = nullptr;
  int64_t grain_ = 1;

private:
  void runBlocks(const void *const *inputs, char *output, bool inPlace, int64_t begin,
                 int64_t end) const;
  void loadStrided(const Step &step, const void *src, int64_t start, int64_t n,
                   char *dst) const;
};

void ElementwiseKernel::loadStrided(const Step &step, const void *src, int64_t start,
                                    int64_t n, char *dst) const {
  const InputAccess &in = inputs_[step.input];
  const int64_t inner = dims_.back(), innerStride = in.strides.back();
  const int64_t dstBytes = computeBytes(in);
  const size_t outer = dims_.size() - 1;
  // The rows over the outer dims by an odometer (a division per dim and
  // row cost more than loading a short row).
  thread_local Odometer rows;
  rows.start(dims_.data(), in.strides.data(), outer, start / inner);
  for (int64_t done = 0, col = start % inner; done < n; col = 0, rows.next()) {
    int64_t count = std::min(inner - col, n - done);
    step.load(src, rows.offset() + col * innerStride, innerStride == 0, dst + done * dstBytes,
              count);
    done += count;
  }
}

void ElementwiseKernel::runBlocks(const void *const *inputs, char *output, bool inPlace,
                                  int64_t begin, int64_t end) const {
  // Scratch lives as long as the thread, so blocks allocate nothing. Each
  // slot holds a block of 8-byte values (or of floats).
  thread_local std::unique_ptr<char[]> scratch;
  thread_local int64_t scratchBytes = 0;
  thread_local std::vector<const void *> values;
  const int64_t slotBytes = kBlock * 8;
  if (scratchBytes < slots_ * slotBytes) {
    scratch.reset(new char[size_t(slots_ * slotBytes)]);
    scratchBytes = slots_ * slotBytes;
  }
  values.resize(size_t(nodes_));
  char *base = scratch.get();
  auto slot = [&](const Step &s) { return base + s.slot * slotBytes; };

  auto evaluate = [&](const Step &s, int64_t n, void *out) {
    const void *args[3] = {values[s.args[0]], values[s.args[1]], values[s.args[2]]};
    s.fn(s, args, out, n);
    if (s.narrow)
      s.narrow(out, n);
    values[s.node] = out;
  };
  // Values for every block, as long as the longest block.
  const int64_t longest = std::min(kBlock, total_);
  for (const Step &s : uniformSteps_) {
    if (s.kind == StepKind::Compute) {
      evaluate(s, longest, slot(s));
    } else {
      s.load(inputs[s.input], 0, true, slot(s), longest);
      values[s.node] = slot(s);
    }
  }
  const int64_t inner = dims_.back();
  for (const Step &s : blockSteps_)
    if (s.kind == StepKind::InputRepeated)
      for (int64_t at = 0; at < longest + inner; at += inner)
        s.load(inputs[s.input], 0, false, slot(s) + at * computeBytes(inputs_[s.input]),
               std::min(inner, longest + inner - at));
  for (int64_t block = begin; block < end; ++block) {
    const int64_t start = block * kBlock, n = std::min(kBlock, total_ - start);
    for (const Step &s : blockSteps_) {
      switch (s.kind) {
      case StepKind::InputInPlace:
        values[s.node] = static_cast<const char *>(inputs[s.input]) +
                         start * inputs_[s.input].bytes;
        break;
      case StepKind::InputRepeated:
        values[s.node] = slot(s) + start % inner * computeBytes(inputs_[s.input]);
        break;
      case StepKind::InputLoad:
        if (inputs_[s.input].full)
          s.load(inputs[s.input], start, false, slot(s), n);
        else
          loadStrided(s, inputs[s.input], start, n, slot(s));
        values[s.node] = slot(s);
        break;
      case StepKind::Compute:
        evaluate(s, n,
                 inPlace && s.node == last_ ? output + start * outputBytes_ : slot(s));
        break;
      }
    }
    if (!inPlace)
      store_(values[last_], output, start, n);
  }
}

bool ElementwiseKernel::run(const void *const *inputs, void *const *outputs, ThreadPool &pool,
                            std::string &error) {
  if (total_ == 0)
    return true;
  char *output = static_cast<char *>(outputs[0]);
  // Buffer assignment may give the output an input's bytes. A block reads
  // its inputs before it stores, so an input whose element i is output
  // element i is safe, though not for the loops' restrict pointers (no
  // writing in place); any other overlap would read elements already
  // overwritten, and the result goes through a temporary.
  bool inPlace = storeInPlace_, viaTemporary = false;
  const auto outBegin = reinterpret_cast<uintptr_t>(output);
  const auto outEnd = outBegin + uintptr_t(total_ * outputBytes_);
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const InputAccess &in = inputs_[i];
    int64_t count = 1;
    for (size_t d = 0; d < dims_.size(); ++d)
      if (in.strides[d] != 0)
        count *= dims_[d];
    const auto begin = reinterpret_cast<uintptr_t>(inputs[i]);
    if (begin >= outEnd || outBegin >= begin + uintptr_t(count * in.bytes))
      continue;
    inPlace = false;
    if (!in.full || begin != outBegin || in.bytes != outputBytes_)
      viaTemporary = true;
  }
  std::vector<char> temporary;
  char *target = output;
  if (viaTemporary) {
    temporary.resize(size_t(total_ * outputBytes_));
    target = temporary.data();
    inPlace = storeInPlace_;
  }
  const int64_t blocks = (total_ + kBlock - 1) / kBlock;
  pool.parallelFor(blocks, grain_, [&](int64_t begin, int64_t end) {
    runBlocks(inputs, target, inPlace, begin, end);
  });
  if (viaTemporary)
    std::memcpy(output, temporary.data(), temporary.size());
  return true;
}

//===----------------------------------------------------------------------===//
// Preparation
//===----------------------------------------------------------------------===//

/// Checks `expr` against the buffer types; the message names the node.
bool checkNodes(const plan::Elementwise &expr, const std::vector<plan::TensorType> &inputTypes,
                const plan::TensorType &outputType, std::string &error) {
  auto nodeName = [&](int i) {
    int op = expr.nodes(i).op();
    return "elementwise node " + std::to_string(i) + " (" +
           (op > 0 && op < plan::ExprOp_ARRAYSIZE ? kOps[op].name : "op " + std::to_string(op)) +
           ")";
  };
  auto bad = [&](int i, const std::string &what) {
    error = nodeName(i) + ": " + what;
    return false;
  };
  if (expr.nodes_size() == 0) {
    error = "elementwise: the expression has no nodes";
    return false;
  }
  for (int i = 0; i < expr.nodes_size(); ++i) {
    const plan::ExprNode &node = expr.nodes(i);
    const int op = node.op();
    if (op <= 0 || op >= plan::ExprOp_ARRAYSIZE)
      return bad(i, "unknown op (was the plan written by a newer dtc?)");
    const OpInfo &info = kOps[op];
    if (node.args_size() != info.arity)
      return bad(i, "expected " + std::to_string(info.arity) + " arguments, got " +
                        std::to_string(node.args_size()));
    const plan::DType dtype = node.dtype();
    if (!isSupported(dtype))
      return bad(i, unsupported(dtype));
    if (info.rule == Rule::Input) {
      uint32_t input = node.args(0);
      if (input >= inputTypes.size())
        return bad(i, "reads input " + std::to_string(input) + " but the instruction has " +
                          std::to_string(inputTypes.size()) + " inputs");
      if (inputTypes[input].dtype() != dtype)
        return bad(i, "the node is " + std::string(dtypeName(dtype)) + " but input " +
                          std::to_string(input) + " is " +
                          dtypeName(inputTypes[input].dtype()));
      continue;
    }
    for (int k = 0; k < node.args_size(); ++k)
      if (node.args(k) >= uint32_t(i))
        return bad(i, "argument " + std::to_string(k) + " refers to node " +
                          std::to_string(node.args(k)) +
                          ", not an earlier node (the nodes must be in topological order)");
    auto argDType = [&](int k) { return expr.nodes(int(node.args(k))).dtype(); };
    // Whether arguments [from, arity) have dtype `want`.
    auto argsAre = [&](int from, plan::DType want) -> bool {
      for (int k = from; k < node.args_size(); ++k)
        if (argDType(k) != want)
          return bad(i, "argument " + std::to_string(k) + " (node " +
                            std::to_string(node.args(k)) + ") is " + dtypeName(argDType(k)) +
                            ", expected " + dtypeName(want) +
                            " (a Cast is missing before this op)");
      return true;
    };
    switch (info.rule) {
    case Rule::Numeric:
      if (dtype == plan::BOOL)
        return bad(i, "needs a numeric dtype, got bool");
      if (!argsAre(0, dtype))
        return false;
      break;
    case Rule::FloatMath:
      if (!isFloat(dtype))
        return bad(i, std::string("needs f32 or f64, got ") + dtypeName(dtype));
      if (!argsAre(0, dtype))
        return false;
      break;
    case Rule::Compare:
      if (dtype != plan::BOOL)
        return bad(i, std::string("produces bool, but the node is ") + dtypeName(dtype));
      if (!argsAre(1, argDType(0)))
        return false;
      break;
    case Rule::Logic:
      if (dtype != plan::BOOL)
        return bad(i, std::string("produces bool, but the node is ") + dtypeName(dtype));
      if (!argsAre(0, plan::BOOL))
        return false;
      break;
    case Rule::Where:
      if (argDType(0) != plan::BOOL)
        return bad(i, std::string("the condition (argument 0) must be bool, got ") +
                          dtypeName(argDType(0)));
      if (!argsAre(1, dtype))
        return false;
      break;
    default: // Constant, Cast: any supported dtype
      break;
    }
  }
  plan::DType last = expr.nodes(expr.nodes_size() - 1).dtype();
  if (last != outputType.dtype()) {
    error = nodeName(expr.nodes_size() - 1) + ": the last node is " + dtypeName(last) +
            " but the output is " + dtypeName(outputType.dtype());
    return false;
  }
  return true;
}

/// Merges the output dims (dropping 1s) where every input broadcasts alike,
/// and gives each input its strides over the merged dims.
void mergeDims(const std::vector<plan::TensorType> &inputTypes, const Shape &outShape,
               ElementwiseKernel &k) {
  const size_t rank = outShape.size();
  // broadcast[i][d]: input i repeats along output dim d.
  std::vector<std::vector<bool>> broadcast(inputTypes.size(), std::vector<bool>(rank));
  for (size_t i = 0; i < inputTypes.size(); ++i) {
    Shape in = shapeOf(inputTypes[i]);
    size_t pad = rank - in.size();
    for (size_t d = 0; d < rank; ++d)
      broadcast[i][d] = d < pad || in[d - pad] != outShape[d];
  }
  std::vector<std::vector<bool>> groupBroadcast(inputTypes.size());
  for (size_t d = 0; d < rank; ++d) {
    if (outShape[d] == 1)
      continue;
    bool same = !k.dims_.empty();
    for (size_t i = 0; i < inputTypes.size() && same; ++i)
      same = groupBroadcast[i].back() == broadcast[i][d];
    if (same) {
      k.dims_.back() *= outShape[d];
    } else {
      k.dims_.push_back(outShape[d]);
      for (size_t i = 0; i < inputTypes.size(); ++i)
        groupBroadcast[i].push_back(broadcast[i][d]);
    }
  }
  if (k.dims_.empty()) { // a single element
    k.dims_.push_back(1);
    for (auto &g : groupBroadcast)
      g.push_back(false);
  }
  for (size_t i = 0; i < inputTypes.size(); ++i) {
    InputAccess &in = k.inputs_[i];
    in.strides.assign(k.dims_.size(), 0);
    int64_t stride = 1;
    in.full = true;
    for (size_t d = k.dims_.size(); d-- > 0;) {
      if (groupBroadcast[i][d]) {
        in.full = false;
      } else {
        in.strides[d] = stride;
        stride *= k.dims_[d];
      }
    }
  }
}

/// How a block reads a (not uniform) input, given the merged output dims.
StepKind inputKind(const InputAccess &in, const std::vector<int64_t> &dims) {
  // I64 and U64 both hold int64 bits.
  bool computeBits = in.dtype == plan::F32 || in.dtype == plan::F64 ||
                     in.dtype == plan::I64 || in.dtype == plan::U64;
  if (in.full)
    return computeBits ? StepKind::InputInPlace : StepKind::InputLoad;
  // Its elements along the inner dim only, and a block spans one row at
  // least: reading from a tile of kBlock + inner values (two slots).
  bool onlyInner = in.strides.back() == 1 &&
                   std::all_of(in.strides.begin(), in.strides.end() - 1,
                               [](int64_t s) { return s == 0; });
  return onlyInner && dims.back() <= kBlock ? StepKind::InputRepeated : StepKind::InputLoad;
}

LoadFn loadFnFor(plan::DType dtype) {
  return visitStorage(dtype, [](auto st) -> LoadFn {
    using S = decltype(st);
    return loadLoop<S, ComputeOf<S>>;
  });
}

/// The loop for node `i`, which is not an INPUT.
StepFn stepFnFor(const plan::Elementwise &expr, int i) {
  const plan::ExprNode &node = expr.nodes(i);
  const plan::DType argDType = node.args_size() ? expr.nodes(int(node.args(0))).dtype()
                                                : node.dtype();
  switch (kOps[node.op()].rule) {
  case Rule::Compare:
    return visitOpType(argDType, [&](auto t) { return opLoopFor<decltype(t)>(node.op()); });
  case Rule::Cast:
    return castFnFor(argDType, node.dtype());
  default:
    break;
  }
  // x^2 and x^3 as multiplies.
  if (node.op() == plan::POW) {
    const plan::ExprNode &exponent = expr.nodes(int(node.args(1)));
    if (exponent.op() == plan::CONSTANT && (exponent.value() == 2 || exponent.value() == 3))
      return visitOpType(node.dtype(), [&](auto t) -> StepFn {
        using T = decltype(t);
        return exponent.value() == 2 ? loopFn<Unary<T, T, SquareOp>>()
                                     : loopFn<Unary<T, T, CubeOp>>();
      });
  }
  return visitOpType(node.dtype(), [&](auto t) { return opLoopFor<decltype(t)>(node.op()); });
}

/// A CONSTANT's value or a CLIP bound for an integer or BOOL node, as the
/// int64 its loops read: saturated into the dtype's range.
int64_t intParamOf(double v, plan::DType dtype) {
  return visitStorage(dtype, [&](auto st) -> int64_t {
    using S = decltype(st);
    if constexpr (!kIsInt<S>) {
      return 0; // not called for float dtypes
    } else if constexpr (std::is_same_v<S, bool>) {
      return v != 0;
    } else if constexpr (std::is_same_v<S, uint64_t>) { // as its int64 bits
      return !(v > 0) ? 0 : v >= 18446744073709551616.0 ? -1 : int64_t(uint64_t(v));
    } else {
      int64_t i = saturateToInt64(v);
      i = std::max<int64_t>(i, std::numeric_limits<S>::min());
      return std::min<int64_t>(i, std::numeric_limits<S>::max());
    }
  });
}

} // namespace

void limitElementwiseIsa(VectorIsa isa) { isaLimit.store(isa); }

std::unique_ptr<Kernel> makeElementwiseKernel(const plan::Elementwise &expr,
                                              const std::vector<plan::TensorType> &inputTypes,
                                              const plan::TensorType &outputType,
                                              std::string &error) {
  if (!isSupported(outputType.dtype()))
    return fail(error, "elementwise output: " + unsupported(outputType.dtype()));
  const Shape outShape = shapeOf(outputType);
  for (size_t i = 0; i < inputTypes.size(); ++i) {
    const plan::TensorType &type = inputTypes[i];
    std::string what = "elementwise input " + std::to_string(i) + ": ";
    if (!isSupported(type.dtype()))
      return fail(error, what + unsupported(type.dtype()));
    bool broadcasts = size_t(type.shape_size()) <= outShape.size();
    for (int d = type.shape_size() - 1, o = int(outShape.size()) - 1; broadcasts && d >= 0;
         --d, --o)
      broadcasts = type.shape(d) == outShape[o] || type.shape(d) == 1;
    if (!broadcasts)
      return fail(error, what + shapeString(type) + " does not broadcast to the output shape " +
                             shapeString(outShape));
  }
  if (!checkNodes(expr, inputTypes, outputType, error))
    return nullptr;

  auto kernel = std::make_unique<ElementwiseKernel>();
  ElementwiseKernel &k = *kernel;
  k.total_ = product(outShape);
  k.outputBytes_ = elementBytes(outputType.dtype());
  for (const plan::TensorType &type : inputTypes) {
    InputAccess in;
    in.dtype = type.dtype();
    in.bytes = elementBytes(type.dtype());
    in.compute = computeOf(type.dtype());
    k.inputs_.push_back(std::move(in));
  }
  mergeDims(inputTypes, outShape, k);

  const int count = expr.nodes_size();
  k.nodes_ = count;
  k.last_ = count - 1;
  // Only the nodes the output depends on run.
  std::vector<bool> live(size_t(count), false);
  live[size_t(k.last_)] = true;
  for (int i = k.last_; i >= 0; --i)
    if (live[size_t(i)] && expr.nodes(i).op() != plan::INPUT)
      for (uint32_t a : expr.nodes(i).args())
        live[a] = true;
  // A node is uniform when it has one value for the whole output: a
  // constant, a one-element input, or an op of uniform nodes.
  std::vector<bool> uniform(size_t(count), false);
  std::vector<int> lastUse(size_t(count), -1);
  for (int i = 0; i < count; ++i) {
    const plan::ExprNode &node = expr.nodes(i);
    if (node.op() == plan::INPUT) {
      const auto &strides = k.inputs_[node.args(0)].strides;
      uniform[size_t(i)] = std::all_of(strides.begin(), strides.end(),
                                       [](int64_t s) { return s == 0; });
      continue;
    }
    bool allUniform = true;
    for (uint32_t a : node.args()) {
      allUniform = allUniform && uniform[a];
      if (live[size_t(i)])
        lastUse[a] = i;
    }
    uniform[size_t(i)] = allUniform;
  }
  lastUse[size_t(k.last_)] = count; // the output is read by the store

  // Scratch slots: uniform nodes keep theirs; the others are reused once
  // their last reader has run.
  std::vector<int> freeSlots, slotOf(size_t(count), -1);
  int64_t cost = 1; // the store
  for (int i = 0; i < count; ++i) {
    if (!live[size_t(i)])
      continue;
    const plan::ExprNode &node = expr.nodes(i);
    Step s;
    s.node = i;
    for (int a = 0; a < node.args_size(); ++a)
      s.args[a] = int(node.args(a));
    if (node.op() == plan::INPUT) {
      s.input = int(node.args(0));
      s.kind = uniform[size_t(i)] ? StepKind::InputLoad
                                  : inputKind(k.inputs_[size_t(s.input)], k.dims_);
      s.load = loadFnFor(k.inputs_[size_t(s.input)].dtype);
      cost += 1;
    } else {
      s.kind = StepKind::Compute;
      s.fn = stepFnFor(expr, i);
      // The output's store narrows; earlier nodes narrow themselves.
      if (i != k.last_)
        s.narrow = narrowFnFor(node.op(), node.dtype());
      s.param[0] = node.value();
      s.param[1] = node.value2();
      if (computeOf(node.dtype()) == Compute::I64)
        for (int p = 0; p < 2; ++p)
          s.intParam[p] = intParamOf(s.param[p], node.dtype());
      if (!uniform[size_t(i)])
        cost += kOps[node.op()].cost;
    }
    if (uniform[size_t(i)]) {
      s.slot = k.slots_++;
      k.uniformSteps_.push_back(s);
      continue;
    }
    if (s.kind == StepKind::InputRepeated) {
      s.slot = k.slots_;
      k.slots_ += 2;
    } else if (s.kind != StepKind::InputInPlace) {
      if (freeSlots.empty()) {
        s.slot = k.slots_++;
      } else {
        s.slot = freeSlots.back();
        freeSlots.pop_back();
      }
      slotOf[size_t(i)] = s.slot;
    }
    // Freed after the slot above is taken, so a loop's output never is one
    // of its arguments (they are restrict).
    if (s.kind == StepKind::Compute)
      for (int a = 0; a < node.args_size(); ++a) {
        int arg = s.args[a];
        bool repeated = std::find(s.args, s.args + a, arg) != s.args + a;
        if (!repeated && lastUse[size_t(arg)] == i && slotOf[size_t(arg)] >= 0)
          freeSlots.push_back(slotOf[size_t(arg)]);
      }
    k.blockSteps_.push_back(s);
  }

  const plan::DType outDType = outputType.dtype();
  const plan::ExprNode &lastNode = expr.nodes(k.last_);
  k.storeInPlace_ = !uniform[size_t(k.last_)] && lastNode.op() != plan::INPUT &&
                    (outDType == plan::F32 || outDType == plan::F64 ||
                     outDType == plan::I64 || outDType == plan::U64);
  k.store_ = visitStorage(outDType, [](auto st) -> StoreFn {
    using S = decltype(st);
    return storeLoop<ComputeOf<S>, S>;
  });
  // Small outputs stay on one thread: waking the pool costs more.
  k.grain_ = std::max<int64_t>(1, kSerialWork * 4 / (cost * kBlock));
  return kernel;
}

} // namespace dtc::runtime::cpu
